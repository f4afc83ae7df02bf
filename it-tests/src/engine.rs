//! Harness for the engine's integration tests: a topic, consumer group and keyspace per test,
//! node settings pointing at the stack, and an executor that records every execution.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use scheduler_client::{Scheduler, SchedulerConfig, Task, TaskKey};
use scheduler_core::settings::{
    AdminSettings, CassandraSettings, KafkaSettings, SchedulingSettings, Settings,
};
use scheduler_core::store::CassandraStore;
use scheduler_core::{SchedulerNode, TaskContext, TaskError, TaskHandler};

use crate::teardown::Teardown;
use crate::{unique_name, Stack};

/// One test's slice of the stack: its own topic, consumer group and keyspace, dropped with the
/// last clone of it (the keyspaces and topics of its queues too).
#[derive(Debug, Clone)]
pub struct TestEnv {
    /// The stack's addresses.
    pub stack: Stack,
    /// The topic, created with `partitions` partitions.
    pub topic: String,
    /// Partitions of the topic.
    pub partitions: u32,
    /// The nodes' consumer group.
    pub group: String,
    /// The Cassandra keyspace.
    pub keyspace: String,
    teardown: Arc<Teardown>,
}

impl TestEnv {
    /// Checks both services (failing with their names), then creates the topic.
    pub async fn new(prefix: &str, partitions: u32) -> TestEnv {
        let stack = Stack::from_env();
        stack.require_kafka().await;
        drop(stack.require_cassandra().await);
        let topic = unique_name(&format!("{prefix}_topic"));
        let keyspace = unique_name(prefix);
        let teardown = Teardown::new(stack.clone())
            .keyspace(&keyspace)
            .topic(&topic);
        let env = TestEnv {
            topic,
            group: unique_name(&format!("{prefix}_group")),
            keyspace,
            partitions,
            stack,
            teardown: Arc::new(teardown),
        };
        env.create_topic(&env.topic, partitions).await;
        env
    }

    /// Creates a topic on the stack's broker, deleted when the test ends.
    pub async fn create_topic(&self, name: &str, partitions: u32) {
        self.teardown.add_topic(name);
        let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
            .set("bootstrap.servers", &self.stack.kafka_bootstrap)
            .create()
            .expect("admin client");
        let results = admin
            .create_topics(
                &[NewTopic::new(
                    name,
                    partitions as i32,
                    TopicReplication::Fixed(1),
                )],
                &AdminOptions::new().operation_timeout(Some(Duration::from_secs(10))),
            )
            .await
            .expect("create topic");
        for result in results {
            result.unwrap_or_else(|(name, code)| panic!("create topic {name}: {code}"));
        }
    }

    /// Node settings for this environment, with quick rebalances for tests.
    pub fn settings(&self, scheduling: SchedulingSettings) -> Settings {
        Settings {
            scheduling,
            kafka: KafkaSettings {
                bootstrap_servers: self.stack.kafka_bootstrap.clone(),
                topic: self.topic.clone(),
                group_id: self.group.clone(),
                ..KafkaSettings::default()
            },
            cassandra: CassandraSettings {
                contact_points: vec![self.stack.cql_contact_point.clone()],
                keyspace: self.keyspace.clone(),
                fetch_schema_metadata: false,
                // Each test's keyspace is fresh.
                auto_migrate: true,
                ..CassandraSettings::default()
            },
            admin: AdminSettings {
                listen: "127.0.0.1:0".into(),
                ..AdminSettings::default()
            },
            ..Settings::default()
        }
    }

    /// Scheduling settings suited to tests: short isolation wait and drain.
    pub fn quick_scheduling() -> SchedulingSettings {
        SchedulingSettings {
            isolation_wait: Duration::from_millis(500),
            drain_timeout: Duration::from_secs(5),
            ..SchedulingSettings::default()
        }
    }

    /// A producer for this environment's topic.
    pub fn scheduler(&self, grace: Duration) -> Scheduler {
        let mut config =
            SchedulerConfig::new(self.stack.kafka_bootstrap.clone(), self.topic.clone());
        config.scheduling_grace_window = grace;
        Scheduler::new(config).expect("scheduler")
    }

    /// Starts a node with `settings` and waits until it owns every partition of the topic (for
    /// tests that run a single node).
    pub async fn start_sole_node<E: TaskHandler>(
        &self,
        settings: Settings,
        executor: E,
    ) -> SchedulerNode {
        let node = SchedulerNode::start(settings, executor)
            .await
            .expect("node starts");
        self.owning_every_partition(node).await
    }

    /// `node`, once it owns every partition of the topic.
    pub async fn owning_every_partition(&self, node: SchedulerNode) -> SchedulerNode {
        let partitions = self.partitions as usize;
        wait_until(
            Duration::from_secs(30),
            "the node to own every partition",
            || node.owned_partitions().len() == partitions,
        )
        .await;
        node
    }

    /// A store handle on this environment's keyspace, to read task status.
    pub async fn store(&self) -> CassandraStore {
        CassandraStore::connect(&self.settings(SchedulingSettings::default()).cassandra)
            .await
            .expect("store")
    }
}

/// One call of the executor.
#[derive(Debug, Clone)]
pub struct Execution {
    /// The task.
    pub key: TaskKey,
    /// The node that ran it.
    pub node: String,
    /// When the call started.
    pub started: DateTime<Utc>,
    /// When it returned.
    pub finished: DateTime<Utc>,
}

/// The most executions of `log` whose calls overlapped at one moment, of the tasks `of`.
pub fn most_at_once(runs: &[Execution], of: impl Fn(&Task) -> bool, tasks: &[Task]) -> usize {
    let keys: std::collections::BTreeSet<_> =
        tasks.iter().filter(|t| of(t)).map(|t| t.key()).collect();
    let mut edges: Vec<(DateTime<Utc>, i32)> = Vec::new();
    for run in runs.iter().filter(|r| keys.contains(&r.key)) {
        edges.push((run.started, 1));
        edges.push((run.finished, -1));
    }
    // An end at the moment of a start comes first: that call no longer runs.
    edges.sort_by_key(|(at, step)| (*at, *step));
    let (mut now, mut most) = (0, 0);
    for (_, step) in edges {
        now += step;
        most = most.max(now);
    }
    usize::try_from(most).unwrap_or(0)
}

/// Decides an execution's result from the task and how many times it was called before.
pub type Behaviour = Arc<dyn Fn(&Task, usize) -> Result<(), TaskError> + Send + Sync>;

/// An executor that records every execution into a log shared by all nodes of a test.
#[derive(Clone)]
pub struct Recorder {
    node: String,
    log: Arc<Mutex<Vec<Execution>>>,
    work: Duration,
    behaviour: Behaviour,
}

impl Recorder {
    /// A recorder for `node` writing to `log`; each call takes `work` and then succeeds.
    pub fn new(node: &str, log: &Arc<Mutex<Vec<Execution>>>, work: Duration) -> Recorder {
        Recorder {
            node: node.to_string(),
            log: Arc::clone(log),
            work,
            behaviour: Arc::new(|_, _| Ok(())),
        }
    }

    /// The same recorder, deciding results with `behaviour`.
    pub fn with_behaviour(mut self, behaviour: Behaviour) -> Recorder {
        self.behaviour = behaviour;
        self
    }
}

impl TaskHandler for Recorder {
    async fn execute(&self, task: &Task, _ctx: &TaskContext) -> Result<(), TaskError> {
        let started = Utc::now();
        tokio::time::sleep(self.work).await;
        let previous = {
            let log = self.log.lock().unwrap_or_else(PoisonError::into_inner);
            log.iter().filter(|e| e.key == task.key()).count()
        };
        let result = (self.behaviour)(task, previous);
        self.log
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(Execution {
                key: task.key(),
                node: self.node.clone(),
                started,
                finished: Utc::now(),
            });
        result
    }
}

/// A snapshot of a shared execution log.
pub fn executions(log: &Arc<Mutex<Vec<Execution>>>) -> Vec<Execution> {
    log.lock().unwrap_or_else(PoisonError::into_inner).clone()
}

/// Executions grouped by task.
pub fn by_task(log: &Arc<Mutex<Vec<Execution>>>) -> HashMap<TaskKey, Vec<Execution>> {
    let mut map: HashMap<TaskKey, Vec<Execution>> = HashMap::new();
    for e in executions(log) {
        map.entry(e.key.clone()).or_default().push(e);
    }
    map
}

/// Polls `condition` every 50 ms until it holds, or panics after `timeout` describing `what`.
pub async fn wait_until(timeout: Duration, what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !condition() {
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A task with empty data.
pub fn task(ordering_id: &str, at: DateTime<Utc>, unique: &str) -> Task {
    Task::new(ordering_id, at, unique, Default::default())
}

/// Sums the samples of `metric` in a Prometheus text exposition whose labels include every
/// `name="value"` pair in `labels`.
pub fn metric_sum(text: &str, metric: &str, labels: &[(&str, &str)]) -> f64 {
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| {
            let (series, value) = line.rsplit_once(' ')?;
            let (name, label_text) = series.split_once('{').unwrap_or((series, ""));
            let matches = name == metric
                && labels
                    .iter()
                    .all(|(k, v)| label_text.contains(&format!("{k}=\"{v}\"")));
            matches.then(|| value.parse::<f64>().ok()).flatten()
        })
        .sum()
}

/// A response from [`http`].
#[derive(Debug)]
pub struct HttpResponse {
    /// Status code.
    pub status: u16,
    /// Header lines, lower-cased names.
    pub headers: Vec<(String, String)>,
    /// Body as text.
    pub body: String,
}

impl HttpResponse {
    /// The body parsed as JSON (panics with the body if it is not).
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }

    /// A header's value.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// One HTTP/1.1 request over a fresh connection (enough for the admin API's tests).
pub async fn http(
    addr: std::net::SocketAddr,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<&str>,
) -> HttpResponse {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr)
        .await
        .expect("connect to the admin API");
    let mut request = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    if let Some(token) = token {
        request.push_str(&format!("Authorization: Bearer {token}\r\n"));
    }
    if let Some(body) = body {
        request.push_str(&format!(
            "Content-Type: application/json\r\nContent-Length: {}\r\n",
            body.len()
        ));
    }
    request.push_str("\r\n");
    request.push_str(body.unwrap_or(""));
    stream
        .write_all(request.as_bytes())
        .await
        .expect("send request");
    let mut raw = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), stream.read_to_end(&mut raw))
        .await
        .expect("response within 30 s")
        .expect("read response");
    let text = String::from_utf8_lossy(&raw).to_string();
    let (head, payload) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status line in {text:?}"));
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let chunked = headers
        .iter()
        .any(|(n, v)| n == "transfer-encoding" && v.eq_ignore_ascii_case("chunked"));
    let body = if chunked {
        dechunk(payload)
    } else {
        payload.to_string()
    };
    HttpResponse {
        status,
        headers,
        body,
    }
}

fn dechunk(mut payload: &str) -> String {
    let mut body = String::new();
    while let Some((size, rest)) = payload.split_once("\r\n") {
        let Ok(size) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        if size == 0 || rest.len() < size {
            break;
        }
        body.push_str(&rest[..size]);
        payload = rest[size..].trim_start_matches("\r\n");
    }
    body
}
