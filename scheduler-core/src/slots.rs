//! The executor pool's slots: a counting semaphore whose waiters are served by priority, then in
//! the order they came (tokio's semaphore is first come, first served only). Only one task of an
//! orderingId waits at a time, so priority never reorders the tasks of one orderingId.

use std::collections::BinaryHeap;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::oneshot;

/// `slots` slots, handed to the highest-priority waiter as each is given back.
#[derive(Debug)]
pub(crate) struct PrioritySlots {
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    free: usize,
    waiting: BinaryHeap<Waiter>,
    /// Arrival numbers: equal priorities are served first come, first served.
    arrivals: u64,
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
pub(crate) struct SlotPermit(Arc<PrioritySlots>);

impl Drop for SlotPermit {
    fn drop(&mut self) {
        self.0.give_back();
    }
}

/// A waiter's side while it waits: dropped before its slot came, it leaves the queue; dropped
/// just after, it gives the slot back.
struct Waiting {
    woken: oneshot::Receiver<()>,
    slots: Arc<PrioritySlots>,
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

impl PrioritySlots {
    pub(crate) fn new(slots: usize) -> Arc<PrioritySlots> {
        Arc::new(PrioritySlots {
            state: Mutex::new(State {
                free: slots,
                waiting: BinaryHeap::new(),
                arrivals: 0,
            }),
        })
    }

    /// A slot, once one is free and no waiter of a higher priority (or of the same priority,
    /// come earlier) waits for one.
    pub(crate) async fn acquire(self: &Arc<Self>, priority: i32) -> SlotPermit {
        let woken = {
            let mut state = self.lock();
            if state.free > 0 && state.waiting.is_empty() {
                state.free -= 1;
                return SlotPermit(Arc::clone(self));
            }
            let (wake, woken) = oneshot::channel();
            state.arrivals += 1;
            let arrival = state.arrivals;
            state.waiting.push(Waiter {
                priority,
                arrival,
                wake,
            });
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

    /// Hands a slot to the best waiter still waiting, or frees it.
    fn give_back(&self) {
        let mut state = self.lock();
        while let Some(waiter) = state.waiting.pop() {
            if waiter.wake.send(()).is_ok() {
                return;
            }
        }
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

    #[tokio::test]
    async fn waiters_are_served_by_priority_then_arrival_and_leavers_lose_nothing() {
        let slots = PrioritySlots::new(1);
        let held = slots.acquire(0).await;
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut waiters = Vec::new();
        for (name, priority) in [("low", -1), ("mid-1", 5), ("high", 9), ("mid-2", 5)] {
            let (slots, order) = (Arc::clone(&slots), Arc::clone(&order));
            waiters.push(tokio::spawn(async move {
                let slot = slots.acquire(priority).await;
                order.lock().unwrap().push(name);
                drop(slot);
            }));
            tokio::task::yield_now().await;
        }
        // A waiter that gives up leaves the queue without taking a slot with it.
        let mut leaver = Box::pin(slots.acquire(100));
        assert!((&mut leaver).now_or_never().is_none());
        drop(leaver);
        drop(held);
        for waiter in waiters {
            waiter.await.unwrap();
        }
        assert_eq!(*order.lock().unwrap(), ["high", "mid-1", "mid-2", "low"]);
        // Every slot is free again.
        let _a = slots.acquire(0).now_or_never().expect("a free slot");
    }
}
