//! Task types: each runs through its own handler, a type without a handler waits for a node
//! that has one, invalid and exhausted tasks become dead letters, a handler's retry-after is
//! kept, and priority orders the tasks waiting for a slot.

use super::*;
use crate::handler::Handlers;
use crate::store::{DeadLetterFilter, DeadLetterStore, DeadReason};

type Calls = Arc<Mutex<Vec<(&'static str, TaskKey, DateTime<Utc>)>>>;

/// A handler that records its calls (with its name) and the dead letters it hears of. By
/// orderingId: `bad…` is invalid, `flaky…` always fails, `later…` asks to be retried after 5 s
/// once, anything else succeeds.
#[derive(Clone)]
struct Typed {
    name: &'static str,
    clock: TokioClock,
    work: Duration,
    calls: Calls,
    dead: Arc<Mutex<Vec<(TaskKey, DeadReason, u32)>>>,
}

impl TaskHandler for Typed {
    async fn execute(&self, task: &Task, _: &TaskContext) -> Result<(), TaskError> {
        let earlier = {
            let mut calls = self.calls.lock().expect("lock");
            let earlier = calls.iter().filter(|(_, k, _)| *k == task.key()).count();
            calls.push((self.name, task.key(), self.clock.now()));
            earlier
        };
        tokio::time::sleep(self.work).await;
        match task.ordering_id.as_str() {
            o if o.starts_with("bad") => Err(TaskError::invalid("no such account")),
            o if o.starts_with("flaky") => Err(TaskError::retry("gateway down")),
            o if o.starts_with("later") && earlier == 0 => Err(TaskError::retry_after(
                "rate limited",
                Duration::from_secs(5),
            )),
            _ => Ok(()),
        }
    }

    async fn dead_lettered(&self, letter: &crate::store::DeadLetter) {
        self.dead
            .lock()
            .expect("lock")
            .push((letter.task.key(), letter.reason, letter.attempts));
    }
}

fn typed(name: &'static str, clock: &TokioClock, work: Duration, calls: &Calls) -> Typed {
    Typed {
        name,
        clock: clock.clone(),
        work,
        calls: Arc::clone(calls),
        dead: Arc::default(),
    }
}

/// A node with `handlers` over `store`, reading `clock`.
fn typed_node(
    node_id: &str,
    clock: &TokioClock,
    settings: SchedulingSettings,
    store: &MemoryStore,
    handlers: Handlers,
) -> Harness {
    let recorder = Recorder::new(clock.clone(), store, Duration::ZERO, &[]);
    Harness::node_with(node_id, settings, store.clone(), recorder, handlers)
}

fn handled_by(calls: &Calls) -> Vec<(&'static str, String)> {
    calls
        .lock()
        .expect("lock")
        .iter()
        .map(|(name, key, _)| (*name, key.ordering_id.clone()))
        .collect()
}

#[test]
fn each_type_runs_through_its_handler_and_a_type_without_one_waits_for_a_node_that_has_it() {
    run_paused(|| async {
        let calls = Calls::default();
        let clock = TokioClock::starting_at(t0());
        let store = MemoryStore::new();
        let first = typed_node(
            "node-1",
            &clock,
            SchedulingSettings::default(),
            &store,
            Handlers::new().handler("email", typed("email", &clock, Duration::ZERO, &calls)),
        );
        first.assign().await;
        let email = task("o-1", t0() + ms(1000), "e").of_type("email");
        let sms = task("o-2", t0() + ms(1000), "s").of_type("sms");
        let after_sms = task("o-2", t0() + ms(2000), "s2").of_type("email");
        first
            .enqueue(vec![email.clone(), sms.clone(), after_sms.clone()])
            .await;
        advance(Duration::from_secs(120)).await;
        assert_eq!(handled_by(&calls), [("email", "o-1".to_string())]);
        // The sms task waits, using no attempt, listed by the low-water mark as it passes (it
        // holds nothing back and a new tree loads it), as is its orderingId's next task, which
        // waits behind it.
        assert_eq!(store.status_of(P, &sms.key()), None);
        assert!(store
            .low_water_of(P)
            .is_some_and(|mark| mark > after_sms.scheduled_time));
        assert_eq!(store.behind_low_water(P), vec![sms.key(), after_sms.key()]);
        assert_eq!(
            first.metrics.waiting_for_handler(),
            [("sms".to_string(), 1)]
        );
        assert!(first
            .metrics
            .encode(&first.in_flight)
            .contains(r#"scheduler_no_handler_waits_total{task_type="sms"}"#));

        // A node with both handlers takes the partition over: both run there, in order.
        first.topic.send(RevokePartitions).await.expect("revoke");
        let second = typed_node(
            "node-2",
            &clock,
            SchedulingSettings::default(),
            &store,
            Handlers::new()
                .handler("email", typed("email-2", &clock, Duration::ZERO, &calls))
                .handler("sms", typed("sms-2", &clock, Duration::ZERO, &calls)),
        );
        second.assign().await;
        advance(Duration::from_secs(5)).await;
        assert_eq!(
            handled_by(&calls)[1..],
            [("sms-2", "o-2".to_string()), ("email-2", "o-2".to_string())]
        );
        let status = store.status_of(P, &sms.key()).expect("sms done");
        assert_eq!((status.status, status.attempts), (TaskStatus::Completed, 1));
        assert!(first.metrics.waiting_for_handler().is_empty());
    });
}

#[test]
fn invalid_tasks_are_dead_letters_at_once_and_exhausted_ones_after_their_retries() {
    run_paused(|| async {
        let settings = SchedulingSettings {
            max_task_retries: 2,
            backoff_factor: Duration::from_secs(1),
            max_backoff: Duration::from_secs(2),
            ..SchedulingSettings::default()
        };
        let calls = Calls::default();
        let clock = TokioClock::starting_at(t0());
        let charge = typed("charge", &clock, Duration::ZERO, &calls);
        let dead = Arc::clone(&charge.dead);
        let store = MemoryStore::new();
        let h = typed_node(
            "node-1",
            &clock,
            settings,
            &store,
            Handlers::new().fallback(charge),
        );
        h.assign().await;
        let bad = task("bad-1", t0() + ms(1000), "b").of_type("charge");
        let flaky = task("flaky-1", t0() + ms(1000), "f")
            .of_type("charge")
            .with_priority(3);
        h.enqueue(vec![bad.clone(), flaky.clone()]).await;
        advance(Duration::from_secs(60)).await;
        let attempts_of = |key: &TaskKey| {
            calls
                .lock()
                .expect("lock")
                .iter()
                .filter(|(_, k, _)| k == key)
                .count()
        };
        assert_eq!((attempts_of(&bad.key()), attempts_of(&flaky.key())), (1, 3));
        assert_eq!(
            *dead.lock().expect("lock"),
            [
                (bad.key(), DeadReason::Invalid, 1),
                (flaky.key(), DeadReason::RetriesExhausted, 3)
            ],
            "the dead-letter handler hears of each once"
        );
        let letters = store
            .dead_letters(
                DeadLetterFilter {
                    task_type: Some("charge".into()),
                    from: t0(),
                    to: t0() + ms(60_000),
                    include_redriven: false,
                },
                None,
                10,
            )
            .await
            .expect("list");
        let summary: Vec<_> = letters
            .iter()
            .map(|l| (l.task.clone(), l.reason, l.attempts, l.last_error.as_str()))
            .collect();
        assert_eq!(
            summary,
            [
                (bad.clone(), DeadReason::Invalid, 1, "no such account"),
                (
                    flaky.clone(),
                    DeadReason::RetriesExhausted,
                    3,
                    "gateway down"
                ),
            ]
        );
        let statuses = (
            store.status_of(P, &bad.key()).map(|s| s.status),
            store.status_of(P, &flaky.key()).map(|s| s.status),
        );
        assert_eq!(
            statuses,
            (Some(TaskStatus::Dropped), Some(TaskStatus::Failed))
        );
        assert!(h
            .metrics
            .encode(&h.in_flight)
            .contains(r#"scheduler_dead_letters_total{task_type="charge",reason="invalid"} 1"#));
    });
}

#[test]
fn a_retry_after_from_the_handler_replaces_the_backoff() {
    run_paused(|| async {
        let calls = Calls::default();
        let clock = TokioClock::starting_at(t0());
        let h = typed_node(
            "node-1",
            &clock,
            SchedulingSettings::default(),
            &MemoryStore::new(),
            Handlers::new().fallback(typed("any", &clock, Duration::ZERO, &calls)),
        );
        h.assign().await;
        h.enqueue(vec![task("later-1", t0() + ms(1000), "l")]).await;
        advance(Duration::from_secs(30)).await;
        let times: Vec<_> = calls.lock().expect("lock").iter().map(|c| c.2).collect();
        // The settings' backoff would wait 10 to 20 s.
        assert_eq!(times, [t0() + ms(1000), t0() + ms(6000)]);
    });
}

#[test]
fn due_tasks_waiting_for_a_slot_run_by_priority_without_reordering_an_ordering_id() {
    run_paused(|| async {
        let settings = SchedulingSettings {
            executor_concurrency: 1,
            ..SchedulingSettings::default()
        };
        let calls = Calls::default();
        let clock = TokioClock::starting_at(t0());
        let h = typed_node(
            "node-1",
            &clock,
            settings,
            &MemoryStore::new(),
            Handlers::new().fallback(typed("any", &clock, Duration::from_millis(100), &calls)),
        );
        h.assign().await;
        let at = t0() + ms(1000);
        // The blocker takes the only slot; the rest come due while it runs.
        let mut tasks = vec![task("blocker", at, "0")];
        for (ordering_id, priority) in [("low", -5), ("mid", 0), ("high", 10), ("top", 50)] {
            tasks.push(task(ordering_id, at + ms(1), "p").with_priority(priority));
        }
        // One orderingId: its low-priority first task runs before its high-priority second.
        tasks.push(task("same", at + ms(1), "1").with_priority(-10));
        tasks.push(task("same", at + ms(2), "2").with_priority(100));
        h.enqueue(tasks).await;
        advance(Duration::from_secs(10)).await;
        let order: Vec<String> = calls
            .lock()
            .expect("lock")
            .iter()
            .map(|(_, k, _)| format!("{}/{}", k.ordering_id, k.uniqueness_key))
            .collect();
        assert_eq!(
            order,
            [
                "blocker/0",
                "top/p",
                "high/p",
                "mid/p",
                "low/p",
                "same/1",
                "same/2"
            ]
        );
    });
}
