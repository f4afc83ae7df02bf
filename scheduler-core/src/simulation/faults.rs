//! The simulated faults: store errors and latency, nodes joining, leaving, dropping out of the
//! group and pausing their process, and their healing.

use super::*;

impl World {
    pub(super) async fn inject_fault(&mut self) {
        match self.rng.u32(0..1000) {
            0..=11 => self.store.fail_next(self.rng.usize(1..5)),
            // Enough failed loads in a row that a tree escalates and is rebuilt.
            12..=14 => self.store.fail_op("schedule load", self.rng.usize(10..30)),
            15..=22 => {
                // Not on lease writes beyond a renewal period: a lease lost to latency may
                // legitimately let two calls overlap.
                let ops = [
                    "status write",
                    "schedule load",
                    "task insert",
                    "epoch read",
                    "cancel",
                ];
                let op = ops[self.rng.usize(0..ops.len())];
                self.store
                    .set_latency(op, Duration::from_millis(self.rng.u64(100..2_500)));
                self.latency_until = Some(Instant::now() + Duration::from_secs(3));
            }
            23..=27 => {
                let members = self.members();
                if members.len() >= 2 {
                    let node = members[self.rng.usize(0..members.len())];
                    let until = Instant::now() + Duration::from_secs(self.rng.u64(2..10));
                    self.nodes[node].membership = Membership::Paused { until };
                    self.nodes[node].owned.clear();
                    self.rebalance().await;
                }
            }
            28..=30 => {
                let members = self.members();
                if members.len() >= 2 {
                    let node = members[self.rng.usize(0..members.len())];
                    let _ = self.nodes[node].topic.send(RevokePartitions).await;
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
                    self.nodes[node].pause.set(true);
                    self.nodes[node].pauses.push(from);
                    self.nodes[node].owned.clear();
                    self.rebalance().await;
                }
            }
            31..=34 if self.members().len() < 3 => {
                self.add_node();
                self.rebalance().await;
            }
            _ => {}
        }
    }

    /// Wakes nodes whose pause is over: their consumer finds itself out of the group, drops
    /// its trees and joins again.
    pub(super) async fn wake_paused(&mut self, force: bool) {
        let now = Instant::now();
        let mut woke = false;
        for node in 0..self.nodes.len() {
            if let Membership::Paused { until } = self.nodes[node].membership {
                if force || until <= now {
                    self.nodes[node].pause.set(false);
                    let _ = self.nodes[node].topic.send(RevokePartitions).await;
                    self.nodes[node].membership = Membership::Member;
                    woke = true;
                }
            }
        }
        if woke {
            self.rebalance().await;
        }
    }

    pub(super) fn clear_latency(&mut self) {
        for op in [
            "status write",
            "schedule load",
            "task insert",
            "epoch read",
            "cancel",
        ] {
            self.store.set_latency(op, Duration::ZERO);
        }
        self.latency_until = None;
    }
}
