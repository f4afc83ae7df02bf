//! Node processes (`src/bin/chaos-node.rs`) for tests that kill, pause or compare nodes as the
//! OS runs them: the command with a test environment's settings, and the JSON lines each writes.

use std::path::Path;
use std::process::Command;

use crate::engine::TestEnv;

/// The `chaos-node` command for node `name` of `env` (its topic, group and keyspace; quick
/// rebalances, the admin API on a free port), logging to `<dir>/<name>.jsonl`. The caller adds
/// what its test varies (`CHAOS_WORK_MS`, `CHAOS_TYPES`, `CHAOS_SETTINGS`, `CHAOS_TRACE`) and
/// spawns it. `binary` is the test's `env!("CARGO_BIN_EXE_chaos-node")`.
pub fn node_command(binary: &str, env: &TestEnv, dir: &Path, name: &str) -> Command {
    let mut command = Command::new(binary);
    command
        .env("CHAOS_NODE", name)
        .env("CHAOS_LOG", dir.join(format!("{name}.jsonl")))
        .env(
            "SCHEDULER__KAFKA__BOOTSTRAP_SERVERS",
            &env.stack.kafka_bootstrap,
        )
        .env("SCHEDULER__KAFKA__TOPIC", &env.topic)
        .env("SCHEDULER__KAFKA__GROUP_ID", &env.group)
        .env(
            "SCHEDULER__CASSANDRA__CONTACT_POINTS",
            &env.stack.cql_contact_point,
        )
        .env("SCHEDULER__CASSANDRA__KEYSPACE", &env.keyspace)
        .env("SCHEDULER__CASSANDRA__FETCH_SCHEMA_METADATA", "false")
        // Nodes starting together on a fresh keyspace: the migration lock serialises them.
        .env("SCHEDULER__CASSANDRA__AUTO_MIGRATE", "true")
        .env("SCHEDULER__SCHEDULING__ISOLATION_WAIT", "500ms")
        .env("SCHEDULER__ADMIN__LISTEN", "127.0.0.1:0");
    command
}

/// The JSON lines node `name` wrote to `<dir>/<name>.jsonl` so far.
pub fn process_log(dir: &Path, name: &str) -> Vec<serde_json::Value> {
    std::fs::read_to_string(dir.join(format!("{name}.jsonl")))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// How many partitions node `name` said it owns last (its `owned` lines).
pub fn owned_partitions(dir: &Path, name: &str) -> usize {
    process_log(dir, name)
        .iter()
        .rev()
        .find_map(|l| l.get("owned").and_then(|o| o.as_array()).map(Vec::len))
        .unwrap_or(0)
}
