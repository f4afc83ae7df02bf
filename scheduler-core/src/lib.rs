//! The scheduler node: consumes tasks from Kafka, persists them to Cassandra in time-bucketed wide
//! rows, and runs each through the user's executor when it comes due, one at a time per orderingId.
//!
//! Built so far: [`settings`], [`clock`] and [`store`] (the persistence boundary). The actor tree
//! and the node follow; see `design.md` for the architecture.

pub mod clock;
pub mod settings;
pub mod store;

pub use scheduler_client::{Task, TaskData, TaskKey};
