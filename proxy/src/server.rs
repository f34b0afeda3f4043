//! Assembling and running the gateway: the production Pingora server, an in-process listener for
//! tests and embedding, and the metrics endpoint.

use crate::gateway::Gateway;
use crate::money::{renew, resend};
use async_trait::async_trait;
use pingora::apps::ServerApp;
use pingora::listeners::{DEFAULT_L4_WRITE_BUFFER_SIZE, L4BufferSettings, ListenerConfig};
use pingora::proxy::{http_proxy, http_proxy_service};
use pingora::server::Server;
use pingora::server::ShutdownWatch;
use pingora::server::configuration::ServerConf;
use pingora::services::background::{BackgroundService, background_service};
use settings::Settings;
use std::sync::Arc;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinSet;

/// The production server: Pingora with `server.threads` workers listening on `server.listen`.
/// Call `run_forever` on the result.
///
/// With `upgrade`, the server takes over the listening sockets of a running proxy: bootstrap
/// waits for them on `server.upgrade_sock` (Pingora's graceful upgrade).
pub fn build_server(settings: &Settings, gateway: Gateway, upgrade: bool) -> Server {
    // A graceful stop waits up to `server.shutdown_grace_ms` for requests in flight (long streams
    // are cut after it and settled from the meter), and ends as soon as none is left (the
    // per-server `set_grace_done` hook of the carried Pingora patch, set in `run_server`).
    let grace = settings.server.shutdown_grace_ms.div_ceil(1000);
    let conf = ServerConf {
        threads: settings.server.threads,
        grace_period_seconds: Some(grace),
        graceful_shutdown_timeout_seconds: Some(5),
        upgrade_sock: settings.server.upgrade_sock.display().to_string(),
        ..ServerConf::default()
    };
    let opt = pingora::server::configuration::Opt {
        upgrade,
        ..Default::default()
    };
    let mut server = Server::new_with_opt_and_conf(Some(opt), conf);
    server.bootstrap();
    let renewer = background_service("hold renewal", HoldRenewer(gateway.clone()));
    let mut service = http_proxy_service(&server.configuration, gateway);
    service.add_listener(listener(&settings.server.listen.to_string()));
    server.add_service(service);
    server.add_service(renewer);
    server
}

/// Runs `server` until it is stopped: `SIGTERM` stops accepting and lets the calls in flight
/// finish within `server.shutdown_grace_ms`, returning as soon as none of `gateway`'s is left;
/// `SIGINT` stops at once; `SIGQUIT` hands the listening sockets to an upgrading process first.
pub fn run_server(mut server: Server, gateway: &Gateway) {
    let watched = gateway.clone();
    server.set_grace_done(move || watched.in_flight() == 0);
    server.run(pingora::server::RunArgs::default());
}

/// The listening endpoint, with the downstream buffers the gateway uses.
///
/// Decision (README "Performance"): no L4 read buffer. Pingora's default gives every downstream
/// connection a zero-filled 64 KiB read buffer kept for the connection's whole life, idle
/// keep-alive included (most of the ~100 KiB an idle connection cost); plaintext HTTP/1 reads go
/// straight into the request's own header and body buffers without it. The small write buffer
/// stays: it lets a short answer's header and body leave in one send.
pub fn listener(addr: &str) -> ListenerConfig {
    let buffers = L4BufferSettings::new(0, DEFAULT_L4_WRITE_BUFFER_SIZE);
    ListenerConfig::tcp(addr).l4_buffer(buffers)
}

/// The gateway's own background work until `shutdown` turns true: keeping the holds of its calls
/// in progress open past their deadline (`money::renew`), re-sending its recent usage events
/// when the store lost them (`money::resend`), and writing hosted images to the store
/// (`media::Pending`), renewing the claims of the batch lines it serves (`batch::renew_claims`),
/// and keeping the key cache fresh (`auth::watch_keys`). Runs beside the gateway: a Pingora background
/// service in production, a tracked task of [`serve_listener`] in tests.
pub async fn renew_holds(gateway: Gateway, shutdown: watch::Receiver<bool>) {
    let s = gateway.shared;
    let ttl = s.settings.money.hold_ttl_ms;
    let proxy = format!("{}-{}", std::process::id(), uuid::Uuid::new_v4().simple());
    tokio::join!(
        renew::run(
            &s.live_holds,
            || s.stores().wallets.clone(),
            ttl,
            shutdown.clone()
        ),
        resend::run(
            &s.recent,
            || s.stores().clone(),
            &proxy,
            &s.live_holds,
            &s.metrics,
            shutdown.clone()
        ),
        s.pending_media
            .run(|| s.stores().media.clone(), shutdown.clone()),
        crate::video::sweep::run(&s, shutdown.clone()),
        crate::batch::renew_claims(&s, shutdown.clone()),
        crate::auth::watch_keys(&s, shutdown),
    );
}

struct HoldRenewer(Gateway);

#[async_trait]
impl BackgroundService for HoldRenewer {
    async fn start(&self, shutdown: ShutdownWatch) {
        renew_holds(self.0.clone(), shutdown).await;
    }
}

/// Serves the gateway on an already bound listener, on the caller's runtime, until `shutdown`
/// turns true. Tests bind `127.0.0.1:0`; connections in progress are dropped at shutdown.
pub async fn serve_listener(
    listener: TcpListener,
    gateway: Gateway,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut connections = JoinSet::new();
    connections.spawn(renew_holds(gateway.clone(), shutdown.clone()));
    let app = Arc::new(http_proxy(&Arc::new(ServerConf::default()), gateway));
    loop {
        tokio::select! {
            _ = shutdown.changed() => break,
            accepted = listener.accept() => match accepted {
                Ok((tcp, peer)) => {
                    let _ = tcp.set_nodelay(true);
                    let app = app.clone();
                    let stop = shutdown.clone();
                    connections.spawn(async move {
                        let mut l4 = pingora::protocols::l4::stream::Stream::from(tcp);
                        // The client's address, as Pingora's own listener records it.
                        let digest = pingora::protocols::SocketDigest::from_raw_fd(
                            std::os::fd::AsRawFd::as_raw_fd(&l4),
                        );
                        let _ = digest.peer_addr.set(Some(peer.into()));
                        pingora::protocols::GetSocketDigest::set_socket_digest(&mut l4, digest);
                        let mut stream: pingora::protocols::Stream = Box::new(l4);
                        while let Some(next) = app.process_new(stream, &stop).await {
                            stream = next;
                        }
                    });
                }
                Err(e) => tracing::warn!(error = %e, "accept failed"),
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
    connections.abort_all();
}

/// Serves the metrics listener until `shutdown` turns true: `GET /metrics` (Prometheus text),
/// `GET /healthz` (200 while the process answers) and `GET /readyz` (200 when `gateway` can
/// serve calls, else 503; see `crate::health`).
pub async fn serve_metrics(
    listener: TcpListener,
    gateway: Gateway,
    mut shutdown: watch::Receiver<bool>,
) {
    let scraped = gateway.clone();
    let app = axum::Router::new()
        .route(
            "/metrics",
            axum::routing::get(move || {
                let gateway = scraped.clone();
                async move {
                    crate::control::refresh_gauges(&gateway.shared);
                    crate::control::refresh_store_gauges(&gateway.shared).await;
                    (
                        [(http::header::CONTENT_TYPE, "text/plain; version=0.0.4")],
                        gateway.shared.metrics.render(),
                    )
                }
            }),
        )
        .route(
            "/healthz",
            axum::routing::get(|| async { axum::Json(serde_json::json!({"status": "ok"})) }),
        )
        .route(
            "/readyz",
            axum::routing::get(move || {
                let gateway = gateway.clone();
                async move {
                    let readiness = gateway.readiness().await;
                    let status = if readiness.ready {
                        http::StatusCode::OK
                    } else {
                        http::StatusCode::SERVICE_UNAVAILABLE
                    };
                    (status, axum::Json(readiness.body))
                }
            }),
        );
    let stop = async move {
        let _ = shutdown.wait_for(|stop| *stop).await;
    };
    if let Err(e) = axum::serve(listener, app)
        .with_graceful_shutdown(stop)
        .await
    {
        tracing::error!(error = %e, "metrics endpoint stopped");
    }
}
