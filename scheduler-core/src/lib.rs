//! The scheduler node: consumes tasks from Kafka, persists them to Cassandra in time-bucketed wide
//! rows, and runs each through the user's executor when it comes due, one at a time per orderingId.
//!
//! The actor tree and the node are built in the engine milestone (issue 3); this crate is the
//! workspace member they land in. See `design.md` for the architecture.
