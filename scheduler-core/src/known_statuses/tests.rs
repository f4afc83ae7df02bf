use std::sync::Arc;

use chrono::{DateTime, TimeDelta, Utc};
use scheduler_client::TaskKey;

use super::{KnownStatuses, Read};
use crate::store::memory::MemoryStore;
use crate::store::{FinishStore, StatusRecord, StatusStore, TaskStatus};

const P: i32 = 3;

fn at(seconds: i64) -> DateTime<Utc> {
    "2026-11-28T06:00:00Z"
        .parse::<DateTime<Utc>>()
        .expect("a time")
        + TimeDelta::seconds(seconds)
}

fn key(i: i64) -> TaskKey {
    TaskKey {
        scheduled_time: at(i * 600),
        ordering_id: format!("o{}", i % 7),
        uniqueness_key: format!("u{i}"),
    }
}

fn completed() -> StatusRecord {
    StatusRecord {
        status: TaskStatus::Completed,
        attempts: 1,
        updated_at: at(0),
        last_error: None,
        result: None,
        started_at: None,
    }
}

fn known(store: &Arc<MemoryStore>, capacity: usize) -> KnownStatuses {
    KnownStatuses::new(store.clone(), store.clone(), capacity)
}

#[tokio::test]
async fn a_checked_key_without_a_status_is_answered_once_without_a_request() {
    let store = Arc::new(MemoryStore::new());
    let known = known(&store, 100);
    let keys: Vec<TaskKey> = (0..250).map(key).collect();
    store
        .finish(P, key(7), completed())
        .await
        .expect("finished");
    known.check(P, keys.clone()).await.expect("checked");
    // The first 100 keys (its capacity), 6 an hour: a read per hour bucket, not one per key.
    let reads = store.requests_of("status batch read");
    assert_eq!(reads, 17, "one read per hour bucket");
    assert_eq!(
        known.len(),
        99,
        "the first 100 (its capacity) but the finished one"
    );
    assert!(
        !known.knows_unfinished(&key(7)),
        "a key with a status is not known"
    );
    let first = keys
        .iter()
        .find(|k| known.knows_unfinished(k))
        .expect("one known")
        .clone();
    assert_eq!(known.status(P, first.clone()).await.expect("read"), None);
    assert_eq!(store.requests_of("status read"), 0, "answered from memory");
    // Taken once: a second read (a retry) asks the store.
    assert_eq!(known.status(P, first).await.expect("read"), None);
    assert_eq!(store.requests_of("status read"), 1);
    // The finished key is read from the store, and found.
    let found = known.status(P, key(7)).await.expect("read");
    assert_eq!(found.map(|s| s.status), Some(TaskStatus::Completed));
}

#[tokio::test]
async fn a_write_of_the_key_forgets_it_and_keeps_it_out_of_reads_it_overlapped() {
    let store = Arc::new(MemoryStore::new());
    let known = known(&store, 100);
    let (a, b, c) = (key(1), key(2), key(3));
    known.check(P, vec![a.clone()]).await.expect("checked");
    assert!(known.knows_unfinished(&a));
    // A cancel of `a`: forgotten as it begins, so a run after it reads the store.
    assert_eq!(
        (known.record_status_if_absent(P, a.clone(), StatusRecord::cancelled(at(0))))
            .await
            .expect("cancelled"),
        None
    );
    assert!(!known.knows_unfinished(&a));
    let read = known.status(P, a.clone()).await.expect("read");
    assert_eq!(read.map(|s| s.status), Some(TaskStatus::Cancelled));

    // A read that began before a write of `b` that ended before the read did, and one that
    // began while a write of `c` was under way: neither records the key, though neither found
    // a status (the read may have been answered before the write landed).
    let read = {
        let mut state = known.lock();
        Read::begin(known.clone(), &mut state)
    };
    drop(known.writing(&b));
    known.record(read, vec![b.clone()], &Default::default());
    assert!(!known.knows_unfinished(&b));
    let write = known.writing(&c);
    let read = {
        let mut state = known.lock();
        Read::begin(known.clone(), &mut state)
    };
    known.record(read, vec![c.clone()], &Default::default());
    assert!(!known.knows_unfinished(&c));
    // Once the write ended, a read that begins after it may record the key.
    drop(write);
    known
        .check(P, vec![b.clone(), c.clone()])
        .await
        .expect("checked");
    assert!(known.knows_unfinished(&b) && known.knows_unfinished(&c));
    // A run's final write forgets it too.
    known
        .finish(P, c.clone(), completed())
        .await
        .expect("finished");
    assert!(!known.knows_unfinished(&c));
    assert!(known.status(P, c).await.expect("read").is_some());
}

#[tokio::test]
async fn a_forgotten_key_frees_its_room_and_its_run_reads_its_status() {
    let store = Arc::new(MemoryStore::new());
    let known = known(&store, 10);
    let first: Vec<TaskKey> = (0..10).map(key).collect();
    known.check(P, first.clone()).await.expect("checked");
    // Full: a key checked now is not remembered.
    known.check(P, vec![key(10)]).await.expect("checked");
    assert!(!known.knows_unfinished(&key(10)), "no room for it");
    // Five leave the tree's memory (deferred): their room is free again.
    for k in &first[..5] {
        known.forget(k);
    }
    known.check(P, vec![key(10)]).await.expect("checked");
    assert!(
        known.knows_unfinished(&key(10)),
        "checked in the room freed"
    );
    assert_eq!(known.len(), 6);
    let before = store.requests_of("status read");
    known.status(P, first[0].clone()).await.expect("read");
    assert_eq!(
        store.requests_of("status read"),
        before + 1,
        "a forgotten key's run reads its status"
    );
}
