//! `admin-api --config FILE [COMMAND]`: run the admin service, or an operator command.

use admin_api::{AppState, db, demo};
use clap::{Parser, Subcommand};
use credentials::{Env, KeyHasher};
use opstate::Stores;
use settings::{Environment, Settings};
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "admin-api",
    about = "Tollgate admin service and operator commands",
    version
)]
struct Cli {
    /// The TOML configuration file (the same one the proxy reads).
    #[arg(long)]
    config: PathBuf,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Validate the configuration and exit.
    Check,
    /// Quickstart: ensure a demo organization and print a fresh customer key for it (JSON).
    Demo {
        /// Model group of the key.
        #[arg(long, default_value_t = 1)]
        group: i64,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
    let settings = match Settings::load(&cli.config) {
        Ok(s) => s,
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "{}: {e}", cli.config.display());
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "admin-api: cannot start a runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(settings, cli.command)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            let _ = writeln!(std::io::stderr(), "admin-api: {message}");
            ExitCode::FAILURE
        }
    }
}

async fn run(settings: Settings, command: Option<Command>) -> Result<(), String> {
    let database = settings.require_database().map_err(|e| e.to_string())?;
    if let Some(Command::Check) = command {
        let _ = writeln!(std::io::stdout(), "configuration OK");
        return Ok(());
    }
    db::prepare_sqlite_path(&database.url).map_err(|e| format!("database.url: {e}"))?;
    let conn = db::connect(&database.url)
        .await
        .map_err(|e| format!("database.url: {e}"))?;
    db::migrate(&conn)
        .await
        .map_err(|e| format!("migrations: {e}"))?;
    let env = match settings.server.environment {
        Environment::Production => Env::Live,
        Environment::Development => Env::Dev,
    };
    match command {
        Some(Command::Check) => Ok(()),
        Some(Command::Demo { group }) => {
            if settings.group(group).is_none() {
                return Err(format!("--group {group}: no such group in [[groups]]"));
            }
            // The demo key goes to the database; the gateway loads it when it starts. With Redis,
            // it is published there directly.
            let stores = match &settings.redis {
                Some(r) => Stores::redis(&r.url, &r.key_prefix)
                    .await
                    .map_err(|e| format!("redis.url: {e}"))?,
                None => Stores::memory(),
            };
            let hasher = KeyHasher::new(&settings.security.key_pepper);
            let key = demo::demo_key(&conn, stores.keys.as_ref(), &hasher, env, group)
                .await
                .map_err(|e| e.to_string())?;
            let json = serde_json::to_string_pretty(&key).map_err(|e| e.to_string())?;
            let _ = writeln!(std::io::stdout(), "{json}");
            Ok(())
        }
        None => {
            let listen = settings
                .admin
                .listen
                .ok_or("admin.listen: required to run admin-api as its own process")?;
            let listener = tokio::net::TcpListener::bind(listen)
                .await
                .map_err(|e| format!("admin.listen {listen}: {e}"))?;
            tracing::info!(%listen, "admin-api listening");
            let (_stop_tx, stop_rx) = tokio::sync::watch::channel(false);
            admin_api::serve(listener, AppState { db: conn }, stop_rx)
                .await
                .map_err(|e| e.to_string())
        }
    }
}
