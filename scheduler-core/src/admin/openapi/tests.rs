//! The document against the router, both ways, and against the types and the wire format.

use axum::http::{Method, StatusCode};
use scheduler_client::{wire, GroupMember, OnConflict, Task};

use super::*;
use crate::admin::test_app::{app, call, state};

fn documented() -> Vec<(Method, String)> {
    let doc = document(true);
    let mut found = Vec::new();
    for (path, methods) in doc["paths"].as_object().expect("paths") {
        for method in methods.as_object().expect("methods").keys() {
            let method = Method::from_bytes(method.to_uppercase().as_bytes()).expect("a method");
            found.push((method, path.replace("{id}", "some-id")));
        }
    }
    found
}

#[tokio::test]
async fn every_documented_operation_is_routed_and_no_other_method_is() {
    let app = app();
    let documented = documented();
    assert!(documented.len() >= 24, "{documented:?}");
    for (method, path) in &documented {
        for prefix in ["", "/queues/default"] {
            let (status, body) = call(&app, method.clone(), None, &format!("{prefix}{path}")).await;
            assert_ne!(
                status,
                StatusCode::METHOD_NOT_ALLOWED,
                "{method} {prefix}{path}"
            );
            assert!(
                !body.contains("no such endpoint"),
                "{method} {prefix}{path} is documented but not routed: {status} {body}"
            );
        }
        for other in [Method::GET, Method::POST, Method::DELETE, Method::PUT] {
            if documented.iter().any(|(m, p)| m == other && p == path) {
                continue;
            }
            let (status, _) = call(&app, other.clone(), None, path).await;
            assert_eq!(
                status,
                StatusCode::METHOD_NOT_ALLOWED,
                "{other} {path} answers but is not documented"
            );
        }
    }
}

#[test]
fn every_route_of_the_router_is_documented() {
    // The router's source is the list of its routes: each `.route("...")` of a queue's.
    let source = include_str!("../mod.rs");
    let doc = document(false);
    let routes: Vec<&str> = source
        .split(".route(")
        .skip(1)
        .filter_map(|rest| rest.trim_start().strip_prefix('"')?.split('"').next())
        .collect();
    assert!(routes.len() >= 18, "{routes:?}");
    for route in routes {
        assert!(
            doc["paths"].get(route).is_some(),
            "route {route} is not in the OpenAPI document"
        );
    }
}

#[test]
fn the_document_is_openapi_3_1_with_resolvable_references() {
    for token in [false, true] {
        openapi_3_1_with_resolvable_references(&document(token));
    }
}

fn openapi_3_1_with_resolvable_references(doc: &Value) {
    assert_eq!(doc["openapi"], "3.1.0");
    let text = doc.to_string();
    let schemas = doc["components"]["schemas"].as_object().expect("schemas");
    for reference in text.split("\"$ref\":\"").skip(1) {
        let target = reference.split('"').next().expect("a reference");
        let name = target
            .strip_prefix("#/components/schemas/")
            .unwrap_or_else(|| panic!("a reference outside components: {target}"));
        assert!(schemas.contains_key(name), "dangling reference {target}");
    }
    let mut ids: Vec<&str> = doc["paths"]
        .as_object()
        .expect("paths")
        .values()
        .flat_map(|m| m.as_object().expect("methods").values())
        .map(|op| op["operationId"].as_str().expect("an id"))
        .collect();
    let count = ids.len();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), count, "operation ids are unique");
}

/// The answers the listener gives before any route (a token, a Host, a cross-site request,
/// a method the path does not take, a URI over the limit, a body over the limit or not JSON)
/// are documented on the operations they can come from; the token only on a node with one.
#[test]
fn the_listeners_own_refusals_are_documented_on_every_operation() {
    for token in [false, true] {
        let doc = document(token);
        assert_eq!(doc.get("security").is_some(), token);
        for (path, methods) in doc["paths"].as_object().expect("paths") {
            for (method, operation) in methods.as_object().expect("methods") {
                let responses = operation["responses"].as_object().expect("responses");
                assert_eq!(responses.contains_key("401"), token, "{method} {path}");
                for code in ["403", "405", "414"] {
                    assert!(responses.contains_key(code), "{method} {path}: {code}");
                }
                let takes_body = operation.get("requestBody").is_some();
                assert_eq!(responses.contains_key("413"), takes_body, "{method} {path}");
                assert_eq!(
                    responses.contains_key("415"),
                    method != "get",
                    "{method} {path}"
                );
                let schema = &responses["405"]["content"]["application/json"]["schema"]["$ref"];
                assert_eq!(
                    schema, "#/components/schemas/ErrorResponse",
                    "{method} {path}"
                );
                assert_eq!(
                    responses["405"]["headers"]["Allow"]["required"], true,
                    "{method} {path}"
                );
            }
        }
    }
}

/// The document a node serves is its own: with its token's security, or without.
#[tokio::test]
async fn the_document_served_says_whether_the_node_takes_a_token() {
    let (status, body) = call(&app(), Method::GET, None, "/api/v1/openapi.json").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let served: Value = serde_json::from_str(&body).expect("JSON");
    assert_eq!(served, document(false));
    let state = AdminState {
        token: Some("t".into()),
        ..state(std::sync::Arc::new(crate::store::memory::MemoryStore::new()))
    };
    let with_token = crate::admin::router(vec![std::sync::Arc::new(state)]);
    let request = axum::http::Request::builder()
        .uri("/queues/default/api/v1/openapi.json")
        .header(axum::http::header::AUTHORIZATION, "Bearer t")
        .body(axum::body::Body::empty())
        .expect("a request");
    let response = tower::ServiceExt::oneshot(with_token, request)
        .await
        .expect("infallible");
    assert_eq!(response.status(), StatusCode::OK);
    let bytes = axum::body::to_bytes(response.into_body(), 1 << 22)
        .await
        .expect("a body");
    let served: Value = serde_json::from_slice(&bytes).expect("JSON");
    assert_eq!(served, document(true));
    assert_eq!(served["security"], serde_json::json!([{"bearer": []}]));
}

#[test]
fn answers_are_described_by_the_fields_they_serialize() {
    let doc = document(false);
    let task = &doc["components"]["schemas"]["TaskResponse"]["properties"];
    for field in [
        "orderingId",
        "scheduledTime",
        "uniquenessKey",
        "status",
        "history",
    ] {
        assert!(task.get(field).is_some(), "TaskResponse.{field}: {task}");
    }
    let query = &doc["paths"]["/api/v1/task"]["get"]["parameters"];
    let names: Vec<&str> = query
        .as_array()
        .expect("parameters")
        .iter()
        .filter_map(|p| p["name"].as_str())
        .collect();
    assert_eq!(
        names,
        ["history", "orderingId", "scheduledTime", "uniquenessKey"]
    );
    let schedule = &doc["paths"]["/api/v1/schedules"]["post"]["requestBody"]["content"]
        ["application/json"]["schema"]["properties"];
    assert!(schedule.get("catchUpWindow").is_some(), "{schedule}");
    assert_eq!(
        schedule["every"]["type"],
        serde_json::json!(["string", "null"])
    );
}

#[test]
fn the_enqueue_body_has_every_field_the_encoder_writes() {
    let properties = &requests::enqueue_body()["oneOf"][0]["properties"];
    let mut data = serde_json::Map::new();
    data.insert("k".into(), serde_json::json!(1));
    let mut grouped = Task::new("o", chrono::Utc::now(), "u", data)
        .of_type("t")
        .with_priority(3)
        .in_group(GroupMember::new("g", 1).of(2).fail_fast().joined_by("j"));
    grouped.task_type = "t".into();
    let debounced = Task::new("o", chrono::Utc::now(), "u", Default::default()).on_conflict(
        OnConflict::Debounce {
            max_wait: std::time::Duration::from_secs(1),
        },
    );
    for task in [grouped, debounced] {
        let record: serde_json::Value = serde_json::from_slice(&wire::encode(&task)).expect("JSON");
        for (field, value) in record.as_object().expect("an object") {
            assert!(properties.get(field).is_some(), "{field} is not documented");
            if let Some(nested) = value.as_object() {
                for inner in nested.keys().filter(|_| field == "group") {
                    assert!(
                        properties["group"]["properties"].get(inner).is_some(),
                        "group.{inner} is not documented"
                    );
                }
            }
        }
    }
    // Every bounded field states its bound (the decoder refuses beyond it).
    let group = &properties["group"]["properties"];
    for (schema, bound) in [
        (&properties["orderingId"], "maxLength"),
        (&properties["uniquenessKey"], "maxLength"),
        (&properties["maxWaitMs"], "maximum"),
        (&group["id"], "maxLength"),
        (&group["index"], "maximum"),
        (&group["total"], "maximum"),
    ] {
        assert!(schema.get(bound).is_some(), "{schema} has no {bound}");
    }
    let largest = serde_json::json!(wire::MAX_GROUP_NUMBER);
    assert_eq!(group["total"]["maximum"], largest);
}

/// A value of each required query parameter the handlers take, and the body of the one
/// operation with both a query and a body.
fn sample(parameter: &str) -> &'static str {
    match parameter {
        "from" => "2026-11-22T06:00:00.000Z",
        "to" => "2026-11-22T07:00:00.000Z",
        "kind" => "taskType",
        _ => "x",
    }
}

fn sample_body(method: &str, path: &str) -> Option<&'static str> {
    (method == "post" && path == "/api/v1/schedules/preview")
        .then_some(r#"{"every": "1m", "taskType": "t"}"#)
}

/// Every operation with query parameters: (method, path, its parameters).
fn with_query(doc: &Value) -> Vec<(String, String, Vec<Value>)> {
    let mut found = Vec::new();
    for (path, methods) in doc["paths"].as_object().expect("paths") {
        for (method, operation) in methods.as_object().expect("methods") {
            let query: Vec<Value> = (operation["parameters"].as_array().into_iter().flatten())
                .filter(|p| p["in"] == "query")
                .cloned()
                .collect();
            if !query.is_empty() {
                found.push((method.clone(), path.replace("{id}", "some-id"), query));
            }
        }
    }
    found
}

/// `method path?query` through the router: status and error.
async fn ask(method: &str, path: &str, query: &[(String, String)]) -> (StatusCode, String) {
    // (The samples need no escaping.)
    let query: Vec<String> = query.iter().map(|(n, v)| format!("{n}={v}")).collect();
    let query = query.join("&");
    let method = Method::from_bytes(method.to_uppercase().as_bytes()).expect("a method");
    let body = sample_body(method.as_str().to_lowercase().as_str(), path);
    call(&app(), method, body, &format!("{path}?{query}")).await
}

/// The required parameters with a sample each, but `leaving` out.
fn required_but(parameters: &[Value], leaving: &str) -> Vec<(String, String)> {
    (parameters.iter())
        .filter(|p| p["required"] == true)
        .filter_map(|p| p["name"].as_str())
        .filter(|name| *name != leaving)
        .map(|name| (name.to_string(), sample(name).to_string()))
        .collect()
}

/// Each query parameter the document calls required is one the handler refuses to go
/// without, naming it.
#[tokio::test]
async fn every_required_query_parameter_is_required_by_its_handler() {
    let doc = document(false);
    let mut checked = 0;
    for (method, path, parameters) in with_query(&doc) {
        let required = (parameters.iter()).filter(|p| p["required"] == true);
        for name in required.filter_map(|p| p["name"].as_str()) {
            let (status, body) = ask(&method, &path, &required_but(&parameters, name)).await;
            assert_eq!(
                status,
                StatusCode::BAD_REQUEST,
                "{method} {path} without {name}: {body}"
            );
            assert!(
                body.contains(name),
                "{method} {path} without {name}: {body}"
            );
            checked += 1;
        }
    }
    // orderingId and uniquenessKey (task), from and to (tasks), kind and target (suspensions),
    // limitKey (limits).
    assert_eq!(checked, 7);
}

/// Each bound of an integer query parameter the document states is the handler's: the bound
/// itself is taken, one past it refused, naming the parameter.
#[tokio::test]
async fn every_bound_of_a_query_parameter_is_the_handlers() {
    let doc = document(false);
    let mut checked = Vec::new();
    for (method, path, parameters) in with_query(&doc) {
        for parameter in &parameters {
            let name = parameter["name"].as_str().expect("a name");
            let schema = &parameter["schema"];
            if schema["type"] != "integer" {
                continue;
            }
            let bounds = [
                (schema["maximum"].as_i64(), 1),
                (schema["minimum"].as_i64().filter(|m| *m > 0), -1),
            ];
            for (bound, past) in bounds.into_iter().filter_map(|(b, p)| Some((b?, p))) {
                let mut query = required_but(&parameters, "");
                query.push((name.to_string(), bound.to_string()));
                let (status, body) = ask(&method, &path, &query).await;
                assert_ne!(
                    status,
                    StatusCode::BAD_REQUEST,
                    "{method} {path} {name}={bound}: {body}"
                );
                let last = query.len() - 1;
                query[last].1 = (bound + past).to_string();
                let (status, body) = ask(&method, &path, &query).await;
                assert_eq!(
                    status,
                    StatusCode::BAD_REQUEST,
                    "{method} {path} {name}={}: {body}",
                    bound + past
                );
                assert!(body.contains(name), "{body}");
                checked.push(format!("{method} {path} {name} {bound}"));
            }
        }
    }
    // history (task), limit (tasks, dead letters), count (a schedule, a preview): their
    // maximum, and the minimum of those that have one above 0.
    assert_eq!(checked.len(), 9, "{checked:?}");
}

/// The examples the document gives are requests their handlers take (those that need no
/// broker: the others run against a node in `it-tests/tests/openapi_contract.rs`).
#[tokio::test]
async fn the_examples_are_requests_their_handlers_take() {
    let doc = document(false);
    let app = app();
    let mut taken = 0;
    for (path, methods) in doc["paths"].as_object().expect("paths") {
        for (method, operation) in methods.as_object().expect("methods") {
            let media = &operation["requestBody"]["content"]["application/json"];
            let Some(example) = media.get("example") else {
                continue;
            };
            let needs_the_broker = [
                "/api/v1/tasks",
                "/api/v1/task/cancel",
                "/api/v1/task/reschedule",
            ];
            if needs_the_broker.contains(&path.as_str())
                || path.contains("workers")
                || path.contains("claims")
            {
                continue;
            }
            let verb = Method::from_bytes(method.to_uppercase().as_bytes()).expect("a method");
            let (status, body) = call(&app, verb, Some(&example.to_string()), path).await;
            assert!(
                status.is_success(),
                "{method} {path} {example}: {status} {body}"
            );
            taken += 1;
        }
    }
    // Redrive, purge, suspend, a limit, a schedule and a preview.
    assert_eq!(taken, 6);
}

/// Whether `schema` allows `null`.
fn allows_null(schema: &Value) -> bool {
    let listed = |key: &str| {
        (schema[key].as_array().into_iter().flatten()).any(|v| v.is_null() || v == "null")
    };
    schema["type"] == "null" || listed("type") || listed("enum")
}

/// The document allows `null` in a task's field exactly where the decoder reads it as absent
/// (it said `onConflict` was one of four names; the decoder took `null` too).
#[test]
fn a_task_field_may_be_null_where_the_decoder_takes_null() {
    let task = &requests::enqueue_body()["oneOf"][0];
    let state = state(std::sync::Arc::new(crate::store::memory::MemoryStore::new()));
    let now = chrono::Utc::now();
    let due = wire::format_time(now + chrono::TimeDelta::minutes(5));
    let base = serde_json::json!({"version": 1, "orderingId": "o", "scheduledTime": due, "uniquenessKey": "u"});
    let taken = |record: &Value| {
        let raw = serde_json::value::RawValue::from_string(record.to_string()).expect("JSON");
        crate::admin::enqueue::check(&state, &raw, now).is_ok()
    };
    assert!(taken(&base));
    let mut checked = 0;
    for (name, schema) in task["properties"].as_object().expect("properties") {
        let mut record = base.clone();
        record[name] = Value::Null;
        assert_eq!(taken(&record), allows_null(schema), "{name}: null");
        checked += 1;
    }
    let group = &task["properties"]["group"]["properties"];
    for (name, schema) in group.as_object().expect("the group's properties") {
        let mut record = base.clone();
        record["group"] = serde_json::json!({"id": "g", "index": 1});
        record["group"][name] = Value::Null;
        assert_eq!(taken(&record), allows_null(schema), "group.{name}: null");
        checked += 1;
    }
    assert_eq!(checked, 17);
}

/// A preview's definition may have the id no schedule can (it is never stored): the document
/// refused it on the preview, which takes it.
#[test]
fn only_a_created_schedule_is_refused_the_reserved_id() {
    let doc = document(false);
    let id = |path: &str| {
        let body = &doc["paths"][path]["post"]["requestBody"]["content"]["application/json"];
        body["schema"]["properties"]["id"].to_string()
    };
    assert!(
        id("/api/v1/schedules").contains("\"not\""),
        "{}",
        id("/api/v1/schedules")
    );
    assert!(!id("/api/v1/schedules/preview").contains("\"not\""));
}

/// No query parameter's schema admits `null` (a query has none: an absent parameter is absent),
/// whatever form the derived schema gives an optional field: a type, a value, a choice.
#[test]
fn no_query_parameter_admits_null() {
    let doc = document(false);
    for (method, path, parameters) in with_query(&doc) {
        for parameter in parameters {
            let schema = &parameter["schema"];
            assert!(
                !schema.to_string().contains("null"),
                "{method} {path}: {parameter}"
            );
        }
    }
    let optional_enum = serde_json::json!({"anyOf": [{"enum": ["a", "b"]}, {"type": "null"}]});
    assert_eq!(
        without_null(optional_enum),
        serde_json::json!({"enum": ["a", "b"]})
    );
    let nullable = serde_json::json!({"type": ["integer", "null"], "enum": [1, null]});
    assert_eq!(
        without_null(nullable),
        serde_json::json!({"type": "integer", "enum": [1]})
    );
}
