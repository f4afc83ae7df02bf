//! Rows deleted after their memtable was flushed stay deleted to every read the engine makes by
//! key. Cassandra 2.1.0 (the dev stack's) answers a slice whose lower bound is exactly a deleted
//! row's key with the row, once the row and its tombstone sit in different sstables or
//! memtables: a finished or cancelled task read back from a deferred list would run again, a
//! deleted schedule would keep firing. The tables flush every 20 ms here, so most rows are
//! flushed before their delete, as in a busy node. (A deferred list is read from a row not read
//! yet, never a deleted one: see `store/deferred/cassandra.rs`.)

use chrono::{DateTime, TimeDelta, TimeZone, Utc};
use it_tests::teardown::Teardown;
use it_tests::{unique_name, Stack};
use scheduler_core::recurring::ScheduleSpec;
use scheduler_core::settings::CassandraSettings;
use scheduler_core::store::{
    CassandraStore, DeadLetter, DeadLetterStore, DeadReason, RecurringStore, ScheduleRecord,
    ScheduleStore, StatusRecord, StatusStore, TaskStatus,
};
use scheduler_core::Task;
use std::time::Duration;

/// Rounds of write, flush, delete and read. Before reads by key ran down from the key, 10 of a
/// run's 80 reads (20 rounds of four kinds) found their deleted row, every kind at least twice.
const ROUNDS: usize = 20;
/// How often the tables flush their memtables, and how long a round waits for one.
const FLUSH_PERIOD_MS: u64 = 20;
const FLUSH_WAIT: Duration = Duration::from_millis(150);

fn at(minute: i64) -> DateTime<Utc> {
    let t0 = Utc.with_ymd_and_hms(2030, 1, 1, 10, 0, 0).single();
    t0.unwrap_or_default() + TimeDelta::minutes(minute)
}

fn task(round: usize, n: usize) -> Task {
    let data = serde_json::json!({ "n": n });
    Task::new(
        format!("o{round}"),
        at(round as i64),
        format!("u{n}"),
        data.as_object().cloned().unwrap_or_default(),
    )
}

fn schedule(id: &str) -> ScheduleRecord {
    let spec = serde_json::json!({ "id": id, "every": "1m", "taskType": "tidy" });
    let spec: ScheduleSpec = serde_json::from_value(spec).expect("a schedule");
    ScheduleRecord {
        spec,
        paused: false,
        revision: 1,
        created_at: at(0),
        updated_at: at(0),
        next_fire: None,
        last_fire: None,
    }
}

/// What one round's reads found that they should not have.
#[derive(Debug, Default, PartialEq)]
struct Resurrected {
    scheduled_task: usize,
    status: usize,
    dead_letter: usize,
    recurring_schedule: usize,
    /// A cancellation (a lightweight transaction, `IF NOT EXISTS`) refused for the status.
    cancel: usize,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_row_deleted_after_its_memtable_flushed_stays_deleted_to_every_read_by_key() {
    let session = Stack::from_env().require_cassandra().await;
    let keyspace = unique_name("it_deletes");
    let _teardown = Teardown::new(Stack::from_env()).keyspace(&keyspace);
    let settings = CassandraSettings {
        contact_points: vec![Stack::from_env().cql_contact_point],
        keyspace: keyspace.clone(),
        fetch_schema_metadata: false,
        auto_migrate: true,
        ..CassandraSettings::default()
    };
    let store = CassandraStore::connect(&settings).await.expect("connect");
    for table in [
        "scheduled_tasks",
        "task_status",
        "dead_letters",
        "recurring_schedules",
    ] {
        session
            .query_unpaged(
                format!(
                    "ALTER TABLE {keyspace}.{table} \
                     WITH memtable_flush_period_in_ms = {FLUSH_PERIOD_MS}"
                ),
                &[],
            )
            .await
            .expect("flush period");
    }

    let mut found = Resurrected::default();
    for round in 0..ROUNDS {
        // Two of each: the first is deleted, the second stays beside it.
        let (gone, kept) = (task(round, 0), task(round, 1));
        let status = StatusRecord {
            status: TaskStatus::Failed,
            attempts: 1,
            updated_at: at(0),
            last_error: None,
            result: None,
            started_at: None,
        };
        let letter = |task: &Task| DeadLetter {
            partition: 3,
            task: task.clone(),
            attempts: 1,
            last_error: "boom".into(),
            reason: DeadReason::RetriesExhausted,
            dead_at: at(0),
            redriven_at: None,
            redrives: 0,
        };
        let schedule_id = format!("nightly-{round}");
        store
            .persist(3, vec![gone.clone(), kept.clone()])
            .await
            .expect("persist");
        for task in [&gone, &kept] {
            store
                .record_status(3, task.key(), status.clone())
                .await
                .expect("status");
            store.add_dead_letter(letter(task)).await.expect("letter");
        }
        store
            .put_recurring_schedule(schedule(&schedule_id))
            .await
            .expect("schedule");

        tokio::time::sleep(FLUSH_WAIT).await;
        store.remove_scheduled(3, gone.key()).await.expect("remove");
        store.clear_status(3, gone.key()).await.expect("clear");
        store
            .remove_dead_letter(gone.key())
            .await
            .expect("remove letter");
        store
            .delete_recurring_schedule(schedule_id.clone())
            .await
            .expect("delete schedule");

        let task_read = store.scheduled_task(3, gone.key()).await.expect("read");
        found.scheduled_task += usize::from(task_read.is_some());
        let status_read = store.status(3, gone.key()).await.expect("status read");
        found.status += usize::from(status_read.is_some());
        let letter_read = store.dead_letter(gone.key()).await.expect("letter read");
        found.dead_letter += usize::from(letter_read.is_some());
        let schedule_read = store
            .recurring_schedule(schedule_id)
            .await
            .expect("schedule read");
        found.recurring_schedule += usize::from(schedule_read.is_some());
        (store.record_status_if_absent(3, gone.key(), StatusRecord::cancelled(at(1))))
            .await
            .expect("cancel");
        let cancelled = store.status(3, gone.key()).await.expect("status read");
        found.cancel += usize::from(cancelled.map(|s| s.status) != Some(TaskStatus::Cancelled));

        // What stays is still read, whole.
        let kept_read = store.scheduled_task(3, kept.key()).await.expect("read");
        assert_eq!(kept_read.map(|t| t.task_data), Some(kept.task_data.clone()));
        assert_eq!(
            store.status(3, kept.key()).await.expect("status read"),
            Some(status.clone())
        );
        let kept_letter = store.dead_letter(kept.key()).await.expect("letter read");
        assert_eq!(kept_letter.map(|l| l.task.key()), Some(kept.key()));
    }
    assert_eq!(
        found,
        Resurrected::default(),
        "reads that found deleted rows"
    );
    // A key never written, just after rows that are, is not found either: a read by key takes
    // no neighbour for the row asked for.
    let absent = task(0, 2);
    assert_eq!(
        store.scheduled_task(3, absent.key()).await.expect("read"),
        None
    );
    assert_eq!(store.status(3, absent.key()).await.expect("read"), None);
    assert!(store
        .dead_letter(absent.key())
        .await
        .expect("read")
        .is_none());
    store
        .put_recurring_schedule(schedule("weekly"))
        .await
        .expect("schedule");
    let next_to_it = store.recurring_schedule("weekly2".into()).await;
    assert_eq!(next_to_it.expect("schedule read"), None);
    let itself = store.recurring_schedule("weekly".into()).await;
    assert!(itself.expect("schedule read").is_some());
}
