//! Groups: a member records its outcome (and result) in its group before its status, the last
//! member to finish enqueues the join (an `IfAbsent` task keyed by the group), the join's
//! handler gets every outcome, and a fail-fast group's first failure cancels the members that
//! have not run and triggers the join at once.

use super::*;
use crate::handler::{GroupOutcome, Handlers};
use crate::store::GroupStore;
use scheduler_client::{GroupMember, OnConflict, TaskData};

type Joins = Arc<Mutex<Vec<(TaskKey, GroupOutcome)>>>;

/// Members whose orderingId starts with `bad` are invalid; every other member sets its number
/// as its result. Joins are recorded with their group.
#[derive(Clone)]
struct Grouped {
    calls: Arc<Mutex<Vec<TaskKey>>>,
    joins: Joins,
}

impl TaskHandler for Grouped {
    async fn execute(&self, task: &Task, ctx: &TaskContext) -> Result<(), TaskError> {
        self.calls.lock().expect("lock").push(task.key());
        tokio::time::sleep(Duration::from_millis(10)).await;
        // `spawn: [n, m]`: n sub-tasks, each spawning m of its own.
        let spawn: Vec<u64> = (task.task_data.get("spawn").and_then(|v| v.as_array()))
            .map(|n| n.iter().filter_map(serde_json::Value::as_u64).collect())
            .unwrap_or_default();
        // `child_joins`: what the join of each sub-task's own sub-tasks does (see `group_finished`).
        let child_joins = task.task_data.get("child_joins").and_then(|v| v.as_array());
        if let Some((n, rest)) = spawn.split_first() {
            for i in 0..*n {
                let join = child_joins.and_then(|joins| joins.get(i as usize));
                let data = serde_json::json!({ "spawn": rest, "join": join });
                let child = Task::new(
                    format!("{}.{i}", task.ordering_id),
                    task.scheduled_time + TimeDelta::milliseconds(100),
                    "child",
                    data.as_object().cloned().unwrap_or_default(),
                );
                ctx.spawn(child)
                    .map_err(|e| TaskError::invalid(e.to_string()))?;
            }
        }
        // `job: n`: a job of n buckets; a bucket reports 10 items per number, `fail` fails it.
        if let Some(n) = task.task_data.get("job").and_then(|v| v.as_u64()) {
            let buckets = (0..n)
                .map(|i| {
                    let data = serde_json::json!({ "fail": i == 2 });
                    data.as_object().cloned().unwrap_or_default()
                })
                .collect();
            let job = crate::JobSpec {
                id: "job-1".into(),
                bucket_type: "bucket".into(),
                buckets,
            };
            ctx.start_job(job)
                .map_err(|e| TaskError::invalid(e.to_string()))?;
        }
        if task.task_type == "bucket" {
            let index = task.group.as_ref().map_or(0, |g| g.index);
            ctx.report_progress(10 * u64::from(index))
                .await
                .map_err(|e| TaskError::retry(e.to_string()))?;
            if task.task_data.get("fail") == Some(&serde_json::json!(true)) {
                return Err(TaskError::invalid("bucket unreadable"));
            }
        }
        if task.ordering_id.starts_with("bad") {
            return Err(TaskError::invalid("bad member"));
        }
        let index = task.group.as_ref().map_or(0, |g| g.index);
        ctx.set_result(serde_json::json!({ "n": index }))
            .map_err(|e| TaskError::invalid(e.to_string()))
    }

    /// A join of sub-tasks whose parent carries `join: "result"` sets a result of its own;
    /// `join: "fail"` fails (dropped).
    async fn group_finished(
        &self,
        task: &Task,
        group: &GroupOutcome,
        ctx: &TaskContext,
    ) -> Result<(), TaskError> {
        self.joins
            .lock()
            .expect("lock")
            .push((task.key(), group.clone()));
        let join = (group.parent.as_ref()).and_then(|parent| parent.task_data.get("join"));
        match join.and_then(|v| v.as_str()) {
            Some("result") => ctx
                .set_result(serde_json::json!({ "joined": group.members.len() }))
                .map_err(|e| TaskError::invalid(e.to_string())),
            Some("fail") => Err(TaskError::invalid("join failed")),
            _ => Ok(()),
        }
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
        let (joins, tasks): (Vec<Task>, Vec<Task>) =
            (enqueued.iter().cloned()).partition(|t| t.on_conflict == Some(OnConflict::IfAbsent));
        assert!(joins.iter().all(|j| j.join_of.is_some()));
        if !tasks.is_empty() {
            self.enqueue(tasks).await;
        }
        let ops = joins
            .into_iter()
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

#[test]
fn sub_tasks_two_levels_deep_are_joined_after_their_children_each_join_once() {
    run_paused(|| async {
        let (handler, handlers) = grouped();
        let h = node(handlers);
        h.assign().await;
        // The parent spawns 3 children, each of which spawns 2.
        let data = serde_json::json!({ "spawn": [3, 2] });
        let parent = Task::new(
            "p",
            t0(),
            "parent",
            data.as_object().cloned().unwrap_or_default(),
        );
        h.enqueue(vec![parent.clone()]).await;
        // Deliver what the engine enqueues (sub-tasks, joins) until nothing more comes.
        for _ in 0..20 {
            advance(Duration::from_secs(1)).await;
            h.deliver_enqueued().await;
        }
        let calls = handler.calls.lock().expect("lock").clone();
        assert_eq!(
            calls.len(),
            1 + 3 + 6,
            "the parent, 3 children, 6 grandchildren: {calls:?}"
        );
        let joins = handler.joins.lock().expect("lock").clone();
        let joined: Vec<String> = joins.iter().map(|(k, _)| k.ordering_id.clone()).collect();
        assert_eq!(
            joins.len(),
            4,
            "a join per parent of sub-tasks, once each: {joined:?}"
        );
        // The parent's join comes last, with its three children as its members (each recorded
        // there by its own children's join).
        let (_, last) = joins.last().expect("joins");
        assert_eq!(last.parent.as_ref().map(Task::key), Some(parent.key()));
        assert_eq!(last.total, Some(3));
        assert_eq!(last.members.len(), 3);
        for member in &last.members {
            assert_eq!(member.status, TaskStatus::Completed);
            assert_eq!(
                member.key.ordering_id,
                format!("p.{}", member.index - 1),
                "{member:?}"
            );
        }
        for (_, group) in &joins[..3] {
            let child = group.parent.as_ref().expect("a child's sub-tasks");
            assert!(child.ordering_id.starts_with("p."), "{child:?}");
            assert_eq!(group.members.len(), 2);
        }
        assert_eq!(
            h.store.status_of(P, &parent.key()).map(|s| s.status),
            Some(TaskStatus::Completed)
        );
    });
}

#[test]
fn a_parents_join_sees_each_child_with_sub_tasks_by_its_own_key_status_and_result() {
    run_paused(|| async {
        let (handler, handlers) = grouped();
        let h = node(handlers);
        h.assign().await;
        // The parent spawns 3 children, each of which spawns 2 and sets its result; the join of
        // the first child's sub-tasks sets nothing, the second's sets a result of its own, the
        // third's fails.
        let data =
            serde_json::json!({ "spawn": [3, 2], "child_joins": ["none", "result", "fail"] });
        let parent = Task::new(
            "q",
            t0(),
            "parent",
            data.as_object().cloned().unwrap_or_default(),
        );
        h.enqueue(vec![parent.clone()]).await;
        for _ in 0..20 {
            advance(Duration::from_secs(1)).await;
            h.deliver_enqueued().await;
        }
        let joins = handler.joins.lock().expect("lock").clone();
        let (_, last) = (joins.iter())
            .find(|(_, g)| g.parent.as_ref().map(Task::key) == Some(parent.key()))
            .expect("the parent's join");
        let outcomes: Vec<_> = (last.members.iter())
            .map(|m| {
                let key = (m.key.ordering_id.as_str(), m.key.uniqueness_key.as_str());
                (m.index, key, m.status, m.error.clone(), m.result.clone())
            })
            .collect();
        let n = |i: u32| Some(serde_json::json!({ "n": i }));
        assert_eq!(
            outcomes,
            vec![
                // Each child's own key and the result it set.
                (1, ("q.0", "child"), TaskStatus::Completed, None, n(1)),
                // The result its sub-tasks' join set, which finished it.
                (
                    2,
                    ("q.1", "child"),
                    TaskStatus::Completed,
                    None,
                    Some(serde_json::json!({ "joined": 2 }))
                ),
                // Its sub-tasks' join failed: so did the child, in its group.
                (
                    3,
                    ("q.2", "child"),
                    TaskStatus::Dropped,
                    Some("join failed".to_string()),
                    n(3)
                ),
            ]
        );
        let child = |i: i64| Task::new(format!("q.{i}"), t0() + ms(100), "child", TaskData::new());
        for (outcome, i) in last.members.iter().zip(0..) {
            assert_eq!(outcome.key, child(i).key());
        }
    });
}

/// A cancel applied while a member of a fail-fast group that failed reads its group (after its
/// status read) is its final status, written once: the member does not then record itself
/// cancelled by its group over it (found by the simulation, seed 228, with large groups).
#[test]
fn a_cancel_applied_while_a_member_reads_its_failed_group_is_its_only_final_status() {
    run_paused(|| async {
        let (handler, handlers) = grouped();
        let h = node(handlers);
        h.assign().await;
        let group = |i| GroupMember::new("ff-cancel", i).of(3).fail_fast();
        let bad = member("bad", t0() + ms(100), group(1));
        h.enqueue(vec![bad.clone()]).await;
        advance(Duration::from_secs(1)).await;
        assert_eq!(
            h.deliver_enqueued().await.len(),
            1,
            "the failure triggered the join"
        );
        // The next member's group read takes two seconds; its cancel arrives meanwhile.
        h.store.set_latency("group read", Duration::from_secs(2));
        let next = member("o2", t0() + ms(1_100), group(2));
        h.enqueue(vec![next.clone()]).await;
        advance(Duration::from_millis(500)).await;
        h.cancel(vec![next.key()]).await;
        advance(Duration::from_secs(5)).await;
        h.store.set_latency("group read", Duration::ZERO);
        let writes: Vec<_> = (h.store.status_writes().into_iter())
            .filter(|(key, _, _)| *key == next.key())
            .map(|(_, status, _)| (status.status, status.last_error))
            .collect();
        assert_eq!(
            writes,
            vec![(TaskStatus::Cancelled, None)],
            "its status, written once"
        );
        assert_eq!(handler.calls.lock().expect("lock").clone(), vec![bad.key()]);
    });
}

#[test]
fn a_member_cancelled_before_it_reached_the_schedule_still_finishes_its_group() {
    run_paused(|| async {
        let (handler, handlers) = grouped();
        let h = node(handlers);
        h.assign().await;
        let group = |i| GroupMember::new("early-cancel", i).of(2);
        let first = member("o1", t0() + ms(100), group(1));
        let second = member("o2", t0() + ms(200), group(2));
        // The cancel of the second comes before the second itself.
        h.cancel(vec![second.key()]).await;
        h.enqueue(vec![first.clone(), second.clone()]).await;
        advance(Duration::from_secs(2)).await;
        assert_eq!(h.deliver_enqueued().await.len(), 1, "the group finished");
        advance(Duration::from_secs(2)).await;
        let joins = handler.joins.lock().expect("lock").clone();
        assert_eq!(joins.len(), 1);
        let statuses: Vec<TaskStatus> = joins[0].1.members.iter().map(|m| m.status).collect();
        assert_eq!(statuses, vec![TaskStatus::Completed, TaskStatus::Cancelled]);
    });
}

#[test]
fn a_job_spreads_its_buckets_records_their_progress_and_errors_and_joins_once() {
    run_paused(|| async {
        let (handler, handlers) = grouped();
        let h = node(handlers);
        h.assign().await;
        let data = serde_json::json!({ "job": 6 });
        let coordinator = Task::new(
            "coord",
            t0(),
            "job",
            data.as_object().cloned().unwrap_or_default(),
        );
        h.enqueue(vec![coordinator.clone()]).await;
        for _ in 0..10 {
            advance(Duration::from_secs(1)).await;
            h.deliver_enqueued().await;
        }
        let job = crate::store::JobStore::job(&h.store, "job-1".into())
            .await
            .expect("read")
            .expect("the job is recorded");
        assert_eq!(job.buckets, 6);
        assert_eq!(job.coordinator, coordinator.key());
        let progress = crate::store::JobStore::progress(&h.store, job.group.clone())
            .await
            .expect("read");
        let items: u64 = progress.iter().map(|p| p.items).sum();
        assert_eq!(items, 10 * (1 + 2 + 3 + 4 + 5 + 6));
        let group = h
            .store
            .group(job.group.clone())
            .await
            .expect("read")
            .expect("group");
        let failed: Vec<(u32, Option<String>)> = (group.members.iter())
            .filter(|m| m.is_failure())
            .map(|m| (m.index, m.error.clone()))
            .collect();
        assert_eq!(failed, vec![(3, Some("bucket unreadable".into()))]);
        let joins = handler.joins.lock().expect("lock").clone();
        assert_eq!(joins.len(), 1, "the coordinator's join, once");
        assert_eq!(
            joins[0].1.parent.as_ref().map(Task::key),
            Some(coordinator.key())
        );
        // Bucket orderingIds name the job and the bucket.
        assert!(group
            .members
            .iter()
            .all(|m| m.key.ordering_id.starts_with("job-1/b")));
    });
}
