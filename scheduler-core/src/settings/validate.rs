//! [`Settings::validate`]: the range of every value, checked before anything starts.

use std::net::SocketAddr;
use std::time::Duration;

use super::{ConsistencyLevel, KafkaSettings, Settings, SettingsError};

const INCREMENTAL_REBALANCING: &str = "incremental rebalancing (a cooperative assignor, \
    group.protocol=consumer) is not supported: nodes rebuild every partition on a rebalance";
const KEYSPACE_NAME: &str =
    "must start with a letter and hold at most 48 letters, digits or underscores";
const CQL_MAP: &str =
    "must be a CQL map such as {'class': 'SimpleStrategy', 'replication_factor': 1}";

/// The listener refuses to serve the network without a token unless told to.
const UNAUTHENTICATED_REMOTE: &str = "must be set when admin.listen is not a loopback address \
    (whoever reaches it could enqueue, cancel and redrive tasks); to serve it without one, \
    set admin.allow_unauthenticated_remote = true";
const HOST_NAMES: &str =
    "must be host names without a scheme, port or path, such as scheduler-1.internal";

const CASSANDRA_TTL: &str = "must be whole seconds, at most 20 years (0s: kept forever)";

/// An OTLP/HTTP address: a scheme the exporter speaks and a host.
fn is_http_url(text: &str) -> bool {
    ["http://", "https://"]
        .iter()
        .filter_map(|scheme| text.strip_prefix(scheme))
        .any(|rest| !rest.is_empty() && !rest.starts_with('/'))
}

/// Cassandra counts a TTL in whole seconds, up to 20 years.
fn is_cassandra_ttl(ttl: Duration) -> bool {
    ttl.subsec_nanos() == 0 && ttl.as_secs() <= 20 * 365 * 24 * 3600
}

impl Settings {
    /// Checks every value's range; the first broken rule, in the table's order, is returned,
    /// then the queues' rules.
    pub fn validate(&self) -> Result<(), SettingsError> {
        self.validate_one()?;
        self.validate_queues()
    }

    /// The rules of the default queue's settings.
    pub(super) fn validate_one(&self) -> Result<(), SettingsError> {
        let (s, k, c, a) = (&self.scheduling, &self.kafka, &self.cassandra, &self.admin);
        let (t, w) = (&self.telemetry, &self.workers);
        // One rule a line: the setting, when it is wrong, and what it must be. Every check is
        // cheap and has no effect, so all are evaluated and the first broken one is reported.
        #[rustfmt::skip]
        let rules: &[(&'static str, bool, &str)] = &[
            ("scheduling.backoff_factor", s.backoff_factor.is_zero(), "must be greater than zero"),
            ("scheduling.max_backoff", s.max_backoff < s.backoff_factor, "must be at least scheduling.backoff_factor"),
            ("scheduling.max_in_flight_tasks", s.max_in_flight_tasks == 0, "must be at least 1"),
            ("scheduling.fetch_batch_size", s.fetch_batch_size == 0, "must be at least 1"),
            ("scheduling.max_look_ahead", s.max_look_ahead.is_zero(), "must be greater than zero"),
            ("scheduling.prefetch_window", s.prefetch_window >= s.max_look_ahead, "must be shorter than scheduling.max_look_ahead"),
            ("scheduling.persist_timeout", s.persist_timeout.is_zero(), "must be greater than zero"),
            ("scheduling.max_queued_per_ordering", s.max_queued_per_ordering == 0, "must be at least 1"),
            ("scheduling.executor_concurrency", s.executor_concurrency == 0, "must be at least 1"),
            ("scheduling.key_concurrency", s.key_concurrency == Some(0), "must be at least 1 when set"),
            ("scheduling.task_types.<type>.key_concurrency", s.task_types.values().any(|t| t.key_concurrency == Some(0)), "must be at least 1 when set"),
            ("scheduling.key_rate", !is_key_rate(s.key_rate), KEY_RATE),
            ("scheduling.task_types.<type>.key_rate", !s.task_types.values().all(|t| is_key_rate(t.key_rate)), KEY_RATE),
            ("scheduling.key_burst", !is_key_burst(s.key_burst), KEY_BURST),
            ("scheduling.task_types.<type>.key_burst", !s.task_types.values().all(|t| is_key_burst(t.key_burst)), KEY_BURST),
            ("scheduling.dispatch_lead", s.dispatch_lead >= s.max_look_ahead, "must be shorter than scheduling.max_look_ahead"),
            ("scheduling.lease_ttl", !is_whole_seconds_from_3(s.lease_ttl), "must be whole seconds, at least 3s"),
            ("scheduling.execution_timeout", s.execution_timeout.is_zero(), "must be greater than zero"),
            ("scheduling.max_task_data_bytes", s.max_task_data_bytes < 64, "must be at least 64 bytes"),
            ("scheduling.thread_slice", !is_thread_slice(s.thread_slice), "must be 0s (the kernel's default) or from 100us to 100ms"),
            ("kafka.bootstrap_servers", k.bootstrap_servers.trim().is_empty(), "must not be empty"),
            ("kafka.topic", k.topic.trim().is_empty(), "must not be empty"),
            ("kafka.group_id", k.group_id.trim().is_empty(), "must not be empty"),
            ("kafka.events_topic", !events_topic_is_apart(k), "must name a topic other than kafka.topic"),
            ("kafka.create_topic_partitions", k.create_topic_partitions == Some(0), "must be at least 1"),
            ("kafka.properties", asks_for_incremental_rebalancing(k), INCREMENTAL_REBALANCING),
            ("cassandra.contact_points", c.contact_points.iter().all(|p| p.trim().is_empty()), "must name at least one host:port"),
            ("cassandra.keyspace", !is_keyspace_name(&c.keyspace), KEYSPACE_NAME),
            ("cassandra.replication", !c.replication.trim_start().starts_with('{'), CQL_MAP),
            ("cassandra.password", c.username.is_some() != c.password.is_some(), "username and password go together"),
            ("cassandra.consistency", c.consistency == ConsistencyLevel::EachQuorum, "must be a level reads accept (EACH_QUORUM is for writes only)"),
            ("cassandra.request_timeout", c.request_timeout.is_zero(), "must be greater than zero"),
            ("cassandra.status_ttl", !is_cassandra_ttl(c.status_ttl), CASSANDRA_TTL),
            ("cassandra.attempts_ttl", !is_cassandra_ttl(c.attempts_ttl), CASSANDRA_TTL),
            ("admin.listen", a.enabled && a.listen.parse::<SocketAddr>().is_err(), "must be an IP address and port, such as 127.0.0.1:9464"),
            ("admin.token", a.token.as_deref().is_some_and(|t| t.trim().is_empty()), "must not be empty when set"),
            ("admin.token", a.enabled && a.token.is_none() && !a.allow_unauthenticated_remote && listens_beyond_loopback(&a.listen), UNAUTHENTICATED_REMOTE),
            ("admin.allowed_hosts", !a.allowed_hosts.iter().all(|h| is_host_name(h)), HOST_NAMES),
            ("telemetry.otlp_endpoint", t.otlp_endpoint.as_deref().is_some_and(|e| !is_http_url(e)), "must be an http:// or https:// address, such as http://127.0.0.1:4318"),
            ("telemetry.service_name", t.service_name.trim().is_empty(), "must not be empty"),
            ("workers.claim_ttl", w.claim_ttl < Duration::from_secs(1) || w.claim_ttl > Duration::from_secs(3600), "must be from 1s to 1h"),
            ("workers.max_wait", w.max_wait > Duration::from_secs(300), "must be at most 5m"),
            ("workers.worker_ttl", w.worker_ttl.is_zero(), "must be greater than zero"),
            ("workers.types", !w.types.iter().all(|t| scheduler_client::wire::check_task_type(t).is_ok()), "must be task types (1 to 128 ASCII letters, digits or -_.:/)"),
            ("workers.types", !w.enabled && !w.types.is_empty(), "must be empty when workers.enabled is false"),
        ];
        match rules.iter().find(|(_, broken, _)| *broken) {
            Some(&(key, _, reason)) => Err(SettingsError::Invalid {
                key,
                reason: reason.to_string(),
            }),
            None => Ok(()),
        }
    }
}

/// Whether `slice` is 0 (the kernel's default) or a slice Linux takes as asked (it clamps any
/// other to this range).
fn is_thread_slice(slice: Duration) -> bool {
    slice.is_zero() || (Duration::from_micros(100)..=Duration::from_millis(100)).contains(&slice)
}

const KEY_RATE: &str = "must be a number of starts a second above 0, at most 1000000, when set";
const KEY_BURST: &str = "must be from 1 to 1000000 when set";

/// Whether `rate`, when set, is a rate of starts the limits handle (`limits::KeyRate`).
pub(crate) fn is_key_rate(rate: Option<f64>) -> bool {
    rate.is_none_or(|r| r.is_finite() && r > 0.0 && r <= MAX_KEY_RATE)
}

/// The highest rate of a key (starts a second).
pub(crate) const MAX_KEY_RATE: f64 = 1e6;
/// The largest burst of a key.
pub(crate) const MAX_KEY_BURST: u32 = 1_000_000;

/// Whether `burst`, when set, is a burst the limits handle.
pub(crate) fn is_key_burst(burst: Option<u32>) -> bool {
    burst.is_none_or(|b| (1..=MAX_KEY_BURST).contains(&b))
}

/// Whether the admin listener's address is one other machines may reach (not loopback).
fn listens_beyond_loopback(listen: &str) -> bool {
    listen
        .parse::<SocketAddr>()
        .is_ok_and(|address| !address.ip().is_loopback())
}

/// A DNS name as `Host` gives it, without scheme, port or path: letters, digits, `-`, `_`, `.`.
fn is_host_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && (name.bytes()).all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// The lease is written with a Cassandra TTL, which counts whole seconds, and renewed every
/// third of it; 3 s is the shortest allowed.
fn is_whole_seconds_from_3(ttl: Duration) -> bool {
    ttl >= Duration::from_secs(3) && ttl.subsec_nanos() == 0
}

/// No events topic, or one that is neither blank nor the scheduler's own topic.
fn events_topic_is_apart(kafka: &KafkaSettings) -> bool {
    kafka
        .events_topic
        .as_deref()
        .is_none_or(|t| !t.trim().is_empty() && t != kafka.topic)
}

/// Nodes tear every partition tree down on a rebalance and build the assigned ones again; an
/// incremental (cooperative) rebalance would leave retained partitions without a tree, so it is
/// refused rather than half supported.
fn asks_for_incremental_rebalancing(kafka: &KafkaSettings) -> bool {
    let properties = &kafka.properties;
    properties
        .get("partition.assignment.strategy")
        .is_some_and(|s| s.contains("cooperative"))
        || properties
            .get("group.protocol")
            .is_some_and(|p| p.eq_ignore_ascii_case("consumer"))
}

/// A CQL identifier the engine can use unquoted: a letter, then letters, digits or
/// underscores, 48 at most (Cassandra's limit).
pub(super) fn is_keyspace_name(name: &str) -> bool {
    name.len() <= 48
        && name
            .chars()
            .next()
            .is_some_and(|ch| ch.is_ascii_alphabetic())
        && name
            .chars()
            .all(|ch| ch.is_ascii_alphanumeric() || ch == '_')
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::settings::tests::env;

    #[test]
    fn bad_settings_name_the_key_and_the_reason() {
        let cases = [
            (
                "[scheduling]\nmax_in_flight_tasks = 0",
                "scheduling.max_in_flight_tasks",
            ),
            (
                "[scheduling]\nprefetch_window = \"10m\"",
                "scheduling.prefetch_window",
            ),
            (
                "[scheduling]\nmax_backoff = \"1s\"",
                "scheduling.max_backoff",
            ),
            (
                "[scheduling]\nbackoff_factor = \"ten seconds\"",
                "must be an integer followed by ms, s, m or h",
            ),
            (
                "[cassandra]\nkeyspace = \"1bad-name\"",
                "cassandra.keyspace",
            ),
            ("[cassandra]\nusername = \"u\"", "cassandra.password"),
            ("[kafka]\ntopic = \"\"", "kafka.topic"),
            ("[kafka]\ntopik = \"x\"", "unknown field `topik`"),
            (
                "[kafka.properties]\n\"partition.assignment.strategy\" = \"cooperative-sticky\"",
                "kafka.properties",
            ),
            (
                "[kafka.properties]\n\"group.protocol\" = \"consumer\"",
                "incremental rebalancing",
            ),
            ("[admin]\nlisten = \"localhost\"", "admin.listen"),
            ("not toml at all", "invalid settings"),
        ];
        for (text, expected) in cases {
            let err = Settings::from_toml_with_env(text, env(&[]))
                .unwrap_err()
                .to_string();
            assert!(err.contains(expected), "{text}: {err}");
        }
    }

    /// Every rule once, with its whole message: the table reports exactly what the checks
    /// always reported.
    #[test]
    fn every_rule_names_its_key_and_reason() {
        let cases = [
            ("[scheduling]\nbackoff_factor = \"0s\"", "scheduling.backoff_factor", "must be greater than zero"),
            ("[workers]\nclaim_ttl = \"500ms\"", "workers.claim_ttl", "must be from 1s to 1h"),
            ("[workers]\nmax_wait = \"10m\"", "workers.max_wait", "must be at most 5m"),
            ("[workers]\nworker_ttl = \"0s\"", "workers.worker_ttl", "must be greater than zero"),
            ("[workers]\ntypes = [\"bad type\"]", "workers.types", "must be task types (1 to 128 ASCII letters, digits or -_.:/)"),
            ("[workers]\nenabled = false\ntypes = [\"resize\"]", "workers.types", "must be empty when workers.enabled is false"),
            ("[scheduling]\nmax_backoff = \"1s\"", "scheduling.max_backoff", "must be at least scheduling.backoff_factor"),
            ("[scheduling]\nmax_in_flight_tasks = 0", "scheduling.max_in_flight_tasks", "must be at least 1"),
            ("[scheduling]\nfetch_batch_size = 0", "scheduling.fetch_batch_size", "must be at least 1"),
            ("[scheduling]\nmax_look_ahead = \"0s\"", "scheduling.max_look_ahead", "must be greater than zero"),
            ("[scheduling]\nprefetch_window = \"5m\"", "scheduling.prefetch_window", "must be shorter than scheduling.max_look_ahead"),
            ("[scheduling]\npersist_timeout = \"0s\"", "scheduling.persist_timeout", "must be greater than zero"),
            ("[scheduling]\nmax_queued_per_ordering = 0", "scheduling.max_queued_per_ordering", "must be at least 1"),
            ("[scheduling]\nexecutor_concurrency = 0", "scheduling.executor_concurrency", "must be at least 1"),
            ("[scheduling]\ndispatch_lead = \"10m\"", "scheduling.dispatch_lead", "must be shorter than scheduling.max_look_ahead"),
            ("[scheduling]\nlease_ttl = \"2s\"", "scheduling.lease_ttl", "must be whole seconds, at least 3s"),
            ("[scheduling]\nlease_ttl = \"3500ms\"", "scheduling.lease_ttl", "must be whole seconds, at least 3s"),
            ("[scheduling]\nexecution_timeout = \"0s\"", "scheduling.execution_timeout", "must be greater than zero"),
            ("[scheduling]\nmax_task_data_bytes = 63", "scheduling.max_task_data_bytes", "must be at least 64 bytes"),
            ("[scheduling]\nthread_slice = \"50us\"", "scheduling.thread_slice", "must be 0s (the kernel's default) or from 100us to 100ms"),
            ("[scheduling]\nthread_slice = \"101ms\"", "scheduling.thread_slice", "must be 0s (the kernel's default) or from 100us to 100ms"),
            ("[kafka]\nbootstrap_servers = \" \"", "kafka.bootstrap_servers", "must not be empty"),
            ("[kafka]\ntopic = \"\"", "kafka.topic", "must not be empty"),
            ("[kafka]\ngroup_id = \"\"", "kafka.group_id", "must not be empty"),
            ("[kafka]\nevents_topic = \"scheduled-tasks\"", "kafka.events_topic", "must name a topic other than kafka.topic"),
            ("[kafka]\nevents_topic = \" \"", "kafka.events_topic", "must name a topic other than kafka.topic"),
            ("[kafka]\ncreate_topic_partitions = 0", "kafka.create_topic_partitions", "must be at least 1"),
            ("[kafka.properties]\n\"group.protocol\" = \"CONSUMER\"", "kafka.properties", "incremental rebalancing (a cooperative assignor, group.protocol=consumer) is not supported: nodes rebuild every partition on a rebalance"),
            ("[cassandra]\ncontact_points = [\" \"]", "cassandra.contact_points", "must name at least one host:port"),
            ("[cassandra]\nkeyspace = \"k-1\"", "cassandra.keyspace", "must start with a letter and hold at most 48 letters, digits or underscores"),
            ("[cassandra]\nkeyspace = \"\"", "cassandra.keyspace", "must start with a letter and hold at most 48 letters, digits or underscores"),
            ("[cassandra]\nkeyspace = \"k234567890123456789012345678901234567890123456789\"", "cassandra.keyspace", "must start with a letter and hold at most 48 letters, digits or underscores"),
            ("[cassandra]\nreplication = \"SimpleStrategy\"", "cassandra.replication", "must be a CQL map such as {'class': 'SimpleStrategy', 'replication_factor': 1}"),
            ("[cassandra]\npassword = \"p\"", "cassandra.password", "username and password go together"),
            ("[cassandra]\nconsistency = \"EACH_QUORUM\"", "cassandra.consistency", "must be a level reads accept (EACH_QUORUM is for writes only)"),
            ("[cassandra]\nrequest_timeout = \"0s\"", "cassandra.request_timeout", "must be greater than zero"),
            ("[cassandra]\nstatus_ttl = \"1500ms\"", "cassandra.status_ttl", "must be whole seconds, at most 20 years (0s: kept forever)"),
            ("[cassandra]\nattempts_ttl = \"200000h\"", "cassandra.attempts_ttl", "must be whole seconds, at most 20 years (0s: kept forever)"),
            ("[admin]\nlisten = \"localhost:9464\"", "admin.listen", "must be an IP address and port, such as 127.0.0.1:9464"),
            ("[admin]\ntoken = \"  \"", "admin.token", "must not be empty when set"),
            ("[admin]\nlisten = \"0.0.0.0:9464\"", "admin.token", UNAUTHENTICATED_REMOTE),
            ("[admin]\nlisten = \"[::]:0\"", "admin.token", UNAUTHENTICATED_REMOTE),
            ("[admin]\nlisten = \"10.0.0.5:9464\"\nallow_unauthenticated_remote = false", "admin.token", UNAUTHENTICATED_REMOTE),
            ("[admin]\nallowed_hosts = [\"http://admin.example\"]", "admin.allowed_hosts", HOST_NAMES),
            ("[admin]\nallowed_hosts = [\"admin.example:9464\"]", "admin.allowed_hosts", HOST_NAMES),
            ("[admin]\nallowed_hosts = [\"\"]", "admin.allowed_hosts", HOST_NAMES),
        ];
        for (text, key, reason) in cases {
            let error = Settings::from_toml_with_env(text, env(&[])).map(|_| ());
            assert_eq!(
                error.map_err(|e| e.to_string()),
                Err(format!("invalid setting `{key}`: {reason}")),
                "{text}"
            );
        }
        // What the rules allow.
        let fine = "[kafka]\nevents_topic = \"events\"\n[cassandra]\nkeyspace = \"k_1\"\nusername = \"u\"\npassword = \"p\"\n[admin]\nenabled = false\nlisten = \"nowhere\"";
        assert!(Settings::from_toml_with_env(fine, env(&[])).is_ok());
        // Beyond loopback with a token, or told to go without one; names of hosts.
        for fine in [
            "[admin]\nlisten = \"0.0.0.0:9464\"\ntoken = \"t\"",
            "[admin]\nlisten = \"0.0.0.0:9464\"\nallow_unauthenticated_remote = true",
            "[admin]\nlisten = \"[::1]:9464\"",
            "[admin]\nenabled = false\nlisten = \"0.0.0.0:9464\"",
            "[admin]\nallowed_hosts = [\"scheduler-1.internal\", \"Admin.Example.COM\", \"node_2\"]",
        ] {
            let settings = Settings::from_toml_with_env(fine, env(&[]));
            assert!(settings.is_ok(), "{fine}: {settings:?}");
        }
    }
}
