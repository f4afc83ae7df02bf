//! The `[cassandra]` section: where the store is, and the consistency, timeouts and retention
//! it runs with.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::list_or_commas;

/// Statuses and attempts are kept 30 days by default: longer than Kafka keeps records by
/// default (7 days), so a record delivered again finds its task's status.
const DEFAULT_RETENTION: Duration = Duration::from_secs(30 * 24 * 3600);

/// A consistency level for reads and writes, as CQL names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ConsistencyLevel {
    /// One replica.
    One,
    /// One replica of the local data centre.
    LocalOne,
    /// Two replicas.
    Two,
    /// Three replicas.
    Three,
    /// A majority of all replicas.
    Quorum,
    /// A majority of the local data centre's replicas.
    LocalQuorum,
    /// A majority in each data centre (writes only: do not use for reads).
    EachQuorum,
    /// Every replica.
    All,
}

/// The serial level of a lightweight transaction (Paxos), as CQL names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum SerialConsistencyLevel {
    /// Linearisable across the whole cluster.
    Serial,
    /// Linearisable within the local data centre.
    LocalSerial,
}

/// Cassandra settings.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct CassandraSettings {
    /// Contact points, `host:port`: a list, or one string separated by commas (handy in the
    /// environment: `SCHEDULER__CASSANDRA__CONTACT_POINTS=10.0.0.1:9042,10.0.0.2:9042`).
    #[serde(deserialize_with = "list_or_commas")]
    pub contact_points: Vec<String>,
    /// The keyspace; created with `replication` if absent.
    pub keyspace: String,
    /// The keyspace's replication map, in CQL.
    pub replication: String,
    /// User name, when the cluster requires authentication.
    pub username: Option<String>,
    /// Password, with `username`.
    pub password: Option<String>,
    /// Whether the driver reads schema metadata. Set `false` for Cassandra 2.1 (the development
    /// stack), which has no `system_schema` keyspace.
    pub fetch_schema_metadata: bool,
    /// The level of every read and write (`LOCAL_QUORUM`: a majority of the local data
    /// centre's replicas, so a read sees every write acknowledged in its data centre).
    pub consistency: ConsistencyLevel,
    /// The serial level of lightweight transactions other than ownership claims (a
    /// cancellation's insert-if-absent): `LOCAL_SERIAL` or `SERIAL`.
    pub serial_consistency: SerialConsistencyLevel,
    /// The serial level of ownership claims. `SERIAL` makes claims linearisable across data
    /// centres, and ownership checks then read at `QUORUM` (a majority of all replicas) so a
    /// claim made in another data centre is seen; it needs a majority of all replicas up.
    /// `LOCAL_SERIAL` (the default) keeps both within the local data centre.
    pub ownership_serial_consistency: SerialConsistencyLevel,
    /// How long the driver waits for one request.
    #[serde(with = "super::duration_text")]
    pub request_timeout: Duration,
    /// How long a task's final status is kept (the table's `default_time_to_live`; `0s`:
    /// forever). A task scheduled again with the key of a finished one is not run while its
    /// status is kept, and is run as a new task after.
    #[serde(with = "super::duration_text")]
    pub status_ttl: Duration,
    /// How long a task's attempt history is kept (`0s`: forever).
    #[serde(with = "super::duration_text")]
    pub attempts_ttl: Duration,
    /// Migrate the keyspace's schema when the node connects, if it is behind (for development
    /// and tests). Off, a node refuses a keyspace that `scheduler migrate` has not brought to its
    /// schema version.
    pub auto_migrate: bool,
}

impl Default for CassandraSettings {
    fn default() -> Self {
        CassandraSettings {
            contact_points: vec!["127.0.0.1:9042".into()],
            keyspace: "scheduler".into(),
            replication: "{'class': 'SimpleStrategy', 'replication_factor': 1}".into(),
            username: None,
            password: None,
            fetch_schema_metadata: true,
            consistency: ConsistencyLevel::LocalQuorum,
            serial_consistency: SerialConsistencyLevel::LocalSerial,
            ownership_serial_consistency: SerialConsistencyLevel::LocalSerial,
            request_timeout: Duration::from_secs(30),
            status_ttl: DEFAULT_RETENTION,
            attempts_ttl: DEFAULT_RETENTION,
            auto_migrate: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::Settings;
    use super::*;

    #[test]
    fn levels_and_retention_read_by_their_cql_names_from_the_file_and_the_environment() {
        let text =
            "[cassandra]\nconsistency = \"QUORUM\"\nownership_serial_consistency = \"SERIAL\"\n\
                    status_ttl = \"7days\"\nattempts_ttl = \"0s\"";
        let env = vec![(
            "SCHEDULER__CASSANDRA__SERIAL_CONSISTENCY".to_string(),
            "SERIAL".to_string(),
        )];
        let c = Settings::from_toml_with_env(text, env)
            .expect("valid settings")
            .cassandra;
        assert_eq!(c.consistency, ConsistencyLevel::Quorum);
        assert_eq!(c.serial_consistency, SerialConsistencyLevel::Serial);
        assert_eq!(
            c.ownership_serial_consistency,
            SerialConsistencyLevel::Serial
        );
        assert_eq!(c.status_ttl, Duration::from_secs(7 * 24 * 3600));
        assert_eq!(c.attempts_ttl, Duration::ZERO);
        assert_eq!(c.request_timeout, Duration::from_secs(30));
        let wrong = Settings::from_toml_with_env("[cassandra]\nconsistency = \"MOST\"", vec![]);
        assert!(wrong.is_err());
    }
}
