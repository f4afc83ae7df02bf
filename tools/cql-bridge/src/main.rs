//! `cql-bridge`: development and test infrastructure that lets a CQL native protocol v4 client
//! (the `scylla` driver) talk to Apache Cassandra 2.1, which speaks only protocol v3.
//!
//! It listens on one address and forwards every connection to the upstream Cassandra, translating
//! frames in both directions (see [`translate`]). Production deployments point the engine at a real
//! Cassandra 3.11+/4.x/5.x or ScyllaDB and never use this bridge.
//!
//! Usage: `cql-bridge --listen 127.0.0.1:19042 --upstream 127.0.0.1:19142`

mod frame;
mod translate;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;

use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tracing::{debug, info, warn};

use crate::frame::Frame;
use crate::translate::{Shared, Translator};

/// Errors that stop the bridge from starting.
#[derive(Debug, thiserror::Error)]
enum StartError {
    #[error("usage: cql-bridge --listen IP:PORT --upstream IP:PORT ({0})")]
    Usage(String),
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        addr: SocketAddr,
        source: std::io::Error,
    },
}

struct Args {
    listen: SocketAddr,
    upstream: SocketAddr,
}

fn parse_args() -> Result<Args, StartError> {
    let mut listen = None;
    let mut upstream = None;
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args
            .next()
            .ok_or_else(|| StartError::Usage(format!("{flag} needs a value")))?;
        let addr: SocketAddr = value
            .parse()
            .map_err(|e| StartError::Usage(format!("{flag} {value}: {e}")))?;
        match flag.as_str() {
            "--listen" => listen = Some(addr),
            "--upstream" => upstream = Some(addr),
            other => return Err(StartError::Usage(format!("unknown flag {other}"))),
        }
    }
    Ok(Args {
        listen: listen.ok_or_else(|| StartError::Usage("--listen is required".into()))?,
        upstream: upstream.ok_or_else(|| StartError::Usage("--upstream is required".into()))?,
    })
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    match run().await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("cql-bridge: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run() -> Result<(), StartError> {
    let args = parse_args()?;
    let listener = TcpListener::bind(args.listen)
        .await
        .map_err(|source| StartError::Listen {
            addr: args.listen,
            source,
        })?;
    // The driver connects back to the address the bridge reports as the node's rpc_address.
    let advertised_ip = match args.listen.ip() {
        IpAddr::V4(ip) if !ip.is_unspecified() => ip,
        _ => Ipv4Addr::LOCALHOST,
    };
    let shared = Shared::new(advertised_ip);
    info!(listen = %args.listen, upstream = %args.upstream, "cql-bridge ready");
    loop {
        let (client, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                warn!(error = %e, "accept failed");
                continue;
            }
        };
        let shared = Arc::clone(&shared);
        let upstream = args.upstream;
        tokio::spawn(async move {
            if let Err(e) = serve(client, upstream, shared).await {
                debug!(%peer, error = %e, "connection ended");
            }
        });
    }
}

/// Relays one client connection to the upstream server until either side closes.
async fn serve(
    client: TcpStream,
    upstream: SocketAddr,
    shared: Arc<Shared>,
) -> std::io::Result<()> {
    let server = match TcpStream::connect(upstream).await {
        Ok(server) => server,
        Err(e) => {
            warn!(%upstream, error = %e, "upstream Cassandra unreachable; closing the client connection");
            return Err(e);
        }
    };
    client.set_nodelay(true)?;
    server.set_nodelay(true)?;
    let translator = Translator::new(shared);
    let (client_read, client_write) = client.into_split();
    let (server_read, server_write) = server.into_split();
    tokio::select! {
        r = pump(client_read, server_write, |f| translator.request(f)) => r,
        r = pump(server_read, client_write, |f| translator.response(f)) => r,
    }
}

/// Copies frames from `from` to `to`, passing each through `translate`. A frame the translator
/// cannot parse is forwarded as it came, with a warning, so that the server reports the problem.
async fn pump<R, W, F>(mut from: R, mut to: W, translate: F) -> std::io::Result<()>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
    F: Fn(&mut Frame) -> Result<(), frame::FrameError>,
{
    loop {
        let mut frame = match Frame::read(&mut from).await {
            Ok(Some(frame)) => frame,
            Ok(None) => return to.shutdown().await,
            Err(e) => return Err(std::io::Error::other(e)),
        };
        if let Err(e) = translate(&mut frame) {
            warn!(opcode = frame.opcode, stream = frame.stream, error = %e, "frame passed through untranslated");
        }
        to.write_all(&frame.encode()).await?;
    }
}
