//! `GET /api/v1/openapi.json`: the admin API as an OpenAPI 3.1 document, for client generators,
//! schema-driven tests and API gateways. The schemas of requests and answers are derived
//! (`schemars`) from the very types the handlers read and write ([`super::api`]), with the
//! serde attributes they carry; the operations are listed here, and a test checks the list
//! against the router, both ways, so a route cannot go undocumented.
//!
//! Over 500 lines: the OpenAPI document: every route and schema, in one place, checked against the
//! router by a test.

use std::sync::{Arc, OnceLock};

use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};
use schemars::generate::SchemaSettings;
use schemars::{JsonSchema, Schema, SchemaGenerator};
use serde_json::{json, Map, Value};

use super::api::*;
use super::enqueue::MAX_BATCH;
use crate::recurring::ScheduleSpec;

/// The document, built once (it depends on nothing but the types).
pub(super) async fn serve() -> Response {
    static DOCUMENT: OnceLock<Arc<str>> = OnceLock::new();
    let text = DOCUMENT.get_or_init(|| document().to_string().into());
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
    /// The query's parameters, from the handler's query type.
    query: Option<Schema>,
    /// The JSON body's schema.
    body: Option<Value>,
    /// Status, what it means, and the JSON answer's schema (none: no body or not JSON).
    responses: Vec<(u16, &'static str, Option<Value>)>,
}

/// Schemas of answers: serialized by the node, referenced from `components`.
struct Answers(SchemaGenerator);

impl Answers {
    fn of<T: JsonSchema>(&mut self) -> Option<Value> {
        Some(self.0.subschema_for::<T>().to_value())
    }
}

/// The schema of a request type, as the node reads it (deserialized: defaults make fields
/// optional), inlined.
fn request<T: JsonSchema>() -> Schema {
    SchemaSettings::draft2020_12()
        .for_deserialize()
        .with(|s| {
            s.inline_subschemas = true;
            s.meta_schema = None;
        })
        .into_generator()
        .into_root_schema_for::<T>()
}

fn body<T: JsonSchema>() -> Option<Value> {
    Some(request::<T>().to_value())
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
            query: Some(request::<TaskQuery>()),
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
            body: body::<TaskKeyBody>(),
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
            body: body::<TaskKeyBody>(),
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
            query: Some(request::<ListQuery>()),
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
            body: Some(enqueue_body()),
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
            query: Some(request::<DeadLetterQuery>()),
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
            body: body::<DeadLetterSelection>(),
            responses: vec![
                (
                    200,
                    "Redriven: enqueued again, due now, with a fresh retry budget",
                    a.of::<RedriveResponse>(),
                ),
                bad.clone(),
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
            body: body::<DeadLetterSelection>(),
            responses: vec![
                (200, "Purged", a.of::<PurgeResponse>()),
                bad.clone(),
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
            body: body::<SuspendRequest>(),
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
            query: Some(request::<SuspensionQuery>()),
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
            body: body::<KeyLimitRequest>(),
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
            query: Some(request::<KeyLimitQuery>()),
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
            body: body::<ScheduleSpec>(),
            responses: vec![
                (201, "Created", a.of::<ScheduleView>()),
                (
                    200,
                    "Existed: the same definition changes nothing, a new one is a new revision",
                    a.of::<ScheduleView>(),
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
            query: Some(request::<PreviewQuery>()),
            body: body::<ScheduleSpec>(),
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
            query: Some(request::<PreviewQuery>()),
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
            body: body::<crate::remote::WorkerPoll>(),
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
            body: body::<crate::remote::Completion>(),
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
            responses: vec![(200, "This document", None)],
            ..op("get", "/api/v1/openapi.json", "This OpenAPI document")
        },
        Operation {
            responses: vec![(200, "OpenMetrics text of every queue of the node", None)],
            ..op("get", "/metrics", "The node's metrics")
        },
    ]
}

/// The wire format's task record (design.md "Wire format"), alone or in an array: what a
/// producer writes to the topic. Written out here since the decoder's own type is private to
/// the client crate; a test checks it against the encoder. Its bounds are the decoder's (a
/// key's `maxLength` counts characters, the decoder bytes: the schema's bound is the looser).
fn enqueue_body() -> Value {
    use scheduler_client::wire::{
        MAX_DEBOUNCE_WAIT_MS, MAX_GROUP_ID_BYTES, MAX_GROUP_NUMBER, MAX_LIMIT_KEY_BYTES,
        MAX_ORDERING_ID_BYTES, MAX_UNIQUENESS_KEY_BYTES,
    };
    let task_type = json!({"type": "string", "pattern": "^[A-Za-z0-9._:/-]{1,128}$"});
    let task = json!({
        "type": "object",
        "required": ["version", "orderingId", "scheduledTime", "uniquenessKey"],
        "properties": {
            "version": {"const": 1},
            "orderingId": {"type": "string", "minLength": 1, "maxLength": MAX_ORDERING_ID_BYTES, "description": "Tasks of one orderingId run one at a time, in order; at most 1,024 bytes"},
            "scheduledTime": {"type": "string", "format": "date-time", "description": "RFC 3339, e.g. 2026-11-22T06:00:00.000Z; at most the grace window in the past"},
            "uniquenessKey": {"type": "string", "minLength": 1, "maxLength": MAX_UNIQUENESS_KEY_BYTES, "description": "With orderingId and scheduledTime, the task's key; at most 1,024 bytes"},
            "taskData": {"type": "object", "description": "Handed to the handler; nested at most 64 levels"},
            "taskType": {"description": "Selects the handler (default \"default\")", "allOf": [task_type.clone()]},
            "priority": {"type": "integer", "format": "int32", "description": "Higher runs first among tasks due together (default 0)"},
            "onConflict": {"enum": ["replace", "keepTime", "debounce", "ifAbsent"], "description": "Applied to a pending task of the same identity (orderingId and uniquenessKey)"},
            "maxWaitMs": {"type": "integer", "minimum": 0, "maximum": MAX_DEBOUNCE_WAIT_MS, "description": "With onConflict debounce: the longest a task is pushed back"},
            "limitKey": {"type": "string", "minLength": 1, "maxLength": MAX_LIMIT_KEY_BYTES, "description": "The key per-key limits count the task under (a tenant, an upstream API), independent of orderingId; at most 256 bytes"},
            "group": {
                "type": "object",
                "required": ["id", "index"],
                "properties": {
                    "id": {"type": "string", "minLength": 1, "maxLength": MAX_GROUP_ID_BYTES, "description": "At most 1,024 bytes"},
                    "index": {"type": "integer", "minimum": 1, "maximum": MAX_GROUP_NUMBER},
                    "total": {"type": "integer", "minimum": 1, "maximum": MAX_GROUP_NUMBER, "description": "The number of members (the largest group is 10,000)"},
                    "failFast": {"type": "boolean"},
                    "joinType": {"description": "The task type of the group's join task", "allOf": [task_type]}
                }
            },
            "type": {"const": "task", "description": "The record's type: tasks only here (cancel with /api/v1/task/cancel)"}
        }
    });
    json!({
        "oneOf": [task.clone(), {"type": "array", "items": task, "minItems": 1, "maxItems": MAX_BATCH}]
    })
}

/// The whole document.
pub(super) fn document() -> Value {
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
                describe(operation, error.as_ref()),
            );
        }
    }
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "scheduler node admin API",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "Each node serves it for the queue at the root and for every queue it serves under /queues/{queue}. Errors are JSON {\"error\": ...}. Times are RFC 3339 strings in UTC with milliseconds."
        },
        "servers": [{"url": "/"}, {"url": "/queues/{queue}", "variables": {"queue": {"default": "default"}}}],
        "security": [{"bearer": []}, {}],
        "paths": paths,
        "components": {
            "schemas": answers.0.take_definitions(true),
            "securitySchemes": {
                "bearer": {"type": "http", "scheme": "bearer", "description": "The node's admin.token, when set"}
            }
        }
    })
}

/// What the listener answers before any route does (`admin::access`, `json_errors`), on every
/// operation, and on those that take a body.
fn listener_answers(takes_body: bool) -> Vec<(u16, String)> {
    let mut answers =
        vec![
        (401, "No token, or a wrong one (a node with an admin token)".to_string()),
        (
            403,
            "A Host the listener does not answer to, or a state-changing request from another site"
                .to_string(),
        ),
    ];
    if takes_body {
        answers.push((
            413,
            format!(
                "The body is over the listener's limit ({} bytes, or a queue's largest task and 64 KiB more when that is more)",
                super::REQUEST_BODY_LIMIT
            ),
        ));
        answers.push((415, "A body that is not application/json".to_string()));
    }
    answers
}

/// One operation as OpenAPI describes it; `error` is the schema of an error's answer.
fn describe(operation: Operation, error: Option<&Value>) -> Value {
    let mut parameters: Vec<Value> = operation
        .path
        .split('/')
        .filter_map(|part| part.strip_prefix('{')?.strip_suffix('}'))
        .map(|name| json!({"name": name, "in": "path", "required": true, "schema": {"type": "string"}}))
        .collect();
    if let Some(query) = &operation.query {
        let required: Vec<&str> = query
            .get("required")
            .and_then(Value::as_array)
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        if let Some(properties) = query.get("properties").and_then(Value::as_object) {
            for (name, schema) in properties {
                let mut parameter = json!({
                    "name": name,
                    "in": "query",
                    "required": required.contains(&name.as_str()),
                    "schema": schema,
                });
                if let Some(description) = schema.get("description") {
                    parameter["description"] = description.clone();
                }
                parameters.push(parameter);
            }
        }
    }
    let mut responses = Map::new();
    for (code, description, schema) in operation.responses {
        let mut response = json!({ "description": description });
        if let Some(schema) = schema {
            response["content"] = json!({"application/json": {"schema": schema}});
        }
        responses.insert(code.to_string(), response);
    }
    for (code, description) in listener_answers(operation.body.is_some()) {
        let mut response = json!({ "description": description });
        if let Some(schema) = error {
            response["content"] = json!({"application/json": {"schema": schema}});
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
        described["requestBody"] =
            json!({"required": true, "content": {"application/json": {"schema": body}}});
    }
    described
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
