//! Suspensions: a task of a suspended orderingId, type or group waits, pending, without an
//! attempt and without holding its partition back, and runs once resumed; the others run.

use super::*;
use crate::store::{Suspension, SuspensionTarget, Suspensions};
use scheduler_client::GroupMember;

impl Harness {
    /// Sets the suspensions in force, as the node's poll would.
    fn suspensions(&self, targets: &[SuspensionTarget]) {
        let all = targets
            .iter()
            .map(|target| Suspension {
                target: target.clone(),
                since: t0(),
                reason: Some("test".into()),
            })
            .collect();
        self.suspend.send_replace(Arc::new(Suspensions::new(all)));
    }
}

#[test]
fn suspended_tasks_wait_without_an_attempt_and_run_once_resumed() {
    run_paused(|| async {
        let h = Harness::new(
            SchedulingSettings::default(),
            Duration::from_millis(10),
            &[],
        );
        h.suspensions(&[
            SuspensionTarget::OrderingId("held".into()),
            SuspensionTarget::TaskType("report".into()),
            SuspensionTarget::Group {
                task_type: "default".into(),
                id: "job-1".into(),
            },
        ]);
        h.assign().await;
        let held = task("held", t0() + ms(100), "a");
        let report = task("r", t0() + ms(100), "b").of_type("report");
        let bucket = task("b", t0() + ms(100), "c").in_group(GroupMember::new("job-1", 1).of(1));
        let free = task("free", t0() + ms(100), "d");
        h.enqueue(vec![
            held.clone(),
            report.clone(),
            bucket.clone(),
            free.clone(),
        ])
        .await;
        advance(Duration::from_secs(30)).await;
        // Only the free task ran; the others are pending, with no attempt, not holding the
        // partition back (listed by the low-water mark, as a task waiting for a handler is).
        let ran: Vec<TaskKey> = h.recorder.calls().into_iter().map(|(k, _)| k).collect();
        assert_eq!(ran, vec![free.key()]);
        for waiting in [&held, &report, &bucket] {
            assert_eq!(h.store.status_of(P, &waiting.key()), None);
            assert!(h.store.attempts(P, &waiting.key()).is_empty());
            assert!(h.store.behind_low_water(P).contains(&waiting.key()));
        }
        // Resuming the type and the group (the orderingId stays suspended).
        h.suspensions(&[SuspensionTarget::OrderingId("held".into())]);
        advance(Duration::from_secs(1)).await;
        for resumed in [&report, &bucket] {
            let status = h.store.status_of(P, &resumed.key()).map(|s| s.status);
            assert_eq!(status, Some(TaskStatus::Completed), "{}", resumed.key());
        }
        assert_eq!(h.store.status_of(P, &held.key()), None);
        h.suspensions(&[]);
        advance(Duration::from_secs(1)).await;
        assert_eq!(
            h.store.status_of(P, &held.key()).map(|s| s.status),
            Some(TaskStatus::Completed)
        );
        assert_eq!(h.recorder.calls().len(), 4, "each ran once");
    });
}

#[test]
fn a_tree_built_while_suspended_keeps_the_task_waiting() {
    run_paused(|| async {
        let h = Harness::new(
            SchedulingSettings::default(),
            Duration::from_millis(10),
            &[],
        );
        h.suspensions(&[SuspensionTarget::OrderingId("held".into())]);
        h.assign().await;
        let held = task("held", t0() + ms(100), "a");
        h.enqueue(vec![held.clone()]).await;
        advance(Duration::from_secs(5)).await;
        // A rebalance: the partition is revoked and assigned again, the tree rebuilt from the
        // store; the task still waits.
        h.topic
            .send(super::super::topic_supervisor::RevokePartitions)
            .await
            .expect("revoke");
        h.assign().await;
        advance(Duration::from_secs(30)).await;
        assert!(h.recorder.calls().is_empty());
        h.suspensions(&[]);
        advance(Duration::from_secs(1)).await;
        assert_eq!(h.recorder.calls().len(), 1);
    });
}

#[test]
fn a_task_waiting_for_a_slot_when_suspended_does_not_start() {
    run_paused(|| async {
        let settings = SchedulingSettings {
            executor_concurrency: 1,
            ..SchedulingSettings::default()
        };
        let h = Harness::new(settings, Duration::from_secs(10), &[]);
        h.assign().await;
        let busy = task("busy", t0() + ms(100), "a");
        let queued = task("queued", t0() + ms(100), "b");
        h.enqueue(vec![busy.clone(), queued.clone()]).await;
        advance(Duration::from_secs(1)).await;
        // One slot: `busy` runs, `queued` passed its checks and waits for the slot.
        assert_eq!(h.recorder.calls().len(), 1);
        h.suspensions(&[SuspensionTarget::OrderingId("queued".into())]);
        advance(Duration::from_secs(30)).await;
        let ran: Vec<TaskKey> = h.recorder.calls().into_iter().map(|(k, _)| k).collect();
        assert_eq!(
            ran,
            vec![busy.key()],
            "the queued task did not start once suspended"
        );
        h.suspensions(&[]);
        advance(Duration::from_secs(30)).await;
        assert_eq!(
            h.store.status_of(P, &queued.key()).map(|s| s.status),
            Some(TaskStatus::Completed)
        );
    });
}

#[test]
fn a_suspended_task_cancelled_meanwhile_stops_waiting() {
    run_paused(|| async {
        let h = Harness::new(
            SchedulingSettings::default(),
            Duration::from_millis(10),
            &[],
        );
        h.suspensions(&[SuspensionTarget::OrderingId("held".into())]);
        h.assign().await;
        let held = task("held", t0() + ms(100), "a");
        h.enqueue(vec![held.clone()]).await;
        advance(Duration::from_secs(5)).await;
        assert_eq!(
            h.in_flight
                .all()
                .iter()
                .map(|(_, g)| g.current())
                .sum::<usize>(),
            1
        );
        h.cancel(vec![held.key()]).await;
        advance(Duration::from_secs(1)).await;
        // Its wait ended with the cancel: it no longer holds a place in memory (nor its
        // orderingId), though the suspension stays.
        assert_eq!(
            h.store.status_of(P, &held.key()).map(|s| s.status),
            Some(TaskStatus::Cancelled)
        );
        assert_eq!(
            h.in_flight
                .all()
                .iter()
                .map(|(_, g)| g.current())
                .sum::<usize>(),
            0
        );
        assert!(h.recorder.calls().is_empty());
    });
}
