//! The `mock-supplier` binary: serves one mock instance on a fixed address
//! (for the quickstart and benchmarks) until SIGINT or SIGTERM. Prints one
//! line, `mock supplier listening on http://ADDR/v1`, once it accepts
//! connections (Anthropic and Gemini clients use `http://ADDR`). The request
//! log is cleared every second (nothing reads it).

use std::io::Write;
use std::net::SocketAddr;
use std::time::Duration;

use clap::Parser;
use mock_supplier::{MockConfig, MockSupplier};

/// A fault-injecting mock supplier speaking the OpenAI, Anthropic and Gemini formats.
#[derive(Debug, Parser)]
#[command(name = "mock-supplier", version, about)]
struct Args {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:9901")]
    listen: SocketAddr,
    /// Require the key in each format's auth header (`Authorization: Bearer <KEY>`,
    /// `x-api-key: <KEY>`, `x-goog-api-key: <KEY>` or `?key=<KEY>`); without it any key is
    /// accepted.
    #[arg(long)]
    api_key: Option<String>,
    /// Instance name, echoed in the `x-mock-name` response header.
    #[arg(long, default_value = "mock")]
    name: String,
    /// A fault every request gets unless it sends its own `x-mock-fault` (same syntax, e.g.
    /// `status=429;retry_after=0`).
    #[arg(long)]
    fault: Option<mock_supplier::Fault>,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let config = MockConfig {
        api_key: args.api_key,
        name: args.name,
    };
    let mock = MockSupplier::start_on(args.listen, config).await?;
    mock.set_fault(args.fault);
    {
        let mut out = std::io::stdout().lock();
        writeln!(out, "mock supplier listening on {}", mock.base_url())?;
        out.flush()?;
    }
    // Nobody reads the request log of the standalone binary; forget it
    // regularly so long benchmark runs do not grow memory without bound.
    let mut forget = tokio::time::interval(Duration::from_secs(1));
    let signal = wait_for_signal();
    tokio::pin!(signal);
    loop {
        tokio::select! {
            r = &mut signal => {
                mock.shutdown();
                return Ok(r?);
            }
            _ = forget.tick() => mock.clear_requests(),
        }
    }
}

/// Resolves on SIGINT (Ctrl-C) or, on Unix, SIGTERM.
async fn wait_for_signal() -> std::io::Result<()> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let mut term = signal(SignalKind::terminate())?;
        tokio::select! {
            r = tokio::signal::ctrl_c() => r,
            _ = term.recv() => Ok(()),
        }
    }
    #[cfg(not(unix))]
    {
        tokio::signal::ctrl_c().await
    }
}
