//! [`Settings::validate`]: the range of every value, checked before anything starts.

use std::time::Duration;

use super::{Settings, SettingsError};

impl Settings {
    /// Checks every value's range; the first problem found is returned.
    pub fn validate(&self) -> Result<(), SettingsError> {
        let s = &self.scheduling;
        let invalid = |key, reason: &str| {
            Err(SettingsError::Invalid {
                key,
                reason: reason.to_string(),
            })
        };
        if s.backoff_factor.is_zero() {
            return invalid("scheduling.backoff_factor", "must be greater than zero");
        }
        if s.max_backoff < s.backoff_factor {
            return invalid(
                "scheduling.max_backoff",
                "must be at least scheduling.backoff_factor",
            );
        }
        if s.max_in_flight_tasks == 0 {
            return invalid("scheduling.max_in_flight_tasks", "must be at least 1");
        }
        if s.fetch_batch_size == 0 {
            return invalid("scheduling.fetch_batch_size", "must be at least 1");
        }
        if s.max_look_ahead.is_zero() {
            return invalid("scheduling.max_look_ahead", "must be greater than zero");
        }
        if s.prefetch_window >= s.max_look_ahead {
            return invalid(
                "scheduling.prefetch_window",
                "must be shorter than scheduling.max_look_ahead",
            );
        }
        if s.persist_timeout.is_zero() {
            return invalid("scheduling.persist_timeout", "must be greater than zero");
        }
        if s.max_queued_per_ordering == 0 {
            return invalid("scheduling.max_queued_per_ordering", "must be at least 1");
        }
        if s.executor_concurrency == 0 {
            return invalid("scheduling.executor_concurrency", "must be at least 1");
        }
        if s.lease_ttl < Duration::from_secs(3) || s.lease_ttl.subsec_nanos() != 0 {
            return invalid("scheduling.lease_ttl", "must be whole seconds, at least 3s");
        }
        if s.execution_timeout.is_zero() {
            return invalid("scheduling.execution_timeout", "must be greater than zero");
        }
        if s.max_task_data_bytes < 64 {
            return invalid(
                "scheduling.max_task_data_bytes",
                "must be at least 64 bytes",
            );
        }
        let k = &self.kafka;
        if k.bootstrap_servers.trim().is_empty() {
            return invalid("kafka.bootstrap_servers", "must not be empty");
        }
        if k.topic.trim().is_empty() {
            return invalid("kafka.topic", "must not be empty");
        }
        if k.group_id.trim().is_empty() {
            return invalid("kafka.group_id", "must not be empty");
        }
        if k.events_topic
            .as_deref()
            .is_some_and(|t| t.trim().is_empty() || t == k.topic)
        {
            return invalid(
                "kafka.events_topic",
                "must name a topic other than kafka.topic",
            );
        }
        if k.create_topic_partitions == Some(0) {
            return invalid("kafka.create_topic_partitions", "must be at least 1");
        }
        // Nodes tear every partition tree down on a rebalance and build the assigned ones
        // again; an incremental (cooperative) rebalance would leave retained partitions without
        // a tree, so it is refused rather than half supported.
        let incremental = k
            .properties
            .get("partition.assignment.strategy")
            .is_some_and(|s| s.contains("cooperative"))
            || k.properties
                .get("group.protocol")
                .is_some_and(|p| p.eq_ignore_ascii_case("consumer"));
        if incremental {
            return invalid(
                "kafka.properties",
                "incremental rebalancing (a cooperative assignor, group.protocol=consumer) is not supported: nodes rebuild every partition on a rebalance",
            );
        }
        let c = &self.cassandra;
        if c.contact_points.iter().all(|p| p.trim().is_empty()) {
            return invalid(
                "cassandra.contact_points",
                "must name at least one host:port",
            );
        }
        let keyspace_ok = c.keyspace.len() <= 48
            && c.keyspace
                .chars()
                .next()
                .is_some_and(|ch| ch.is_ascii_alphabetic())
            && c.keyspace
                .chars()
                .all(|ch| ch.is_ascii_alphanumeric() || ch == '_');
        if !keyspace_ok {
            return invalid(
                "cassandra.keyspace",
                "must start with a letter and hold at most 48 letters, digits or underscores",
            );
        }
        if !c.replication.trim_start().starts_with('{') {
            return invalid(
                "cassandra.replication",
                "must be a CQL map such as {'class': 'SimpleStrategy', 'replication_factor': 1}",
            );
        }
        if c.username.is_some() != c.password.is_some() {
            return invalid("cassandra.password", "username and password go together");
        }
        let a = &self.admin;
        if a.enabled && a.listen.parse::<std::net::SocketAddr>().is_err() {
            return invalid(
                "admin.listen",
                "must be an IP address and port, such as 127.0.0.1:9464",
            );
        }
        if a.token.as_deref().is_some_and(|t| t.trim().is_empty()) {
            return invalid("admin.token", "must not be empty when set");
        }
        Ok(())
    }
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
}
