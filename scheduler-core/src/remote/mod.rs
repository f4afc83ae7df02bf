//! Remote workers: handlers in any language that claim a node's due tasks over HTTP
//! (design.md "Remote workers"). A remote call is one more way to make a task's call: a task of
//! a type with no local handler but a connected worker is called through [`RemoteCall`], which
//! offers the task to the node's workers and waits for one to claim it and complete the claim.
//! The lifecycle around the call (its orderingId's turn, its lease, the fencing check, the status
//! check, retries, dead letters, limits, groups) is the one every call has.
//!
//! The protocol, on the admin listener (`admin/workers.rs`):
//! - a worker long-polls with its name, its types and its free capacity
//!   ([`RemoteWorkers::poll`]); the node answers with claims of tasks offered meanwhile, each
//!   with an id, an expiry, the attempt and the partition's fencing epoch;
//! - the worker heartbeats each claim ([`RemoteWorkers::heartbeat`]), which moves its expiry
//!   on by the claim's time to live;
//! - it completes the claim ([`RemoteWorkers::complete`]) with success (and a small result),
//!   retry (with a wait) or invalid.
//!
//! **A claim that ended cannot commit.** A claim ends when it expires (no heartbeat within its
//! time to live), when its call ends otherwise (the tree stops: the partition moved; the call's
//! timeout), or when it is completed. Its completion or heartbeat after that is refused (409,
//! with why) and nothing is recorded; the call returns a retryable error at the claim's end, so
//! the task runs again, in its turn, on this node or its next owner: the seed's stale-owner rule.
//! One orderingId never has two live claims, nor a live claim beside a local call: the call
//! holds its orderingId's turn until its claim ends.
//!
//! What a worker holds, and when it was last seen, is in [`RemoteWorkers::view`] (the admin
//! API, the dashboard) and the metrics.

mod call;
mod metrics;
mod registry;
#[cfg(test)]
mod tests;

pub use call::RemoteCall;
pub use metrics::RemoteMetrics;
pub use registry::{
    ClaimEnd, ClaimView, ClaimedGroup, ClaimedMember, ClaimedTask, Completion, CompletionRefused,
    Counts, LiveClaimView, RemoteWorkers, WorkerPoll, WorkerView,
};
