//! What the node reads, as the document states it: each query's parameters and each body's
//! schema, derived (`schemars`) from the type the handler reads, then told what the type cannot
//! say: the fields the handler requires (the types keep them optional, so that a missing one is
//! answered with its name), the bounds it enforces (with the handler's own constants), and the
//! fields that exclude each other.
//!
//! Never stricter than the handler: whatever the node takes, the document allows, so that a
//! request the document calls invalid is always refused (schemathesis checks both ways,
//! `it-tests/tests/openapi_contract.rs`). A rule it cannot state (a window of at most 31 days, a
//! time not in the past) is in the description, and the node answers 400.

use schemars::generate::SchemaSettings;
use schemars::{JsonSchema, Schema};
use serde_json::{json, Map, Value};

use crate::admin::api::*;
use crate::admin::{dead_letters, enqueue, limits, listing, schedules, suspensions, workers};
use crate::recurring::{ScheduleSpec, RESERVED_ID};
use crate::settings::{MAX_KEY_BURST, MAX_KEY_RATE};
use scheduler_client::wire::{
    MAX_DEBOUNCE_WAIT_MS, MAX_GROUP_ID_BYTES, MAX_GROUP_NUMBER, MAX_LIMIT_KEY_BYTES,
    MAX_ORDERING_ID_BYTES, MAX_TASK_TYPE_BYTES, MAX_UNIQUENESS_KEY_BYTES,
};

/// A task type, as `wire::check_task_type` takes it.
const TASK_TYPE_PATTERN: &str = "^[A-Za-z0-9._:/-]{1,128}$";

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

/// Where a value is read: a query has no `null` (an absent parameter is absent), a JSON body
/// does (serde reads a `null` optional field as absent).
#[derive(Clone, Copy, PartialEq)]
enum In {
    Query,
    Body,
}

/// A request type's schema being told what its type cannot say.
struct Refined(Value);

impl Refined {
    fn of<T: JsonSchema>() -> Self {
        Refined(request::<T>().to_value())
    }

    fn property(&mut self, name: &str) -> Option<&mut Map<String, Value>> {
        (self.0.get_mut("properties")?.get_mut(name)?).as_object_mut()
    }

    /// `names` required: present, not null, and a string not empty (the handlers read an
    /// empty one as absent: "orderingId is required").
    fn require(mut self, names: &[&str]) -> Self {
        for name in names {
            if let Some(property) = self.property(name) {
                if let Some(Value::Array(types)) = property.get("type") {
                    let types: Vec<Value> =
                        (types.iter()).filter(|t| *t != "null").cloned().collect();
                    let one = match types.as_slice() {
                        [only] => only.clone(),
                        _ => Value::Array(types),
                    };
                    property.insert("type".into(), one);
                }
                if property.get("type").and_then(Value::as_str) == Some("string") {
                    property.entry("minLength").or_insert(json!(1));
                }
            }
            if let Some(object) = self.0.as_object_mut() {
                let required = object.entry("required").or_insert_with(|| json!([]));
                if let Some(required) = required.as_array_mut() {
                    required.push(json!(name));
                }
            }
        }
        self
    }

    /// `keywords` added to the schema of `name` (a bound, a pattern).
    fn with(mut self, name: &str, keywords: Value) -> Self {
        if let (Some(property), Value::Object(keywords)) = (self.property(name), keywords) {
            property.extend(keywords);
        }
        self
    }

    /// The schema of `name` replaced by `schema`, keeping its description.
    fn replace(mut self, name: &str, schema: Value) -> Self {
        if let (Some(property), Value::Object(schema)) = (self.property(name), schema) {
            let description = property.remove("description");
            *property = schema;
            if let Some(description) = description {
                property.insert("description".into(), description);
            }
        }
        self
    }

    /// A keyword of the whole schema (`oneOf`, `anyOf`).
    fn and(mut self, keyword: &str, value: Value) -> Self {
        if let Some(object) = self.0.as_object_mut() {
            object.insert(keyword.into(), value);
        }
        self
    }

    fn done(self) -> Value {
        self.0
    }
}

/// An RFC 3339 time (`parse_rfc3339`).
fn time() -> Value {
    json!({"type": "string", "format": "date-time"})
}

/// An optional time: the handler reads an empty one (and in a body `null`) as absent.
fn optional_time(place: In) -> Value {
    let mut choices = vec![time(), json!({"const": ""})];
    if place == In::Body {
        choices.push(json!({"type": "null"}));
    }
    json!({"anyOf": choices})
}

fn task_type() -> Value {
    json!({"type": "string", "pattern": TASK_TYPE_PATTERN})
}

/// An optional task type: the handler reads an empty one (and in a body `null`) as absent.
fn optional_task_type(place: In) -> Value {
    let mut choices = vec![task_type(), json!({"const": ""})];
    if place == In::Body {
        choices.push(json!({"type": "null"}));
    }
    json!({"anyOf": choices})
}

/// `GET /api/v1/task`: a key, or an identity without `scheduledTime`.
pub(super) fn task_query() -> Value {
    Refined::of::<TaskQuery>()
        .require(&["orderingId", "uniquenessKey"])
        .replace("scheduledTime", optional_time(In::Query))
        .with("history", json!({"maximum": crate::admin::MAX_HISTORY}))
        .done()
}

/// `POST /api/v1/task/cancel`: a key, or an identity without `scheduledTime`; the parts are
/// bounded as in a task.
pub(super) fn cancel_body() -> Value {
    Refined::of::<TaskKeyBody>()
        .require(&["orderingId", "uniquenessKey"])
        .with("orderingId", json!({"maxLength": MAX_ORDERING_ID_BYTES}))
        .with(
            "uniquenessKey",
            json!({"maxLength": MAX_UNIQUENESS_KEY_BYTES}),
        )
        .replace("scheduledTime", optional_time(In::Body))
        .done()
}

/// `POST /api/v1/task/reschedule`: an identity and the new time.
pub(super) fn reschedule_body() -> Value {
    Refined::of::<TaskKeyBody>()
        .require(&["orderingId", "uniquenessKey", "scheduledTime"])
        .with("orderingId", json!({"maxLength": MAX_ORDERING_ID_BYTES}))
        .with(
            "uniquenessKey",
            json!({"maxLength": MAX_UNIQUENESS_KEY_BYTES}),
        )
        .replace("scheduledTime", time())
        .done()
}

/// `GET /api/v1/tasks`: a window and a page.
pub(super) fn list_query() -> Value {
    Refined::of::<ListQuery>()
        .require(&["from", "to"])
        .replace("from", time())
        .replace("to", time())
        .with("limit", json!({"minimum": 1, "maximum": listing::MAX_PAGE}))
        .done()
}

/// `GET /api/v1/dead-letters`: a filter and a page.
pub(super) fn dead_letter_query() -> Value {
    Refined::of::<DeadLetterQuery>()
        .replace("from", optional_time(In::Query))
        .replace("to", optional_time(In::Query))
        .with(
            "limit",
            json!({"minimum": 1, "maximum": dead_letters::MAX_PAGE}),
        )
        .done()
}

/// `POST /api/v1/dead-letters/redrive` and `purge`: a task's key, a filter, or everything;
/// one of them only (`dead_letters::selected`). A field of another way may be there as `null`
/// (absent); other fields are ignored.
pub(super) fn selection_body() -> Value {
    let absent = json!({"type": "null"});
    let no_key = json!({"orderingId": absent, "scheduledTime": absent, "uniquenessKey": absent});
    let no_filter = json!({"taskType": absent, "from": absent, "to": absent});
    let merged = |a: &Value, b: &Value| {
        let mut all = a.as_object().cloned().unwrap_or_default();
        all.extend(b.as_object().cloned().unwrap_or_default());
        Value::Object(all)
    };
    let mut key = merged(
        &json!({
            "orderingId": {"type": "string", "minLength": 1},
            "scheduledTime": time(),
            "uniquenessKey": {"type": "string", "minLength": 1},
            "all": {"const": false},
        }),
        &no_filter,
    );
    let mut filter = merged(
        &json!({
            "taskType": {"type": ["string", "null"]},
            "from": optional_time(In::Body),
            "to": optional_time(In::Body),
            "all": {"const": false},
        }),
        &no_key,
    );
    let everything = merged(
        &merged(&json!({"all": {"const": true}}), &no_key),
        &no_filter,
    );
    // (Descriptions from the type, on the fields each way names.)
    let described = request::<DeadLetterSelection>().to_value();
    for (way, names) in [
        (
            &mut key,
            &["orderingId", "scheduledTime", "uniquenessKey"][..],
        ),
        (&mut filter, &["taskType", "from", "to"][..]),
    ] {
        for name in names {
            let description = &described["properties"][name]["description"];
            if let Some(field) = way.get_mut(*name).and_then(Value::as_object_mut) {
                field.insert("description".into(), description.clone());
            }
        }
    }
    let filter_field =
        |name: &str| json!({"required": [name], "properties": {name: {"type": "string"}}});
    json!({
        "description": described["description"],
        "oneOf": [
            {
                "title": "A task's key",
                "type": "object",
                "required": ["orderingId", "scheduledTime", "uniquenessKey"],
                "properties": key,
            },
            {
                "title": "A filter: a task type, a window of due times, or both",
                "type": "object",
                "properties": filter,
                "anyOf": [filter_field("taskType"), filter_field("from"), filter_field("to")],
            },
            {
                "title": "Every dead letter",
                "type": "object",
                "required": ["all"],
                "properties": everything,
            },
        ]
    })
}

/// `POST /api/v1/suspensions`: a kind, its target and maybe why. A group's target is
/// `<type>/<id>`, split at the first `/`.
pub(super) fn suspend_body() -> Value {
    let kinds = json!([
        {
            "properties": {
                "kind": {"const": "orderingId"},
                "target": {"maxLength": MAX_ORDERING_ID_BYTES},
            }
        },
        {"properties": {"kind": {"const": "taskType"}, "target": task_type()}},
        {
            "properties": {
                "kind": {"const": "group"},
                "target": {"pattern": format!(
                    "^[A-Za-z0-9._:-]{{1,{MAX_TASK_TYPE_BYTES}}}/[\\s\\S]{{1,{MAX_GROUP_ID_BYTES}}}$"
                )},
            }
        },
    ]);
    Refined::of::<SuspendRequest>()
        .require(&["kind", "target"])
        .with("kind", json!({"enum": ["orderingId", "taskType", "group"]}))
        .with(
            "reason",
            json!({"maxLength": suspensions::MAX_REASON_BYTES}),
        )
        .and("oneOf", kinds)
        .done()
}

/// `DELETE /api/v1/suspensions`: any well-formed target, so that whatever a listing shows can
/// be lifted.
pub(super) fn suspension_query() -> Value {
    Refined::of::<SuspensionQuery>()
        .require(&["kind", "target"])
        .with("kind", json!({"enum": ["orderingId", "taskType", "group"]}))
        .done()
}

/// `PUT /api/v1/limits`: a key, maybe a type, and at least one value, each within its bounds.
pub(super) fn key_limit_body() -> Value {
    let set =
        |name: &str, kind: &str| json!({"required": [name], "properties": {name: {"type": kind}}});
    Refined::of::<KeyLimitRequest>()
        .require(&["limitKey"])
        .with("limitKey", json!({"maxLength": MAX_LIMIT_KEY_BYTES}))
        .replace("taskType", optional_task_type(In::Body))
        .with(
            "concurrency",
            json!({"minimum": 1, "maximum": limits::MAX_CONCURRENCY}),
        )
        .with(
            "rate",
            json!({"exclusiveMinimum": 0, "maximum": MAX_KEY_RATE}),
        )
        .with("burst", json!({"minimum": 1, "maximum": MAX_KEY_BURST}))
        .with(
            "weight",
            json!({"minimum": 1, "maximum": limits::MAX_WEIGHT}),
        )
        .and(
            "anyOf",
            json!([
                set("concurrency", "integer"),
                set("rate", "number"),
                set("burst", "integer"),
                set("weight", "integer"),
            ]),
        )
        .done()
}

/// `DELETE /api/v1/limits`: any well-formed key.
pub(super) fn key_limit_query() -> Value {
    Refined::of::<KeyLimitQuery>()
        .require(&["limitKey"])
        .with("limitKey", json!({"maxLength": MAX_LIMIT_KEY_BYTES}))
        .replace("taskType", optional_task_type(In::Query))
        .done()
}

/// `count` of a schedule's next fire times.
pub(super) fn count_query() -> Value {
    Refined::of::<PreviewQuery>()
        .with(
            "count",
            json!({"minimum": 1, "maximum": schedules::MAX_PREVIEW}),
        )
        .done()
}

/// A definition's id (`ScheduleSpec::validate`).
fn definition_id() -> Value {
    json!({"type": "string", "pattern": "^[A-Za-z0-9._:-]{1,200}$"})
}

/// A schedule's id: a definition's, but [`RESERVED_ID`] (the preview's route).
pub(super) fn schedule_id() -> Value {
    let mut id = definition_id();
    id["not"] = json!({"const": RESERVED_ID});
    id
}

/// A schedule's definition: a cron expression (with its time zone) or an interval, not both.
/// A preview's needs no id.
pub(super) fn schedule_body(preview: bool) -> Value {
    let cadences = json!([
        {
            "title": "A cron expression",
            "required": ["cron"],
            "properties": {"cron": {"type": "string"}, "every": {"type": "null"}},
        },
        {
            "title": "A fixed interval (at least 1s)",
            "required": ["every"],
            "properties": {
                "every": {"type": "string"},
                "cron": {"type": "null"},
                "timeZone": {"type": "null"},
            },
        },
    ]);
    let spec = Refined::of::<ScheduleSpec>()
        .with(
            "taskType",
            json!({"pattern": TASK_TYPE_PATTERN, "not": {"pattern": "^scheduler:"}}),
        )
        .with(
            "orderingId",
            json!({"minLength": 1, "maxLength": MAX_ORDERING_ID_BYTES}),
        )
        .and("oneOf", cadences);
    if preview {
        spec.replace("id", json!({"anyOf": [definition_id(), {"const": ""}]}))
            .done()
    } else {
        spec.require(&["id"]).replace("id", schedule_id()).done()
    }
}

/// `POST /api/v1/workers/poll`, within `workers::checked`'s bounds.
pub(super) fn poll_body() -> Value {
    Refined::of::<crate::remote::WorkerPoll>()
        .with(
            "worker",
            json!({"minLength": 1, "maxLength": workers::MAX_NAME}),
        )
        .with(
            "types",
            json!({"minItems": 1, "maxItems": workers::MAX_TYPES, "items": task_type()}),
        )
        .with(
            "capacity",
            json!({"minimum": 1, "maximum": workers::MAX_CAPACITY}),
        )
        .done()
}

/// `POST /api/v1/claims/{claimId}/complete`.
pub(super) fn completion_body() -> Value {
    request::<crate::remote::Completion>().to_value()
}

/// The wire format's task record (design.md "Wire format"), alone or in an array: what a
/// producer writes to the topic. Written out here since the decoder's own type is private to
/// the client crate; a test checks it against the encoder. Its bounds are the decoder's (a
/// key's `maxLength` counts characters, the decoder bytes: the schema's bound is the looser),
/// and so is `null`: the decoder reads an optional field's `null` as absent.
pub(super) fn enqueue_body() -> Value {
    let task = json!({
        "type": "object",
        "required": ["version", "orderingId", "scheduledTime", "uniquenessKey"],
        "properties": {
            "version": {"const": 1},
            "orderingId": {"type": "string", "minLength": 1, "maxLength": MAX_ORDERING_ID_BYTES, "description": "Tasks of one orderingId run one at a time, in order; at most 1,024 bytes"},
            "scheduledTime": {"type": "string", "format": "date-time", "description": "RFC 3339, e.g. 2026-11-22T06:00:00.000Z; at most the grace window in the past"},
            "uniquenessKey": {"type": "string", "minLength": 1, "maxLength": MAX_UNIQUENESS_KEY_BYTES, "description": "With orderingId and scheduledTime, the task's key; at most 1,024 bytes"},
            "taskData": {"type": ["object", "null"], "description": "Handed to the handler; nested at most 64 levels"},
            "taskType": {"type": ["string", "null"], "pattern": TASK_TYPE_PATTERN, "description": "Selects the handler (default \"default\")"},
            "priority": {"type": ["integer", "null"], "format": "int32", "description": "Higher runs first among tasks due together (default 0)"},
            "onConflict": {"enum": ["replace", "keepTime", "debounce", "ifAbsent", null], "description": "Applied to a pending task of the same identity (orderingId and uniquenessKey)"},
            "maxWaitMs": {"type": ["integer", "null"], "minimum": 0, "maximum": MAX_DEBOUNCE_WAIT_MS, "description": "With onConflict debounce: the longest a task is pushed back"},
            "limitKey": {"type": ["string", "null"], "minLength": 1, "maxLength": MAX_LIMIT_KEY_BYTES, "description": "The key per-key limits count the task under (a tenant, an upstream API), independent of orderingId; at most 256 bytes"},
            "group": {
                "type": ["object", "null"],
                "required": ["id", "index"],
                "properties": {
                    "id": {"type": "string", "minLength": 1, "maxLength": MAX_GROUP_ID_BYTES, "description": "At most 1,024 bytes"},
                    "index": {"type": "integer", "minimum": 1, "maximum": MAX_GROUP_NUMBER},
                    "total": {"type": ["integer", "null"], "minimum": 1, "maximum": MAX_GROUP_NUMBER, "description": "The number of members (the largest group is 10,000)"},
                    "failFast": {"type": "boolean"},
                    "joinType": {"type": ["string", "null"], "pattern": TASK_TYPE_PATTERN, "description": "The task type of the group's join task"}
                }
            },
            "type": {"enum": ["task", null], "description": "The record's type: tasks only here (cancel with /api/v1/task/cancel)"}
        }
    });
    json!({
        "oneOf": [task.clone(), {"type": "array", "items": task, "minItems": 1, "maxItems": enqueue::MAX_BATCH}]
    })
}
