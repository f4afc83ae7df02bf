//! A limit key's share of a tree's memory: at most a quarter of `max_in_flight_tasks` of a
//! key's tasks are held in memory at once (`KeyShares`). A due task of a key at its share is
//! deferred by its orderingId, as a task beyond `max_queued_per_ordering` is: left in Cassandra
//! and listed, and every later task of the orderingId with it, so its order holds. The key's
//! deferred orderingIds are read back, in the order they were deferred, once the key's tasks in
//! memory are down to half its share.
//!
//! Without it, a key that floods a partition with due tasks fills the tree's memory with them
//! in time order: another key's task due after them waits in Cassandra until the flood is
//! loaded, however fairly the executor's slots are shared ([`crate::slots`]). With it, the
//! flood holds its share, and the loader passes its deferred tasks by their lists.

use std::collections::{BTreeMap, HashMap, VecDeque};

/// Each limit key's tasks in a tree's memory, and the orderingIds deferred at its share.
pub(super) struct KeyShares {
    /// The most tasks of one key in memory.
    bound: usize,
    /// Tasks of each key in memory (in an orderingId's queue, or running).
    held: HashMap<String, usize>,
    /// Per key, its orderingIds deferred at its share and not read back yet, in the order
    /// they were.
    waiting: BTreeMap<String, VecDeque<String>>,
    /// The key whose share each of those orderingIds waits for.
    blocked: HashMap<String, String>,
}

impl KeyShares {
    /// Shares of `bound` tasks a key (at least 1).
    pub(super) fn new(bound: usize) -> KeyShares {
        KeyShares {
            bound: bound.max(1),
            held: HashMap::new(),
            waiting: BTreeMap::new(),
            blocked: HashMap::new(),
        }
    }

    /// Whether a task of `key` would go over its share.
    pub(super) fn full(&self, key: Option<&str>) -> bool {
        key.is_some_and(|key| self.held.get(key).is_some_and(|n| *n >= self.bound))
    }

    /// A task of `key` is held in memory.
    pub(super) fn add(&mut self, key: Option<&str>) {
        if let Some(key) = key {
            *self.held.entry(key.to_string()).or_default() += 1;
        }
    }

    /// A task of `key` is done with: the orderingIds waiting for the key's share to read back
    /// now, if it is down to half (enough of them to fill the room, at `per_ordering` each).
    pub(super) fn done(&mut self, key: Option<&str>, per_ordering: usize) -> Vec<String> {
        self.release(key, 1, per_ordering)
    }

    /// A read-back of `ordering_id` reserves room for `n` tasks: counted in the share of the
    /// key it waits for, if any, until it ends ([`KeyShares::release`]), so that the key's
    /// read-backs under way at once stay within its share too. Returns that key.
    pub(super) fn reading(&mut self, ordering_id: &str, n: usize) -> Option<String> {
        let key = self.blocked.get(ordering_id)?.clone();
        *self.held.entry(key.clone()).or_default() += n;
        Some(key)
    }

    /// `n` tasks of `key` left its share (done with, or a read-back's reservation ended): the
    /// orderingIds waiting for the key's share to read back now, if it is down to half.
    pub(super) fn release(
        &mut self,
        key: Option<&str>,
        n: usize,
        per_ordering: usize,
    ) -> Vec<String> {
        let Some(key) = key else {
            return Vec::new();
        };
        let held = match self.held.get_mut(key) {
            Some(held) => {
                *held = held.saturating_sub(n);
                *held
            }
            None => 0,
        };
        if held == 0 {
            self.held.remove(key);
        }
        if held > self.bound / 2 {
            return Vec::new();
        }
        let room = self.bound - held;
        let Some(waiting) = self.waiting.get_mut(key) else {
            return Vec::new();
        };
        let wanted = room.div_ceil(per_ordering.max(1));
        // Each stays waiting until its deferral ends (`read_back_all`); the next turn starts
        // after it.
        let turn: Vec<String> = waiting.iter().take(wanted).cloned().collect();
        waiting.rotate_left(turn.len().min(waiting.len()));
        turn
    }

    /// `ordering_id` was deferred for `key`'s share.
    pub(super) fn wait(&mut self, key: &str, ordering_id: &str) {
        if self.blocked.contains_key(ordering_id) {
            return;
        }
        self.blocked
            .insert(ordering_id.to_string(), key.to_string());
        (self.waiting.entry(key.to_string()).or_default()).push_back(ordering_id.to_string());
    }

    /// How many tasks `ordering_id` may read back within the share of the key it waits for
    /// (`usize::MAX` if it waits for none).
    pub(super) fn room_of(&self, ordering_id: &str) -> usize {
        match self.blocked.get(ordering_id) {
            Some(key) => self
                .bound
                .saturating_sub(self.held.get(key).copied().unwrap_or(0)),
            None => usize::MAX,
        }
    }

    /// `ordering_id`'s deferral ended (everything deferred was read back).
    pub(super) fn read_back_all(&mut self, ordering_id: &str) {
        let Some(key) = self.blocked.remove(ordering_id) else {
            return;
        };
        if let Some(waiting) = self.waiting.get_mut(&key) {
            waiting.retain(|o| o != ordering_id);
            if waiting.is_empty() {
                self.waiting.remove(&key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_at_its_share_is_full_and_its_waiting_orderings_read_back_at_half() {
        let mut shares = KeyShares::new(4);
        for _ in 0..4 {
            assert!(!shares.full(Some("a")));
            shares.add(Some("a"));
        }
        assert!(shares.full(Some("a")));
        assert!(!shares.full(Some("b")) && !shares.full(None));
        shares.wait("a", "o1");
        shares.wait("a", "o2");
        shares.wait("a", "o1");
        assert_eq!(shares.room_of("o1"), 0);
        assert_eq!(shares.room_of("other"), usize::MAX);
        assert!(shares.done(Some("a"), 1).is_empty(), "3 held: over half");
        // 2 held: room for 2, one task an orderingId.
        assert_eq!(shares.done(Some("a"), 1), ["o1", "o2"]);
        assert_eq!(shares.room_of("o2"), 2);
        shares.read_back_all("o1");
        assert_eq!(shares.room_of("o1"), usize::MAX);
        // 1 held, then none: o2's turns alone.
        assert_eq!(shares.done(Some("a"), 1), ["o2"]);
        assert_eq!(shares.done(Some("a"), 1), ["o2"]);
        assert!(shares.held.is_empty());
    }

    #[test]
    fn read_backs_under_way_count_in_their_keys_share_until_they_end() {
        let mut shares = KeyShares::new(8);
        shares.wait("a", "o1");
        shares.wait("a", "o2");
        assert_eq!(shares.reading("o1", 6).as_deref(), Some("a"));
        assert_eq!(shares.room_of("o2"), 2, "o1's read holds 6 of the 8");
        assert_eq!(shares.reading("other", 5), None, "waits for no key's share");
        // o1's read found 2 tasks: they are held, its reservation ends.
        shares.add(Some("a"));
        shares.add(Some("a"));
        assert_eq!(
            shares.release(Some("a"), 6, 4),
            ["o1", "o2"],
            "2 held: room for 6"
        );
        assert_eq!(shares.room_of("o2"), 6);
    }
}
