//! The spans a task's life makes, as a tracing layer sees them (an OpenTelemetry layer maps
//! `otel.*` fields to the span's name and status).

use std::collections::BTreeMap;

use tracing::span::{Attributes, Id, Record};
use tracing::Subscriber;
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::Layer;

use super::*;

#[derive(Debug, Clone)]
struct SpanSeen {
    name: &'static str,
    parent: Option<u64>,
    fields: BTreeMap<&'static str, String>,
    opened: tokio::time::Instant,
    closed: Option<tokio::time::Instant>,
}

/// Every span opened, by id, with its fields as recorded and when it opened and closed.
#[derive(Clone, Default)]
struct Spans(Arc<Mutex<BTreeMap<u64, SpanSeen>>>);

struct Fields<'a>(&'a mut BTreeMap<&'static str, String>);

impl tracing::field::Visit for Fields<'_> {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name(), format!("{value:?}"));
    }
    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        self.0.insert(field.name(), value.to_string());
    }
}

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Spans {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let parent = ctx
            .span(id)
            .and_then(|s| s.parent())
            .map(|p| p.id().into_u64());
        let mut fields = BTreeMap::new();
        attrs.record(&mut Fields(&mut fields));
        let seen = SpanSeen {
            name: attrs.metadata().name(),
            parent,
            fields,
            opened: tokio::time::Instant::now(),
            closed: None,
        };
        self.0.lock().expect("lock").insert(id.into_u64(), seen);
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, _: Context<'_, S>) {
        if let Some(seen) = self.0.lock().expect("lock").get_mut(&id.into_u64()) {
            values.record(&mut Fields(&mut seen.fields));
        }
    }

    fn on_close(&self, id: Id, _: Context<'_, S>) {
        if let Some(seen) = self.0.lock().expect("lock").get_mut(&id.into_u64()) {
            seen.closed = Some(tokio::time::Instant::now());
        }
    }
}

#[test]
fn a_calls_span_lasts_the_call_and_a_dead_lettered_tasks_span_is_an_error() {
    let spans = Spans::default();
    let subscriber = tracing_subscriber::registry().with(spans.clone());
    tracing::subscriber::with_default(subscriber, || {
        run_paused(|| async {
            let h = Harness::new(
                SchedulingSettings::default(),
                Duration::from_millis(7),
                &[("bad", Behaviour::GiveUp)],
            );
            h.assign().await;
            // Due in 5 s: dispatched ahead of its time, called at it.
            h.enqueue(vec![
                task("calm", t0() + ms(5_000), "1"),
                task("bad", t0() + ms(5_000), "1"),
            ])
            .await;
            advance(Duration::from_secs(10)).await;
        });
    });
    let seen = spans.0.lock().expect("lock").clone();
    let task_span = |ordering_id: &str| {
        let (id, span) = (seen.iter())
            .find(|(_, s)| {
                s.name == "task"
                    && s.fields.get("ordering_id").map(String::as_str) == Some(ordering_id)
            })
            .unwrap_or_else(|| panic!("{ordering_id}'s task span in {seen:#?}"));
        (*id, span.clone())
    };
    let (calm_id, calm) = task_span("calm");
    let call = (seen.values())
        .find(|s| s.name == "call" && s.parent == Some(calm_id))
        .expect("calm's call span, a child of its task span");
    let lasted = call.closed.expect("closed") - call.opened;
    assert_eq!(
        lasted,
        Duration::from_millis(7),
        "the call span is the call"
    );
    assert_eq!(
        call.fields.get("otel.name").map(String::as_str),
        Some("execute default")
    );
    assert!(
        calm.closed.expect("closed") - calm.opened >= Duration::from_millis(500),
        "the task's span covers its wait too"
    );
    assert_eq!(calm.fields.get("otel.status_code"), None, "{calm:?}");
    assert_eq!(
        calm.fields
            .get("messaging.destination.name")
            .map(String::as_str),
        Some("harness-topic"),
        "{calm:?}"
    );
    assert_eq!(
        calm.fields.get("outcome").map(String::as_str),
        Some("Completed")
    );

    let (bad_id, bad) = task_span("bad");
    assert_eq!(
        bad.fields.get("otel.status_code").map(String::as_str),
        Some("ERROR"),
        "{bad:?}"
    );
    assert_eq!(
        bad.fields.get("otel.status_message").map(String::as_str),
        Some("invalid payload")
    );
    let bad_call = (seen.values())
        .find(|s| s.name == "call" && s.parent == Some(bad_id))
        .expect("bad's call span");
    assert_eq!(
        bad_call.fields.get("otel.status_code").map(String::as_str),
        Some("ERROR")
    );
}
