//! The admin HTTP API of one node, called with the request and answer types the node itself
//! uses (`scheduler_core::admin_api`).

use std::time::Duration;

use scheduler_core::admin_api::{
    CancelResponse, DeadLetterQuery, DeadLetterSelection, DeadLettersResponse, ErrorResponse,
    JobView, JobsResponse, KeyLimitQuery, KeyLimitRequest, KeyLimitView, LimitsResponse, ListQuery,
    ListResponse, PartitionsResponse, PreviewQuery, PreviewResponse, PurgeResponse,
    RedriveResponse, ScheduleDetail, ScheduleView, SchedulesResponse, StatusResponse,
    SuspendRequest, SuspensionQuery, SuspensionView, SuspensionsResponse, TaskKeyBody, TaskQuery,
    TaskResponse,
};
use scheduler_core::recurring::ScheduleSpec;
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::args::AdminArgs;
use crate::output::{Failure, EXIT_FAILURE, EXIT_NOT_FOUND, EXIT_USAGE};

/// Why a call of the admin API failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum AdminError {
    /// No answer: the node is down, or the address is wrong.
    #[error("admin API at {admin} unreachable: {source}")]
    Unreachable {
        /// The admin API's address.
        admin: String,
        /// What the HTTP client saw.
        #[source]
        source: ureq::Error,
    },
    /// The answer broke off.
    #[error("reading the admin API's answer: {0}")]
    Read(#[source] ureq::Error),
    /// 404: no such task, dead letter, job or schedule (or endpoint); the API's error message.
    #[error("{0}")]
    NotFound(String),
    /// 401 or 403: the node wants a (different) token.
    #[error(
        "{status}: {message} (give the node's admin token with --token or SCHEDULER_ADMIN_TOKEN)"
    )]
    Unauthorized {
        /// The HTTP status.
        status: u16,
        /// The API's error message.
        message: String,
    },
    /// An answer that is not the admin API's: the address is something else's.
    #[error(
        "{admin} answered {status} without the admin API's error body: is it a scheduler node's admin address (--admin, SCHEDULER_ADMIN_URL)? Its GET /api/v1/status answers a node's status"
    )]
    NotANode {
        /// The address asked.
        admin: String,
        /// The HTTP status it answered.
        status: u16,
    },
    /// Another 4xx: the request is at fault.
    #[error("{status}: {message}")]
    Refused {
        /// The HTTP status.
        status: u16,
        /// The API's error message.
        message: String,
    },
    /// Any other status: the node or a service behind it failed.
    #[error("{status}: {message}")]
    Failed {
        /// The HTTP status.
        status: u16,
        /// The API's error message.
        message: String,
    },
    /// A success whose body is not the answer this command knows (a node of another version).
    #[error("the admin API's answer is not what this command expects: {0}")]
    Unexpected(#[source] serde_json::Error),
    /// The query could not be encoded.
    #[error("cannot encode the query: {0}")]
    Query(#[source] serde_urlencoded::ser::Error),
}

impl From<AdminError> for Failure {
    fn from(error: AdminError) -> Self {
        let code = match &error {
            AdminError::NotFound(_) => EXIT_NOT_FOUND,
            AdminError::Refused { .. } => EXIT_USAGE,
            AdminError::Unreachable { .. }
            | AdminError::Unauthorized { .. }
            | AdminError::NotANode { .. }
            | AdminError::Read(_)
            | AdminError::Failed { .. }
            | AdminError::Unexpected(_)
            | AdminError::Query(_) => EXIT_FAILURE,
        };
        Failure {
            code,
            message: error.to_string(),
        }
    }
}

/// One node's admin API, with the request and answer types the node itself uses.
pub(crate) struct AdminClient<'a> {
    args: &'a AdminArgs,
    agent: ureq::Agent,
}

impl<'a> AdminClient<'a> {
    pub(crate) fn new(args: &'a AdminArgs) -> Self {
        let agent = ureq::Agent::config_builder()
            .timeout_global(Some(Duration::from_secs(30)))
            // Error statuses carry the API's message, read by `answer`.
            .http_status_as_error(false)
            .build()
            .into();
        AdminClient { args, agent }
    }

    pub(crate) fn status(&self) -> Result<StatusResponse, AdminError> {
        self.get("/api/v1/status", &())
    }

    pub(crate) fn partitions(&self) -> Result<PartitionsResponse, AdminError> {
        self.get("/api/v1/partitions", &())
    }

    pub(crate) fn task(&self, query: &TaskQuery) -> Result<TaskResponse, AdminError> {
        self.get("/api/v1/task", query)
    }

    pub(crate) fn tasks(&self, query: &ListQuery) -> Result<ListResponse, AdminError> {
        self.get("/api/v1/tasks", query)
    }

    pub(crate) fn cancel(&self, key: &TaskKeyBody) -> Result<CancelResponse, AdminError> {
        self.post("/api/v1/task/cancel", key)
    }

    pub(crate) fn reschedule(&self, to: &TaskKeyBody) -> Result<CancelResponse, AdminError> {
        self.post("/api/v1/task/reschedule", to)
    }

    pub(crate) fn dead_letters(
        &self,
        query: &DeadLetterQuery,
    ) -> Result<DeadLettersResponse, AdminError> {
        self.get("/api/v1/dead-letters", query)
    }

    pub(crate) fn redrive(
        &self,
        selection: &DeadLetterSelection,
    ) -> Result<RedriveResponse, AdminError> {
        self.post("/api/v1/dead-letters/redrive", selection)
    }

    pub(crate) fn purge(
        &self,
        selection: &DeadLetterSelection,
    ) -> Result<PurgeResponse, AdminError> {
        self.post("/api/v1/dead-letters/purge", selection)
    }

    pub(crate) fn suspensions(&self) -> Result<SuspensionsResponse, AdminError> {
        self.get("/api/v1/suspensions", &())
    }

    pub(crate) fn suspend(&self, request: &SuspendRequest) -> Result<SuspensionView, AdminError> {
        self.post("/api/v1/suspensions", request)
    }

    pub(crate) fn resume(&self, target: &SuspensionQuery) -> Result<(), AdminError> {
        self.delete("/api/v1/suspensions", target)
    }

    pub(crate) fn limits(&self) -> Result<LimitsResponse, AdminError> {
        self.get("/api/v1/limits", &())
    }

    pub(crate) fn set_limit(&self, request: &KeyLimitRequest) -> Result<KeyLimitView, AdminError> {
        let mut put = self.agent.put(self.url("/api/v1/limits"));
        if let Some(auth) = self.authorization() {
            put = put.header("Authorization", auth);
        }
        self.answer(put.send_json(request))
    }

    pub(crate) fn remove_limit(&self, key: &KeyLimitQuery) -> Result<(), AdminError> {
        self.delete("/api/v1/limits", key)
    }

    pub(crate) fn jobs(&self) -> Result<JobsResponse, AdminError> {
        self.get("/api/v1/jobs", &())
    }

    /// The job `id`, which the caller checked is a job id (it goes into the path as it is).
    pub(crate) fn job(&self, id: &str) -> Result<JobView, AdminError> {
        self.get(&format!("/api/v1/jobs/{id}"), &())
    }

    pub(crate) fn schedules(&self) -> Result<SchedulesResponse, AdminError> {
        self.get("/api/v1/schedules", &())
    }

    /// Creates or redefines the schedule `spec` defines.
    pub(crate) fn create_schedule(&self, spec: &ScheduleSpec) -> Result<ScheduleView, AdminError> {
        self.post("/api/v1/schedules", spec)
    }

    /// The schedule `id`, which the caller checked is a schedule id (it goes into the path as
    /// it is), with `query.count` next fire times.
    pub(crate) fn schedule(
        &self,
        id: &str,
        query: &PreviewQuery,
    ) -> Result<ScheduleDetail, AdminError> {
        self.get(&format!("/api/v1/schedules/{id}"), query)
    }

    /// Pauses the schedule `id` (a checked schedule id, as for [`AdminClient::schedule`]).
    pub(crate) fn pause_schedule(&self, id: &str) -> Result<ScheduleView, AdminError> {
        self.post_empty(&format!("/api/v1/schedules/{id}/pause"))
    }

    /// Resumes the schedule `id` (a checked schedule id).
    pub(crate) fn resume_schedule(&self, id: &str) -> Result<ScheduleView, AdminError> {
        self.post_empty(&format!("/api/v1/schedules/{id}/resume"))
    }

    /// Deletes the schedule `id` (a checked schedule id).
    pub(crate) fn delete_schedule(&self, id: &str) -> Result<(), AdminError> {
        self.delete(&format!("/api/v1/schedules/{id}"), &())
    }

    /// What `spec` would do: its cadence in words and its next `query.count` fire times.
    pub(crate) fn preview_schedule(
        &self,
        spec: &ScheduleSpec,
        query: &PreviewQuery,
    ) -> Result<PreviewResponse, AdminError> {
        let url = self.url_with_query("/api/v1/schedules/preview", query)?;
        self.post_to(url, spec)
    }

    fn post<T: DeserializeOwned>(
        &self,
        path: &str,
        body: &impl Serialize,
    ) -> Result<T, AdminError> {
        self.post_to(self.url(path), body)
    }

    /// A `POST` of `body` as JSON to `url` (a path of the API, with its query if any).
    fn post_to<T: DeserializeOwned>(
        &self,
        url: String,
        body: &impl Serialize,
    ) -> Result<T, AdminError> {
        let mut request = self.agent.post(url);
        if let Some(auth) = self.authorization() {
            request = request.header("Authorization", auth);
        }
        self.answer(request.send_json(body))
    }

    /// A `POST` without a body (an action on the resource its path names).
    fn post_empty<T: DeserializeOwned>(&self, path: &str) -> Result<T, AdminError> {
        let mut request = self.agent.post(self.url(path));
        if let Some(auth) = self.authorization() {
            request = request.header("Authorization", auth);
        }
        self.answer(request.send_empty())
    }

    fn get<T: DeserializeOwned>(
        &self,
        path: &str,
        query: &impl Serialize,
    ) -> Result<T, AdminError> {
        let mut request = self.agent.get(self.url_with_query(path, query)?);
        if let Some(auth) = self.authorization() {
            request = request.header("Authorization", auth);
        }
        self.answer(request.call())
    }

    /// A `DELETE`, whose success has no body (204).
    fn delete(&self, path: &str, query: &impl Serialize) -> Result<(), AdminError> {
        let mut request = self.agent.delete(self.url_with_query(path, query)?);
        if let Some(auth) = self.authorization() {
            request = request.header("Authorization", auth);
        }
        self.answer_text(request.call()).map(|_| ())
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.args.admin.trim_end_matches('/'))
    }

    fn url_with_query(&self, path: &str, query: &impl Serialize) -> Result<String, AdminError> {
        let query = serde_urlencoded::to_string(query).map_err(AdminError::Query)?;
        let url = self.url(path);
        Ok(if query.is_empty() {
            url
        } else {
            format!("{url}?{query}")
        })
    }

    fn authorization(&self) -> Option<String> {
        self.args.token.as_ref().map(|t| format!("Bearer {t}"))
    }

    /// The answer's body as `T`, or the API's error message with what its status means.
    fn answer<T: DeserializeOwned>(
        &self,
        response: Result<ureq::http::Response<ureq::Body>, ureq::Error>,
    ) -> Result<T, AdminError> {
        let text = self.answer_text(response)?;
        serde_json::from_str(&text).map_err(|e| {
            match serde_json::from_str::<serde_json::Value>(&text) {
                // Not JSON at all: not the admin API (a web page, say).
                Err(_) => AdminError::NotANode {
                    admin: self.args.admin.clone(),
                    status: 200,
                },
                Ok(_) => AdminError::Unexpected(e),
            }
        })
    }

    /// The body of a successful answer, or the API's error message with what its status means.
    fn answer_text(
        &self,
        response: Result<ureq::http::Response<ureq::Body>, ureq::Error>,
    ) -> Result<String, AdminError> {
        let mut response = response.map_err(|source| AdminError::Unreachable {
            admin: self.args.admin.clone(),
            source,
        })?;
        let status = response.status().as_u16();
        let text = response
            .body_mut()
            .read_to_string()
            .map_err(AdminError::Read)?;
        if (200..300).contains(&status) {
            return Ok(text);
        }
        // An error answer that is not the API's JSON (a proxy's page, another server's) says
        // so: it is not a node's answer (but for a gateway's 5xx in front of one).
        let Ok(message) = serde_json::from_str::<ErrorResponse>(&text).map(|e| e.error) else {
            return Err(match status {
                500..=599 => AdminError::Failed {
                    status,
                    message: "(no admin API error body: a proxy's answer?)".into(),
                },
                _ => AdminError::NotANode {
                    admin: self.args.admin.clone(),
                    status,
                },
            });
        };
        Err(match status {
            401 | 403 => AdminError::Unauthorized { status, message },
            404 => AdminError::NotFound(message),
            400..=499 => AdminError::Refused { status, message },
            _ => AdminError::Failed { status, message },
        })
    }
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};

    use super::*;

    /// An HTTP server on a free local port that answers every request with `status` and `body`.
    fn answering(status: u16, content_type: &str, body: &str) -> String {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let address = listener.local_addr().expect("address");
        let answer = format!(
            "HTTP/1.1 {status} X\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        );
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let mut stream = stream;
                let mut request = [0u8; 4096];
                let _ = stream.read(&mut request);
                let _ = stream.write_all(answer.as_bytes());
            }
        });
        format!("http://{address}")
    }

    fn failure_of(admin: String) -> Failure {
        let args = AdminArgs { admin, token: None };
        match AdminClient::new(&args).status() {
            Ok(_) => panic!("an answer"),
            Err(e) => Failure::from(e),
        }
    }

    #[test]
    fn an_address_that_is_not_a_node_says_so_not_an_empty_not_found() {
        let admin = answering(404, "text/html", "<html>Not Found</html>");
        let failure = failure_of(admin.clone());
        assert_eq!(failure.code, EXIT_FAILURE);
        assert!(
            failure.message.starts_with(&format!(
                "{admin} answered 404 without the admin API's error body"
            )),
            "{}",
            failure.message
        );
        let page = answering(200, "text/html", "<html>hello</html>");
        let failure = failure_of(page);
        assert_eq!(failure.code, EXIT_FAILURE);
        assert!(
            failure
                .message
                .contains("is it a scheduler node's admin address"),
            "{}",
            failure.message
        );
    }

    #[test]
    fn a_refused_token_is_a_failure_that_names_the_token_not_bad_usage() {
        let admin = answering(
            401,
            "application/json",
            r#"{"error":"a bearer token is required"}"#,
        );
        let failure = failure_of(admin);
        assert_eq!(failure.code, EXIT_FAILURE);
        assert_eq!(
            failure.message,
            "401: a bearer token is required (give the node's admin token with --token or SCHEDULER_ADMIN_TOKEN)"
        );
    }
}
