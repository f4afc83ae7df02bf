//! `scheduled_tasks` and its neighbours in memory.

use std::ops::Bound;
use std::sync::atomic::Ordering;
use std::sync::{Arc, PoisonError};

use chrono::{DateTime, Utc};
use futures::future::BoxFuture;
use futures::FutureExt;
use scheduler_client::{Task, TaskKey};

use super::{
    hour_bucket, DeferredCancel, DeferredIdentityRecord, ReadCursor, RefusedTask, ScheduleStore,
    WriteStamp,
};
use crate::store::memory::{MemoryStore, State, CLUSTERING_KEY_LIMIT};
use crate::store::{PartitionId, StoreResult};

/// Deletes a task's row (leaving a tombstone, as Cassandra does).
pub(in crate::store) fn remove(s: &mut State, partition: PartitionId, key: TaskKey) {
    if s.schedule.remove(&(partition, key.clone())).is_some() {
        s.tombstones.insert((partition, key));
    }
}

impl ScheduleStore for MemoryStore {
    fn persist(
        &self,
        partition: PartitionId,
        tasks: Vec<Task>,
    ) -> BoxFuture<'static, StoreResult<Vec<RefusedTask>>> {
        self.run("task insert", move |s| {
            let mut refused = Vec::new();
            let mut tasks = tasks;
            if let Some(rng) = &mut s.write_order {
                rng.shuffle(&mut tasks);
            }
            for task in tasks {
                let key = task.key();
                // Like Cassandra, which refuses a clustering key over 64 KiB.
                if key.ordering_id.len() + key.uniqueness_key.len() + 8 > CLUSTERING_KEY_LIMIT {
                    refused.push(RefusedTask {
                        key,
                        reason: format!("clustering key longer than {CLUSTERING_KEY_LIMIT} bytes"),
                    });
                    continue;
                }
                // The bucket is indexed before the row is written.
                s.stamp += 1;
                let stamp = s.stamp;
                s.buckets
                    .insert((partition, hour_bucket(key.scheduled_time)), stamp);
                s.tombstones.remove(&(partition, key.clone()));
                s.row_stamps.insert((partition, key.clone()), stamp);
                s.schedule.insert((partition, key), task);
            }
            refused
        })
    }

    fn load(
        &self,
        partition: PartitionId,
        cursor: ReadCursor,
        until: DateTime<Utc>,
        limit: usize,
    ) -> BoxFuture<'static, StoreResult<Vec<Task>>> {
        let loaded_rows = Arc::clone(&self.loaded_rows);
        let loaded_keys = Arc::clone(&self.loaded_keys);
        let from_bucket = hour_bucket(cursor.time());
        let buckets_read = Arc::clone(&self.buckets_read);
        self.run("schedule load", move |s| {
            // Only indexed buckets are read, as in Cassandra, where loading jumps between them.
            let indexed: std::collections::BTreeSet<DateTime<Utc>> = s
                .buckets
                .range((partition, from_bucket)..)
                .take_while(|((p, b), _)| *p == partition && *b < until)
                .map(|((_, b), _)| *b)
                .collect();
            buckets_read.fetch_add(indexed.len(), Ordering::SeqCst);
            let lower = match cursor {
                ReadCursor::From(t) => Bound::Included((
                    partition,
                    TaskKey {
                        scheduled_time: t,
                        ordering_id: String::new(),
                        uniqueness_key: String::new(),
                    },
                )),
                ReadCursor::After(k) => Bound::Excluded((partition, k)),
            };
            let tasks = s
                .schedule
                .range((lower.clone(), Bound::Unbounded))
                .take_while(|((p, k), _)| *p == partition && k.scheduled_time < until)
                .filter(|((_, k), _)| indexed.contains(&hour_bucket(k.scheduled_time)))
                .take(limit)
                .map(|(_, t)| t.clone())
                .collect::<Vec<Task>>();
            // Like Cassandra, the read steps over the tombstones up to where it stopped.
            let stopped_at = match tasks.last() {
                Some(last) if tasks.len() == limit => Some(last.key()),
                _ => None,
            };
            let stepped_over = s
                .tombstones
                .range((lower, Bound::Unbounded))
                .take_while(|(p, k)| {
                    *p == partition
                        && k.scheduled_time < until
                        && stopped_at.as_ref().is_none_or(|at| k < at)
                })
                .filter(|(_, k)| indexed.contains(&hour_bucket(k.scheduled_time)))
                .count();
            s.step_over_tombstones("schedule load", stepped_over)?;
            Ok(tasks)
        })
        .map(move |result| {
            let result = result.and_then(|tasks| tasks);
            if let Ok(tasks) = &result {
                loaded_rows.fetch_add(tasks.len(), Ordering::SeqCst);
                let mut keys = loaded_keys.lock().unwrap_or_else(PoisonError::into_inner);
                keys.extend(tasks.iter().map(|t| (partition, t.key())));
            }
            result
        })
        .boxed()
    }

    fn remove_scheduled(
        &self,
        partition: PartitionId,
        key: TaskKey,
    ) -> BoxFuture<'static, StoreResult<()>> {
        self.run("schedule delete", move |s| remove(s, partition, key))
    }

    fn scheduled_task(
        &self,
        partition: PartitionId,
        key: TaskKey,
    ) -> BoxFuture<'static, StoreResult<Option<Task>>> {
        let task_rows_read = Arc::clone(&self.task_rows_read);
        self.run("task read", move |s| {
            // The read runs down from the key over its prefix (same time and orderingId:
            // `statements::read_by_key`), and Cassandra 2.1 reads every tombstone in that range,
            // even below the live row it returns (its log: "Read 1 live and 1122 tombstoned
            // cells").
            let prefix = TaskKey {
                uniqueness_key: String::new(),
                ..key.clone()
            };
            let stepped_over = (s.tombstones)
                .range((partition, prefix)..=(partition, key.clone()))
                .count();
            s.step_over_tombstones("task read", stepped_over)?;
            let task = s.schedule.get(&(partition, key)).cloned();
            if task.is_some() {
                task_rows_read.fetch_add(1, Ordering::SeqCst);
            }
            Ok(task)
        })
        .map(|result| result.and_then(|task| task))
        .boxed()
    }

    fn scheduled_tasks(
        &self,
        partition: PartitionId,
        keys: Vec<TaskKey>,
    ) -> BoxFuture<'static, StoreResult<Vec<Task>>> {
        let task_rows_read = Arc::clone(&self.task_rows_read);
        // One request per read Cassandra would take (by bucket, `KEYS_PER_READ` keys each),
        // each failing or slowed as its own.
        let reads = super::reads_by_bucket(keys, super::KEYS_PER_READ).into_iter();
        let reads: Vec<_> = (reads.map(|(_, keys)| {
            let task_rows_read = Arc::clone(&task_rows_read);
            self.run("task batch read", move |s| {
                // Only the named rows: a tombstone stepped over is a named key's own.
                let stepped_over = (keys.iter())
                    .filter(|key| s.tombstones.contains(&(partition, (*key).clone())))
                    .count();
                s.step_over_tombstones("task batch read", stepped_over)?;
                let tasks: Vec<Task> = (keys.into_iter())
                    .filter_map(|key| s.schedule.get(&(partition, key)).cloned())
                    .collect();
                task_rows_read.fetch_add(tasks.len(), Ordering::SeqCst);
                Ok(tasks)
            })
            .map(|result| result.and_then(|tasks| tasks))
        }))
        .collect();
        async move {
            let read = futures::future::try_join_all(reads).await?;
            Ok(read.into_iter().flatten().collect())
        }
        .boxed()
    }

    fn legacy_retrying(
        &self,
        partition: PartitionId,
    ) -> BoxFuture<'static, StoreResult<Vec<TaskKey>>> {
        self.run("retrying read", move |s| {
            // The whole partition: every tombstone in it is stepped over.
            let stepped_over = (s.retrying_tombstones.iter())
                .filter(|(p, _)| *p == partition)
                .count();
            s.step_over_tombstones("retrying read", stepped_over)?;
            Ok(s.retrying
                .iter()
                .filter(|(p, _)| *p == partition)
                .map(|(_, k)| k.clone())
                .collect())
        })
        .map(|result| result.and_then(|keys| keys))
        .boxed()
    }

    fn defer_cancel(
        &self,
        partition: PartitionId,
        key: TaskKey,
        at: DateTime<Utc>,
    ) -> BoxFuture<'static, StoreResult<()>> {
        self.run("deferred cancel write", move |s| {
            s.deferred_cancel_tombstones
                .remove(&(partition, key.clone()));
            s.deferred_cancels.insert((partition, key), at);
        })
    }

    fn forget_deferred_cancel(
        &self,
        partition: PartitionId,
        key: TaskKey,
    ) -> BoxFuture<'static, StoreResult<()>> {
        self.run("deferred cancel delete", move |s| {
            s.deferred_cancels.remove(&(partition, key.clone()));
            s.deferred_cancel_tombstones.insert((partition, key));
        })
    }

    fn deferred_cancels(
        &self,
        partition: PartitionId,
    ) -> BoxFuture<'static, StoreResult<Vec<DeferredCancel>>> {
        self.run("deferred cancels read", move |s| {
            // The whole partition: every tombstone in it is stepped over.
            let stepped_over = (s.deferred_cancel_tombstones.iter())
                .filter(|(p, _)| *p == partition)
                .count();
            s.step_over_tombstones("deferred cancels read", stepped_over)?;
            Ok((s.deferred_cancels.iter())
                .filter(|((p, _), _)| *p == partition)
                .map(|((_, key), at)| (key.clone(), *at))
                .collect())
        })
        .map(|result| result.and_then(|cancels| cancels))
        .boxed()
    }

    fn defer_identity_record(
        &self,
        partition: PartitionId,
        record: DeferredIdentityRecord,
    ) -> BoxFuture<'static, StoreResult<()>> {
        self.run("deferred identity record write", move |s| {
            let row = (partition, record.ordering_id.clone(), record.offset);
            s.deferred_identity_tombstones.remove(&row);
            s.deferred_identity.insert(row, record);
        })
    }

    fn forget_deferred_identity_record(
        &self,
        partition: PartitionId,
        ordering_id: String,
        offset: i64,
    ) -> BoxFuture<'static, StoreResult<()>> {
        self.run("deferred identity record delete", move |s| {
            let row = (partition, ordering_id, offset);
            s.deferred_identity.remove(&row);
            s.deferred_identity_tombstones.insert(row);
        })
    }

    fn deferred_identity_records(
        &self,
        partition: PartitionId,
    ) -> BoxFuture<'static, StoreResult<Vec<DeferredIdentityRecord>>> {
        self.run("deferred identity records read", move |s| {
            // The whole partition: every tombstone in it is stepped over.
            let stepped_over = (s.deferred_identity_tombstones.iter())
                .filter(|(p, _, _)| *p == partition)
                .count();
            s.step_over_tombstones("deferred identity records read", stepped_over)?;
            Ok((s.deferred_identity.iter())
                .filter(|((p, _, _), _)| *p == partition)
                .map(|(_, record)| record.clone())
                .collect())
        })
        .map(|result| result.and_then(|records| records))
        .boxed()
    }

    fn write_stamp(&self) -> WriteStamp {
        let mut state = self.lock();
        state.stamp += 1;
        WriteStamp(i64::try_from(state.stamp).unwrap_or(i64::MAX))
    }

    fn forget_buckets(
        &self,
        partition: PartitionId,
        before: DateTime<Utc>,
        stamp: WriteStamp,
    ) -> BoxFuture<'static, StoreResult<usize>> {
        self.run("bucket delete", move |s| {
            let stamp = u64::try_from(stamp.0).unwrap_or(0);
            let ended = |b: &DateTime<Utc>| *b + chrono::TimeDelta::hours(1) <= before;
            let buckets: Vec<DateTime<Utc>> = s
                .buckets
                .range((partition, crate::store::schedule_start())..)
                .take_while(|((p, b), _)| *p == partition && ended(b))
                .map(|((_, b), _)| *b)
                .collect();
            for bucket in &buckets {
                // Like `USING TIMESTAMP`: what was written after the stamp survives.
                let rows: Vec<TaskKey> = s
                    .schedule
                    .keys()
                    .filter(|(p, k)| *p == partition && hour_bucket(k.scheduled_time) == *bucket)
                    .map(|(_, k)| k.clone())
                    .collect();
                for key in rows {
                    let at = (partition, key);
                    if s.row_stamps.get(&at).is_none_or(|written| *written < stamp) {
                        s.schedule.remove(&at);
                        s.row_stamps.remove(&at);
                    }
                }
                s.tombstones
                    .retain(|(p, k)| *p != partition || hour_bucket(k.scheduled_time) != *bucket);
                if s.buckets
                    .get(&(partition, *bucket))
                    .is_some_and(|w| *w < stamp)
                {
                    s.buckets.remove(&(partition, *bucket));
                }
            }
            buckets.len()
        })
    }
}
