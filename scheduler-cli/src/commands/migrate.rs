//! `migrate`: brings the keyspace of every queue to this release's schema version, with the
//! node's settings.

use std::io::Write;

use scheduler_core::store::CassandraStore;
use scheduler_core::Settings;

use super::runtime;
use crate::args::MigrateArgs;
use crate::output::{Failure, Outcome};

pub(crate) fn migrate(args: MigrateArgs, json: bool, out: &mut dyn Write) -> Outcome {
    let settings =
        Settings::load(args.settings.as_deref()).map_err(|e| Failure::usage(e.to_string()))?;
    let runtime = runtime()?;
    // Each queue has a keyspace of its own: a line each, the default queue's first.
    for queue in settings.queues() {
        let keyspace = queue.cassandra.keyspace.clone();
        let migration = runtime
            .block_on(CassandraStore::migrate(&queue.cassandra))
            .map_err(|e| Failure::service(format!("cannot migrate keyspace `{keyspace}`: {e}")))?;
        let line = if json {
            serde_json::json!({
                "keyspace": keyspace,
                "from": migration.from,
                "to": migration.to,
                "applied": migration.applied,
            })
            .to_string()
        } else if migration.applied {
            format!(
                "keyspace `{keyspace}` migrated from schema version {} to {}",
                migration.from, migration.to
            )
        } else {
            format!(
                "keyspace `{keyspace}` is at schema version {}: nothing to do",
                migration.to
            )
        };
        writeln!(out, "{line}").map_err(|e| Failure::service(format!("cannot write: {e}")))?;
    }
    Ok(())
}
