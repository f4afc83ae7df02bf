//! The dashboard's sessions: what its cookie holds in place of the token. A browser sends a
//! host's cookies to every port of that host, so whatever the cookie holds reaches every
//! service there; a session id is worth only the session (12 hours at most, ended by **Log
//! out** or the node's restart, since sessions live in this process's memory), never the
//! token itself.
//!
//! An id is 32 bytes from the operating system's generator (`getrandom`), in hex: no one
//! guesses one. Ids are looked up in a hash map keyed by a random hasher, so how long a lookup
//! takes tells nothing useful about a guess.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

/// How long a session lasts after its login.
pub(crate) const SESSION_LIFETIME: Duration = Duration::from_secs(12 * 3600);
/// Most sessions kept: beyond, a login ends the one closest to its end.
const MOST_SESSIONS: usize = 1024;
/// Bytes of randomness in an id.
const ID_BYTES: usize = 32;

/// A session could not be opened.
#[derive(Debug, thiserror::Error)]
#[error("no session id: the operating system's random generator failed")]
pub(crate) struct SessionError(#[source] getrandom::Error);

/// The sessions open on this listener: id, and when each ends.
#[derive(Debug, Default)]
pub(crate) struct Sessions {
    open: Mutex<HashMap<String, Instant>>,
}

impl Sessions {
    /// A new session's id, for the cookie.
    pub(crate) fn open(&self) -> Result<String, SessionError> {
        let mut bytes = [0u8; ID_BYTES];
        getrandom::fill(&mut bytes).map_err(SessionError)?;
        let id: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        let now = Instant::now();
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        open.retain(|_, ends| *ends > now);
        if open.len() >= MOST_SESSIONS {
            let soonest = (open.iter())
                .min_by_key(|(_, ends)| **ends)
                .map(|(id, _)| id.clone());
            if let Some(soonest) = soonest {
                open.remove(&soonest);
            }
        }
        open.insert(id.clone(), now + SESSION_LIFETIME);
        Ok(id)
    }

    /// Whether `id` is a session open now.
    pub(crate) fn is_open(&self, id: &str) -> bool {
        let open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        open.get(id).is_some_and(|ends| *ends > Instant::now())
    }

    /// Ends the session `id` (a logout).
    pub(crate) fn close(&self, id: &str) {
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        open.remove(id);
    }
}

/// Whether `text` could be a session id (what a cookie must hold to be looked up).
pub(crate) fn is_session_id(text: &str) -> bool {
    text.len() == 2 * ID_BYTES && text.bytes().all(|b| b.is_ascii_hexdigit())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_session_is_random_lasts_its_lifetime_and_ends_at_logout() {
        let sessions = Sessions::default();
        let (a, b) = (
            sessions.open().expect("an id"),
            sessions.open().expect("an id"),
        );
        assert_ne!(a, b);
        assert!(is_session_id(&a) && is_session_id(&b), "{a} {b}");
        assert!(sessions.is_open(&a) && sessions.is_open(&b));
        assert!(!sessions.is_open(&"0".repeat(64)));
        sessions.close(&a);
        assert!(!sessions.is_open(&a) && sessions.is_open(&b));
        tokio::time::advance(SESSION_LIFETIME).await;
        assert!(!sessions.is_open(&b), "over at its lifetime");
        assert!(!is_session_id("zz"));
        assert!(!is_session_id(&"g".repeat(64)));
    }

    #[tokio::test(start_paused = true)]
    async fn the_oldest_session_makes_room() {
        let sessions = Sessions::default();
        let first = sessions.open().expect("an id");
        tokio::time::advance(Duration::from_secs(1)).await;
        for _ in 1..MOST_SESSIONS {
            sessions.open().expect("an id");
        }
        assert!(sessions.is_open(&first));
        let last = sessions.open().expect("an id");
        assert!(!sessions.is_open(&first) && sessions.is_open(&last));
    }
}
