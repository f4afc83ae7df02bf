//! Groups: a member records its outcome (and result) in its group before its status, the last
//! member to finish enqueues the join (an `IfAbsent` task keyed by the group), the join's
//! handler gets every outcome, and a fail-fast group's first failure cancels the members that
//! have not run and triggers the join at once.

use super::*;
use crate::executor::{GroupOutcome, Handlers};
use crate::store::GroupStore;
use scheduler_client::{GroupMember, OnConflict};

type Joins = Arc<Mutex<Vec<(TaskKey, GroupOutcome)>>>;

/// Members whose orderingId starts with `bad` are invalid; every other member sets its number
/// as its result. Joins are recorded with their group.
#[derive(Clone)]
struct Grouped {
    calls: Arc<Mutex<Vec<TaskKey>>>,
    joins: Joins,
}

impl TaskExecutor for Grouped {
    async fn execute(&self, task: &Task, ctx: &TaskContext) -> Result<(), TaskError> {
        self.calls.lock().expect("lock").push(task.key());
        tokio::time::sleep(Duration::from_millis(10)).await;
        if task.ordering_id.starts_with("bad") {
            return Err(TaskError::invalid("bad member"));
        }
        let index = task.group.as_ref().map_or(0, |g| g.index);
        ctx.set_result(serde_json::json!({ "n": index }))
            .map_err(|e| TaskError::invalid(e.to_string()))
    }

    async fn group_finished(
        &self,
        task: &Task,
        group: &GroupOutcome,
        _: &TaskContext,
    ) -> Result<(), TaskError> {
        self.joins
            .lock()
            .expect("lock")
            .push((task.key(), group.clone()));
        Ok(())
    }
}

fn grouped() -> (Grouped, Handlers) {
    let handler = Grouped {
        calls: Arc::default(),
        joins: Arc::default(),
    };
    (handler.clone(), Handlers::new().fallback(handler))
}

/// A node running `handlers`.
fn node(handlers: Handlers) -> Harness {
    let store = MemoryStore::new();
    let recorder = Recorder::new(TokioClock::starting_at(t0()), &store, Duration::ZERO, &[]);
    Harness::node_with(
        "test-node",
        SchedulingSettings::default(),
        store,
        recorder,
        handlers,
    )
}

impl Harness {
    /// Consumes what the engine enqueued so far, as the consumer would (joins carry a
    /// conflict mode: records acting on their identity); returns it.
    async fn deliver_enqueued(&self) -> Vec<Task> {
        let enqueued = self.outbox.take();
        assert!(enqueued
            .iter()
            .all(|t| t.on_conflict == Some(OnConflict::IfAbsent)));
        let ops = enqueued
            .iter()
            .cloned()
            .map(super::super::IdentityOp::Schedule)
            .collect();
        self.by_identity(ops).await;
        enqueued
    }
}

fn member(ordering_id: &str, at: DateTime<Utc>, group: GroupMember) -> Task {
    task(ordering_id, at, &format!("m{}", group.index)).in_group(group)
}

#[test]
fn the_last_member_to_finish_triggers_one_join_with_every_outcome_and_result() {
    run_paused(|| async {
        let (handler, handlers) = grouped();
        let h = node(handlers);
        h.assign().await;
        // Twelve members over four orderingIds; the total is known only to the last one.
        let members: Vec<Task> = (1..=12u32)
            .map(|i| {
                let mut group = GroupMember::new("batch-1", i);
                if i == 12 {
                    group = group.of(12);
                }
                member(&format!("o{}", i % 4), t0() + ms(100 * i64::from(i)), group)
            })
            .collect();
        h.enqueue(members.clone()).await;
        advance(Duration::from_secs(3)).await;
        assert_eq!(handler.calls.lock().expect("lock").len(), 12);
        // Every member finished; the last one to finish enqueued the join (others may have
        // found the group finished too: the join's identity admits one).
        let delivered = h.deliver_enqueued().await;
        assert!(!delivered.is_empty(), "the join was enqueued");
        assert!(delivered
            .iter()
            .all(|j| j.join_of.as_deref() == Some("batch-1")));
        advance(Duration::from_secs(2)).await;
        assert!(h.outbox.take().is_empty(), "nothing more was enqueued");
        // The join triggered again later (a member run again after a crash): not run again.
        let mut again = delivered[0].clone();
        again.scheduled_time += TimeDelta::seconds(5);
        h.by_identity(vec![super::super::IdentityOp::Schedule(again)])
            .await;
        advance(Duration::from_secs(10)).await;
        let joins = handler.joins.lock().expect("lock").clone();
        assert_eq!(joins.len(), 1, "one join: {joins:?}");
        let (key, group) = &joins[0];
        assert_eq!(key.ordering_id, "batch-1");
        assert_eq!(group.total, Some(12));
        assert_eq!(group.failed_by, None);
        let numbers: Vec<u32> = group.members.iter().map(|m| m.index).collect();
        assert_eq!(numbers, (1..=12).collect::<Vec<_>>());
        for outcome in &group.members {
            assert_eq!(outcome.status, TaskStatus::Completed);
            assert_eq!(
                outcome.result,
                Some(serde_json::json!({ "n": outcome.index }))
            );
        }
        // The result is stored with each member's status too.
        let status = h.store.status_of(P, &members[4].key()).expect("status");
        assert_eq!(status.result, Some(serde_json::json!({ "n": 5 })));
        // The join ran after every member had finished.
        let last_member = h
            .store
            .status_writes()
            .iter()
            .filter(|(k, _, _)| k.ordering_id != "batch-1")
            .map(|(_, _, at)| *at)
            .max()
            .expect("member statuses");
        let join_status = h
            .store
            .status_writes()
            .iter()
            .find(|(k, _, _)| k.ordering_id == "batch-1")
            .map(|(_, _, at)| *at)
            .expect("join status");
        assert!(join_status > last_member);
    });
}

#[test]
fn a_fail_fast_groups_first_failure_cancels_the_rest_and_triggers_the_join() {
    run_paused(|| async {
        let (handler, handlers) = grouped();
        let h = node(handlers);
        h.assign().await;
        // Member 2 fails at once; members 3 to 6 are due later and must not run.
        let group = |i| GroupMember::new("ff", i).of(6).fail_fast();
        let mut members = vec![
            member("o1", t0() + ms(100), group(1)),
            member("bad", t0() + ms(200), group(2)),
        ];
        for i in 3..=6 {
            members.push(member(&format!("o{i}"), t0() + ms(5_000), group(i)));
        }
        h.enqueue(members.clone()).await;
        advance(Duration::from_secs(1)).await;
        assert_eq!(
            h.deliver_enqueued().await.len(),
            1,
            "the failure triggered the join"
        );
        advance(Duration::from_secs(10)).await;
        let calls = handler.calls.lock().expect("lock").clone();
        assert_eq!(
            calls,
            vec![members[0].key(), members[1].key()],
            "the rest did not run"
        );
        for later in &members[2..] {
            let status = h.store.status_of(P, &later.key()).expect("status");
            assert_eq!(status.status, TaskStatus::Cancelled);
            assert!(status
                .last_error
                .as_deref()
                .unwrap_or_default()
                .contains("member 2 failed"));
        }
        // The cancelled members triggered the join again; its identity admits none.
        h.deliver_enqueued().await;
        advance(Duration::from_secs(2)).await;
        let joins = handler.joins.lock().expect("lock").clone();
        assert_eq!(joins.len(), 1, "one join: {joins:?}");
        let group = &joins[0].1;
        assert_eq!(group.failed_by, Some(2));
        let failed = group
            .members
            .iter()
            .find(|m| m.index == 2)
            .expect("member 2");
        assert_eq!(failed.status, TaskStatus::Dropped);
        assert_eq!(failed.error.as_deref(), Some("bad member"));
        let stored = h
            .store
            .group(crate::groups::key_of("default", "ff"))
            .await
            .expect("read")
            .expect("group");
        assert_eq!(
            stored.members.len(),
            6,
            "every member has its outcome in the end"
        );
    });
}
