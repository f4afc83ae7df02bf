//! One run at a time per orderingId in every interleaving: long calls across revokes and
//! takeovers, calls waiting for a slot, and ownership reads ordered by event stamps.

use super::*;

#[test]
fn a_long_task_never_runs_twice_at_once_when_its_partition_comes_back_to_the_same_node() {
    run_paused(|| async {
        // Engine defaults: the drain gives up after 10 s; the task takes 20 s.
        let h = Harness::new(SchedulingSettings::default(), Duration::from_secs(20), &[]);
        h.assign().await;
        let long = task("long", t0(), "1");
        h.enqueue(vec![long.clone()]).await;
        advance(Duration::from_secs(1)).await;
        let drained = h.topic.send(RevokePartitions).await.expect("revoke");
        assert!(!drained, "the call outlives the drain");
        h.assign().await;
        advance(Duration::from_secs(120)).await;
        assert_eq!(overlaps(&h), 0, "calls: {:?}", h.recorder.calls());
        assert_eq!(
            h.store.status_of(P, &long.key()).map(|s| s.status),
            Some(TaskStatus::Completed)
        );
    });
}

#[test]
fn a_long_task_never_runs_twice_at_once_when_another_node_takes_its_partition() {
    run_paused(|| async {
        let h = Harness::new(SchedulingSettings::default(), Duration::from_secs(20), &[]);
        let other = h.second_node(SchedulingSettings::default());
        h.assign().await;
        let long = task("long", t0(), "1");
        let next = task("long", t0() + ms(1), "2");
        let free = task("free", t0() + ms(12_000), "1");
        h.enqueue(vec![long.clone(), next.clone(), free.clone()])
            .await;
        advance(Duration::from_secs(1)).await;
        assert!(!h.topic.send(RevokePartitions).await.expect("revoke"));
        other.assign().await;
        advance(Duration::from_secs(120)).await;
        assert_eq!(overlaps(&h), 0, "calls: {:?}", h.recorder.calls());
        let calls = h.recorder.calls();
        let first_call_of = |key: &TaskKey| calls.iter().find(|(k, _)| k == key).map(|(_, at)| *at);
        assert_eq!(
            first_call_of(&free.key()),
            Some(t0() + ms(12_000)),
            "other orderingIds are not held up"
        );
        for t in [&long, &next] {
            assert_eq!(
                h.store.status_of(P, &t.key()).map(|s| s.status),
                Some(TaskStatus::Completed)
            );
        }
        let next_at = first_call_of(&next.key()).expect("ran");
        assert!(next_at >= t0() + ms(20_000), "{next_at}");
    });
}

#[test]
fn a_task_waiting_for_an_executor_slot_does_not_run_after_revoke_or_cancel() {
    run_paused(|| async {
        let settings = SchedulingSettings {
            executor_concurrency: 1,
            ..SchedulingSettings::default()
        };
        let h = Harness::new(settings, Duration::from_secs(5), &[]);
        h.assign().await;
        // "a" takes the slot first (tasks due together race for it).
        let (a, b, c) = (
            task("a", t0(), "1"),
            task("b", t0() + ms(100), "1"),
            task("c", t0() + ms(100), "1"),
        );
        h.enqueue(vec![a.clone(), b.clone(), c.clone()]).await;
        advance(Duration::from_secs(1)).await;
        // "a" runs; "b" and "c" wait for the one slot.
        h.cancel(vec![c.key()]).await;
        h.topic.send(RevokePartitions).await.expect("revoke");
        advance(Duration::from_secs(60)).await;
        assert_eq!(h.recorder.call_times("a").len(), 1);
        assert!(
            h.recorder.call_times("b").is_empty(),
            "revoked while waiting"
        );
        assert!(
            h.recorder.call_times("c").is_empty(),
            "cancelled while waiting"
        );
        assert_eq!(
            h.store.scheduled(P),
            vec![b.key()],
            "left for the next owner"
        );
    });
}

#[test]
fn a_task_waiting_for_an_executor_slot_does_not_run_after_its_tree_is_fenced() {
    run_paused(|| async {
        let settings = SchedulingSettings {
            executor_concurrency: 1,
            ..SchedulingSettings::default()
        };
        let h = Harness::new(settings, Duration::from_secs(5), &[]);
        h.assign().await;
        h.enqueue(vec![task("a", t0(), "1"), task("b", t0() + ms(100), "1")])
            .await;
        advance(Duration::from_secs(1)).await;
        h.store.claim_elsewhere(P);
        advance(Duration::from_secs(60)).await;
        assert!(
            h.recorder.call_times("b").is_empty(),
            "fenced while waiting"
        );
    });
}

#[test]
fn a_rebuild_after_repeated_failures_does_not_start_a_task_still_running() {
    run_paused(|| async {
        let settings = SchedulingSettings {
            max_look_ahead: Duration::from_secs(2),
            prefetch_window: Duration::from_secs(1),
            ..SchedulingSettings::default()
        };
        let h = Harness::new(settings, Duration::from_secs(20), &[]);
        h.assign().await;
        let long = task("long", t0(), "1");
        h.enqueue(vec![long.clone()]).await;
        advance(Duration::from_secs(1)).await;
        // Five loads fail while the call runs: the tree escalates and is rebuilt.
        h.store.fail_next(5);
        advance(Duration::from_secs(120)).await;
        assert!(h.store.fail_next_remaining() == 0, "the loads failed");
        assert_eq!(overlaps(&h), 0, "calls: {:?}", h.recorder.calls());
        assert_eq!(
            h.store.status_of(P, &long.key()).map(|s| s.status),
            Some(TaskStatus::Completed)
        );
    });
}

#[test]
fn a_retried_status_write_is_fenced_too() {
    run_paused(|| async {
        let h = Harness::new(SchedulingSettings::default(), Duration::from_secs(1), &[]);
        h.assign().await;
        let t = task("a", t0(), "1");
        h.enqueue(vec![t.clone()]).await;
        advance(Duration::from_millis(600)).await;
        // From now on epoch reads take 10 s (the background read begun at 1 s answers at 11 s),
        // and another node claims the partition at 0.7 s.
        h.store.set_latency("epoch read", Duration::from_secs(10));
        advance(Duration::from_millis(100)).await;
        h.store.claim_elsewhere(P);
        // At 1 s the status write fails (a first attempt that ends the task has no attempt
        // record); it is retried at 1.5 s (fails too) and 2.5 s, when no read begun in the
        // last 2 s vouches for the tree.
        h.store.fail_next(2);
        advance(Duration::from_secs(30)).await;
        assert_eq!(h.store.fail_next_remaining(), 0);
        assert_eq!(
            h.store.status_of(P, &t.key()),
            None,
            "a fenced tree records nothing"
        );
    });
}

#[test]
fn a_fenced_tree_records_no_attempt() {
    run_paused(|| async {
        let h = Harness::new(SchedulingSettings::default(), Duration::from_secs(5), &[]);
        h.assign().await;
        let t = task("a", t0(), "1");
        h.enqueue(vec![t.clone()]).await;
        advance(Duration::from_millis(100)).await;
        h.store.claim_elsewhere(P);
        advance(Duration::from_secs(30)).await;
        assert_eq!(h.recorder.call_times("a").len(), 1);
        assert!(
            h.store.attempts(P, &t.key()).is_empty(),
            "{:?}",
            h.store.attempts(P, &t.key())
        );
    });
}

#[test]
fn an_ownership_read_begun_before_a_pause_does_not_answer_a_check_made_after_it() {
    run_paused(|| async {
        let h = Harness::new(SchedulingSettings::default(), Duration::ZERO, &[]);
        h.assign().await;
        let late = task("late", t0() + ms(6_000), "1");
        h.enqueue(vec![late.clone()]).await;
        advance(Duration::from_millis(500)).await;
        // From now on an epoch read takes 10 s (as if the node paused in the middle of it): the
        // background read begun at 1 s answers at 11 s with what was true at 1 s.
        h.store.set_latency("epoch read", Duration::from_secs(10));
        advance(Duration::from_secs(1)).await;
        h.store.claim_elsewhere(P);
        advance(Duration::from_secs(60)).await;
        assert!(
            h.recorder.call_times("late").is_empty(),
            "a check made at 6 s is not answered by a read begun at 1 s"
        );
    });
}

/// Takes a fenced tree's notice (the tests below drive the ownership actor alone).
struct FenceSink;

impl Actor for FenceSink {
    type Context = actix::Context<Self>;
}

impl actix::Handler<crate::actors::partition_ownership::PartitionFenced> for FenceSink {
    type Result = ();

    fn handle(
        &mut self,
        _: crate::actors::partition_ownership::PartitionFenced,
        _: &mut Self::Context,
    ) {
    }
}

#[test]
fn an_ownership_read_begun_before_a_lease_entry_was_written_does_not_confirm_its_call_within_one_clock_tick(
) {
    use crate::actors::partition_ownership::{CheckOwnership, Ownership, PartitionOwnership};
    use crate::epoch::EpochCell;
    run_paused(|| async {
        let store = MemoryStore::new();
        let cell = EpochCell::default();
        let ownership = PartitionOwnership::new(
            P,
            Arc::from("node-a"),
            Arc::new(store.clone()),
            Arc::new(TokioClock::starting_at(t0())),
            Arc::new(crate::metrics::Metrics::new()),
            FenceSink.start().recipient(),
            cell.clone(),
        )
        .start();
        let claimed = ownership.send(CheckOwnership::default()).await;
        assert!(
            matches!(claimed, Ok(Ok(Ownership::Owner(_)))),
            "{claimed:?}"
        );
        let lease = crate::lease::TreeLease::start(
            P,
            "node-a",
            cell,
            Arc::new(store.clone()),
            Duration::from_secs(3),
        );
        // All at one instant of the clock: the read above began, a newer tree claimed the
        // partition (and read no entry of this tree), then a call wrote its entry.
        store.claim_elsewhere(P);
        let hold = lease.hold("o", "o/task").await;
        let answer = ownership
            .send(CheckOwnership {
                read_after: Some(hold.durable_since()),
            })
            .await;
        assert!(
            matches!(answer, Ok(Ok(Ownership::Fenced))),
            "a read begun before the entry was written confirmed the call: {answer:?}"
        );
    });
}

#[test]
fn a_task_whose_lease_lapsed_while_its_status_was_read_checks_ownership_again_before_the_call() {
    run_paused(|| async {
        // Lease TTL 6 s (renewed every 2 s); every call takes 20 s.
        let h = Harness::new(SchedulingSettings::default(), Duration::from_secs(20), &[]);
        let other = h.second_node(SchedulingSettings::default());
        // The status read takes 10 s (a slow replica, or a pause of the process in it). The
        // batch read as the task is persisted fails, so the task reads its status by key.
        h.store.set_latency("status read", Duration::from_secs(10));
        h.store.fail_op("status batch read", 1);
        h.assign().await;
        let t = task("a", t0(), "1");
        h.enqueue(vec![t.clone()]).await;
        advance(Duration::from_millis(500)).await;
        // The lease entry is written and ownership confirmed. Now lease writes take 10 s: the
        // renewal begun at 2 s lands at 12 s, so the lease lapses at 6 s, during the status read.
        h.store.set_latency("lease write", Duration::from_secs(10));
        advance(Duration::from_millis(500)).await;
        // Another node claims the partition at 1 s, and may start the task once the lease lapsed.
        other.assign().await;
        // The first tree's background epoch read at 2 s answers at 32 s: it does not learn of the
        // claim meanwhile (as if its process was paused).
        advance(Duration::from_millis(500)).await;
        h.store.set_latency("epoch read", Duration::from_secs(30));
        advance(Duration::from_secs(1)).await;
        h.store.set_latency("epoch read", Duration::ZERO);
        advance(Duration::from_millis(9_500)).await;
        h.store.set_latency("lease write", Duration::ZERO);
        h.store.set_latency("status read", Duration::ZERO);
        advance(Duration::from_secs(120)).await;
        assert_eq!(overlaps(&h), 0, "calls: {:?}", h.recorder.calls());
        assert_eq!(
            h.recorder.call_times("a").len(),
            1,
            "only the new owner calls"
        );
        assert_eq!(
            h.store.status_of(P, &t.key()).map(|s| s.status),
            Some(TaskStatus::Completed)
        );
    });
}

/// A call starting on a lease about to lapse, its renewal not landing (found by the simulation:
/// a task waited for a slot past a pause of its process shorter than the TTL, got it with
/// 0.2 s left on its lease, whose renewal the pause had cut, and was called; the lease lapsed
/// 0.2 s into the call and a newer tree's call of the task began beside it). A call begins only
/// on a lease with a renewal period left.
#[test]
fn a_call_does_not_begin_on_a_lease_about_to_lapse() {
    run_paused(|| async {
        // Lease TTL 6 s (renewed every 2 s); one executor slot (the other node has more);
        // every call takes 4.6 s.
        let settings = SchedulingSettings {
            executor_concurrency: 1,
            ..SchedulingSettings::default()
        };
        let h = Harness::new(settings.clone(), Duration::from_millis(4_600), &[]);
        let other = h.second_node(SchedulingSettings::default());
        h.assign().await;
        // "b" takes the slot until 4.6 s; "a", due at 0.5 s, waits for it with its entry
        // written at once (valid until 6 s).
        let a = task("a", t0() + ms(500), "1");
        h.enqueue(vec![task("b", t0(), "1"), a.clone()]).await;
        advance(Duration::from_millis(500)).await;
        // Lease writes begun from now until 2.5 s take 20 s: the renewal begun at 2 s lands at
        // 22 s, so the entries lapse at 6 s. The tree's background epoch read at 2 s answers at
        // 32 s: it does not learn meanwhile that another node claims the partition at 2.5 s
        // (as if its process was paused); that node may call "a" once its entry lapsed.
        h.store.set_latency("lease write", Duration::from_secs(20));
        advance(Duration::from_secs(1)).await;
        h.store.set_latency("epoch read", Duration::from_secs(30));
        advance(Duration::from_secs(1)).await;
        h.store.set_latency("epoch read", Duration::ZERO);
        h.store.set_latency("lease write", Duration::ZERO);
        other.assign().await;
        // At 4.6 s "a" gets the slot, its entry live for 1.4 s more, its renewal 17 s away.
        advance(Duration::from_secs(120)).await;
        assert_eq!(overlaps(&h), 0, "calls: {:?}", h.recorder.calls());
        assert_eq!(
            h.recorder.call_times("a").len(),
            1,
            "only the new owner calls it: {:?}",
            h.recorder.calls()
        );
        assert_eq!(
            h.store.status_of(P, &a.key()).map(|s| s.status),
            Some(TaskStatus::Completed)
        );
    });
}

#[test]
fn a_call_whose_lease_broke_records_nothing_once_a_newer_tree_has_taken_its_task_over() {
    run_paused(|| async {
        // Lease TTL 6 s (renewed every 2 s); every call takes 10 s.
        let h = Harness::new(SchedulingSettings::default(), Duration::from_secs(10), &[]);
        let other = h.second_node(SchedulingSettings::default());
        h.assign().await;
        let t = task("a", t0(), "1");
        h.enqueue(vec![t.clone()]).await;
        advance(Duration::from_millis(500)).await;
        // The call runs. Now lease writes take 20 s: the renewal begun at 2 s lands at 22 s, so
        // the call's entry lapses at 6 s, as if the process paused.
        h.store.set_latency("lease write", Duration::from_secs(20));
        advance(Duration::from_millis(8_600)).await;
        // Epoch reads begun from 9.1 s on answer 5 s late: this tree's background read begun at
        // 9 s still vouches for it at 10 s, when its call ends.
        h.store.set_latency("epoch read", Duration::from_secs(5));
        advance(Duration::from_millis(400)).await;
        // Another node claims the partition at 9.5 s, finds no live entry for the orderingId
        // and reads the task pending: it runs it.
        other.assign().await;
        advance(Duration::from_millis(2_500)).await;
        h.store.set_latency("lease write", Duration::ZERO);
        h.store.set_latency("epoch read", Duration::ZERO);
        advance(Duration::from_secs(120)).await;
        assert_eq!(
            h.recorder.call_times("a").len(),
            2,
            "the new owner ran it again"
        );
        let writes: Vec<_> = h
            .store
            .status_writes()
            .into_iter()
            .filter(|(key, _, _)| *key == t.key())
            .collect();
        assert_eq!(
            writes.len(),
            1,
            "only the tree that took the task over records it (a record of the first call would \
             come before the second call, which then runs a task already completed): {writes:?}"
        );
    });
}

#[test]
fn a_revoke_during_a_rebuild_waits_for_its_drain_so_the_call_is_recorded_before_the_next_owner_claims(
) {
    run_paused(|| async {
        let settings = SchedulingSettings {
            max_look_ahead: Duration::from_secs(2),
            prefetch_window: Duration::from_secs(1),
            drain_timeout: Duration::from_secs(30),
            ..SchedulingSettings::default()
        };
        let h = Harness::new(settings.clone(), Duration::from_secs(20), &[]);
        let other = h.second_node(settings);
        h.assign().await;
        let long = task("long", t0(), "1");
        h.enqueue(vec![long.clone()]).await;
        advance(Duration::from_secs(1)).await;
        // Five loads fail while the call runs: the tree escalates and drains for its rebuild.
        h.store.fail_op("schedule load", 5);
        advance(Duration::from_secs(10)).await;
        // The group takes the partition away meanwhile: the revoke waits for that drain.
        h.topic.send(RevokePartitions).await.expect("revoke");
        other.assign().await;
        advance(Duration::from_secs(120)).await;
        assert_eq!(
            h.recorder.call_times("long").len(),
            1,
            "the call's outcome was recorded before the next owner claimed"
        );
        assert_eq!(
            h.store.status_of(P, &long.key()).map(|s| s.status),
            Some(TaskStatus::Completed)
        );
    });
}
