//! The document against the router, both ways, and against the types and the wire format.

use axum::http::{Method, StatusCode};
use scheduler_client::{wire, GroupMember, OnConflict, Task};

use super::*;
use crate::admin::test_app::{app, call};

fn documented() -> Vec<(Method, String)> {
    let doc = document();
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
    let doc = document();
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
    let doc = document();
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
/// a body over the limit or not JSON) are documented on the operations they can come from.
#[test]
fn the_listeners_own_refusals_are_documented_on_every_operation() {
    let doc = document();
    for (path, methods) in doc["paths"].as_object().expect("paths") {
        for (method, operation) in methods.as_object().expect("methods") {
            let responses = operation["responses"].as_object().expect("responses");
            for code in ["401", "403"] {
                assert!(responses.contains_key(code), "{method} {path}: {code}");
            }
            let takes_body = operation.get("requestBody").is_some();
            for code in ["413", "415"] {
                assert_eq!(
                    responses.contains_key(code),
                    takes_body,
                    "{method} {path}: {code}"
                );
            }
            let schema = &responses["403"]["content"]["application/json"]["schema"]["$ref"];
            assert_eq!(
                schema, "#/components/schemas/ErrorResponse",
                "{method} {path}"
            );
        }
    }
}

#[test]
fn answers_are_described_by_the_fields_they_serialize() {
    let doc = document();
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
    let properties = &enqueue_body()["oneOf"][0]["properties"];
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
