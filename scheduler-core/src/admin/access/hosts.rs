//! The `Host` check, against DNS rebinding: a page at `http://evil.example:9464` whose DNS
//! answer turns to `127.0.0.1` is, for the browser, still of `evil.example`, so it may read
//! what it fetches from there: the whole API. Its requests name `evil.example` in `Host`,
//! which is not a name of this listener, so they are refused.
//!
//! Accepted: `localhost`, any IP address (a browser puts an address in `Host` only when the
//! page's own URL names that address, which no DNS answer changes), and the names of
//! `[admin] allowed_hosts` (those clients and proxies reach the listener by), compared
//! without regard to case. The port is not compared: rebinding changes what a name resolves
//! to, not the name, and a tunnel or a proxy (`ssh -L 8000:127.0.0.1:9464`) changes the port.

use std::net::{IpAddr, Ipv6Addr};
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::admin::state::ApiError;

/// The names a request's `Host` may give.
#[derive(Debug, Clone, Default)]
pub(crate) struct AllowedHosts {
    /// `[admin] allowed_hosts`, lower-case.
    configured: Vec<String>,
}

impl AllowedHosts {
    /// `localhost`, IP addresses and `configured` (`[admin] allowed_hosts`).
    pub(crate) fn new(configured: &[String]) -> Self {
        AllowedHosts {
            configured: configured.iter().map(|n| n.to_ascii_lowercase()).collect(),
        }
    }

    /// Whether `host`, a `Host` header's value (a name or an address, and maybe a port),
    /// names this listener.
    pub(crate) fn allows(&self, host: &str) -> bool {
        let Some(name) = name_of(host) else {
            return false;
        };
        let name = name.strip_suffix('.').unwrap_or(name).to_ascii_lowercase();
        name == "localhost" || name.parse::<IpAddr>().is_ok() || self.configured.contains(&name)
    }
}

/// The name or address of a `Host` value without its port: `[::1]:9464` gives `::1`; `None`
/// for a malformed value (an IPv6 address without brackets, a port that is no number).
fn name_of(host: &str) -> Option<&str> {
    let is_port = |port: Option<&str>| {
        port.is_none_or(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
    };
    match host.strip_prefix('[') {
        Some(bracketed) => {
            let (address, rest) = bracketed.split_once(']')?;
            address.parse::<Ipv6Addr>().ok()?;
            let port = rest.strip_prefix(':');
            (rest.is_empty() || port.is_some() && is_port(port)).then_some(address)
        }
        None => {
            let (name, port) = match host.split_once(':') {
                Some((name, port)) => (name, Some(port)),
                None => (host, None),
            };
            (!name.is_empty() && is_port(port)).then_some(name)
        }
    }
}

/// Refuses a request whose `Host` is not one of the listener's names (403), or that has none
/// (400): before anything else runs, so such a page reads nothing, not even whether a token
/// is needed.
pub(crate) async fn check_host(
    State(allowed): State<Arc<AllowedHosts>>,
    request: Request,
    next: Next,
) -> Response {
    let host = (request.headers().get(header::HOST))
        .and_then(|v| v.to_str().ok())
        .or_else(|| request.uri().authority().map(|a| a.as_str()));
    match host {
        Some(host) if allowed.allows(host) => next.run(request).await,
        Some(host) => {
            tracing::debug!(host, "admin listener: a request for another host refused");
            ApiError {
                status: StatusCode::FORBIDDEN,
                message: format!(
                    "Host {host:?} is not a name of this listener (it answers to localhost, IP \
                     addresses and the names of [admin] allowed_hosts)"
                ),
            }
            .into_response()
        }
        None => ApiError::bad_request("the request has no Host header").into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_host_is_read_without_its_port() {
        assert_eq!(name_of("localhost:9464"), Some("localhost"));
        assert_eq!(name_of("localhost"), Some("localhost"));
        assert_eq!(name_of("[::1]:9464"), Some("::1"));
        assert_eq!(name_of("[::1]"), Some("::1"));
        assert_eq!(name_of("::1"), None, "IPv6 goes in brackets");
        assert_eq!(name_of("[evil.example]:1"), None);
        assert_eq!(name_of("[::1]x"), None);
        assert_eq!(name_of("[::1]:"), None);
        assert_eq!(name_of("a:b"), None);
        assert_eq!(name_of("a:"), None);
        assert_eq!(name_of(":9464"), None);
        assert_eq!(name_of(""), None);
    }

    #[test]
    fn localhost_addresses_and_configured_names_are_allowed() {
        let allowed = AllowedHosts::new(&["Admin.Example".to_string()]);
        for host in [
            "localhost:9464",
            "localhost.",
            "127.0.0.1:1",
            "0.0.0.0:9464",
            "[fe80::1]:9464",
            "admin.example:443",
            "ADMIN.EXAMPLE",
        ] {
            assert!(allowed.allows(host), "{host}");
        }
        for host in [
            "evil.example",
            "admin.example.evil.example",
            "localhost.evil.example",
            "127.0.0.1.nip.io",
            "2130706433",
            "127.1",
        ] {
            assert!(!allowed.allows(host), "{host}");
        }
    }
}
