//! Retry backoff: exponential in the attempt number, capped, with jitter.

use std::time::Duration;

/// The wait before retry number `retry` (1 for the first retry): a uniformly random duration
/// between half and all of `min(factor * 2^(retry-1), max)`.
pub fn backoff_delay(
    retry: u32,
    factor: Duration,
    max: Duration,
    rng: &mut fastrand::Rng,
) -> Duration {
    let period = exponential_period(retry, factor, max);
    let half = period / 2;
    let spread = (period - half).as_millis() as u64;
    half + Duration::from_millis(rng.u64(0..=spread))
}

/// `min(factor * 2^(retry-1), max)`, without overflow.
pub fn exponential_period(retry: u32, factor: Duration, max: Duration) -> Duration {
    let doublings = retry.saturating_sub(1).min(32);
    factor
        .checked_mul(1u32 << doublings.min(31))
        .unwrap_or(max)
        .min(max)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn period_doubles_up_to_the_cap() {
        let (factor, max) = (Duration::from_secs(20), Duration::from_secs(120));
        let periods: Vec<u64> = (1..=5)
            .map(|r| exponential_period(r, factor, max).as_secs())
            .collect();
        assert_eq!(periods, [20, 40, 80, 120, 120]);
        assert_eq!(exponential_period(1000, factor, max), max);
    }

    #[test]
    fn jitter_stays_between_half_and_all_of_the_period_and_varies() {
        let mut rng = fastrand::Rng::with_seed(7);
        let (factor, max) = (Duration::from_secs(20), Duration::from_secs(120));
        let delays: Vec<Duration> = (0..500)
            .map(|_| backoff_delay(2, factor, max, &mut rng))
            .collect();
        assert!(delays
            .iter()
            .all(|d| *d >= Duration::from_secs(20) && *d <= Duration::from_secs(40)));
        let min = delays.iter().min().copied().unwrap_or_default();
        let max_seen = delays.iter().max().copied().unwrap_or_default();
        assert!(
            min < Duration::from_secs(22) && max_seen > Duration::from_secs(38),
            "{min:?}..{max_seen:?}"
        );
    }
}
