//! Node settings: the blueprint's defaults, loadable from a TOML file with environment overrides,
//! validated before anything starts.
//!
//! Durations are written with a unit: `"500ms"`, `"10s"`, `"5m"`, `"2h"`.
//! An environment variable `SCHEDULER__<SECTION>__<KEY>` overrides `<key>` of `[<section>]`, e.g.
//! `SCHEDULER__KAFKA__BOOTSTRAP_SERVERS=10.0.0.1:9092` or `SCHEDULER__SCHEDULING__MAX_TASK_RETRIES=5`.
//! Its value is read as a TOML value when it parses as one (numbers, booleans, arrays), else as a
//! string.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use scheduler_client::defaults;
use serde::{Deserialize, Deserializer, Serialize};

mod cassandra;
pub mod duration_text;
mod env;
mod queues;
mod validate;
#[cfg(feature = "node")]
pub(crate) use validate::{is_key_burst, is_key_rate, MAX_KEY_BURST, MAX_KEY_RATE};

pub use cassandra::{CassandraSettings, ConsistencyLevel, SerialConsistencyLevel};
pub use queues::{Limits, Queue, QueueSettings, TypeLimits, DEFAULT_QUEUE};

/// Prefix of environment overrides.
pub const ENV_PREFIX: &str = "SCHEDULER__";

/// Why settings could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum SettingsError {
    /// The settings file could not be read.
    #[error("cannot read settings file {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file or an override is not valid TOML of the expected shape.
    #[error("invalid settings: {0}")]
    Parse(String),
    /// A value is out of its allowed range.
    #[error("invalid setting `{key}`: {reason}")]
    Invalid {
        /// The setting, as `section.key`.
        key: &'static str,
        /// What is wrong.
        reason: String,
    },
    /// A `[[queues]]` entry is wrong, or a value resolved for it.
    #[error("invalid queue `{queue}`: {reason}")]
    Queue {
        /// The queue's name.
        queue: String,
        /// What is wrong.
        reason: String,
    },
}

/// All settings of a node.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct Settings {
    /// Scheduling and execution.
    pub scheduling: SchedulingSettings,
    /// The Kafka topic and consumer group.
    pub kafka: KafkaSettings,
    /// The Cassandra cluster and keyspace.
    pub cassandra: CassandraSettings,
    /// The node's admin HTTP API.
    pub admin: AdminSettings,
    /// Queues besides the default one (`[[queues]]`), each for its own task types.
    pub queues: Vec<QueueSettings>,
    /// Traces exported to an OpenTelemetry collector (`scheduler node`).
    pub telemetry: TelemetrySettings,
    /// Remote workers: handlers in any language that claim due tasks over HTTP.
    pub workers: WorkersSettings,
}

/// Remote workers (design.md "Remote workers"): processes anywhere, in any language, that
/// long-poll the node's listener for due tasks of their types, each under a claim that
/// expires unless heartbeats keep it live. They use the admin listener, with its token.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct WorkersSettings {
    /// Whether the node takes remote workers (a task of a type with no local handler of its
    /// own runs on a connected worker of the type).
    pub enabled: bool,
    /// A claim's time to live: it expires, and its task runs again, unless a heartbeat comes
    /// within it; each heartbeat moves the expiry this far on.
    #[serde(with = "duration_text")]
    pub claim_ttl: Duration,
    /// The longest a worker's poll waits for tasks.
    #[serde(with = "duration_text")]
    pub max_wait: Duration,
    /// How long after its last poll or heartbeat a worker still counts as connected.
    #[serde(with = "duration_text")]
    pub worker_ttl: Duration,
    /// Task types this node serves through remote workers alone (no local handler): their
    /// queues are served, and their tasks wait while no worker of the type is connected. A
    /// type with a local handler of its own runs there; any other type with no handler of its
    /// own runs on a connected worker of it, before the handler of every other type.
    pub types: Vec<String>,
}

impl Default for WorkersSettings {
    fn default() -> Self {
        WorkersSettings {
            enabled: true,
            claim_ttl: Duration::from_secs(30),
            max_wait: Duration::from_secs(30),
            worker_ttl: Duration::from_secs(10),
            types: Vec::new(),
        }
    }
}

/// Trace export: the spans of the node's tasks (each linked to the trace that scheduled it),
/// sent over OTLP/HTTP (protobuf) by `scheduler node`. A program embedding the node installs its
/// own `tracing-opentelemetry` layer instead.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct TelemetrySettings {
    /// The collector's OTLP/HTTP address (`http://127.0.0.1:4318`; spans go to `/v1/traces`);
    /// unset, nothing is exported.
    pub otlp_endpoint: Option<String>,
    /// The `service.name` of the exported spans.
    pub service_name: String,
}

impl Default for TelemetrySettings {
    fn default() -> Self {
        TelemetrySettings {
            otlp_endpoint: None,
            service_name: "scheduler".into(),
        }
    }
}

/// The admin HTTP API (status, task lookup, cancellation, metrics).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct AdminSettings {
    /// Whether the node serves the API.
    pub enabled: bool,
    /// Address to listen on (`host:port`; port 0 picks a free one).
    pub listen: String,
    /// When set, every request must carry `Authorization: Bearer <token>`.
    pub token: Option<String>,
    /// Names, besides `localhost` and IP addresses, that requests may give in `Host` (the
    /// names clients and proxies reach the listener by): a page whose own name an attacker's
    /// DNS points at the listener (DNS rebinding) is refused.
    pub allowed_hosts: Vec<String>,
    /// Serve on an address beyond loopback without a token (refused otherwise): anyone who
    /// reaches the listener can then enqueue, cancel and redrive tasks.
    pub allow_unauthenticated_remote: bool,
}

impl Default for AdminSettings {
    fn default() -> Self {
        AdminSettings {
            enabled: true,
            listen: "127.0.0.1:9464".into(),
            token: None,
            allowed_hosts: Vec::new(),
            allow_unauthenticated_remote: false,
        }
    }
}

/// Scheduling and execution settings.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct SchedulingSettings {
    /// How far in the past a task may be scheduled and still be accepted.
    #[serde(with = "duration_text")]
    pub scheduling_grace_window: Duration,
    /// Base of the exponential retry backoff: retry n waits up to `factor * 2^(n-1)`.
    #[serde(with = "duration_text")]
    pub backoff_factor: Duration,
    /// Upper bound of one retry backoff.
    #[serde(with = "duration_text")]
    pub max_backoff: Duration,
    /// Retries after the first attempt before a task is recorded as failed.
    pub max_task_retries: u32,
    /// Ignored, kept so that settings files of earlier releases still load: a new tree loads
    /// from its partition's low-water mark, however far back that is (a warning at start).
    #[serde(skip_serializing)]
    pub look_back_on_restart: Option<String>,
    /// Tasks held in memory per partition (loaded, queued or running) at most.
    pub max_in_flight_tasks: usize,
    /// Rows read from Cassandra per load.
    pub fetch_batch_size: usize,
    /// How far ahead of now the schedule is loaded into memory.
    #[serde(with = "duration_text")]
    pub max_look_ahead: Duration,
    /// The next load starts this long before the loaded schedule runs out.
    #[serde(with = "duration_text")]
    pub prefetch_window: Duration,
    /// An incomplete task this long past due counts as stale.
    #[serde(with = "duration_text")]
    pub stale_after: Duration,
    /// How long persisting one polled batch may take before it is retried.
    #[serde(with = "duration_text")]
    pub persist_timeout: Duration,
    /// After a revoke whose drain timed out (tasks still running), how long to wait before giving
    /// the partitions up.
    #[serde(with = "duration_text")]
    pub isolation_wait: Duration,
    /// On revoke or shutdown, how long running tasks may take to finish.
    #[serde(with = "duration_text")]
    pub drain_timeout: Duration,
    /// How long a running-task lease lives without renewal (it is renewed every third of it
    /// while calls run). A newer tree waits at most this long for an orderingId whose call was
    /// running on a node that died or froze. The default equals the consumer's session timeout,
    /// so a node the group gave up on has lost its leases too. Whole seconds, at least 3.
    #[serde(with = "duration_text")]
    pub lease_ttl: Duration,
    /// The most due tasks one orderingId holds in memory (at most a quarter of
    /// `max_in_flight_tasks`); later ones wait in Cassandra, so one stuck orderingId cannot
    /// take the partition's in-flight budget from the others.
    pub max_queued_per_ordering: usize,
    /// User executor calls running at once on this node.
    pub executor_concurrency: usize,
    /// Calls at once per limit key (`Task::limit_key`) of the queue's types that have no
    /// limit of their own, on this node (none: no limit).
    pub key_concurrency: Option<usize>,
    /// Starts a second per limit key of the queue's types that have no rate of their own, on
    /// this node (none: no limit; at most 1,000,000).
    pub key_rate: Option<f64>,
    /// Starts at once per limit key within `key_rate` (default: a second's worth, at least 1;
    /// at most 1,000,000).
    pub key_burst: Option<u32>,
    /// A task is dispatched this long before its time: its checks (lease write, ownership and
    /// status reads) are done by then and it is called at its time, not a few round trips
    /// after. Zero dispatches at the time.
    #[serde(with = "duration_text")]
    pub dispatch_lead: Duration,
    /// An executor call running longer is cut off and counts as a retryable failure.
    #[serde(with = "duration_text")]
    pub execution_timeout: Duration,
    /// Largest record accepted from the topic, in bytes.
    pub max_task_data_bytes: usize,
    /// The time slice the node's I/O threads (the wait for a task's time, the user's handlers,
    /// Cassandra I/O) ask of Linux 6.12 or later: a thread woken for a task's time then runs
    /// ahead of the longer-sliced threads it competes with, for no larger share of the CPU. For
    /// the whole node (the `[scheduling]` section's value); `0s` keeps the kernel's default
    /// (0.7-3 ms). From 100us to 100ms.
    #[serde(with = "duration_text")]
    pub thread_slice: Duration,
    /// Limits of single task types over the queue's (`[scheduling.task_types.<type>]`).
    pub task_types: BTreeMap<String, TypeLimits>,
}

impl Default for SchedulingSettings {
    fn default() -> Self {
        SchedulingSettings {
            scheduling_grace_window: defaults::SCHEDULING_GRACE_WINDOW,
            backoff_factor: Duration::from_secs(20),
            max_backoff: Duration::from_secs(120),
            max_task_retries: 100,
            look_back_on_restart: None,
            max_in_flight_tasks: 1000,
            fetch_batch_size: 1000,
            max_look_ahead: Duration::from_secs(300),
            prefetch_window: Duration::from_secs(5),
            stale_after: Duration::from_secs(300),
            persist_timeout: Duration::from_secs(6),
            isolation_wait: Duration::from_secs(3),
            drain_timeout: Duration::from_secs(10),
            lease_ttl: Duration::from_secs(6),
            max_queued_per_ordering: 32,
            executor_concurrency: 64,
            key_concurrency: None,
            key_rate: None,
            key_burst: None,
            dispatch_lead: Duration::from_secs(1),
            execution_timeout: Duration::from_secs(300),
            max_task_data_bytes: defaults::MAX_TASK_BYTES,
            thread_slice: Duration::from_micros(100),
            task_types: BTreeMap::new(),
        }
    }
}

/// Kafka settings.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct KafkaSettings {
    /// Bootstrap servers, `host:port[,host:port...]`.
    pub bootstrap_servers: String,
    /// The scheduler's topic.
    pub topic: String,
    /// The consumer group all nodes join.
    pub group_id: String,
    /// When set and the topic does not exist, the node creates it with this many partitions.
    pub create_topic_partitions: Option<u32>,
    /// When set, each final outcome of a task is published to this topic (the event format is in the README).
    pub events_topic: Option<String>,
    /// Extra librdkafka properties for the consumer and producer (e.g. security settings).
    pub properties: BTreeMap<String, String>,
}

#[cfg(feature = "node")]
impl KafkaSettings {
    /// The configuration every Kafka client of the node starts from: the bootstrap servers,
    /// then the engine's `defaults` for that client, then the user's `properties` (security
    /// settings, overrides), so a SASL or TLS setting reaches every client alike.
    pub fn client_config(&self, defaults: &[(&str, &str)]) -> rdkafka::config::ClientConfig {
        let mut config = rdkafka::config::ClientConfig::new();
        config.set("bootstrap.servers", &self.bootstrap_servers);
        for (key, value) in defaults {
            config.set(*key, *value);
        }
        for (key, value) in &self.properties {
            config.set(key, value);
        }
        config
    }
}

impl Default for KafkaSettings {
    fn default() -> Self {
        KafkaSettings {
            bootstrap_servers: defaults::BOOTSTRAP_SERVERS.into(),
            topic: defaults::TOPIC.into(),
            group_id: "scheduler".into(),
            create_topic_partitions: None,
            events_topic: None,
            properties: BTreeMap::new(),
        }
    }
}

impl Settings {
    /// Loads `path` (when given), applies the process environment's overrides, and validates.
    pub fn load(path: Option<&Path>) -> Result<Settings, SettingsError> {
        let text = match path {
            Some(path) => std::fs::read_to_string(path).map_err(|source| SettingsError::Read {
                path: path.display().to_string(),
                source,
            })?,
            None => String::new(),
        };
        Settings::from_toml_with_env(&text, std::env::vars())
    }

    /// Parses `text`, applies the overrides among `env`, and validates.
    pub fn from_toml_with_env(
        text: &str,
        env: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Settings, SettingsError> {
        let mut table: toml::Table = text
            .parse()
            .map_err(|e: toml::de::Error| SettingsError::Parse(one_line(&e.to_string())))?;
        env::apply_overrides(&mut table, env)?;
        let settings: Settings = table
            .try_into()
            .map_err(|e: toml::de::Error| SettingsError::Parse(one_line(&e.to_string())))?;
        settings.validate()?;
        Ok(settings)
    }
}

/// `text` on one line: error messages are printed as one line by the node and the CLI.
fn one_line(text: &str) -> String {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

/// Serde for an optional duration written with a unit.
pub(super) mod optional_duration {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => super::duration_text::serialize(d, s),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        match Option::<String>::deserialize(d)? {
            Some(text) => super::duration_text::parse(&text)
                .map(Some)
                .map_err(serde::de::Error::custom),
            None => Ok(None),
        }
    }
}

/// A list of strings, or one string of comma-separated items.
pub(super) fn list_or_commas<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum ListOrCommas {
        List(Vec<String>),
        Commas(String),
    }
    Ok(match ListOrCommas::deserialize(d)? {
        ListOrCommas::List(list) => list,
        ListOrCommas::Commas(text) => text
            .split(',')
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(super) fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn errors_fit_on_one_line() {
        let bad_file = Settings::from_toml_with_env("[scheduling\nx = ", env(&[])).unwrap_err();
        let bad_type = Settings::from_toml_with_env(
            "",
            env(&[("SCHEDULER__SCHEDULING__MAX_TASK_RETRIES", "\"many\"")]),
        )
        .unwrap_err();
        for error in [bad_file, bad_type] {
            assert!(!error.to_string().contains('\n'), "{error}");
        }
    }

    #[test]
    fn defaults_are_the_blueprints() {
        let s = Settings::from_toml_with_env("", env(&[]))
            .unwrap()
            .scheduling;
        assert_eq!(s.scheduling_grace_window, Duration::from_secs(10));
        assert_eq!(s.backoff_factor, Duration::from_secs(20));
        assert_eq!(s.max_backoff, Duration::from_secs(120));
        assert_eq!(s.max_task_retries, 100);
        assert_eq!(s.look_back_on_restart, None);
        assert_eq!((s.max_in_flight_tasks, s.fetch_batch_size), (1000, 1000));
        assert_eq!(s.max_look_ahead, Duration::from_secs(300));
        assert_eq!(s.prefetch_window, Duration::from_secs(5));
        assert_eq!(s.stale_after, Duration::from_secs(300));
        assert_eq!(s.persist_timeout, Duration::from_secs(6));
    }

    #[test]
    fn file_values_and_env_overrides_apply_in_that_order() {
        let text = r#"
            [scheduling]
            max_look_ahead = "15s"
            max_task_retries = 3
            [kafka]
            topic = "from-file"
            [kafka.properties]
            "security.protocol" = "plaintext"
            [cassandra]
            contact_points = ["10.0.0.1:9042"]
            fetch_schema_metadata = false
        "#;
        let s = Settings::from_toml_with_env(
            text,
            env(&[
                ("SCHEDULER__KAFKA__TOPIC", "from-env"),
                ("SCHEDULER__SCHEDULING__MAX_TASK_RETRIES", "7"),
                ("SCHEDULER__CASSANDRA__CONTACT_POINTS", "a:1, b:2"),
                ("UNRELATED", "x"),
            ]),
        )
        .unwrap();
        assert_eq!(s.scheduling.max_look_ahead, Duration::from_secs(15));
        assert_eq!(s.scheduling.max_task_retries, 7);
        assert_eq!(s.kafka.topic, "from-env");
        assert_eq!(s.kafka.properties["security.protocol"], "plaintext");
        assert_eq!(s.cassandra.contact_points, ["a:1", "b:2"]);
        assert!(!s.cassandra.fetch_schema_metadata);
    }

    #[cfg(feature = "node")]
    #[test]
    fn every_kafka_client_gets_the_user_properties_last() {
        let kafka = KafkaSettings {
            properties: BTreeMap::from([
                ("security.protocol".to_string(), "SASL_SSL".to_string()),
                ("fetch.wait.max.ms".to_string(), "20".to_string()),
            ]),
            ..KafkaSettings::default()
        };
        let plain = kafka.client_config(&[]);
        assert_eq!(plain.get("security.protocol"), Some("SASL_SSL"));
        assert_eq!(
            plain.get("bootstrap.servers"),
            Some(kafka.bootstrap_servers.as_str())
        );
        let consumer = kafka.client_config(&[("fetch.wait.max.ms", "100"), ("group.id", "g")]);
        assert_eq!(
            consumer.get("fetch.wait.max.ms"),
            Some("20"),
            "the user's value wins"
        );
        assert_eq!(consumer.get("group.id"), Some("g"));
    }
}
