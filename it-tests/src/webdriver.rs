//! A small WebDriver client for the dashboard's it-test: the W3C protocol's JSON over HTTP
//! (a minimal HTTP/1.1 exchange, one request per connection), to a chromedriver process
//! this module starts on a free port and kills when dropped, driving Debian's Chromium
//! headless with a fresh profile. Enough to navigate, find elements by CSS, click, type, read
//! text and attributes, and save screenshots; no crate for it (fantoccini and the like bring
//! a second HTTP stack for a dozen calls).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// Where Debian's packages put them (`dev/browser` installs them).
pub const CHROMIUM: &str = "/usr/bin/chromium";
/// Debian's `chromium-driver`.
pub const CHROMEDRIVER: &str = "/usr/bin/chromedriver";

/// The key of an element reference in WebDriver's answers.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

/// Runs the project's `dev/browser` (installing Chromium and chromedriver when missing),
/// panicking with its output if it fails: the dashboard's test fails, never skips, without a
/// browser.
pub fn require_browser() {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../dev/browser");
    let output = Command::new(&script)
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e}", script.display()));
    assert!(
        output.status.success(),
        "dev/browser could not provide Chromium and chromedriver ({}):\n{}{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    for binary in [CHROMIUM, CHROMEDRIVER] {
        assert!(
            Path::new(binary).exists(),
            "{binary} is missing after dev/browser"
        );
    }
}

/// A chromedriver process on a free loopback port, killed when dropped.
pub struct Driver {
    child: Child,
    addr: SocketAddr,
}

impl Driver {
    /// Starts chromedriver and waits until it answers `/status` ready.
    pub async fn start() -> Driver {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("a free port");
        let child = Command::new(CHROMEDRIVER)
            .arg(format!("--port={port}"))
            .arg("--allowed-ips=127.0.0.1")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("starting {CHROMEDRIVER}: {e}"));
        let driver = Driver {
            child,
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok((200, status)) = exchange(driver.addr, "GET", "/status", None).await {
                let status: Value = serde_json::from_str(&status).unwrap_or_default();
                if status["value"]["ready"] == true {
                    return driver;
                }
            }
            assert!(
                Instant::now() < deadline,
                "chromedriver did not start within 20 s"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// A browser session: headless Chromium with the flags this machine needs and a fresh
    /// profile directory (removed when the session is dropped).
    pub async fn session(&self) -> Session {
        let profile = std::env::temp_dir().join(crate::unique_name("dashboard-chromium"));
        std::fs::create_dir_all(&profile).expect("a profile directory");
        // Without the background-networking flags Chromium keeps trying the Internet, whose
        // connections the closed network refuses, and stalls.
        let args = [
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-dev-shm-usage",
            "--window-size=1360,900",
            &format!("--user-data-dir={}", profile.display()),
        ];
        let capabilities = json!({
            "capabilities": {"alwaysMatch": {
                "browserName": "chrome",
                "goog:chromeOptions": {"binary": CHROMIUM, "args": args},
            }}
        });
        let answer = command(self.addr, "POST", "/session", Some(capabilities)).await;
        let id = answer["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no session id in {answer}"))
            .to_string();
        Session {
            addr: self.addr,
            id,
            profile,
        }
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One WebDriver command; its `value`, or a panic with WebDriver's error.
async fn command(addr: SocketAddr, method: &str, path: &str, body: Option<Value>) -> Value {
    let text = body.map(|b| b.to_string());
    let (status, answer) = tokio::time::timeout(
        COMMAND_TIMEOUT,
        Box::pin(exchange(addr, method, path, text)),
    )
    .await
    .unwrap_or_else(|_| panic!("WebDriver {method} {path}: no answer within {COMMAND_TIMEOUT:?}"))
    .unwrap_or_else(|e| panic!("WebDriver {method} {path}: {e}"));
    let json: Value = serde_json::from_str(&answer)
        .unwrap_or_else(|e| panic!("{method} {path}: not JSON ({e}): {answer}"));
    if status != 200 {
        panic!(
            "WebDriver {method} {path} answered {status}: {} ({})",
            json["value"]["error"], json["value"]["message"]
        );
    }
    json["value"].clone()
}

/// The longest a command may take (a page load included).
const COMMAND_TIMEOUT: Duration = Duration::from_secs(60);

/// One HTTP/1.1 request and its answer's status and body, read to its `Content-Length`:
/// chromedriver says `Connection: close` but keeps the connection open, so the tests' own
/// helper ([`crate::engine::http`], which reads to the end) would wait for ever.
async fn exchange(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: Option<String>,
) -> std::io::Result<(u16, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await?;
    let body = body.unwrap_or_default();
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\
         Content-Type: application/json; charset=utf-8\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await?;
    let mut raw = Vec::new();
    let mut chunk = vec![0u8; 16384];
    let (head_end, length) = loop {
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Err(std::io::Error::other(
                "the connection closed before an answer",
            ));
        }
        raw.extend_from_slice(&chunk[..n]);
        if let Some(end) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&raw[..end]).to_ascii_lowercase();
            let length = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse::<usize>().ok());
            break (end + 4, length);
        }
    };
    while length.is_some_and(|l| raw.len() - head_end < l) {
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            break;
        }
        raw.extend_from_slice(&chunk[..n]);
    }
    let head = String::from_utf8_lossy(&raw[..head_end]).to_string();
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    Ok((
        status,
        String::from_utf8_lossy(&raw[head_end..]).into_owned(),
    ))
}

/// A browser session (Chromium, headless).
pub struct Session {
    addr: SocketAddr,
    id: String,
    profile: PathBuf,
}

/// An element of the current page.
#[derive(Debug, Clone)]
pub struct Element(String);

impl Session {
    async fn call(&self, method: &str, rest: &str, body: Option<Value>) -> Value {
        let path = format!("/session/{}{rest}", self.id);
        command(self.addr, method, &path, body).await
    }

    /// Loads `url` (waits until it has loaded).
    pub async fn navigate(&self, url: &str) {
        self.call("POST", "/url", Some(json!({ "url": url }))).await;
    }

    /// The current page's URL.
    pub async fn url(&self) -> String {
        let url = self.call("GET", "/url", None).await;
        url.as_str().unwrap_or_default().to_string()
    }

    /// Waits up to 10 s for the browser to be at `url` (a form's answer, a redirect: a click
    /// may return before the page it leads to has started loading).
    pub async fn wait_for_url(&self, url: &str) {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let now = self.url().await;
            if now == url {
                return;
            }
            assert!(Instant::now() < deadline, "still at {now}, not {url}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The elements matching `css`, in document order.
    pub async fn find_all(&self, css: &str) -> Vec<Element> {
        let body = json!({ "using": "css selector", "value": css });
        let found = self.call("POST", "/elements", Some(body)).await;
        found
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|e| e[ELEMENT].as_str().map(|id| Element(id.to_string())))
            .collect()
    }

    /// The first element matching `css`, waiting up to 10 s for it (a page loading after a
    /// click); panics naming the selector and the page if none comes.
    pub async fn find(&self, css: &str) -> Element {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(element) = self.find_all(css).await.into_iter().next() {
                return element;
            }
            if Instant::now() > deadline {
                let title = self.call("GET", "/title", None).await;
                panic!("no element {css:?} on {} ({title})", self.url().await);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The text of the first element matching `css` (waiting for it, as [`Session::find`]).
    pub async fn text_of(&self, css: &str) -> String {
        let element = self.find(css).await;
        self.text(&element).await
    }

    /// An element's rendered text.
    pub async fn text(&self, element: &Element) -> String {
        let text = self
            .call("GET", &format!("/element/{}/text", element.0), None)
            .await;
        text.as_str().unwrap_or_default().to_string()
    }

    /// An element's attribute (`None` when it has none).
    pub async fn attribute(&self, element: &Element, name: &str) -> Option<String> {
        let path = format!("/element/{}/attribute/{name}", element.0);
        self.call("GET", &path, None)
            .await
            .as_str()
            .map(str::to_string)
    }

    /// Clicks an element. A page it leads to may not have loaded when this returns: wait for
    /// what it shows ([`Session::find`], [`Session::wait_for_url`]).
    pub async fn click(&self, element: &Element) {
        let path = format!("/element/{}/click", element.0);
        self.call("POST", &path, Some(json!({}))).await;
    }

    /// Empties a form field, then types `text` into it.
    pub async fn type_into(&self, element: &Element, text: &str) {
        self.call(
            "POST",
            &format!("/element/{}/clear", element.0),
            Some(json!({})),
        )
        .await;
        let body = json!({ "text": text });
        self.call("POST", &format!("/element/{}/value", element.0), Some(body))
            .await;
    }

    /// Saves the whole page as a PNG at `path`: the window is made as tall as the page first.
    pub async fn screenshot(&self, path: &Path) {
        let script = json!({
            "script": "return document.documentElement.scrollHeight;",
            "args": [],
        });
        let height = self.call("POST", "/execute/sync", Some(script)).await;
        // The window's height holds its frame too (about 130 px in headless Chromium).
        let height = height.as_u64().unwrap_or(900).clamp(600, 8000) + 200;
        let rect = json!({ "width": 1360, "height": height });
        self.call("POST", "/window/rect", Some(rect)).await;
        let png = self.call("GET", "/screenshot", None).await;
        let bytes = decode_base64(png.as_str().unwrap_or_default())
            .unwrap_or_else(|| panic!("the screenshot for {} is not base64", path.display()));
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).expect("the screenshots' directory");
        }
        std::fs::write(path, bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let rect = json!({ "width": 1360, "height": 900 });
        self.call("POST", "/window/rect", Some(rect)).await;
    }
}

impl Drop for Session {
    /// Ends the session, so that Chromium exits even when a test fails half-way (the driver
    /// is killed after), and removes its profile. A blocking request: `Drop` cannot wait on
    /// the runtime.
    fn drop(&mut self) {
        use std::io::{Read, Write};
        let request = format!(
            "DELETE /session/{} HTTP/1.1\r\nHost: {}\r\nContent-Length: 0\r\n\r\n",
            self.id, self.addr
        );
        let timeout = Some(Duration::from_secs(10));
        if let Ok(mut stream) =
            std::net::TcpStream::connect_timeout(&self.addr, Duration::from_secs(2))
        {
            let _ = stream.set_read_timeout(timeout);
            if stream.write_all(request.as_bytes()).is_ok() {
                // The answer comes once Chromium has quit.
                let _ = stream.read(&mut [0u8; 1024]);
            }
        }
        let _ = std::fs::remove_dir_all(&self.profile);
    }
}

/// Standard base64 (with padding, as WebDriver's screenshots are) to bytes.
pub fn decode_base64(text: &str) -> Option<Vec<u8>> {
    let value = |c: u8| match c {
        b'A'..=b'Z' => Some(c - b'A'),
        b'a'..=b'z' => Some(c - b'a' + 26),
        b'0'..=b'9' => Some(c - b'0' + 52),
        b'+' => Some(62),
        b'/' => Some(63),
        _ => None,
    };
    let clean: Vec<u8> = text.bytes().filter(|c| !c.is_ascii_whitespace()).collect();
    let data = clean
        .strip_suffix(b"==")
        .or_else(|| clean.strip_suffix(b"="))
        .unwrap_or(&clean);
    let mut out = Vec::with_capacity(data.len() * 3 / 4);
    let (mut buffer, mut bits) = (0u32, 0);
    for &c in data {
        buffer = (buffer << 6) | u32::from(value(c)?);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((buffer >> bits) as u8);
            buffer &= (1 << bits) - 1;
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_decodes_with_and_without_padding() {
        assert_eq!(decode_base64("aGVsbG8=").as_deref(), Some(&b"hello"[..]));
        assert_eq!(decode_base64("aGk=").as_deref(), Some(&b"hi"[..]));
        assert_eq!(decode_base64("aGV5").as_deref(), Some(&b"hey"[..]));
        assert_eq!(
            decode_base64("iVBO\nRw0K").as_deref(),
            Some(&b"\x89PNG\r\n"[..])
        );
        assert_eq!(decode_base64("a*b="), None);
    }
}
