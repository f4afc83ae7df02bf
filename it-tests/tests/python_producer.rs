//! The Python producer (`examples/python/produce.py`: confluent-kafka, `murmur2_random`, the
//! documented wire format, no project code) against the real stack. `dev/python` installs its
//! venv first (idempotent), so the test runs from a clean checkout; a failed install, or a
//! service that cannot be reached, fails it.
//!
//! It checks that every record lands in the partition `partition_for` gives, keyed by its
//! orderingId, with the bytes the Rust client would write for the same task; that a node runs
//! each task with the data, type and priority sent, in schedule order per orderingId (a replaced
//! task not at all); and that bad input and an unreachable broker fail loudly. A second test
//! runs the table of rules every producer applies (`scheduler-client/tests/producer_rules.json`)
//! through produce.py's `--dry-run`: it refuses exactly what the Rust producers refuse, and
//! writes for the rest the bytes the Rust client writes.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use chrono::{DateTime, FixedOffset, SecondsFormat, TimeDelta, Utc};
use it_tests::engine::{wait_until, TestEnv};
use it_tests::python::{install_python, repo};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};
use scheduler_client::{partition_for, wire, OnConflict, Task, TaskData, TaskKey};
use scheduler_core::{TaskContext, TaskError, TaskHandler};
use serde_json::{json, Value};

const PARTITIONS: u32 = 6;

/// The rules every producer applies (`scheduler-client/tests/producer_rules.json`).
mod rules {
    include!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../scheduler-client/tests/producer_rules/cases.rs"
    ));
}

/// A task as produce.py reports it: (orderingId, uniquenessKey, scheduledTime as the wire
/// writes it).
type Identity = (String, String, String);
/// Where a record landed: (partition, offset).
type Placement = (i32, i64);

/// Every task the node ran, in the order the calls started.
#[derive(Clone, Default)]
struct Ran(Arc<Mutex<Vec<Task>>>);

impl Ran {
    fn snapshot(&self) -> Vec<Task> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

impl TaskHandler for Ran {
    async fn execute(&self, task: &Task, _: &TaskContext) -> Result<(), TaskError> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(task.clone());
        Ok(())
    }
}

/// Runs produce.py with `args`, feeding it `stdin`.
fn produce(python: &Path, args: &[&str], stdin: &str) -> Output {
    let mut child = Command::new(python)
        .arg(repo().join("examples/python/produce.py"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run produce.py: {e}"));
    if let Some(mut input) = child.stdin.take() {
        input.write_all(stdin.as_bytes()).expect("write stdin");
    }
    child.wait_with_output().expect("produce.py runs")
}

async fn produce_async(python: &Path, args: Vec<String>, stdin: String) -> Output {
    let python = python.to_path_buf();
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        produce(&python, &args, &stdin)
    })
    .await
    .expect("produce.py thread")
}

/// Where produce.py says each task landed.
fn placements(output: &Output) -> Vec<(Identity, Placement)> {
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "produce.py failed ({}):\nstdout: {stdout}\nstderr: {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
        .lines()
        .map(|line| {
            let v: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
            let text = |k: &str| v[k].as_str().unwrap_or_default().to_string();
            let number = |k: &str| v[k].as_i64().unwrap_or_else(|| panic!("{k} in {line}"));
            (
                (
                    text("orderingId"),
                    text("uniquenessKey"),
                    text("scheduledTime"),
                ),
                (number("partition") as i32, number("offset")),
            )
        })
        .collect()
}

/// A task to send: its JSON line for produce.py's stdin and the task the node should see.
struct Sent {
    line: Value,
    task: Task,
}

fn to_send(
    ordering_id: &str,
    at: DateTime<FixedOffset>,
    unique: &str,
    data: Value,
    task_type: Option<&str>,
    priority: Option<i32>,
    on_conflict: Option<OnConflict>,
) -> Sent {
    let map: TaskData = data.as_object().cloned().expect("taskData is an object");
    let mut task = Task::new(ordering_id, at.with_timezone(&Utc), unique, map);
    // As given: microseconds and a zone offset, which produce.py turns into UTC milliseconds.
    let mut line = json!({
        "orderingId": ordering_id,
        "scheduledTime": at.to_rfc3339_opts(SecondsFormat::Micros, false),
        "uniquenessKey": unique,
        "taskData": data,
    });
    if let Some(t) = task_type {
        line["taskType"] = json!(t);
        task = task.of_type(t);
    }
    if let Some(p) = priority {
        line["priority"] = json!(p);
        task = task.with_priority(p);
    }
    if let Some(mode) = on_conflict {
        line["onConflict"] = json!(mode.as_str());
        if let Some(wait) = mode.max_wait() {
            line["maxWaitMs"] = json!(wait.as_millis() as u64);
        }
        task = task.on_conflict(mode);
    }
    Sent { line, task }
}

fn identity(task: &Task) -> Identity {
    (
        task.ordering_id.clone(),
        task.uniqueness_key.clone(),
        wire::format_time(task.scheduled_time),
    )
}

/// The batch: several orderingIds (some not ASCII), each with tasks given out of time order,
/// some typed and prioritised, nested data with unicode, escapes and 64-bit integers, and one
/// identity replaced by a later record (only the replacement runs).
fn batch(base: DateTime<Utc>) -> (Vec<Sent>, Vec<TaskKey>) {
    // Times in a zone east of UTC, with microseconds. The orderingIds cover the six partitions.
    let zone = FixedOffset::east_opt(5 * 3600 + 30 * 60).expect("offset");
    let at = |ms: i64| (base + TimeDelta::milliseconds(ms)).with_timezone(&zone);
    let micros = TimeDelta::microseconds(789);
    let ids = [
        "py-alpha",
        "py-ünïcödé-β",
        "py-客户-7",
        "py-delta",
        "py-epsilon",
        "py-🚀",
        "py-d",
        "py-e",
        "py-k",
    ];
    let mut out = Vec::new();
    for (i, id) in ids.iter().enumerate() {
        let i = i as i64;
        // Three tasks per orderingId, sent latest first.
        for step in (0..3).rev() {
            let unique = format!("u{step}");
            let data = json!({
                "big": 18_446_744_073_709_551_615u64,
                "min": i64::MIN,
                "nested": {"list": [1, 2.5, 0.1, null, true, {"deep": ["x", {"y": -3}]}], "n": i},
                "step": step,
                "text": format!("héllo wörld ✓ 日本語 🚀 \"quoted\" back\\slash\nnew line \u{1} #{i}"),
            });
            let (task_type, priority) = match (i + step) % 3 {
                0 => (None, None),
                1 => (Some("send-email"), Some(5)),
                _ => (Some("py.report:v2/x_y-z"), Some(-3)),
            };
            let when = at(i * 90 + step * 700) + micros;
            out.push(to_send(id, when, &unique, data, task_type, priority, None));
        }
    }
    // An identity scheduled twice with `replace`: the second record wins.
    let replaced = to_send(
        "py-delta",
        at(3_000),
        "digest",
        json!({"version": 1}),
        Some("digest"),
        None,
        Some(OnConflict::Replace),
    );
    let replacement = to_send(
        "py-delta",
        at(2_500),
        "digest",
        json!({"version": 2}),
        Some("digest"),
        Some(1),
        Some(OnConflict::Replace),
    );
    let debounced = to_send(
        "py-epsilon",
        at(2_200),
        "burst",
        json!({}),
        None,
        None,
        Some(OnConflict::Debounce {
            max_wait: Duration::from_secs(30),
        }),
    );
    let superseded = vec![replaced.task.key()];
    out.extend([replaced, replacement, debounced]);
    (out, superseded)
}

/// Every record of `topic`: (partition, offset) → (key, value).
async fn read_topic(env: &TestEnv, expected: usize) -> HashMap<Placement, (Vec<u8>, Vec<u8>)> {
    let consumer: StreamConsumer = ClientConfig::new()
        .set("bootstrap.servers", &env.stack.kafka_bootstrap)
        .set("group.id", format!("{}_reader", env.group))
        .set("enable.auto.commit", "false")
        .create()
        .expect("consumer");
    let mut assignment = TopicPartitionList::new();
    for p in 0..PARTITIONS as i32 {
        assignment
            .add_partition_offset(&env.topic, p, Offset::Beginning)
            .expect("partition");
    }
    consumer.assign(&assignment).expect("assign");
    let mut records = HashMap::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    // Then a second of quiet: nothing beyond what produce.py reported.
    let mut quiet_until = None;
    loop {
        let wait = match quiet_until {
            Some(until) => until,
            None => deadline,
        }
        .saturating_duration_since(Instant::now());
        match tokio::time::timeout(wait, consumer.recv()).await {
            Ok(message) => {
                let m = message.expect("read the topic");
                records.insert(
                    (m.partition(), m.offset()),
                    (
                        m.key().unwrap_or_default().to_vec(),
                        m.payload().unwrap_or_default().to_vec(),
                    ),
                );
            }
            Err(_) if quiet_until.is_some() => break,
            Err(_) => panic!("only {} of {expected} records on the topic", records.len()),
        }
        if records.len() >= expected && quiet_until.is_none() {
            quiet_until = Some(Instant::now() + Duration::from_secs(1));
        }
    }
    records
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_producer_places_and_encodes_tasks_as_the_engine_expects() {
    let test_started = Instant::now();
    let env = TestEnv::new("it_python", PARTITIONS).await;
    // The install (seconds on a fresh machine, under one when done) while the node starts.
    let install = tokio::task::spawn_blocking(install_python);
    let ran = Ran::default();
    let starting = Instant::now();
    let node = env
        .start_sole_node(env.settings(TestEnv::quick_scheduling()), ran.clone())
        .await;
    println!(
        "the node owned every partition {:.1} s after its start",
        starting.elapsed().as_secs_f64()
    );
    let python = install.await.expect("install thread");
    let bootstrap = env.stack.kafka_bootstrap.clone();
    let common = |extra: &[&str]| {
        let mut args = vec![
            "--bootstrap".to_string(),
            bootstrap.clone(),
            "--topic".to_string(),
            env.topic.clone(),
        ];
        args.extend(extra.iter().map(|a| a.to_string()));
        args
    };

    // 1. The batch, as JSON lines on stdin.
    let base = Utc::now() + TimeDelta::seconds(5);
    let (mut sent, superseded) = batch(base);
    let stdin: String = sent.iter().map(|s| format!("{}\n", s.line)).collect();
    let produced = Instant::now();
    let output = produce_async(&python, common(&["--stdin"]), stdin).await;
    let mut placed = placements(&output);
    println!(
        "produce.py sent {} tasks in {:.2} s",
        placed.len(),
        produced.elapsed().as_secs_f64()
    );

    // 2. One task from flags.
    let flags_at = (base + TimeDelta::milliseconds(1_234))
        .with_timezone(&FixedOffset::west_opt(3 * 3600).expect("offset"));
    let flags_data = json!({"kind": "flags", "list": [1, {"deep": [true, null]}], "name": "Zoë"});
    let at_text = flags_at.to_rfc3339_opts(SecondsFormat::Millis, false);
    let data_text = flags_data.to_string();
    let output = produce_async(
        &python,
        common(&[
            "--ordering-id",
            "py-flags-ü",
            "--unique-key",
            "flag-1",
            "--at",
            &at_text,
            "--data",
            &data_text,
            "--type",
            "py.flags",
            "--priority",
            "-7",
        ]),
        String::new(),
    )
    .await;
    placed.extend(placements(&output));
    sent.push(to_send(
        "py-flags-ü",
        flags_at,
        "flag-1",
        flags_data,
        Some("py.flags"),
        Some(-7),
        None,
    ));
    assert_eq!(placed.len(), sent.len(), "one line per task");

    // 3. Bad input is refused before anything is sent (exit 2); an unreachable broker fails
    // within the timeout (exit 1).
    let bad = format!(
        "{}\n",
        json!({"orderingId": "py-bad", "scheduledTime": "2030-01-01T00:00:00Z",
               "uniquenessKey": "u", "taskType": "no spaces allowed"})
    );
    let good_first = format!("{}\n{bad}", sent[0].line);
    let output = produce_async(&python, common(&["--stdin"]), good_first).await;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "bad taskType: {stderr}");
    assert!(
        stderr.contains("taskType") && stderr.contains("nothing sent"),
        "{stderr}"
    );
    let closed_port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        listener.local_addr().expect("address").port()
    };
    let unreachable = Instant::now();
    let output = produce_async(
        &python,
        vec![
            "--bootstrap".into(),
            format!("127.0.0.1:{closed_port}"),
            "--topic".into(),
            env.topic.clone(),
            "--timeout".into(),
            "2".into(),
            "--ordering-id".into(),
            "py-nowhere".into(),
        ],
        String::new(),
    )
    .await;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(
        output.status.code(),
        Some(1),
        "unreachable broker: {stderr}"
    );
    assert!(stderr.contains("failed"), "{stderr}");
    println!(
        "an unreachable broker failed produce.py in {:.1} s",
        unreachable.elapsed().as_secs_f64()
    );

    // (a) Each record is keyed by its orderingId, in partition_for's partition, and holds the
    // bytes the Rust client writes for the same task (taskData's keys are sorted, as serde_json
    // writes them, and its floats print alike in both).
    let records = read_topic(&env, sent.len()).await;
    assert_eq!(
        records.len(),
        sent.len(),
        "no other record reached the topic"
    );
    let by_identity: HashMap<_, _> = sent.iter().map(|s| (identity(&s.task), s)).collect();
    let mut partitions_used = BTreeSet::new();
    let mut offsets = HashMap::new();
    for (id, (partition, offset)) in &placed {
        let s = by_identity
            .get(id)
            .unwrap_or_else(|| panic!("{id:?} was not sent"));
        let task = &s.task;
        assert_eq!(
            *partition,
            partition_for(&task.ordering_id, PARTITIONS),
            "{id:?}"
        );
        let (key, value) = &records[&(*partition, *offset)];
        assert_eq!(key.as_slice(), task.ordering_id.as_bytes(), "{id:?}");
        assert_eq!(
            String::from_utf8_lossy(value),
            String::from_utf8_lossy(&wire::encode(task)),
            "{id:?}"
        );
        partitions_used.insert(*partition);
        offsets.insert(task.key(), *offset);
    }
    assert_eq!(
        partitions_used.len(),
        PARTITIONS as usize,
        "the orderingIds cover every partition: {partitions_used:?}"
    );

    // (b) The node runs each task once, as sent, in schedule order per orderingId.
    let to_run: Vec<&Task> = sent
        .iter()
        .map(|s| &s.task)
        .filter(|t| !superseded.contains(&t.key()))
        .collect();
    wait_until(Duration::from_secs(30), "every task to run", || {
        let keys: BTreeSet<TaskKey> = ran.snapshot().iter().map(Task::key).collect();
        to_run.iter().all(|t| keys.contains(&t.key()))
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let runs = ran.snapshot();
    assert_eq!(
        runs.len(),
        to_run.len(),
        "each task ran once, the replaced one never"
    );
    let mut per_ordering: BTreeMap<&str, Vec<&Task>> = BTreeMap::new();
    for run in &runs {
        let expected = to_run
            .iter()
            .find(|t| t.key() == run.key())
            .unwrap_or_else(|| panic!("{} ran but was not to run", run.key()));
        assert_eq!(run.task_data, expected.task_data, "{}", run.key());
        assert_eq!(run.task_type, expected.task_type, "{}", run.key());
        assert_eq!(run.priority, expected.priority, "{}", run.key());
        assert_eq!(run.on_conflict, expected.on_conflict, "{}", run.key());
        assert_eq!(
            run.enqueue_offset,
            offsets.get(&run.key()).copied(),
            "{}",
            run.key()
        );
        per_ordering.entry(&run.ordering_id).or_default().push(run);
    }
    for (ordering_id, tasks) in &per_ordering {
        let times: Vec<_> = tasks.iter().map(|t| t.scheduled_time).collect();
        assert!(
            times.windows(2).all(|w| w[0] <= w[1]),
            "{ordering_id} ran out of schedule order: {times:?}"
        );
    }
    println!(
        "{} tasks over {} orderingIds and {} partitions ran as sent; the test took {:.1} s",
        runs.len(),
        per_ordering.len(),
        partitions_used.len(),
        test_started.elapsed().as_secs_f64()
    );
    node.shutdown().await.expect("clean shutdown");
}

/// produce.py refuses exactly the table's invalid tasks (exit 2, nothing sent), as the Rust
/// client, the `scheduler` command and HTTP enqueue do, and for each valid one prints the bytes
/// the Rust client writes. `--dry-run` needs no broker; each case runs as `--stdin` input, its
/// `$now` resolved just before (a Python start takes a while, and the grace window is 10 s).
#[test]
fn the_python_producer_refuses_exactly_the_rules_invalid_tasks() {
    let python = install_python();
    let (grace, cases) = rules::producer_rule_cases(Utc::now());
    let grace = format!("{}ms", grace.as_millis());
    let started = Instant::now();
    let mut wrong = Vec::new();
    for at in 0..cases.len() {
        let (_, fresh) = rules::producer_rule_cases(Utc::now());
        let case = &fresh[at];
        let output = produce(
            &python,
            &["--dry-run", "--grace", &grace, "--stdin"],
            &format!("{}\n", case.record),
        );
        let stdout = String::from_utf8_lossy(&output.stdout);
        let stderr = String::from_utf8_lossy(&output.stderr);
        match (output.status.code(), case.producers_accept) {
            (Some(0), true) => {
                let task = wire::decode(Some(case.record.as_bytes()), usize::MAX)
                    .unwrap_or_else(|e| panic!("{}: {e}", case.name));
                let rust = String::from_utf8_lossy(&wire::encode(&task)).into_owned();
                if stdout.trim_end_matches('\n') != rust {
                    wrong.push(format!(
                        "{}: produce.py wrote\n  {stdout}the Rust client writes\n  {rust}",
                        case.name
                    ));
                }
            }
            (Some(2), false) if stderr.contains("nothing sent") => {}
            (code, accept) => wrong.push(format!(
                "{}: exit {code:?}, expected {} ({}): {stderr}",
                case.name,
                if accept { 0 } else { 2 },
                if accept { "sent" } else { "refused" },
            )),
        }
    }
    println!(
        "{} cases through produce.py in {:.1} s",
        cases.len(),
        started.elapsed().as_secs_f64()
    );
    assert!(
        wrong.is_empty(),
        "{} of {} cases:\n{}",
        wrong.len(),
        cases.len(),
        wrong.join("\n")
    );
}
