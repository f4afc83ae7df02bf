//! Row lifetimes the engine computes, within what every supported Cassandra keeps.
//!
//! Cassandra stores a row's expiry as seconds since 1970 in a signed 32-bit integer: no row can
//! expire after 2038-01-19T03:14:07Z. Cassandra 2.1 lets a TTL past it overflow silently (the
//! row is gone at once); 3.x and later refuse the write (4.x: "exceeds maximum supported
//! expiration date"); no version takes a TTL over 20 years. So every TTL the engine computes
//! goes through [`Retention::ttl_secs`], which clamps it: a row that should outlive
//! [`last_expiry`] expires then instead. What that means for each table is in design.md
//! ("Retention").

use chrono::{DateTime, TimeDelta, Utc};

/// Cassandra's longest TTL: 20 years, in seconds.
pub(crate) const MAX_TTL_SECS: i64 = 630_720_000;

/// The latest expiry the engine writes: Cassandra's last one (2^31 - 2 seconds after 1970,
/// 2038-01-19T03:14:06Z) less a day, so that a node's clock ahead of Cassandra's cannot push a
/// clamped row past it.
pub(crate) fn last_expiry() -> DateTime<Utc> {
    const CASSANDRA_LAST_EXPIRY_SECS: i64 = i32::MAX as i64 - 1;
    DateTime::<Utc>::from_timestamp(CASSANDRA_LAST_EXPIRY_SECS, 0)
        .unwrap_or(DateTime::<Utc>::MAX_UTC)
        - TimeDelta::days(1)
}

/// How long a row is kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Retention {
    /// Until deleted (a `status_ttl` of `0s`): written without a TTL.
    Forever,
    /// Until this time, or [`last_expiry`] if that comes first.
    Until(DateTime<Utc>),
}

impl Retention {
    /// Kept for `keep` after `from` (a zero `keep` is "forever", as for the tables' default
    /// TTL).
    pub(crate) fn after(from: DateTime<Utc>, keep: std::time::Duration) -> Retention {
        if keep.is_zero() {
            return Retention::Forever;
        }
        let keep = TimeDelta::from_std(keep).unwrap_or(TimeDelta::MAX);
        Retention::Until(
            from.checked_add_signed(keep)
                .unwrap_or(DateTime::<Utc>::MAX_UTC),
        )
    }

    /// The TTL to write at `now`, in whole seconds (rounded up): 0 for no TTL; else at least 1,
    /// at most 20 years, and never past [`last_expiry`].
    pub(crate) fn ttl_secs(self, now: DateTime<Utc>) -> i32 {
        let Retention::Until(until) = self else {
            return 0;
        };
        let until = until.min(last_expiry());
        let millis = (until - now).num_milliseconds();
        let secs = millis.div_euclid(1000) + i64::from(millis.rem_euclid(1000) > 0);
        // Within i32 by the clamp (20 years is under 2^31 seconds).
        secs.clamp(1, MAX_TTL_SECS) as i32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> DateTime<Utc> {
        text.parse().unwrap()
    }

    #[test]
    fn a_zero_retention_is_kept_forever_even_for_a_time_long_past() {
        let now = at("2026-11-26T12:00:00Z");
        let retention = Retention::after(at("2026-01-01T00:00:00Z"), std::time::Duration::ZERO);
        assert_eq!(retention, Retention::Forever);
        assert_eq!(retention.ttl_secs(now), 0);
    }

    #[test]
    fn a_ttl_is_whole_seconds_rounded_up_and_at_least_one() {
        let now = at("2026-11-26T12:00:00Z");
        let keep = std::time::Duration::from_millis(1500);
        assert_eq!(Retention::after(now, keep).ttl_secs(now), 2);
        // Past already: the shortest TTL, never "no TTL".
        let past = Retention::Until(at("2026-11-26T11:00:00Z"));
        assert_eq!(past.ttl_secs(now), 1);
    }

    #[test]
    fn no_ttl_reaches_past_2038_or_beyond_twenty_years() {
        let now = at("2026-11-26T12:00:00Z");
        let in_2040 = Retention::Until(at("2040-01-01T00:00:00Z"));
        let ttl = in_2040.ttl_secs(now);
        let expiry = now + TimeDelta::seconds(i64::from(ttl));
        assert!(expiry <= at("2038-01-18T03:14:07Z"), "{expiry}");
        assert!(expiry > at("2038-01-18T03:14:05Z"), "{expiry}");
        // Cassandra 2.1 adds the TTL to its clock in 32-bit seconds: it must not overflow.
        assert!(now.timestamp() + i64::from(ttl) < i64::from(i32::MAX));
        let far = Retention::after(now, std::time::Duration::from_secs(u64::MAX));
        assert_eq!(far.ttl_secs(now), ttl);
        // In a world where 2038 is no limit (a clock set back), 20 years still is.
        let early = at("1990-01-01T00:00:00Z");
        assert_eq!(far.ttl_secs(early), MAX_TTL_SECS as i32);
    }
}
