//! What a test created on the stack, removed when the test ends, passed or failed.
//!
//! Cassandra 2.1 recomputes its schema digest over every live table at each schema change: with
//! the keyspaces of fifty finished tests left in place, creating a keyspace takes 14 s instead
//! of 2.5 s, and every test after them pays it. So each test drops what it made.

use std::sync::Mutex;
use std::time::Duration;

use rdkafka::admin::{AdminClient, AdminOptions};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use scylla::client::session::Session;

use crate::Stack;

/// How long a teardown may take before it gives up (what it left, `dev/test`'s
/// `drop-stale-keyspaces` drops at the next run).
const TEARDOWN_TIMEOUT: Duration = Duration::from_secs(60);

/// Drops a test's keyspaces and deletes its topics when dropped.
///
/// A name `n` covers `n` itself and what a node derives from it for its queues: keyspaces
/// `n_<queue>` and topics `n-<queue>` (see `Settings::queues`).
#[derive(Debug)]
pub struct Teardown {
    stack: Stack,
    keyspaces: Vec<String>,
    topics: Mutex<Vec<String>>,
}

impl Teardown {
    /// A teardown of nothing yet, on `stack`.
    pub fn new(stack: Stack) -> Teardown {
        Teardown {
            stack,
            keyspaces: Vec::new(),
            topics: Mutex::new(Vec::new()),
        }
    }

    /// Also drops the keyspace `name` and its queues' keyspaces.
    pub fn keyspace(mut self, name: &str) -> Teardown {
        self.keyspaces.push(name.to_string());
        self
    }

    /// Also deletes the topic `name` and its queues' topics.
    pub fn topic(self, name: &str) -> Teardown {
        self.add_topic(name);
        self
    }

    /// Deletes the topic `name` too (a topic the test created after the teardown was made).
    pub fn add_topic(&self, name: &str) {
        self.topics
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(name.to_string());
    }
}

impl Drop for Teardown {
    fn drop(&mut self) {
        let stack = self.stack.clone();
        let keyspaces = std::mem::take(&mut self.keyspaces);
        let topics = std::mem::take(
            &mut *self
                .topics
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        // Its own thread and runtime: a test's runtime may be ending, and `drop` cannot await.
        let done = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| format!("runtime: {e}"))?;
            runtime.block_on(async {
                tokio::time::timeout(TEARDOWN_TIMEOUT, remove(&stack, &keyspaces, &topics))
                    .await
                    .map_err(|_| format!("timed out after {} s", TEARDOWN_TIMEOUT.as_secs()))?
            })
        })
        .join();
        match done {
            Ok(Ok(())) => {}
            Ok(Err(e)) => eprintln!("teardown: {e} (dev/test drops leftover keyspaces)"),
            Err(_) => eprintln!("teardown: its thread panicked"),
        }
    }
}

async fn remove(stack: &Stack, keyspaces: &[String], topics: &[String]) -> Result<(), String> {
    let mut failures = Vec::new();
    if !keyspaces.is_empty() {
        if let Err(e) = drop_keyspaces(stack, keyspaces).await {
            failures.push(e);
        }
    }
    if !topics.is_empty() {
        if let Err(e) = delete_topics(stack, topics).await {
            failures.push(e);
        }
    }
    if failures.is_empty() {
        Ok(())
    } else {
        Err(failures.join("; "))
    }
}

/// Whether `name` is `base` or one of its queues' (`base<separator><queue>`).
fn covered(name: &str, base: &str, separator: char) -> bool {
    name.strip_prefix(base)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with(separator))
}

async fn drop_keyspaces(stack: &Stack, bases: &[String]) -> Result<(), String> {
    let session = stack.cassandra_session().await.map_err(|e| e.to_string())?;
    let names = list_keyspaces(&session).await?;
    for name in names
        .iter()
        .filter(|n| bases.iter().any(|base| covered(n, base, '_')))
    {
        session
            .query_unpaged(format!("DROP KEYSPACE IF EXISTS {name}"), &[])
            .await
            .map_err(|e| format!("drop keyspace {name}: {e}"))?;
    }
    Ok(())
}

/// Every keyspace's name: from `system.schema_keyspaces` on Cassandra 2.1, `system_schema` later.
pub async fn list_keyspaces(session: &Session) -> Result<Vec<String>, String> {
    let mut last_error = String::new();
    for table in ["system_schema.keyspaces", "system.schema_keyspaces"] {
        let listed = async {
            let rows = session
                .query_unpaged(format!("SELECT keyspace_name FROM {table}"), &[])
                .await
                .map_err(|e| e.to_string())?
                .into_rows_result()
                .map_err(|e| e.to_string())?;
            let names = rows
                .rows::<(String,)>()
                .map_err(|e| e.to_string())?
                .map(|row| row.map(|(name,)| name).map_err(|e| e.to_string()))
                .collect::<Result<Vec<_>, String>>()?;
            Ok::<_, String>(names)
        }
        .await;
        match listed {
            Ok(names) => return Ok(names),
            Err(e) => last_error = format!("{table}: {e}"),
        }
    }
    Err(format!("listing keyspaces: {last_error}"))
}

async fn delete_topics(stack: &Stack, bases: &[String]) -> Result<(), String> {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", &stack.kafka_bootstrap)
        .create()
        .map_err(|e| format!("admin client: {e}"))?;
    let metadata = admin
        .inner()
        .fetch_metadata(None, Duration::from_secs(10))
        .map_err(|e| format!("topic list: {e}"))?;
    let names: Vec<&str> = metadata
        .topics()
        .iter()
        .map(|t| t.name())
        .filter(|n| bases.iter().any(|base| covered(n, base, '-')))
        .collect();
    if names.is_empty() {
        return Ok(());
    }
    let results = admin
        .delete_topics(
            &names,
            &AdminOptions::new().operation_timeout(Some(Duration::from_secs(10))),
        )
        .await
        .map_err(|e| format!("delete topics: {e}"))?;
    for result in results {
        result.map_err(|(name, code)| format!("delete topic {name}: {code}"))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::covered;

    #[test]
    fn a_name_covers_itself_and_its_queues_only() {
        assert!(covered("it_a_1_2", "it_a_1_2", '_'));
        assert!(covered("it_a_1_2_emails", "it_a_1_2", '_'));
        assert!(!covered("it_a_1_23", "it_a_1_2", '_'));
        assert!(covered("t_1_2-emails", "t_1_2", '-'));
        assert!(!covered("t_1_2_x", "t_1_2", '-'));
    }
}
