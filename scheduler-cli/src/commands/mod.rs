//! One module per group of commands, and what they share: the runtime and time parsing.

mod admin;
mod dead_letters;
mod migrate;
mod node;
mod schedule;

use chrono::{DateTime, Utc};

pub(crate) use admin::{cancel, get, list, status};
pub(crate) use dead_letters::dead_letters;
pub(crate) use migrate::migrate;
pub(crate) use node::node;
pub(crate) use schedule::schedule;

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
