//! Queues (`[[queues]]`): a topic with its own consumer group, keyspace and limits for a set of
//! task types, and limits per task type (`[scheduling.task_types.<type>]`).
//!
//! Every type not listed by a queue goes to the default queue: `[kafka] topic` and `group_id`,
//! `[cassandra] keyspace`, `[scheduling]`. A node serves a queue only when it has a handler for
//! one of its types (a fallback handler serves every queue), so a node never consumes work it
//! cannot run.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::validate::is_keyspace_name;
use super::{optional_duration, SettingsError};
use super::{CassandraSettings, KafkaSettings, SchedulingSettings, Settings};

/// The default queue's name (`[kafka]`, `[cassandra]`, `[scheduling]`).
pub const DEFAULT_QUEUE: &str = "default";

/// One `[[queues]]` entry. Unset values derive from the default queue's.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct QueueSettings {
    /// The queue's name: lower-case letters, digits, `-` and `_` (in metrics, the admin API's
    /// `/queues/<name>/` paths and the derived names below).
    pub name: String,
    /// The task types the queue carries (each type in one queue at most).
    #[serde(deserialize_with = "super::list_or_commas")]
    pub task_types: Vec<String>,
    /// Its topic (default `<kafka.topic>-<name>`).
    pub topic: Option<String>,
    /// Its consumer group (default `<kafka.group_id>-<name>`).
    pub group_id: Option<String>,
    /// Its keyspace (default `<cassandra.keyspace>_<name>`, `-` written `_`): partitions of two
    /// topics share numbers, so two queues never share tables.
    pub keyspace: Option<String>,
    /// Partitions of its topic when a node creates it (default `kafka.create_topic_partitions`).
    pub create_topic_partitions: Option<u32>,
    /// Overrides `scheduling.executor_concurrency` (calls at once of this queue on a node).
    pub executor_concurrency: Option<usize>,
    /// Overrides `scheduling.key_concurrency` (calls at once per limit key on a node).
    pub key_concurrency: Option<usize>,
    /// Overrides `scheduling.key_rate` (starts a second per limit key on a node).
    pub key_rate: Option<f64>,
    /// Overrides `scheduling.key_burst`.
    pub key_burst: Option<u32>,
    /// Overrides `scheduling.max_in_flight_tasks` (per partition of this queue).
    pub max_in_flight_tasks: Option<usize>,
    /// Overrides `scheduling.max_task_retries`.
    pub max_task_retries: Option<u32>,
    /// Overrides `scheduling.backoff_factor`.
    #[serde(with = "optional_duration")]
    pub backoff_factor: Option<Duration>,
    /// Overrides `scheduling.max_backoff`.
    #[serde(with = "optional_duration")]
    pub max_backoff: Option<Duration>,
    /// Overrides `scheduling.execution_timeout`.
    #[serde(with = "optional_duration")]
    pub execution_timeout: Option<Duration>,
}

/// Limits of one task type (`[scheduling.task_types.<type>]`), over its queue's.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct TypeLimits {
    /// Retries after the first attempt.
    pub max_task_retries: Option<u32>,
    /// Base of the retry backoff.
    #[serde(with = "optional_duration")]
    pub backoff_factor: Option<Duration>,
    /// Upper bound of one retry backoff.
    #[serde(with = "optional_duration")]
    pub max_backoff: Option<Duration>,
    /// How long one call may run.
    #[serde(with = "optional_duration")]
    pub execution_timeout: Option<Duration>,
    /// Calls of this type at once per limit key, on a node (over the queue's
    /// `key_concurrency`, which then does not count them).
    pub key_concurrency: Option<usize>,
    /// Starts of this type a second per limit key, on a node (over the queue's `key_rate`).
    pub key_rate: Option<f64>,
    /// Starts of this type at once per limit key within its `key_rate` (default the queue's
    /// `key_burst`, else a second's worth).
    pub key_burst: Option<u32>,
}

/// The limits a task of one type runs under: its type's, else its queue's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Retries after the first attempt.
    pub max_task_retries: u32,
    /// Base of the retry backoff.
    pub backoff_factor: Duration,
    /// Upper bound of one retry backoff.
    pub max_backoff: Duration,
    /// How long one call may run.
    pub execution_timeout: Duration,
}

impl SchedulingSettings {
    /// The limits of tasks of `task_type`.
    pub fn limits_for(&self, task_type: &str) -> Limits {
        let of_type = self.task_types.get(task_type);
        let pick = |f: fn(&TypeLimits) -> Option<Duration>, queue: Duration| {
            of_type.and_then(f).unwrap_or(queue)
        };
        Limits {
            max_task_retries: of_type
                .and_then(|t| t.max_task_retries)
                .unwrap_or(self.max_task_retries),
            backoff_factor: pick(|t| t.backoff_factor, self.backoff_factor),
            max_backoff: pick(|t| t.max_backoff, self.max_backoff),
            execution_timeout: pick(|t| t.execution_timeout, self.execution_timeout),
        }
    }

    /// The execution timeout of each type with one of its own.
    pub fn type_timeouts(&self) -> BTreeMap<String, Duration> {
        self.task_types
            .iter()
            .filter_map(|(t, l)| l.execution_timeout.map(|d| (t.clone(), d)))
            .collect()
    }
}

/// A queue with every value resolved: what a node runs for it.
#[derive(Debug, Clone, PartialEq)]
pub struct Queue {
    /// Its name ([`DEFAULT_QUEUE`] for the default queue).
    pub name: String,
    /// The task types it carries; empty for the default queue (every unlisted type).
    pub task_types: Vec<String>,
    /// Its topic and consumer group.
    pub kafka: KafkaSettings,
    /// Its keyspace.
    pub cassandra: CassandraSettings,
    /// Its limits.
    pub scheduling: SchedulingSettings,
}

impl Queue {
    /// Whether a node with handlers for `types` (and a fallback, when `fallback`) serves this
    /// queue. The default queue carries every type no queue lists.
    pub fn served_by(&self, types: &[String], fallback: bool, listed: &BTreeSet<&str>) -> bool {
        fallback
            || if self.name == DEFAULT_QUEUE {
                types.iter().any(|t| !listed.contains(t.as_str()))
            } else {
                types.iter().any(|t| self.task_types.contains(t))
            }
    }
}

impl Settings {
    /// The default queue, then every `[[queues]]` entry, resolved.
    pub fn queues(&self) -> Vec<Queue> {
        let default = Queue {
            name: DEFAULT_QUEUE.into(),
            task_types: Vec::new(),
            kafka: self.kafka.clone(),
            cassandra: self.cassandra.clone(),
            scheduling: self.scheduling.clone(),
        };
        let named = self.queues.iter().map(|q| {
            let mut kafka = self.kafka.clone();
            kafka.topic = q
                .topic
                .clone()
                .unwrap_or_else(|| format!("{}-{}", self.kafka.topic, q.name));
            kafka.group_id = q
                .group_id
                .clone()
                .unwrap_or_else(|| format!("{}-{}", self.kafka.group_id, q.name));
            kafka.create_topic_partitions = q
                .create_topic_partitions
                .or(self.kafka.create_topic_partitions);
            let mut cassandra = self.cassandra.clone();
            cassandra.keyspace = q.keyspace.clone().unwrap_or_else(|| {
                format!("{}_{}", self.cassandra.keyspace, q.name.replace('-', "_"))
            });
            let mut scheduling = self.scheduling.clone();
            let s = &mut scheduling;
            s.executor_concurrency = q.executor_concurrency.unwrap_or(s.executor_concurrency);
            s.key_concurrency = q.key_concurrency.or(s.key_concurrency);
            s.key_rate = q.key_rate.or(s.key_rate);
            s.key_burst = q.key_burst.or(s.key_burst);
            s.max_in_flight_tasks = q.max_in_flight_tasks.unwrap_or(s.max_in_flight_tasks);
            s.max_task_retries = q.max_task_retries.unwrap_or(s.max_task_retries);
            s.backoff_factor = q.backoff_factor.unwrap_or(s.backoff_factor);
            s.max_backoff = q.max_backoff.unwrap_or(s.max_backoff);
            s.execution_timeout = q.execution_timeout.unwrap_or(s.execution_timeout);
            Queue {
                name: q.name.clone(),
                task_types: q.task_types.clone(),
                kafka,
                cassandra,
                scheduling,
            }
        });
        std::iter::once(default).chain(named).collect()
    }

    /// The task types some `[[queues]]` entry lists.
    pub fn listed_types(&self) -> BTreeSet<&str> {
        self.queues
            .iter()
            .flat_map(|q| q.task_types.iter().map(String::as_str))
            .collect()
    }

    /// The queues' own rules: names, types in one queue each, topics, groups and keyspaces
    /// apart, and each queue's resolved limits valid.
    pub(super) fn validate_queues(&self) -> Result<(), SettingsError> {
        let invalid = |queue: &str, reason: String| SettingsError::Queue {
            queue: queue.to_string(),
            reason,
        };
        let (mut names, mut types) = (BTreeSet::new(), BTreeMap::new());
        for q in &self.queues {
            let name_ok = !q.name.is_empty()
                && q.name.len() <= 32
                && q.name.starts_with(|c: char| c.is_ascii_lowercase())
                && q.name
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_');
            if !name_ok {
                return Err(invalid(&q.name, "the name must start with a lower-case letter and hold at most 32 lower-case letters, digits, `-` or `_`".into()));
            }
            if q.name == DEFAULT_QUEUE || !names.insert(q.name.as_str()) {
                return Err(invalid(
                    &q.name,
                    "the name is taken (`default` is the default queue's)".into(),
                ));
            }
            if q.task_types.is_empty() {
                return Err(invalid(
                    &q.name,
                    "task_types must list at least one type".into(),
                ));
            }
            for t in &q.task_types {
                scheduler_client::wire::check_task_type(t)
                    .map_err(|e| invalid(&q.name, e.to_string()))?;
                if let Some(other) = types.insert(t.as_str(), q.name.as_str()) {
                    return Err(invalid(
                        &q.name,
                        format!("task type {t:?} is listed by queue {other:?} too"),
                    ));
                }
            }
        }
        let queues = self.queues();
        let (mut topics, mut groups, mut keyspaces) =
            (BTreeSet::new(), BTreeSet::new(), BTreeSet::new());
        for q in &queues {
            let (topic, group) = (&q.kafka.topic, &q.kafka.group_id);
            if topic.trim().is_empty()
                || !topics.insert(topic)
                || q.kafka.events_topic.as_ref() == Some(topic)
            {
                return Err(invalid(
                    &q.name,
                    format!("topic {topic:?} is empty or another queue's (or the events topic)"),
                ));
            }
            if group.trim().is_empty() || !groups.insert(group) {
                return Err(invalid(
                    &q.name,
                    format!("group_id {group:?} is empty or another queue's"),
                ));
            }
            let keyspace = &q.cassandra.keyspace;
            if !is_keyspace_name(keyspace) || !keyspaces.insert(keyspace) {
                return Err(invalid(&q.name, format!("keyspace {keyspace:?} is not a keyspace name (a letter, then at most 47 letters, digits or underscores) or is another queue's")));
            }
            let alone = Settings {
                scheduling: q.scheduling.clone(),
                kafka: q.kafka.clone(),
                cassandra: q.cassandra.clone(),
                admin: self.admin.clone(),
                telemetry: self.telemetry.clone(),
                workers: self.workers.clone(),
                queues: Vec::new(),
            };
            alone
                .validate_one()
                .map_err(|e| invalid(&q.name, e.to_string()))?;
            for (t, limits) in &q.scheduling.task_types {
                let l = q.scheduling.limits_for(t);
                if l.backoff_factor.is_zero()
                    || l.max_backoff < l.backoff_factor
                    || l.execution_timeout.is_zero()
                {
                    return Err(invalid(&q.name, format!("scheduling.task_types.{t}: backoff_factor and execution_timeout must be greater than zero, max_backoff at least backoff_factor ({limits:?})")));
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::settings::tests::env;

    const QUEUES: &str = r#"
        [scheduling]
        max_task_retries = 7
        [scheduling.task_types.charge]
        max_task_retries = 0
        execution_timeout = "5s"
        [[queues]]
        name = "emails"
        task_types = ["send-email", "send-sms"]
        executor_concurrency = 2
        backoff_factor = "1s"
        max_backoff = "4s"
        [[queues]]
        name = "big-jobs"
        task_types = "report"
        topic = "reports"
    "#;

    #[test]
    fn queues_derive_their_names_and_override_limits() {
        let settings = Settings::from_toml_with_env(QUEUES, env(&[])).unwrap();
        let queues = settings.queues();
        let names: Vec<_> = queues.iter().map(|q| q.name.as_str()).collect();
        assert_eq!(names, ["default", "emails", "big-jobs"]);
        let (default, emails, jobs) = (&queues[0], &queues[1], &queues[2]);
        assert_eq!(emails.kafka.topic, "scheduled-tasks-emails");
        assert_eq!(emails.kafka.group_id, "scheduler-emails");
        assert_eq!(emails.cassandra.keyspace, "scheduler_emails");
        assert_eq!(jobs.kafka.topic, "reports");
        assert_eq!(jobs.cassandra.keyspace, "scheduler_big_jobs");
        assert_eq!(emails.scheduling.executor_concurrency, 2);
        assert_eq!(default.scheduling.executor_concurrency, 64);
        let sms = emails.scheduling.limits_for("send-sms");
        assert_eq!(
            (sms.max_task_retries, sms.backoff_factor),
            (7, Duration::from_secs(1))
        );
        let charge = default.scheduling.limits_for("charge");
        assert_eq!(charge.max_task_retries, 0);
        assert_eq!(charge.execution_timeout, Duration::from_secs(5));

        let listed = settings.listed_types();
        let served = |types: &[&str], fallback: bool| -> Vec<&str> {
            let types: Vec<String> = types.iter().map(|t| t.to_string()).collect();
            queues
                .iter()
                .filter(|q| q.served_by(&types, fallback, &listed))
                .map(|q| q.name.as_str())
                .collect()
        };
        assert_eq!(served(&["send-sms"], false), ["emails"]);
        assert_eq!(
            served(&["charge", "report"], false),
            ["default", "big-jobs"]
        );
        assert_eq!(served(&[], true), ["default", "emails", "big-jobs"]);
    }

    #[test]
    fn bad_queues_are_refused_with_the_queue_and_reason() {
        let cases = [
            ("[[queues]]\nname = \"default\"\ntask_types = [\"a\"]", "name is taken"),
            ("[[queues]]\nname = \"Emails\"\ntask_types = [\"a\"]", "lower-case"),
            ("[[queues]]\nname = \"e\"", "at least one type"),
            ("[[queues]]\nname = \"e\"\ntask_types = [\"a\"]\n[[queues]]\nname = \"f\"\ntask_types = [\"a\"]", "listed by queue \"e\" too"),
            ("[[queues]]\nname = \"e\"\ntask_types = [\"a\"]\ntopic = \"scheduled-tasks\"", "topic \"scheduled-tasks\""),
            ("[[queues]]\nname = \"e\"\ntask_types = [\"a\"]\nexecutor_concurrency = 0", "scheduling.executor_concurrency"),
            ("[[queues]]\nname = \"e\"\ntask_types = [\"a\"]\nmax_backoff = \"1s\"", "scheduling.max_backoff"),
            ("[scheduling.task_types.a]\nexecution_timeout = \"0s\"", "scheduling.task_types.a"),
        ];
        for (text, expected) in cases {
            let error = Settings::from_toml_with_env(text, env(&[]))
                .unwrap_err()
                .to_string();
            assert!(error.contains(expected), "{text}: {error}");
        }
    }
}
