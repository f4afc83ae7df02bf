//! The engine's Cassandra store against the real database: schema creation, the schedule's
//! time-bucketed wide rows read in key order across buckets, and status and attempt records.

use chrono::{DateTime, TimeDelta, TimeZone, Utc};
use it_tests::{unique_name, Stack};
use std::time::Duration;

use scheduler_core::settings::{CassandraSettings, ConsistencyLevel, SerialConsistencyLevel};
use scheduler_core::store::{
    AttemptOutcome, AttemptRecord, AttemptStore, CassandraStore, OwnershipStore, ReadCursor,
    ScheduleStore, StatusRecord, StatusStore, StoreLevels, TaskStatus,
};
use scheduler_core::{Task, TaskKey};

fn settings(keyspace: &str) -> CassandraSettings {
    let stack = Stack::from_env();
    CassandraSettings {
        contact_points: vec![stack.cql_contact_point],
        keyspace: keyspace.to_string(),
        fetch_schema_metadata: false,
        auto_migrate: true,
        ..CassandraSettings::default()
    }
}

fn task(at: DateTime<Utc>, ordering_id: &str, n: u64) -> Task {
    let data = serde_json::json!({ "n": n });
    Task::new(
        ordering_id,
        at,
        format!("u{n}"),
        data.as_object().cloned().unwrap_or_default(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schedule_loads_in_key_order_across_hour_buckets_and_records_outcomes() {
    // Fail with the service's name, not a driver error, when the stack is down.
    Stack::from_env().require_cassandra().await;
    let keyspace = unique_name("it_store");
    let store = CassandraStore::connect(&settings(&keyspace))
        .await
        .expect("connect and create schema");
    // A second connect finds the schema in place.
    CassandraStore::connect(&settings(&keyspace))
        .await
        .expect("schema creation is idempotent");

    let t0 = Utc
        .with_ymd_and_hms(2030, 1, 1, 10, 59, 0)
        .single()
        .expect("valid time");
    let mut tasks = Vec::new();
    for (i, minutes) in [0i64, 1, 2, 30, 61, 61, 125].iter().enumerate() {
        tasks.push(task(
            t0 + TimeDelta::minutes(*minutes),
            &format!("o{}", 9 - i),
            i as u64,
        ));
    }
    // Written in reverse to show the order comes from the store.
    store
        .persist(5, tasks.iter().rev().cloned().collect())
        .await
        .expect("persist");
    store
        .persist(6, vec![task(t0, "other", 99)])
        .await
        .expect("persist other partition");

    let mut expected: Vec<TaskKey> = tasks.iter().map(Task::key).collect();
    expected.sort();
    let until = t0 + TimeDelta::hours(3);
    let all = store
        .load(5, ReadCursor::From(t0), until, 1000)
        .await
        .expect("load all");
    assert_eq!(
        all.iter().map(Task::key).collect::<Vec<_>>(),
        expected,
        "every bucket, in key order"
    );
    assert_eq!(all[0].task_data["n"], 0);

    // Page with a cursor: 3, then the rest after the third key (crossing into later buckets).
    let first = store
        .load(5, ReadCursor::From(t0), until, 3)
        .await
        .expect("first page");
    assert_eq!(
        first.iter().map(Task::key).collect::<Vec<_>>(),
        expected[..3]
    );
    let rest = store
        .load(5, ReadCursor::After(first[2].key()), until, 1000)
        .await
        .expect("after cursor");
    assert_eq!(
        rest.iter().map(Task::key).collect::<Vec<_>>(),
        expected[3..]
    );

    // Two tasks share a time (61 min): the cursor after the first must still return the second.
    let after_first_of_pair = store
        .load(5, ReadCursor::After(expected[4].clone()), until, 1)
        .await
        .expect("after a tie");
    assert_eq!(after_first_of_pair[0].key(), expected[5]);

    // `until` is exclusive.
    let before = store
        .load(5, ReadCursor::From(t0), t0 + TimeDelta::minutes(61), 1000)
        .await
        .expect("bounded load");
    assert_eq!(before.len(), 4);

    // Removing a task from the schedule.
    store
        .remove_scheduled(5, expected[0].clone())
        .await
        .expect("remove");
    let after_remove = store
        .load(5, ReadCursor::From(t0), until, 1000)
        .await
        .expect("load");
    assert_eq!(after_remove.len(), expected.len() - 1);
    assert!(after_remove.iter().all(|t| t.key() != expected[0]));

    // Status and attempts.
    let key = expected[1].clone();
    assert_eq!(
        store.status(5, key.clone()).await.expect("status read"),
        None
    );
    let finished = Utc
        .timestamp_millis_opt(1_900_000_000_123)
        .single()
        .expect("valid time");
    let record = StatusRecord {
        status: TaskStatus::Failed,
        attempts: 3,
        updated_at: finished,
        last_error: Some("boom".into()),
    };
    store
        .record_status(5, key.clone(), record.clone())
        .await
        .expect("status write");
    assert_eq!(
        store.status(5, key.clone()).await.expect("status read"),
        Some(record)
    );
    assert_eq!(
        store.status(6, key.clone()).await.expect("other partition"),
        None
    );
    store
        .record_attempt(
            5,
            key,
            AttemptRecord {
                attempt: 1,
                started_at: finished,
                finished_at: finished,
                outcome: AttemptOutcome::Failed,
                error: Some("boom".into()),
            },
        )
        .await
        .expect("attempt write");

    let second = AttemptRecord {
        attempt: 2,
        started_at: finished,
        finished_at: finished,
        outcome: AttemptOutcome::Succeeded,
        error: None,
    };
    store
        .record_attempt(5, expected[1].clone(), second.clone())
        .await
        .expect("attempt write");
    let history = store
        .attempts(expected[1].clone(), 10)
        .await
        .expect("attempts read");
    assert_eq!(
        history.iter().map(|a| a.attempt).collect::<Vec<_>>(),
        [2, 1],
        "newest first"
    );
    assert_eq!(history[0], second);
    assert_eq!(history[1].error.as_deref(), Some("boom"));
    assert_eq!(
        store
            .attempts(expected[1].clone(), 1)
            .await
            .expect("limited")
            .len(),
        1
    );

    // Reading one scheduled task by key.
    let present = store
        .scheduled_task(5, expected[2].clone())
        .await
        .expect("task read");
    assert_eq!(present.map(|t| t.key()), Some(expected[2].clone()));
    assert_eq!(
        store
            .scheduled_task(5, expected[0].clone())
            .await
            .expect("removed"),
        None
    );

    let session = Stack::from_env().require_cassandra().await;
    session
        .query_unpaged(format!("DROP KEYSPACE {keyspace}"), &[])
        .await
        .expect("drop keyspace");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn of_many_records_of_one_key_in_a_batch_the_last_is_kept_and_a_refused_one_is_reported() {
    Stack::from_env().require_cassandra().await;
    let keyspace = unique_name("it_store_last");
    let store = CassandraStore::connect(&settings(&keyspace))
        .await
        .expect("connect and create schema");
    let at = Utc
        .with_ymd_and_hms(2030, 1, 1, 10, 0, 0)
        .single()
        .expect("valid time");
    // 300 versions of one key (the same uniqueness key, data n = 0..299), then one other task;
    // written concurrently, Cassandra would keep whichever write came last to it.
    let versions: Vec<Task> = (0..300)
        .map(|n| {
            let data = serde_json::json!({ "n": n });
            Task::new(
                "o",
                at,
                "same",
                data.as_object().cloned().unwrap_or_default(),
            )
        })
        .collect();
    let key = versions[0].key();
    let mut batch = versions;
    // A clustering key over Cassandra's 64 KiB limit: refused, reported, not retried.
    let poison = task(at, &"x".repeat(70_000), 1);
    batch.push(poison.clone());
    let refused = store.persist(3, batch).await.expect("persist");
    assert_eq!(
        refused.iter().map(|r| r.key.clone()).collect::<Vec<_>>(),
        vec![poison.key()],
        "{refused:?}"
    );
    let kept = store
        .scheduled_task(3, key)
        .await
        .expect("read")
        .expect("kept");
    assert_eq!(kept.task_data["n"], 299, "the last version wins");
    let session = Stack::from_env().require_cassandra().await;
    session
        .query_unpaged(format!("DROP KEYSPACE {keyspace}"), &[])
        .await
        .expect("drop keyspace");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keyspace_from_before_enqueue_offsets_is_migrated_and_its_rows_still_load() {
    let stack = Stack::from_env();
    stack.require_cassandra().await;
    let keyspace = unique_name("it_migrate");
    // The schedule table as the first release created it: no enqueue_offset column.
    let session = stack.cassandra_session().await.expect("session");
    for cql in [
        format!(
            "CREATE KEYSPACE {keyspace} WITH replication = \
             {{'class': 'SimpleStrategy', 'replication_factor': 1}}"
        ),
        format!(
            "CREATE TABLE {keyspace}.scheduled_tasks (partition_id int, hour_bucket timestamp, \
             scheduled_time timestamp, ordering_id text, uniqueness_key text, task_data text, \
             PRIMARY KEY ((partition_id, hour_bucket), scheduled_time, ordering_id, uniqueness_key))"
        ),
    ] {
        session.query_unpaged(cql, &[]).await.expect("old schema");
    }
    let at = Utc
        .with_ymd_and_hms(2030, 1, 1, 10, 0, 0)
        .single()
        .expect("valid time");
    session
        .query_unpaged(
            format!(
                "INSERT INTO {keyspace}.scheduled_tasks (partition_id, hour_bucket, scheduled_time, \
                 ordering_id, uniqueness_key, task_data) VALUES (1, ?, ?, 'o', 'old', '{{}}')"
            ),
            // Hours before the tasks written after the migration: only the index the migration
            // fills makes loading find its bucket.
            (at - TimeDelta::hours(3), at - TimeDelta::hours(3)),
        )
        .await
        .expect("old row");

    // Two nodes starting together both find the column missing and add it.
    let settings = settings(&keyspace);
    let (a, b) = tokio::join!(
        CassandraStore::connect(&settings),
        CassandraStore::connect(&settings),
    );
    let store = a.expect("migrated");
    b.expect("migrated by the other node");
    store
        .persist(1, vec![task(at, "o", 1).enqueued_at(42)])
        .await
        .expect("persist");
    let loaded = store
        .load(
            1,
            ReadCursor::From(at - TimeDelta::hours(3)),
            at + TimeDelta::seconds(1),
            10,
        )
        .await
        .expect("load");
    let offsets: Vec<(String, Option<i64>)> = loaded
        .iter()
        .map(|t| (t.uniqueness_key.clone(), t.enqueue_offset))
        .collect();
    assert_eq!(
        offsets,
        [("old".to_string(), None), ("u1".to_string(), Some(42))]
    );
    let read = store
        .scheduled_task(1, task(at, "o", 1).key())
        .await
        .expect("read");
    assert_eq!(read.and_then(|t| t.enqueue_offset), Some(42));
}

/// The `[cassandra]` consistency settings reach the driver (read back from it), and the retention
/// settings reach the schema (the tables' `default_time_to_live`, read from Cassandra's schema
/// tables) and the rows written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consistency_and_retention_settings_reach_the_driver_and_the_schema() {
    let stack = Stack::from_env();
    let session = stack.require_cassandra().await;

    let defaults = CassandraStore::connect(&settings(&unique_name("it_levels_default")))
        .await
        .expect("connect");
    assert_eq!(
        defaults.levels(),
        StoreLevels {
            consistency: Some(ConsistencyLevel::LocalQuorum),
            serial_consistency: Some(SerialConsistencyLevel::LocalSerial),
            request_timeout: Some(Duration::from_secs(30)),
            claim_serial_consistency: Some(SerialConsistencyLevel::LocalSerial),
            ownership_check_consistency: None,
        }
    );

    let keyspace = unique_name("it_levels");
    let chosen = CassandraSettings {
        consistency: ConsistencyLevel::One,
        serial_consistency: SerialConsistencyLevel::Serial,
        ownership_serial_consistency: SerialConsistencyLevel::Serial,
        request_timeout: Duration::from_secs(7),
        status_ttl: Duration::from_secs(3600),
        attempts_ttl: Duration::from_secs(7200),
        ..settings(&keyspace)
    };
    let store = CassandraStore::connect(&chosen).await.expect("connect");
    assert_eq!(
        store.levels(),
        StoreLevels {
            consistency: Some(ConsistencyLevel::One),
            serial_consistency: Some(SerialConsistencyLevel::Serial),
            request_timeout: Some(Duration::from_secs(7)),
            claim_serial_consistency: Some(SerialConsistencyLevel::Serial),
            ownership_check_consistency: Some(ConsistencyLevel::Quorum),
        }
    );
    // Claims and checks run at those levels.
    let first = store
        .claim_partition(3, "n1".into(), Utc::now())
        .await
        .expect("claim");
    assert_eq!(store.partition_epoch(3).await.expect("epoch"), first);

    // The schema keeps the retention (Cassandra 2.1 lists tables in system.schema_columnfamilies,
    // later versions in system_schema.tables).
    for (table, ttl) in [("task_status", 3600), ("task_attempts", 7200)] {
        let read = session
            .query_unpaged(
                "SELECT default_time_to_live FROM system.schema_columnfamilies \
                 WHERE keyspace_name = ? AND columnfamily_name = ?",
                (&keyspace, table),
            )
            .await;
        let read = match read {
            Ok(result) => result,
            Err(_) => session
                .query_unpaged(
                    "SELECT default_time_to_live FROM system_schema.tables \
                     WHERE keyspace_name = ? AND table_name = ?",
                    (&keyspace, table),
                )
                .await
                .expect("schema read"),
        };
        let (found,): (i32,) = read
            .into_rows_result()
            .expect("rows")
            .single_row()
            .expect("one table");
        assert_eq!(found, ttl, "{table}");
    }

    // A status written now expires after the retention.
    let at = Utc::now();
    let key = TaskKey {
        scheduled_time: at,
        ordering_id: "o".into(),
        uniqueness_key: "kept".into(),
    };
    store
        .record_status(
            3,
            key.clone(),
            StatusRecord {
                status: TaskStatus::Completed,
                attempts: 1,
                updated_at: at,
                last_error: None,
            },
        )
        .await
        .expect("status");
    let (left,): (Option<i32>,) = session
        .query_unpaged(
            format!(
                "SELECT TTL(status) FROM {keyspace}.task_status WHERE partition_id = 3 \
                 AND hour_bucket = ? AND scheduled_time = ? AND ordering_id = 'o' \
                 AND uniqueness_key = 'kept'"
            ),
            (scheduler_core::store::hour_bucket(at), key.scheduled_time),
        )
        .await
        .expect("ttl read")
        .into_rows_result()
        .expect("rows")
        .single_row()
        .expect("the status row");
    assert!(
        left.is_some_and(|s| (3500..=3600).contains(&s)),
        "TTL left: {left:?}"
    );
}
