//! `proxy --config FILE [--check]`: run the gateway, or validate its configuration and exit.

use clap::Parser;
use opstate::Stores;
use proxy::{Gateway, Metrics};
use settings::Settings;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

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
    if settings.admin.embedded {
        // Embedded: this process owns the ledger database; the key directory is rebuilt from it
        // before the gateway accepts a request.
        let url = &settings.require_database().map_err(|e| e.to_string())?.url;
        let loaded = background.block_on(async {
            admin_api::db::prepare_sqlite_path(url).map_err(|e| format!("database.url: {e}"))?;
            let db = admin_api::db::connect(url)
                .await
                .map_err(|e| format!("database.url: {e}"))?;
            admin_api::db::migrate(&db)
                .await
                .map_err(|e| format!("migrations: {e}"))?;
            admin_api::keys::rebuild_directory(&db, stores.keys.as_ref())
                .await
                .map_err(|e| format!("key directory: {e}"))
        })?;
        tracing::info!(keys = loaded, "key directory loaded from the database");
    }
    let (_stop_tx, stop_rx) = tokio::sync::watch::channel(false);
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
    let gateway = Gateway::new(settings.clone(), stores, metrics);
    let server = proxy::build_server(&settings, gateway);
    // run_forever never returns; the background runtime lives as long as the process.
    server.run_forever()
}

fn init_logging() {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    if std::env::var("TOLLGATE_LOG_FORMAT").as_deref() == Ok("json") {
        builder.json().init();
    } else {
        builder.init();
    }
}
