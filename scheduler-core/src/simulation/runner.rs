//! Runs the seeds (`SIM_SEEDS`, `SIM_FIRST_SEED`, `SIM_SEED`, `SIM_LOG`: see the module's
//! doc) in parallel, each under a watchdog, and reports the failing ones.

use super::*;

/// Runs one seed; returns its violations (empty: it passed), what it read beside the calls
/// it made, and what happened to its remote calls.
pub(super) fn run_seed(seed: u64) -> (Vec<String>, checks::Reads, remote::Coverage) {
    // SIM_LOG=debug (an env filter) shows the engine's logs of a replayed seed.
    if let Ok(filter) = std::env::var("SIM_LOG") {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
            .with_timer(SimulatedTime)
            .with_test_writer()
            .try_init();
    }
    let system = actix::System::with_tokio_rt(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .start_paused(true)
            .build()
            .unwrap_or_else(|e| panic!("tokio runtime: {e}"))
    });
    system.block_on(async move {
        // Backoff jitter and the like draw from this thread's generator: seed it too.
        fastrand::seed(seed);
        let mut world = World::new(seed);
        world.run().await;
        world.check();
        let reads = world.reads();
        let coverage = world.remote_coverage();
        let mut violations = world.violations;
        violations.dedup();
        (violations, reads, coverage)
    })
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

/// Seeds beyond the default range that once found a hole, run every time: 637 (a polled batch
/// persisted a task due before the low-water mark that an advance, run first, had just moved
/// past it; the next tree never loaded the task); 6026 (the mark moved past the earliest task
/// of a batch whose persisting had failed with its rows written: the next tree loaded from the
/// mark the batch's later task of the orderingId and ran it before the earlier one, which came
/// again from Kafka).
const REGRESSION_SEEDS: [u64; 2] = [637, 6026];

#[test]
fn simulation_of_seeded_faults_keeps_every_promise() {
    let seeds: Vec<u64> = match env_u64("SIM_SEED") {
        Some(seed) => vec![seed],
        None => {
            let first = env_u64("SIM_FIRST_SEED").unwrap_or(1);
            let count = env_u64("SIM_SEEDS").unwrap_or(500);
            let range = first..first + count;
            let again = REGRESSION_SEEDS.into_iter().filter(|s| !range.contains(s));
            let again: Vec<u64> = again.collect();
            range.chain(again).collect()
        }
    };
    let started = std::time::Instant::now();
    // The planned panics are caught by the engine; keep them out of the output.
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let planned = info
            .payload()
            .downcast_ref::<&str>()
            .is_some_and(|m| *m == "planned panic");
        if !planned {
            default_hook(info);
        }
    }));
    // Seeds are independent (each its own actor system on its own thread): run them on every
    // core.
    let next = std::sync::atomic::AtomicUsize::new(0);
    let results = Mutex::new(Vec::new());
    let workers = std::thread::available_parallelism().map_or(1, usize::from);
    std::thread::scope(|scope| {
        for _ in 0..workers {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let Some(seed) = seeds.get(i).copied() else {
                    break;
                };
                let watchdog = watchdog(seed);
                let outcome = run_seed(seed);
                drop(watchdog);
                results
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push((seed, outcome));
            });
        }
    });
    let mut results = results.into_inner().unwrap_or_else(PoisonError::into_inner);
    results.sort_by_key(|(seed, _)| *seed);
    let mut failed = Vec::new();
    let (mut calls, mut rows, mut tombstones) = (0, 0, 0);
    let mut most_read: Option<(u64, checks::Reads)> = None;
    let mut most_tombstones = (0, "", 0);
    let mut remote = remote::Coverage::default();
    for (seed, (violations, reads, coverage)) in results {
        remote.add(coverage);
        calls += reads.calls;
        rows += reads.rows;
        tombstones += reads.tombstones;
        if reads.most_tombstones.0 > most_tombstones.0 {
            most_tombstones = (reads.most_tombstones.0, reads.most_tombstones.1, seed);
        }
        if most_read.is_none_or(|(_, most)| reads.rows_per_call() > most.rows_per_call()) {
            most_read = Some((seed, reads));
        }
        if !violations.is_empty() {
            eprintln!(
                "simulation seed {seed} failed ({} violations; replay with SIM_SEED={seed}):",
                violations.len()
            );
            for violation in violations.iter().take(10) {
                eprintln!("  {violation}");
            }
            failed.push(seed);
        }
    }
    eprintln!(
        "simulation: {} seeds, {calls} executor calls, {} failed, in {:.1}s",
        seeds.len(),
        failed.len(),
        started.elapsed().as_secs_f64()
    );
    if let Some((seed, most)) = most_read {
        eprintln!(
            "simulation: {rows} rows read ({:.1} per call; at most {:.1}, seed {seed}, bound {}), {tombstones} tombstones stepped over (at most {} in one read, a {} of seed {}; bound {})",
            rows as f64 / calls.max(1) as f64,
            most.rows_per_call(),
            checks::ROWS_READ_PER_CALL,
            most_tombstones.0,
            most_tombstones.1,
            most_tombstones.2,
            checks::TOMBSTONES_IN_A_READ
        );
    }
    eprintln!("simulation: remote calls: {remote:?}");
    assert!(failed.is_empty(), "failing seeds: {failed:?}");
    // Over a run of the default size, every kind of remote fault and refusal happened.
    if seeds.len() >= 100 {
        let missing = remote.missing();
        assert!(
            missing.is_empty(),
            "no remote call met: {missing:?} ({remote:?})"
        );
    }
}

/// Fails the run if one seed takes more than a minute of real time (an actor spinning under the
/// paused clock would otherwise hang it).
fn watchdog(seed: u64) -> std::sync::mpsc::Sender<()> {
    let (done, finished) = std::sync::mpsc::channel::<()>();
    std::thread::spawn(move || {
        if finished.recv_timeout(Duration::from_secs(60))
            == Err(std::sync::mpsc::RecvTimeoutError::Timeout)
        {
            eprintln!("simulation seed {seed} still running after 60 s of real time; replay with SIM_SEED={seed}");
            std::process::exit(101);
        }
    });
    done
}

/// Stamps a replayed seed's log lines with the simulated time (seconds since the runtime's
/// start), which is what the engine's timers see.
struct SimulatedTime;

impl tracing_subscriber::fmt::time::FormatTime for SimulatedTime {
    fn format_time(&self, w: &mut tracing_subscriber::fmt::format::Writer<'_>) -> std::fmt::Result {
        static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
        let start = *START.get_or_init(Instant::now);
        write!(
            w,
            "sim+{:.3}s",
            Instant::now().duration_since(start).as_secs_f64()
        )
    }
}
