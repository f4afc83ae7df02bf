//! A queue's share, on this node, of each limit key's `key_concurrency` permits across the
//! cluster: the [`Ledger`] takes permits from the store (`crate::store::permits`) when tasks of a
//! key wait and the node holds none free, hands them to its waiters in the order they came, and
//! gives them back once its tasks of the key no longer need them for [`LINGER`].
//!
//! - **Taking and giving back** is one lightweight transaction on the key's row (its holders and
//!   a version), made by the ledger's own task, never by a task's run: a key whose permits stay
//!   with a node costs nothing per task. A node takes what its tasks need and, while they need
//!   any, a reserve of a quarter of the limit when free (`kept`), so a key whose tasks come and go
//!   is not taken and given back one permit at a time. A take at least doubles what the node
//!   holds (`taken`), and it gives back only what is beyond twice what it keeps (`beyond`), so a
//!   demand that climbs and falls changes the key's row a few times, not once a round it moved
//!   in. Permits move between nodes at the pace of `LINGER`.
//! - **Nodes whose tasks want a key at once share it.** A node whose take found none free leaves
//!   a want in the key's row (its name with none), and tries again often while it is there. A
//!   holder that uses all it holds of the key with more of its tasks waiting, or whose tasks use
//!   the key's rate, reads the row every `LOOK`; seeing a want, it keeps no more than its even
//!   share (`Share`) and gives back the rest as soon as it is not in use. The want goes once its
//!   node holds some, or its tasks no longer wait. A node keeps every unit of a key's rate it can
//!   while its tasks need any, and its even share while other nodes hold some.
//! - **Liveness.** The holder writes its heartbeat row every third of `lease_ttl`, with a TTL of
//!   `lease_ttl`. Its permits count while the row lives; a holder whose row expired is dropped
//!   from a key's row by the next node that changes it, so a dead node's permits return after
//!   `lease_ttl`.
//! - **A node cut off** from the store cannot renew its row: two thirds of `lease_ttl` after its
//!   last heartbeat began (before the row can expire), its permits lapse. No task starts a call
//!   under them after that (a pass is checked just before the call), the holder takes a new name,
//!   and it takes its permits again once it reaches the store. The calls it had started run on:
//!   while it is cut off and its row has expired, a key may run those beside the limit's worth on
//!   other nodes. Once back, the node counts them (they keep their permits' places) before it
//!   starts another.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use futures::future::BoxFuture;
use futures::FutureExt;
use tokio::sync::{oneshot, Notify};
use tracing::{debug, warn};

use super::Scope;
use crate::clock::Clock;
use crate::hooks::GatePass;
use crate::metrics::{Metrics, WaitingForHandler};
use crate::store::{PermitStore, StoreResult};

/// What a key's permits count: its calls at once (`key_concurrency`), or units of its starts a
/// second (`key_rate`: a node holding `n` of a key's units may start its tasks at `n` units'
/// share of the rate; see `rate`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Counted {
    Calls,
    Starts,
}

/// What a ledger counts permits of: a key's calls or its starts, in a scope.
pub(super) type Counter = (Counted, Scope);

/// How long a key's permits stay with a node after its tasks stopped needing them (a key whose
/// tasks come often keeps them, with no write per task).
pub(super) const LINGER: Duration = Duration::from_secs(1);
/// How often the ledger looks at its keys (gives back what lingered, tries again for keys none
/// was free of); a task needing a permit wakes it at once.
const TICK: Duration = Duration::from_millis(100);
/// The longest wait before trying again for a key none was free of.
const MAX_BACKOFF: Duration = Duration::from_secs(1);
/// The longest wait before trying again for a key whose row holds this node's want: its holders
/// give back all but their share within `LOOK`, or once their tasks stop, and a node that
/// tries that often takes them soon after (one read a try, while its tasks wait).
const MAX_WANT_BACKOFF: Duration = Duration::from_millis(200);
/// How often a node reads the row of a key whose units of rate its tasks use, or whose permits
/// it holds all in use with more of its tasks waiting, to see whether other nodes' tasks want
/// some (one read a second per such key, not per task).
const LOOK: Duration = LINGER;
/// Keys whose permits are taken or given back at once.
const CHANGES_AT_ONCE: usize = 64;
/// Lightweight transactions lost to another holder in a row before a change waits a tick.
const SWAP_TRIES: u32 = 3;

/// This node's permits of the keys in use (see the module above).
pub(super) struct Ledger {
    state: Mutex<State>,
    wake: Arc<Notify>,
    store: Arc<dyn PermitStore>,
    clock: Arc<dyn Clock>,
    metrics: Arc<Metrics>,
    /// The heartbeat row's TTL (`lease_ttl`).
    ttl: Duration,
    /// Where the ledger's task runs, from the first permit asked for.
    runtime: tokio::runtime::Handle,
    /// Changes of keys' permits under way at once.
    changes: Arc<tokio::sync::Semaphore>,
    started: std::sync::Once,
}

struct State {
    /// This node's id, the start of every holder name it takes.
    node: String,
    /// When the ledger began (milliseconds), telling a restarted node's holders apart.
    began: i64,
    /// Bumped by each lapse: permits of an older one are not this holder's.
    generation: u64,
    /// The holder name of this generation.
    holder: String,
    /// Until when this holder's permits may start calls (`None`: none yet, or lapsed).
    valid_until: Option<DateTime<Utc>>,
    next_beat: DateTime<Utc>,
    /// The holders alive at the last read.
    alive: BTreeSet<String>,
    keys: BTreeMap<Counter, Key>,
}

/// One key's permits on this node.
struct Key {
    limit: usize,
    /// Taken from the store (this generation's).
    held: usize,
    /// Given to tasks and not back yet (of any generation: a lapsed generation's calls still
    /// run, and count against the next one's permits).
    in_use: usize,
    /// Tasks waiting for a permit, in the order they came.
    waiters: VecDeque<oneshot::Sender<Permit>>,
    /// Since when more are held than used and waited for.
    surplus_since: Option<DateTime<Utc>>,
    /// No take before then (none was free).
    retry_at: Option<DateTime<Utc>>,
    /// Takes in a row that found none free.
    empty_takes: u32,
    /// When a permit was last given or given back, or a task came: a key is idle once its
    /// tasks needed none for `LINGER` (the ledger looks only every tick, and a key whose
    /// calls are short needs none at most of those moments).
    last_busy: DateTime<Utc>,
    /// A change of its permits is under way.
    changing: bool,
    /// The other holders in the key's row at this node's last read of it (see `Share`).
    share: Share,
    /// This node's entry in the key's row is a want (none held; its tasks wait for some).
    wanting: bool,
    /// When this node last read the key's row.
    looked_at: DateTime<Utc>,
}

impl Key {
    fn new(limit: usize, now: DateTime<Utc>) -> Key {
        Key {
            limit,
            held: 0,
            in_use: 0,
            waiters: VecDeque::new(),
            surplus_since: None,
            retry_at: None,
            empty_takes: 0,
            last_busy: now,
            changing: false,
            share: Share::default(),
            wanting: false,
            looked_at: now,
        }
    }

    /// The permits its tasks may use: those held, within a limit lowered since they were taken
    /// (the surplus goes back after `LINGER`), and within this node's share while other nodes'
    /// tasks want some (the rest goes back as soon as it is not in use).
    fn usable(&self) -> usize {
        self.held.min(self.usable_limit())
    }

    /// Permits used and waited for (waiters that stopped waiting are let go first).
    /// The most of its limit this node's tasks may use: within its share while other nodes'
    /// tasks want some.
    fn usable_limit(&self) -> usize {
        self.share.cap(self.limit)
    }

    fn demand(&mut self) -> usize {
        self.waiters.retain(|w| !w.is_closed());
        self.in_use + self.waiters.len()
    }
}

/// A task's permit of its key, given back when dropped (when its call returned, or it stopped
/// waiting for its slot).
pub(super) struct Permit {
    ledger: Option<Arc<Ledger>>,
    scope: Counter,
    generation: u64,
}

impl Drop for Permit {
    fn drop(&mut self) {
        if let Some(ledger) = self.ledger.take() {
            ledger.give_back(&self.scope);
        }
    }
}

impl Ledger {
    /// The ledger of node `node`'s permits in `store`, its holder alive for `ttl` after each
    /// heartbeat; its task runs on `runtime` from the first permit asked for while the ledger
    /// is in use (a queue whose tasks never need one writes nothing).
    pub(super) fn start(
        node: &str,
        store: Arc<dyn PermitStore>,
        clock: Arc<dyn Clock>,
        metrics: Arc<Metrics>,
        ttl: Duration,
        runtime: &tokio::runtime::Handle,
    ) -> Arc<Ledger> {
        let now = clock.now();
        let began = now.timestamp_millis();
        Arc::new(Ledger {
            state: Mutex::new(State {
                node: node.to_string(),
                began,
                generation: 0,
                holder: holder_name(node, began, 0),
                valid_until: None,
                next_beat: now,
                alive: BTreeSet::new(),
                keys: BTreeMap::new(),
            }),
            wake: Arc::new(Notify::new()),
            store,
            clock,
            metrics,
            ttl,
            runtime: runtime.clone(),
            changes: Arc::new(tokio::sync::Semaphore::new(CHANGES_AT_ONCE)),
            started: std::sync::Once::new(),
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A permit of `scope`'s key (at most `limit` across the cluster) for a task of
    /// `task_type`: at once if this node holds one free and no task waits, else once one comes.
    pub(super) fn permit(
        self: &Arc<Self>,
        scope: Counter,
        limit: usize,
        held_by_limit: impl FnOnce() -> WaitingForHandler,
    ) -> BoxFuture<'static, GatePass> {
        self.started.call_once(|| {
            let task = keep(Arc::downgrade(self), Arc::clone(&self.wake));
            self.runtime.spawn(task);
        });
        let now = self.clock.now();
        let mut state = self.lock();
        let valid = state.valid_at(now);
        let generation = state.generation;
        let key = (state.keys)
            .entry(scope.clone())
            .or_insert_with(|| Key::new(limit, now));
        key.limit = limit;
        key.last_busy = now;
        if valid && key.waiters.is_empty() && key.in_use < key.usable() {
            key.in_use += 1;
            drop(state);
            let permit = self.permit_of(scope, generation);
            return futures::future::ready(self.pass(permit)).boxed();
        }
        let (sender, receiver) = oneshot::channel();
        key.waiters.push_back(sender);
        drop(state);
        self.wake.notify_one();
        let ledger = Arc::clone(self);
        let held = held_by_limit();
        async move {
            match receiver.await {
                Ok(permit) => {
                    drop(held);
                    ledger.pass(permit)
                }
                // The ledger is gone (its queue stops): the tree stops this task's wait.
                Err(_) => futures::future::pending().await,
            }
        }
        .boxed()
    }

    fn permit_of(self: &Arc<Self>, scope: Counter, generation: u64) -> Permit {
        Permit {
            ledger: Some(Arc::clone(self)),
            scope,
            generation,
        }
    }

    /// `permit` as a gate's pass, valid while its generation's permits are.
    fn pass(self: &Arc<Self>, permit: Permit) -> GatePass {
        let (ledger, generation) = (Arc::clone(self), permit.generation);
        GatePass::new(permit).valid_while(move || ledger.valid(generation))
    }

    /// Whether a permit of `generation` may start a call now.
    fn valid(&self, generation: u64) -> bool {
        let now = self.clock.now();
        let state = self.lock();
        state.generation == generation && state.valid_at(now)
    }

    /// A task's permit of `scope` came back: to the next waiter, if the holder may hand it on.
    fn give_back(self: &Arc<Self>, scope: &Counter) {
        let now = self.clock.now();
        let mut state = self.lock();
        let (valid, generation) = (state.valid_at(now), state.generation);
        let Some(key) = state.keys.get_mut(scope) else {
            return;
        };
        key.in_use = key.in_use.saturating_sub(1);
        key.last_busy = now;
        if valid {
            self.hand_on(key, scope, generation);
        }
    }

    /// Gives the permits `key` holds free to its waiters, in the order they came.
    fn hand_on(self: &Arc<Self>, key: &mut Key, scope: &Counter, generation: u64) {
        while key.in_use < key.usable() {
            let Some(waiter) = key.waiters.pop_front() else {
                return;
            };
            key.in_use += 1;
            if let Err(mut permit) = waiter.send(self.permit_of(scope.clone(), generation)) {
                // It stopped waiting: the permit was never out.
                permit.ledger = None;
                key.in_use -= 1;
            }
        }
    }

    /// One round of the ledger's task: the heartbeat when due (or a lapse, if it may have
    /// expired), then the keys' takes and give-backs. When to run again.
    async fn round(self: &Arc<Self>) -> DateTime<Utc> {
        self.lapse_if_due(self.clock.now());
        self.beat_if_due().await;
        let now = self.clock.now();
        let (takes, gives, holder, generation) = {
            let mut state = self.lock();
            let valid = state.valid_at(now);
            let mut takes = Vec::new();
            let mut gives = Vec::new();
            state.keys.retain(|scope, key| {
                let demand = key.demand();
                if demand == 0 && key.held == 0 && !key.wanting && !key.changing {
                    return false;
                }
                if key.changing {
                    return true;
                }
                let keep = kept(scope, demand, key.limit, key.share);
                let wanted = match scope.0 {
                    Counted::Calls => demand.min(key.usable_limit()),
                    Counted::Starts => keep,
                };
                let look_due = now - key.looked_at >= delta(LOOK);
                if key.held < wanted {
                    key.surplus_since = None;
                    // A node with a share of a rate other nodes share too takes more (what
                    // they gave back) at its looks, not at every try.
                    let shared = scope.0 == Counted::Starts && key.held > 0 && key.share.others > 0;
                    let may = !shared || look_due;
                    if valid && may && key.retry_at.is_none_or(|at| at <= now) {
                        key.changing = true;
                        takes.push((scope.clone(), key.limit));
                    }
                } else if beyond(scope, key.held, keep, key.usable_limit())
                    || (key.wanting && demand == 0)
                {
                    // Unused for `LINGER`, beyond what is kept for `LINGER`, or over a limit
                    // lowered since they were taken; beyond this node's share at once, while
                    // its tasks use the rest (other nodes' tasks want them); a want once no
                    // task waits. Permits given to calls go back once the calls return.
                    let since = *key.surplus_since.get_or_insert(now);
                    let due = demand > 0 || now - key.last_busy >= delta(LINGER);
                    // (A rate's units are split between the holders listed; a key's calls
                    // at once only while one of them wants some.)
                    let shared = demand > 0
                        && match scope.0 {
                            Counted::Starts => key.share.others > 0,
                            Counted::Calls => key.share.wanted,
                        };
                    let free = scope.0 == Counted::Starts || key.held > key.in_use;
                    let linger_over = due && now - since >= delta(LINGER);
                    if key.held == 0 || (free && (shared || linger_over)) {
                        key.changing = true;
                        gives.push((scope.clone(), key.limit));
                    }
                } else {
                    key.surplus_since = None;
                    // A node whose tasks use the key's rate, or all the permits it holds
                    // of the key's calls with more waiting, looks whether other nodes' want some.
                    let using = match scope.0 {
                        Counted::Starts => demand > 0,
                        Counted::Calls => demand > key.held,
                    };
                    if key.held > 0 && using && look_due {
                        // A look: whether other nodes' tasks want the key's rate (the read
                        // changes nothing unless they do).
                        key.changing = true;
                        gives.push((scope.clone(), key.limit));
                    }
                }
                true
            });
            (takes, gives, state.holder.clone(), state.generation)
        };
        // Each change on its own, so a key's change never waits for another key's: a task
        // waiting for a permit waits for its own key's transaction only.
        let changes = takes.into_iter().map(|c| (c, true));
        let changes = changes.chain(gives.into_iter().map(|c| (c, false)));
        for ((scope, limit), take) in changes {
            let (ledger, holder) = (Arc::clone(self), holder.clone());
            self.runtime.spawn(async move {
                let at_once = Arc::clone(&ledger.changes).acquire_owned().await;
                let changed = ledger.change(&scope, limit, &holder, generation, take).await;
                drop(at_once);
                if let Err(error) = changed {
                    ledger.metrics.key_permit_write("failed");
                    warn!(limit_key = %scope.1 .1, %error, "changing the key's permits failed; trying again");
                    ledger.back_off(&scope, generation, ledger.clock.now());
                }
                if let Some(key) = ledger.lock().keys.get_mut(&scope) {
                    key.changing = false;
                }
                ledger.wake.notify_one();
            });
        }
        let next_beat = self.lock().next_beat;
        next_beat.min(now + delta(TICK))
    }

    /// Writes the holder's heartbeat if it is due, and reads the holders alive.
    async fn beat_if_due(&self) {
        let began = self.clock.now();
        let (holder, generation) = {
            let state = self.lock();
            if began < state.next_beat {
                return;
            }
            (state.holder.clone(), state.generation)
        };
        let beat = self.store.beat(holder.clone(), self.ttl).await;
        let alive = match beat {
            Ok(()) => self.store.live_holders().await.ok(),
            Err(ref error) => {
                warn!(%holder, %error, "the key permits' heartbeat failed; trying again");
                None
            }
        };
        // A heartbeat that ended after the permits' time ran out may have landed after the
        // row expired (others may have taken the permits meanwhile): it renews nothing.
        let ended = self.clock.now();
        self.lapse_if_due(ended);
        let mut state = self.lock();
        if state.generation != generation {
            return;
        }
        match beat {
            Ok(()) => {
                // Renewed before the row expired (it lives `ttl` after it was written, after
                // `began`, by whichever clock); calls stop at two thirds of that.
                state.valid_until = Some(began + delta(self.ttl * 2 / 3));
                state.next_beat = began + delta(self.ttl / 3);
                if let Some(alive) = alive {
                    state.alive = alive.into_iter().collect();
                }
            }
            Err(_) => state.next_beat = self.clock.now() + delta(TICK),
        }
    }

    /// Lapses the holder's permits if their time ran out by `now`.
    fn lapse_if_due(&self, now: DateTime<Utc>) {
        let mut state = self.lock();
        if state.valid_until.is_some_and(|until| now >= until) {
            self.lapse(&mut state, now);
        }
    }

    /// The holder's permits may have expired: none starts a call any more, and it takes a new
    /// name and its permits again.
    fn lapse(&self, state: &mut State, now: DateTime<Utc>) {
        let lapsed = std::mem::replace(
            &mut state.holder,
            holder_name(&state.node, state.began, state.generation + 1),
        );
        state.generation += 1;
        state.valid_until = None;
        state.next_beat = now;
        for key in state.keys.values_mut() {
            key.held = 0;
            key.retry_at = None;
            key.wanting = false;
        }
        self.metrics.key_permit_write("lapsed");
        warn!(holder = %lapsed, "this node's key permits lapsed (its heartbeat may have expired): no call starts under them; taking them again");
    }

    /// Takes (`take`) or gives back `scope`'s permits to match this node's demand, as
    /// `holder` of `generation`.
    async fn change(
        self: &Arc<Self>,
        scope: &Counter,
        limit: usize,
        holder: &str,
        generation: u64,
        take: bool,
    ) -> StoreResult<()> {
        let (scope_name, key_name) = (scope_name(scope), scope.1 .1.clone());
        let mut refreshed = false;
        for _ in 0..SWAP_TRIES {
            let row = (self.store)
                .key_holders(scope_name.clone(), key_name.clone())
                .await?;
            let (version, mut holders) = match row {
                Some(row) => (Some(row.version), row.holders),
                None => (None, BTreeMap::new()),
            };
            let unknown = |alive: &BTreeSet<String>, holders: &BTreeMap<String, u32>| {
                (holders.keys()).any(|h| h.as_str() != holder && !alive.contains(h))
            };
            if !refreshed && unknown(&self.lock().alive, &holders) {
                // A holder newer than the last read, or a dead one: which, the holders say.
                let alive: BTreeSet<String> =
                    self.store.live_holders().await?.into_iter().collect();
                self.lock().alive = alive;
                refreshed = true;
            }
            let alive = self.lock().alive.clone();
            holders.retain(|h, _| h.as_str() == holder || alive.contains(h));
            let entry = holders.get(holder).map(|n| *n as usize);
            let mine = entry.unwrap_or(0);
            let others = (holders.iter()).filter(|(h, _)| h.as_str() != holder);
            let share = Share {
                others: others.clone().count(),
                wanted: others.clone().any(|(_, n)| *n == 0),
            };
            let others: usize = others.map(|(_, n)| *n as usize).sum();
            let (demand, in_use) = {
                let mut state = self.lock();
                let current = state.generation == generation;
                match state.keys.get_mut(scope) {
                    Some(key) if current => (key.demand(), key.in_use),
                    _ => return Ok(()),
                }
            };
            let keep = kept(scope, demand, limit, share);
            let target = match (take, scope.0) {
                (true, _) => {
                    let free = limit.saturating_sub(others + mine);
                    let goal = taken(scope, mine, keep, share.cap(limit));
                    mine + goal.saturating_sub(mine).min(free)
                }
                (false, _) if !beyond(scope, mine, keep, share.cap(limit)) => mine,
                // Permits given to calls stay until the calls return.
                (false, Counted::Calls) => mine.min(keep.max(in_use)),
                (false, Counted::Starts) => mine.min(keep),
            };
            // Tasks waiting for a permit when none was free leave a want in the key's row:
            // its holders give back all but their share (see `Share`).
            let want = take && target == 0 && demand > 0;
            let new_entry = (target > 0 || want).then_some(target);
            let seen = Seen {
                held: target,
                share,
                wanting: want,
            };
            if new_entry == entry {
                self.settle(scope, generation, Seen { held: mine, ..seen }, take);
                return Ok(());
            }
            match new_entry {
                None => holders.remove(holder),
                Some(n) => holders.insert(holder.to_string(), u32::try_from(n).unwrap_or(u32::MAX)),
            };
            let swapped = (self.store)
                .swap_key_holders(scope_name.clone(), key_name.clone(), version, holders)
                .await?;
            if swapped {
                self.metrics.key_permit_write("applied");
                debug!(limit_key = %key_name, holder, held = target, want, "key permits changed");
                self.settle(scope, generation, seen, take);
                return Ok(());
            }
            self.metrics.key_permit_write("lost");
        }
        Ok(())
    }

    /// What `scope`'s key's row now says (`seen`): hand its permits on, or wait before the
    /// next take if none more came.
    fn settle(self: &Arc<Self>, scope: &Counter, generation: u64, seen: Seen, take: bool) {
        let now = self.clock.now();
        let mut state = self.lock();
        if state.generation != generation {
            return;
        }
        let valid = state.valid_at(now);
        let Some(key) = state.keys.get_mut(scope) else {
            return;
        };
        let gained = seen.held > key.held;
        key.held = seen.held;
        key.share = seen.share;
        key.wanting = seen.wanting;
        key.looked_at = now;
        key.surplus_since = None;
        if take && !gained {
            key.empty_takes = key.empty_takes.saturating_add(1);
            key.retry_at = Some(now + backoff(key.empty_takes, key.wanting));
        } else {
            key.empty_takes = 0;
            key.retry_at = None;
        }
        if valid {
            self.hand_on(key, scope, generation);
        }
    }

    fn back_off(&self, scope: &Counter, generation: u64, now: DateTime<Utc>) {
        let mut state = self.lock();
        if state.generation != generation {
            return;
        }
        if let Some(key) = state.keys.get_mut(scope) {
            key.empty_takes = key.empty_takes.saturating_add(1);
            key.retry_at = Some(now + backoff(key.empty_takes, key.wanting));
        }
    }

    /// Whether tasks of `scope` wait for a permit now.
    pub(super) fn waiting(&self, scope: &Counter) -> bool {
        let state = self.lock();
        (state.keys.get(scope)).is_some_and(|key| key.waiters.iter().any(|w| !w.is_closed()))
    }

    /// The permits of `scope` this node may hand out now (see `Key::usable`).
    pub(super) fn usable(&self, scope: &Counter) -> usize {
        (self.lock().keys.get(scope)).map_or(0, Key::usable)
    }

    /// This node's use of each scope's key: its permits held and given to calls (of
    /// `key_concurrency`), and its tasks waiting for a permit or for a unit of the key's rate.
    pub(super) fn by_scope(&self) -> Vec<(Scope, usize, usize, usize)> {
        let mut keys: BTreeMap<Scope, (usize, usize, usize)> = BTreeMap::new();
        for ((counted, scope), held, in_use, waiting) in self.holding() {
            let key = keys.entry(scope).or_default();
            key.2 += waiting;
            if counted == Counted::Calls {
                (key.0, key.1) = (held, in_use);
            }
        }
        (keys.into_iter())
            .map(|(scope, (held, in_use, waiting))| (scope, held, in_use, waiting))
            .collect()
    }

    /// This node's permits now, by scope (held, given to calls, tasks waiting), for tests and
    /// the admin API.
    pub(super) fn holding(&self) -> Vec<(Counter, usize, usize, usize)> {
        let mut state = self.lock();
        let mut keys: Vec<_> = (state.keys.iter_mut())
            .map(|(scope, key)| {
                let waiting = key.demand() - key.in_use;
                (scope.clone(), key.held, key.in_use, waiting)
            })
            .collect();
        keys.sort();
        keys
    }
}

impl State {
    fn valid_at(&self, now: DateTime<Utc>) -> bool {
        self.valid_until.is_some_and(|until| now < until)
    }
}

/// The ledger's task: a round, then a sleep until the next one or until a task needs a
/// permit; it ends once the ledger is no longer in use.
async fn keep(ledger: Weak<Ledger>, wake: Arc<Notify>) {
    loop {
        let Some(strong) = ledger.upgrade() else {
            return;
        };
        let next = strong.round().await;
        let sleep = strong.clock.sleep_until(next);
        drop(strong);
        tokio::select! {
            () = wake.notified() => {}
            () = sleep => {}
        }
    }
}

/// The permits a node keeps of a key its tasks need `demand` of now: those, and while any is
/// needed at least a quarter of the limit (its reserve, taken at once when free), so a key whose
/// tasks come and go is not taken and given back a permit at a time; none once none is needed.
/// A rate's units are not used up by the tasks holding them: the rate a node's tasks can use is
/// its share, whatever few of them wait at once (the key's calls at once may be limited too), so
/// a node keeps every unit it can while its tasks need any, and its even share while other
/// nodes hold some or want some. Either kind stays within this node's share while other nodes'
/// tasks want some (`Share::cap`).
fn kept((counted, _): &Counter, demand: usize, limit: usize, share: Share) -> usize {
    match (demand, counted) {
        (0, _) => 0,
        (_, Counted::Calls) => (demand.max(limit.div_ceil(4)).min(limit)).min(share.cap(limit)),
        (_, Counted::Starts) => limit.div_ceil(share.others + 1),
    }
}

/// What a take of a key aims to hold, holding `held` and keeping `keep` within `cap` (its
/// share): what it keeps, and of a key's calls at least twice what it holds, so a demand that
/// climbs towards the limit takes in a few doubling steps (`log2` of the limit over the
/// reserve), not a transaction for every round it grew in.
fn taken((counted, _): &Counter, held: usize, keep: usize, cap: usize) -> usize {
    match counted {
        Counted::Calls => keep.max(held.saturating_mul(2)).min(cap),
        Counted::Starts => keep,
    }
}

/// Whether a node holding `held` of a key, keeping `keep` within `cap` (its share), holds more
/// than it keeps: of a key's calls, more than its share or more than twice what it keeps, so a
/// demand that falls gives back in halving steps, and one that wavers within a factor of two
/// changes nothing; of a key's rate, more than it keeps.
fn beyond((counted, _): &Counter, held: usize, keep: usize, cap: usize) -> bool {
    match counted {
        Counted::Calls => held > keep.saturating_mul(2).min(cap),
        Counted::Starts => held > keep,
    }
}

/// The other holders in a key's row, as a node last read it: those holding permits, and wants
/// (holders with none whose tasks wait for some).
#[derive(Debug, Clone, Copy, Default)]
struct Share {
    /// Other live holders, wants included.
    others: usize,
    /// Whether one of them is a want.
    wanted: bool,
}

impl Share {
    /// The most of a key's `limit` this node keeps: while other nodes' tasks want some, an even
    /// share between it and the other holders (rounded up), else all of it.
    fn cap(&self, limit: usize) -> usize {
        if self.wanted {
            limit.div_ceil(self.others + 1)
        } else {
            limit
        }
    }
}

/// What a node read, or wrote, of a key's row: its own permits, the other holders, and whether
/// its entry is a want.
#[derive(Clone, Copy)]
struct Seen {
    held: usize,
    share: Share,
    wanting: bool,
}

/// The name of a holder: the node, when its ledger began, its generation.
fn holder_name(node: &str, began: i64, generation: u64) -> String {
    format!("{node}@{began}.{generation}")
}

/// A counter's scope in the store: the task type whose own limit it is, or `*` for the
/// queue's; a rate's units are `rate ` and that (no task type has a space).
fn scope_name((counted, (task_type, _)): &Counter) -> String {
    let scope = task_type.as_deref().unwrap_or("*");
    match counted {
        Counted::Calls => scope.to_string(),
        Counted::Starts => format!("rate {scope}"),
    }
}

/// The wait before the next take of a key none was free of, after `empty` such takes
/// (`wanting`: this node's want is in the key's row).
fn backoff(empty: u32, wanting: bool) -> TimeDelta {
    let most = if wanting {
        MAX_WANT_BACKOFF
    } else {
        MAX_BACKOFF
    };
    delta(TICK.saturating_mul(1 << empty.min(4)).min(most))
}

fn delta(duration: Duration) -> TimeDelta {
    TimeDelta::from_std(duration).unwrap_or(TimeDelta::MAX)
}
