//! The executor pool's slots: a counting semaphore whose waiters take turns by limit key
//! (`Task::limit_key`; the tasks without one are one key together), each key in turn handing
//! the slot to its own best waiter: the highest priority, then the earliest come (tokio's
//! semaphore is first come, first served only). So under saturation the keys with waiting tasks
//! share the slots evenly, and a key with a million due tasks delays another key's task by one
//! turn per slot at most (issue 33, "fair shares"). A key's weight (a per-key override, 1 by
//! default) is how many slots it is given in a row at its turn: a weighted round robin, so keys
//! with waiters share the slots in proportion to their weights. Without limit keys, every waiter is of one
//! key and is served by priority, then in the order it came. Only one task of an orderingId
//! waits at a time, so neither turns nor priority reorder the tasks of one orderingId.

use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::oneshot;

/// A limit key, or none: the class a waiter takes its turns in.
type Key = Option<String>;

/// A key's weight: how many slots it is given in a row at its turn (at least 1).
pub(crate) type Weights = Arc<dyn Fn(&str) -> u32 + Send + Sync>;

/// `slots` slots, handed to the best waiter of the key whose turn it is as each is given back.
pub(crate) struct FairSlots {
    state: Mutex<State>,
    weights: Option<Weights>,
    slots: usize,
}

impl std::fmt::Debug for FairSlots {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FairSlots")
            .field("state", &self.state)
            .finish_non_exhaustive()
    }
}

#[derive(Debug)]
struct State {
    free: usize,
    /// The waiters of each key with waiters (a key without any is removed).
    waiting: HashMap<Key, BinaryHeap<Waiter>>,
    /// The keys with waiters, in the order of their turns: the front is served next, and goes
    /// to the back while it still has waiters.
    turns: VecDeque<Key>,
    /// Arrival numbers: equal priorities are served first come, first served.
    arrivals: u64,
    /// Slots the key at the front was given in its turn so far.
    front_served: u32,
}

#[derive(Debug)]
struct Waiter {
    priority: i32,
    arrival: u64,
    wake: oneshot::Sender<()>,
}

impl PartialEq for Waiter {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other).is_eq()
    }
}

impl Eq for Waiter {}

impl PartialOrd for Waiter {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Waiter {
    /// The greatest is served first: the highest priority, then the earliest arrival.
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.priority
            .cmp(&other.priority)
            .then(other.arrival.cmp(&self.arrival))
    }
}

/// A slot, given back when dropped.
#[derive(Debug)]
pub(crate) struct SlotPermit(Arc<FairSlots>);

impl Drop for SlotPermit {
    fn drop(&mut self) {
        self.0.give_back();
    }
}

/// A waiter's side while it waits: dropped before its slot came, it leaves the queue; dropped
/// just after, it gives the slot back.
struct Waiting {
    woken: oneshot::Receiver<()>,
    slots: Arc<FairSlots>,
    served: bool,
}

impl Drop for Waiting {
    fn drop(&mut self) {
        if !self.served {
            self.woken.close();
            if self.woken.try_recv().is_ok() {
                self.slots.give_back();
            }
        }
    }
}

impl FairSlots {
    pub(crate) fn new(slots: usize) -> Arc<FairSlots> {
        FairSlots::weighted(slots, None)
    }

    /// `slots` slots, each key given `weights` of them in a row at its turn (none: 1 each).
    pub(crate) fn weighted(slots: usize, weights: Option<Weights>) -> Arc<FairSlots> {
        Arc::new(FairSlots {
            state: Mutex::new(State {
                free: slots,
                waiting: HashMap::new(),
                turns: VecDeque::new(),
                arrivals: 0,
                front_served: 0,
            }),
            weights,
            slots,
        })
    }

    /// How many slots there are.
    pub(crate) fn slots(&self) -> usize {
        self.slots
    }

    fn weight_of(&self, key: &Key) -> u32 {
        match (&self.weights, key) {
            (Some(weights), Some(key)) => weights(key).max(1),
            _ => 1,
        }
    }

    /// A slot, once one is free and it is the turn of `key` (whose other waiters of a higher
    /// priority, or of the same priority come earlier, are served first). A slot is free only
    /// while nobody waits.
    pub(crate) async fn acquire(self: &Arc<Self>, priority: i32, key: Option<&str>) -> SlotPermit {
        let woken = {
            let mut state = self.lock();
            if state.free > 0 && state.waiting.is_empty() {
                state.free -= 1;
                return SlotPermit(Arc::clone(self));
            }
            let (wake, woken) = oneshot::channel();
            state.arrivals += 1;
            let arrival = state.arrivals;
            let key: Key = key.map(String::from);
            let waiter = Waiter {
                priority,
                arrival,
                wake,
            };
            match state.waiting.get_mut(&key) {
                Some(waiters) => waiters.push(waiter),
                None => {
                    state
                        .waiting
                        .insert(key.clone(), BinaryHeap::from([waiter]));
                    state.turns.push_back(key);
                }
            }
            woken
        };
        let mut waiting = Waiting {
            woken,
            slots: Arc::clone(self),
            served: false,
        };
        // A waiter's sender is only dropped by sending to it.
        let _ = (&mut waiting.woken).await;
        waiting.served = true;
        SlotPermit(Arc::clone(self))
    }

    /// Hands a slot to the best waiter still waiting of the key whose turn it is, or frees it.
    /// A key keeps its turn until it was given its weight's worth of slots in a row.
    fn give_back(&self) {
        let mut state = self.lock();
        while let Some(key) = state.turns.pop_front() {
            let Some(waiters) = state.waiting.get_mut(&key) else {
                state.front_served = 0;
                continue;
            };
            let mut served = false;
            while let Some(waiter) = waiters.pop() {
                if waiter.wake.send(()).is_ok() {
                    served = true;
                    break;
                }
            }
            let left = !waiters.is_empty();
            if !left {
                state.waiting.remove(&key);
            }
            state.front_served += u32::from(served);
            if left && served && state.front_served < self.weight_of(&key) {
                // Its turn goes on.
                state.turns.push_front(key);
            } else {
                state.front_served = 0;
                if left {
                    state.turns.push_back(key);
                }
            }
            if served {
                return;
            }
        }
        state.front_served = 0;
        state.free += 1;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::FutureExt;

    /// Waiters (name, priority, key) queued one after another behind a held slot; the order
    /// they were served in once it is given back.
    async fn served_order(
        waiters: &[(&'static str, i32, Option<&'static str>)],
    ) -> Vec<&'static str> {
        served_order_of(FairSlots::new(1), waiters).await
    }

    /// [`served_order`] on `slots` (of one slot).
    async fn served_order_of(
        slots: Arc<FairSlots>,
        waiters: &[(&'static str, i32, Option<&'static str>)],
    ) -> Vec<&'static str> {
        let held = slots.acquire(0, None).await;
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        for &(name, priority, key) in waiters {
            let (slots, order) = (Arc::clone(&slots), Arc::clone(&order));
            tasks.push(tokio::spawn(async move {
                let slot = slots.acquire(priority, key).await;
                order.lock().unwrap().push(name);
                drop(slot);
            }));
            tokio::task::yield_now().await;
        }
        drop(held);
        for task in tasks {
            task.await.unwrap();
        }
        // Every slot is free again.
        let _a = slots.acquire(0, None).now_or_never().expect("a free slot");
        let order = order.lock().unwrap().clone();
        order
    }

    #[tokio::test]
    async fn waiters_are_served_by_priority_then_arrival_and_leavers_lose_nothing() {
        let slots = FairSlots::new(1);
        let held = slots.acquire(0, None).await;
        // A waiter that gives up leaves the queue without taking a slot with it.
        let mut leaver = Box::pin(slots.acquire(100, None));
        assert!((&mut leaver).now_or_never().is_none());
        drop(leaver);
        drop(held);
        let _a = slots.acquire(0, None).now_or_never().expect("a free slot");
        let order = served_order(&[
            ("low", -1, None),
            ("mid-1", 5, None),
            ("high", 9, None),
            ("mid-2", 5, None),
        ])
        .await;
        assert_eq!(order, ["high", "mid-1", "mid-2", "low"]);
    }

    #[tokio::test]
    async fn keys_take_turns_and_within_a_key_priority_then_arrival_decides() {
        // Key a floods first; b and the tasks without a key come after, yet each is served in
        // the first round of turns, not after all of a's.
        let order = served_order(&[
            ("a-1", 0, Some("a")),
            ("a-2", 0, Some("a")),
            ("a-3", 5, Some("a")),
            ("a-4", 0, Some("a")),
            ("b-1", 0, Some("b")),
            ("none-1", 0, None),
            ("b-2", 0, Some("b")),
        ])
        .await;
        assert_eq!(order, ["a-3", "b-1", "none-1", "a-1", "b-2", "a-2", "a-4"]);
    }

    #[tokio::test]
    async fn a_keys_weight_is_how_many_slots_it_is_given_in_a_row_at_its_turn() {
        let weights: Weights = Arc::new(|key: &str| if key == "a" { 3 } else { 1 });
        let order = served_order_of(
            FairSlots::weighted(1, Some(weights)),
            &[
                ("a-1", 0, Some("a")),
                ("a-2", 0, Some("a")),
                ("a-3", 0, Some("a")),
                ("a-4", 0, Some("a")),
                ("a-5", 0, Some("a")),
                ("b-1", 0, Some("b")),
                ("b-2", 0, Some("b")),
                ("b-3", 0, Some("b")),
            ],
        )
        .await;
        assert_eq!(
            order,
            ["a-1", "a-2", "a-3", "b-1", "a-4", "a-5", "b-2", "b-3"]
        );
    }
}
