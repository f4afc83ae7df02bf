//! What a partition tree knows of its tasks' statuses, so that a task's run reads its status
//! from Cassandra only where the tree does not know it.
//!
//! Every task is checked for a final status before it runs: a record of a key that finished or
//! was cancelled, delivered again or scheduled again, must not run. The tree reads the statuses
//! of the tasks entering it in batches ([`KnownStatuses::check`]): a polled batch's tasks as
//! they are written to the schedule, a loaded page's as it is loaded, a deferred orderingId's
//! tasks as they are read back; one request per hour bucket and
//! [`KEYS_PER_READ`](crate::store::KEYS_PER_READ) keys, where there was one per task. A key
//! found with no status is *known unfinished*, and its run's status read is answered from
//! memory, once (a retry reads again). A task deferred out of memory is forgotten
//! ([`KnownStatuses::forget`]).
//!
//! Why the answer is still true when the run takes it:
//! - **Earlier trees.** The reads are made after the tree's claim, which fences the earlier trees
//!   of the partition: none records a status after it, but for a call it was already making at
//!   the claim, of an orderingId its lease listed then (the entry is held until the outcome is
//!   recorded). Tasks of those orderingIds ([`crate::lease::TreeLease::listed_at_claim`]) are
//!   not checked in batches: their runs read their status once those calls ended, as before.
//! - **This tree.** Every status the tree writes (a run's final status, a cancel, a revived
//!   identity's cleared status) goes through its `KnownStatuses` (it is the tree's
//!   [`StatusStore`] and [`FinishStore`]), which forgets the key as the write begins; and a
//!   batch read does not record a key whose write was under way at any time since the read
//!   began. So a key is known unfinished only if every write of it ended before the read that
//!   found it began. A cancel applied after a task's status read reaches it through the cancel
//!   gate, as before ([`crate::cancel_gate`]).
//! - **A key found with a status** is not recorded: its run reads it by key (the batch read may
//!   answer with a row deleted after a flush on Cassandra 2.1.0; the read by key does not).
//!
//! The tree remembers at most `capacity` keys; beyond them, tasks read their status as before.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use futures::future::BoxFuture;
use futures::FutureExt;
use scheduler_client::TaskKey;

use crate::store::{FinishStore, PartitionId, StatusRecord, StatusStore, StoreResult};

/// The statuses one partition tree knows. Cheap to clone; clones share what is known.
#[derive(Clone)]
pub struct KnownStatuses {
    shared: Arc<Shared>,
}

struct Shared {
    state: Mutex<State>,
    status: Arc<dyn StatusStore>,
    finish: Arc<dyn FinishStore>,
    capacity: usize,
}

#[derive(Default)]
struct State {
    /// Keys known to have no final status.
    unfinished: HashSet<TaskKey>,
    /// Ticks at every read's start and every write's end while a read is under way.
    tick: u64,
    /// Batch reads under way, by the tick they began at.
    reads: BTreeMap<u64, usize>,
    /// Keys with writes under way, and how many.
    writing: HashMap<TaskKey, usize>,
    /// Keys whose writes ended while a read was under way, with the tick they ended at
    /// (cleared once no read is under way: a later read begins after them).
    ended: HashMap<TaskKey, u64>,
}

impl KnownStatuses {
    /// Knows nothing yet; reads and writes `status` and `finish`; remembers at most `capacity`
    /// keys.
    pub fn new(
        status: Arc<dyn StatusStore>,
        finish: Arc<dyn FinishStore>,
        capacity: usize,
    ) -> Self {
        KnownStatuses {
            shared: Arc::new(Shared {
                state: Mutex::default(),
                status,
                finish,
                capacity,
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.shared
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Reads the statuses of `keys` in batches and records those with none, as far as there is
    /// room. Call it only once the tree's claim completed, and not for the keys of an orderingId
    /// an earlier tree listed then (see the module's doc).
    pub async fn check(&self, partition: PartitionId, keys: Vec<TaskKey>) -> StoreResult<()> {
        let (keys, read) = {
            let mut state = self.lock();
            let room = self.shared.capacity.saturating_sub(state.unfinished.len());
            let keys: Vec<TaskKey> = keys
                .into_iter()
                .filter(|key| !state.unfinished.contains(key))
                .take(room)
                .collect();
            if keys.is_empty() {
                return Ok(());
            }
            (keys, Read::begin(self.clone(), &mut state))
        };
        let found = self
            .shared
            .status
            .with_status(partition, keys.clone())
            .await?;
        self.record(read, keys, &found);
        Ok(())
    }

    /// Forgets `key`: its task left the tree's memory (deferred to Cassandra), and is checked
    /// again when it comes back (a read-back checks its tasks in a batch). So what the tree
    /// remembers is of the tasks in its memory, and a flood deferred beyond them does not fill
    /// `capacity` with keys that run much later while the tasks read back meanwhile each read
    /// their own.
    pub fn forget(&self, key: &TaskKey) {
        self.lock().unfinished.remove(key);
    }

    /// Records the keys of `read` it did not find with a status, unless a write of one was under
    /// way at any time since the read began.
    fn record(&self, read: Read, keys: Vec<TaskKey>, found: &HashSet<TaskKey>) {
        let mut state = self.lock();
        for key in keys {
            let written = state.writing.contains_key(&key)
                || state.ended.get(&key).is_some_and(|end| *end > read.began);
            if found.contains(&key) || written {
                continue;
            }
            if state.unfinished.len() >= self.shared.capacity {
                break;
            }
            state.unfinished.insert(key);
        }
        drop(state);
        drop(read);
    }

    /// Whether `key` is known to have no final status.
    #[cfg(test)]
    fn knows_unfinished(&self, key: &TaskKey) -> bool {
        self.lock().unfinished.contains(key)
    }

    /// How many keys are known unfinished.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.lock().unfinished.len()
    }

    /// A write of `key`'s status begins: `key` is forgotten, and stays out of reads under way
    /// until the returned guard (held for the whole write) is dropped.
    fn writing(&self, key: &TaskKey) -> Write {
        let mut state = self.lock();
        state.unfinished.remove(key);
        *state.writing.entry(key.clone()).or_default() += 1;
        Write {
            known: self.clone(),
            key: key.clone(),
        }
    }

    /// `write` of `key`'s status, with `key` forgotten as it begins and kept out of reads under
    /// way until it ends ([`Self::writing`]).
    fn while_writing<T: Send + 'static>(
        &self,
        key: &TaskKey,
        write: impl FnOnce() -> BoxFuture<'static, StoreResult<T>>,
    ) -> BoxFuture<'static, StoreResult<T>> {
        let guard = self.writing(key);
        let write = write();
        async move {
            let _guard = guard;
            write.await
        }
        .boxed()
    }

    /// `key` if it is known unfinished, forgotten now: a run takes it once.
    fn take_unfinished(&self, key: &TaskKey) -> bool {
        self.lock().unfinished.remove(key)
    }
}

/// A batch read under way.
struct Read {
    known: KnownStatuses,
    began: u64,
}

impl Read {
    fn begin(known: KnownStatuses, state: &mut State) -> Read {
        state.tick += 1;
        let began = state.tick;
        *state.reads.entry(began).or_default() += 1;
        Read { known, began }
    }
}

impl Drop for Read {
    fn drop(&mut self) {
        let mut state = self.known.lock();
        if let Some(count) = state.reads.get_mut(&self.began) {
            *count -= 1;
            if *count == 0 {
                state.reads.remove(&self.began);
            }
        }
        if state.reads.is_empty() {
            state.ended.clear();
        }
    }
}

/// A status write under way (see [`KnownStatuses::writing`]).
struct Write {
    known: KnownStatuses,
    key: TaskKey,
}

impl Drop for Write {
    fn drop(&mut self) {
        let mut state = self.known.lock();
        if let Some(count) = state.writing.get_mut(&self.key) {
            *count -= 1;
            if *count == 0 {
                state.writing.remove(&self.key);
            }
        }
        if !state.reads.is_empty() {
            state.tick += 1;
            let tick = state.tick;
            state.ended.insert(self.key.clone(), tick);
        }
    }
}

/// The tree's status reads: a key known unfinished is answered without a request.
impl StatusStore for KnownStatuses {
    fn status(
        &self,
        partition: PartitionId,
        key: TaskKey,
    ) -> BoxFuture<'static, StoreResult<Option<StatusRecord>>> {
        if self.take_unfinished(&key) {
            return futures::future::ready(Ok(None)).boxed();
        }
        self.shared.status.status(partition, key)
    }

    fn with_status(
        &self,
        partition: PartitionId,
        keys: Vec<TaskKey>,
    ) -> BoxFuture<'static, StoreResult<HashSet<TaskKey>>> {
        self.shared.status.with_status(partition, keys)
    }

    fn record_status(
        &self,
        partition: PartitionId,
        key: TaskKey,
        status: StatusRecord,
    ) -> BoxFuture<'static, StoreResult<()>> {
        let status_store = &self.shared.status;
        self.while_writing(&key, || {
            status_store.record_status(partition, key.clone(), status)
        })
    }

    fn clear_status(
        &self,
        partition: PartitionId,
        key: TaskKey,
    ) -> BoxFuture<'static, StoreResult<()>> {
        let status_store = &self.shared.status;
        self.while_writing(&key, || status_store.clear_status(partition, key.clone()))
    }

    fn record_status_if_absent(
        &self,
        partition: PartitionId,
        key: TaskKey,
        status: StatusRecord,
    ) -> BoxFuture<'static, StoreResult<Option<StatusRecord>>> {
        let status_store = &self.shared.status;
        self.while_writing(&key, || {
            status_store.record_status_if_absent(partition, key.clone(), status)
        })
    }
}

/// The tree's final writes: the key is forgotten as the write begins.
impl FinishStore for KnownStatuses {
    fn finish(
        &self,
        partition: PartitionId,
        key: TaskKey,
        status: StatusRecord,
    ) -> BoxFuture<'static, StoreResult<()>> {
        let finish = &self.shared.finish;
        self.while_writing(&key, || finish.finish(partition, key.clone(), status))
    }
}

#[cfg(test)]
mod tests;
