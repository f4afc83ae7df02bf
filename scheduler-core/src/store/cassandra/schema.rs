//! The keyspace's schema, a managed artefact: a list of versioned migrations, the version a
//! keyspace is at, and `migrate`, which brings a keyspace to this release's version under a lock
//! (a lightweight transaction) so that concurrent migrations (nodes starting together with
//! `auto_migrate`) cannot race to create a table twice. Nodes check the version when they connect
//! and refuse a keyspace behind or ahead of them.
//!
//! The version and the lock live apart, in the keyspace [`META_KEYSPACE`] (one row per data
//! keyspace): the lock's own table has to be created before anything can be locked, so
//! migrations starting together may race to create it, and Cassandra 2.1 then keeps two ids for
//! that table and refuses later schema changes to its keyspace ("Column family ID mismatch"). Kept
//! out of the data keyspace, such a race can only cost the meta rows (at Cassandra's next
//! restart), and migrating again rebuilds them: every migration is idempotent.
//!
//! Over 500 lines: every migration since version 1, in order; a released migration is never edited,
//! only followed by another.

use std::time::Duration;

use chrono::Utc;
use scylla::client::session::Session;
use tracing::{info, warn};

use super::query_error;
use super::rows::{applied, first_row_of};
use crate::settings::CassandraSettings;
use crate::store::ttl::last_expiry;
use crate::store::{StoreError, StoreResult, TaskStatus};

/// The schema version this release runs on.
pub const SCHEMA_VERSION: u32 = 14;

/// Where every keyspace's schema version and migration lock are kept.
pub const META_KEYSPACE: &str = "scheduler_meta";

/// How long a migration may hold the lock before another may take it (a migrating process that
/// died leaves it to expire).
const LOCK_TTL_SECS: i32 = 120;

/// How long a migration waits for another to finish.
const LOCK_WAIT: Duration = Duration::from_secs(150);

/// What `migrate` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Migration {
    /// The version the keyspace was at (0: no schema).
    pub from: u32,
    /// The version it is at now.
    pub to: u32,
    /// Whether this call applied the migrations (`false`: already current, or another process
    /// migrated it meanwhile).
    pub applied: bool,
}

/// The version `ks` is at: 0 when it has no schema (no keyspace, no version table, or no row).
pub(super) async fn version(session: &Session, ks: &str) -> StoreResult<u32> {
    let read = session
        .query_unpaged(
            format!("SELECT version FROM {META_KEYSPACE}.schema_version WHERE keyspace_name = ?"),
            (ks,),
        )
        .await
        .map_err(query_error("schema version read"));
    let result = match read {
        Ok(result) => result,
        // An unconfigured table or a missing keyspace: no schema yet.
        Err(StoreError::Refused { .. }) => return Ok(0),
        Err(e) => return Err(e),
    };
    let row: Option<(Option<i32>,)> = first_row_of(result, "schema_version")?;
    Ok(row
        .and_then(|(v,)| v)
        .and_then(|v| u32::try_from(v).ok())
        .unwrap_or(0))
}

/// Checks that `settings.keyspace` is at [`SCHEMA_VERSION`], migrating it first when
/// `auto_migrate` is set; then sets the retention of statuses and attempts.
pub(super) async fn check_or_migrate(
    session: &Session,
    settings: &CassandraSettings,
    holder: &str,
) -> StoreResult<()> {
    let ks = &settings.keyspace;
    let found = version(session, ks).await?;
    if found > SCHEMA_VERSION {
        return Err(StoreError::SchemaAhead {
            keyspace: ks.clone(),
            found,
            needs: SCHEMA_VERSION,
        });
    }
    if found < SCHEMA_VERSION {
        if !settings.auto_migrate {
            return Err(StoreError::SchemaBehind {
                keyspace: ks.clone(),
                found,
                needs: SCHEMA_VERSION,
            });
        }
        migrate(session, settings, holder).await?;
    }
    apply_retention(session, settings).await
}

/// Brings `settings.keyspace` to [`SCHEMA_VERSION`]: creates the keyspace, applies the
/// migrations it lacks under the lock and records the version. Idempotent.
pub(super) async fn migrate(
    session: &Session,
    settings: &CassandraSettings,
    holder: &str,
) -> StoreResult<Migration> {
    let ks = &settings.keyspace;
    let from = version(session, ks).await?;
    if from >= SCHEMA_VERSION {
        return Ok(Migration {
            from,
            to: from,
            applied: false,
        });
    }
    create_meta(session, settings).await?;
    let deadline = tokio::time::Instant::now() + LOCK_WAIT;
    loop {
        let at = version(session, ks).await?;
        if at >= SCHEMA_VERSION {
            return Ok(Migration {
                from,
                to: at,
                applied: false,
            });
        }
        let locked = session
            .query_unpaged(
                format!(
                    "INSERT INTO {META_KEYSPACE}.schema_lock (keyspace_name, holder) VALUES (?, ?) \
                     IF NOT EXISTS USING TTL {LOCK_TTL_SECS}"
                ),
                (ks, holder),
            )
            .await
            .map_err(query_error("schema lock"))?;
        if applied(locked, "schema lock")? {
            let done = apply_migrations(session, settings, at, holder).await;
            let unlock = session
                .query_unpaged(
                    format!(
                        "DELETE FROM {META_KEYSPACE}.schema_lock WHERE keyspace_name = ? \
                         IF holder = ?"
                    ),
                    (ks, holder),
                )
                .await;
            if let Err(e) = unlock {
                warn!(error = %e, "schema lock not released; it expires in {LOCK_TTL_SECS} s");
            }
            done?;
            info!(keyspace = %ks, from = at, to = SCHEMA_VERSION, "schema migrated");
            return Ok(Migration {
                from,
                to: SCHEMA_VERSION,
                applied: true,
            });
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(StoreError::query(
                "schema migration",
                std::io::Error::other(format!(
                    "another migration of {ks} has held the lock for over {} s",
                    LOCK_WAIT.as_secs()
                )),
            ));
        }
        info!(keyspace = %ks, "another process is migrating the schema; waiting");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// One creation of the meta keyspace at a time in this process (nodes and tests of one process
/// would otherwise race to create its tables; see the module's doc for other processes).
static META_CREATION: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Creates [`META_KEYSPACE`] and its tables unless they are there.
async fn create_meta(session: &Session, settings: &CassandraSettings) -> StoreResult<()> {
    let _one_at_a_time = META_CREATION.lock().await;
    let probe = session
        .query_unpaged(
            format!("SELECT keyspace_name FROM {META_KEYSPACE}.schema_lock LIMIT 1"),
            &[],
        )
        .await
        .map_err(query_error("schema lock read"));
    match probe {
        Ok(_) => return Ok(()),
        Err(StoreError::Refused { .. }) => {}
        Err(e) => return Err(e),
    }
    for ddl in [
        format!(
            "CREATE KEYSPACE IF NOT EXISTS {META_KEYSPACE} WITH replication = {}",
            settings.replication
        ),
        format!(
            "CREATE TABLE IF NOT EXISTS {META_KEYSPACE}.schema_version (keyspace_name text \
             PRIMARY KEY, version int, migrated_at timestamp, migrated_by text)"
        ),
        format!(
            "CREATE TABLE IF NOT EXISTS {META_KEYSPACE}.schema_lock (keyspace_name text \
             PRIMARY KEY, holder text)"
        ),
    ] {
        run_schema_statement(session, ddl).await?;
    }
    // Every node of the cluster knows the tables before they are used.
    await_agreement(session).await?;
    Ok(())
}

/// Applies the migrations after version `at`, then records the version.
async fn apply_migrations(
    session: &Session,
    settings: &CassandraSettings,
    at: u32,
    holder: &str,
) -> StoreResult<()> {
    let ks = &settings.keyspace;
    if at < 1 {
        let keyspace = format!(
            "CREATE KEYSPACE IF NOT EXISTS {ks} WITH replication = {}",
            settings.replication
        );
        run_schema_statement(session, keyspace).await?;
        for ddl in tables_v1(ks) {
            run_schema_statement(session, ddl).await?;
        }
        // Keyspaces created before versioning may lack it.
        add_column_if_absent(session, ks, "scheduled_tasks", "enqueue_offset", "bigint").await?;
    }
    if at < 2 {
        migrate_v2(session, ks).await?;
    }
    if at < 3 {
        migrate_v3(session, ks).await?;
    }
    if at < 4 {
        migrate_v4(session, ks).await?;
    }
    if at < 5 {
        migrate_v5(session, ks).await?;
    }
    if at < 6 {
        migrate_v6(session, ks).await?;
    }
    if at < 7 {
        migrate_v7(session, ks).await?;
    }
    if at < 8 {
        migrate_v8(session, ks).await?;
    }
    if at < 9 {
        migrate_v9(session, ks).await?;
    }
    if at < 10 {
        migrate_v10(session, ks).await?;
    }
    if at < 11 {
        migrate_v11(session, ks).await?;
    }
    if at < 12 {
        migrate_v12(session, settings).await?;
    }
    if at < 13 {
        migrate_v13(session, ks).await?;
    }
    if at < 14 {
        migrate_v14(session, ks).await?;
    }
    session
        .query_unpaged(
            format!(
                "INSERT INTO {META_KEYSPACE}.schema_version (keyspace_name, version, migrated_at, \
                 migrated_by) VALUES (?, ?, ?, ?)"
            ),
            (ks, SCHEMA_VERSION as i32, Utc::now(), holder),
        )
        .await
        .map_err(query_error("schema version write"))?;
    Ok(())
}

/// Sets the retention of statuses, attempts, group members, jobs and schedule fires: the tables'
/// `default_time_to_live`, from the settings (a table option, not the schema's structure, so each
/// node applies its own). Altered only when it differs, so a node's start makes no schema change
/// in the usual case. Group members live as long as statuses: a member's outcome is what its join
/// reads, and a member delivered again within `status_ttl` finds its status, not a new run. A
/// schedule's fires are kept as long as the statuses of the runs they enqueued.
async fn apply_retention(session: &Session, settings: &CassandraSettings) -> StoreResult<()> {
    let ks = &settings.keyspace;
    for (table, ttl) in [
        ("task_status", settings.status_ttl),
        ("task_attempts", settings.attempts_ttl),
        ("group_members", settings.status_ttl),
        ("group_marks", settings.status_ttl),
        ("jobs", settings.status_ttl),
        ("group_progress", settings.status_ttl),
        ("schedule_fires", settings.status_ttl),
    ] {
        let wanted = table_default_ttl(ttl, Utc::now());
        if table_ttl(session, ks, table).await? == Some(wanted) {
            continue;
        }
        let alter = format!("ALTER TABLE {ks}.{table} WITH default_time_to_live = {wanted}");
        run_schema_statement(session, alter).await?;
    }
    Ok(())
}

/// A table's `default_time_to_live` for a retention of `ttl` (0: kept forever): clamped so that
/// no row written from `now` expires past [`last_expiry`] (see `store::ttl`), in whole days, so
/// that a start makes no schema change on most days even when the clamp applies.
fn table_default_ttl(ttl: Duration, now: chrono::DateTime<Utc>) -> i32 {
    const DAY: i64 = 24 * 3600;
    if ttl.is_zero() {
        return 0;
    }
    let wanted = i64::try_from(ttl.as_secs()).unwrap_or(i64::MAX);
    let room = (last_expiry() - now).num_seconds().div_euclid(DAY) * DAY;
    // At least a day: past 2038 no retention fits, and a day is the least harm.
    wanted.min(room.max(DAY)).min(i64::from(i32::MAX)) as i32
}

/// The table's `default_time_to_live`, from the schema tables of modern Cassandra and ScyllaDB
/// (`system_schema.tables`) or of Cassandra 2.1 (`system.schema_columnfamilies`); `None` when
/// neither answers.
async fn table_ttl(session: &Session, ks: &str, table: &str) -> StoreResult<Option<i32>> {
    for cql in [
        "SELECT default_time_to_live FROM system_schema.tables \
         WHERE keyspace_name = ? AND table_name = ?",
        "SELECT default_time_to_live FROM system.schema_columnfamilies \
         WHERE keyspace_name = ? AND columnfamily_name = ?",
    ] {
        match session.query_unpaged(cql, (ks, table)).await {
            Ok(result) => {
                let row: Option<(Option<i32>,)> = first_row_of(result, "table options")?;
                return Ok(row.and_then(|(ttl,)| ttl));
            }
            // This version keeps its schema in the other table.
            Err(_) => continue,
        }
    }
    Ok(None)
}

/// Attempts at a schema statement. Migrations hold the lock, but the meta tables may be created
/// by several processes at once (Cassandra can refuse the loser; once the winner's table exists,
/// `IF NOT EXISTS` succeeds), and a statement can fail while an earlier change settles.
const SCHEMA_ATTEMPTS: u32 = 5;

/// Runs one schema statement (`CREATE ... IF NOT EXISTS`, `ALTER`), retried as above.
async fn run_schema_statement(session: &Session, ddl: String) -> StoreResult<()> {
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

/// Version 2: loading without a look-back window. The index of the hour buckets in use, filled
/// from the buckets the schedule holds, each partition's low-water mark, and the retrying tasks.
async fn migrate_v2(session: &Session, ks: &str) -> StoreResult<()> {
    // One row per hour bucket of a partition that may hold tasks; loading jumps between them.
    let index = format!(
        "CREATE TABLE IF NOT EXISTS {ks}.schedule_buckets (partition_id int, \
         hour_bucket timestamp, PRIMARY KEY ((partition_id), hour_bucket))"
    );
    run_schema_statement(session, index).await?;
    // Tasks retrying: a new tree loads them from here, not from the low-water mark, so a task
    // that retries for hours does not hold the mark back.
    let retrying = format!(
        "CREATE TABLE IF NOT EXISTS {ks}.retrying_tasks (partition_id int, \
         scheduled_time timestamp, ordering_id text, uniqueness_key text, \
         PRIMARY KEY ((partition_id), scheduled_time, ordering_id, uniqueness_key))"
    );
    run_schema_statement(session, retrying).await?;
    // Every task due before it has a final status: a new tree loads from there.
    add_column_if_absent(session, ks, "partition_owners", "low_water", "timestamp").await?;
    await_agreement(session).await?;
    // The buckets a version-1 keyspace already holds (a scan of partition keys only).
    let mut distinct = scylla::statement::unprepared::Statement::new(format!(
        "SELECT DISTINCT partition_id, hour_bucket FROM {ks}.scheduled_tasks"
    ));
    distinct.set_page_size(1000);
    let insert = session
        .prepare(format!(
            "INSERT INTO {ks}.schedule_buckets (partition_id, hour_bucket) VALUES (?, ?)"
        ))
        .await
        .map_err(migration_error)?;
    let mut rows = session
        .query_iter(distinct, &[])
        .await
        .map_err(migration_error)?
        .rows_stream::<(i32, chrono::DateTime<Utc>)>()
        .map_err(|e| StoreError::Corrupt {
            what: "scheduled_tasks",
            reason: e.to_string(),
        })?;
    let mut indexed = 0u64;
    while let Some(row) = futures::TryStreamExt::try_next(&mut rows)
        .await
        .map_err(migration_error)?
    {
        session
            .execute_unpaged(&insert, row)
            .await
            .map_err(query_error("schema migration"))?;
        indexed += 1;
    }
    info!(keyspace = %ks, buckets = indexed, "hour buckets indexed");
    Ok(())
}

/// Version 3: task types, priorities, conflict modes and dead letters. A schedule row without a
/// type (written before) is a task of the default type with priority 0 and no conflict mode.
async fn migrate_v3(session: &Session, ks: &str) -> StoreResult<()> {
    for (column, cql_type) in [
        ("task_type", "text"),
        ("priority", "int"),
        ("on_conflict", "text"),
        ("max_wait_ms", "bigint"),
    ] {
        add_column_if_absent(session, ks, "scheduled_tasks", column, cql_type).await?;
    }
    // Each identity's current task, whole (see `store::identities`).
    let identities = format!(
        "CREATE TABLE IF NOT EXISTS {ks}.task_identities (partition_id int, ordering_id text, \
         uniqueness_key text, scheduled_time timestamp, task_data text, task_type text, \
         priority int, on_conflict text, max_wait_ms bigint, first_time timestamp, \
         record_offset bigint, PRIMARY KEY ((partition_id, ordering_id), uniqueness_key))"
    );
    run_schema_statement(session, identities).await?;
    // One partition per day of the tasks' due times, keyed by task: recording a task's dead
    // letter again overwrites it.
    let letters = format!(
        "CREATE TABLE IF NOT EXISTS {ks}.dead_letters (day_bucket timestamp, \
         scheduled_time timestamp, ordering_id text, uniqueness_key text, partition_id int, \
         task_type text, priority int, task_data text, attempts int, last_error text, \
         reason text, dead_at timestamp, redriven_at timestamp, redrives int, \
         PRIMARY KEY ((day_bucket), scheduled_time, ordering_id, uniqueness_key))"
    );
    run_schema_statement(session, letters).await?;
    // The days that hold dead letters, so listing skips empty days (one partition: a day adds
    // one cell).
    let days = format!(
        "CREATE TABLE IF NOT EXISTS {ks}.dead_letter_days (shard int, day_bucket timestamp, \
         PRIMARY KEY ((shard), day_bucket))"
    );
    run_schema_statement(session, days).await?;
    await_agreement(session).await
}

/// Version 4: task groups. A task's group fields are one JSON text (`grouping`, see
/// `scheduler_client::wire::encode_grouping`) wherever a task is stored whole, a status keeps its
/// handler's result, and `group_members` holds each group's finished members. Null in rows
/// written before: a task without a group, a status without a result.
async fn migrate_v4(session: &Session, ks: &str) -> StoreResult<()> {
    for table in ["scheduled_tasks", "task_identities", "dead_letters"] {
        add_column_if_absent(session, ks, table, "grouping", "text").await?;
    }
    add_column_if_absent(session, ks, "task_status", "result", "text").await?;
    // One partition per group, a row per finished member; the header in static columns, so
    // that a member's write and the header's are one statement, and `failed_by` can be set
    // once by a lightweight transaction (`IF failed_by = null`).
    let members = format!(
        "CREATE TABLE IF NOT EXISTS {ks}.group_members (task_type text, group_id text, \
         member int, total int static, fail_fast boolean static, failed_by int static, \
         ordering_id text, scheduled_time timestamp, uniqueness_key text, status text, \
         error text, result text, finished_at timestamp, parent text static, \
         PRIMARY KEY ((task_type, group_id), member))"
    );
    run_schema_statement(session, members).await?;
    // (A keyspace migrated by a build of this version without sub-tasks lacks it.)
    add_column_if_absent(session, ks, "group_members", "parent", "text static").await?;
    await_agreement(session).await
}

/// Version 5: suspensions and jobs. What operators suspended, the jobs coordinators started
/// and their buckets' progress.
async fn migrate_v5(session: &Session, ks: &str) -> StoreResult<()> {
    // What operators suspended: one small partition (`shard` is always 0), so that a node reads
    // every suspension with one single-partition query. No TTL: a suspension lasts until it is
    // lifted.
    let suspensions = format!(
        "CREATE TABLE IF NOT EXISTS {ks}.suspensions (shard int, kind text, target text, \
         since timestamp, reason text, PRIMARY KEY ((shard), kind, target))"
    );
    run_schema_statement(session, suspensions).await?;
    // Jobs (one small partition, like the suspensions) and their buckets' progress (a partition
    // per group, beside `group_members`).
    let jobs = format!(
        "CREATE TABLE IF NOT EXISTS {ks}.jobs (shard int, job_id text, ordering_id text, \
         scheduled_time timestamp, uniqueness_key text, task_type text, group_id text, \
         buckets int, started_at timestamp, PRIMARY KEY ((shard), job_id))"
    );
    run_schema_statement(session, jobs).await?;
    let progress = format!(
        "CREATE TABLE IF NOT EXISTS {ks}.group_progress (task_type text, group_id text, \
         member int, items bigint, updated_at timestamp, \
         PRIMARY KEY ((task_type, group_id), member))"
    );
    run_schema_statement(session, progress).await?;
    await_agreement(session).await
}

/// Version 6: recurring schedules. Their definitions and where each one's chain of ticks stands,
/// and what each fire did.
async fn migrate_v6(session: &Session, ks: &str) -> StoreResult<()> {
    // One small partition (`shard` is always 0), like the suspensions, so that a listing is one
    // single-partition query. `definition` is the schedule as JSON (`recurring::ScheduleSpec`).
    // No TTL: a schedule lasts until it is deleted.
    let schedules = format!(
        "CREATE TABLE IF NOT EXISTS {ks}.recurring_schedules (shard int, id text, \
         definition text, paused boolean, revision bigint, created_at timestamp, \
         updated_at timestamp, next_fire timestamp, last_fire timestamp, \
         PRIMARY KEY ((shard), id))"
    );
    run_schema_statement(session, schedules).await?;
    // A partition per schedule, newest fire first; kept for the status retention (the table's
    // `default_time_to_live`, set by `apply_retention`).
    let fires = format!(
        "CREATE TABLE IF NOT EXISTS {ks}.schedule_fires (schedule_id text, \
         fire_time timestamp, outcome text, run_time timestamp, missed_count bigint, \
         missed_last timestamp, recorded_at timestamp, \
         PRIMARY KEY ((schedule_id), fire_time)) WITH CLUSTERING ORDER BY (fire_time DESC)"
    );
    run_schema_statement(session, fires).await?;
    await_agreement(session).await
}

/// Version 7: cancellations deferred while an earlier tree of the partition may still call a
/// task of their orderingId (`actors::cancels`), read by the next tree as it starts.
async fn migrate_v7(session: &Session, ks: &str) -> StoreResult<()> {
    let deferred = format!(
        "CREATE TABLE IF NOT EXISTS {ks}.deferred_cancels (partition_id int, \
         scheduled_time timestamp, ordering_id text, uniqueness_key text, \
         cancelled_at timestamp, \
         PRIMARY KEY ((partition_id), scheduled_time, ordering_id, uniqueness_key))"
    );
    run_schema_statement(session, deferred).await?;
    await_agreement(session).await
}

/// Version 8: the tasks a partition's low-water mark passed while they were not final, listed
/// with it (`behind_mark`, a JSON list of task keys: a text cell, overwritten by each advance,
/// leaves no tombstone), instead of rows in `retrying_tasks` (read whole as a tree started,
/// through a tombstone per task that retried and finished). `retrying_tasks` stays for a mark an
/// older release wrote.
async fn migrate_v8(session: &Session, ks: &str) -> StoreResult<()> {
    add_column_if_absent(session, ks, "partition_owners", "behind_mark", "text").await?;
    await_agreement(session).await
}

/// Version 9: the lists of deferred tasks (`store::deferred`), so that a tree reads an
/// orderingId's deferred tasks back without reading the rest of the schedule. A tree drops its
/// lists as it stops; rows are written with a TTL for a tree whose process died.
async fn migrate_v9(session: &Session, ks: &str) -> StoreResult<()> {
    let lists = format!(
        "CREATE TABLE IF NOT EXISTS {ks}.deferred_tasks (partition_id int, tree text, \
         ordering_id text, scheduled_time timestamp, enqueue_offset bigint, uniqueness_key text, \
         PRIMARY KEY ((partition_id, tree), ordering_id, scheduled_time, enqueue_offset, \
         uniqueness_key))"
    );
    run_schema_statement(session, lists).await?;
    await_agreement(session).await
}

/// Version 10: the result of a group's parent (`group_members.parent_result`, static, beside
/// `parent`): the parent's own result, which the join of its sub-tasks records in the parent's
/// place in its own group. Null in groups written before: no result.
async fn migrate_v10(session: &Session, ks: &str) -> StoreResult<()> {
    add_column_if_absent(session, ks, "group_members", "parent_result", "text static").await?;
    await_agreement(session).await
}

/// Version 11: identity records deferred while an earlier tree of the partition may still call
/// a task of their orderingId (`deferred_identity_records`, one partition per Kafka partition,
/// read whole as a tree starts, like `deferred_cancels`), each as it was polled.
async fn migrate_v11(session: &Session, ks: &str) -> StoreResult<()> {
    let records = format!(
        "CREATE TABLE IF NOT EXISTS {ks}.deferred_identity_records (partition_id int, \
         ordering_id text, record_offset bigint, record text, trace_parent text, \
         PRIMARY KEY ((partition_id), ordering_id, record_offset))"
    );
    run_schema_statement(session, records).await?;
    await_agreement(session).await
}

/// Version 12: each group's completion tree (`group_marks`, one partition per group beside its
/// `group_members` one): a row per node whose members have all finished, with how many
/// completed, failed and were cancelled. A member reads a few of them instead of the whole
/// group. The groups already stored get the marks their members' climbs would have written
/// (each group read once), so a group part-finished before the upgrade is joined after it.
async fn migrate_v12(session: &Session, settings: &CassandraSettings) -> StoreResult<()> {
    let ks = &settings.keyspace;
    let marks = format!(
        "CREATE TABLE IF NOT EXISTS {ks}.group_marks (task_type text, group_id text, \
         level int, node int, completed int, failed int, cancelled int, items bigint, \
         PRIMARY KEY ((task_type, group_id), level, node))"
    );
    run_schema_statement(session, marks).await?;
    await_agreement(session).await?;
    backfill_group_marks(session, settings).await
}

/// Version 13: per-key limits (`crate::limits`). Permits across the cluster: a row per limit key
/// in use with its holders and a version (`key_permits`, changed by lightweight transactions,
/// removed when no holder is left), and one partition of holders' heartbeat rows
/// (`key_permit_holders`, written with a TTL every third of it: its tombstones are the expired
/// rows of holders gone in the last `gc_grace_seconds`, an hour). And the overrides an operator
/// sets per key at run time (`key_limits`, one partition every node polls).
/// Version 14: when the call that ended a task began (`task_status.started_at`), so the attempt
/// that finished a task on its first try shows its start and duration (it has no attempt row).
async fn migrate_v14(session: &Session, ks: &str) -> StoreResult<()> {
    add_column_if_absent(session, ks, "task_status", "started_at", "timestamp").await?;
    await_agreement(session).await
}

async fn migrate_v13(session: &Session, ks: &str) -> StoreResult<()> {
    let keys = format!(
        "CREATE TABLE IF NOT EXISTS {ks}.key_permits (scope text, limit_key text, \
         version bigint, holders text, PRIMARY KEY ((scope, limit_key)))"
    );
    let holders = format!(
        "CREATE TABLE IF NOT EXISTS {ks}.key_permit_holders (shard int, holder text, \
         beat_at timestamp, PRIMARY KEY ((shard), holder)) WITH gc_grace_seconds = 3600"
    );
    let overrides = format!(
        "CREATE TABLE IF NOT EXISTS {ks}.key_limits (shard int, scope text, limit_key text, \
         limits text, updated_at timestamp, PRIMARY KEY ((shard), scope, limit_key))"
    );
    for ddl in [keys, holders, overrides] {
        run_schema_statement(session, ddl).await?;
    }
    await_agreement(session).await
}

/// Writes the marks of every group in `group_members` (see [`migrate_v12`]), with the status
/// retention's TTL, as the table's default will be.
async fn backfill_group_marks(session: &Session, settings: &CassandraSettings) -> StoreResult<()> {
    use futures::TryStreamExt;
    let ks = &settings.keyspace;
    let mut groups_query = scylla::statement::Statement::new(format!(
        "SELECT DISTINCT task_type, group_id FROM {ks}.group_members"
    ));
    groups_query.set_page_size(1000);
    let groups: Vec<(String, String)> = session
        .query_iter(groups_query, ())
        .await
        .map_err(group_marks_failed)?
        .rows_stream::<(String, String)>()
        .map_err(group_marks_failed)?
        .try_collect()
        .await
        .map_err(group_marks_failed)?;
    let mut members_query = scylla::statement::Statement::new(format!(
        "SELECT total, member, status FROM {ks}.group_members WHERE task_type = ? AND group_id = ?"
    ));
    members_query.set_page_size(1000);
    let mut progress_query = scylla::statement::Statement::new(format!(
        "SELECT member, items FROM {ks}.group_progress WHERE task_type = ? AND group_id = ?"
    ));
    progress_query.set_page_size(1000);
    let ttl = table_default_ttl(settings.status_ttl, Utc::now());
    let insert = format!(
        "INSERT INTO {ks}.group_marks (task_type, group_id, level, node, completed, failed, \
         cancelled, items) VALUES (?, ?, ?, ?, ?, ?, ?, ?) USING TTL {ttl}"
    );
    let insert = session.prepare(insert).await.map_err(group_marks_failed)?;
    for (task_type, group_id) in groups {
        let rows: Vec<(Option<i32>, Option<i32>, Option<String>)> = session
            .query_iter(members_query.clone(), (&task_type, &group_id))
            .await
            .map_err(group_marks_failed)?
            .rows_stream()
            .map_err(group_marks_failed)?
            .try_collect()
            .await
            .map_err(group_marks_failed)?;
        let total = rows
            .iter()
            .find_map(|(total, _, _)| *total)
            .and_then(|t| u32::try_from(t).ok());
        let reported: std::collections::HashMap<i32, i64> = session
            .query_iter(progress_query.clone(), (&task_type, &group_id))
            .await
            .map_err(group_marks_failed)?
            .rows_stream::<(i32, Option<i64>)>()
            .map_err(group_marks_failed)?
            .map_ok(|(member, items)| (member, items.unwrap_or(0)))
            .try_collect()
            .await
            .map_err(group_marks_failed)?;
        let members: Vec<(u32, TaskStatus, u64)> = (rows.iter())
            .filter_map(|(_, member, status)| {
                let items = reported.get(&(*member)?).copied().unwrap_or(0);
                let member = u32::try_from((*member)?).ok()?;
                let status = TaskStatus::parse(status.as_deref()?)?;
                Some((member, status, u64::try_from(items).unwrap_or(0)))
            })
            .collect();
        for mark in crate::store::group_marks::marks_of(&members, total) {
            let number = |n: u32| i32::try_from(n).unwrap_or(i32::MAX);
            let values = (
                &task_type,
                &group_id,
                i32::from(mark.level),
                number(mark.node),
                number(mark.tally.completed),
                number(mark.tally.failed),
                number(mark.tally.cancelled),
                i64::try_from(mark.tally.items).unwrap_or(i64::MAX),
            );
            session
                .execute_unpaged(&insert, values)
                .await
                .map_err(group_marks_failed)?;
        }
    }
    Ok(())
}

/// Waits until every node of the cluster knows the schema changes made so far.
async fn await_agreement(session: &Session) -> StoreResult<()> {
    session
        .await_schema_agreement()
        .await
        .map(|_| ())
        .map_err(|e| StoreError::query("schema agreement", e))
}

fn migration_error(cause: impl std::error::Error + Send + Sync + 'static) -> StoreError {
    StoreError::query("schema migration", cause)
}

fn group_marks_failed(cause: impl std::error::Error + Send + Sync + 'static) -> StoreError {
    StoreError::query("schema migration (group marks)", cause)
}

/// Version 1: the tables, created if absent.
fn tables_v1(ks: &str) -> Vec<String> {
    let key = "scheduled_time timestamp, ordering_id text, uniqueness_key text";
    let clustering = "scheduled_time, ordering_id, uniqueness_key";
    vec![
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tables_retention_ends_before_2038_in_whole_days_and_zero_keeps_forever() {
        let now: chrono::DateTime<Utc> = "2026-11-26T12:00:00Z".parse().unwrap();
        let week = Duration::from_secs(7 * 24 * 3600);
        assert_eq!(table_default_ttl(week, now), 7 * 24 * 3600);
        assert_eq!(table_default_ttl(Duration::ZERO, now), 0);
        // 20 years (the settings' upper bound) from now would overflow Cassandra 2.1's expiry.
        let twenty_years = Duration::from_secs(630_720_000);
        let ttl = table_default_ttl(twenty_years, now);
        assert_eq!(ttl % (24 * 3600), 0);
        assert!(now.timestamp() + i64::from(ttl) < i64::from(i32::MAX) - 24 * 3600);
        assert!(now.timestamp() + i64::from(ttl) > i64::from(i32::MAX) - 3 * 24 * 3600);
    }
}
