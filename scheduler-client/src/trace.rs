//! W3C trace context across Kafka: the producer sends the trace of the operation that scheduled
//! a task as the record's `traceparent` header, and the node links the task's execution to it
//! (OpenTelemetry's messaging conventions), however long the task waited and whichever node
//! ran it. Only the `opentelemetry` API is used here: with `tracing-opentelemetry`'s layer
//! installed, the current tracing span is the current OpenTelemetry context.

use opentelemetry::trace::{SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState};
use opentelemetry::Context;

/// The record header carrying a task's trace context.
pub const TRACEPARENT_HEADER: &str = "traceparent";

/// The current OpenTelemetry span as a W3C `traceparent`, when there is a sampled or recording
/// one (`00-<trace id>-<span id>-<flags>`).
pub fn current_trace_parent() -> Option<String> {
    let context = Context::current();
    let span = context.span();
    let span_context = span.span_context();
    span_context
        .is_valid()
        .then(|| format_trace_parent(span_context))
}

/// A span context as a W3C `traceparent` (version 00).
pub fn format_trace_parent(context: &SpanContext) -> String {
    format!(
        "00-{}-{}-{:02x}",
        context.trace_id(),
        context.span_id(),
        context.trace_flags().to_u8()
    )
}

/// A W3C `traceparent` as a remote span context; `None` unless well formed (version 00, or a
/// later version read as 00 as the specification asks; ids not all zero).
pub fn parse_trace_parent(text: &str) -> Option<SpanContext> {
    let mut parts = text.trim().split('-');
    let version = parts.next().filter(|v| v.len() == 2 && v != &"ff")?;
    let trace_id = parts.next().filter(|t| t.len() == 32)?;
    let span_id = parts.next().filter(|s| s.len() == 16)?;
    let flags = parts.next().filter(|f| f.len() == 2)?;
    if version == "00" && parts.next().is_some() {
        return None;
    }
    u8::from_str_radix(version, 16).ok()?;
    let is_hex = |s: &str| {
        s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    };
    if ![trace_id, span_id, flags].into_iter().all(is_hex) {
        return None;
    }
    let trace_id = TraceId::from_hex(trace_id).ok()?;
    let span_id = SpanId::from_hex(span_id).ok()?;
    let flags = TraceFlags::new(u8::from_str_radix(flags, 16).ok()? & TraceFlags::SAMPLED.to_u8());
    let context = SpanContext::new(trace_id, span_id, flags, true, TraceState::NONE);
    context.is_valid().then_some(context)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trace_parent_reads_back_as_written() {
        let text = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let context = parse_trace_parent(text).expect("well formed");
        assert_eq!(format_trace_parent(&context), text);
        assert!(context.is_remote() && context.is_sampled());
    }

    #[test]
    fn malformed_trace_parents_are_ignored() {
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",
        ] {
            assert!(parse_trace_parent(bad).is_none(), "{bad}");
        }
        // A later version may carry more fields.
        assert!(
            parse_trace_parent("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-more")
                .is_some()
        );
    }

    #[test]
    fn without_a_current_span_there_is_no_trace_parent() {
        assert_eq!(current_trace_parent(), None);
    }

    #[test]
    fn with_tracing_opentelemetry_the_current_tracing_span_is_sent() {
        use opentelemetry::trace::TracerProvider as _;
        use tracing_opentelemetry::OpenTelemetrySpanExt;
        use tracing_subscriber::layer::SubscriberExt;

        let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder().build();
        let subscriber = tracing_subscriber::registry()
            .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("test")));
        tracing::subscriber::with_default(subscriber, || {
            let span = tracing::info_span!("checkout");
            let _entered = span.enter();
            let expected = span.context().span().span_context().clone();
            assert!(expected.is_valid());
            assert_eq!(
                current_trace_parent(),
                Some(format_trace_parent(&expected)),
                "the header carries the current span"
            );
        });
    }
}
