//! One module per group of commands, and what they share: the runtime, and time and duration
//! parsing.

mod admin;
mod dead_letters;
mod jobs;
mod limits;
mod migrate;
mod node;
mod schedule;
mod schedules;
mod suspensions;

use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use scheduler_core::settings::duration_text;

pub(crate) use admin::{cancel, get, list, partitions, reschedule, status};
pub(crate) use dead_letters::dead_letters;
pub(crate) use jobs::jobs;
pub(crate) use limits::limits;
pub(crate) use migrate::migrate;
pub(crate) use node::node;
pub(crate) use schedule::schedule;
pub(crate) use schedules::schedules;
pub(crate) use suspensions::{resume, suspend, suspensions};

use crate::output::Failure;

/// The runtime `schedule` and `node` run their futures on.
pub(super) fn runtime() -> Result<tokio::runtime::Runtime, Failure> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| Failure::service(format!("cannot start a runtime: {e}")))
}

/// `text` as an RFC 3339 time; `what` names the flag in the error.
pub(super) fn parse_time(text: &str, what: &str) -> Result<DateTime<Utc>, Failure> {
    DateTime::parse_from_rfc3339(text)
        .map(|t| t.with_timezone(&Utc))
        .map_err(|_| {
            Failure::usage(format!(
                "{what} {text:?} is not an RFC 3339 time such as 2026-11-22T09:00:00.000Z"
            ))
        })
}

/// `text` as a duration such as 500ms, 10s, 5m or 2h; `what` names the flag in the error.
pub(super) fn parse_duration(text: &str, what: &str) -> Result<Duration, Failure> {
    duration_text::parse(text).map_err(|e| Failure::usage(format!("{what}: {e}")))
}

/// The time `text` (a duration) from now, as `--in` gives it; `what` names the flag in the
/// error.
pub(super) fn parse_delay(text: &str, what: &str) -> Result<DateTime<Utc>, Failure> {
    let delay = parse_duration(text, what)?;
    TimeDelta::from_std(delay)
        .ok()
        .and_then(|delay| Utc::now().checked_add_signed(delay))
        .ok_or_else(|| Failure::usage(format!("{what} {text:?} is too far in the future")))
}

/// Refuses what no job or schedule can be named (1 to 200 ASCII letters, digits or `-_.:`, as
/// the engine checks) before asking: the id goes into the request's path as it is. `what`
/// names the kind (`job`, `schedule`).
pub(crate) fn check_path_id(what: &str, id: &str) -> Result<(), crate::output::Failure> {
    let allowed = |c: char| c.is_ascii_alphanumeric() || "-_.:".contains(c);
    if id.is_empty() || id.len() > 200 || !id.chars().all(allowed) {
        return Err(crate::output::Failure::usage(format!(
            "{id:?} is not a {what} id (1 to 200 ASCII letters, digits or -_.:)"
        )));
    }
    Ok(())
}

/// `text` as one shell word, quoted when it needs to be, so a next-page hint can be pasted.
pub(super) fn shell_word(text: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "-_.:/,+@%=".contains(c);
    if !text.is_empty() && text.chars().all(plain) {
        text.to_string()
    } else {
        format!("'{}'", text.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod shell_word_tests {
    use super::shell_word;

    #[test]
    fn shell_words_are_quoted_only_when_needed() {
        assert_eq!(shell_word("customer-7"), "customer-7");
        assert_eq!(
            shell_word("2026-11-22T09:00:00.000Z"),
            "2026-11-22T09:00:00.000Z"
        );
        assert_eq!(shell_word("o 1"), "'o 1'");
        assert_eq!(shell_word("it's"), r"'it'\''s'");
        assert_eq!(shell_word(""), "''");
    }
}
