//! Who may use the admin listener, and from where: the rules that make it safe by default
//! (issue 30), each a layer around the API's and the dashboard's routes, in this order:
//!
//! 1. [`hosts`]: the request's `Host` is a name of the listener (`localhost`, an IP address,
//!    `[admin] allowed_hosts`), against DNS rebinding: 403 otherwise.
//! 2. [`cross_site`]: a request that may change anything comes from the listener's own origin
//!    (`Origin`, `Sec-Fetch-Site`), or from a client that is no browser; the API's are JSON:
//!    403 or 415 otherwise. With no token as with one: a page cannot make a browser run tasks.
//! 3. [`token`]: with `[admin] token`, the token (`Authorization: Bearer`, any case) or a
//!    dashboard session ([`sessions`]: a random id in the cookie, never the token); wrong
//!    tokens are logged and slowed.
//!
//! And at start (`settings::validate`): a listener beyond loopback needs a token, unless
//! `[admin] allow_unauthenticated_remote = true` (then a warning at every start).

mod cross_site;
mod hosts;
pub(crate) mod sessions;
#[cfg(test)]
mod tests;
mod token;

pub(crate) use cross_site::refuse_cross_site;
pub(crate) use hosts::{check_host, AllowedHosts};
pub(crate) use sessions::Sessions;
#[cfg(test)]
pub(crate) use token::FAILED_ATTEMPT_DELAY;
pub(crate) use token::{failed_attempt, require_token, token_matches, Attempt, Credentials};
