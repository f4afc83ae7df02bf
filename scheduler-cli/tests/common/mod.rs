//! The harness of the command tests: a canned admin API on loopback, and the command run as a
//! library function. (Each test binary uses a part of it.)
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};

/// A request as the canned API received it: the request line, its headers and its body.
#[derive(Debug, Clone, Default)]
pub struct Received {
    pub line: String,
    pub headers: Vec<String>,
    pub body: String,
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
