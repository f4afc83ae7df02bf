//! Scale: millions of pending tasks in Cassandra. Tasks due in the future are written straight
//! to the schedule of one keyspace in steps (1M, then 9M more to reach 10M); at each step a task
//! due now is written in each partition and a fresh node process is assigned every partition (a
//! takeover), and the figures are how long after its assignment each partition ran its due task
//! and the node's resident set once it settled. The targets: the resident set stays flat from
//! the first step to the last, and each partition runs its due task within 2 s of being taken
//! over, whatever its pending schedule. Run only when named (`--only scale`): the full run writes
//! ten million rows.

use std::ops::Range;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use chrono::{DateTime, TimeDelta, Utc};
use futures::{StreamExt, TryStreamExt};
use it_tests::engine::TestEnv;
use scheduler_client::partition_for;
use scheduler_core::settings::SchedulingSettings;
use scheduler_core::store::{CassandraStore, ScheduleStore};
use tokio::sync::Semaphore;

use crate::ceilings::bench_task;
use crate::child::ChildNode;
use crate::BenchError;

/// Partitions of the topic.
pub const PARTITIONS: u32 = 8;
/// Distinct orderingIds of the pending tasks.
pub const ORDERING_IDS: usize = 100_000;
/// The pending tasks come due from this long after the scenario starts: past the look-ahead
/// (5 minutes) of either step's node even if writing the second step takes most of an hour, so
/// that no node loads them and the only tasks due are the ones written to be due.
pub const PENDING_FROM: TimeDelta = TimeDelta::hours(1);
/// Over how long the pending tasks come due, evenly.
pub const PENDING_SPAN: TimeDelta = TimeDelta::hours(24);
/// Tasks per `persist` call (one partition's, consecutive in time: one or two hour buckets).
const CHUNK: usize = 2_000;
/// `persist` calls under way at once at first (each writes up to 16 batches at once).
const WRITE_CONCURRENCY: usize = 16;
/// A failed call lowers the calls under way at once by one, down to this.
const MIN_WRITE_CONCURRENCY: usize = 4;
/// Attempts of one `persist` call before the scenario fails.
const WRITE_ATTEMPTS: u32 = 6;
/// Tasks written between two progress lines.
const PROGRESS_EVERY: usize = 1_000_000;
/// How long each step's node runs after its assignment before its resident set is read.
pub const SETTLE: Duration = Duration::from_secs(20);
/// How long the due tasks may take to run before the scenario fails.
const DUE_LIMIT: Duration = Duration::from_secs(300);

/// One step of the scenario.
#[derive(Debug, Clone)]
pub struct ScaleStep {
    /// Pending tasks in Cassandra when the node started (besides the due ones).
    pub pending: usize,
    /// Of which this step wrote.
    pub written: usize,
    /// Seconds this step's writes took.
    pub write_s: f64,
    /// Tasks written per second.
    pub written_per_s: f64,
    /// `persist` calls that failed and were made again.
    pub retries: u64,
    /// `persist` calls under way at once when the writes ended.
    pub concurrency: usize,
    /// Milliseconds from the node's assignment until every partition had run its due task.
    pub first_due_ms: f64,
    /// Milliseconds from the node's assignment until the quickest partition ran its due task.
    pub quickest_partition_ms: f64,
    /// The node's peak resident set (`VmHWM`) after `SETTLE`, bytes.
    pub peak_rss_bytes: u64,
    /// The node's resident set (`VmRSS`) after `SETTLE`, bytes.
    pub settled_rss_bytes: u64,
    /// Tasks the node held in memory after `SETTLE`.
    pub in_memory: u64,
    /// Executions after `SETTLE` (one per partition unless a task ran twice or early).
    pub executed: u64,
}

/// What the scenario measured.
#[derive(Debug, Clone)]
pub struct Scale {
    /// Partitions of the topic.
    pub partitions: u32,
    /// Distinct orderingIds of the pending tasks.
    pub ordering_ids: usize,
    /// The steps, smallest first.
    pub steps: Vec<ScaleStep>,
}

/// Runs the scenario: at each of `steps` (pending tasks in all, ascending), writes the tasks
/// that bring the schedule to that size, then measures a takeover by a fresh node process.
pub async fn scale(steps: &[usize]) -> Result<Scale, BenchError> {
    let env = TestEnv::new("bench_scale", PARTITIONS).await;
    let writer = Writer::new(env.store().await, Utc::now() + PENDING_FROM)?;
    let settings = env.settings(SchedulingSettings::default());
    let mut measured = Vec::new();
    let mut before = 0;
    for (index, &pending) in steps.iter().enumerate() {
        let pending = pending.max(before);
        let began = Instant::now();
        writer.write_pending(before, pending).await?;
        let write_s = began.elapsed().as_secs_f64();
        let retries = writer.retries.swap(0, Ordering::SeqCst);
        writer.write_due(index).await?;

        let mut node = ChildNode::spawn(&settings, PARTITIONS)?;
        let ran = node
            .wait_for(DUE_LIMIT, "every partition's due task to run", |p| {
                p.executed >= u64::from(PARTITIONS)
            })
            .await?;
        let settled_at =
            DateTime::from_timestamp_millis(ran.assigned_ms).map_or(Utc::now(), |t| t + SETTLE);
        let left = (settled_at - Utc::now()).to_std().unwrap_or_default();
        tokio::time::sleep(left).await;
        let settled_rss_bytes = node.rss_bytes()?;
        let peak_rss_bytes = node.peak_rss_bytes()?;
        let settled = node.progress();
        node.stop(Duration::from_secs(60)).await?;

        let written = pending - before;
        measured.push(ScaleStep {
            pending,
            written,
            write_s,
            written_per_s: written as f64 / write_s.max(f64::MIN_POSITIVE),
            retries,
            concurrency: writer.concurrency.load(Ordering::SeqCst),
            first_due_ms: (ran.last_ms - ran.assigned_ms) as f64,
            quickest_partition_ms: (ran.first_ms - ran.assigned_ms) as f64,
            peak_rss_bytes,
            settled_rss_bytes,
            in_memory: settled.in_memory,
            executed: settled.executed,
        });
        before = pending;
    }
    Ok(Scale {
        partitions: PARTITIONS,
        ordering_ids: ORDERING_IDS,
        steps: measured,
    })
}

/// Writes the schedule straight to Cassandra, `persist` calls a few at a time.
struct Writer {
    store: CassandraStore,
    /// The orderingIds of each partition.
    ids: Vec<Vec<String>>,
    /// When the first pending task is due.
    from: DateTime<Utc>,
    /// One permit per `persist` call that may be under way.
    permits: Semaphore,
    /// The permits `permits` was left with.
    concurrency: AtomicUsize,
    /// Calls that failed and were made again (since last taken).
    retries: AtomicU64,
}

impl Writer {
    fn new(store: CassandraStore, from: DateTime<Utc>) -> Result<Writer, BenchError> {
        let mut ids = vec![Vec::new(); PARTITIONS as usize];
        for n in 0..ORDERING_IDS {
            let id = format!("scale-{n}");
            let partition = partition_for(&id, PARTITIONS) as usize;
            ids[partition].push(id);
        }
        if ids.iter().any(Vec::is_empty) {
            return Err(BenchError::Setup("a partition has no orderingId".into()));
        }
        Ok(Writer {
            store,
            ids,
            from,
            permits: Semaphore::new(WRITE_CONCURRENCY),
            concurrency: AtomicUsize::new(WRITE_CONCURRENCY),
            retries: AtomicU64::new(0),
        })
    }

    /// Writes the pending tasks that bring the schedule from `before` tasks to `after`, an equal
    /// share in each partition, each share's tasks due evenly over `PENDING_SPAN`. Task `j` of a
    /// partition has the uniqueness key `pending-j`, so each step's tasks are new ones.
    async fn write_pending(&self, before: usize, after: usize) -> Result<(), BenchError> {
        let ranges: Vec<Range<usize>> = (0..PARTITIONS as usize)
            .map(|p| share(before, p)..share(after, p))
            .collect();
        let longest = ranges.iter().map(|r| r.len()).max().unwrap_or(0);
        // The partitions' chunks in turn, so that the writes under way at once spread over them.
        let chunks: Vec<(usize, Range<usize>)> = (0..longest.div_ceil(CHUNK))
            .flat_map(|k| {
                ranges.iter().enumerate().filter_map(move |(p, r)| {
                    let start = r.start + k * CHUNK;
                    (start < r.end).then(|| (p, start..(start + CHUNK).min(r.end)))
                })
            })
            .collect();
        let total = after - before;
        let began = Instant::now();
        let mut written = 0;
        let mut writes = futures::stream::iter(chunks)
            .map(|(p, keys)| {
                let range = ranges[p].clone();
                async move {
                    let tasks = || self.pending_tasks(p, keys.clone(), &range);
                    self.persist(p, tasks).await.map(|()| keys.len())
                }
            })
            .buffer_unordered(WRITE_CONCURRENCY);
        while let Some(n) = writes.try_next().await? {
            let previous = written;
            written += n;
            if written / PROGRESS_EVERY > previous / PROGRESS_EVERY {
                eprintln!(
                    "  scale: {written} of {total} pending tasks written ({:.0}/s)",
                    written as f64 / began.elapsed().as_secs_f64()
                );
            }
        }
        Ok(())
    }

    /// Tasks `keys` of partition `p`, whose step writes `range`.
    fn pending_tasks(
        &self,
        p: usize,
        keys: Range<usize>,
        range: &Range<usize>,
    ) -> Vec<scheduler_client::Task> {
        let ids = &self.ids[p];
        let step_ms = PENDING_SPAN.num_milliseconds() as f64 / range.len().max(1) as f64;
        keys.map(|j| {
            let offset = ((j - range.start) as f64 * step_ms) as i64;
            bench_task(
                ids[j % ids.len()].clone(),
                self.from + TimeDelta::milliseconds(offset),
                format!("pending-{j}"),
            )
        })
        .collect()
    }

    /// Writes one task due now in each partition (`due-<step>`).
    async fn write_due(&self, step: usize) -> Result<(), BenchError> {
        let now = Utc::now();
        futures::future::try_join_all(self.ids.iter().enumerate().map(|(p, ids)| {
            let task = || vec![bench_task(ids[0].clone(), now, format!("due-{step}"))];
            self.persist(p, task)
        }))
        .await?;
        Ok(())
    }

    /// Writes the tasks `make` makes into partition `p`'s schedule, once a permit is free;
    /// makes them again and retries a failed write after a backoff, with one permit fewer from
    /// then on (down to `MIN_WRITE_CONCURRENCY`), up to `WRITE_ATTEMPTS` attempts in all.
    async fn persist(
        &self,
        p: usize,
        make: impl Fn() -> Vec<scheduler_client::Task>,
    ) -> Result<(), BenchError> {
        let mut attempt = 1;
        loop {
            let permit = self
                .permits
                .acquire()
                .await
                .map_err(|e| BenchError::Setup(format!("write permits: {e}")))?;
            let error = match self.store.persist(p as i32, make()).await {
                Ok(refused) => match refused.first() {
                    None => return Ok(()),
                    Some(first) => {
                        return Err(BenchError::Insane(format!(
                            "Cassandra refused {} pending tasks of partition {p}, e.g. {:?}: {}",
                            refused.len(),
                            first.key,
                            first.reason
                        )))
                    }
                },
                Err(e) => e,
            };
            if attempt >= WRITE_ATTEMPTS {
                return Err(BenchError::Setup(format!(
                    "writing pending tasks to partition {p} failed {attempt} times: {error}"
                )));
            }
            self.retries.fetch_add(1, Ordering::SeqCst);
            let lowered = self
                .concurrency
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |c| {
                    (c > MIN_WRITE_CONCURRENCY).then(|| c - 1)
                });
            match lowered {
                Ok(was) => {
                    permit.forget();
                    eprintln!(
                        "  scale: a write failed ({error}); {} at once from now on",
                        was - 1
                    );
                }
                Err(_) => drop(permit),
            }
            tokio::time::sleep(Duration::from_secs(1 << (attempt - 1).min(4))).await;
            attempt += 1;
        }
    }
}

/// The number of a schedule of `total` tasks that fall to partition `p`: an equal share, the
/// first partitions one more when `total` does not divide.
fn share(total: usize, p: usize) -> usize {
    let partitions = PARTITIONS as usize;
    total / partitions + usize::from(p < total % partitions)
}
