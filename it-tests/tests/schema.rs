//! The schema as a managed artefact, against the real database: `migrate` brings a fresh
//! keyspace to this release's version once however many run at once, is a no-op on a current
//! keyspace, and a node refuses a keyspace behind its version (without `auto_migrate`) or ahead
//! of it, with one line saying what to do.

use it_tests::teardown::Teardown;
use it_tests::{unique_name, Stack};
use scheduler_core::settings::CassandraSettings;
use scheduler_core::store::{CassandraStore, StoreError, META_KEYSPACE, SCHEMA_VERSION};

fn settings(keyspace: &str, auto_migrate: bool) -> CassandraSettings {
    let stack = Stack::from_env();
    CassandraSettings {
        contact_points: vec![stack.cql_contact_point],
        keyspace: keyspace.to_string(),
        fetch_schema_metadata: false,
        auto_migrate,
        ..CassandraSettings::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_migrations_at_once_apply_it_once_and_a_second_migrate_is_a_no_op() {
    let stack = Stack::from_env();
    let session = stack.require_cassandra().await;
    let keyspace = unique_name("it_schema");
    let _teardown = Teardown::new(Stack::from_env()).keyspace(&keyspace);
    let s = settings(&keyspace, false);
    let (a, b, c) = tokio::join!(
        CassandraStore::migrate(&s),
        CassandraStore::migrate(&s),
        CassandraStore::migrate(&s)
    );
    let reports = [a.expect("a"), b.expect("b"), c.expect("c")];
    assert_eq!(
        reports.iter().filter(|m| m.applied).count(),
        1,
        "one applies the migrations, the others wait for it: {reports:?}"
    );
    assert!(
        reports.iter().all(|m| m.to == SCHEMA_VERSION),
        "{reports:?}"
    );
    let (version, by): (Option<i32>, Option<String>) = session
        .query_unpaged(
            format!(
                "SELECT version, migrated_by FROM {META_KEYSPACE}.schema_version \
                 WHERE keyspace_name = ?"
            ),
            (&keyspace,),
        )
        .await
        .expect("version read")
        .into_rows_result()
        .expect("rows")
        .single_row()
        .expect("one version row");
    assert_eq!(version, Some(SCHEMA_VERSION as i32));
    assert!(by.is_some_and(|b| b.starts_with("pid ")));

    let again = CassandraStore::migrate(&s).await.expect("migrate again");
    assert_eq!(
        (again.from, again.to, again.applied),
        (SCHEMA_VERSION, SCHEMA_VERSION, false)
    );
    // A node starts on it without auto_migrate.
    CassandraStore::connect(&s)
        .await
        .expect("a node on a migrated keyspace");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_nodes_starting_together_with_auto_migrate_all_start() {
    Stack::from_env().require_cassandra().await;
    let keyspace = unique_name("it_schema_auto");
    let _teardown = Teardown::new(Stack::from_env()).keyspace(&keyspace);
    let s = settings(&keyspace, true);
    let (a, b, c) = tokio::join!(
        CassandraStore::connect(&s),
        CassandraStore::connect(&s),
        CassandraStore::connect(&s)
    );
    for (node, started) in [("a", a), ("b", b), ("c", c)] {
        if let Err(e) = started {
            panic!("node {node} did not start: {e}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_refuses_a_keyspace_behind_or_ahead_of_its_schema_with_one_clear_line() {
    let stack = Stack::from_env();
    let session = stack.require_cassandra().await;
    let keyspace = unique_name("it_schema_none");
    let _teardown = Teardown::new(Stack::from_env()).keyspace(&keyspace);
    let behind = match CassandraStore::connect(&settings(&keyspace, false)).await {
        Err(e) => e,
        Ok(_) => panic!("a node started on a keyspace without the schema"),
    };
    assert!(
        matches!(behind, StoreError::SchemaBehind { found: 0, .. }),
        "{behind:?}"
    );
    let line = behind.to_string();
    assert!(line.contains("run `scheduler migrate`"), "{line}");
    assert!(!line.contains('\n'), "{line}");

    CassandraStore::migrate(&settings(&keyspace, false))
        .await
        .expect("migrate");
    session
        .query_unpaged(
            format!(
                "UPDATE {META_KEYSPACE}.schema_version SET version = ? WHERE keyspace_name = ?"
            ),
            (SCHEMA_VERSION as i32 + 1, &keyspace),
        )
        .await
        .expect("a newer release's version");
    let ahead = match CassandraStore::connect(&settings(&keyspace, true)).await {
        Err(e) => e,
        Ok(_) => panic!("a node started on a newer schema"),
    };
    assert!(matches!(ahead, StoreError::SchemaAhead { .. }), "{ahead:?}");
    assert!(ahead.to_string().contains("upgrade the node"), "{ahead}");
}
