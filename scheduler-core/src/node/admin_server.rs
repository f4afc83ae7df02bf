//! The node's admin HTTP API and dashboard, served on the node's runtime until it is told to
//! stop, with the sampler of the dashboard's charts.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Extension;
use tokio::sync::oneshot;

use super::error::NodeError;
use crate::admin::dashboard::history::{self, Histories};
use crate::admin::{self, AdminState, AllowedHosts};
use crate::settings::AdminSettings;

/// The running admin HTTP API.
pub(super) struct AdminServer {
    pub(super) address: SocketAddr,
    pub(super) stop: oneshot::Sender<()>,
}

/// Binds the admin API of `queues` on the node's runtime and serves it until stopped.
pub(super) async fn start_admin(
    settings: &AdminSettings,
    queues: Vec<Arc<AdminState>>,
    runtime: &tokio::runtime::Runtime,
) -> Result<AdminServer, NodeError> {
    let listen = &settings.listen;
    let addr: SocketAddr = listen.parse().map_err(NodeError::admin(format!(
        "parsing the listen address {listen:?}"
    )))?;
    let listener = runtime
        .spawn(async move { tokio::net::TcpListener::bind(addr).await })
        .await
        .map_err(NodeError::runtime("binding the admin API"))?
        .map_err(NodeError::admin(format!("listening on {addr}")))?;
    let address = listener
        .local_addr()
        .map_err(NodeError::admin("reading the listening address"))?;
    let (stop, stopped) = oneshot::channel::<()>();
    // The dashboard's charts: every queue's metrics sampled while the API is served.
    let histories = Histories::new(queues.iter().map(|q| q.queue.clone()));
    let sampler = queues.first().map(|first| {
        let metrics = Arc::clone(&first.node_metrics);
        runtime.spawn(history::sample(histories.all(), move || metrics.encode()))
    });
    if settings.token.is_none() && !address.ip().is_loopback() {
        // Only with `allow_unauthenticated_remote` (the settings refuse it otherwise).
        tracing::warn!(
            %address,
            "admin listener WITHOUT A TOKEN beyond loopback ([admin] allow_unauthenticated_remote \
             = true): whoever reaches it can enqueue, cancel and redrive tasks and read them all"
        );
    }
    let hosts = AllowedHosts::new(&settings.allowed_hosts);
    let app = admin::listener(queues, hosts)
        .layer(Extension(histories))
        // The peer's address, for the log line of a wrong token.
        .into_make_service_with_connect_info::<SocketAddr>();
    runtime.spawn(async move {
        let served = axum::serve(listener, app)
            .with_graceful_shutdown(async {
                let _ = stopped.await;
            })
            .await;
        if let Some(sampler) = sampler {
            sampler.abort();
        }
        if let Err(e) = served {
            tracing::error!(error = %e, "admin API stopped");
        }
    });
    Ok(AdminServer { address, stop })
}
