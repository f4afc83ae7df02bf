//! The simulated faults: store errors and latency, nodes joining, leaving, dropping out of the
//! group and pausing their process, and their healing.

use super::*;

/// How long a woken process may run on before its consumer rejoins the group.
const MAX_REJOIN: Duration = Duration::from_millis(1_500);

impl World {
    pub(super) async fn inject_fault(&mut self) {
        match self.rng.u32(0..1000) {
            // Store errors and latency reach every queue's keyspace (one Cassandra cluster).
            0..=11 => {
                let failures = self.rng.usize(1..5);
                for store in self.keyspaces() {
                    store.fail_next(failures);
                }
                self.disturb(None, Instant::now(), Some(STORE_FAULT_REACH));
            }
            // Enough failed loads in a row that a tree escalates and is rebuilt.
            12..=14 | 44..=50 => self.store.fail_op("schedule load", self.rng.usize(20..60)),
            // A start-up read failing for a while (as one past Cassandra's tombstone threshold
            // does): the trees starting meanwhile retry, the consumer polls on.
            51..=54 => {
                let failures = self.rng.usize(3..12);
                self.store.fail_op("deferred cancels read", failures);
                self.disturb(None, Instant::now(), Some(STORE_FAULT_REACH));
            }
            15..=22 => {
                // Not on lease writes beyond a renewal period: a lease lost to latency may
                // legitimately let two calls overlap.
                let ops = [
                    "status write",
                    "schedule load",
                    "task insert",
                    "epoch read",
                    "status write if absent",
                    "status batch read",
                    "status read",
                    "task batch read",
                ];
                let op = ops[self.rng.usize(0..ops.len())];
                let latency = Duration::from_millis(self.rng.u64(100..2_500));
                for store in self.keyspaces() {
                    store.set_latency(op, latency);
                }
                self.latency_until = Some(Instant::now() + Duration::from_secs(3));
                self.disturb(None, Instant::now(), Some(STORE_FAULT_REACH));
            }
            23..=27 => {
                let members = self.members();
                if members.len() >= 2 {
                    let node = members[self.rng.usize(0..members.len())];
                    let until = Instant::now() + Duration::from_secs(self.rng.u64(2..10));
                    self.nodes[node].membership = Membership::Paused { until };
                    tracing::info!(node, "sim: consumer stalls past the session timeout");
                    self.disturb(Some(node), Instant::now(), None);
                    self.nodes[node].owned.clear();
                    self.aim_identity_records_at(node);
                    self.rebalance().await;
                }
            }
            28..=30 => {
                let members = self.members();
                if members.len() >= 2 {
                    let node = members[self.rng.usize(0..members.len())];
                    tracing::info!(node, "sim: node leaves");
                    self.disturb(Some(node), Instant::now(), None);
                    self.revoke(node).await;
                    self.nodes[node].membership = Membership::Gone;
                    self.nodes[node].owned.clear();
                    self.rebalance().await;
                }
            }
            // The whole process pauses (a long GC, SIGSTOP) past the lease TTL: the group
            // moves its partitions on, its lease expires, its calls may be taken over.
            35..=38 => {
                let members = self.members();
                if members.len() >= 2 {
                    let node = members[self.rng.usize(0..members.len())];
                    let from = Instant::now();
                    let until = from + Duration::from_millis(self.rng.u64(4_000..10_000));
                    self.nodes[node].membership = Membership::Paused { until };
                    tracing::info!(node, "sim: process paused");
                    self.disturb(Some(node), from, None);
                    self.nodes[node].pause.set(true);
                    self.nodes[node].pauses.push(from);
                    self.nodes[node].owned.clear();
                    self.aim_identity_records_at(node);
                    self.rebalance().await;
                }
            }
            // The process pauses just as it makes its next status or attempt write: the write
            // fails once the pause is over, and whatever the node does next must meet the fence
            // of the tree that took its calls over.
            39..=43 => {
                let members = self.members();
                if members.len() >= 2 {
                    let node = members[self.rng.usize(0..members.len())];
                    let op = ["status write", "attempt write"][self.rng.usize(0..2)];
                    self.nodes[node].pause.arm(Some(op));
                    tracing::info!(node, op, "sim: the process will pause at its next request");
                }
            }
            // The operator suspends an orderingId or a group for a few seconds.
            55..=62 => self.suspend(),
            // The operator redrives a dead letter.
            63..=72 => self.redrive().await,
            // A schedule's next tick gives up: a dead letter, its chain stalled until redriven.
            73..=75 => self.fail_next_tick(),
            31..=34 if self.members().len() < 3 => {
                tracing::info!(node = self.nodes.len(), "sim: node joins");
                self.add_node();
                self.rebalance().await;
                self.declare_schedules_again(true).await;
            }
            _ => {}
        }
    }

    /// A node whose pause trap sprang leaves the group like any paused node.
    pub(super) async fn notice_sprung_traps(&mut self) {
        if self.absorb_sprung_traps() {
            self.rebalance().await;
        }
    }

    /// Takes nodes whose trap sprang out of the group; whether a member left.
    pub(super) fn absorb_sprung_traps(&mut self) -> bool {
        let mut sprung = false;
        for node in 0..self.nodes.len() {
            let Some(from) = self.nodes[node].pause.take_sprung() else {
                continue;
            };
            let until = from + Duration::from_millis(self.rng.u64(4_000..10_000));
            tracing::info!(node, membership = ?self.nodes[node].membership, "sim: process paused by its trap");
            self.disturb(Some(node), from, None);
            self.nodes[node].pauses.push(from);
            match self.nodes[node].membership {
                Membership::Member => {
                    self.nodes[node].membership = Membership::Paused { until };
                    self.nodes[node].owned.clear();
                    self.aim_identity_records_at(node);
                    sprung = true;
                }
                // Out of the group already: it wakes when that pause ends.
                Membership::Paused { .. } => {}
                // Its consumer has not rejoined yet: it wakes again after this pause.
                Membership::Rejoining { .. } => {
                    self.nodes[node].membership = Membership::Paused { until };
                }
                // Left for good: nothing of it runs on.
                Membership::Gone => self.nodes[node].pause.set(false),
            }
        }
        sprung
    }

    /// Disarms every pause trap (the faults are over).
    pub(super) fn disarm_traps(&mut self) {
        for node in &self.nodes {
            node.pause.arm(None);
        }
    }

    /// Wakes nodes whose pause is over. A paused process runs again at once; its consumer finds
    /// itself out of the group at its next poll (up to 1.5 s later: meanwhile its trees go on,
    /// and must meet the fence), then drops its trees and joins again.
    pub(super) async fn wake_paused(&mut self, force: bool) {
        let now = Instant::now();
        let mut woke = false;
        for node in 0..self.nodes.len() {
            match self.nodes[node].membership {
                Membership::Paused { until } if force || until <= now => {
                    tracing::info!(node, "sim: paused node wakes");
                    if self.nodes[node].pause.is_paused() && !force {
                        self.nodes[node].pause.set(false);
                        let at = now
                            + Duration::from_millis(self.rng.u64(0..MAX_REJOIN.as_millis() as u64));
                        self.nodes[node].membership = Membership::Rejoining { at };
                        continue;
                    }
                    self.nodes[node].pause.set(false);
                }
                Membership::Rejoining { at } if force || at <= now => {}
                _ => continue,
            }
            tracing::info!(node, "sim: node rejoins the group");
            self.revoke(node).await;
            self.nodes[node].membership = Membership::Member;
            self.rejoined(node);
            woke = true;
        }
        if woke {
            self.rebalance().await;
        }
    }

    /// Records that `node` (every node, with `None`) is disturbed from `from` for `lasting`
    /// (until it rejoins the group, with `None`).
    pub(super) fn disturb(
        &mut self,
        node: Option<usize>,
        from: Instant,
        lasting: Option<Duration>,
    ) {
        self.disturbances.push(Disturbance {
            node,
            from,
            until: lasting.map(|d| from + d),
        });
    }

    /// `node` is back in the group: its disturbances end.
    fn rejoined(&mut self, node: usize) {
        let now = Instant::now();
        for d in &mut self.disturbances {
            if d.node == Some(node) && d.until.is_none() {
                d.until = Some(now);
            }
        }
    }

    pub(super) fn clear_latency(&mut self) {
        for op in [
            "status write",
            "schedule load",
            "task insert",
            "epoch read",
            "status write if absent",
            "status batch read",
            "status read",
            "task batch read",
        ] {
            for store in self.keyspaces() {
                store.set_latency(op, Duration::ZERO);
            }
        }
        self.latency_until = None;
    }
}
