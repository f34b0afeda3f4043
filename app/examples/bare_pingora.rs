//! The benchmark's bare Pingora target (`scripts/bench`): the workspace's Pingora as a plain
//! pass-through reverse proxy with no filters, built and run like the gateway (same Pingora
//! version and features, same allocator, same server settings, same thread count), so the
//! benchmark can tell Pingora's own cost per request from the gateway's work.
//!
//! `bare_pingora --listen 127.0.0.1:8080 --upstream 127.0.0.1:9000 [--threads 1]`: every request
//! goes to `--upstream` unchanged (path, headers, body), over pooled keep-alive connections.

use async_trait::async_trait;
use clap::Parser;
use pingora::prelude::HttpPeer;
use pingora::proxy::{ProxyHttp, Session, http_proxy_service};
use pingora::server::Server;
use pingora::server::configuration::ServerConf;
use std::net::SocketAddr;
use std::time::Duration;

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
struct Cli {
    /// Where to listen.
    #[arg(long)]
    listen: SocketAddr,
    /// Where every request goes (plain HTTP/1.1).
    #[arg(long)]
    upstream: SocketAddr,
    /// Pingora worker threads (the gateway's `server.threads`).
    #[arg(long, default_value_t = 1)]
    threads: usize,
}

struct Bare {
    upstream: SocketAddr,
}

#[async_trait]
impl ProxyHttp for Bare {
    type CTX = ();

    fn new_ctx(&self) {}

    async fn upstream_peer(
        &self,
        _session: &mut Session,
        _ctx: &mut (),
    ) -> pingora::Result<Box<HttpPeer>> {
        let mut peer = HttpPeer::new(self.upstream, false, String::new());
        // The gateway's peer options (proxy::upstream::accounts::options), minus TLS.
        peer.options.connection_timeout = Some(Duration::from_secs(5));
        peer.options.read_timeout = Some(Duration::from_secs(600));
        peer.options.write_timeout = Some(Duration::from_secs(600));
        Ok(Box::new(peer))
    }
}

fn main() {
    let cli = Cli::parse();
    // The gateway's ServerConf (proxy::server::build_server).
    let conf = ServerConf {
        threads: cli.threads,
        grace_period_seconds: Some(1),
        graceful_shutdown_timeout_seconds: Some(1),
        ..ServerConf::default()
    };
    let mut server = Server::new_with_opt_and_conf(None, conf);
    server.bootstrap();
    let mut service = http_proxy_service(
        &server.configuration,
        Bare {
            upstream: cli.upstream,
        },
    );
    // The gateway's listener settings (its L4 buffers).
    service.add_listener(proxy::listener(&cli.listen.to_string()));
    server.add_service(service);
    server.run_forever()
}
