//! Unit tests of the per-key gates.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use futures::future::BoxFuture;
use futures::FutureExt;

use super::*;
use crate::hooks::GatePass;
use crate::settings::TypeLimits;
use crate::store::memory::MemoryStore;
use crate::store::PermitStore;
use tokio::sync::watch;

fn task(task_type: &str, key: Option<&str>) -> Task {
    let mut task = Task::new("o", Utc::now(), "u", Default::default()).of_type(task_type);
    task.limit_key = key.map(String::from);
    task
}

/// A node's gate of `key_concurrency` (`queue`, and `types`' own) over `store`.
fn gate_on(
    node: &str,
    store: &MemoryStore,
    queue: Option<usize>,
    types: &[(&str, usize)],
) -> KeyConcurrency {
    gate_with(node, store, queue, types, none())
}

/// [`gate_on`], under the overrides `overrides` sends.
fn gate_with(
    node: &str,
    store: &MemoryStore,
    queue: Option<usize>,
    types: &[(&str, usize)],
    overrides: watch::Receiver<Arc<KeyOverrides>>,
) -> KeyConcurrency {
    let settings = SchedulingSettings {
        key_concurrency: queue,
        lease_ttl: TTL,
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
    let clock: Arc<dyn Clock> = Arc::new(crate::clock::TokioClock::starting_at(Utc::now()));
    let runtime = tokio::runtime::Handle::current();
    KeyConcurrency::start(
        &settings,
        overrides,
        node,
        Arc::new(store.clone()),
        Arc::default(),
        clock,
        &runtime,
    )
}

const TTL: Duration = Duration::from_secs(3);

/// Lets the gates' tasks run for `ms` of paused time.
async fn after(ms: u64) {
    for _ in 0..ms.div_ceil(10) {
        tokio::time::advance(Duration::from_millis(10)).await;
        for _ in 0..8 {
            tokio::task::yield_now().await;
        }
    }
}

/// Enters `gate` with `task` and lets the gate's task run a moment: the pass if it came.
async fn enter(
    gate: &KeyConcurrency,
    task: &Task,
) -> Result<GatePass, BoxFuture<'static, GatePass>> {
    let mut entering = gate.enter(task).expect("a limited task");
    after(50).await;
    match (&mut entering).now_or_never() {
        Some(pass) => Ok(pass),
        None => Err(entering),
    }
}

/// `key`'s row of `scope` in `store` now (its holders and version), if it has one.
fn key_row(store: &MemoryStore, scope: &str, key: &str) -> Option<crate::store::KeyHolders> {
    let row = store.key_holders(scope.into(), key.into()).now_or_never();
    row.expect("memory answers at once").expect("read")
}

/// The tasks held by a limit now, as `metrics` counts them.
fn held(metrics: &Metrics) -> String {
    let text = metrics.encode(&Default::default());
    let lines = text
        .lines()
        .filter(|l| l.starts_with("scheduler_tasks_held_by_limit{"));
    lines.collect::<Vec<_>>().join("\n")
}

#[tokio::test(start_paused = true)]
async fn a_task_without_a_key_or_a_limit_passes_at_once() {
    let store = MemoryStore::new();
    let unlimited = gate_on("n", &store, None, &[]);
    assert!(unlimited.enter(&task("any", Some("k"))).is_none());
    let gate = gate_on("n", &store, Some(1), &[]);
    assert!(gate.enter(&task("any", None)).is_none());
}

/// An override per key set, changed and removed at run time: the key's next task counts under
/// it, other keys under the settings.
#[tokio::test(start_paused = true)]
async fn an_override_sets_changes_and_removes_a_keys_limit_at_run_time() {
    let store = MemoryStore::new();
    let (set, overrides) = watch::channel(Arc::new(KeyOverrides::default()));
    let gate = gate_with("n", &store, None, &[], overrides);
    let k = task("mail", Some("k"));
    let override_of = |task_type: Option<&str>, concurrency: u32| {
        let row = crate::store::KeyLimit {
            task_type: task_type.map(String::from),
            limit_key: "k".into(),
            values: crate::store::LimitValues {
                concurrency: Some(concurrency),
                ..Default::default()
            },
            updated_at: Utc::now(),
        };
        Arc::new(KeyOverrides::new(vec![row]))
    };
    // No limit in the settings: k is not limited.
    assert!(gate.enter(&k).is_none());
    // Set: at most one of k at once; another key is not limited.
    set.send_replace(override_of(None, 1));
    let first = enter(&gate, &k).await.ok().expect("the first of k passes");
    let mut second = enter(&gate, &k).await.err().expect("the second of k waits");
    assert!(gate.enter(&task("mail", Some("other"))).is_none());
    // Changed to two: the waiting task passes.
    set.send_replace(override_of(None, 2));
    let third = enter(&gate, &k).await;
    after(300).await;
    let second = (&mut second)
        .now_or_never()
        .expect("the limit of two lets the second through");
    assert!(third.is_err(), "a third waits under two");
    // An override for one type counts that type's tasks of the key apart.
    set.send_replace(override_of(Some("sms"), 1));
    let sms = enter(&gate, &task("sms", Some("k")))
        .await
        .ok()
        .expect("sms counts apart");
    // Removed: k is not limited any more.
    set.send_replace(Arc::default());
    assert!(gate.enter(&k).is_none());
    drop((first, second, sms));
}

#[tokio::test(start_paused = true)]
async fn a_keys_calls_on_every_node_together_stay_within_its_limit_and_hold_up_no_other_key() {
    let store = MemoryStore::new();
    let a = gate_on("node-a", &store, Some(2), &[]);
    let b = gate_on("node-b", &store, Some(2), &[]);
    let k = task("mail", Some("tenant-k"));
    let first = enter(&a, &k).await.ok().expect("first of k passes on a");
    let second = enter(&a, &k).await.ok().expect("second of k passes on a");
    let mut on_b = enter(&b, &k).await.err().expect("a third of k waits on b");
    after(5_000).await;
    assert!(
        (&mut on_b).now_or_never().is_none(),
        "k's limit holds across nodes"
    );
    assert!(
        held(&b.metrics).contains("task_type=\"mail\"} 1"),
        "{}",
        held(&b.metrics)
    );
    // Another key, and the same key of another type under the queue's limit, are counted
    // apart from k's and together with k's respectively.
    let other = enter(&b, &task("mail", Some("tenant-o")))
        .await
        .ok()
        .expect("o passes");
    let mut sms = enter(&b, &task("sms", Some("tenant-k")))
        .await
        .err()
        .expect("the queue's limit counts every type together");
    // A's calls return: its permits come back to the cluster once a stops needing them.
    drop((first, second));
    after(2_500).await;
    let on_b = (&mut on_b)
        .now_or_never()
        .expect("b's task passes once a gave k's permits back");
    let sms = (&mut sms).now_or_never().expect("and the other of b's");
    assert!(
        held(&b.metrics).contains("task_type=\"mail\"} 0"),
        "{}",
        held(&b.metrics)
    );
    let holders = |scope: &str, key: &str| key_row(&store, scope, key).map(|k| k.holders);
    let on_b_now: Vec<u32> = holders("*", "tenant-k")
        .expect("b holds k")
        .into_values()
        .collect();
    assert_eq!(on_b_now, vec![2], "b holds both of k's permits, a none");
    assert!(a.ledger.holding().is_empty());
    // A task that stops waiting leaves nothing behind; b's permits go back once unused.
    let gone = b.enter(&task("mail", Some("tenant-c"))).expect("limited");
    drop(gone);
    drop((on_b, sms, other));
    after(1_500).await;
    assert!(b.ledger.holding().is_empty(), "{:?}", b.ledger.holding());
    assert_eq!(
        holders("*", "tenant-k"),
        None,
        "the key's row is gone with its last holder"
    );
}

/// Nodes whose tasks want a key's calls at once share them: a node whose take found none free
/// leaves a want in the key's row, and a holder using all its permits with more of its tasks
/// waiting reads the row each second and, seeing the want, keeps its share and gives back the
/// rest as its calls return. (A node kept its permits while its tasks of the key kept waiting,
/// so another node's task of the key waited for the first node's whole backlog: seen on three
/// node processes by `dev/bench --only accuracy`, rated keys run one node after the other.)
#[tokio::test(start_paused = true)]
async fn nodes_whose_tasks_want_a_keys_calls_at_once_share_them() {
    let store = MemoryStore::new();
    let a = gate_on("node-a", &store, Some(2), &[]);
    let b = gate_on("node-b", &store, Some(2), &[]);
    let k = task("mail", Some("tenant-k"));
    let call = Duration::from_millis(100);
    // a's tasks keep coming: calls of 100 ms, five more waiting at any time.
    let mut waiting: Vec<BoxFuture<'static, GatePass>> = Vec::new();
    let mut on_a: Vec<(tokio::time::Instant, GatePass)> = Vec::new();
    let mut on_b: Vec<(tokio::time::Instant, GatePass)> = Vec::new();
    let mut b_waiting: Option<BoxFuture<'static, GatePass>> = None;
    let (mut b_entered, mut b_passed) = (None, Vec::new());
    for step in 0..400 {
        after(10).await;
        let now = tokio::time::Instant::now();
        on_a.retain(|(ends, _)| *ends > now);
        on_b.retain(|(ends, _)| *ends > now);
        let mut still = Vec::new();
        for mut entering in waiting.drain(..) {
            match (&mut entering).now_or_never() {
                Some(pass) => on_a.push((now + call, pass)),
                None => still.push(entering),
            }
        }
        waiting = still;
        while waiting.len() < 5 {
            waiting.push(a.enter(&k).expect("limited"));
        }
        // b's tasks come one at a time from 0.5 s on, each once the one before passed.
        if step >= 50 && b_waiting.is_none() {
            b_waiting = Some(b.enter(&k).expect("limited"));
            b_entered.get_or_insert(now);
        }
        if let Some(pass) = b_waiting.as_mut().and_then(|w| w.now_or_never()) {
            on_b.push((now + call, pass));
            b_passed.push(now);
            b_waiting = None;
        }
        assert!(
            on_a.len() + on_b.len() <= 2,
            "{} of k's calls at once on a, {} on b",
            on_a.len(),
            on_b.len()
        );
    }
    let entered = b_entered.expect("b's tasks came");
    let first = *b_passed
        .first()
        .expect("b's task passes while a's keep coming");
    assert!(
        first - entered <= permits::LINGER + Duration::from_millis(500),
        "b's first task passed {:?} after it came",
        first - entered
    );
    // Then a call at a time each: b's tasks pass every 100 ms or so.
    assert!(
        b_passed.len() >= 20,
        "{} of b's tasks passed in 3.5 s",
        b_passed.len()
    );
}

/// A key shared by nodes whose tasks need less than its limit is not taken and given back as
/// their tasks come and go: a holder gives its surplus back at once only when another node's
/// tasks want some, else once it lasted `LINGER` as before. (With wants, a holder beside any
/// other holder gave its surplus back at once, a transaction each time its tasks fell back.)
#[tokio::test(start_paused = true)]
async fn a_key_shared_below_its_limit_is_not_taken_and_given_back_as_its_tasks_come_and_go() {
    let store = MemoryStore::new();
    let a = gate_on("node-a", &store, Some(8), &[]);
    let b = gate_on("node-b", &store, Some(8), &[]);
    let k = task("mail", Some("tenant-k"));
    let version = || key_row(&store, "*", "tenant-k").map_or(0, |row| row.version);
    let mut first = None;
    // On each node, four of k's calls at once for 200 ms, then one for 200 ms, for 6 s.
    for round in 0..15 {
        if round == 3 {
            first = Some(version());
        }
        for calls in [4, 1] {
            let mut passes = Vec::new();
            for gate in [&a, &b] {
                for _ in 0..calls {
                    passes.push(gate.enter(&k).expect("limited"));
                }
            }
            after(200).await;
            for mut pass in passes {
                (&mut pass).now_or_never().expect("k is below its limit");
            }
        }
    }
    let changes = version() - first.expect("read");
    assert!(changes <= 2, "{changes} changes of k's row in 4.8 s");
}

/// The changes of keys' permits this node's ledger applied, as `metrics` counts them.
fn permit_writes(metrics: &Metrics) -> u64 {
    let text = metrics.encode(&Default::default());
    let line = (text.lines())
        .find(|l| l.starts_with("scheduler_key_permit_writes_total{outcome=\"applied\"}"));
    line.and_then(|l| l.rsplit(' ').next())
        .map_or(0, |n| n.parse().expect("a count"))
}

/// A key's tasks that come a few at a time, their demand climbing towards the limit and then
/// falling, change its permits a few times a burst, not once for every task beyond what the
/// node held: a take at least doubles what the node holds, and a give-back waits until it holds
/// more than twice what its tasks need. (A take followed the demand a task at a time, a
/// transaction per round it grew in, and the give-backs followed it down: `dev/bench --only
/// limits` saw 10-13 changes of a key's permits in a burst of its 100 tasks, and its throughput
/// with limits on fell to 69-86% of that with them off.)
#[tokio::test(start_paused = true)]
async fn a_keys_permits_change_a_few_times_a_burst_as_its_demand_climbs_and_falls() {
    let store = MemoryStore::new();
    let gate = gate_on("n", &store, Some(64), &[]);
    let k = task("mail", Some("tenant-k"));
    let call = Duration::from_millis(500);
    // A task of k every 10 ms for 0.6 s, each a call of 0.5 s: up to 50 of k's calls at once.
    let mut running: Vec<(tokio::time::Instant, GatePass)> = Vec::new();
    let mut waited = Duration::ZERO;
    for step in 0..300 {
        if step < 60 {
            let came = tokio::time::Instant::now();
            let mut entering = gate.enter(&k).expect("limited");
            loop {
                if let Some(pass) = (&mut entering).now_or_never() {
                    running.push((tokio::time::Instant::now() + call, pass));
                    break;
                }
                tokio::time::advance(Duration::from_millis(1)).await;
                tokio::task::yield_now().await;
            }
            waited = waited.max(came.elapsed());
        }
        after(10).await;
        let now = tokio::time::Instant::now();
        running.retain(|(ends, _)| *ends > now);
    }
    assert!(
        gate.ledger.holding().is_empty(),
        "{:?}",
        gate.ledger.holding()
    );
    let writes = permit_writes(&gate.metrics);
    // Taken at a quarter of the limit, doubled twice, given back to what is needed once it
    // fell below half of what is held, and given back once no task needs any.
    assert!(writes <= 5, "{writes} changes of k's permits in one burst");
    assert!(
        waited <= Duration::from_millis(20),
        "a task of k waited {waited:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_types_own_limit_counts_its_calls_apart_from_the_queues() {
    let store = MemoryStore::new();
    let gate = gate_on("n", &store, Some(1), &[("report", 3)]);
    let mut passes = Vec::new();
    for _ in 0..3 {
        passes.push(
            enter(&gate, &task("report", Some("k")))
                .await
                .ok()
                .expect("within report's 3"),
        );
    }
    assert!(enter(&gate, &task("report", Some("k"))).await.is_err());
    let other = enter(&gate, &task("mail", Some("k")))
        .await
        .ok()
        .expect("mail counts apart");
    assert!(enter(&gate, &task("mail", Some("k"))).await.is_err());
    drop((passes, other));
}

/// A node cut off from the store (every request fails at once while `cut` is set).
struct Cut(std::sync::atomic::AtomicBool);

impl crate::store::memory::Gate for Cut {
    fn send(&self, _operation: &'static str) -> Option<u64> {
        (!self.0.load(std::sync::atomic::Ordering::SeqCst)).then_some(0)
    }

    fn answer(&self, sent: Option<u64>) -> BoxFuture<'static, bool> {
        futures::future::ready(sent.is_some()).boxed()
    }
}

#[tokio::test(start_paused = true)]
async fn a_cut_off_nodes_permits_lapse_before_they_return_to_the_cluster_and_count_once_it_is_back()
{
    let store = MemoryStore::new();
    let cut = Arc::new(Cut(Default::default()));
    let a_store = store.with_gate(Arc::clone(&cut) as Arc<dyn crate::store::memory::Gate>);
    let a = gate_on("node-a", &a_store, Some(2), &[]);
    let b = gate_on("node-b", &store, Some(2), &[]);
    let k = task("mail", Some("k"));
    let first = enter(&a, &k).await.ok().expect("passes");
    let second = enter(&a, &k).await.ok().expect("passes");
    let mut on_b = enter(&b, &k).await.err().expect("waits");
    // A is cut off. Its passes stop letting calls start within two thirds of the TTL after
    // its last heartbeat (it beats every third), and b gets a permit only once a's heartbeat
    // row expired, a whole TTL after it was written: never while a's passes were valid.
    cut.0.store(true, std::sync::atomic::Ordering::SeqCst);
    let mut a_lapsed = None;
    let mut b_passed = None;
    for step in 0..60u64 {
        after(100).await;
        if a_lapsed.is_none() && !first.is_valid() {
            a_lapsed = Some(step);
        }
        if b_passed.is_none() && (&mut on_b).now_or_never().is_some() {
            b_passed = Some(step);
        }
    }
    let (a_lapsed, b_passed) = (
        a_lapsed.expect("a's passes lapse"),
        b_passed.expect("b passes"),
    );
    assert!(a_lapsed <= 20, "lapsed after {a_lapsed} steps of 100 ms");
    assert!(
        b_passed > a_lapsed,
        "b passed at {b_passed}, a lapsed at {a_lapsed}"
    );
    assert!(!second.is_valid());
    // A is back: its two calls still run and count against its new permits before any other
    // of its tasks starts (b holds one of k's two).
    cut.0.store(false, std::sync::atomic::Ordering::SeqCst);
    let mut next_on_a = enter(&a, &k).await.err().expect("waits");
    after(3_000).await;
    assert!(
        (&mut next_on_a).now_or_never().is_none(),
        "a's running calls count"
    );
    drop((first, second));
    after(500).await;
    let next = (&mut next_on_a)
        .now_or_never()
        .expect("a's task passes once its calls returned");
    assert!(next.is_valid());
}

/// Node `node`'s gate of `key_rate` (`rate`, `burst`) over `store`, by `clock`.
fn rate_gate_on(
    node: &str,
    store: &MemoryStore,
    rate: f64,
    burst: Option<u32>,
    clock: Arc<dyn Clock>,
) -> KeyRate {
    let settings = SchedulingSettings {
        key_rate: Some(rate),
        key_burst: burst,
        lease_ttl: TTL,
        ..SchedulingSettings::default()
    };
    let runtime = tokio::runtime::Handle::current();
    let ledger = permits::Ledger::start(
        node,
        Arc::new(store.clone()),
        Arc::clone(&clock),
        Arc::default(),
        TTL,
        &runtime,
    );
    KeyRate::new(&settings, none(), ledger, Arc::default(), clock)
}

fn rate_gate(rate: f64, burst: Option<u32>, clock: Arc<dyn Clock>) -> KeyRate {
    rate_gate_on("n", &MemoryStore::new(), rate, burst, clock)
}

/// Tasks waiting at a gate, each passed as soon as its pass comes and its call started then.
struct Starts {
    waiting: Vec<BoxFuture<'static, GatePass>>,
    /// When each task passed, in the order they passed.
    at: Vec<tokio::time::Instant>,
}

impl Starts {
    fn enter(gate: &KeyRate, task: &Task, n: usize) -> Starts {
        let waiting = (0..n)
            .map(|_| gate.enter(task).expect("a limited task"))
            .collect();
        Starts {
            waiting,
            at: Vec::new(),
        }
    }

    /// Takes the passes that came, and starts their calls (which gives back their units).
    fn poll(&mut self) {
        let now = tokio::time::Instant::now();
        let mut still = Vec::new();
        for mut waiting in self.waiting.drain(..) {
            match (&mut waiting).now_or_never() {
                Some(mut pass) => {
                    assert!(pass.is_valid());
                    pass.started();
                    self.at.push(now);
                }
                None => still.push(waiting),
            }
        }
        self.waiting = still;
    }
}

/// Lets `ms` of paused time pass in steps of 10 ms, polling `starts` after each.
async fn run_for(ms: u64, starts: &mut [&mut Starts]) {
    for _ in 0..ms.div_ceil(10) {
        after(10).await;
        starts.iter_mut().for_each(|s| s.poll());
    }
}

#[tokio::test(start_paused = true)]
async fn a_keys_starts_keep_to_its_rate_after_its_burst_and_other_keys_start_at_once() {
    let clock = Arc::new(crate::clock::TokioClock::starting_at(Utc::now()));
    let gate = rate_gate(10.0, Some(2), clock);
    let k = task("mail", Some("k"));
    let mut starts = Starts::enter(&gate, &k, 5);
    // Another key, and a task without one, are not held by `k`'s.
    let mut other = Starts::enter(&gate, &task("mail", Some("other")), 1);
    assert!(gate.enter(&task("mail", None)).is_none());
    run_for(1_000, &mut [&mut starts, &mut other]).await;
    assert_eq!(other.at.len(), 1);
    // The burst, two at once (once the node took the key's units); then one every 100 ms, in
    // the order they came.
    let at = &starts.at;
    assert_eq!(at.len(), 5, "{at:?}");
    assert_eq!(at[0], at[1]);
    for (n, pair) in at[1..].windows(2).enumerate() {
        let apart = pair[1] - pair[0];
        assert_eq!(
            apart,
            Duration::from_millis(100),
            "start {} and {}",
            n + 1,
            n + 2
        );
    }
    // After a quiet spell the burst is back.
    let mut again = Starts::enter(&gate, &k, 3);
    run_for(10, &mut [&mut again]).await;
    assert_eq!(again.at.len(), 2, "{:?}", again.at);
}

/// A node's tasks of a key use the whole rate however few of them wait at once (a key's calls
/// at once may be limited too): a node keeps every unit of the key's rate it can while its
/// tasks need any. (It kept a quarter of the units plus those its waiting tasks held: with two
/// tasks of a key at the rate's gate at a time, a rate of 10 ran at 3 a second, seen on three
/// node processes by `dev/bench --only accuracy`.)
#[tokio::test(start_paused = true)]
async fn a_keys_tasks_use_its_whole_rate_however_few_wait_at_once() {
    let store = MemoryStore::new();
    let clock: Arc<dyn Clock> = Arc::new(crate::clock::TokioClock::starting_at(Utc::now()));
    let gate = rate_gate_on("a", &store, 10.0, Some(10), clock);
    let k = task("mail", Some("k"));
    let mut starts = Starts::enter(&gate, &k, 2);
    for _ in 0..1_000 {
        run_for(10, &mut [&mut starts]).await;
        while starts.waiting.len() < 2 {
            starts.waiting.push(gate.enter(&k).expect("limited"));
        }
    }
    let started = starts.at.len();
    assert!(
        (95..=111).contains(&started),
        "{started} starts in 10 s at 10 a second with a burst of 10, two waiting at a time"
    );
}

/// A node holding some of a key's rate units starts the key's tasks at that share of the rate:
/// another live holder keeps two of the four units, so this node's tasks start at half the
/// rate, in bursts of half the burst.
#[tokio::test(start_paused = true)]
async fn a_node_holding_part_of_a_keys_units_starts_its_tasks_at_that_share_of_the_rate() {
    let store = MemoryStore::new();
    let other = "x@1.0".to_string();
    store.beat(other.clone(), TTL).await.expect("beat");
    let held = BTreeMap::from([(other.clone(), 2u32)]);
    let swapped = (store.swap_key_holders("rate *".into(), "k".into(), None, held))
        .await
        .expect("swap");
    assert!(swapped);
    let clock: Arc<dyn Clock> = Arc::new(crate::clock::TokioClock::starting_at(Utc::now()));
    let gate = rate_gate_on("a", &store, 10.0, Some(4), clock);
    let mut starts = Starts::enter(&gate, &task("mail", Some("k")), 200);
    for _ in 0..10 {
        run_for(1_000, &mut [&mut starts]).await;
        store.beat(other.clone(), TTL).await.expect("beat");
    }
    let started = starts.at.len();
    assert!(
        (45..=57).contains(&started),
        "{started} starts in 10 s on two units of four of 10 a second"
    );
}

/// A key's rate holds across the cluster: two nodes with tasks of the key start them at the
/// key's rate together. `a`'s tasks come first and take the units; `b`'s want some, and `a`
/// gives back all but its half; once `a`'s stop, it gives back the rest and `b`'s go on at the
/// rate. No more tasks of the key are between their turn and their call than the rate has
/// units.
#[tokio::test(start_paused = true)]
async fn a_keys_starts_on_every_node_together_keep_to_its_rate() {
    let store = MemoryStore::new();
    let clock: Arc<dyn Clock> = Arc::new(crate::clock::TokioClock::starting_at(Utc::now()));
    let a = rate_gate_on("a", &store, 10.0, Some(4), Arc::clone(&clock));
    let b = rate_gate_on("b", &store, 10.0, Some(4), clock);
    let k = task("mail", Some("k"));
    let mut on_a = Starts::enter(&a, &k, 30);
    run_for(50, &mut [&mut on_a]).await;
    let mut on_b = Starts::enter(&b, &k, 100);
    run_for(10_000, &mut [&mut on_a, &mut on_b]).await;
    let (by_a, by_b) = (on_a.at.len(), on_b.at.len());
    assert_eq!(by_a, 30);
    // At most the rate and twice the burst together (each node's share starts with a burst).
    assert!(
        (80..=108).contains(&(by_a + by_b)),
        "starts in 10 s at 10 a second with a burst of 4: a {by_a}, b {by_b}"
    );
    // Passes whose calls have not started hold the units: at most 4 of the key's, cluster-wide.
    let mut held = Vec::new();
    for gate in [&a, &b] {
        for _ in 0..4 {
            let mut entering = gate.enter(&k).expect("limited");
            after(200).await;
            if let Some(pass) = (&mut entering).now_or_never() {
                held.push(pass);
            }
        }
    }
    // (The 200 earlier tasks all started or still wait; these come after them.)
    assert!(held.len() <= 4, "{} passes at once", held.len());
}

/// Nodes whose tasks want a key's rate at once share it: a node whose tasks find none of its
/// units free marks its want in the key's row, and the holder, which reads the row each second
/// while its tasks use the rate, gives back all but its share. (A node kept every unit while
/// its tasks needed any, so another node's tasks of the key waited for as long as the first
/// node's kept coming; `dev/bench --only accuracy` saw the same of a key's calls at once,
/// `nodes_whose_tasks_want_a_keys_calls_at_once_share_them`.)
#[tokio::test(start_paused = true)]
async fn nodes_whose_tasks_want_a_keys_rate_at_once_share_it() {
    let store = MemoryStore::new();
    let clock: Arc<dyn Clock> = Arc::new(crate::clock::TokioClock::starting_at(Utc::now()));
    let a = rate_gate_on("a", &store, 10.0, Some(10), Arc::clone(&clock));
    let b = rate_gate_on("b", &store, 10.0, Some(10), clock);
    let k = task("mail", Some("k"));
    let mut on_a = Starts::enter(&a, &k, 20);
    run_for(50, &mut [&mut on_a]).await;
    let mut on_b = Starts::enter(&b, &k, 20);
    let entered = tokio::time::Instant::now();
    // a's tasks keep coming: twenty wait there at any time.
    for _ in 0..1_000 {
        run_for(10, &mut [&mut on_a, &mut on_b]).await;
        while on_a.waiting.len() < 20 {
            on_a.waiting.push(a.enter(&k).expect("limited"));
        }
    }
    let first_b = on_b
        .at
        .first()
        .copied()
        .expect("b's tasks start while a's keep coming");
    assert!(
        first_b - entered <= permits::LINGER + Duration::from_millis(500),
        "b's first start {:?} after its tasks came",
        first_b - entered
    );
    // Half the rate each (b's twenty in about four seconds), the rate together: 10 s at 10 a
    // second, a's burst, and b's of its half.
    let (by_a, by_b) = (on_a.at.len(), on_b.at.len());
    assert_eq!(by_b, 20);
    let last_b = on_b.at.last().copied().expect("b started");
    assert!(
        last_b - first_b <= Duration::from_millis(4_500),
        "b's twenty in {:?}",
        last_b - first_b
    );
    assert!(
        (95..=120).contains(&(by_a + by_b)),
        "starts in 10 s at 10 a second with a burst of 10 (within twice it): a {by_a}, b {by_b}"
    );
    // Once b's tasks are done (by about 5 s), a takes the whole rate back: b gives its units
    // back a second after its last start, and a sees them free at its next look.
    let late = (on_a.at.iter())
        .filter(|at| **at >= entered + Duration::from_secs(8))
        .count();
    assert!(
        (18..=23).contains(&late),
        "{late} starts on a in the last 2 s (the whole rate is 20)"
    );
}

#[tokio::test]
async fn the_burst_is_a_seconds_worth_unless_set() {
    let clock: Arc<dyn Clock> = Arc::new(crate::clock::SystemClock);
    let of = |gate: KeyRate| gate.rates.queue.expect("the queue's rate");
    assert_eq!(of(rate_gate(2.5, None, Arc::clone(&clock))).burst, 3);
    assert_eq!(of(rate_gate(0.2, None, Arc::clone(&clock))).burst, 1);
    assert_eq!(of(rate_gate(50.0, Some(4), clock)).burst, 4);
}
