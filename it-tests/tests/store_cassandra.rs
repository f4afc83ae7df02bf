//! The engine's Cassandra store against the real database: schema creation, the schedule's
//! time-bucketed wide rows read in key order across buckets, status and attempt records, task
//! groups (a task's group fields wherever it is stored, the groups' members and headers),
//! suspensions, recurring schedules and their fires, and deferred-task lists.

use chrono::{DateTime, TimeDelta, TimeZone, Utc};
use it_tests::teardown::Teardown;
use it_tests::{unique_name, Stack};
use std::time::Duration;

use futures::StreamExt;
use scheduler_client::{GroupMember, OnConflict, RunOrder};
use scheduler_core::recurring::{CatchUp, Overlap, ScheduleSpec};
use scheduler_core::settings::{CassandraSettings, ConsistencyLevel, SerialConsistencyLevel};
use scheduler_core::store::{
    AttemptOutcome, AttemptRecord, AttemptStore, BucketProgress, CassandraStore, DeadLetter,
    DeadLetterFilter, DeadLetterStore, DeadReason, DeferralList, DeferredIdentityRecord,
    DeferredStore, FinishStore, FireOutcome, FireRecord, GroupKey, GroupMark, GroupStore,
    GroupTally, IdentityRecord, IdentityStore, JobStore, ListBehind, MemberOutcome, OwnershipStore,
    ParentRecord, PartitionOwner, PermitStore, ReadCursor, RecurringStore, ScheduleRecord,
    ScheduleStore, StatusRecord, StatusStore, StoreError, StoreLevels, Suspension, SuspensionStore,
    SuspensionTarget, TaskStatus,
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
    let _teardown = Teardown::new(Stack::from_env()).keyspace(&keyspace);
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
        result: None,
        started_at: None,
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

    // Reading many by key, in one read per hour bucket naming only their rows: the removed
    // task and a key never written are not found; the others come back whole.
    let mut named = expected.clone();
    named.push(TaskKey {
        uniqueness_key: "never written".into(),
        ..expected[3].clone()
    });
    let mut found = store
        .scheduled_tasks(5, named)
        .await
        .expect("task batch read");
    found.sort_by_key(Task::key);
    assert_eq!(found, all[1..], "every task named but the removed one");

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
    let _teardown = Teardown::new(Stack::from_env()).keyspace(&keyspace);
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

/// A polled batch goes to Cassandra as a few unlogged batches, one hour bucket (one Cassandra
/// partition) each, not a request per task; every insert variant reads back whole, and a task
/// too large to share a batch is written alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_polled_batch_is_written_in_a_few_batches_per_hour_bucket_and_reads_back_whole() {
    Stack::from_env().require_cassandra().await;
    let keyspace = unique_name("it_store_batches");
    let _teardown = Teardown::new(Stack::from_env()).keyspace(&keyspace);
    let store = CassandraStore::connect(&settings(&keyspace))
        .await
        .expect("connect and create schema");
    let at = Utc
        .with_ymd_and_hms(2030, 1, 1, 10, 0, 0)
        .single()
        .expect("valid time");
    // 300 tasks over three hour buckets: plain, with a conflict mode, in a group, both.
    let mut tasks: Vec<Task> = (0..300u64)
        .map(|n| {
            let time = at + TimeDelta::seconds((n as i64 * 37) % (3 * 3600));
            let mut task = task(time, &format!("o{}", n % 11), n).of_type("t");
            if n % 4 == 0 {
                task = task.on_conflict(OnConflict::Replace);
            }
            if n % 5 == 0 {
                task = task.in_group(GroupMember::new(format!("g{}", n % 3), 1 + n as u32));
            }
            task
        })
        .collect();
    let pad = serde_json::json!({ "pad": "x".repeat(40 * 1024) });
    let large = Task::new(
        "big",
        at,
        "u-big",
        pad.as_object().cloned().unwrap_or_default(),
    );
    tasks.push(large.clone());

    let refused = store.persist(2, tasks.clone()).await.expect("persist");
    assert!(refused.is_empty(), "{refused:?}");

    let mut expected = tasks;
    expected.sort_by_key(Task::key);
    let loaded = store
        .load(2, ReadCursor::From(at), at + TimeDelta::hours(4), 1000)
        .await
        .expect("load");
    assert_eq!(loaded.len(), expected.len());
    assert!(
        loaded == expected,
        "the tasks read back differ from those written"
    );

    let run: std::collections::BTreeMap<_, _> = store.statements_run().into_iter().collect();
    let batches = run.get("task insert batch").copied().unwrap_or(0);
    let alone = run.get("task insert").copied().unwrap_or(0);
    assert_eq!(alone, 1, "only the large task is written alone: {run:?}");
    assert!(
        (3..=15).contains(&batches),
        "{batches} batches for 300 small tasks over three buckets: {run:?}"
    );
}

/// A task's end is one request: its final status and its removal from the schedule, both rows
/// of one partition key, go as one batch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tasks_final_status_and_its_removal_from_the_schedule_are_one_request() {
    Stack::from_env().require_cassandra().await;
    let keyspace = unique_name("it_store_finish");
    let _teardown = Teardown::new(Stack::from_env()).keyspace(&keyspace);
    let store = CassandraStore::connect(&settings(&keyspace))
        .await
        .expect("connect and create schema");
    let at = Utc
        .with_ymd_and_hms(2030, 1, 1, 10, 0, 0)
        .single()
        .expect("valid time");
    let (done, other) = (task(at, "o", 1), task(at, "o", 2));
    let refused = store
        .persist(5, vec![done.clone(), other.clone()])
        .await
        .expect("persist");
    assert!(refused.is_empty(), "{refused:?}");
    let record = StatusRecord {
        status: TaskStatus::Completed,
        attempts: 1,
        updated_at: at + TimeDelta::seconds(1),
        last_error: None,
        result: Some(serde_json::json!({ "ok": true })),
        started_at: None,
    };
    let before: std::collections::BTreeMap<_, _> = store.statements_run().into_iter().collect();
    store
        .finish(5, done.key(), record.clone())
        .await
        .expect("finish");
    let after: std::collections::BTreeMap<_, _> = store.statements_run().into_iter().collect();
    let rows: std::collections::BTreeMap<_, _> = store.rows_run().into_iter().collect();
    let writes = |counts: &std::collections::BTreeMap<&str, u64>| {
        counts.get("status write").copied().unwrap_or(0)
    };
    assert_eq!(
        writes(&after) - writes(&before),
        1,
        "one request: {after:?}"
    );
    assert_eq!(
        rows.get("status write").copied(),
        Some(2),
        "of two rows: {rows:?}"
    );
    assert!(!after.contains_key("schedule delete"), "{after:?}");

    let status = store.status(5, done.key()).await.expect("status read");
    assert_eq!(status, Some(record));
    assert_eq!(
        store.scheduled_task(5, done.key()).await.expect("read"),
        None
    );
    assert_eq!(
        store.scheduled_task(5, other.key()).await.expect("read"),
        Some(other.clone()),
        "the other task of the bucket stays"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keyspace_from_before_enqueue_offsets_is_migrated_and_its_rows_still_load() {
    let stack = Stack::from_env();
    stack.require_cassandra().await;
    let keyspace = unique_name("it_migrate");
    let _teardown = Teardown::new(Stack::from_env()).keyspace(&keyspace);
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

    let default_keyspace = unique_name("it_levels_default");
    let _teardown_defaults = Teardown::new(Stack::from_env()).keyspace(&default_keyspace);
    let defaults = CassandraStore::connect(&settings(&default_keyspace))
        .await
        .expect("connect");
    assert_eq!(
        defaults.levels().await.expect("levels"),
        StoreLevels {
            consistency: Some(ConsistencyLevel::LocalQuorum),
            serial_consistency: Some(SerialConsistencyLevel::LocalSerial),
            request_timeout: Some(Duration::from_secs(30)),
            claim_serial_consistency: Some(SerialConsistencyLevel::LocalSerial),
            ownership_check_consistency: None,
        }
    );

    let keyspace = unique_name("it_levels");

    let _teardown = Teardown::new(Stack::from_env()).keyspace(&keyspace);
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
        store.levels().await.expect("levels"),
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
    // The owners' read names each partition's last claimer, in partition order.
    let at = |s: i64| DateTime::from_timestamp_millis(1_790_000_000_000 + s).expect("a time");
    store
        .claim_partition(1, "n1".into(), at(1))
        .await
        .expect("claim");
    let again = store
        .claim_partition(3, "n2".into(), at(2))
        .await
        .expect("claim");
    let owners = store.owners().await.expect("owners");
    let owner = |partition, epoch, node: &str, claimed| PartitionOwner {
        partition,
        epoch,
        owner: Some(node.into()),
        claimed_at: Some(claimed),
    };
    assert_eq!(
        owners,
        vec![owner(1, 1, "n1", at(1)), owner(3, again, "n2", at(2))]
    );
    assert_eq!(again, first + 1);

    // Deferred cancels round trip, per partition, with the time each was polled.
    let key = |o: &str| TaskKey {
        scheduled_time: at(10),
        ordering_id: o.into(),
        uniqueness_key: "u".into(),
    };
    for (partition, o, polled) in [(3, "a", at(20)), (3, "b", at(21)), (1, "a", at(22))] {
        store
            .defer_cancel(partition, key(o), polled)
            .await
            .expect("deferred");
    }
    let deferred = store.deferred_cancels(3).await.expect("read");
    assert_eq!(deferred, vec![(key("a"), at(20)), (key("b"), at(21))]);
    store
        .forget_deferred_cancel(3, key("a"))
        .await
        .expect("forgotten");
    assert_eq!(
        store.deferred_cancels(3).await.expect("read"),
        vec![(key("b"), at(21))]
    );
    assert_eq!(store.deferred_cancels(1).await.expect("read").len(), 1);

    // Deferred identity records round trip, per partition, by orderingId and offset, with
    // their value and trace context as they were polled.
    let record = |o: &str, offset: i64, trace: Option<&str>| DeferredIdentityRecord {
        ordering_id: o.into(),
        offset,
        record: format!(
            r#"{{"version":1,"type":"cancel","orderingId":"{o}","uniquenessKey":"é"}}"#
        ),
        trace_parent: trace.map(String::from),
    };
    let kept = [
        record(
            "a",
            7,
            Some("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"),
        ),
        record("a", 9, None),
        record("b", 8, None),
    ];
    for r in &kept {
        store
            .defer_identity_record(3, r.clone())
            .await
            .expect("deferred");
    }
    store
        .defer_identity_record(1, record("a", 7, None))
        .await
        .expect("deferred");
    assert_eq!(
        store.deferred_identity_records(3).await.expect("read"),
        kept.to_vec()
    );
    store
        .forget_deferred_identity_record(3, "a".into(), 7)
        .await
        .expect("forgotten");
    assert_eq!(
        store.deferred_identity_records(3).await.expect("read"),
        kept[1..].to_vec()
    );
    assert_eq!(
        store
            .deferred_identity_records(1)
            .await
            .expect("read")
            .len(),
        1
    );

    // The schema keeps the retention (Cassandra 2.1 lists tables in system.schema_columnfamilies,
    // later versions in system_schema.tables).
    for (table, ttl) in [
        ("task_status", 3600),
        ("task_attempts", 7200),
        // Group members are kept as long as statuses.
        ("group_members", 3600),
    ] {
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
                result: None,
                started_at: None,
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

async fn drop_keyspace(keyspace: &str) {
    let session = Stack::from_env().require_cassandra().await;
    session
        .query_unpaged(format!("DROP KEYSPACE {keyspace}"), &[])
        .await
        .expect("drop keyspace");
}

/// A group member, a join and a grouped task with a conflict mode keep their group fields through
/// the schedule (load and read by key), identities and dead letters; a task without them (a
/// null `grouping`, as in rows from before schema version 4) has no group. A status keeps its
/// handler's result.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grouped_and_join_tasks_keep_their_group_everywhere_a_task_is_stored_and_statuses_their_result(
) {
    Stack::from_env().require_cassandra().await;
    let keyspace = unique_name("it_store_grouping");
    let _teardown = Teardown::new(Stack::from_env()).keyspace(&keyspace);
    let store = CassandraStore::connect(&settings(&keyspace))
        .await
        .expect("connect and create schema");
    let at = Utc
        .with_ymd_and_hms(2030, 1, 1, 10, 0, 0)
        .single()
        .expect("valid time");
    let member = task(at, "o1", 1)
        .of_type("recon")
        .in_group(GroupMember::new("g-1", 2).of(3).fail_fast());
    let open_member = task(at, "o2", 2)
        .of_type("recon")
        .in_group(GroupMember::new("g-1", 1));
    let mut join = task(at + TimeDelta::seconds(1), "o3", 3).of_type("recon");
    join.join_of = Some("g-1".into());
    let identity_member = task(at + TimeDelta::seconds(2), "o4", 4)
        .of_type("recon")
        .on_conflict(OnConflict::Debounce {
            max_wait: Duration::from_secs(60),
        })
        .in_group(GroupMember::new("g-2", 1).of(1));
    let plain = task(at + TimeDelta::seconds(3), "o5", 5);
    let tasks = vec![
        member.clone(),
        open_member.clone(),
        join.clone(),
        identity_member.clone(),
        plain.clone(),
    ];
    let refused = store.persist(7, tasks.clone()).await.expect("persist");
    assert!(refused.is_empty(), "{refused:?}");

    let mut expected = tasks.clone();
    expected.sort_by_key(Task::key);
    let loaded = store
        .load(7, ReadCursor::From(at), at + TimeDelta::hours(1), 100)
        .await
        .expect("load");
    assert_eq!(loaded, expected, "loaded whole, group fields included");
    for task in &tasks {
        let read = store
            .scheduled_task(7, task.key())
            .await
            .expect("task read");
        assert_eq!(read.as_ref(), Some(task), "read by key");
    }
    assert_eq!(loaded.last().and_then(|t| t.group.clone()), None);

    // Identities.
    for task in [&identity_member, &plain] {
        identity_round_trips(&store, 7, task, at, 17).await;
    }

    // Dead letters, read by key and listed.
    for task in [&member, &join, &plain] {
        store
            .add_dead_letter(letter(7, task, at))
            .await
            .expect("dead-letter write");
        let letter = store
            .dead_letter(task.key())
            .await
            .expect("dead-letter read")
            .expect("the dead letter");
        assert_eq!(
            (&letter.task.group, &letter.task.join_of),
            (&task.group, &task.join_of),
            "dead letter of {}",
            task.key()
        );
    }
    let listed = store
        .dead_letters(
            DeadLetterFilter {
                task_type: Some("recon".into()),
                from: at,
                to: at + TimeDelta::days(1),
                include_redriven: true,
            },
            None,
            10,
        )
        .await
        .expect("dead-letter list");
    let groups: Vec<_> = listed
        .iter()
        .map(|l| (l.task.group.clone(), l.task.join_of.clone()))
        .collect();
    assert_eq!(
        groups,
        [
            (member.group.clone(), None),
            (None, Some("g-1".to_string()))
        ]
    );

    // A status keeps its result; one without, and a cancellation, have none.
    let with_result = StatusRecord {
        status: TaskStatus::Completed,
        attempts: 1,
        updated_at: at,
        last_error: None,
        result: Some(serde_json::json!({ "rows": 3, "files": ["a", "b"], "ratio": 0.5 })),
        started_at: None,
    };
    store
        .record_status(7, member.key(), with_result.clone())
        .await
        .expect("status write");
    assert_eq!(
        store.status(7, member.key()).await.expect("status read"),
        Some(with_result)
    );
    let without = StatusRecord {
        status: TaskStatus::Failed,
        attempts: 2,
        updated_at: at,
        last_error: Some("boom".into()),
        result: None,
        started_at: None,
    };
    store
        .record_status(7, plain.key(), without.clone())
        .await
        .expect("status write");
    assert_eq!(
        store.status(7, plain.key()).await.expect("status read"),
        Some(without.clone())
    );
    assert_eq!(
        (store.record_status_if_absent(7, join.key(), StatusRecord::cancelled(at)))
            .await
            .expect("cancel"),
        None,
        "the cancellation is recorded"
    );
    // A status recorded only if absent (a cancel, a redriven letter's failure) leaves one
    // already there as it is, and says which it was.
    assert_eq!(
        (store.record_status_if_absent(7, plain.key(), StatusRecord::cancelled(at)))
            .await
            .expect("write if absent"),
        Some(without.clone())
    );
    assert_eq!(
        store.status(7, plain.key()).await.expect("status read"),
        Some(without)
    );
    let cancelled = store
        .status(7, join.key())
        .await
        .expect("status read")
        .expect("the cancellation");
    assert_eq!(
        (cancelled.status, cancelled.result),
        (TaskStatus::Cancelled, None)
    );
    drop_keyspace(&keyspace).await;
}

/// A limit key (issue 33) travels in the task's `grouping` text: the schedule, identities and
/// dead letters, every table that keeps a whole task, read it back; a task without one has
/// none.
#[tokio::test]
async fn a_tasks_limit_key_is_kept_everywhere_a_task_is_stored() {
    Stack::from_env().require_cassandra().await;
    let keyspace = unique_name("it_store_limit_key");
    let _teardown = Teardown::new(Stack::from_env()).keyspace(&keyspace);
    let store = CassandraStore::connect(&settings(&keyspace))
        .await
        .expect("connect and create schema");
    let at = Utc
        .with_ymd_and_hms(2030, 1, 1, 10, 0, 0)
        .single()
        .expect("valid time");
    let limited = task(at, "o1", 1).with_limit_key("tenant-ä");
    let grouped = task(at, "o2", 2)
        .in_group(GroupMember::new("g-1", 1))
        .with_limit_key("api:billing");
    let plain = task(at, "o3", 3);
    let tasks = vec![limited.clone(), grouped.clone(), plain.clone()];
    let refused = store.persist(3, tasks.clone()).await.expect("persist");
    assert!(refused.is_empty(), "{refused:?}");
    let loaded = store
        .load(3, ReadCursor::From(at), at + TimeDelta::hours(1), 100)
        .await
        .expect("load");
    let keys: Vec<_> = loaded.iter().map(|t| t.limit_key.as_deref()).collect();
    assert_eq!(keys, [Some("tenant-ä"), Some("api:billing"), None]);
    assert_eq!(loaded, tasks, "loaded whole");
    for task in &tasks {
        let read = store.scheduled_task(3, task.key()).await.expect("read");
        assert_eq!(read.as_ref(), Some(task), "read by key");
        identity_round_trips(&store, 3, task, at, 5).await;
        store
            .add_dead_letter(letter(3, task, at))
            .await
            .expect("dead-letter write");
        let letter = store
            .dead_letter(task.key())
            .await
            .expect("dead-letter read")
            .expect("the dead letter");
        assert_eq!(letter.task.limit_key, task.limit_key, "dead letter");
    }
    drop_keyspace(&keyspace).await;
}

/// Writes `task`'s identity record (its record at `offset`, first due `at`) and reads it back
/// whole.
async fn identity_round_trips(
    store: &CassandraStore,
    partition: i32,
    task: &Task,
    at: DateTime<Utc>,
    offset: i64,
) {
    let record = IdentityRecord {
        task: task.clone().enqueued_at(offset),
        first_time: at,
        offset,
    };
    store
        .record_identity(partition, record.clone())
        .await
        .expect("identity write");
    let read = store
        .identity(partition, task.identity())
        .await
        .expect("identity read");
    assert_eq!(read, Some(record), "identity of {}", task.key());
}

/// `task` as a dead letter of `partition` since `at`, after three failed attempts.
fn letter(partition: i32, task: &Task, at: DateTime<Utc>) -> DeadLetter {
    DeadLetter {
        partition,
        task: task.clone(),
        attempts: 3,
        last_error: "boom".into(),
        reason: DeadReason::RetriesExhausted,
        dead_at: at,
        redriven_at: None,
        redrives: 0,
    }
}

fn outcome(index: u32, status: TaskStatus, millis: i64) -> MemberOutcome {
    let finished_at = Utc
        .timestamp_millis_opt(1_900_000_000_000 + millis)
        .single()
        .expect("valid time");
    MemberOutcome {
        index,
        key: TaskKey {
            scheduled_time: finished_at - TimeDelta::minutes(1),
            ordering_id: format!("o{index}"),
            uniqueness_key: format!("u{index}"),
        },
        status,
        error: match status {
            TaskStatus::Failed | TaskStatus::Dropped => Some(format!("member {index} failed")),
            _ => None,
        },
        result: None,
        finished_at,
    }
}

/// `group_members`: a member's row and the header (statics) the members write; the total written
/// by one member is not erased by another without it, a member written again is one row, the
/// group is finished exactly when its last member is recorded; in a fail-fast group the first
/// failure is `failed_by` and stays so, a cancelled member is no failure. A partition holding
/// only a header reads as a group without members, and a group of thousands reads whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn group_members_and_headers_round_trip_and_the_first_failure_of_a_fail_fast_group_stays() {
    let stack = Stack::from_env();
    let session = stack.require_cassandra().await;
    let keyspace = unique_name("it_store_groups");
    let _teardown = Teardown::new(Stack::from_env()).keyspace(&keyspace);
    let store = CassandraStore::connect(&settings(&keyspace))
        .await
        .expect("connect and create schema");
    let group = |id: &str| GroupKey {
        task_type: "recon".into(),
        id: id.into(),
    };

    // All members finish: the total comes with member 2 only.
    let g = group("all");
    assert_eq!(store.group(g.clone()).await.expect("read"), None);
    assert_eq!(
        store.group_header(g.clone()).await.expect("read").failed_by,
        None
    );
    let two = outcome(2, TaskStatus::Completed, 2);
    store
        .record_member(g.clone(), two.clone(), Some(3), false)
        .await
        .expect("member write");
    let state = store.group(g.clone()).await.expect("read").expect("group");
    assert_eq!(
        (state.total, state.fail_fast, state.failed_by),
        (Some(3), false, None)
    );
    assert_eq!(state.members, std::slice::from_ref(&two));
    assert!(!state.is_finished());

    // Member 1 twice, without the total: first failed, then completed with a result. One row,
    // the second write's (its null error included); the total stays.
    store
        .record_member(g.clone(), outcome(1, TaskStatus::Failed, 1), None, false)
        .await
        .expect("member write");
    let one = MemberOutcome {
        result: Some(serde_json::json!({ "rows": 12 })),
        ..outcome(1, TaskStatus::Completed, 5)
    };
    store
        .record_member(g.clone(), one.clone(), None, false)
        .await
        .expect("member write again");
    let state = store.group(g.clone()).await.expect("read").expect("group");
    assert_eq!(state.total, Some(3), "not erased by members without it");
    assert_eq!(state.members, [one.clone(), two.clone()]);
    assert!(!state.is_finished());

    let three = outcome(3, TaskStatus::Dropped, 3);
    store
        .record_member(g.clone(), three.clone(), None, false)
        .await
        .expect("member write");
    let state = store.group(g.clone()).await.expect("read").expect("group");
    assert_eq!(state.members, [one, two, three], "by number");
    assert!(state.is_finished(), "the last member finishes it");
    assert_eq!(
        state.failed_by, None,
        "not fail-fast: a failure is an outcome"
    );
    assert_eq!(store.group_header(g).await.expect("read").failed_by, None);

    // Fail fast: a cancelled member is no failure, the first failure stays.
    let g = group("fast");
    store
        .record_member(
            g.clone(),
            outcome(1, TaskStatus::Cancelled, 1),
            Some(5),
            true,
        )
        .await
        .expect("member write");
    assert_eq!(
        store.group_header(g.clone()).await.expect("read").failed_by,
        None
    );
    let state = store.group(g.clone()).await.expect("read").expect("group");
    assert!(state.fail_fast && !state.is_finished());
    store
        .record_member(g.clone(), outcome(4, TaskStatus::Failed, 2), None, true)
        .await
        .expect("member write");
    assert_eq!(
        store.group_header(g.clone()).await.expect("read").failed_by,
        Some(4)
    );
    store
        .record_member(g.clone(), outcome(2, TaskStatus::Dropped, 3), None, true)
        .await
        .expect("member write");
    assert_eq!(
        store.group_header(g.clone()).await.expect("read").failed_by,
        Some(4),
        "a second failure does not replace the first"
    );
    // A member that does not say fail-fast neither clears the flag nor sets `failed_by`.
    store
        .record_member(g.clone(), outcome(3, TaskStatus::Failed, 4), None, false)
        .await
        .expect("member write");
    let state = store.group(g.clone()).await.expect("read").expect("group");
    assert_eq!(
        (state.total, state.fail_fast, state.failed_by),
        (Some(5), true, Some(4))
    );
    assert_eq!(
        state.members.iter().map(|m| m.index).collect::<Vec<_>>(),
        [1, 2, 3, 4]
    );
    assert!(
        state.is_finished(),
        "finished by the failure, members missing"
    );

    // A partition with only its header (statics, no member row).
    session
        .query_unpaged(
            format!(
                "INSERT INTO {keyspace}.group_members (task_type, group_id, total) \
                 VALUES ('recon', 'header', 4)"
            ),
            &[],
        )
        .await
        .expect("header only");
    let state = store
        .group(group("header"))
        .await
        .expect("read")
        .expect("the header");
    assert_eq!((state.total, state.members.len()), (Some(4), 0));
    assert!(!state.is_finished());

    // A group larger than a page, written in any order.
    let g = group("large");
    let total = 2_500u32;
    futures::stream::iter((1..=total).rev())
        .map(|index| {
            let (store, g) = (store.clone(), g.clone());
            let known = (index == total).then_some(total);
            async move {
                let outcome = outcome(index, TaskStatus::Completed, i64::from(index));
                store.record_member(g, outcome, known, false).await
            }
        })
        .buffer_unordered(32)
        .for_each(|written| async move { written.expect("member write") })
        .await;
    let state = store.group(g).await.expect("read").expect("group");
    assert_eq!(state.total, Some(total));
    assert_eq!(
        state.members.iter().map(|m| m.index).collect::<Vec<_>>(),
        (1..=total).collect::<Vec<_>>(),
        "every member, by number, across pages"
    );
    assert!(state.is_finished());
    drop_keyspace(&keyspace).await;
}

/// `group_members.parent` and `parent_result` (static): the parent of a group of sub-tasks is
/// read back whole with its result by `group_parent` (and as `GroupState.parent`), written again
/// without a result it has none; a group without a parent, or none at all, reads `None`; a
/// parent written before schema version 9 (no `parent_result`) reads with no result.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_groups_parent_round_trips_with_its_result() {
    let stack = Stack::from_env();
    let session = stack.require_cassandra().await;
    let keyspace = unique_name("it_store_group_parents");
    let _teardown = Teardown::new(Stack::from_env()).keyspace(&keyspace);
    let store = CassandraStore::connect(&settings(&keyspace))
        .await
        .expect("connect and create schema");
    let group = |id: &str| GroupKey {
        task_type: "recon".into(),
        id: id.into(),
    };
    let at = Utc
        .timestamp_millis_opt(1_900_000_000_000)
        .single()
        .expect("time");
    let parent = task(at, "p", 1).in_group(GroupMember::new("outer", 3).of(4));
    let g = group("children:1");
    assert_eq!(store.group_parent(g.clone()).await.expect("read"), None);
    let result = serde_json::json!({ "rows": 12, "name": "é\"x" });
    let record = ParentRecord {
        task: parent.clone(),
        result: Some(result),
    };
    store
        .record_parent(g.clone(), record.clone())
        .await
        .expect("parent write");
    assert_eq!(
        store.group_parent(g.clone()).await.expect("read"),
        Some(record)
    );
    // Beside members, which the parent's read does not return.
    store
        .record_member(
            g.clone(),
            outcome(1, TaskStatus::Completed, 1),
            Some(2),
            false,
        )
        .await
        .expect("member write");
    let state = store.group(g.clone()).await.expect("read").expect("group");
    assert_eq!(state.parent, Some(parent.clone()));
    // The parent run again without a result: it has none.
    let again = ParentRecord {
        task: parent.clone(),
        result: None,
    };
    store
        .record_parent(g.clone(), again.clone())
        .await
        .expect("parent write again");
    assert_eq!(
        store.group_parent(g.clone()).await.expect("read"),
        Some(again)
    );
    // A group of members and no parent.
    let plain = group("plain");
    store
        .record_member(
            plain.clone(),
            outcome(1, TaskStatus::Completed, 1),
            Some(1),
            false,
        )
        .await
        .expect("member write");
    assert_eq!(store.group_parent(plain).await.expect("read"), None);
    // A parent written by a release before version 9.
    let text = String::from_utf8(scheduler_client::wire::encode(&parent)).expect("utf-8");
    session
        .query_unpaged(
            format!(
                "UPDATE {keyspace}.group_members SET parent = ? WHERE task_type = 'recon' \
                 AND group_id = 'older'"
            ),
            (text,),
        )
        .await
        .expect("an older parent");
    assert_eq!(
        store.group_parent(group("older")).await.expect("read"),
        Some(ParentRecord {
            task: parent,
            result: None
        })
    );
    drop_keyspace(&keyspace).await;
}

/// `suspensions`: one of each kind written, read back whole (to the millisecond, with or without
/// a reason), written again (the new time and reason replace the old, a reason left out too),
/// one lifted (twice: lifting is idempotent); a row of an unknown kind is corrupt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn suspensions_of_every_kind_round_trip_are_replaced_and_lifted() {
    let session = Stack::from_env().require_cassandra().await;
    let keyspace = unique_name("it_store_suspensions");
    let _teardown = Teardown::new(Stack::from_env()).keyspace(&keyspace);
    let store = CassandraStore::connect(&settings(&keyspace))
        .await
        .expect("connect and create schema");
    assert_eq!(store.suspensions().await.expect("read"), []);

    let at = Utc
        .with_ymd_and_hms(2030, 1, 1, 10, 0, 0)
        .single()
        .expect("valid time");
    let suspension = |target: SuspensionTarget, millis: i64, reason: Option<&str>| Suspension {
        target,
        since: at + TimeDelta::milliseconds(millis),
        reason: reason.map(str::to_string),
    };
    let ordering = SuspensionTarget::OrderingId("customer 7/a".into());
    let task_type = SuspensionTarget::TaskType("send-email".into());
    let group = SuspensionTarget::Group {
        task_type: "recon".into(),
        id: "2026-05/eu".into(),
    };
    let written = [
        suspension(ordering.clone(), 1, Some("bad data")),
        suspension(task_type.clone(), 2, None),
        suspension(group.clone(), 3, Some("input file late")),
    ];
    for s in &written {
        store.suspend(s.clone()).await.expect("suspend");
    }
    // In clustering order: by kind, then target.
    let by_kind = |mut all: Vec<Suspension>| {
        all.sort_by_key(|s| (s.target.kind(), s.target.target()));
        all
    };
    assert_eq!(
        store.suspensions().await.expect("read"),
        by_kind(written.to_vec())
    );

    // Written again: the new time and reason, or none, replace the old ones.
    let again = [
        suspension(ordering.clone(), 10, None),
        suspension(task_type.clone(), 20, Some("SMTP down")),
    ];
    for s in &again {
        store.suspend(s.clone()).await.expect("suspend again");
    }
    let mut expected = vec![again[0].clone(), again[1].clone(), written[2].clone()];
    assert_eq!(
        store.suspensions().await.expect("read"),
        by_kind(expected.clone())
    );

    // Lifted, twice.
    for _ in 0..2 {
        store.resume(task_type.clone()).await.expect("resume");
    }
    expected.retain(|s| s.target != task_type);
    assert_eq!(store.suspensions().await.expect("read"), by_kind(expected));
    // Lifting what was never suspended is no error.
    store
        .resume(SuspensionTarget::TaskType("never".into()))
        .await
        .expect("resume");

    // A row this engine cannot read fails the read, naming the table.
    session
        .query_unpaged(
            format!(
                "INSERT INTO {keyspace}.suspensions (shard, kind, target, since) \
                 VALUES (0, 'queue', 'emails', '2030-01-01T10:00:00Z')"
            ),
            &[],
        )
        .await
        .expect("a foreign row");
    match store.suspensions().await {
        Err(StoreError::Corrupt { what, reason }) => {
            assert_eq!(what, "suspension");
            assert!(reason.contains("\"queue\""), "{reason}");
        }
        other => panic!("a corrupt row read as {other:?}"),
    }
    drop_keyspace(&keyspace).await;
}

/// 2030-01-01T10:00:00Z plus `millis`: the milliseconds Cassandra's timestamps keep.
fn at_millis(millis: i64) -> DateTime<Utc> {
    let at = Utc.with_ymd_and_hms(2030, 1, 1, 10, 0, 0).single();
    at.expect("valid time") + TimeDelta::milliseconds(millis)
}

/// A schedule firing every minute, as the admin API's JSON would define it.
fn every_minute(id: &str) -> ScheduleRecord {
    let spec = serde_json::json!({ "id": id, "every": "1m", "taskType": "tidy" });
    ScheduleRecord {
        spec: serde_json::from_value(spec).expect("a schedule"),
        paused: false,
        revision: 1,
        created_at: at_millis(1),
        updated_at: at_millis(1),
        next_fire: None,
        last_fire: None,
    }
}

/// `recurring_schedules`: a cron schedule with every option (time zone, jitter, catch-up `all`
/// and its window) reads back whole, to the millisecond; written again, the new record replaces
/// it, its chain position cleared; a tick moves only the chain position; the listing is by id;
/// a definition that does not parse is corrupt, for both reads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recurring_schedules_round_trip_are_overwritten_ticked_and_listed_by_id() {
    let session = Stack::from_env().require_cassandra().await;
    let keyspace = unique_name("it_store_recurring");
    let _teardown = Teardown::new(Stack::from_env()).keyspace(&keyspace);
    let store = CassandraStore::connect(&settings(&keyspace))
        .await
        .expect("connect and create schema");
    assert_eq!(store.recurring_schedules().await.expect("read"), []);
    assert_eq!(
        store.recurring_schedule("none".into()).await.expect("read"),
        None
    );

    let spec: ScheduleSpec = serde_json::from_value(serde_json::json!({
        "id": "nightly:recon-eu",
        "cron": "0 30 2 * * Mon-Fri",
        "timeZone": "Europe/Paris",
        "taskType": "recon",
        "orderingId": "recon-eu",
        "data": { "region": "eu", "batch": [1, 2] },
        "priority": 7,
        "overlap": "allow",
        "catchUp": "all",
        "catchUpWindow": "6h",
        "jitter": "1500ms",
        "misfireThreshold": "10s",
    }))
    .expect("a schedule");
    assert_eq!(spec.catch_up, CatchUp::All);
    assert_eq!(spec.overlap, Overlap::Allow);
    assert_eq!(spec.jitter, Some(Duration::from_millis(1500)));
    let nightly = ScheduleRecord {
        spec,
        paused: true,
        revision: 42,
        created_at: at_millis(1),
        updated_at: at_millis(2),
        next_fire: Some(at_millis(3_000)),
        last_fire: Some(at_millis(-3_000)),
    };
    store
        .put_recurring_schedule(nightly.clone())
        .await
        .expect("write");
    let id = nightly.spec.id.clone();
    assert_eq!(
        store.recurring_schedule(id.clone()).await.expect("read"),
        Some(nightly.clone())
    );
    // No TTL: a schedule lasts until it is deleted.
    let (ttl,): (Option<i32>,) = session
        .query_unpaged(
            format!(
                "SELECT TTL(definition) FROM {keyspace}.recurring_schedules \
                 WHERE shard = 0 AND id = ?"
            ),
            (&id,),
        )
        .await
        .expect("ttl read")
        .into_rows_result()
        .expect("rows")
        .single_row()
        .expect("the schedule row");
    assert_eq!(ttl, None);

    // Written again (created again): the whole record replaces the old one, and a chain
    // position it does not have is cleared.
    let recreated = ScheduleRecord {
        paused: false,
        revision: 43,
        updated_at: at_millis(5),
        next_fire: None,
        last_fire: None,
        ..nightly.clone()
    };
    store
        .put_recurring_schedule(recreated.clone())
        .await
        .expect("write again");
    assert_eq!(
        store.recurring_schedule(id.clone()).await.expect("read"),
        Some(recreated.clone())
    );

    // A tick moves the chain position, nothing else; and can clear it.
    store
        .record_tick(
            id.clone(),
            Some(at_millis(60_000)),
            Some(at_millis(120_000)),
        )
        .await
        .expect("tick");
    let ticked = ScheduleRecord {
        last_fire: Some(at_millis(60_000)),
        next_fire: Some(at_millis(120_000)),
        ..recreated.clone()
    };
    assert_eq!(
        store.recurring_schedule(id.clone()).await.expect("read"),
        Some(ticked.clone())
    );
    store
        .record_tick(id.clone(), Some(at_millis(60_000)), None)
        .await
        .expect("tick");
    let ended = ScheduleRecord {
        next_fire: None,
        ..ticked
    };
    assert_eq!(
        store.recurring_schedule(id.clone()).await.expect("read"),
        Some(ended.clone())
    );

    // Listed by id, whatever the order written in.
    let (b, a) = (every_minute("b-hourly"), every_minute("a.minutely"));
    for record in [&b, &a] {
        store
            .put_recurring_schedule(record.clone())
            .await
            .expect("write");
    }
    assert_eq!(
        store.recurring_schedules().await.expect("read"),
        vec![a, b, ended]
    );

    // A definition this engine cannot read fails the read, naming the table and the schedule.
    session
        .query_unpaged(
            format!(
                "INSERT INTO {keyspace}.recurring_schedules (shard, id, definition, paused, \
                 revision, created_at, updated_at) VALUES (0, 'broken', '{{\"id\": ', false, 1, \
                 '2030-01-01T10:00:00Z', '2030-01-01T10:00:00Z')"
            ),
            &[],
        )
        .await
        .expect("a foreign row");
    let corrupt = |read: Result<_, StoreError>| match read {
        Err(StoreError::Corrupt { what, reason }) => {
            assert_eq!(what, "recurring schedule");
            assert!(reason.contains("broken"), "{reason}");
        }
        Ok(other) => panic!("a corrupt row read as {other:?}"),
        Err(other) => panic!("a corrupt row failed as {other:?}"),
    };
    corrupt(store.recurring_schedules().await.map(|all| all.len()));
    corrupt(
        store
            .recurring_schedule("broken".into())
            .await
            .map(|one| usize::from(one.is_some())),
    );
    drop_keyspace(&keyspace).await;
}

/// `schedule_fires`: a tick's fires of each outcome, written in one call, read back whole, newest
/// first, within the limit (none for a limit of 0, none for a schedule without fires); a fire
/// recorded again is replaced, even by another outcome, and of one fire time twice in a call the
/// last is kept; a late tick's largest catch-up is one batch; rows are kept for the status
/// retention; an unknown outcome is corrupt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recurring_schedule_fires_of_every_outcome_read_newest_first_within_the_limit() {
    let session = Stack::from_env().require_cassandra().await;
    let keyspace = unique_name("it_store_recurring_fires");
    let _teardown = Teardown::new(Stack::from_env()).keyspace(&keyspace);
    let store = CassandraStore::connect(&CassandraSettings {
        status_ttl: Duration::from_secs(3600),
        ..settings(&keyspace)
    })
    .await
    .expect("connect and create schema");
    let id = "every-minute".to_string();
    assert_eq!(store.fires(id.clone(), 10).await.expect("read"), []);

    let fire = |minute: i64, outcome: FireOutcome| FireRecord {
        fire_time: at_millis(minute * 60_000),
        outcome,
        recorded_at: at_millis(minute * 60_000 + 7),
    };
    let written = [
        fire(
            1,
            FireOutcome::Missed {
                count: 5_000_000_000,
                last: at_millis(3 * 60_000),
            },
        ),
        fire(
            4,
            FireOutcome::Enqueued {
                run_time: at_millis(4 * 60_000 + 1_234),
            },
        ),
        fire(5, FireOutcome::SkippedOverlap),
        fire(
            6,
            FireOutcome::Enqueued {
                run_time: at_millis(6 * 60_000 + 999),
            },
        ),
    ];
    // A tick's fires, in one call, in any order; none is no write.
    let mut shuffled = written.to_vec();
    shuffled.swap(0, 2);
    store
        .record_fires(id.clone(), shuffled)
        .await
        .expect("write");
    store.record_fires(id.clone(), vec![]).await.expect("none");
    // Another schedule's fires are apart.
    store
        .record_fires("other".into(), vec![fire(5, FireOutcome::SkippedOverlap)])
        .await
        .expect("write");
    let newest_first: Vec<FireRecord> = written.iter().rev().cloned().collect();
    assert_eq!(
        store.fires(id.clone(), 10).await.expect("read"),
        newest_first
    );
    assert_eq!(
        store.fires(id.clone(), 2).await.expect("read"),
        newest_first[..2]
    );
    assert_eq!(store.fires(id.clone(), 0).await.expect("read"), []);

    // Recorded again, even with another outcome: replaced; of one fire time twice in a call, the
    // last is kept (in a batch, the greater "skippedOverlap" would win).
    let again = fire(
        4,
        FireOutcome::Missed {
            count: 1,
            last: at_millis(4 * 60_000),
        },
    );
    let replaced = fire(
        5,
        FireOutcome::Enqueued {
            run_time: at_millis(5 * 60_000 + 1),
        },
    );
    let twice = fire(5, FireOutcome::SkippedOverlap);
    store
        .record_fires(id.clone(), vec![twice, again.clone(), replaced.clone()])
        .await
        .expect("write again");
    assert_eq!(
        store.fires(id.clone(), 10).await.expect("read"),
        vec![written[3].clone(), replaced, again, written[0].clone()]
    );

    // A late tick's catch-up, at its largest (MAX_CATCH_UP_RUNS runs and the range passed
    // over): one batch, read back whole.
    let runs = scheduler_core::recurring::MAX_CATCH_UP_RUNS;
    let last_minute = i64::try_from(runs).expect("a count of runs");
    let mut catch_up: Vec<FireRecord> = (0..=last_minute)
        .map(|m| {
            let outcome = match m {
                0 => FireOutcome::Missed {
                    count: 77,
                    last: at_millis(-60_000),
                },
                _ => FireOutcome::Enqueued {
                    run_time: at_millis(m * 60_000 + 5),
                },
            };
            fire(m, outcome)
        })
        .collect();
    store
        .record_fires("catching-up".into(), catch_up.clone())
        .await
        .expect("a catch-up's fires");
    catch_up.reverse();
    assert_eq!(
        store
            .fires("catching-up".into(), runs + 2)
            .await
            .expect("read"),
        catch_up
    );

    // Kept for the status retention.
    let (left,): (Option<i32>,) = session
        .query_unpaged(
            format!(
                "SELECT TTL(outcome) FROM {keyspace}.schedule_fires WHERE schedule_id = ? \
                 AND fire_time = ?"
            ),
            (&id, at_millis(6 * 60_000)),
        )
        .await
        .expect("ttl read")
        .into_rows_result()
        .expect("rows")
        .single_row()
        .expect("the fire row");
    assert!(
        left.is_some_and(|s| (3500..=3600).contains(&s)),
        "TTL left: {left:?}"
    );

    // An outcome this engine does not know fails the read, naming the table.
    session
        .query_unpaged(
            format!(
                "INSERT INTO {keyspace}.schedule_fires (schedule_id, fire_time, outcome, \
                 recorded_at) VALUES ('other', '2030-01-01T11:00:00Z', 'late', \
                 '2030-01-01T11:00:00Z')"
            ),
            &[],
        )
        .await
        .expect("a foreign row");
    match store.fires("other".into(), 10).await {
        Err(StoreError::Corrupt { what, reason }) => {
            assert_eq!(what, "schedule fire");
            assert!(reason.contains("\"late\""), "{reason}");
        }
        other => panic!("a corrupt row read as {other:?}"),
    }
    drop_keyspace(&keyspace).await;
}

/// A deleted schedule's row and fires are gone; a tick of its chain that lands after the
/// delete writes a row without a definition, which neither read returns; created again, it
/// reads back whole, without the old fires.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_recurring_schedule_loses_its_fires_and_a_late_tick_does_not_bring_it_back() {
    let session = Stack::from_env().require_cassandra().await;
    let keyspace = unique_name("it_store_recurring_delete");
    let _teardown = Teardown::new(Stack::from_env()).keyspace(&keyspace);
    let store = CassandraStore::connect(&settings(&keyspace))
        .await
        .expect("connect and create schema");
    let (gone, kept) = (every_minute("gone"), every_minute("kept"));
    for record in [&gone, &kept] {
        store
            .put_recurring_schedule(record.clone())
            .await
            .expect("write");
    }
    let fire = FireRecord {
        fire_time: at_millis(60_000),
        outcome: FireOutcome::SkippedOverlap,
        recorded_at: at_millis(60_001),
    };
    for id in ["gone", "kept"] {
        store
            .record_fires(id.into(), vec![fire.clone()])
            .await
            .expect("fire");
    }

    // Deleted twice: deleting is idempotent.
    for _ in 0..2 {
        store
            .delete_recurring_schedule("gone".into())
            .await
            .expect("delete");
    }
    assert_eq!(
        store.recurring_schedule("gone".into()).await.expect("read"),
        None
    );
    assert_eq!(store.fires("gone".into(), 10).await.expect("read"), []);
    assert_eq!(
        store.recurring_schedules().await.expect("read"),
        vec![kept.clone()]
    );
    assert_eq!(
        store.fires("kept".into(), 10).await.expect("read"),
        vec![fire.clone()]
    );

    // A late tick of the deleted schedule: a row without a definition, read as no schedule.
    store
        .record_tick(
            "gone".into(),
            Some(at_millis(60_000)),
            Some(at_millis(120_000)),
        )
        .await
        .expect("tick");
    let (definition,): (Option<String>,) = session
        .query_unpaged(
            format!(
                "SELECT definition FROM {keyspace}.recurring_schedules \
                 WHERE shard = 0 AND id = 'gone'"
            ),
            &[],
        )
        .await
        .expect("raw read")
        .into_rows_result()
        .expect("rows")
        .single_row()
        .expect("the tick's row");
    assert_eq!(definition, None);
    assert_eq!(
        store.recurring_schedule("gone".into()).await.expect("read"),
        None
    );
    assert_eq!(
        store.recurring_schedules().await.expect("read"),
        vec![kept.clone()]
    );

    // Created again: whole, its chain position as written, no old fires.
    store
        .put_recurring_schedule(gone.clone())
        .await
        .expect("write again");
    assert_eq!(
        store.recurring_schedule("gone".into()).await.expect("read"),
        Some(gone.clone())
    );
    assert_eq!(
        store.recurring_schedules().await.expect("read"),
        vec![gone, kept]
    );
    assert_eq!(store.fires("gone".into(), 10).await.expect("read"), []);
    drop_keyspace(&keyspace).await;
}

/// Identity records live as long as their task's wait plus the status retention, within what
/// Cassandra keeps: with `status_ttl = "0s"` ("kept forever") the record of a task already due
/// stays (it lived one second: a fail-fast group's join ran many times, an `IfAbsent` task ran
/// again); a task due in 2040 keeps its record (Cassandra 2.1 let the TTL overflow and dropped
/// the record at once; newer versions refused the write). A record reads back whole, its task's
/// enqueue offset included (it read back without one, and the task the lifecycle ran from it
/// then had none: issue 30's CI run of `python_producer`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn identity_records_outlive_their_task_with_a_zero_retention_and_for_a_task_after_2038() {
    Stack::from_env().require_cassandra().await;
    let keyspace = unique_name("it_identity_ttl");
    let _teardown = Teardown::new(Stack::from_env()).keyspace(&keyspace);
    let forever = CassandraSettings {
        status_ttl: Duration::ZERO,
        ..settings(&keyspace)
    };
    let store = CassandraStore::connect(&forever)
        .await
        .expect("connect and create schema");
    let record = |task: Task| IdentityRecord {
        first_time: task.scheduled_time,
        offset: 17,
        task: task.on_conflict(OnConflict::IfAbsent).enqueued_at(17),
    };
    let due = record(task(Utc::now() - TimeDelta::seconds(30), "o1", 1));
    let in_2040 = record(task(
        Utc.with_ymd_and_hms(2040, 6, 1, 0, 0, 0)
            .single()
            .expect("valid time"),
        "o2",
        2,
    ));
    for record in [&due, &in_2040] {
        store
            .record_identity(3, record.clone())
            .await
            .expect("identity write");
    }
    // Past the one second the zero retention used to give.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    for record in [&due, &in_2040] {
        let read = store
            .identity(3, record.task.identity())
            .await
            .expect("identity read");
        assert_eq!(read.as_ref(), Some(record), "{}", record.task.key());
    }
    // With a retention, the 2040 task's record lives until just before 2038's limit.
    let week = CassandraStore::connect(&CassandraSettings {
        status_ttl: Duration::from_secs(7 * 24 * 3600),
        ..settings(&keyspace)
    })
    .await
    .expect("connect");
    week.record_identity(3, in_2040.clone())
        .await
        .expect("identity write with a retention");
    let session = Stack::from_env().require_cassandra().await;
    let result = session
        .query_unpaged(
            format!(
                "SELECT TTL(task_data) FROM {keyspace}.task_identities \
                 WHERE partition_id = 3 AND ordering_id = 'o2' AND uniqueness_key = 'u2'"
            ),
            &[],
        )
        .await
        .expect("TTL read");
    let (left,): (Option<i32>,) = result
        .into_rows_result()
        .expect("rows")
        .single_row()
        .expect("one row");
    let expires = Utc::now() + TimeDelta::seconds(i64::from(left.expect("a TTL")));
    let limit = Utc
        .with_ymd_and_hms(2038, 1, 19, 3, 14, 7)
        .single()
        .expect("valid time");
    assert!(
        expires < limit && expires > limit - TimeDelta::days(3),
        "expires {expires}"
    );
    drop_keyspace(&keyspace).await;
}

/// The low-water mark and the tasks listed behind it are one row, written together by a
/// lightweight transaction on the epoch: a stale epoch moves neither; lowering the mark keeps
/// the list (and the deferred-task lists it names); a mark written without a list (an older
/// release's) reads as `None`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_low_water_mark_and_its_list_round_trip_and_a_stale_epoch_moves_neither() {
    Stack::from_env().require_cassandra().await;
    let keyspace = unique_name("it_low_water");
    let _teardown = Teardown::new(Stack::from_env()).keyspace(&keyspace);
    let store = CassandraStore::connect(&settings(&keyspace))
        .await
        .expect("connect and create schema");
    let epoch = store
        .claim_partition(5, "node-a".into(), Utc::now())
        .await
        .expect("claim");
    let at = Utc
        .with_ymd_and_hms(2030, 1, 1, 12, 0, 0)
        .single()
        .expect("valid time");
    let behind: Vec<TaskKey> = ["a", "b\"quoted\"", "ü/ñ"]
        .iter()
        .enumerate()
        .map(|(i, o)| task(at - TimeDelta::seconds(10 - i as i64), o, i as u64).key())
        .collect();
    let lists = vec![ListBehind {
        list: DeferralList {
            partition: 5,
            tree: "node-a-1-1893499200000000".into(),
            ordering_id: "ü/\"d\"".into(),
        },
        from: RunOrder {
            enqueue_offset: 42,
            ..task(at - TimeDelta::seconds(30), "ü/\"d\"", 7).run_order()
        },
    }];
    let advanced = store
        .advance_low_water(5, epoch, at, behind.clone(), lists.clone())
        .await
        .expect("advance");
    assert!(advanced);
    let read = store.low_water(5).await.expect("read").expect("a mark");
    assert_eq!((read.at, &read.behind), (at, &Some(behind.clone())));
    assert_eq!(read.lists, lists);
    // A fenced tree moves nothing.
    let later = at + TimeDelta::hours(1);
    let stale = store
        .advance_low_water(5, epoch - 1, later, Vec::new(), Vec::new())
        .await
        .expect("stale advance");
    assert!(!stale);
    // Lowering keeps the list.
    let lower = at - TimeDelta::hours(1);
    assert!(store.set_low_water(5, epoch, lower).await.expect("lower"));
    let read = store.low_water(5).await.expect("read").expect("a mark");
    assert_eq!(
        (read.at, read.behind, read.lists),
        (lower, Some(behind), lists)
    );
    // An older release wrote the mark alone.
    let session = Stack::from_env().require_cassandra().await;
    session
        .query_unpaged(
            format!("UPDATE {keyspace}.partition_owners SET low_water = ? WHERE partition_id = 6"),
            (at,),
        )
        .await
        .expect("legacy write");
    let read = store.low_water(6).await.expect("read").expect("a mark");
    assert_eq!((read.at, read.behind), (at, None));
    assert_eq!(
        store.legacy_retrying(6).await.expect("legacy read"),
        Vec::new()
    );
    drop_keyspace(&keyspace).await;
}

/// Deferred-task lists: a read is a slice of one orderingId's list from a run order on, in run
/// order (time, then enqueue offset, then uniqueness key) and within its limit, whatever the
/// other orderingIds and trees hold; rows read back and deleted are not read again; dropping a
/// tree's lists drops all of them, and no other tree's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deferred_task_lists_read_one_ordering_ids_slice_in_run_order_and_drop_by_tree() {
    Stack::from_env().require_cassandra().await;
    let keyspace = unique_name("it_deferred");
    let _teardown = Teardown::new(Stack::from_env()).keyspace(&keyspace);
    let store = CassandraStore::connect(&settings(&keyspace))
        .await
        .expect("connect and create schema");
    let at = |s: i64| {
        Utc.with_ymd_and_hms(2030, 1, 1, 12, 0, 0)
            .single()
            .expect("valid time")
            + TimeDelta::seconds(s)
    };
    let run = |s: i64, offset: i64, unique: &str| RunOrder {
        scheduled_time: at(s),
        enqueue_offset: offset,
        uniqueness_key: unique.into(),
    };
    let list = |tree: &str, o: &str| DeferralList {
        partition: 4,
        tree: tree.into(),
        ordering_id: o.into(),
    };
    // Written out of order; ties at one time sort by offset first (-1: unknown).
    let listed = vec![
        run(2, 9, "a"),
        run(1, 7, "z"),
        run(1, -1, "y"),
        run(1, 7, "b"),
        run(3, 0, "c"),
    ];
    store
        .list_deferred(list("t1", "o"), listed.clone())
        .await
        .expect("listed");
    for (tree, o) in [("t1", "n"), ("t1", "p"), ("t2", "o")] {
        store
            .list_deferred(list(tree, o), vec![run(0, 0, "other"), run(5, 0, "other")])
            .await
            .expect("listed");
    }
    let mut in_order = listed.clone();
    in_order.sort();
    let read = |from: RunOrder, limit| store.listed_deferred(list("t1", "o"), from, limit);
    assert_eq!(read(run(0, 0, ""), 10).await.expect("read"), in_order);
    assert_eq!(read(run(0, 0, ""), 2).await.expect("read"), in_order[..2]);
    assert_eq!(
        read(in_order[1].successor(), 10).await.expect("read"),
        in_order[2..],
        "from right after a row"
    );
    assert!(read(run(0, 0, ""), 0).await.expect("read").is_empty());
    // Rows of one time with no enqueue offset (-1: tasks written without one), read from the
    // middle: from there on only (a bound on the time and offset alone read the ones before).
    let flat: Vec<RunOrder> = (0..5).map(|i| run(4, -1, &format!("f{i}"))).collect();
    store
        .list_deferred(list("t1", "q"), flat.clone())
        .await
        .expect("listed");
    let from_the_middle = store.listed_deferred(list("t1", "q"), flat[3].clone(), 2);
    assert_eq!(from_the_middle.await.expect("read"), flat[3..]);
    store
        .unlist_deferred(list("t1", "o"), in_order[..3].to_vec())
        .await
        .expect("unlisted");
    assert_eq!(read(run(0, 0, ""), 10).await.expect("read"), in_order[3..]);

    store
        .drop_deferral_lists(4, "t1".into())
        .await
        .expect("dropped");
    assert!(read(run(0, 0, ""), 10).await.expect("read").is_empty());
    assert_eq!(
        store
            .listed_deferred(list("t2", "o"), run(0, 0, ""), 10)
            .await
            .expect("read")
            .len(),
        2,
        "another tree's list is left"
    );
    drop_keyspace(&keyspace).await;
}

/// `group_marks` and the bounded reads of a member's climb: a range of members (number and
/// status), a range of buckets' progress, a range of one level's marks, and every mark.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_groups_marks_and_the_ranges_a_climb_reads_round_trip() {
    let stack = Stack::from_env();
    stack.require_cassandra().await;
    let keyspace = unique_name("it_group_marks");
    let _teardown = Teardown::new(Stack::from_env()).keyspace(&keyspace);
    let store = CassandraStore::connect(&settings(&keyspace))
        .await
        .expect("connect and create schema");
    let g = GroupKey {
        task_type: "bucket".into(),
        id: "job-1".into(),
    };
    for index in 1..=40 {
        let status = if index == 7 {
            TaskStatus::Failed
        } else {
            TaskStatus::Completed
        };
        (store.record_member(g.clone(), outcome(index, status, 1), Some(40), false))
            .await
            .expect("member");
        let progress = BucketProgress {
            bucket: index,
            items: 10,
            at: Utc::now(),
        };
        (store.record_progress(g.clone(), progress))
            .await
            .expect("progress");
    }
    let members = (store.finished_members(g.clone(), 33, 64))
        .await
        .expect("members");
    assert_eq!(
        members.iter().map(|(i, _)| *i).collect::<Vec<_>>(),
        (33..=40).collect::<Vec<_>>()
    );
    let node = (store.finished_members(g.clone(), 1, 32))
        .await
        .expect("members");
    assert_eq!(node.len(), 32);
    assert_eq!(node[6], (7, TaskStatus::Failed));
    let reported = (store.progress_in(g.clone(), 33, 64))
        .await
        .expect("progress");
    assert_eq!(reported.len(), 8);
    let header = store.group_header(g.clone()).await.expect("header");
    assert_eq!((header.total, header.failed_by), (Some(40), None));

    let mark = |level, node, completed, failed, items| GroupMark {
        level,
        node,
        tally: GroupTally {
            completed,
            failed,
            cancelled: 0,
            items,
        },
    };
    for m in [
        mark(1, 0, 31, 1, 320),
        mark(1, 1, 8, 0, 80),
        mark(2, 0, 39, 1, 400),
    ] {
        store.record_group_mark(g.clone(), m).await.expect("mark");
    }
    // Written again: one row.
    (store.record_group_mark(g.clone(), mark(1, 1, 8, 0, 80)))
        .await
        .expect("mark");
    let level_one = store.group_marks(g.clone(), 1, 0, 31).await.expect("marks");
    assert_eq!(level_one, [mark(1, 0, 31, 1, 320), mark(1, 1, 8, 0, 80)]);
    assert_eq!(
        store.group_marks(g.clone(), 1, 1, 1).await.expect("marks"),
        [mark(1, 1, 8, 0, 80)]
    );
    assert_eq!(
        store.all_group_marks(g.clone()).await.expect("marks"),
        [
            mark(1, 0, 31, 1, 320),
            mark(1, 1, 8, 0, 80),
            mark(2, 0, 39, 1, 400)
        ]
    );
}

/// Schema version 12 writes the marks of the groups already stored: a group part-finished
/// before the upgrade gets the marks its members' climbs would have written, with their items,
/// so its join still comes once its last members finish.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_upgrade_to_group_marks_marks_the_finished_nodes_of_stored_groups() {
    let stack = Stack::from_env();
    let session = stack.require_cassandra().await;
    let keyspace = unique_name("it_marks_backfill");
    let _teardown = Teardown::new(Stack::from_env()).keyspace(&keyspace);
    // `group_members` and `group_progress` as version 11 had them, with a group of 40 whose
    // member 35 has not finished, and one of 3 all finished.
    for cql in [
        format!(
            "CREATE KEYSPACE {keyspace} WITH replication = \
             {{'class': 'SimpleStrategy', 'replication_factor': 1}}"
        ),
        format!(
            "CREATE TABLE {keyspace}.group_members (task_type text, group_id text, member int, \
             total int static, fail_fast boolean static, failed_by int static, \
             ordering_id text, scheduled_time timestamp, uniqueness_key text, status text, \
             error text, result text, finished_at timestamp, parent text static, \
             parent_result text static, PRIMARY KEY ((task_type, group_id), member))"
        ),
        format!(
            "CREATE TABLE {keyspace}.group_progress (task_type text, group_id text, \
             member int, items bigint, updated_at timestamp, \
             PRIMARY KEY ((task_type, group_id), member))"
        ),
    ] {
        session.query_unpaged(cql, &[]).await.expect("old schema");
    }
    let insert = format!(
        "INSERT INTO {keyspace}.group_members (task_type, group_id, member, total, status) \
         VALUES ('bucket', ?, ?, ?, ?)"
    );
    let progress = format!(
        "INSERT INTO {keyspace}.group_progress (task_type, group_id, member, items) \
         VALUES ('bucket', ?, ?, 10)"
    );
    for (group, total) in [("big", 40), ("small", 3)] {
        for member in (1..=total).filter(|m| !(group == "big" && *m == 35)) {
            let status = if member == 7 { "failed" } else { "completed" };
            (session.query_unpaged(insert.clone(), (group, member, total, status)))
                .await
                .expect("old member");
            (session.query_unpaged(progress.clone(), (group, member)))
                .await
                .expect("old progress");
        }
    }
    let store = CassandraStore::connect(&settings(&keyspace))
        .await
        .expect("migrated");
    let key = |id: &str| GroupKey {
        task_type: "bucket".into(),
        id: id.into(),
    };
    let marks = |completed, failed, items| GroupTally {
        completed,
        failed,
        cancelled: 0,
        items,
    };
    // The big group: its first node of 32 is finished, the second (33-40) waits for 35.
    let big = store.all_group_marks(key("big")).await.expect("marks");
    assert_eq!(
        big,
        [GroupMark {
            level: 1,
            node: 0,
            tally: marks(31, 1, 320)
        }]
    );
    // The small group: its node, which is its root.
    let small = store.all_group_marks(key("small")).await.expect("marks");
    assert_eq!(
        small,
        [GroupMark {
            level: 1,
            node: 0,
            tally: marks(3, 0, 30)
        }]
    );
}

/// The statuses of many tasks are read in one request per hour bucket and 100 keys, naming only
/// their rows: a key with a status is found, one without is not, a neighbour never is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn statuses_are_read_a_bucket_of_keys_at_a_time_finding_exactly_the_keys_with_one() {
    Stack::from_env().require_cassandra().await;
    let keyspace = unique_name("it_store_statuses");
    let _teardown = Teardown::new(Stack::from_env()).keyspace(&keyspace);
    let store = CassandraStore::connect(&settings(&keyspace))
        .await
        .expect("connect and create schema");
    let at = Utc
        .with_ymd_and_hms(2030, 1, 1, 10, 0, 0)
        .single()
        .expect("valid time");
    // 150 keys in one hour, 30 in the next; every third has a status, and so does a neighbour
    // of each key that is not asked for.
    let keys: Vec<TaskKey> = (0..180u64)
        .map(|n| {
            let s = i64::try_from(n).expect("small");
            let time = at + TimeDelta::seconds(if n < 150 { s } else { 3_600 + s });
            task(time, &format!("o{}", n % 7), n).key()
        })
        .collect();
    let record = |status| StatusRecord {
        status,
        attempts: 1,
        updated_at: at,
        last_error: None,
        result: None,
        started_at: None,
    };
    let mut expected = std::collections::HashSet::new();
    for (n, key) in keys.iter().enumerate() {
        if n % 3 == 0 {
            store
                .record_status(5, key.clone(), record(TaskStatus::Completed))
                .await
                .expect("status write");
            expected.insert(key.clone());
        }
        let mut neighbour = key.clone();
        neighbour.uniqueness_key.push('x');
        store
            .record_status(5, neighbour, record(TaskStatus::Cancelled))
            .await
            .expect("status write");
    }
    // And one in another partition of the engine.
    store
        .record_status(6, keys[1].clone(), record(TaskStatus::Completed))
        .await
        .expect("status write");
    let before: std::collections::BTreeMap<_, _> = store.statements_run().into_iter().collect();
    let found = store.with_status(5, keys).await.expect("statuses read");
    let after: std::collections::BTreeMap<_, _> = store.statements_run().into_iter().collect();
    assert_eq!(found, expected);
    let reads = |counts: &std::collections::BTreeMap<&str, u64>| {
        counts.get("status batch read").copied().unwrap_or(0)
    };
    assert_eq!(
        reads(&after) - reads(&before),
        3,
        "100 and 50 keys of the first hour, 30 of the second: {after:?}"
    );
    let rows: std::collections::BTreeMap<_, _> = store.rows_run().into_iter().collect();
    assert_eq!(rows.get("status batch read").copied(), Some(60), "{rows:?}");
}

/// Tasks' ends of one hour bucket that come while a request of that bucket is under way go
/// together in the next request (a group commit): far fewer requests than tasks, every status
/// written and every task removed from the schedule.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ends_of_a_busy_bucket_are_written_a_few_requests_for_many_tasks() {
    Stack::from_env().require_cassandra().await;
    let keyspace = unique_name("it_store_ends");
    let _teardown = Teardown::new(Stack::from_env()).keyspace(&keyspace);
    let store = CassandraStore::connect(&settings(&keyspace))
        .await
        .expect("connect and create schema");
    let at = Utc
        .with_ymd_and_hms(2030, 1, 1, 10, 0, 0)
        .single()
        .expect("valid time");
    let tasks: Vec<Task> = (0..200u64)
        .map(|n| {
            task(
                at + TimeDelta::seconds(i64::try_from(n).expect("small")),
                "o",
                n,
            )
        })
        .collect();
    let refused = store.persist(4, tasks.clone()).await.expect("persist");
    assert!(refused.is_empty(), "{refused:?}");
    let record = StatusRecord {
        status: TaskStatus::Completed,
        attempts: 1,
        updated_at: at,
        last_error: None,
        result: None,
        started_at: None,
    };
    let ends = tasks
        .iter()
        .map(|t| store.finish(4, t.key(), record.clone()));
    for end in futures::future::join_all(ends).await {
        end.expect("finish");
    }
    let run: std::collections::BTreeMap<_, _> = store.statements_run().into_iter().collect();
    let rows: std::collections::BTreeMap<_, _> = store.rows_run().into_iter().collect();
    let requests = run.get("status write").copied().unwrap_or(0);
    assert!(
        (4..=100).contains(&requests),
        "{requests} requests for 200 ends: {run:?}"
    );
    assert_eq!(rows.get("status write").copied(), Some(400), "{rows:?}");
    let keys: Vec<TaskKey> = tasks.iter().map(Task::key).collect();
    let finished = store.with_status(4, keys).await.expect("statuses read");
    assert_eq!(finished.len(), 200);
    let left = store
        .load(4, ReadCursor::From(at), at + TimeDelta::hours(1), 1000)
        .await
        .expect("load");
    assert!(left.is_empty(), "{} tasks left in the schedule", left.len());
}

/// Per-key permits across the cluster (schema version 13): a key's row changes only by a
/// lightweight transaction on its version (a stale one is refused), leaves with its last
/// holder, and a holder's heartbeat row lives for its TTL.
#[tokio::test]
async fn a_keys_permits_change_only_from_the_version_read_and_a_holder_lives_for_its_ttl() {
    Stack::from_env().require_cassandra().await;
    let keyspace = unique_name("it_store_permits");
    let _teardown = Teardown::new(Stack::from_env()).keyspace(&keyspace);
    let store = CassandraStore::connect(&settings(&keyspace))
        .await
        .expect("connect and create schema");
    let (scope, key) = ("*".to_string(), "tenant-ä".to_string());
    let holders = |pairs: &[(&str, u32)]| -> std::collections::BTreeMap<String, u32> {
        pairs.iter().map(|(h, n)| (h.to_string(), *n)).collect()
    };
    let read = || store.key_holders(scope.clone(), key.clone());
    assert_eq!(read().await.expect("read"), None);
    let swap = |expected, to| store.swap_key_holders(scope.clone(), key.clone(), expected, to);
    assert!(swap(None, holders(&[("a@1.0", 2)]))
        .await
        .expect("first take"));
    assert!(
        !swap(None, holders(&[("b@1.0", 2)]))
            .await
            .expect("a second first take"),
        "a key taken is not taken again as if free"
    );
    let row = read().await.expect("read").expect("the key's row");
    assert_eq!(
        (row.version, row.holders.clone()),
        (1, holders(&[("a@1.0", 2)]))
    );
    let both = holders(&[("a@1.0", 1), ("b@1.0", 1)]);
    assert!(swap(Some(1), both.clone()).await.expect("swap at 1"));
    assert!(
        !swap(Some(1), holders(&[("c@1.0", 2)]))
            .await
            .expect("a stale swap"),
        "a swap from a version no longer current is refused"
    );
    let row = read().await.expect("read").expect("the key's row");
    assert_eq!((row.version, row.holders), (2, both));
    assert!(!swap(Some(1), holders(&[])).await.expect("a stale removal"));
    assert!(swap(Some(2), holders(&[]))
        .await
        .expect("the last holder leaves"));
    assert_eq!(
        read().await.expect("read"),
        None,
        "the row left with its last holder"
    );
    assert!(swap(None, holders(&[("b@1.0", 1)]))
        .await
        .expect("taken again"));
    assert_eq!(read().await.expect("read").map(|r| r.version), Some(1));

    store
        .beat("a@1.0".into(), Duration::from_secs(2))
        .await
        .expect("beat");
    store
        .beat("b@1.0".into(), Duration::from_secs(30))
        .await
        .expect("beat");
    let mut live = store.live_holders().await.expect("holders");
    live.sort();
    assert_eq!(live, ["a@1.0", "b@1.0"]);
    tokio::time::sleep(Duration::from_millis(3_100)).await;
    assert_eq!(
        store.live_holders().await.expect("holders"),
        ["b@1.0"],
        "a's row expired with its TTL"
    );
}
