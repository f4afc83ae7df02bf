//! Cassandra through the protocol bridge with the `scylla` driver: the CQL the engine relies on
//! (composite partition keys, clustering order, paging, deletes, lightweight transactions).

use std::collections::HashSet;

use chrono::{DateTime, Duration, TimeZone, Utc};
use futures::TryStreamExt;
use it_tests::teardown::Teardown;
use it_tests::{unique_name, Stack};
use scylla::value::Row;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn driver_through_bridge_handles_wide_rows_paging_deletes_and_lwt() {
    let session = Stack::from_env().require_cassandra().await;
    let keyspace = unique_name("it_stack");
    let _teardown = Teardown::new(Stack::from_env()).keyspace(&keyspace);
    session
        .query_unpaged(
            format!(
                "CREATE KEYSPACE {keyspace} WITH replication = {{'class': 'SimpleStrategy', 'replication_factor': 1}}"
            ),
            &[],
        )
        .await
        .expect("create keyspace");
    session
        .query_unpaged(
            format!(
                "CREATE TABLE {keyspace}.schedule (partition_id int, bucket bigint, scheduled_time timestamp, \
                 ordering_id text, uniqueness_key text, task_data text, \
                 PRIMARY KEY ((partition_id, bucket), scheduled_time, ordering_id, uniqueness_key))"
            ),
            &[],
        )
        .await
        .expect("create table");

    // Prepared inserts into one wide row, in shuffled time order.
    let insert = session
        .prepare(format!(
            "INSERT INTO {keyspace}.schedule (partition_id, bucket, scheduled_time, ordering_id, uniqueness_key, task_data) \
             VALUES (?, ?, ?, ?, ?, ?)"
        ))
        .await
        .expect("prepare insert");
    let base: DateTime<Utc> = Utc
        .timestamp_millis_opt(1_800_000_000_000)
        .single()
        .expect("valid instant");
    let rows = 250i64;
    for i in 0..rows {
        let shuffled = (i * 97) % rows;
        let at = base + Duration::milliseconds(shuffled * 10);
        session
            .execute_unpaged(
                &insert,
                (
                    3i32,
                    7i64,
                    at,
                    format!("o{}", shuffled % 5),
                    "u",
                    format!("{{\"n\":{shuffled}}}"),
                ),
            )
            .await
            .expect("insert");
    }
    // A row in another bucket of the same partition must not show up.
    session
        .execute_unpaged(&insert, (3i32, 8i64, base, "o0", "u", "{}"))
        .await
        .expect("insert other bucket");

    // Paged clustering range select: [base + 500 ms, base + 2000 ms) in order, 40 rows a page.
    let mut select = session
        .prepare(format!(
            "SELECT scheduled_time, ordering_id, task_data FROM {keyspace}.schedule \
             WHERE partition_id = ? AND bucket = ? AND scheduled_time >= ? AND scheduled_time < ?"
        ))
        .await
        .expect("prepare select");
    select.set_page_size(40);
    let from = base + Duration::milliseconds(500);
    let to = base + Duration::milliseconds(2000);
    let read: Vec<(DateTime<Utc>, String, String)> = session
        .execute_iter(select.clone(), (3i32, 7i64, from, to))
        .await
        .expect("select")
        .rows_stream::<(DateTime<Utc>, String, String)>()
        .expect("typed rows")
        .try_collect()
        .await
        .expect("read all pages");
    let expected: Vec<DateTime<Utc>> = (50..200)
        .map(|i| base + Duration::milliseconds(i * 10))
        .collect();
    let times: Vec<DateTime<Utc>> = read.iter().map(|r| r.0).collect();
    assert_eq!(
        times, expected,
        "150 rows across 4 pages, in clustering order"
    );
    assert_eq!(read[0].2, "{\"n\":50}");

    // Single-row delete.
    let victim = base + Duration::milliseconds(600);
    session
        .query_unpaged(
            format!(
                "DELETE FROM {keyspace}.schedule WHERE partition_id = ? AND bucket = ? AND scheduled_time = ? \
                 AND ordering_id = ? AND uniqueness_key = ?"
            ),
            (3i32, 7i64, victim, "o0", "u"),
        )
        .await
        .expect("delete");
    let after: Vec<(DateTime<Utc>, String, String)> = session
        .execute_iter(select, (3i32, 7i64, from, to))
        .await
        .expect("select after delete")
        .rows_stream::<(DateTime<Utc>, String, String)>()
        .expect("typed rows")
        .try_collect()
        .await
        .expect("read all pages");
    assert_eq!(after.len(), 149);
    assert!(after.iter().all(|r| r.0 != victim));

    // LWT: 32 concurrent INSERT ... IF NOT EXISTS on one key, exactly one winner.
    session
        .query_unpaged(
            format!("CREATE TABLE {keyspace}.owners (partition_id int PRIMARY KEY, owner text)"),
            &[],
        )
        .await
        .expect("create owners");
    let claim = session
        .prepare(format!(
            "INSERT INTO {keyspace}.owners (partition_id, owner) VALUES (?, ?) IF NOT EXISTS"
        ))
        .await
        .expect("prepare lwt");
    let racers = (0..32).map(|i| {
        let (session, claim) = (&session, &claim);
        async move {
            let result = session
                .execute_unpaged(claim, (1i32, format!("node-{i}")))
                .await
                .expect("lwt insert");
            let rows = result.into_rows_result().expect("lwt returns rows");
            let row = rows.first_row::<Row>().expect("one row");
            let applied = row.columns[0]
                .as_ref()
                .and_then(|v| v.as_boolean())
                .expect("[applied] column");
            (i, applied)
        }
    });
    let outcomes = futures::future::join_all(racers).await;
    let winners: Vec<usize> = outcomes
        .iter()
        .filter(|(_, won)| *won)
        .map(|(i, _)| *i)
        .collect();
    assert_eq!(winners.len(), 1, "exactly one LWT winner, got {winners:?}");
    let (owner,): (String,) = session
        .query_unpaged(
            format!("SELECT owner FROM {keyspace}.owners WHERE partition_id = 1"),
            &[],
        )
        .await
        .expect("read owner")
        .into_rows_result()
        .expect("rows")
        .single_row()
        .expect("one owner");
    assert_eq!(owner, format!("node-{}", winners[0]));
    let distinct: HashSet<bool> = outcomes.iter().map(|(_, w)| *w).collect();
    assert_eq!(distinct.len(), 2, "the losers see [applied] = false");

    session
        .query_unpaged(format!("DROP KEYSPACE {keyspace}"), &[])
        .await
        .expect("drop keyspace");
}
