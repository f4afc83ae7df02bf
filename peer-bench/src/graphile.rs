//! graphile_worker (the Rust port of Graphile Worker): jobs with `run_at`, named queues that
//! run one job at a time per queue (the engine's per-orderingId guarantee), on PostgreSQL.
//!
//! Profiles (what each sets, from the crate's docs, 0.14.1):
//! - `defaults`: nothing. concurrency = logical CPUs, poll_interval 1 s, LISTEN/NOTIFY
//!   wake-ups on (`jobs:insert`, sent by every insert), no local queue, no completion
//!   batching; a 20-connection pool (the crate's `max_pg_conn` default); PostgreSQL's
//!   session defaults (`synchronous_commit = on`).
//! - `tuned`: the docs' "throughput-oriented worker" (configuration/worker-options.md:
//!   concurrency 16, completion and failure batching 5 ms, local queue of 100), a 100 ms poll
//!   interval (deployment.md: "lower intervals can improve responsiveness"; jobs scheduled
//!   ahead are only found by polling, NOTIFY fires at insert time), and
//!   `synchronous_commit = off` on its sessions, the durability the engine's Cassandra has (a
//!   periodic commit log acknowledges writes before they are fsynced). One departure from the
//!   docs' example: the local queue's TTL is 1 s, not 60 s. In 0.14.1 a fetch puts its jobs in
//!   the cache before marking the queue `Waiting` (local_queue/cache.rs); a slot that drains
//!   them in between marks it `Polling` first, so it ends `Waiting` and empty, and nothing
//!   fetches until the TTL expires: seen once in six runs as a 60 s stall of every job.
//!
//! In the default (direct) mode a job slot runs one job per wake-up (a poll tick or a NOTIFY,
//! runner/job_loop/direct.rs): once inserts stop, due jobs drain at about concurrency / poll
//! interval per second. The local queue loops until its cache is empty.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use graphile_worker::runner::WorkerRuntimeError;
use graphile_worker::{
    IntoTaskHandlerResult, JobSpec, LocalQueueConfig, TaskHandler, Worker, WorkerContext,
    WorkerOptions, WorkerUtils,
};
use serde_json::{json, Value};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::PgPool;

use crate::workload::{self, BenchTask, Enqueue, NewTask, Phase, Recorder, Sizes};
use crate::Profile;

/// The crate's version (kept in step with Cargo.lock; `--locked` builds enforce it).
const VERSION: &str = "0.14.1";
/// The crate's default schema, dropped before and after each run so each starts clean (the
/// SQL below names it literally: SQLx takes only static SQL text).
const SCHEMA: &str = "graphile_worker";
/// The crate's default pool size when it builds the pool itself (`max_pg_conn`).
const WORKER_POOL: u32 = 20;
/// The tuned profile's concurrency (the docs' throughput-oriented example).
const TUNED_CONCURRENCY: usize = 16;
/// The tuned profile's poll interval (a tenth of the default).
const TUNED_POLL: Duration = Duration::from_millis(100);
/// The tuned profile's completion and failure batching delay (the docs' example).
const TUNED_BATCH_DELAY: Duration = Duration::from_millis(5);
/// The tuned profile's local queue size (the docs' example).
const TUNED_LOCAL_QUEUE: usize = 100;
/// The tuned profile's local queue TTL: bounds the stall described above.
const TUNED_TTL: Duration = Duration::from_secs(1);
/// The producer's pool: the steady phase's single inserts run concurrently on it.
const PRODUCER_POOL: u32 = 8;

/// The no-op task: records when it started.
impl TaskHandler for BenchTask {
    const IDENTIFIER: &'static str = "peer_bench_noop";

    async fn run(self, ctx: WorkerContext) -> impl IntoTaskHandlerResult {
        if let Some(recorder) = ctx.get_ext::<Arc<Recorder>>() {
            recorder.ran(&self, *ctx.job().run_at());
        }
        Ok::<(), String>(())
    }
}

/// Enqueues through `WorkerUtils` on its own pool, as a separate producer service would.
struct Producer {
    utils: WorkerUtils,
}

impl Enqueue for Producer {
    async fn add_one(&self, task: NewTask) -> anyhow::Result<()> {
        self.utils
            .add_job(task.task, spec(task.queue, task.run_at))
            .await
            .context("add_job")?;
        Ok(())
    }

    async fn add_many(&self, tasks: Vec<NewTask>) -> anyhow::Result<()> {
        let specs: Vec<JobSpec> = tasks
            .iter()
            .map(|t| spec(t.queue.clone(), t.run_at))
            .collect();
        let jobs: Vec<(BenchTask, &JobSpec)> = tasks
            .into_iter()
            .zip(specs.iter())
            .map(|(t, s)| (t.task, s))
            .collect();
        self.utils.add_jobs(&jobs).await.context("add_jobs")?;
        Ok(())
    }
}

fn spec(queue: String, run_at: chrono::DateTime<chrono::Utc>) -> JobSpec {
    JobSpec {
        queue_name: Some(queue),
        run_at: Some(run_at),
        ..JobSpec::default()
    }
}

async fn pool(url: &str, profile: Profile, size: u32) -> anyhow::Result<PgPool> {
    let mut options: PgConnectOptions = url.parse().context("parsing --database-url")?;
    if profile == Profile::Tuned {
        options = options.options([("synchronous_commit", "off")]);
    }
    PgPoolOptions::new()
        .max_connections(size)
        .connect_with(options)
        .await
        .with_context(|| format!("connecting to {url}"))
}

async fn drop_schema(pool: &PgPool) -> anyhow::Result<()> {
    sqlx::query("drop schema if exists graphile_worker cascade")
        .execute(pool)
        .await
        .context("dropping graphile_worker's schema")?;
    Ok(())
}

/// Runs the workload on graphile_worker with `profile`; returns the figures and settings.
pub async fn run(url: &str, profile: Profile, sizes: Sizes) -> anyhow::Result<Value> {
    let mut figures = json!({
        "system": "graphile_worker",
        "version": VERSION,
        "profile": profile.name(),
        "settings": settings(profile),
    });
    let mut phases = vec![(Phase::Steady, "steady", sizes)];
    if let Some(rate) = sizes.rate_high {
        // The steady phase again at the higher rate.
        phases.push((Phase::Steady, "steady_high", Sizes { rate, ..sizes }));
    }
    phases.push((Phase::Burst, "burst", sizes));
    for (phase, name, sizes) in phases {
        let session = Session::start(url, profile).await?;
        let measured =
            workload::run(phase, session.producer.clone(), &session.recorder, sizes).await;
        let (left, server) = session.stop().await?;
        figures[name] = measured?;
        figures[name]["jobs_left_in_table"] = json!(left);
        figures["postgres"] = json!({
            "server_version": server,
            "producer_pool_connections": PRODUCER_POOL,
        });
    }
    Ok(figures)
}

/// What each profile sets (see the module's comment), for the JSON output.
fn settings(profile: Profile) -> Value {
    match profile {
        Profile::Defaults => json!({
            "concurrency": num_cpus(),
            "poll_interval_ms": 1000,
            "notifications": true,
            "local_queue": null,
            "complete_job_batch_delay_ms": null,
            "worker_pool_connections": WORKER_POOL,
            "synchronous_commit": "on",
        }),
        Profile::Tuned => json!({
            "concurrency": TUNED_CONCURRENCY,
            "poll_interval_ms": TUNED_POLL.as_millis(),
            "notifications": true,
            "local_queue": {"size": TUNED_LOCAL_QUEUE, "ttl_ms": TUNED_TTL.as_millis()},
            "complete_job_batch_delay_ms": TUNED_BATCH_DELAY.as_millis(),
            "fail_job_batch_delay_ms": TUNED_BATCH_DELAY.as_millis(),
            "worker_pool_connections": WORKER_POOL,
            "synchronous_commit": "off",
        }),
    }
}

/// A worker running on a freshly created schema, and a producer beside it.
struct Session {
    worker: Arc<Worker>,
    running: tokio::task::JoinHandle<Result<(), WorkerRuntimeError>>,
    recorder: Arc<Recorder>,
    producer: Arc<Producer>,
    worker_pool: PgPool,
    producer_pool: PgPool,
}

impl Session {
    async fn start(url: &str, profile: Profile) -> anyhow::Result<Session> {
        let worker_pool = pool(url, profile, WORKER_POOL).await?;
        drop_schema(&worker_pool).await?;
        let recorder = Arc::new(Recorder::default());
        let mut options = WorkerOptions::default()
            .pg_pool(worker_pool.clone())
            .schema(SCHEMA)
            .define_job::<BenchTask>()
            .add_extension(recorder.clone())
            .listen_os_shutdown_signals(false);
        if profile == Profile::Tuned {
            options = options
                .concurrency(TUNED_CONCURRENCY)
                .poll_interval(TUNED_POLL)
                .complete_job_batch_delay(TUNED_BATCH_DELAY)
                .fail_job_batch_delay(TUNED_BATCH_DELAY)
                .local_queue(
                    LocalQueueConfig::default()
                        .with_size(TUNED_LOCAL_QUEUE)
                        .with_ttl(TUNED_TTL),
                );
        }
        let worker = Arc::new(options.init().await.context("starting the worker")?);
        let running = {
            let worker = worker.clone();
            tokio::spawn(async move { worker.run().await })
        };
        let producer_pool = pool(url, profile, PRODUCER_POOL).await?;
        let producer = Arc::new(Producer {
            utils: WorkerUtils::new(producer_pool.clone(), SCHEMA),
        });
        Ok(Session {
            worker,
            running,
            recorder,
            producer,
            worker_pool,
            producer_pool,
        })
    }

    /// Stops the worker and drops the schema; returns the jobs left in the table and the
    /// server's version.
    async fn stop(self) -> anyhow::Result<(Option<i64>, Option<String>)> {
        self.worker.request_shutdown();
        let stopped = tokio::time::timeout(Duration::from_secs(30), self.running).await;
        match stopped {
            Ok(Ok(Ok(()))) => {}
            Ok(Ok(Err(e))) => anyhow::bail!("the worker failed: {e}"),
            Ok(Err(e)) => anyhow::bail!("the worker panicked: {e}"),
            Err(_) => anyhow::bail!("the worker did not stop within 30 s"),
        }
        let left: Option<i64> =
            sqlx::query_scalar("select count(*) from graphile_worker._private_jobs")
                .fetch_one(&self.worker_pool)
                .await
                .ok();
        let server: Option<String> = sqlx::query_scalar("show server_version")
            .fetch_one(&self.worker_pool)
            .await
            .ok();
        drop_schema(&self.worker_pool).await?;
        self.producer_pool.close().await;
        self.worker_pool.close().await;
        Ok((left, server))
    }
}

/// Logical CPUs: graphile_worker's default concurrency (it uses `num_cpus::get`).
fn num_cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}
