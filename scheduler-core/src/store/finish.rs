//! The end of a task in one request: its final status (`task_status`) and its removal from the
//! schedule (`scheduled_tasks`). Both rows have the same partition key (partition and hour
//! bucket), so on Cassandra they go as one unlogged batch that the replicas apply as one
//! mutation: one request where there were two, and the row never outlives the status it needs.
//! Ends of one bucket that come while a request of that bucket is under way go together in the
//! next request (a group commit: see `cassandra::Waiting`). Each table adds its own row
//! (`status::cassandra::add_status`, `schedule::cassandra::add_removal`); this module only puts
//! them together.

use futures::future::BoxFuture;
use scheduler_client::TaskKey;

use super::{PartitionId, StatusRecord, StoreResult};

/// A task's final status and its removal from the schedule, at once.
pub trait FinishStore: Send + Sync + 'static {
    /// Records `status` as the task's final status and deletes it from the schedule, in one
    /// request: both are written or, on an error, the whole may be tried again.
    fn finish(
        &self,
        partition: PartitionId,
        key: TaskKey,
        status: StatusRecord,
    ) -> BoxFuture<'static, StoreResult<()>>;
}

#[cfg(feature = "node")]
mod cassandra {
    use std::collections::hash_map::Entry;
    use std::collections::HashMap;
    use std::sync::{Arc, Mutex, PoisonError};

    use chrono::{DateTime, Utc};
    use futures::future::BoxFuture;
    use futures::FutureExt;
    use scheduler_client::TaskKey;
    use tokio::sync::oneshot;

    use super::FinishStore;
    use crate::store::cassandra::{CassandraStore, Inner, Writes};
    use crate::store::StoreResult;
    use crate::store::{hour_bucket, schedule, status, PartitionId, StatusRecord, StoreError};

    /// Tasks' ends in one request at most.
    const FINISHES_PER_BATCH: usize = 50;
    /// The estimated size of one request at most, as a polled batch's inserts (see
    /// `schedule/inserts.rs`).
    const BATCH_BYTES: usize = 32 * 1024;

    /// The ends waiting for a request of their hour bucket (their Cassandra partition), by
    /// partition and bucket. A bucket listed here has a request under way: ends of it that
    /// come meanwhile wait and go together in the next one (a group commit), so a busy bucket
    /// costs a request per round trip instead of one per task, and a quiet one a request per
    /// task, at once, as before.
    #[derive(Default)]
    struct Waiting(Mutex<HashMap<Bucket, Vec<End>>>);

    /// A Cassandra partition of the schedule and statuses: an engine partition and hour bucket.
    type Bucket = (PartitionId, DateTime<Utc>);

    /// One task's end, waiting.
    struct End {
        key: TaskKey,
        status: StatusRecord,
        /// Told once its request answered.
        done: oneshot::Sender<Answer>,
    }

    /// What became of an end's request.
    enum Answer {
        Written,
        /// Its request, of this end alone, failed.
        Failed(StoreError),
        /// A request of several failed: each end is written again alone, to get its own answer.
        Again(TaskKey, StatusRecord),
    }

    impl End {
        /// The estimated bytes of its two rows.
        fn bytes(&self) -> usize {
            let key = self.key.ordering_id.len() + self.key.uniqueness_key.len() + 32;
            let error = self.status.last_error.as_ref().map_or(0, String::len);
            let result = (self.status.result.as_ref()).map_or(0, |r| r.to_string().len());
            2 * key + error + result + 48
        }
    }

    impl Waiting {
        fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Bucket, Vec<End>>> {
            self.0.lock().unwrap_or_else(PoisonError::into_inner)
        }

        /// The next request's ends of `bucket`, or none (and the bucket unlisted) if none wait.
        fn next(&self, bucket: Bucket) -> Vec<End> {
            let mut waiting = self.lock();
            let Some(ends) = waiting.get_mut(&bucket) else {
                return Vec::new();
            };
            if ends.is_empty() {
                waiting.remove(&bucket);
                return Vec::new();
            }
            let (mut count, mut bytes) = (0, 0);
            for end in ends.iter() {
                if count > 0 && (count == FINISHES_PER_BATCH || bytes + end.bytes() > BATCH_BYTES) {
                    break;
                }
                count += 1;
                bytes += end.bytes();
            }
            ends.drain(..count).collect()
        }
    }

    /// Writes the ends of `bucket` a request at a time until none wait.
    async fn write_bucket(inner: Arc<Inner>, bucket: Bucket) {
        let waiting = inner.shared::<Waiting>();
        loop {
            let ends = waiting.next(bucket);
            if ends.is_empty() {
                return;
            }
            let written = async {
                let mut writes = Writes::new();
                for end in &ends {
                    add_end(&inner, &mut writes, bucket.0, &end.key, end.status.clone()).await?;
                }
                // Counted as a status write (of two rows a task).
                inner.run_writes(writes, "status write").await
            }
            .await;
            let alone = ends.len() == 1;
            let mut failure = written.err();
            for End { key, status, done } in ends {
                let answer = match failure.take() {
                    None => Answer::Written,
                    Some(e) if alone => Answer::Failed(e),
                    Some(e) => {
                        failure = Some(e);
                        Answer::Again(key, status)
                    }
                };
                // A receiver gone (its task's run stopped) needs no answer.
                let _ = done.send(answer);
            }
        }
    }

    /// Adds a task's end to `writes`: its status row and its schedule row's removal.
    async fn add_end(
        inner: &Inner,
        writes: &mut Writes,
        partition: PartitionId,
        key: &TaskKey,
        status: StatusRecord,
    ) -> StoreResult<()> {
        status::cassandra::add_status(inner, writes, partition, key, status).await?;
        schedule::cassandra::add_removal(inner, writes, partition, key).await
    }

    /// One task's end alone, in one request.
    async fn write_alone(
        inner: &Inner,
        partition: PartitionId,
        key: &TaskKey,
        status: StatusRecord,
    ) -> StoreResult<()> {
        let mut writes = Writes::new();
        add_end(inner, &mut writes, partition, key, status).await?;
        inner.run_writes(writes, "status write").await
    }

    impl FinishStore for CassandraStore {
        fn finish(
            &self,
            partition: PartitionId,
            key: TaskKey,
            status: StatusRecord,
        ) -> BoxFuture<'static, StoreResult<()>> {
            let inner = Arc::clone(&self.inner);
            async move {
                let bucket = (partition, hour_bucket(key.scheduled_time));
                let (done, answer) = oneshot::channel();
                let end = End { key, status, done };
                // A bucket listed has a writer (until it finds nothing left and unlists it).
                let first = match inner.shared::<Waiting>().lock().entry(bucket) {
                    Entry::Occupied(mut listed) => {
                        listed.get_mut().push(end);
                        false
                    }
                    Entry::Vacant(unlisted) => {
                        unlisted.insert(vec![end]);
                        true
                    }
                };
                if first {
                    // The bucket had no request under way: this end starts its writer, which
                    // outlives this call (another task's end may be waiting on it).
                    tokio::spawn(write_bucket(Arc::clone(&inner), bucket));
                }
                match answer.await {
                    Ok(Answer::Written) => Ok(()),
                    Ok(Answer::Failed(e)) => Err(e),
                    Ok(Answer::Again(key, status)) => {
                        write_alone(&inner, partition, &key, status).await
                    }
                    // The writer was dropped (the runtime is shutting down): the end may be
                    // tried again, as after any failed write.
                    Err(_) => Err(StoreError::query(
                        "status write",
                        std::io::Error::other("the bucket's writer stopped before it answered"),
                    )),
                }
            }
            .boxed()
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;
        use crate::store::TaskStatus;

        fn end(n: usize, error_bytes: usize) -> (End, oneshot::Receiver<Answer>) {
            let (done, answer) = oneshot::channel();
            let at: DateTime<Utc> = "2030-01-01T10:00:00Z".parse().unwrap_or_default();
            let end = End {
                key: TaskKey {
                    scheduled_time: at,
                    ordering_id: "o".into(),
                    uniqueness_key: format!("u{n}"),
                },
                status: StatusRecord {
                    status: TaskStatus::Failed,
                    attempts: 1,
                    updated_at: at,
                    last_error: Some("x".repeat(error_bytes)),
                    result: None,
                    started_at: None,
                },
                done,
            };
            (end, answer)
        }

        #[test]
        fn a_buckets_ends_go_in_requests_of_at_most_50_or_32_kib_and_the_bucket_is_unlisted_when_none_wait(
        ) {
            let waiting = Waiting::default();
            let bucket = (3, DateTime::<Utc>::default());
            let mut answers = Vec::new();
            let mut ends = Vec::new();
            for n in 0..120 {
                // Ten large ends (8 KiB of error each) among small ones.
                let (e, a) = end(n, if n % 12 == 0 { 8 * 1024 } else { 10 });
                ends.push(e);
                answers.push(a);
            }
            waiting.lock().insert(bucket, ends);
            let mut sizes = Vec::new();
            loop {
                let next = waiting.next(bucket);
                if next.is_empty() {
                    break;
                }
                let bytes: usize = next.iter().map(End::bytes).sum();
                assert!(next.len() <= FINISHES_PER_BATCH);
                assert!(bytes <= BATCH_BYTES || next.len() == 1, "{bytes}");
                sizes.push(next.len());
            }
            assert_eq!(
                sizes.iter().sum::<usize>(),
                120,
                "every end once: {sizes:?}"
            );
            assert!(sizes.len() <= 6, "{sizes:?}");
            assert!(waiting.lock().is_empty(), "unlisted once none wait");
            drop(answers);
        }
    }
}

#[cfg(any(test, feature = "testing"))]
mod memory {
    use futures::future::BoxFuture;
    use scheduler_client::TaskKey;

    use super::FinishStore;
    use crate::store::memory::MemoryStore;
    use crate::store::{schedule, status, PartitionId, StatusRecord, StoreResult};

    impl FinishStore for MemoryStore {
        fn finish(
            &self,
            partition: PartitionId,
            key: TaskKey,
            status: StatusRecord,
        ) -> BoxFuture<'static, StoreResult<()>> {
            // A status write, to the simulation's faults too.
            self.run("status write", move |s| {
                status::memory::record(s, partition, key.clone(), status);
                schedule::memory::remove(s, partition, key);
            })
        }
    }
}
