//! `GET /api/v1/openapi.json`: the admin API as an OpenAPI 3.1 document, for client generators,
//! schema-driven tests and API gateways. The schemas of answers are derived (`schemars`) from
//! the very types the handlers write ([`super::api`]), with the serde attributes they carry;
//! those of requests from the types the handlers read, told what the types cannot say
//! ([`requests`]: required fields, bounds, fields that exclude each other). The operations are
//! listed here with every status each answers, the listener's own refusals included; a test
//! checks the list against the router, both ways, so a route cannot go undocumented, and
//! schemathesis checks the node against the document (`it-tests/tests/openapi_contract.rs`).
//!
//! The document is the node's: with an admin token, every operation needs it (and may answer
//! 401); without one, none does.
//!
//! Over 500 lines: the OpenAPI document: every route and its answers, in one place, checked
//! against the router by a test.

use std::sync::{Arc, OnceLock};

use axum::extract::State;
use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};
use schemars::generate::SchemaSettings;
use schemars::{JsonSchema, SchemaGenerator};
use serde_json::{json, Map, Value};

use super::api::*;
use super::state::AdminState;
use super::uri_length::MAX_URI_BYTES;

mod requests;

/// The node's document, built once for each of the two forms (it depends on nothing but the
/// types and whether the node has a token).
pub(super) async fn serve(State(state): State<Arc<AdminState>>) -> Response {
    static DOCUMENTS: [OnceLock<Arc<str>>; 2] = [OnceLock::new(), OnceLock::new()];
    let token = state.token.is_some();
    let text = DOCUMENTS[usize::from(token)].get_or_init(|| document(token).to_string().into());
    let mut response = text.to_string().into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// One operation of the API.
struct Operation {
    method: &'static str,
    path: &'static str,
    summary: &'static str,
    /// The query's parameters: an object schema (`requests`).
    query: Option<Value>,
    /// The JSON body's schema.
    body: Option<Value>,
    /// Status, what it means, and the rest of OpenAPI's response object: the answer's
    /// `content` by media type (none: no body), its `links`.
    responses: Vec<(u16, &'static str, Option<Value>)>,
}

/// Schemas of answers: serialized by the node, referenced from `components`.
struct Answers(SchemaGenerator);

impl Answers {
    /// A JSON answer of type `T`.
    fn of<T: JsonSchema>(&mut self) -> Option<Value> {
        let schema = self.0.subschema_for::<T>().to_value();
        Some(json!({"content": {"application/json": {"schema": schema}}}))
    }
}

/// What a schedule's answer leads to: the operations on the schedule it names (for clients
/// and schemathesis' stateful phase).
fn schedule_links() -> Value {
    let id = json!({"id": "$response.body#/definition/id"});
    json!({
        "GetSchedule": {"operationId": "getSchedulesId", "parameters": id},
        "PauseSchedule": {"operationId": "postSchedulesIdPause", "parameters": id},
        "ResumeSchedule": {"operationId": "postSchedulesIdResume", "parameters": id},
        "DeleteSchedule": {"operationId": "deleteSchedulesId", "parameters": id},
    })
}

/// Every operation, in the order of the router.
fn operations(a: &mut Answers) -> Vec<Operation> {
    let error = a.of::<ErrorResponse>();
    let op = |method, path, summary| Operation {
        method,
        path,
        summary,
        query: None,
        body: None,
        responses: Vec::new(),
    };
    let bad = (400, "Bad input", error.clone());
    let missing = (404, "Not found", error.clone());
    let store = (503, "The store failed; try again", error.clone());
    let kafka = (502, "Kafka did not acknowledge", error.clone());
    vec![
        Operation {
            responses: vec![(200, "The node and its partitions", a.of::<StatusResponse>())],
            ..op(
                "get",
                "/api/v1/status",
                "The node: owned partitions, tasks in memory, Kafka lag, handlers",
            )
        },
        Operation {
            responses: vec![
                (
                    200,
                    "Owns partitions and loaded each",
                    a.of::<ReadyResponse>(),
                ),
                (503, "Not ready yet", a.of::<ReadyResponse>()),
            ],
            ..op(
                "get",
                "/api/v1/ready",
                "Readiness, for load balancers and deploy tooling",
            )
        },
        Operation {
            responses: vec![
                (
                    200,
                    "Every partition and its owner",
                    a.of::<PartitionsResponse>(),
                ),
                store.clone(),
            ],
            ..op(
                "get",
                "/api/v1/partitions",
                "Every partition of the queue and the node that claimed it last (the cluster)",
            )
        },
        Operation {
            query: Some(requests::task_query()),
            responses: vec![
                (
                    200,
                    "The task, its status and attempt history",
                    a.of::<TaskResponse>(),
                ),
                bad.clone(),
                missing.clone(),
                store.clone(),
            ],
            ..op(
                "get",
                "/api/v1/task",
                "A task by key (with scheduledTime) or by identity, with its attempt history",
            )
        },
        Operation {
            body: Some(requests::cancel_body()),
            responses: vec![
                (
                    202,
                    "Cancellation enqueued on the task's partition",
                    a.of::<CancelResponse>(),
                ),
                bad.clone(),
                kafka.clone(),
            ],
            ..op(
                "post",
                "/api/v1/task/cancel",
                "Cancel a task (by key), or the pending task of an identity",
            )
        },
        Operation {
            body: Some(requests::reschedule_body()),
            responses: vec![
                (
                    202,
                    "Reschedule enqueued on the task's partition",
                    a.of::<CancelResponse>(),
                ),
                bad.clone(),
                kafka.clone(),
            ],
            ..op(
                "post",
                "/api/v1/task/reschedule",
                "Move the pending task of an identity to scheduledTime",
            )
        },
        Operation {
            query: Some(requests::list_query()),
            responses: vec![
                (200, "A page of incomplete tasks", a.of::<ListResponse>()),
                bad.clone(),
                store.clone(),
            ],
            ..op(
                "get",
                "/api/v1/tasks",
                "Incomplete tasks due in [from, to), across partitions, a page at a time",
            )
        },
        Operation {
            responses: vec![(
                200,
                "This node's tasks waiting for their next attempt, the soonest first",
                a.of::<RetryingResponse>(),
            )],
            ..op(
                "get",
                "/api/v1/tasks/retrying",
                "This node's retrying set: when each task's next attempt is due, after how many, and why",
            )
        },
        Operation {
            body: Some(requests::enqueue_body()),
            responses: vec![
                (
                    201,
                    "Every task acknowledged by the broker",
                    a.of::<EnqueueResponse>(),
                ),
                (
                    400,
                    "Tasks refused (each in failed); none was sent",
                    a.of::<EnqueueResponse>(),
                ),
                (
                    502,
                    "The broker did not acknowledge some (in failed)",
                    a.of::<EnqueueResponse>(),
                ),
            ],
            ..op(
                "post",
                "/api/v1/tasks",
                "Enqueue a task or a batch, answered once the broker acknowledged",
            )
        },
        Operation {
            query: Some(requests::dead_letter_query()),
            responses: vec![
                (200, "A page of dead letters", a.of::<DeadLettersResponse>()),
                bad.clone(),
                store.clone(),
            ],
            ..op(
                "get",
                "/api/v1/dead-letters",
                "Dead letters, in task-key order, a page at a time",
            )
        },
        Operation {
            body: Some(requests::selection_body()),
            responses: vec![
                (
                    200,
                    "Redriven: enqueued again, due now, with a fresh retry budget",
                    a.of::<RedriveResponse>(),
                ),
                bad.clone(),
                (404, "No dead letter of the task named by its key", error.clone()),
                kafka.clone(),
                store.clone(),
            ],
            ..op(
                "post",
                "/api/v1/dead-letters/redrive",
                "Redrive dead letters: one by key, a filter, or all",
            )
        },
        Operation {
            body: Some(requests::selection_body()),
            responses: vec![
                (200, "Purged", a.of::<PurgeResponse>()),
                bad.clone(),
                (404, "No dead letter of the task named by its key", error.clone()),
                store.clone(),
            ],
            ..op(
                "post",
                "/api/v1/dead-letters/purge",
                "Delete dead letters: one by key, a filter, or all",
            )
        },
        Operation {
            responses: vec![
                (200, "The queue's jobs", a.of::<JobsResponse>()),
                store.clone(),
            ],
            ..op(
                "get",
                "/api/v1/jobs",
                "Jobs with their progress, by finished nodes of 32 buckets",
            )
        },
        Operation {
            responses: vec![
                (200, "The job", a.of::<JobView>()),
                missing.clone(),
                store.clone(),
            ],
            ..op(
                "get",
                "/api/v1/jobs/{id}",
                "A job, with its failed buckets and why",
            )
        },
        Operation {
            responses: vec![
                (
                    200,
                    "The suspensions in force",
                    a.of::<SuspensionsResponse>(),
                ),
                store.clone(),
            ],
            ..op(
                "get",
                "/api/v1/suspensions",
                "Suspensions: kind, target, since, reason",
            )
        },
        Operation {
            body: Some(requests::suspend_body()),
            responses: vec![
                (201, "Suspended", a.of::<SuspensionView>()),
                bad.clone(),
                store.clone(),
            ],
            ..op(
                "post",
                "/api/v1/suspensions",
                "Suspend an orderingId, a task type or a group: its tasks wait",
            )
        },
        Operation {
            query: Some(requests::suspension_query()),
            responses: vec![
                (204, "Lifted (also when there was none)", None),
                bad.clone(),
                store.clone(),
            ],
            ..op("delete", "/api/v1/suspensions", "Lift a suspension")
        },
        Operation {
            responses: vec![
                (
                    200,
                    "The overrides in force, and this node's use of each limited key",
                    a.of::<LimitsResponse>(),
                ),
                store.clone(),
            ],
            ..op(
                "get",
                "/api/v1/limits",
                "Per-key limits: overrides set at run time; permits, calls and held tasks per key on this node",
            )
        },
        Operation {
            body: Some(requests::key_limit_body()),
            responses: vec![
                (200, "Set (every node applies it within 2 s)", a.of::<KeyLimitView>()),
                bad.clone(),
                store.clone(),
            ],
            ..op(
                "put",
                "/api/v1/limits",
                "Set one limit key's override: concurrency, rate, burst, weight",
            )
        },
        Operation {
            query: Some(requests::key_limit_query()),
            responses: vec![
                (204, "Removed (also when there was none)", None),
                bad.clone(),
                store.clone(),
            ],
            ..op("delete", "/api/v1/limits", "Remove a limit key's override")
        },
        Operation {
            responses: vec![
                (
                    200,
                    "Every schedule of the queue",
                    a.of::<SchedulesResponse>(),
                ),
                store.clone(),
            ],
            ..op(
                "get",
                "/api/v1/schedules",
                "Recurring schedules: definition, paused, next and last fire",
            )
        },
        Operation {
            body: Some(requests::schedule_body(false)),
            responses: vec![
                (201, "Created", with_links(a.of::<ScheduleView>())),
                (
                    200,
                    "Existed: the same definition changes nothing, a new one is a new revision",
                    with_links(a.of::<ScheduleView>()),
                ),
                bad.clone(),
                store.clone(),
            ],
            ..op(
                "post",
                "/api/v1/schedules",
                "Create or redefine a recurring schedule",
            )
        },
        Operation {
            query: Some(requests::count_query()),
            body: Some(requests::schedule_body(true)),
            responses: vec![
                (
                    200,
                    "What the definition would do",
                    a.of::<PreviewResponse>(),
                ),
                bad.clone(),
            ],
            ..op(
                "post",
                "/api/v1/schedules/preview",
                "A definition's next fire times; nothing is created",
            )
        },
        Operation {
            query: Some(requests::count_query()),
            responses: vec![
                (
                    200,
                    "The schedule, its next fire times and last fires",
                    a.of::<ScheduleDetail>(),
                ),
                bad.clone(),
                missing.clone(),
                store.clone(),
            ],
            ..op("get", "/api/v1/schedules/{id}", "A schedule")
        },
        Operation {
            responses: vec![(204, "Deleted", None), missing.clone(), store.clone()],
            ..op("delete", "/api/v1/schedules/{id}", "Delete a schedule")
        },
        Operation {
            responses: vec![
                (
                    200,
                    "Paused: its chain ends at its next tick",
                    a.of::<ScheduleView>(),
                ),
                missing.clone(),
                store.clone(),
            ],
            ..op("post", "/api/v1/schedules/{id}/pause", "Pause a schedule")
        },
        Operation {
            responses: vec![
                (
                    200,
                    "Resumed from the next fire time",
                    a.of::<ScheduleView>(),
                ),
                (400, "Its definition has no fire time after now", error.clone()),
                missing.clone(),
                store.clone(),
            ],
            ..op("post", "/api/v1/schedules/{id}/resume", "Resume a schedule")
        },
        Operation {
            responses: vec![
                (200, "Connected workers, their live claims, tasks waiting for one", a.of::<WorkersResponse>()),
                (404, "This node takes no remote workers", error.clone()),
            ],
            ..op("get", "/api/v1/workers", "Remote workers: types, capacity, last seen, claims")
        },
        Operation {
            body: Some(requests::poll_body()),
            responses: vec![
                (200, "The claims taken (none once the wait ended)", a.of::<PollResponse>()),
                bad.clone(),
                (404, "This node takes no remote workers", error.clone()),
            ],
            ..op(
                "post",
                "/api/v1/workers/poll",
                "A remote worker's long poll: claims of due tasks of its types, at most its capacity",
            )
        },
        Operation {
            responses: vec![
                (200, "The claim is live until the new expiry", a.of::<HeartbeatResponse>()),
                (409, "The claim ended (expired, completed, its partition moved): stop, nothing will be recorded", error.clone()),
                (404, "This node takes no remote workers", error.clone()),
            ],
            ..op("post", "/api/v1/claims/{claimId}/heartbeat", "Keep a claim live")
        },
        Operation {
            body: Some(requests::completion_body()),
            responses: vec![
                (200, "Taken by the claim's call, which records it", a.of::<ClaimCompleted>()),
                bad.clone(),
                (409, "The claim ended (expired, completed, its partition moved): nothing recorded, the task runs again", error.clone()),
                (413, "The result is over 16 KiB: nothing recorded, the claim is still live", error.clone()),
                (404, "This node takes no remote workers", error.clone()),
            ],
            ..op(
                "post",
                "/api/v1/claims/{claimId}/complete",
                "Complete a claim: success (with a small result), retry (with a wait) or invalid",
            )
        },
        Operation {
            responses: vec![(
                200,
                "This document",
                Some(json!({"content": {"application/json": {"schema": {"type": "object"}}}})),
            )],
            ..op("get", "/api/v1/openapi.json", "This OpenAPI document")
        },
        Operation {
            responses: vec![(
                200,
                "OpenMetrics text of every queue of the node",
                Some(json!({
                    "content": {"application/openmetrics-text": {"schema": {"type": "string"}}}
                })),
            )],
            ..op("get", "/metrics", "The node's metrics")
        },
    ]
}

/// A request body to copy, by operation: each is one its handler takes (schemathesis'
/// examples phase sends them, so an answer with data is checked too).
fn example(method: &str, path: &str) -> Option<Value> {
    let body = match (method, path) {
        ("post", "/api/v1/tasks") => json!({
            "version": 1, "orderingId": "customer-7", "scheduledTime": "2099-01-01T06:00:00.000Z",
            "uniquenessKey": "reminder-1", "taskType": "reminder", "taskData": {"action": "remind"}
        }),
        ("post", "/api/v1/task/cancel") => json!({
            "orderingId": "customer-7", "scheduledTime": "2099-01-01T06:00:00.000Z",
            "uniquenessKey": "reminder-1"
        }),
        ("post", "/api/v1/task/reschedule") => json!({
            "orderingId": "customer-7", "uniquenessKey": "reminder-1",
            "scheduledTime": "2099-01-02T06:00:00.000Z"
        }),
        ("post", "/api/v1/dead-letters/redrive" | "/api/v1/dead-letters/purge") => {
            json!({"taskType": "reminder", "from": "2026-01-01T00:00:00.000Z"})
        }
        ("post", "/api/v1/suspensions") => {
            json!({"kind": "taskType", "target": "reminder", "reason": "the mail provider is down"})
        }
        ("put", "/api/v1/limits") => {
            json!({"limitKey": "tenant-42", "concurrency": 5, "rate": 10.0})
        }
        ("post", "/api/v1/schedules") => json!({
            "id": "nightly-report", "cron": "0 3 * * *", "timeZone": "Europe/Paris",
            "taskType": "report"
        }),
        ("post", "/api/v1/schedules/preview") => json!({"every": "15m", "taskType": "report"}),
        ("post", "/api/v1/workers/poll") => {
            json!({"worker": "mailer-1", "types": ["send-email"], "capacity": 4, "waitMs": 0})
        }
        ("post", "/api/v1/claims/{claimId}/complete") => {
            json!({"outcome": "success", "result": {"sent": true}})
        }
        _ => return None,
    };
    Some(body)
}

/// A schedule's answer, with the operations on the schedule it names.
fn with_links(mut answer: Option<Value>) -> Option<Value> {
    if let Some(answer) = answer.as_mut() {
        answer["links"] = schedule_links();
    }
    answer
}

/// The whole document: of a node with an admin token (`token`), or of one without.
pub(super) fn document(token: bool) -> Value {
    let mut answers = Answers(
        SchemaSettings::draft2020_12()
            .for_serialize()
            .with(|s| {
                s.definitions_path = "/components/schemas".into();
                s.meta_schema = None;
            })
            .into_generator(),
    );
    let error = answers.of::<ErrorResponse>();
    let mut paths = Map::new();
    for operation in operations(&mut answers) {
        let entry = paths.entry(operation.path).or_insert_with(|| json!({}));
        if let Some(methods) = entry.as_object_mut() {
            methods.insert(
                operation.method.to_string(),
                describe(operation, error.as_ref(), token),
            );
        }
    }
    let mut document = json!({
        "openapi": "3.1.0",
        "info": {
            "title": "scheduler node admin API",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "Each node serves it for the queue at the root and for every queue it serves under /queues/{queue}. Errors are JSON {\"error\": ...}, but for the HTTP server's own, without a body: 400 for a request it cannot parse, 431 for a request head over about 400 KiB. Times are RFC 3339 strings in UTC with milliseconds."
        },
        "servers": [{"url": "/"}, {"url": "/queues/{queue}", "variables": {"queue": {"default": "default"}}}],
        "paths": paths,
        "components": {
            "schemas": answers.0.take_definitions(true),
        }
    });
    if token {
        document["security"] = json!([{"bearer": []}]);
        document["components"]["securitySchemes"] = json!({
            "bearer": {"type": "http", "scheme": "bearer", "description": "The node's admin.token"}
        });
    }
    document
}

/// What the listener answers before any route does (`admin::access`, `uri_length`,
/// `json_errors`), by operation: every one, those that may change something (`method`), those
/// that take a body, and all of them on a node with a token.
fn listener_answers(method: &str, takes_body: bool, token: bool) -> Vec<(u16, String)> {
    let changes = method != "get";
    let mut answers = Vec::new();
    if token {
        answers.push((
            401,
            "No token, or a wrong one: the WWW-Authenticate header names the scheme, Bearer"
                .to_string(),
        ));
    }
    answers.push((
        403,
        match changes {
            true => "A Host the listener does not answer to, or a request from another site",
            false => "A Host the listener does not answer to",
        }
        .to_string(),
    ));
    answers.push((
        405,
        "A method this path does not take: the Allow header lists those it does".to_string(),
    ));
    answers.push((
        414,
        format!("The URI (path and query) is over the listener's limit of {MAX_URI_BYTES} bytes"),
    ));
    if takes_body {
        answers.push((
            413,
            format!(
                "The body is over the listener's limit ({} bytes, or a queue's largest task and 64 KiB more when that is more)",
                super::REQUEST_BODY_LIMIT
            ),
        ));
    }
    if changes {
        answers.push((
            415,
            "A body, or a Content-Type, that is not application/json".to_string(),
        ));
    }
    answers
}

/// One operation as OpenAPI describes it; `error` is an error's answer.
fn describe(operation: Operation, error: Option<&Value>, token: bool) -> Value {
    let mut parameters: Vec<Value> = operation
        .path
        .split('/')
        .filter_map(|part| part.strip_prefix('{')?.strip_suffix('}'))
        .map(|name| {
            let schema = match operation.path.starts_with("/api/v1/schedules/") {
                true => requests::schedule_id(),
                false => json!({"type": "string", "minLength": 1}),
            };
            json!({"name": name, "in": "path", "required": true, "schema": schema})
        })
        .collect();
    if let Some(query) = &operation.query {
        let required: Vec<&str> = query
            .get("required")
            .and_then(Value::as_array)
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        if let Some(properties) = query.get("properties").and_then(Value::as_object) {
            for (name, schema) in properties {
                let mut schema = schema.clone();
                let description = schema.as_object_mut().and_then(|s| s.remove("description"));
                let mut parameter = json!({
                    "name": name,
                    "in": "query",
                    "required": required.contains(&name.as_str()),
                    "schema": without_null(schema),
                });
                if let Some(description) = description {
                    parameter["description"] = description;
                }
                parameters.push(parameter);
            }
        }
    }
    let mut responses = Map::new();
    for (code, description, answer) in operation.responses {
        let mut response = match answer {
            Some(Value::Object(answer)) => answer,
            _ => Map::new(),
        };
        response.insert("description".into(), json!(description));
        responses.insert(code.to_string(), Value::Object(response));
    }
    let takes_body = operation.body.is_some();
    for (code, description) in listener_answers(operation.method, takes_body, token) {
        let mut response = error.cloned().unwrap_or_else(|| json!({}));
        response["description"] = json!(description);
        let header = match code {
            401 => Some("WWW-Authenticate"),
            405 => Some("Allow"),
            _ => None,
        };
        if let Some(header) = header {
            response["headers"] =
                json!({ header: {"required": true, "schema": {"type": "string"}} });
        }
        responses.entry(code.to_string()).or_insert(response);
    }
    let mut described = json!({
        "summary": operation.summary,
        "operationId": operation_id(operation.method, operation.path),
        "responses": responses,
    });
    if !parameters.is_empty() {
        described["parameters"] = Value::Array(parameters);
    }
    if let Some(body) = operation.body {
        let mut media = json!({ "schema": body });
        if let Some(example) = example(operation.method, operation.path) {
            media["example"] = example;
        }
        described["requestBody"] =
            json!({"required": true, "content": {"application/json": media}});
    }
    described
}

/// A query parameter's schema without `null` (among its types, its values or its choices): a
/// query has no null (an absent parameter is absent).
fn without_null(mut schema: Value) -> Value {
    if let Some(Value::Array(types)) = schema.get_mut("type") {
        types.retain(|t| t != "null");
        if let [only] = types.as_slice() {
            let only = only.clone();
            schema["type"] = only;
        }
    }
    if let Some(Value::Array(values)) = schema.get_mut("enum") {
        values.retain(|v| !v.is_null());
    }
    let Some(object) = schema.as_object_mut() else {
        return schema;
    };
    if let Some(Value::Array(mut choices)) = object.remove("anyOf") {
        choices.retain(|choice| choice.get("type").and_then(Value::as_str) != Some("null"));
        match choices.pop() {
            // One choice left: the schema itself.
            Some(Value::Object(only)) if choices.is_empty() => object.extend(only),
            Some(last) => {
                choices.push(last);
                object.insert("anyOf".into(), Value::Array(choices));
            }
            None => {}
        }
    }
    schema
}

/// `get /api/v1/schedules/{id}/pause` → `postSchedulesIdPause`-like ids, unique per operation.
fn operation_id(method: &str, path: &str) -> String {
    let mut id = method.to_string();
    for part in path.split(['/', '-', '.']) {
        let part = part.trim_matches(|c| c == '{' || c == '}');
        if part.is_empty() || part == "api" || part == "v1" {
            continue;
        }
        let mut chars = part.chars();
        if let Some(first) = chars.next() {
            id.extend(first.to_uppercase());
            id.push_str(chars.as_str());
        }
    }
    id
}

#[cfg(test)]
mod tests;
