//! Unit tests of the in-memory store: where it refuses what Cassandra refuses.

use chrono::{DateTime, Utc};
use scheduler_client::TaskKey;

use super::MemoryStore;
use crate::store::{GroupKey, GroupStore, MemberOutcome, ParentRecord, StoreError, TaskStatus};

fn outcome(index: u32) -> MemberOutcome {
    let at = DateTime::<Utc>::UNIX_EPOCH;
    MemberOutcome {
        index,
        key: TaskKey {
            scheduled_time: at,
            ordering_id: "o".into(),
            uniqueness_key: format!("u{index}"),
        },
        status: TaskStatus::Completed,
        error: None,
        result: None,
        finished_at: at,
    }
}

/// `group_members.member` and `total` are CQL `int`s: Cassandra refuses a number past
/// `i32::MAX` (the wire format's `u32` goes further), on every retry.
#[tokio::test]
async fn group_numbers_past_an_int_column_are_refused_as_cassandra_refuses_them() {
    let store = MemoryStore::new();
    let group = GroupKey {
        task_type: "t".into(),
        id: "g".into(),
    };
    let over = i32::MAX as u32 + 1;
    for (index, total) in [(over, None), (1, Some(over)), (u32::MAX, Some(u32::MAX))] {
        let written = store
            .record_member(group.clone(), outcome(index), total, true)
            .await;
        assert!(
            matches!(written, Err(StoreError::Refused { .. })),
            "member {index} of {total:?}: {written:?}"
        );
    }
    let read = store.group(group.clone()).await;
    assert!(matches!(read, Ok(None)), "nothing was written: {read:?}");
    let largest = i32::MAX as u32;
    let written = store
        .record_member(group.clone(), outcome(largest), Some(largest), false)
        .await;
    assert!(written.is_ok(), "{written:?}");
}

/// A group's parent is read back with its result; written again without one, it has none.
#[tokio::test]
async fn a_groups_parent_is_read_back_with_the_result_of_its_last_write() {
    let store = MemoryStore::new();
    let group = GroupKey {
        task_type: "t".into(),
        id: "children:1".into(),
    };
    assert_eq!(store.group_parent(group.clone()).await.ok(), Some(None));
    let at = DateTime::<Utc>::UNIX_EPOCH;
    let task = scheduler_client::Task::new("p", at, "u", Default::default());
    for result in [Some(serde_json::json!({ "n": 1 })), None] {
        let parent = ParentRecord {
            task: task.clone(),
            result,
        };
        let written = store.record_parent(group.clone(), parent.clone()).await;
        assert!(written.is_ok(), "{written:?}");
        let read = store.group_parent(group.clone()).await.ok();
        assert_eq!(read, Some(Some(parent)));
    }
}

/// Every time a record may carry (`wire::check_time`) is one a load reaches: a partition with
/// no low-water mark loads from `schedule_start`.
#[test]
fn loading_starts_before_the_earliest_time_a_task_may_have() {
    assert!(crate::store::schedule_start() <= scheduler_client::wire::earliest_time());
}

/// Identity records expire as `task_identities` rows do: `status_ttl` after their task's time
/// (whole seconds, rounded up), never with a zero `status_ttl` (issue 30, defect 4).
#[tokio::test(start_paused = true)]
async fn identity_records_expire_by_the_status_retention_and_never_with_a_zero_one() {
    use crate::clock::{Clock, TokioClock};
    use crate::store::{IdentityRecord, IdentityStore};
    let start = DateTime::<Utc>::from_timestamp(1_900_000_000, 0).unwrap_or_default();
    let clock = std::sync::Arc::new(TokioClock::starting_at(start));
    let record = |uniqueness_key: &str| IdentityRecord {
        task: scheduler_client::Task::new("o", start, uniqueness_key, Default::default()),
        first_time: start,
        offset: 1,
    };
    let read = |store: &MemoryStore, uniqueness_key: &str| {
        let identity = scheduler_client::TaskIdentity::new("o", uniqueness_key);
        store.identity(0, identity)
    };
    let kept_a_minute = MemoryStore::new().with_status_ttl(
        std::time::Duration::from_secs(60),
        clock.clone() as std::sync::Arc<dyn Clock>,
    );
    let kept_forever = MemoryStore::new().with_status_ttl(std::time::Duration::ZERO, clock.clone());
    for store in [&kept_a_minute, &kept_forever] {
        store.record_identity(0, record("u")).await.expect("write");
    }
    tokio::time::sleep(std::time::Duration::from_secs(59)).await;
    assert!(read(&kept_a_minute, "u").await.expect("read").is_some());
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    assert_eq!(clock.now(), start + chrono::TimeDelta::seconds(60));
    assert_eq!(read(&kept_a_minute, "u").await.expect("read"), None);
    tokio::time::sleep(std::time::Duration::from_secs(86_400 * 365)).await;
    assert!(read(&kept_forever, "u").await.expect("read").is_some());
}

/// A lease's row is a tombstone once released or expired, and every read of the partition's
/// leases steps over them all (`task_leases` is one Cassandra partition per Kafka partition,
/// read whole), failing, as Cassandra does, past the tombstone failure threshold.
#[tokio::test(start_paused = true)]
async fn lease_reads_step_over_released_and_expired_leases_and_fail_past_the_threshold() {
    use crate::store::{LeaseRecord, LeaseStore};
    let store = MemoryStore::new();
    let ttl = std::time::Duration::from_secs(6);
    let lease = |epoch| LeaseRecord {
        node: "n".into(),
        epoch,
        running: vec![("o".into(), "k".into())],
    };
    for tree in 0..6 {
        let holder = format!("n#{tree}");
        store
            .write_lease(0, holder, lease(tree), ttl)
            .await
            .expect("write");
    }
    store
        .write_lease(1, "n#9".into(), lease(9), ttl)
        .await
        .expect("write");
    for tree in 0..3 {
        store
            .delete_lease(0, format!("n#{tree}"))
            .await
            .expect("delete");
    }
    let live = store.leases(0).await.expect("read");
    assert_eq!(
        live.iter().map(|(h, _)| h.as_str()).collect::<Vec<_>>(),
        ["n#3", "n#4", "n#5"]
    );
    assert_eq!(store.tombstones_read(), 3);
    // The others expire; one more tree writes its lease.
    tokio::time::sleep(ttl).await;
    store
        .write_lease(0, "n#6".into(), lease(6), ttl)
        .await
        .expect("write");
    assert_eq!(store.leases(0).await.expect("read").len(), 1);
    assert_eq!(store.tombstones_read(), 3 + 6);
    store.set_tombstone_failure_threshold(5);
    match store.leases(0).await {
        Err(StoreError::Query { operation, .. }) => assert_eq!(operation, "lease read"),
        other => panic!("a read over 6 tombstones with a threshold of 5: {other:?}"),
    }
    // Another partition's leases are not stepped over.
    assert_eq!(store.leases(2).await.expect("read"), vec![]);
}
