//! The harness of the command tests: a canned admin API on loopback, and the command run as a
//! library function. (Each test binary uses a part of it.)
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// A request as the canned API received it: the request line, its headers and its body.
#[derive(Debug, Clone, Default)]
pub struct Received {
    pub line: String,
    pub headers: Vec<String>,
    pub body: String,
    /// The body's bytes (a binary body such as OTLP's protobuf is not text).
    pub raw_body: Vec<u8>,
}

/// Serves `answer(request line) -> (status, body)` on a free loopback port until the test ends;
/// returns its URL and what it received.
pub fn canned_api(
    answer: impl Fn(&str) -> (u16, String) + Send + 'static,
) -> (String, Arc<Mutex<Vec<Received>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
    let url = format!("http://{}", listener.local_addr().expect("local address"));
    let received = Arc::new(Mutex::new(Vec::new()));
    let log = Arc::clone(&received);
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let mut reader = BufReader::new(stream.try_clone().expect("clone the stream"));
            let mut request = Received::default();
            reader.read_line(&mut request.line).expect("request line");
            request.line = request.line.trim_end().to_string();
            let mut length = 0;
            loop {
                let mut header = String::new();
                reader.read_line(&mut header).expect("header");
                let header = header.trim_end().to_string();
                if header.is_empty() {
                    break;
                }
                if let Some((name, value)) = header.split_once(':') {
                    if name.eq_ignore_ascii_case("content-length") {
                        length = value.trim().parse().expect("content length");
                    }
                }
                request.headers.push(header);
            }
            let mut body = vec![0; length];
            reader.read_exact(&mut body).expect("body");
            request.body = String::from_utf8_lossy(&body).to_string();
            request.raw_body = body;
            let (status, payload) = answer(&request.line);
            log.lock().expect("log").push(request);
            let response = format!(
                "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{payload}",
                payload.len()
            );
            let _ = stream.write_all(response.as_bytes());
        }
    });
    (url, received)
}

/// Runs the command line `args` (after the program name); returns the exit code and the output.
pub fn scheduler(args: &[&str]) -> (i32, String) {
    let mut argv = vec!["scheduler"];
    argv.extend(args);
    let mut out = Vec::new();
    let code = scheduler_cli::run(argv, &mut out);
    (code, String::from_utf8_lossy(&out).to_string())
}

/// The query parameters of a request line, decoded.
pub fn query(line: &str) -> Vec<(String, String)> {
    let target = line.split_whitespace().nth(1).unwrap_or_default();
    let query = target.split_once('?').map_or("", |(_, q)| q);
    serde_urlencoded::from_str(query).expect("a well-formed query")
}

/// The body of the `n`th request, as JSON.
pub fn body(received: &Mutex<Vec<Received>>, n: usize) -> serde_json::Value {
    serde_json::from_str(&received.lock().expect("log")[n].body).expect("a JSON body")
}

/// The stack's address for `key` (`SCHEDULER_KAFKA_BOOTSTRAP`, `SCHEDULER_CQL_CONTACT_POINT`),
/// as the it-tests read it, else the dev stack's default.
pub fn stack(key: &str, default: &str) -> String {
    std::env::var(key).unwrap_or_else(|_| default.to_string())
}

/// The dev stack's Kafka bootstrap servers.
pub fn kafka_bootstrap() -> String {
    stack("SCHEDULER_KAFKA_BOOTSTRAP", "127.0.0.1:19092")
}

/// A name of its own for this run's topic, group and keyspace.
pub fn unique(prefix: &str) -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("{prefix}_{}_{nanos}", std::process::id())
}

/// A `scheduler node --exec true` process on the dev stack, on a topic (2 partitions), group
/// and keyspace of its own, writing its stderr to a file.
pub struct NodeProcess {
    pub child: Child,
    pub dir: PathBuf,
    pub stderr: PathBuf,
    pub topic: String,
}

impl NodeProcess {
    /// Starts it with the extra environment `env` (settings overrides).
    pub fn start(prefix: &str, env: &[(&str, &str)]) -> NodeProcess {
        let dir = std::env::temp_dir().join(unique(&format!("scheduler_{prefix}")));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let stderr = dir.join("stderr.log");
        let file = std::fs::File::create(&stderr).expect("stderr file");
        let topic = unique(&format!("{prefix}_topic"));
        let mut command = Command::new(env!("CARGO_BIN_EXE_scheduler"));
        command
            .args(["node", "--exec", "true"])
            .env("SCHEDULER__ADMIN__LISTEN", "127.0.0.1:0")
            .env("SCHEDULER__KAFKA__BOOTSTRAP_SERVERS", kafka_bootstrap())
            .env(
                "SCHEDULER__CASSANDRA__CONTACT_POINTS",
                stack("SCHEDULER_CQL_CONTACT_POINT", "127.0.0.1:19042"),
            )
            .env("SCHEDULER__CASSANDRA__FETCH_SCHEMA_METADATA", "false")
            .env("SCHEDULER__CASSANDRA__AUTO_MIGRATE", "true")
            .env("SCHEDULER__CASSANDRA__KEYSPACE", unique(prefix))
            .env("SCHEDULER__KAFKA__TOPIC", &topic)
            .env(
                "SCHEDULER__KAFKA__GROUP_ID",
                unique(&format!("{prefix}_group")),
            )
            .env("SCHEDULER__KAFKA__CREATE_TOPIC_PARTITIONS", "2")
            .env_remove("RUST_LOG")
            .stdout(Stdio::null())
            .stderr(file);
        for (key, value) in env {
            command.env(key, value);
        }
        let child = command.spawn().expect("scheduler node starts");
        NodeProcess {
            child,
            dir,
            stderr,
            topic,
        }
    }

    /// Its stderr so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    /// Waits until its stderr contains `what` (or it exited, or 180 s passed: a fresh keyspace
    /// takes a minute on the dev stack's Cassandra 2.1 when other tests change schemas too).
    pub fn wait_for(&mut self, what: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(180);
        loop {
            let text = self.log();
            if text.contains(what) {
                return text;
            }
            let exited = self.child.try_wait().ok().flatten();
            assert!(
                exited.is_none() && Instant::now() < deadline,
                "no {what:?} (exited: {exited:?}); stderr:\n{text}"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Sends it SIGTERM.
    pub fn terminate(&self) {
        let killed = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .expect("kill");
        assert!(killed.success());
    }

    /// Where its files are.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}
