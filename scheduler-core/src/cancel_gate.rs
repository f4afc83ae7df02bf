//! Cancellations a partition tree is applying, as seen by tasks whose checks are already done.
//!
//! A task's status is read before its time (it is dispatched early, so the checks are off the
//! due path) and before it waits for an executor slot. A cancel the tree applies after that
//! read would not be seen by it: the task *arms* the gate before its status read, and every
//! cancel touches the armed task of its key and is *applying* until its status write has
//! completed. A touched task does not call; it waits until no cancel of its key is applying and
//! takes its checks again (the status read now sees the cancellation, or that it was not
//! recorded). A task armed while a cancel of its key is applying starts touched, and one armed
//! after it completed reads the recorded status: no interleaving misses a cancel.
//!
//! Updates of an identity's current task ([`crate::identity`]) go through the gate the same
//! way, and the gate also tells them which calls have **begun**: a task [`Armed::begin`]s its
//! call under the gate's lock once its checks hold, and its call counts as begun until the
//! last clone of its [`Armed`] is dropped, once its outcome is recorded. So an update that
//! holds a key as applying and then asks [`CancelGate::began`] either finds the call begun
//! (it took the data it had: the update makes a new version of the task) or keeps it from
//! beginning until the update is written (the task checks again and runs the new data).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use scheduler_client::TaskKey;
use tokio::sync::Notify;

/// The cancel gate of one partition tree. Cheap to clone; clones share the gate.
#[derive(Clone, Default)]
pub struct CancelGate {
    inner: Arc<Inner>,
}

#[derive(Default)]
struct Inner {
    state: Mutex<State>,
    /// Woken whenever cancels stop applying.
    settled: Notify,
}

#[derive(Default)]
struct State {
    /// Keys with cancels applying, and how many.
    applying: HashMap<TaskKey, usize>,
    /// Keys of tasks between their status read and their call, with each one's touched flag.
    armed: HashMap<TaskKey, Vec<Arc<AtomicBool>>>,
    /// Keys whose call began and whose outcome is not recorded yet, and how many.
    began: HashMap<TaskKey, usize>,
}

impl CancelGate {
    /// A gate with nothing armed or applying.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.inner
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Cancels of `keys` are being applied until the returned guard is dropped (once their
    /// status writes completed or failed). Armed tasks of these keys are touched.
    pub fn applying(&self, keys: &[TaskKey]) -> Applying {
        let mut state = self.lock();
        for key in keys {
            *state.applying.entry(key.clone()).or_default() += 1;
            for touched in state.armed.get(key).into_iter().flatten() {
                touched.store(true, Ordering::SeqCst);
            }
        }
        Applying {
            gate: self.clone(),
            keys: keys.to_vec(),
        }
    }

    /// Arms the gate for `key` before its status read: the returned guard tells whether a
    /// cancel of it was applying since.
    pub fn arm(&self, key: &TaskKey) -> Armed {
        let mut state = self.lock();
        let touched = Arc::new(AtomicBool::new(state.applying.contains_key(key)));
        state
            .armed
            .entry(key.clone())
            .or_default()
            .push(Arc::clone(&touched));
        Armed {
            arm: Arc::new(Arm {
                gate: self.clone(),
                key: key.clone(),
                touched,
                began: AtomicBool::new(false),
            }),
        }
    }

    /// Whether a call of `key` began ([`Armed::begin`]) and its outcome is not recorded yet.
    /// Asked while `key` is held as applying, the answer stays true until the update is
    /// written: no call of it begins meanwhile.
    pub fn began(&self, key: &TaskKey) -> bool {
        self.lock().began.contains_key(key)
    }

    fn is_applying(&self, key: &TaskKey) -> bool {
        self.lock().applying.contains_key(key)
    }
}

/// Cancels being applied; dropping it ends them.
pub struct Applying {
    gate: CancelGate,
    keys: Vec<TaskKey>,
}

impl Drop for Applying {
    fn drop(&mut self) {
        let mut state = self.gate.lock();
        for key in &self.keys {
            if let Some(n) = state.applying.get_mut(key) {
                *n -= 1;
                if *n == 0 {
                    state.applying.remove(key);
                }
            }
        }
        drop(state);
        self.gate.inner.settled.notify_waiters();
    }
}

/// A task armed between its status read and its call (and, once its call began, until its
/// outcome is recorded); dropping its last clone disarms.
#[derive(Clone)]
pub struct Armed {
    arm: Arc<Arm>,
}

struct Arm {
    gate: CancelGate,
    key: TaskKey,
    touched: Arc<AtomicBool>,
    /// Its call began (counted in the gate's `began`).
    began: AtomicBool,
}

impl Armed {
    /// Whether a cancel of the task was applying at any time since it was armed.
    pub fn touched(&self) -> bool {
        self.arm.touched.load(Ordering::SeqCst)
    }

    /// Just before the call: whether no cancel or update of the task was applying since it was
    /// armed; if none was, its call counts as begun from now on (see the module docs).
    pub fn begin(&self) -> bool {
        let mut state = self.arm.gate.lock();
        if self.touched() {
            return false;
        }
        if !self.arm.began.swap(true, Ordering::SeqCst) {
            *state.began.entry(self.arm.key.clone()).or_default() += 1;
        }
        true
    }

    /// Resolves once a cancel of the task was applied since it was armed and none is applying
    /// any more (a task waiting out a suspension stops waiting for it).
    pub async fn cancelled(&self) {
        loop {
            let settled = self.arm.gate.inner.settled.notified();
            if self.touched() && !self.arm.gate.is_applying(&self.arm.key) {
                return;
            }
            settled.await;
        }
    }

    /// Resolves once no cancel of the task is applying.
    pub async fn settled(&self) {
        loop {
            let settled = self.arm.gate.inner.settled.notified();
            if !self.arm.gate.is_applying(&self.arm.key) {
                return;
            }
            settled.await;
        }
    }
}

impl Drop for Arm {
    fn drop(&mut self) {
        let mut state = self.gate.lock();
        if let Some(arms) = state.armed.get_mut(&self.key) {
            arms.retain(|touched| !Arc::ptr_eq(touched, &self.touched));
            if arms.is_empty() {
                state.armed.remove(&self.key);
            }
        }
        if self.began.load(Ordering::SeqCst) {
            if let Some(n) = state.began.get_mut(&self.key) {
                *n -= 1;
                if *n == 0 {
                    state.began.remove(&self.key);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::Utc;

    fn key(unique: &str) -> TaskKey {
        scheduler_client::Task::new("o", Utc::now(), unique, Default::default()).key()
    }

    #[test]
    fn a_cancel_touches_tasks_armed_before_or_during_it_and_no_other() {
        let gate = CancelGate::new();
        let (a, b, c) = (key("a"), key("b"), key("c"));
        let armed_a = gate.arm(&a);
        let applying = gate.applying(&[a.clone(), b.clone()]);
        let armed_b = gate.arm(&b);
        let armed_c = gate.arm(&c);
        assert!(armed_a.touched(), "armed before the cancel");
        assert!(armed_b.touched(), "armed while the cancel applied");
        assert!(!armed_c.touched(), "another key");
        drop(applying);
        assert!(
            !gate.arm(&a).touched(),
            "armed after the cancel completed: its status read sees it"
        );
        drop((armed_a, armed_b, armed_c));
        let state = gate.lock();
        assert!(state.armed.is_empty() && state.applying.is_empty());
    }

    #[test]
    fn a_call_begins_unless_touched_and_counts_as_begun_until_its_last_clone_is_dropped() {
        let gate = CancelGate::new();
        let (a, b) = (key("a"), key("b"));
        let armed_a = gate.arm(&a);
        let kept = armed_a.clone();
        assert!(!gate.began(&a));
        assert!(armed_a.begin() && armed_a.begin(), "begins, once");
        let applying = gate.applying(std::slice::from_ref(&a));
        assert!(
            gate.began(&a),
            "an update applying after the call began sees it"
        );
        drop(armed_a);
        assert!(
            gate.began(&a),
            "until the outcome is recorded (the kept clone)"
        );
        drop(kept);
        assert!(!gate.began(&a));
        drop(applying);

        let armed_b = gate.arm(&b);
        let applying = gate.applying(std::slice::from_ref(&b));
        assert!(
            !armed_b.begin(),
            "an update applying first keeps the call from beginning"
        );
        assert!(!gate.began(&b));
        drop((applying, armed_b));
        let state = gate.lock();
        assert!(state.armed.is_empty() && state.began.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn settled_waits_for_the_cancel_to_complete() {
        let gate = CancelGate::new();
        let a = key("a");
        let armed = gate.arm(&a);
        let applying = gate.applying(std::slice::from_ref(&a));
        let wait = armed.settled();
        tokio::pin!(wait);
        assert!(futures::poll!(wait.as_mut()).is_pending());
        drop(applying);
        assert!(futures::poll!(wait.as_mut()).is_ready());
    }
}
