//! A simulated node's process pause, and the store and clock as the node sees them: the shared
//! in-memory store behind a gate that a pause of the node's process closes. A request made while the process is paused never reaches
//! the store, and one under way when the pause began loses its answer (it may have been applied):
//! both fail once the pause ends, as requests cut by a long pause time out. So a paused node
//! changes nothing meanwhile: its lease expires, and after the pause it must find out that it was
//! fenced before it records anything.

use std::sync::{Arc, Mutex, PoisonError};

use chrono::{DateTime, Utc};
use futures::future::BoxFuture;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::store::memory::Gate;

/// Whether a node's process is paused (and how many pauses began so far): shared by its store
/// and its executor. A pause may also be set to begin on the node's next request of one kind
/// (a trap), so it falls where a step is most fragile: between two writes of one task's record.
/// Waiters are woken in the order they began to wait (a `watch` channel would wake them in a
/// random order, and a replayed seed would not run the same way).
#[derive(Clone)]
pub(super) struct Pause {
    state: Arc<Mutex<(bool, u64)>>,
    changed: Arc<Notify>,
    /// The operation whose next request pauses the process, and when a trap last sprang.
    trap: Arc<Mutex<Trap>>,
}

#[derive(Default)]
struct Trap {
    armed: Option<&'static str>,
    sprung: Option<Instant>,
}

impl Pause {
    pub(super) fn new() -> Pause {
        Pause {
            state: Arc::default(),
            changed: Arc::new(Notify::new()),
            trap: Arc::default(),
        }
    }

    pub(super) fn set(&self, paused: bool) {
        {
            let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
            if paused && !state.0 {
                state.1 += 1;
            }
            state.0 = paused;
        }
        self.changed.notify_waiters();
    }

    pub(super) fn is_paused(&self) -> bool {
        self.state.lock().unwrap_or_else(PoisonError::into_inner).0
    }

    fn pauses_begun(&self) -> u64 {
        self.state.lock().unwrap_or_else(PoisonError::into_inner).1
    }

    /// Resolves once the process runs again.
    pub(super) async fn resumed(&self) {
        self.until(false).await;
    }

    /// Resolves once the process is paused.
    pub(super) async fn paused(&self) {
        self.until(true).await;
    }

    async fn until(&self, paused: bool) {
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if self.is_paused() == paused {
                return;
            }
            changed.await;
        }
    }

    /// Pauses the process as its next `operation` request is made (`None` disarms).
    pub(super) fn arm(&self, operation: Option<&'static str>) {
        self.trap().armed = operation;
    }

    /// When a trap sprang since the last call, if one did (the world then moves the node's
    /// partitions on, as for any pause).
    pub(super) fn take_sprung(&self) -> Option<Instant> {
        self.trap().sprung.take()
    }

    /// Springs the trap if `operation` is what it waits for.
    fn spring(&self, operation: &'static str) {
        let mut trap = self.trap();
        if trap.armed == Some(operation) && !self.is_paused() {
            trap.armed = None;
            trap.sprung = Some(Instant::now());
            self.set(true);
        }
    }

    fn trap(&self) -> std::sync::MutexGuard<'_, Trap> {
        self.trap.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The store, as one node whose process may be paused sees it: each of its requests passes
/// the node's pause ([`MemoryStore::with_gate`]).
impl Gate for Pause {
    fn send(&self, operation: &'static str) -> Option<u64> {
        self.spring(operation);
        (!self.is_paused()).then(|| self.pauses_begun())
    }

    fn answer(&self, sent: Option<u64>) -> BoxFuture<'static, bool> {
        let pause = self.clone();
        Box::pin(async move {
            if sent.is_some_and(|sent| pause.pauses_begun() == sent) {
                return true;
            }
            pause.resumed().await;
            false
        })
    }
}

/// The clock as one simulated node sees it: a timer that falls due while the node's process is
/// paused fires once the process runs again (as a real process's timers do), so a node never
/// acts on a timer during its pause.
pub(super) struct PausableClock {
    pub(super) clock: crate::clock::TokioClock,
    pub(super) pause: Pause,
}

impl crate::clock::Clock for PausableClock {
    fn now(&self) -> DateTime<Utc> {
        self.clock.now()
    }

    fn sleep_until(&self, at: DateTime<Utc>) -> BoxFuture<'static, ()> {
        let sleep = self.clock.sleep_until(at);
        let pause = self.pause.clone();
        Box::pin(async move {
            sleep.await;
            pause.resumed().await;
        })
    }
}
