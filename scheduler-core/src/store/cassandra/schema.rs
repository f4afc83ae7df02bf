//! The keyspace and tables of the Cassandra store: created if absent, and migrated (columns added
//! in later releases) on a keyspace created before.

use scylla::client::session::Session;
use tracing::warn;

use super::query_error;
use crate::settings::CassandraSettings;
use crate::store::StoreResult;

/// Creates the keyspace and tables if absent, adds columns added since they were created, and
/// sets the retention of statuses and attempts (tables' `default_time_to_live`, in seconds).
pub(super) async fn create_or_migrate(
    session: &Session,
    settings: &CassandraSettings,
) -> StoreResult<()> {
    let ks = &settings.keyspace;
    for ddl in schema(ks, &settings.replication) {
        create_if_absent(session, ddl).await?;
    }
    // Added after the first release: keyspaces created before lack it.
    add_column_if_absent(session, ks, "scheduled_tasks", "enqueue_offset", "bigint").await?;
    for (table, ttl) in [
        ("task_status", settings.status_ttl),
        ("task_attempts", settings.attempts_ttl),
    ] {
        let alter = format!(
            "ALTER TABLE {ks}.{table} WITH default_time_to_live = {}",
            ttl.as_secs()
        );
        create_if_absent(session, alter).await?;
    }
    Ok(())
}

/// Attempts at a schema statement: nodes starting together on a fresh keyspace race to create
/// the same tables, and Cassandra can refuse the loser ("Column family ID mismatch"); once the
/// winner's table exists, `IF NOT EXISTS` succeeds.
const SCHEMA_ATTEMPTS: u32 = 5;

async fn create_if_absent(session: &Session, ddl: String) -> StoreResult<()> {
    let mut attempt = 1;
    loop {
        match session.query_unpaged(ddl.as_str(), &[]).await {
            Ok(_) => return Ok(()),
            Err(e) if attempt < SCHEMA_ATTEMPTS => {
                warn!(error = %e, attempt, "schema statement failed (another node may be creating it); retrying");
                tokio::time::sleep(std::time::Duration::from_millis(500 * u64::from(attempt)))
                    .await;
                attempt += 1;
            }
            Err(e) => return Err(query_error("schema creation")(e)),
        }
    }
}

/// Adds `column` to `table` unless it is there: a column added in a later release, on a
/// keyspace created before it. Nodes starting together may race to add it; whichever wins, the
/// column is there when the check is repeated.
async fn add_column_if_absent(
    session: &Session,
    ks: &str,
    table: &str,
    column: &str,
    cql_type: &str,
) -> StoreResult<()> {
    let probe = format!("SELECT {column} FROM {ks}.{table} LIMIT 1");
    let alter = format!("ALTER TABLE {ks}.{table} ADD {column} {cql_type}");
    let mut attempt = 1;
    loop {
        if session.query_unpaged(probe.as_str(), &[]).await.is_ok() {
            return Ok(());
        }
        match session.query_unpaged(alter.as_str(), &[]).await {
            Ok(_) => return Ok(()),
            Err(e) if attempt < SCHEMA_ATTEMPTS => {
                warn!(error = %e, attempt, table, column, "adding a column failed (another node may be adding it); checking again");
                tokio::time::sleep(std::time::Duration::from_millis(500 * u64::from(attempt)))
                    .await;
                attempt += 1;
            }
            Err(e) => return Err(query_error("schema migration")(e)),
        }
    }
}

/// The keyspace and tables, created if absent.
fn schema(ks: &str, replication: &str) -> Vec<String> {
    let key = "scheduled_time timestamp, ordering_id text, uniqueness_key text";
    let clustering = "scheduled_time, ordering_id, uniqueness_key";
    vec![
        format!("CREATE KEYSPACE IF NOT EXISTS {ks} WITH replication = {replication}"),
        // The schedule: one wide row per partition and hour, sorted by task key.
        format!(
            "CREATE TABLE IF NOT EXISTS {ks}.scheduled_tasks (partition_id int, hour_bucket timestamp, {key}, \
             task_data text, enqueue_offset bigint, PRIMARY KEY ((partition_id, hour_bucket), {clustering}))"
        ),
        // Final states, laid out like the schedule so a task's status is a single-row read.
        format!(
            "CREATE TABLE IF NOT EXISTS {ks}.task_status (partition_id int, hour_bucket timestamp, {key}, \
             status text, attempts int, updated_at timestamp, last_error text, \
             PRIMARY KEY ((partition_id, hour_bucket), {clustering}))"
        ),
        // Which tree owns each partition: the epoch rises with every claim (fencing).
        format!(
            "CREATE TABLE IF NOT EXISTS {ks}.partition_owners (partition_id int PRIMARY KEY, \
             epoch bigint, owner text, claimed_at timestamp)"
        ),
        // Attempt history per task, newest first.
        format!(
            "CREATE TABLE IF NOT EXISTS {ks}.task_attempts ({key}, attempt int, partition_id int, \
             started_at timestamp, finished_at timestamp, outcome text, error text, \
             PRIMARY KEY (({clustering}), attempt)) WITH CLUSTERING ORDER BY (attempt DESC)"
        ),
        // Running-task leases: one row per partition tree with calls running, written with a
        // TTL and renewed while they run. `running` is a JSON list of [orderingId, task key]
        // (a plain text cell: overwriting it leaves no tombstone, unlike a collection).
        format!(
            "CREATE TABLE IF NOT EXISTS {ks}.task_leases (partition_id int, holder text, node text, \
             epoch bigint, running text, PRIMARY KEY ((partition_id), holder))"
        ),
    ]
}
