//! How many tasks each partition tree holds in memory: the gauge that keeps a tree within
//! `max_in_flight_tasks`, read by the node's metrics, readiness and admin API.
//!
//! Counting is done by guards: a task in memory travels as a [`HeldTask`], and room reserved for
//! a read under way as a [`Held`]; dropping either gives its count back. So a task stops counting
//! however it leaves memory (run, replaced, cancelled, deferred to Cassandra, or dropped with an
//! actor that stopped), and no path has to remember to subtract it.
//!
//! A held task also **pins** its due time (a [`Pin`]) until it is done with, and so do the
//! deferred tasks of an orderingId (they are in Cassandra, not here). The partition's low-water
//! mark (TaskPersistence) never passes a task without a final status unless the mark names it
//! ([`InFlight::behind`]): a held task is named by its key, so the mark may pass it, listing
//! it; deferred tasks all listed in the tree's deferred-task list of their orderingId are named
//! by that list, so the mark may pass them too, naming the list; deferred tasks not all listed
//! yet (an anonymous pin) stop the mark.
//!
//! A tree takes rows out of a list once it has read them back, but the last mark written may
//! still name the list from an earlier row: [`InFlight::keep_listed_from`] says which rows a
//! mark written or being written still needs.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use chrono::{DateTime, Utc};
use scheduler_client::{RunOrder, Task, TaskKey};

/// What pins a due time, in the order of the ties of one time.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Pinned {
    /// Deferred tasks not all listed yet: the mark stops here.
    Unlisted,
    /// Deferred tasks all listed in a list, from a run order on: the mark passes, naming it.
    List(ListBehind),
    /// A held task: the mark passes, listing its key.
    Task(TaskKey),
}

/// Pinned due times, each with what pins it, and how many pins each.
type Pins = BTreeMap<(DateTime<Utc>, Pinned), usize>;

/// Where the low-water mark may go ([`InFlight::behind`]), and what it passes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Passed {
    /// The mark.
    pub at: DateTime<Utc>,
    /// The held tasks due before it.
    pub keys: Vec<TaskKey>,
    /// The deferred-task lists whose tasks from their run order on, up to the mark, it passes.
    pub lists: Vec<ListBehind>,
}

/// The lists named by marks being written or written last, to keep their rows
/// ([`InFlight::keep_listed_from`]).
#[derive(Debug, Default)]
struct Named {
    /// Marks being written (or whose write failed: it may still apply), by sequence number.
    writing: BTreeMap<u64, Vec<ListBehind>>,
    /// The lists the last mark recorded names.
    recorded: Vec<ListBehind>,
    next: u64,
    /// Whether a mark ever named one of the tree's lists.
    ever: bool,
}

/// What a listed key costs beyond its two strings (its time and the list's encoding).
const LISTED_KEY_OVERHEAD: usize = 24;

use crate::store::{DeferralList, ListBehind, PartitionId};

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
    /// The lists named by marks being written or written last.
    named: Mutex<Named>,
    /// Per orderingId, the run orders of its tasks the PartitionScheduler holds.
    pending: Mutex<HashMap<String, BTreeMap<RunOrder, usize>>>,
    /// Per limit key, how many of its tasks the PartitionScheduler holds.
    pending_of_key: Mutex<HashMap<String, usize>>,
    /// The orderingIds whose due tasks the PartitionExecutor defers.
    deferring: Mutex<std::collections::HashSet<String>>,
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
                    pin: Some(self.pin_as(task.scheduled_time, Pinned::Task(task.key()))),
                },
                task,
            })
            .collect()
    }

    /// Pins `at` until the result is dropped, for deferred tasks not all listed yet: the
    /// low-water mark stays at or before it.
    pub fn pin(self: &Arc<Self>, at: DateTime<Utc>) -> Pin {
        self.pin_as(at, Pinned::Unlisted)
    }

    /// Pins the first run order of `list` until the result is dropped, for deferred tasks all
    /// listed in it from there on: the low-water mark may pass them, naming the list.
    pub fn pin_list(self: &Arc<Self>, list: ListBehind) -> Pin {
        self.pin_as(list.from.scheduled_time, Pinned::List(list))
    }

    fn pin_as(self: &Arc<Self>, at: DateTime<Utc>, owner: Pinned) -> Pin {
        *self.pins().entry((at, owner.clone())).or_default() += 1;
        Pin {
            gauge: Arc::clone(self),
            at,
            owner,
        }
    }

    fn pins(&self) -> std::sync::MutexGuard<'_, Pins> {
        self.pins.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Where the low-water mark may go, at most `up_to`, and what it passes: the keys of the
    /// held tasks due before it and the lists of the deferred tasks due before it, at most
    /// `max_listed` of them and `max_bytes` of their keys. The mark stops at the first deferred
    /// tasks not all listed and where its list is full.
    pub fn behind(&self, up_to: DateTime<Utc>, max_listed: usize, max_bytes: usize) -> Passed {
        let pins = self.pins();
        let (mut keys, mut lists) = (Vec::<TaskKey>::new(), Vec::<ListBehind>::new());
        let mut bytes = 0;
        let mut mark = up_to;
        for (at, owner) in pins.keys() {
            if *at >= up_to {
                break;
            }
            let size = match owner {
                Pinned::Unlisted => {
                    mark = *at;
                    break;
                }
                Pinned::Task(key) => key.ordering_id.len() + key.uniqueness_key.len(),
                Pinned::List(l) => {
                    l.list.tree.len() + l.list.ordering_id.len() + l.from.uniqueness_key.len()
                }
            } + LISTED_KEY_OVERHEAD;
            if keys.len() + lists.len() == max_listed || bytes + size > max_bytes {
                mark = *at;
                break;
            }
            bytes += size;
            match owner {
                Pinned::Task(key) => keys.push(key.clone()),
                Pinned::List(list) => lists.push(list.clone()),
                Pinned::Unlisted => {}
            }
        }
        // Ties of the pin the mark stopped at are not behind it.
        keys.retain(|key| key.scheduled_time < mark);
        lists.retain(|list| list.from.scheduled_time < mark);
        Passed {
            at: mark,
            keys,
            lists,
        }
    }

    /// How many tasks held now are due before `t`.
    pub fn held_before(&self, t: DateTime<Utc>) -> usize {
        self.pins()
            .range(..(t, Pinned::Unlisted))
            .filter(|((_, owner), _)| matches!(owner, Pinned::Task(_)))
            .map(|(_, n)| n)
            .sum()
    }

    fn named(&self) -> std::sync::MutexGuard<'_, Named> {
        self.named.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records that a mark naming `lists` is being written; returns the number to report its
    /// outcome with ([`Self::recorded`]). Until a later mark is recorded, the rows of these
    /// lists from their run orders on are kept.
    pub fn writing(&self, lists: &[ListBehind]) -> u64 {
        let mut named = self.named();
        let seq = named.next;
        named.next += 1;
        named.ever |= !lists.is_empty();
        named.writing.insert(seq, lists.to_vec());
        seq
    }

    /// Records that the mark written as `seq` is recorded at `at`: the marks written before it
    /// no longer count.
    pub fn recorded(&self, seq: u64, at: DateTime<Utc>) {
        let mut named = self.named();
        let later = named.writing.split_off(&(seq + 1));
        if let Some(lists) = named.writing.remove(&seq) {
            named.recorded = lists;
        }
        named.writing = later;
        drop(named);
        self.set_low_water(at);
    }

    /// The first run order of `list` whose row a mark written or being written may still
    /// need (`None`: no mark names the list, every row read back may be taken out).
    pub fn keep_listed_from(&self, list: &DeferralList) -> Option<RunOrder> {
        let named = self.named();
        (named.writing.values().flatten())
            .chain(&named.recorded)
            .filter(|l| l.list == *list)
            .map(|l| l.from.clone())
            .min()
    }

    /// Records that the mark written as `seq` was refused (the tree is fenced).
    pub fn refused(&self, seq: u64) {
        self.named().writing.remove(&seq);
    }

    /// Whether a mark ever named one of the tree's deferred-task lists (the next tree may take
    /// it over: it is not dropped).
    pub fn named_a_list(&self) -> bool {
        self.named().ever
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

    fn pending_runs(
        &self,
    ) -> std::sync::MutexGuard<'_, HashMap<String, BTreeMap<RunOrder, usize>>> {
        self.pending.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn pending_of_key(&self) -> std::sync::MutexGuard<'_, HashMap<String, usize>> {
        self.pending_of_key
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether `task`, not due yet, is to be deferred as it comes rather than held by the
    /// PartitionScheduler: its limit key has `share` (plus `more` about to be) held there, or
    /// its orderingId's tasks are being deferred (it runs after them).
    pub fn to_defer(&self, task: &Task, share: usize, more: usize) -> bool {
        let key_at_share = (task.limit_key.as_ref()).is_some_and(|key| {
            self.pending_of_key().get(key).copied().unwrap_or(0) + more >= share
        });
        key_at_share || self.is_deferring(&task.ordering_id)
    }

    /// The PartitionScheduler holds `task` (`true`) or no longer does.
    pub fn pending(&self, task: &Task, held: bool) {
        if let Some(key) = &task.limit_key {
            let mut of_key = self.pending_of_key();
            let n = of_key.entry(key.clone()).or_default();
            match held {
                true => *n += 1,
                false => *n = n.saturating_sub(1),
            }
            if *n == 0 {
                of_key.remove(key);
            }
        }
        let mut pending = self.pending_runs();
        let (ordering_id, run) = (&task.ordering_id, task.run_order());
        if held {
            let runs = pending.entry(ordering_id.clone()).or_default();
            *runs.entry(run).or_default() += 1;
            return;
        }
        let Some(runs) = pending.get_mut(ordering_id) else {
            return;
        };
        if let Some(n) = runs.get_mut(&run) {
            *n -= 1;
            if *n == 0 {
                runs.remove(&run);
            }
        }
        if runs.is_empty() {
            pending.remove(ordering_id);
        }
    }

    /// The first task of `ordering_id` the PartitionScheduler holds, in run order: it is
    /// dispatched before a deferred task of the orderingId after it is read back.
    pub fn first_pending(&self, ordering_id: &str) -> Option<RunOrder> {
        (self.pending_runs().get(ordering_id)).and_then(|runs| runs.keys().next().cloned())
    }

    fn deferring(&self) -> std::sync::MutexGuard<'_, std::collections::HashSet<String>> {
        self.deferring
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The PartitionExecutor defers `ordering_id`'s tasks (`true`), or no longer does.
    pub fn set_deferring(&self, ordering_id: &str, deferring: bool) {
        match deferring {
            true => self.deferring().insert(ordering_id.to_string()),
            false => self.deferring().remove(ordering_id),
        };
    }

    /// Whether the PartitionExecutor defers `ordering_id`'s tasks: a later one is deferred
    /// as it comes (the PartitionScheduler holds none of it meanwhile).
    pub fn is_deferring(&self, ordering_id: &str) -> bool {
        self.deferring().contains(ordering_id)
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
    /// What pins it.
    owner: Pinned,
}

impl Drop for Pin {
    fn drop(&mut self) {
        let mut pins = self.gauge.pins();
        let slot = (
            self.at,
            std::mem::replace(&mut self.owner, Pinned::Unlisted),
        );
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

    fn passed(
        gauge: &InFlight,
        up_to: i64,
        max: usize,
        bytes: usize,
    ) -> (DateTime<Utc>, Vec<TaskKey>) {
        let passed = gauge.behind(at(up_to), max, bytes);
        (passed.at, passed.keys)
    }

    fn list(o: &str, secs: i64) -> ListBehind {
        ListBehind {
            list: DeferralList {
                partition: 0,
                tree: "t".into(),
                ordering_id: o.into(),
            },
            from: task(o, secs).run_order(),
        }
    }

    #[test]
    fn the_mark_passes_held_tasks_listing_them_and_stops_at_deferred_ones_not_all_listed() {
        let gauge = Arc::new(InFlight::default());
        let held = gauge.hold(vec![task("a", 1), task("b", 2), task("c", 5)]);
        assert_eq!(
            passed(&gauge, 4, 10, 1 << 20),
            (at(4), vec![held[0].key(), held[1].key()])
        );
        // Deferred tasks are not in memory: until all are listed, their pin stops the mark.
        let deferred = gauge.pin(at(2));
        assert_eq!(passed(&gauge, 4, 10, 1 << 20), (at(2), vec![held[0].key()]));
        drop(deferred);
        assert_eq!(gauge.held_before(at(5)), 2);
        drop(held);
        assert_eq!(passed(&gauge, 4, 10, 1 << 20), (at(4), Vec::new()));
    }

    #[test]
    fn the_mark_passes_deferred_tasks_all_listed_naming_their_list() {
        let gauge = Arc::new(InFlight::default());
        let held = gauge.hold(vec![task("a", 1), task("c", 5)]);
        let listed = gauge.pin_list(list("b", 2));
        let unlisted = gauge.pin(at(3));
        let passed = gauge.behind(at(10), 10, 1 << 20);
        assert_eq!(passed.at, at(3), "the tasks not all listed stop it");
        assert_eq!(passed.keys, vec![held[0].key()]);
        assert_eq!(passed.lists, vec![list("b", 2)]);
        drop(unlisted);
        let passed = gauge.behind(at(10), 10, 1 << 20);
        assert_eq!(passed.at, at(10));
        assert_eq!(passed.keys, vec![held[0].key(), held[1].key()]);
        // A list counts as one entry of the mark's list.
        assert_eq!(gauge.behind(at(10), 1, 1 << 20).at, at(2));
        drop(listed);
        assert!(gauge.behind(at(10), 10, 1 << 20).lists.is_empty());
        assert_eq!(gauge.held_before(at(10)), 2, "lists hold no task in memory");
    }

    /// Rows read back are taken out of a list only once no mark written, or being written,
    /// names the list from an earlier run order: a new tree takes the list over from there.
    #[test]
    fn a_lists_rows_are_kept_from_where_a_mark_written_or_being_written_names_it() {
        let gauge = Arc::new(InFlight::default());
        let (first, later) = (list("b", 2), list("b", 4));
        assert_eq!(gauge.keep_listed_from(&first.list), None);
        let seq = gauge.writing(std::slice::from_ref(&first));
        assert_eq!(
            gauge.keep_listed_from(&first.list),
            Some(first.from.clone())
        );
        gauge.recorded(seq, at(3));
        assert_eq!(
            gauge.keep_listed_from(&first.list),
            Some(first.from.clone())
        );
        // A write that fails may still apply: it counts until a later one is recorded.
        gauge.writing(std::slice::from_ref(&later));
        let next = gauge.writing(std::slice::from_ref(&later));
        assert_eq!(
            gauge.keep_listed_from(&first.list),
            Some(first.from.clone())
        );
        gauge.recorded(next, at(5));
        assert_eq!(
            gauge.keep_listed_from(&first.list),
            Some(later.from.clone())
        );
        let refused = gauge.writing(&[]);
        gauge.refused(refused);
        assert_eq!(
            gauge.keep_listed_from(&first.list),
            Some(later.from.clone())
        );
        let none = gauge.writing(&[]);
        gauge.recorded(none, at(6));
        assert_eq!(gauge.keep_listed_from(&first.list), None);
        assert!(gauge.named_a_list());
        assert_eq!(gauge.low_water(), Some(at(6)));
    }
    #[test]
    fn a_full_list_stops_the_mark_at_the_first_task_left_out_and_its_ties() {
        let gauge = Arc::new(InFlight::default());
        let held = gauge.hold(vec![task("a", 1), task("b", 2), task("c", 2), task("d", 3)]);
        // `b` fits, `c` does not: the mark stops at their time, so `b` is not behind it.
        assert_eq!(passed(&gauge, 10, 2, 1 << 20), (at(2), vec![held[0].key()]));
        let one_key = held[0].ordering_id.len() + held[0].uniqueness_key.len() + 24;
        assert_eq!(
            passed(&gauge, 10, 10, one_key),
            (at(2), vec![held[0].key()])
        );
    }
}
