//! Tracing across Kafka, end to end against the dev stack: a task produced with a W3C
//! `traceparent` runs on `scheduler node`, whose `[telemetry] otlp_endpoint` points at a
//! collector this test plays; the exported execution span carries a link to the producer's
//! span (its trace and span ids), so the record header crossed Kafka and Cassandra.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use scheduler_client::{Scheduler, SchedulerConfig, Task};

fn stack(key: &str, default: &str) -> String {
    std::env::var(key).unwrap_or_else(|_| default.to_string())
}

fn unique(prefix: &str) -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("{prefix}_{}_{nanos}", std::process::id())
}

/// An OTLP/HTTP collector on loopback: keeps every request's path and body, answers 200.
fn collector() -> (String, Arc<Mutex<Vec<(String, Vec<u8>)>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let address = format!("http://{}", listener.local_addr().expect("address"));
    let received = Arc::new(Mutex::new(Vec::new()));
    let kept = Arc::clone(&received);
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let mut reader = BufReader::new(stream);
            let mut request_line = String::new();
            if reader.read_line(&mut request_line).is_err() {
                continue;
            }
            let mut length = 0;
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
                if let Some((name, value)) = line.split_once(':') {
                    if name.eq_ignore_ascii_case("content-length") {
                        length = value.trim().parse().unwrap_or(0);
                    }
                }
            }
            let mut body = vec![0; length];
            if reader.read_exact(&mut body).is_err() {
                continue;
            }
            let path = request_line
                .split_whitespace()
                .nth(1)
                .unwrap_or("")
                .to_string();
            kept.lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push((path, body));
            let _ = reader
                .get_mut()
                .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
        }
    });
    (address, received)
}

fn hex(text: &str) -> Vec<u8> {
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).expect("hex"))
        .collect()
}

#[test]
fn a_tasks_execution_span_links_to_the_span_that_scheduled_it() {
    let (endpoint, received) = collector();
    let dir = std::env::temp_dir().join(unique("scheduler_trace_export"));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let stderr_path = dir.join("stderr.log");
    let stderr = std::fs::File::create(&stderr_path).expect("stderr file");
    let bootstrap = stack("SCHEDULER_KAFKA_BOOTSTRAP", "127.0.0.1:19092");
    let topic = unique("traces_topic");
    let mut child = Command::new(env!("CARGO_BIN_EXE_scheduler"))
        .args(["node", "--exec", "true"])
        .env("SCHEDULER__TELEMETRY__OTLP_ENDPOINT", &endpoint)
        .env("SCHEDULER__TELEMETRY__SERVICE_NAME", "trace-export-test")
        .env("SCHEDULER__ADMIN__LISTEN", "127.0.0.1:0")
        .env("SCHEDULER__KAFKA__BOOTSTRAP_SERVERS", &bootstrap)
        .env(
            "SCHEDULER__CASSANDRA__CONTACT_POINTS",
            stack("SCHEDULER_CQL_CONTACT_POINT", "127.0.0.1:19042"),
        )
        .env("SCHEDULER__CASSANDRA__FETCH_SCHEMA_METADATA", "false")
        .env("SCHEDULER__CASSANDRA__AUTO_MIGRATE", "true")
        .env("SCHEDULER__CASSANDRA__KEYSPACE", unique("traces"))
        .env("SCHEDULER__KAFKA__TOPIC", &topic)
        .env("SCHEDULER__KAFKA__GROUP_ID", unique("traces_group"))
        .env("SCHEDULER__KAFKA__CREATE_TOPIC_PARTITIONS", "2")
        .env_remove("RUST_LOG")
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .expect("scheduler node starts");
    let deadline = Instant::now() + Duration::from_secs(120);
    while !std::fs::read_to_string(&stderr_path)
        .unwrap_or_default()
        .contains("partition claimed")
    {
        let exited = child.try_wait().ok().flatten();
        assert!(
            exited.is_none() && Instant::now() < deadline,
            "the node did not claim its partitions (exited: {exited:?}):\n{}",
            std::fs::read_to_string(&stderr_path).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(200));
    }

    // The producer's span, as another service's tracing would have it.
    let (trace_id, span_id) = ("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7");
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async {
        let scheduler = Scheduler::new(SchedulerConfig::new(bootstrap.clone(), topic.clone()))
            .expect("producer");
        let task = Task::new("traced", chrono::Utc::now(), "1", Default::default())
            .with_trace_parent(format!("00-{trace_id}-{span_id}-01"));
        scheduler.schedule_task(task).await.expect("enqueued");
    });

    // OTLP's Span.Link: trace_id (field 1, 16 bytes) then span_id (field 2, 8 bytes).
    let mut link = vec![0x0a, 0x10];
    link.extend(hex(trace_id));
    link.extend([0x12, 0x08]);
    link.extend(hex(span_id));
    let deadline = Instant::now() + Duration::from_secs(60);
    let exported = loop {
        let found = received
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .find(|(_, body)| body.windows(link.len()).any(|w| w == link))
            .cloned();
        if let Some(found) = found {
            break found;
        }
        assert!(
            Instant::now() < deadline,
            "no exported span links to the producer's ({} exports); node log:\n{}",
            received
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .len(),
            std::fs::read_to_string(&stderr_path).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(exported.0, "/v1/traces");
    let body = exported.1;
    for text in ["trace-export-test", "traced", "messaging.system", "kafka"] {
        assert!(
            body.windows(text.len()).any(|w| w == text.as_bytes()),
            "{text} is not in the export"
        );
    }
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let _ = child.wait();
}
