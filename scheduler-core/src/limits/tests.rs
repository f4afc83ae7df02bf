//! Unit tests of the per-key gates.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use futures::FutureExt;

use super::*;
use crate::hooks::GatePass;
use crate::settings::TypeLimits;

fn task(task_type: &str, key: Option<&str>) -> Task {
    let mut task = Task::new("o", Utc::now(), "u", Default::default()).of_type(task_type);
    task.limit_key = key.map(String::from);
    task
}

fn gate(queue: Option<usize>, types: &[(&str, usize)]) -> Option<KeyConcurrency> {
    let settings = SchedulingSettings {
        key_concurrency: queue,
        task_types: types
            .iter()
            .map(|(t, n)| {
                let limits = TypeLimits {
                    key_concurrency: Some(*n),
                    ..TypeLimits::default()
                };
                (t.to_string(), limits)
            })
            .collect::<BTreeMap<_, _>>(),
        ..SchedulingSettings::default()
    };
    KeyConcurrency::from_settings(&settings, Arc::default())
}

/// Enters `gate` with `task`: the pass if it came at once, `None` if the task waits.
fn enter_now(gate: &KeyConcurrency, task: &Task) -> Option<GatePass> {
    gate.enter(task).expect("a limited task").now_or_never()
}

#[test]
fn no_limit_set_means_no_gate_and_a_task_without_a_key_passes_at_once() {
    assert!(gate(None, &[]).is_none());
    let gate = gate(Some(1), &[]).expect("a gate");
    assert!(gate.enter(&task("any", None)).is_none());
}

#[tokio::test]
async fn a_key_at_its_limit_holds_its_next_task_until_a_call_of_it_returns_and_no_other_key() {
    let gate = gate(Some(2), &[]).expect("a gate");
    let a = task("mail", Some("tenant-a"));
    let first = enter_now(&gate, &a).expect("first of a passes");
    let second = enter_now(&gate, &a).expect("second of a passes");
    let mut third = gate.enter(&a).expect("limited");
    assert!((&mut third).now_or_never().is_none(), "a third of a waits");
    let held = |metrics: &Metrics| {
        let text = metrics.encode(&Default::default());
        let lines = text
            .lines()
            .filter(|l| l.starts_with("scheduler_tasks_held_by_limit{"));
        lines.collect::<Vec<_>>().join("\n")
    };
    assert!(
        held(&gate.metrics).contains("task_type=\"mail\"} 1"),
        "{}",
        held(&gate.metrics)
    );
    // Another key, and the same key of another type under the queue's limit, are counted
    // apart from a's and together with a's respectively.
    let b = enter_now(&gate, &task("mail", Some("tenant-b"))).expect("b passes");
    assert!(
        enter_now(&gate, &task("sms", Some("tenant-a"))).is_none(),
        "the queue's limit counts every type of the key together"
    );
    // A task that stops waiting, polled or not, leaves nothing behind.
    let gone = gate
        .enter(&task("mail", Some("tenant-c")))
        .expect("limited");
    drop(gone);
    assert!(!gate.in_use(None, "tenant-c"));
    let mut fourth = gate.enter(&a).expect("limited");
    assert!((&mut fourth).now_or_never().is_none());
    drop(fourth);
    drop(first);
    let third = third.await;
    assert!(
        held(&gate.metrics).contains("task_type=\"mail\"} 0"),
        "{}",
        held(&gate.metrics)
    );
    drop((second, third, b));
    assert!(!gate.in_use(None, "tenant-a") && !gate.in_use(None, "tenant-b"));
}

#[tokio::test]
async fn a_types_own_limit_counts_its_calls_apart_from_the_queues() {
    let gate = gate(Some(1), &[("report", 3)]).expect("a gate");
    let passes: Vec<_> = (0..3)
        .map(|_| enter_now(&gate, &task("report", Some("k"))).expect("within report's 3"))
        .collect();
    assert!(enter_now(&gate, &task("report", Some("k"))).is_none());
    let other = enter_now(&gate, &task("mail", Some("k"))).expect("mail counts apart");
    assert!(enter_now(&gate, &task("mail", Some("k"))).is_none());
    drop((passes, other));
    assert!(!gate.in_use(Some("report"), "k") && !gate.in_use(None, "k"));
}

fn rate_gate(rate: f64, burst: Option<u32>, clock: Arc<dyn Clock>) -> KeyRate {
    let settings = SchedulingSettings {
        key_rate: Some(rate),
        key_burst: burst,
        ..SchedulingSettings::default()
    };
    KeyRate::from_settings(&settings, Arc::default(), clock).expect("a gate")
}

#[tokio::test(start_paused = true)]
async fn a_keys_starts_keep_to_its_rate_after_its_burst_and_other_keys_start_at_once() {
    let clock = Arc::new(crate::clock::TokioClock::starting_at(Utc::now()));
    let gate = rate_gate(10.0, Some(2), clock);
    let k = task("mail", Some("k"));
    // The burst: two start at once.
    assert!(gate.enter(&k).is_none() && gate.enter(&k).is_none());
    // Then one every 100 ms, in the order they came.
    let mut waiting: Vec<_> = (0..3).map(|_| gate.enter(&k).expect("waits")).collect();
    assert!(gate.enter(&task("mail", Some("other"))).is_none());
    assert!(gate.enter(&task("mail", None)).is_none());
    for step in 0..3 {
        tokio::time::advance(Duration::from_millis(99)).await;
        assert!(
            (&mut waiting[step]).now_or_never().is_none(),
            "start {step} early"
        );
        tokio::time::advance(Duration::from_millis(1)).await;
        assert!(
            (&mut waiting[step]).now_or_never().is_some(),
            "start {step} late"
        );
        if let Some(next) = waiting.get_mut(step + 1) {
            assert!(next.now_or_never().is_none());
        }
    }
    // After a quiet spell the burst is back.
    tokio::time::advance(Duration::from_secs(1)).await;
    assert!(gate.enter(&k).is_none() && gate.enter(&k).is_none());
    assert!(gate.enter(&k).is_some());
}

#[test]
fn the_burst_is_a_seconds_worth_unless_set() {
    let clock: Arc<dyn Clock> = Arc::new(crate::clock::SystemClock);
    let of = |gate: KeyRate| gate.rates.queue.expect("the queue's rate");
    assert_eq!(of(rate_gate(2.5, None, Arc::clone(&clock))).burst, 3);
    assert_eq!(of(rate_gate(0.2, None, Arc::clone(&clock))).burst, 1);
    assert_eq!(of(rate_gate(50.0, Some(4), clock)).burst, 4);
}
