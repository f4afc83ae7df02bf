//! What an operator does while the faults go on: suspends an orderingId or a group for a few
//! seconds (the nodes see it at once, through the watch their trees read) and redrives dead
//! letters, as the admin API does (the task again, due now, its dead letter marked redriven);
//! and the checks: no call of a suspended task starts while it is suspended, and a redriven task
//! runs to its end like any other.

use super::checks::span;
use super::*;
use crate::store::{DeadLetterStore, StatusStore, Suspension, SuspensionTarget, Suspensions};

/// A suspension the operator made: its target, when, and until when (`None`: in force).
pub(super) struct Suspended {
    target: SuspensionTarget,
    from: Instant,
    resume_at: Instant,
    until: Option<Instant>,
}

impl World {
    /// Suspends, for one to eight seconds, an orderingId or (a third of the time) a group that
    /// does not fail fast.
    pub(super) fn suspend(&mut self) {
        let groups: Vec<String> = (self.produced.groups.iter())
            .filter(|(_, (_, fail_fast))| !fail_fast)
            .map(|(id, _)| id.clone())
            .collect();
        let target = match self.rng.u32(0..3) {
            0 if !groups.is_empty() => SuspensionTarget::Group {
                task_type: scheduler_client::DEFAULT_TASK_TYPE.into(),
                id: groups[self.rng.usize(0..groups.len())].clone(),
            },
            _ => SuspensionTarget::OrderingId(format!("o{}", self.rng.usize(0..ORDERING_IDS))),
        };
        if self
            .suspended
            .iter()
            .any(|s| s.until.is_none() && s.target == target)
        {
            return;
        }
        let from = Instant::now();
        let resume_at = from + Duration::from_millis(self.rng.u64(1_000..8_000));
        tracing::info!(target = %target.target(), "sim: suspended");
        self.suspended.push(Suspended {
            target,
            from,
            resume_at,
            until: None,
        });
        self.publish_suspensions();
    }

    /// Resumes the suspensions whose time came (all of them, with `all`).
    pub(super) fn resume_due(&mut self, all: bool) {
        let now = Instant::now();
        let mut resumed = false;
        for s in self.suspended.iter_mut().filter(|s| s.until.is_none()) {
            if all || s.resume_at <= now {
                tracing::info!(target = %s.target.target(), "sim: resumed");
                s.until = Some(now);
                resumed = true;
            }
        }
        if resumed {
            self.publish_suspensions();
        }
    }

    fn publish_suspensions(&self) {
        let since = self.now();
        let in_force = (self.suspended.iter())
            .filter(|s| s.until.is_none())
            .map(|s| Suspension {
                target: s.target.clone(),
                since,
                reason: None,
            })
            .collect();
        self.suspensions
            .send_replace(Arc::new(Suspensions::new(in_force)));
    }

    /// Redrives one dead letter not redriven yet, as the admin API does
    /// ([`crate::store::DeadLetter::redriven`]: the task again, due now, a new key), then marks
    /// its letter redriven. A member of a group that does not fail fast keeps its place in the
    /// group (its outcome is the redriven task's once that ends); a join runs again, given the
    /// group as stored; a tick is one of the schedules' (its chain goes on by its cadence,
    /// checked with them).
    pub(super) async fn redrive(&mut self) {
        let letters: Vec<crate::store::DeadLetter> = (self.all_dead_letters().into_values())
            .filter(|l| l.redrives == 0)
            .filter(|l| l.task.group.as_ref().is_none_or(|m| !m.fail_fast))
            .collect();
        if letters.is_empty() {
            return;
        }
        let letter = letters[self.rng.usize(0..letters.len())].clone();
        self.redrive_letter(letter).await;
    }

    /// Once the faults are over, the operator redrives every dead-lettered join and tick.
    pub(super) async fn redrive_dead_joins_and_ticks(&mut self) {
        let letters: Vec<crate::store::DeadLetter> = (self.all_dead_letters().into_values())
            .filter(|l| l.redrives == 0)
            .filter(|l| l.task.join_of.is_some() || l.task.task_type == crate::recurring::TICK_TYPE)
            .collect();
        for letter in letters {
            self.redrive_letter(letter).await;
        }
    }

    async fn redrive_letter(&mut self, letter: crate::store::DeadLetter) {
        let now = self.now();
        let task = letter.redriven(now);
        let (old, new) = (letter.task.key(), task.key());
        if self.produced.tasks.contains_key(&new) || old == new {
            return;
        }
        // As the API does: the dead task's failure first, if it has no status.
        let keyspace = self.keyspace_of(&old.ordering_id).clone();
        let failed = letter.failed_status();
        let mut recorded = false;
        for _ in 0..10 {
            let write =
                keyspace.record_status_if_absent(letter.partition, old.clone(), failed.clone());
            if write.await.is_ok() {
                recorded = true;
                break;
            }
        }
        if !recorded {
            return;
        }
        tracing::info!(task = %old, redriven_as = %new, "sim: dead letter redriven");
        if task.task_type != crate::recurring::TICK_TYPE {
            let plan = Plan::Succeed(Duration::from_millis(self.rng.u64(5..300)));
            self.plan(&new, plan);
            let version = task.task_data.get("v").and_then(serde_json::Value::as_i64);
            self.produced
                .tasks
                .insert(new.clone(), (plan, version.unwrap_or(1)));
            if let Some(member) = &task.group {
                self.produced.members.insert(new.clone(), member.clone());
            }
            self.produced.redriven.insert(new.clone(), old.clone());
        } else {
            self.produced
                .redriven_ticks
                .insert(new.clone(), old.clone());
        }
        // A task of an identity (a join) acts on it, as the consumer decodes such a record.
        let record = match task.on_conflict {
            Some(_) => Record::ByIdentity(crate::actors::IdentityOp::Schedule(task)),
            None => Record::Task(task),
        };
        self.append(record);
        // As the API does: marked once enqueued; a mark the store fails (an injected fault) is
        // made again, as an operator told of the failure redrives the letter again, which would
        // otherwise be redriven twice, the second redrive superseding the first.
        for _ in 0..10 {
            if keyspace.mark_redriven(old.clone(), 1, now).await.is_ok() {
                break;
            }
        }
    }

    /// No call of a suspended task started while its suspension was in force.
    pub(super) fn check_suspensions(&mut self, calls: &[Call]) {
        let end = Instant::now();
        for s in &self.suspended {
            let until = s.until.unwrap_or(end);
            for call in calls
                .iter()
                .filter(|c| c.started > s.from && c.started < until)
            {
                let held = match &s.target {
                    SuspensionTarget::OrderingId(o) => call.key.ordering_id == *o,
                    SuspensionTarget::Group { id, .. } => {
                        (self.produced.members.get(&call.key)).is_some_and(|m| m.id == *id)
                    }
                    SuspensionTarget::TaskType(_) => false,
                };
                if held {
                    self.violations.push(format!(
                        "suspended: {} started on node {} ({}) while {} was suspended ({:.3}s to {:.3}s)",
                        call.key,
                        call.node,
                        span(self.origin, call),
                        s.target.target(),
                        (s.from - self.origin).as_secs_f64(),
                        (until - self.origin).as_secs_f64()
                    ));
                }
            }
        }
    }
}
