//! The process's logging and, for `scheduler node` with `[telemetry] otlp_endpoint` set, trace
//! export: the node's spans go through `tracing-opentelemetry` to a batch exporter speaking
//! OTLP/HTTP (protobuf), flushed when the command ends.

use std::ffi::OsString;

use clap::Parser;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::trace::SdkTracerProvider;
use opentelemetry_sdk::Resource;
use scheduler_core::settings::{Settings, TelemetrySettings};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::Layer;

use crate::args::{Cli, Command};

/// Exports the process's spans until dropped, then flushes them.
pub struct Exporting(SdkTracerProvider);

impl Drop for Exporting {
    fn drop(&mut self) {
        if let Err(e) = self.0.shutdown() {
            eprintln!("scheduler: flushing the trace export failed: {e}");
        }
    }
}

/// The telemetry settings of the command line `args` when it runs a node (its settings file and
/// the environment, as the node reads them); `None` for other commands or unreadable settings,
/// which the command itself then reports.
pub fn telemetry_of(args: &[OsString]) -> Option<TelemetrySettings> {
    match Cli::try_parse_from(args).ok()?.command {
        Command::Node(node) => Some(Settings::load(node.settings.as_deref()).ok()?.telemetry),
        _ => None,
    }
}

/// Whether the command line `args` runs a node (`scheduler node`).
pub fn runs_a_node(args: &[OsString]) -> bool {
    Cli::try_parse_from(args).is_ok_and(|cli| matches!(cli.command, Command::Node(_)))
}

/// Sets up logging to stderr: `RUST_LOG` filters (default: warnings, and a node's info), and
/// `SCHEDULER_LOG_FORMAT=json` writes JSON lines instead of text (coloured only on a terminal).
/// Task data is never logged above debug level. With `telemetry`'s `otlp_endpoint`, spans are
/// exported too, until the returned guard is dropped.
pub fn init_logging(telemetry: Option<&TelemetrySettings>, node: bool) -> Option<Exporting> {
    // The drivers' own connection warnings repeat what the engine reports with more context
    // (and would bury a failed start's one error line); RUST_LOG brings them back. A command
    // other than a node says in its one error line what failed: librdkafka's retries (a line
    // per reconnect while a broker is down) are not shown.
    let default = match node {
        true => "warn,scheduler_core=info,scylla=off,rdkafka=error",
        false => "warn,scheduler_core=info,scylla=off,rdkafka=off,librdkafka=off",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    // Colours only on a terminal: a log file or a journal gets plain text.
    let terminal = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let json = std::env::var("SCHEDULER_LOG_FORMAT").is_ok_and(|f| f.eq_ignore_ascii_case("json"));
    let text = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(terminal);
    let logs = if json {
        text.json().boxed()
    } else {
        text.boxed()
    };
    let exporting = telemetry.and_then(|t| match provider(t) {
        Ok(provider) => provider,
        Err(e) => {
            eprintln!("scheduler: trace export is off: {e}");
            None
        }
    });
    let traces = exporting.as_ref().map(|Exporting(provider)| {
        tracing_opentelemetry::layer().with_tracer(provider.tracer("scheduler"))
    });
    tracing_subscriber::registry()
        .with(filter)
        .with(logs)
        .with(traces)
        .init();
    exporting
}

/// The tracer provider exporting to `telemetry.otlp_endpoint`, if set.
fn provider(
    telemetry: &TelemetrySettings,
) -> Result<Option<Exporting>, opentelemetry_otlp::ExporterBuildError> {
    let Some(endpoint) = &telemetry.otlp_endpoint else {
        return Ok(None);
    };
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
        .with_endpoint(format!("{}/v1/traces", endpoint.trim_end_matches('/')))
        .with_headers(Default::default())
        .build()?;
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(
            Resource::builder()
                .with_service_name(telemetry.service_name.clone())
                .build(),
        )
        .build();
    Ok(Some(Exporting(provider)))
}
