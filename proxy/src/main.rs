//! `proxy --config FILE [--check]`: run the gateway, or validate its configuration and exit.

use clap::Parser;
use opstate::Stores;
use proxy::{Gateway, Metrics};
use settings::Settings;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

/// mimalloc instead of glibc's allocator: the request path allocates and frees many small buffers
/// across threads; with glibc the gateway used about a third more CPU per request at 64
/// connections in the benchmark (README "Performance").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(name = "proxy", about = "Tollgate gateway", version)]
struct Cli {
    /// The TOML configuration file.
    #[arg(long)]
    config: PathBuf,
    /// Validate the configuration and exit: 0 when valid, 2 with a message naming the bad key.
    #[arg(long)]
    check: bool,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging();
    let settings = match Settings::load(&cli.config) {
        Ok(s) => Arc::new(s),
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "{}: {e}", cli.config.display());
            return ExitCode::from(2);
        }
    };
    if cli.check {
        let _ = writeln!(
            std::io::stdout(),
            "{}: configuration OK ({} models, {} accounts, {} groups)",
            cli.config.display(),
            settings.models.len(),
            settings.accounts.len(),
            settings.groups.len()
        );
        return ExitCode::SUCCESS;
    }
    match run(settings) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            tracing::error!("{message}");
            let _ = writeln!(std::io::stderr(), "proxy: {message}");
            ExitCode::FAILURE
        }
    }
}

/// Starts the background runtime (stores, metrics), then Pingora on the main thread.
fn run(settings: Arc<Settings>) -> Result<(), String> {
    let background = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("tollgate-bg")
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the background runtime: {e}"))?;
    let metrics = Arc::new(Metrics::new().map_err(|e| format!("metrics: {e}"))?);
    let stores = background.block_on(async {
        match &settings.redis {
            Some(r) => Stores::redis(&r.url, &r.key_prefix)
                .await
                .map_err(|e| format!("redis.url: {e}")),
            None => Ok(Stores::memory()),
        }
    })?;
    let (_stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let mut tasks = tokio::task::JoinSet::new();
    let admin = if settings.admin.embedded {
        // Embedded: this process hosts admin-api (on loopback) and owns the ledger database; the
        // key directory is rebuilt from it before the gateway accepts a request.
        let bind = settings
            .admin
            .listen
            .unwrap_or_else(|| std::net::SocketAddr::from(([127, 0, 0, 1], 0)));
        let admin_stop = stop_rx.clone();
        let (addr, loaded) = background.block_on(async {
            let state = admin_api::runtime::state(settings.clone(), stores.clone()).await?;
            let loaded =
                admin_api::runtime::start_background(&state, &mut tasks, admin_stop.clone())
                    .await?;
            let listener = tokio::net::TcpListener::bind(bind)
                .await
                .map_err(|e| format!("admin.listen {bind}: {e}"))?;
            let addr = listener.local_addr().map_err(|e| e.to_string())?;
            tasks.spawn(async move {
                if let Err(e) = admin_api::serve(listener, state, admin_stop).await {
                    tracing::error!(error = %e, "embedded admin-api stopped");
                }
            });
            Ok::<_, String>((addr, loaded))
        })?;
        tracing::info!(admin = %addr, keys = loaded, "embedded admin-api started");
        Some(addr)
    } else {
        settings.admin.listen
    };
    if let Some(m) = &settings.metrics {
        let listener = background
            .block_on(tokio::net::TcpListener::bind(m.listen))
            .map_err(|e| format!("metrics.listen {}: {e}", m.listen))?;
        background.spawn(proxy::serve_metrics(
            listener,
            metrics.clone(),
            stop_rx.clone(),
        ));
    }
    tracing::info!(
        listen = %settings.server.listen,
        base_url = %settings.server.public_base_url,
        store = if settings.redis.is_some() { "redis" } else { "memory" },
        "gateway starting"
    );
    let gateway = Gateway::with_admin(settings.clone(), stores, metrics, admin);
    let server = proxy::build_server(&settings, gateway);
    // run_forever never returns; the background runtime and its tasks live as long as the process.
    let _keep = (tasks, background);
    server.run_forever()
}

/// Log lines go to stderr through a 64 KiB buffer flushed at least every second (and whenever it
/// fills), like nginx's `access_log … buffer=64k flush=1s`: one write per request line cost the
/// gateway a quarter of its CPU per request in the benchmark. Warnings and errors are flushed at
/// once (among them a usage event the stream refused, logged in full so it can be replayed), so a
/// crash loses at most the last second of info lines.
#[derive(Clone)]
struct BufferedStderr(Arc<std::sync::Mutex<std::io::BufWriter<std::io::Stderr>>>);

impl BufferedStderr {
    fn start() -> BufferedStderr {
        let out = BufferedStderr(Arc::new(std::sync::Mutex::new(
            std::io::BufWriter::with_capacity(64 * 1024, std::io::stderr()),
        )));
        let flusher = out.clone();
        let spawned = std::thread::Builder::new()
            .name("log-flush".into())
            .spawn(move || {
                loop {
                    std::thread::sleep(std::time::Duration::from_secs(1));
                    flusher.flush_now();
                }
            });
        if spawned.is_err() {
            let _ = writeln!(
                std::io::stderr(),
                "proxy: log flusher not started; logs may lag"
            );
        }
        out
    }

    fn flush_now(&self) {
        if let Ok(mut w) = self.0.lock() {
            let _ = w.flush();
        }
    }
}

/// One log line's writer: flushes on drop when the line is a warning or an error.
struct LogLine {
    out: BufferedStderr,
    urgent: bool,
}

impl std::io::Write for LogLine {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self.out.0.lock() {
            Ok(mut w) => w.write(buf),
            Err(_) => std::io::stderr().write(buf),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.out.flush_now();
        Ok(())
    }
}

impl Drop for LogLine {
    fn drop(&mut self) {
        if self.urgent {
            self.out.flush_now();
        }
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for BufferedStderr {
    type Writer = LogLine;

    fn make_writer(&'a self) -> LogLine {
        LogLine {
            out: self.clone(),
            urgent: false,
        }
    }

    fn make_writer_for(&'a self, meta: &tracing::Metadata<'_>) -> LogLine {
        LogLine {
            out: self.clone(),
            urgent: *meta.level() <= tracing::Level::WARN,
        }
    }
}

fn init_logging() {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let out = BufferedStderr::start();
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(out);
    if std::env::var("TOLLGATE_LOG_FORMAT").as_deref() == Ok("json") {
        builder.json().init();
    } else {
        builder.init();
    }
}
