//! Support for the integration tests: where the services of `dev/stack` listen, and connections
//! to them that fail fast with a message naming the service when it is not running.
//!
//! Addresses come from the environment (`SCHEDULER_KAFKA_BOOTSTRAP`, `SCHEDULER_CQL_CONTACT_POINT`),
//! else from the `stack.env` file `dev/stack up` writes into its state directory (`STACK_DIR`,
//! default `.stack/` at the workspace root), else from the script's default ports.

#![warn(missing_docs)]

pub mod engine;
pub mod logs;
pub mod processes;
pub mod python;
pub mod teardown;
pub mod webdriver;

use std::collections::HashMap;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::time::Duration;

use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use scylla::client::session::Session;
use scylla::client::session_builder::SessionBuilder;

/// Default Kafka bootstrap address of `dev/stack`.
pub const DEFAULT_KAFKA_BOOTSTRAP: &str = "127.0.0.1:19092";
/// Default CQL contact point of `dev/stack` (the protocol bridge in front of Cassandra).
pub const DEFAULT_CQL_CONTACT_POINT: &str = "127.0.0.1:19042";

/// How long a reachability check waits before it declares a service down.
const REACH_TIMEOUT: Duration = Duration::from_secs(10);

/// A service of the stack could not be reached.
#[derive(Debug, thiserror::Error)]
pub enum StackError {
    /// Nothing accepted a TCP connection at the service's address.
    #[error("{service} at {addr} is unreachable ({reason}); start the stack with `dev/stack up`")]
    Unreachable {
        /// Which service: "Kafka broker" or "Cassandra (via cql-bridge)".
        service: &'static str,
        /// The address tried.
        addr: String,
        /// What went wrong.
        reason: String,
    },
}

/// The addresses of the stack's services.
#[derive(Debug, Clone)]
pub struct Stack {
    /// Kafka bootstrap servers, `host:port`.
    pub kafka_bootstrap: String,
    /// CQL contact point, `host:port`.
    pub cql_contact_point: String,
}

impl Stack {
    /// Reads the addresses from the environment, then `stack.env`, then the defaults.
    pub fn from_env() -> Stack {
        let file = read_stack_env_file();
        let pick = |key: &str, default: &str| {
            std::env::var(key)
                .ok()
                .or_else(|| file.get(key).cloned())
                .unwrap_or_else(|| default.to_string())
        };
        Stack {
            kafka_bootstrap: pick("SCHEDULER_KAFKA_BOOTSTRAP", DEFAULT_KAFKA_BOOTSTRAP),
            cql_contact_point: pick("SCHEDULER_CQL_CONTACT_POINT", DEFAULT_CQL_CONTACT_POINT),
        }
    }

    /// Checks that the Kafka broker accepts connections and answers a metadata request.
    pub async fn check_kafka(&self) -> Result<(), StackError> {
        let unreachable = |reason: String| StackError::Unreachable {
            service: "Kafka broker",
            addr: self.kafka_bootstrap.clone(),
            reason,
        };
        tcp_probe(&self.kafka_bootstrap)
            .await
            .map_err(unreachable)?;
        let consumer: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", &self.kafka_bootstrap)
            .create()
            .map_err(|e| unreachable(format!("client: {e}")))?;
        tokio::task::spawn_blocking(move || {
            consumer.fetch_metadata(None, REACH_TIMEOUT).map(|_| ())
        })
        .await
        .map_err(|e| unreachable(format!("metadata task: {e}")))?
        .map_err(|e| unreachable(format!("metadata request: {e}")))
    }

    /// Opens a `scylla` driver session to Cassandra through the bridge.
    pub async fn cassandra_session(&self) -> Result<Session, StackError> {
        let unreachable = |reason: String| StackError::Unreachable {
            service: "Cassandra (via cql-bridge)",
            addr: self.cql_contact_point.clone(),
            reason,
        };
        tcp_probe(&self.cql_contact_point)
            .await
            .map_err(unreachable)?;
        let builder = SessionBuilder::new()
            .known_node(&self.cql_contact_point)
            // Cassandra 2.1 has no system_schema keyspace.
            .fetch_schema_metadata(false)
            .fetch_full_schema_metadata(false)
            .connection_timeout(Duration::from_secs(5));
        tokio::time::timeout(REACH_TIMEOUT * 2, builder.build())
            .await
            .map_err(|_| unreachable("session setup timed out".into()))?
            .map_err(|e| unreachable(format!("session setup: {e}")))
    }

    /// [`Stack::check_kafka`], panicking with the error: for tests, which must fail, never skip,
    /// when a service is down.
    pub async fn require_kafka(&self) {
        if let Err(e) = self.check_kafka().await {
            panic!("{e}");
        }
    }

    /// [`Stack::cassandra_session`], panicking with the error.
    pub async fn require_cassandra(&self) -> Session {
        match self.cassandra_session().await {
            Ok(session) => session,
            Err(e) => panic!("{e}"),
        }
    }
}

/// Runs the project's `dev/stack` with `args` (e.g. `["stop", "kafka"]`), panicking if it fails:
/// for the tests that stop and restart the stack's services.
pub fn dev_stack(args: &[&str]) {
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../dev/stack");
    let status = std::process::Command::new(script)
        .args(args)
        .status()
        .unwrap_or_else(|e| panic!("dev/stack {args:?}: {e}"));
    assert!(status.success(), "dev/stack {args:?} failed: {status}");
}

/// Starts every stopped service of the stack when dropped, so that a test that fails while a
/// service is down leaves the stack running for the next one.
pub struct RestartStackOnDrop;

impl Drop for RestartStackOnDrop {
    fn drop(&mut self) {
        dev_stack(&["up"]);
    }
}

/// A name unique to this process and moment, for topics, groups and keyspaces of one test.
pub fn unique_name(prefix: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    format!(
        "{prefix}_{}_{}",
        std::process::id(),
        nanos % 1_000_000_000_000
    )
}

async fn tcp_probe(addr: &str) -> Result<(), String> {
    let resolved: Vec<SocketAddr> = addr
        .to_socket_addrs()
        .map_err(|e| format!("bad address: {e}"))?
        .collect();
    let first = resolved
        .first()
        .ok_or_else(|| "address resolves to nothing".to_string())?;
    match tokio::time::timeout(REACH_TIMEOUT, tokio::net::TcpStream::connect(first)).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(format!("connect: {e}")),
        Err(_) => Err("connect timed out".into()),
    }
}

fn read_stack_env_file() -> HashMap<String, String> {
    let dir = std::env::var_os("STACK_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("..")
                .join(".stack")
        });
    let Ok(text) = std::fs::read_to_string(dir.join("stack.env")) else {
        return HashMap::new();
    };
    text.lines()
        .filter_map(|line| line.trim().strip_prefix("export ").or(Some(line.trim())))
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| line.split_once('='))
        .map(|(k, v)| (k.trim().to_string(), v.trim().trim_matches('"').to_string()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_stopped_service_is_reported_by_name_not_hung_on() {
        // Bind then drop a listener to get a port on which nothing listens.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .unwrap();
        let stack = Stack {
            kafka_bootstrap: format!("127.0.0.1:{port}"),
            cql_contact_point: format!("127.0.0.1:{port}"),
        };
        let started = std::time::Instant::now();
        let kafka = stack.check_kafka().await.unwrap_err().to_string();
        assert!(kafka.starts_with("Kafka broker at 127.0.0.1:"), "{kafka}");
        assert!(kafka.contains("dev/stack up"), "{kafka}");
        let cassandra = stack
            .cassandra_session()
            .await
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            cassandra.starts_with("Cassandra (via cql-bridge) at 127.0.0.1:"),
            "{cassandra}"
        );
        assert!(
            started.elapsed() < REACH_TIMEOUT,
            "a refused connection must fail at once"
        );
    }
}
