//! How many tasks each partition tree holds in memory: the gauge that keeps a tree within
//! `max_in_flight_tasks`, read by the node's metrics, readiness and admin API.
//!
//! Counting is done by guards: a task in memory travels as a [`HeldTask`], and room reserved for
//! a read under way as a [`Held`]; dropping either gives its count back. So a task stops counting
//! however it leaves memory (run, replaced, cancelled, deferred to Cassandra, or dropped with an
//! actor that stopped), and no path has to remember to subtract it.
//!
//! A held task also **pins** its due time (a [`Pin`]) until it is done with, and so do the
//! deferred tasks of an orderingId (an anonymous pin: they are in Cassandra, not here). The
//! partition's low-water mark (TaskPersistence) never passes a task without a final status
//! unless that task is listed with the mark ([`InFlight::behind`]): a held task is named by its
//! key, so the mark may pass it, listing it; an anonymous pin stops the mark.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use chrono::{DateTime, Utc};
use scheduler_client::{Task, TaskKey};

/// Pinned due times, each with the held task's key (none for deferred tasks), and how many
/// pins each.
type Pins = BTreeMap<(DateTime<Utc>, Option<TaskKey>), usize>;

/// What a listed key costs beyond its two strings (its time and the list's encoding).
const LISTED_KEY_OVERHEAD: usize = 24;

use crate::store::PartitionId;

/// The tasks of one partition held in memory: waiting in the PartitionScheduler, or queued or
/// running in the PartitionExecutor. The scheduler adds, the executor removes; the
/// ThroughputController and TaskPersistence read it to keep memory under `max_in_flight_tasks`.
#[derive(Debug, Default)]
pub struct InFlight {
    current: AtomicUsize,
    peak: AtomicUsize,
    held: AtomicUsize,
    loaded: std::sync::atomic::AtomicBool,
    /// Due times pinned by tasks not done with (by key, or anonymous for deferred tasks), with
    /// how many pin each.
    pins: Mutex<Pins>,
    /// The latest due time of a pin released so far (a task done with).
    latest_released: Mutex<Option<DateTime<Utc>>>,
    /// The partition's low-water mark as TaskPersistence last recorded it.
    low_water: Mutex<Option<DateTime<Utc>>>,
}

impl InFlight {
    /// Counts each of `tasks` in memory for as long as it lives.
    pub fn hold(self: &Arc<Self>, tasks: Vec<Task>) -> Vec<HeldTask> {
        self.add(tasks.len());
        tasks
            .into_iter()
            .map(|task| HeldTask {
                held: Held {
                    gauge: Arc::clone(self),
                    count: 1,
                    pin: Some(self.pin_as(task.scheduled_time, Some(task.key()))),
                },
                task,
            })
            .collect()
    }

    /// Pins `at` until the result is dropped, for tasks not in memory: the low-water mark
    /// stays at or before it.
    pub fn pin(self: &Arc<Self>, at: DateTime<Utc>) -> Pin {
        self.pin_as(at, None)
    }

    fn pin_as(self: &Arc<Self>, at: DateTime<Utc>, key: Option<TaskKey>) -> Pin {
        *self.pins().entry((at, key.clone())).or_default() += 1;
        Pin {
            gauge: Arc::clone(self),
            at,
            key,
        }
    }

    fn pins(&self) -> std::sync::MutexGuard<'_, Pins> {
        self.pins.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Where the low-water mark may go, at most `up_to`, and the tasks it passes: the keys of
    /// the held tasks due before it, at most `max_listed` of them and `max_bytes` of their
    /// keys. The mark stops at the first anonymous pin (deferred tasks) and where the list is
    /// full.
    pub fn behind(
        &self,
        up_to: DateTime<Utc>,
        max_listed: usize,
        max_bytes: usize,
    ) -> (DateTime<Utc>, Vec<TaskKey>) {
        let pins = self.pins();
        let mut listed: Vec<TaskKey> = Vec::new();
        let mut bytes = 0;
        let mut mark = up_to;
        for (at, key) in pins.keys() {
            if *at >= up_to {
                break;
            }
            let Some(key) = key else {
                mark = *at;
                break;
            };
            let size = key.ordering_id.len() + key.uniqueness_key.len() + LISTED_KEY_OVERHEAD;
            if listed.len() == max_listed || bytes + size > max_bytes {
                mark = *at;
                break;
            }
            bytes += size;
            listed.push(key.clone());
        }
        // Ties of the pin the mark stopped at are not behind it.
        listed.retain(|key| key.scheduled_time < mark);
        (mark, listed)
    }

    /// How many tasks held now are due before `t`.
    pub fn held_before(&self, t: DateTime<Utc>) -> usize {
        self.pins()
            .range(..(t, None))
            .filter(|((_, key), _)| key.is_some())
            .map(|(_, n)| n)
            .sum()
    }

    /// Publishes the low-water mark TaskPersistence recorded (or read at the tree's start).
    pub fn set_low_water(&self, at: DateTime<Utc>) {
        *self
            .low_water
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(at);
    }

    /// The partition's low-water mark, once TaskPersistence knows it: every task due before it
    /// is final.
    pub fn low_water(&self) -> Option<DateTime<Utc>> {
        *self
            .low_water
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The latest due time of the tasks done with so far (of every released pin).
    pub fn latest_released(&self) -> Option<DateTime<Utc>> {
        *self
            .latest_released
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Counts room for `n` tasks (a read under way) until the result is dropped, so that other
    /// reads meanwhile cannot take it.
    pub fn reserve(self: &Arc<Self>, n: usize) -> Held {
        self.add(n);
        Held {
            gauge: Arc::clone(self),
            count: n,
            pin: None,
        }
    }

    fn add(&self, n: usize) {
        let now = self.current.fetch_add(n, Ordering::SeqCst) + n;
        self.peak.fetch_max(now, Ordering::SeqCst);
    }

    fn remove(&self, n: usize) {
        let _ = self
            .current
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |c| {
                Some(c.saturating_sub(n))
            });
    }

    /// Tasks in memory now.
    pub fn current(&self) -> usize {
        self.current.load(Ordering::SeqCst)
    }

    /// The most tasks in memory at once since the partition started.
    #[cfg(test)]
    pub fn peak(&self) -> usize {
        self.peak.load(Ordering::SeqCst)
    }

    /// Records how many of them the PartitionScheduler holds (not yet due).
    pub fn set_held(&self, n: usize) {
        self.held.store(n, Ordering::SeqCst);
    }

    /// How many the PartitionScheduler holds; the rest are queued or running.
    pub fn held(&self) -> usize {
        self.held.load(Ordering::SeqCst)
    }

    /// Records that the tree's first load of its schedule completed.
    pub fn mark_loaded(&self) {
        self.loaded.store(true, Ordering::SeqCst);
    }

    /// Whether the tree's first load of its schedule completed.
    pub fn is_loaded(&self) -> bool {
        self.loaded.load(Ordering::SeqCst)
    }
}

/// A share of a partition's in-flight count, given back when dropped.
#[derive(Debug)]
#[must_use = "the count is given back as soon as this is dropped"]
pub struct Held {
    gauge: Arc<InFlight>,
    count: usize,
    /// A task's pin (none for reserved room, or once taken by [`HeldTask::into_parts`]).
    pin: Option<Pin>,
}

impl Drop for Held {
    fn drop(&mut self) {
        self.gauge.remove(self.count);
    }
}

/// A due time pinned in a partition's gauge (see the module's doc), released when dropped.
#[derive(Debug)]
#[must_use = "the pin is released as soon as this is dropped"]
pub struct Pin {
    gauge: Arc<InFlight>,
    at: DateTime<Utc>,
    /// The held task's key; `None` for deferred tasks.
    key: Option<TaskKey>,
}

impl Drop for Pin {
    fn drop(&mut self) {
        let mut pins = self.gauge.pins();
        let slot = (self.at, self.key.take());
        if let Some(n) = pins.get_mut(&slot) {
            *n -= 1;
            if *n == 0 {
                pins.remove(&slot);
            }
        }
        drop(pins);
        let mut latest = self
            .gauge
            .latest_released
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        *latest = (*latest).max(Some(self.at));
    }
}

/// A task in memory, counted in its partition's gauge while it lives.
#[derive(Debug)]
pub struct HeldTask {
    task: Task,
    held: Held,
}

impl HeldTask {
    /// The task, its pin and its count: the count lives as long as the returned [`Held`], the
    /// pin as long as the returned [`Pin`].
    pub fn into_parts(self) -> (Task, Option<Pin>, Held) {
        let mut held = self.held;
        (self.task, held.pin.take(), held)
    }
}

impl std::ops::Deref for HeldTask {
    type Target = Task;

    fn deref(&self) -> &Task {
        &self.task
    }
}

/// The in-flight gauges of the partitions this node runs (a partition's tree gets a fresh one
/// each time it starts).
#[derive(Debug, Default, Clone)]
pub struct InFlightGauges(Arc<Mutex<HashMap<PartitionId, Arc<InFlight>>>>);

impl InFlightGauges {
    /// A fresh gauge for a partition tree that is starting.
    pub fn start(&self, partition: PartitionId) -> Arc<InFlight> {
        let gauge = Arc::new(InFlight::default());
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(partition, Arc::clone(&gauge));
        gauge
    }

    /// The gauge of a partition's current (or last) tree.
    pub fn get(&self, partition: PartitionId) -> Option<Arc<InFlight>> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&partition)
            .cloned()
    }

    /// Forgets the gauge of a partition no longer run here.
    pub fn forget(&self, partition: PartitionId) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&partition);
    }

    /// Whether the node is ready: it owns partitions and each one's tree has loaded its
    /// schedule once.
    pub fn ready(&self, owned: &[PartitionId]) -> bool {
        !owned.is_empty()
            && owned
                .iter()
                .all(|p| self.get(*p).is_some_and(|g| g.is_loaded()))
    }

    /// Every partition's gauge, by partition.
    pub fn all(&self) -> Vec<(PartitionId, Arc<InFlight>)> {
        let mut all: Vec<_> = self
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .map(|(p, g)| (*p, Arc::clone(g)))
            .collect();
        all.sort_by_key(|(p, _)| *p);
        all
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: i64) -> DateTime<Utc> {
        DateTime::<Utc>::from_timestamp(1_900_000_000 + secs, 0).unwrap_or_default()
    }

    fn task(o: &str, secs: i64) -> Task {
        Task::new(o, at(secs), "u", Default::default())
    }

    #[test]
    fn the_mark_passes_held_tasks_listing_them_and_stops_at_deferred_ones() {
        let gauge = Arc::new(InFlight::default());
        let held = gauge.hold(vec![task("a", 1), task("b", 2), task("c", 5)]);
        let (mark, listed) = gauge.behind(at(4), 10, 1 << 20);
        assert_eq!(mark, at(4));
        assert_eq!(listed, vec![held[0].key(), held[1].key()]);
        // Deferred tasks are not in memory: their pin stops the mark.
        let deferred = gauge.pin(at(2));
        let (mark, listed) = gauge.behind(at(4), 10, 1 << 20);
        assert_eq!((mark, listed), (at(2), vec![held[0].key()]));
        drop(deferred);
        assert_eq!(gauge.held_before(at(5)), 2);
        drop(held);
        assert_eq!(gauge.behind(at(4), 10, 1 << 20), (at(4), Vec::new()));
    }

    #[test]
    fn a_full_list_stops_the_mark_at_the_first_task_left_out_and_its_ties() {
        let gauge = Arc::new(InFlight::default());
        let held = gauge.hold(vec![task("a", 1), task("b", 2), task("c", 2), task("d", 3)]);
        let (mark, listed) = gauge.behind(at(10), 2, 1 << 20);
        // `b` fits, `c` does not: the mark stops at their time, so `b` is not behind it.
        assert_eq!((mark, listed), (at(2), vec![held[0].key()]));
        let one_key = held[0].ordering_id.len() + held[0].uniqueness_key.len() + 24;
        let (mark, listed) = gauge.behind(at(10), 10, one_key);
        assert_eq!((mark, listed), (at(2), vec![held[0].key()]));
    }
}
