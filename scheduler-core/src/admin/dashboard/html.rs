//! The dashboard's HTML: escaping, links, and the frame every page shares (head, navigation,
//! the embedded style sheet, the response headers).
//!
//! Every value a page shows passes through [`escape`] (task keys, data and errors are the
//! producers' and handlers' text), and every link's query through [`query`].

use std::convert::Infallible;
use std::fmt::Write;
use std::sync::Arc;

use axum::extract::{FromRequestParts, NestedPath};
use axum::http::request::Parts;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{Html, IntoResponse, Response};
use chrono::{DateTime, Utc};

use crate::admin::state::AdminState;

/// The style sheet, in the binary: the dashboard loads nothing from elsewhere.
const STYLE: &str = include_str!("style.css");

/// No script at all, styles only from the page itself, forms only to this node, no framing
/// (so a redrive button cannot be clicked through another site's frame).
const POLICY: &str = "default-src 'none'; style-src 'unsafe-inline'; img-src 'self' data:; \
                      form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/// `text` made safe as HTML text and as a quoted attribute value.
pub(crate) fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// `text` percent-encoded for a URL's query (everything but RFC 3986's unreserved characters).
pub(crate) fn url_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(byte as char)
            }
            other => {
                let _ = write!(out, "%{other:02X}");
            }
        }
    }
    out
}

/// A query string of `pairs`, each encoded; empty values left out.
pub(crate) fn query(pairs: &[(&str, &str)]) -> String {
    pairs
        .iter()
        .filter(|(_, v)| !v.is_empty())
        .map(|(k, v)| format!("{}={}", url_encode(k), url_encode(v)))
        .collect::<Vec<_>>()
        .join("&")
}

/// A posted form (`application/x-www-form-urlencoded`) read into `T`, by the same decoder as
/// the API's query strings (the form's encoding is a query string's).
pub(crate) fn form<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, String> {
    let text = std::str::from_utf8(body).map_err(|e| format!("the form is not UTF-8: {e}"))?;
    let uri: axum::http::Uri = format!("/?{text}")
        .parse()
        .map_err(|e| format!("the form is not URL-encoded: {e}"))?;
    axum::extract::Query::<T>::try_from_uri(&uri)
        .map(|q| q.0)
        .map_err(|e| e.body_text())
}

/// How far `at` is from `now`, in its largest unit: `in 5 min`, `3 h ago`, `now`.
pub(crate) fn relative(at: DateTime<Utc>, now: DateTime<Utc>) -> String {
    let seconds = (at - now).num_seconds();
    let n = seconds.unsigned_abs();
    let amount = match n {
        0 => return "now".to_string(),
        1..=59 => format!("{n} s"),
        60..=3_599 => format!("{} min", n / 60),
        3_600..=172_799 => format!("{} h", n / 3_600),
        _ => format!("{} d", n / 86_400),
    };
    match seconds > 0 {
        true => format!("in {amount}"),
        false => format!("{amount} ago"),
    }
}

/// An RFC 3339 time as the API gives it, with how far it is from `now` beside it (the text as
/// given, escaped, if it is not a time).
pub(crate) fn when(text: &str, now: DateTime<Utc>) -> String {
    match DateTime::parse_from_rfc3339(text) {
        Ok(at) => format!(
            "<time datetime=\"{t}\">{t}</time> <span class=\"ago\">({})</span>",
            relative(at.with_timezone(&Utc), now),
            t = escape(text)
        ),
        Err(_) => escape(text),
    }
}

/// [`when`], or a grey dash when there is no time.
pub(crate) fn when_or_dash(text: Option<&str>, now: DateTime<Utc>) -> String {
    text.map_or_else(|| or_dash(None), |t| when(t, now))
}

/// `value`, or a grey dash when there is none.
pub(crate) fn or_dash(value: Option<&str>) -> String {
    value.map_or_else(|| "<span class=\"none\">—</span>".to_string(), escape)
}

/// The dashboard's sections, for the navigation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Section {
    Overview,
    Pending,
    DeadLetters,
    Suspensions,
    GroupsJobs,
    Schedules,
    Limits,
    Workers,
    Task,
    Login,
}

impl Section {
    const NAVIGATION: [(Section, &'static str, &'static str); 9] = [
        (Section::Overview, "", "Overview"),
        (Section::Pending, "/pending", "Pending"),
        (Section::DeadLetters, "/dead-letters", "Dead letters"),
        (Section::Suspensions, "/suspensions", "Suspensions"),
        (Section::GroupsJobs, "/groups-jobs", "Groups & jobs"),
        (Section::Schedules, "/schedules", "Schedules"),
        (Section::Limits, "/limits", "Limits"),
        (Section::Workers, "/workers", "Workers"),
        (Section::Task, "/task", "Task lookup"),
    ];
}

/// Where a page is and whose it is: what every page's frame shows. Extracted from the
/// request: a queue's dashboard is nested under `/queues/<name>`, so its links are too.
#[derive(Debug, Clone)]
pub(crate) struct Page {
    /// The path the queue's routes are nested at (`""` at the root, `/queues/<name>`).
    base: String,
    node_id: String,
    queue: String,
    /// Every queue the node serves, with the path of its API.
    queues: Vec<(String, String)>,
    /// Whether the node has a token (so a logout makes sense).
    token_required: bool,
}

impl FromRequestParts<Arc<AdminState>> for Page {
    type Rejection = Infallible;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &Arc<AdminState>,
    ) -> Result<Self, Self::Rejection> {
        // Absent at the root, where nothing is nested.
        let base = NestedPath::from_request_parts(parts, state)
            .await
            .map(|p| p.as_str().trim_end_matches('/').to_string())
            .unwrap_or_default();
        Ok(Page::new(base, state))
    }
}

impl Page {
    pub(crate) fn new(base: String, state: &AdminState) -> Page {
        Page {
            base,
            node_id: state.node_id.clone(),
            queue: state.queue.clone(),
            queues: (state.queues.iter())
                .map(|q| (q.name.clone(), q.path.clone()))
                .collect(),
            token_required: state.token.is_some(),
        }
    }

    /// The path of the dashboard's page `rest` (`""` for the overview, `/task`, ...).
    pub(crate) fn url(&self, rest: &str) -> String {
        format!("{}/dashboard{rest}", self.base)
    }

    /// The lookup page of a task.
    pub(crate) fn task_url(&self, ordering_id: &str, time: &str, uniqueness_key: &str) -> String {
        let q = query(&[
            ("orderingId", ordering_id),
            ("scheduledTime", time),
            ("uniquenessKey", uniqueness_key),
        ]);
        self.url(&format!("/task?{q}"))
    }

    /// A whole page: `body` (HTML) in the frame, answered with `status`.
    pub(crate) fn render(
        &self,
        status: StatusCode,
        section: Section,
        title: &str,
        head: &str,
        body: &str,
    ) -> Response {
        let mut html = String::with_capacity(body.len() + STYLE.len() + 2048);
        let _ = write!(
            html,
            "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
             <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">{head}\
             <title>{} · scheduler</title><style>{STYLE}</style></head>\n<body>\n<header>\
             <a class=\"brand\" href=\"{}\">scheduler</a>",
            escape(title),
            escape(&self.url("")),
        );
        // The login page is a stranger's: it names neither the node nor its queues.
        if section != Section::Login {
            let _ = write!(
                html,
                "<span class=\"who\">node <code id=\"node-id\">{}</code> · queue <code \
                 id=\"queue\">{}</code></span>",
                escape(&self.node_id),
                escape(&self.queue),
            );
            html.push_str("<nav>");
            for (s, rest, label) in Section::NAVIGATION {
                let class = if s == section {
                    " class=\"active\""
                } else {
                    ""
                };
                let _ = write!(
                    html,
                    "<a{class} href=\"{}\">{}</a>",
                    escape(&self.url(rest)),
                    escape(label)
                );
            }
            html.push_str("</nav>");
            if self.token_required {
                let _ = write!(
                    html,
                    "<form class=\"logout\" method=\"post\" action=\"{}\">\
                     <button type=\"submit\">Log out</button></form>",
                    escape(&self.url("/logout"))
                );
            }
        }
        html.push_str("</header>\n");
        if self.queues.len() > 1 && section != Section::Login {
            html.push_str("<nav class=\"queues\">Queues:");
            for (name, path) in &self.queues {
                let class = if *name == self.queue {
                    " class=\"active\""
                } else {
                    ""
                };
                let _ = write!(
                    html,
                    " <a{class} href=\"{}/dashboard\">{}</a>",
                    escape(path),
                    escape(name)
                );
            }
            html.push_str("</nav>\n");
        }
        let _ = write!(html, "<main>\n<h1>{}</h1>\n{body}</main>\n", escape(title));
        html.push_str(
            "<footer>Rendered by this node from its admin API's answers and its /metrics; \
             reload for fresh figures.</footer>\n</body></html>\n",
        );
        let mut response = (status, Html(html)).into_response();
        let headers = response.headers_mut();
        headers.insert(
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static(POLICY),
        );
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
        headers.insert(
            header::X_CONTENT_TYPE_OPTIONS,
            HeaderValue::from_static("nosniff"),
        );
        headers.insert(
            header::REFERRER_POLICY,
            HeaderValue::from_static("same-origin"),
        );
        response
    }

    /// A posted form (see [`form`]) read into `T`, or, when it cannot be, this page's 400
    /// saying why.
    pub(crate) fn form<T: serde::de::DeserializeOwned>(
        &self,
        body: &[u8],
        section: Section,
        title: &str,
    ) -> Result<T, Box<Response>> {
        form(body).map_err(|e| Box::new(self.error(StatusCode::BAD_REQUEST, section, title, &e)))
    }

    /// A page with only an error message (the API's), answered with its status.
    pub(crate) fn error(
        &self,
        status: StatusCode,
        section: Section,
        title: &str,
        message: &str,
    ) -> Response {
        let body = format!(
            "<p class=\"error\" id=\"error\">{} ({})</p>\n",
            escape(message),
            status.as_u16()
        );
        self.render(status, section, title, "", &body)
    }
}

#[cfg(test)]
impl Page {
    /// The frame of the root queue's dashboard of node `node-1`, with no token.
    pub(crate) fn plain() -> Page {
        Page {
            base: String::new(),
            node_id: "node-1".into(),
            queue: "default".into(),
            queues: Vec::new(),
            token_required: false,
        }
    }
}

/// A notice above a page's content (what a form did).
pub(crate) fn notice(html: &str) -> String {
    format!("<p class=\"notice\" id=\"notice\">{html}</p>\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaping_leaves_no_markup_and_no_way_out_of_an_attribute() {
        assert_eq!(
            escape(r#"<script>alert("x's")</script> & more"#),
            "&lt;script&gt;alert(&quot;x&#39;s&quot;)&lt;/script&gt; &amp; more"
        );
        assert_eq!(escape("plain text, é ü 日本"), "plain text, é ü 日本");
        assert_eq!(escape("&amp;"), "&amp;amp;", "escaped again, not trusted");
        assert_eq!(escape(""), "");
    }

    #[test]
    fn a_posted_form_is_decoded_like_a_query() {
        #[derive(serde::Deserialize, Debug, PartialEq)]
        #[serde(rename_all = "camelCase")]
        struct Key {
            ordering_id: String,
            task_type: Option<String>,
        }
        let key: Result<Key, _> = form(b"orderingId=a+b%2Fc%C3%A9&other=1");
        assert_eq!(
            key,
            Ok(Key {
                ordering_id: "a b/cé".into(),
                task_type: None
            })
        );
        assert!(form::<Key>(b"taskType=x").is_err(), "orderingId is missing");
    }

    #[test]
    fn times_show_how_far_they_are_from_now() {
        let now = DateTime::parse_from_rfc3339("2026-03-01T12:00:00Z")
            .map(|t| t.with_timezone(&Utc))
            .unwrap_or_default();
        let at = |secs: i64| now + chrono::TimeDelta::seconds(secs);
        assert_eq!(relative(at(0), now), "now");
        assert_eq!(relative(at(42), now), "in 42 s");
        assert_eq!(relative(at(-300), now), "5 min ago");
        assert_eq!(relative(at(7_200 + 59), now), "in 2 h");
        assert_eq!(relative(at(-3 * 86_400), now), "3 d ago");
        assert_eq!(
            when("2026-03-01T11:59:00.000Z", now),
            "<time datetime=\"2026-03-01T11:59:00.000Z\">2026-03-01T11:59:00.000Z</time> \
             <span class=\"ago\">(1 min ago)</span>"
        );
        assert_eq!(when("<not a time>", now), "&lt;not a time&gt;");
    }

    #[test]
    fn queries_encode_every_reserved_character() {
        assert_eq!(
            url_encode("a b/c?d=e&f#g%h+é"),
            "a%20b%2Fc%3Fd%3De%26f%23g%25h%2B%C3%A9"
        );
        assert_eq!(url_encode("Az09-_.~"), "Az09-_.~");
        assert_eq!(
            query(&[
                ("orderingId", "o/1"),
                ("empty", ""),
                ("t", "2026-01-01T00:00:00.000Z")
            ]),
            "orderingId=o%2F1&t=2026-01-01T00%3A00%3A00.000Z"
        );
    }
}
