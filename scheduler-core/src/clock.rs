//! Time as the engine sees it, behind a trait so unit tests of scheduling logic are exact.

use std::sync::atomic::{AtomicU64, Ordering};

use chrono::{DateTime, Utc};
use futures::future::BoxFuture;

/// The source of "now" for scheduling decisions.
pub trait Clock: Send + Sync + 'static {
    /// The current time.
    fn now(&self) -> DateTime<Utc>;

    /// Resolves at `at` or a little after (a task's time: callers check [`Clock::now`] again);
    /// at once if `at` has passed. The default waits on tokio's timer.
    fn sleep_until(&self, at: DateTime<Utc>) -> BoxFuture<'static, ()> {
        match (at - self.now()).to_std() {
            Ok(wait) if !wait.is_zero() => Box::pin(tokio::time::sleep(wait)),
            _ => Box::pin(std::future::ready(())),
        }
    }
}

/// The system's wall clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> DateTime<Utc> {
        Utc::now()
    }
}

/// A clock that follows tokio's time from a fixed start instant. Under a paused tokio runtime
/// (`start_paused`), time moves only when every task waits on a timer, so tests that use this
/// clock run instantly and see exact times.
#[cfg(test)]
#[derive(Debug, Clone)]
pub struct TokioClock {
    start_wall: DateTime<Utc>,
    start: tokio::time::Instant,
}

#[cfg(test)]
impl TokioClock {
    /// A clock reading `start_wall` now.
    pub fn starting_at(start_wall: DateTime<Utc>) -> Self {
        TokioClock {
            start_wall,
            start: tokio::time::Instant::now(),
        }
    }
}

#[cfg(test)]
impl Clock for TokioClock {
    fn now(&self) -> DateTime<Utc> {
        let elapsed = tokio::time::Instant::now().duration_since(self.start);
        self.start_wall + chrono::TimeDelta::from_std(elapsed).unwrap_or(chrono::TimeDelta::MAX)
    }
}

/// A point in the order of this process's events. Two stamps taken one after the other always
/// differ, even within one tick of the clock (or on a paused clock), where two `Instant`s may be
/// equal: "this read began after that write completed" is decided by stamps, never by instants.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Stamp(u64);

impl Stamp {
    /// A stamp after every stamp taken before.
    pub fn now() -> Stamp {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        Stamp(NEXT.fetch_add(1, Ordering::SeqCst))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;
    use std::time::Duration;

    #[tokio::test(start_paused = true)]
    async fn tokio_clock_moves_exactly_with_paused_time() {
        let start = Utc.timestamp_opt(1_800_000_000, 0).single().unwrap();
        let clock = TokioClock::starting_at(start);
        assert_eq!(clock.now(), start);
        tokio::time::sleep(Duration::from_millis(1500)).await;
        assert_eq!(clock.now(), start + chrono::TimeDelta::milliseconds(1500));
    }
}
