//! `proxy --config FILE [--check]`: run the gateway, or validate its configuration and exit.
//! `proxy --print-default-config`: print the example configuration (every setting, its default
//! and a one-line comment) and exit.

use clap::Parser;
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
    #[arg(long, required_unless_present = "print_default_config")]
    config: Option<PathBuf>,
    /// Validate the configuration and exit: 0 when valid, 2 with a message naming the bad key.
    #[arg(long)]
    check: bool,
    /// Print the example configuration (every setting with its default and a comment) and exit.
    #[arg(long, conflicts_with_all = ["config", "check"])]
    print_default_config: bool,
    /// Validate the file, then make the running proxy (found through `server.pid_file`) reload
    /// it: exit 0 when signalled, 2 with the bad key's path (nothing is signalled), 1 when no
    /// proxy runs.
    #[arg(long, conflicts_with = "check")]
    reload: bool,
    /// Start as the successor of the running proxy (found through `server.pid_file`): take over
    /// its listening sockets over `server.upgrade_sock` with no refused connection; the old
    /// process finishes its calls in flight and exits.
    #[arg(long, conflicts_with_all = ["check", "reload"])]
    upgrade: bool,
}

/// `conf/example.toml`, every setting listed (a settings test keeps it complete).
const EXAMPLE: &str = include_str!("../../../conf/example.toml");

fn main() -> ExitCode {
    let cli = Cli::parse();
    if cli.print_default_config {
        let _ = write!(std::io::stdout(), "{EXAMPLE}");
        return ExitCode::SUCCESS;
    }
    let Some(config) = cli.config else {
        return ExitCode::from(2);
    };
    tollgate::logging::init("info");
    let settings = match Settings::load(&config) {
        Ok(s) => Arc::new(s),
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "{}: {e}", config.display());
            return ExitCode::from(2);
        }
    };
    if cli.reload {
        return signal_reload(&config, &settings.server.pid_file);
    }
    if cli.check {
        let _ = writeln!(
            std::io::stdout(),
            "{}: configuration OK ({} models, {} accounts, {} groups)",
            config.display(),
            settings.models.len(),
            settings.accounts.len(),
            settings.groups.len()
        );
        return ExitCode::SUCCESS;
    }
    match tollgate::run_proxy(settings, Some(config), cli.upgrade) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e}");
            let _ = writeln!(std::io::stderr(), "proxy: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `--reload`: sends `SIGHUP` to the proxy whose id is in `pid_file` (the file was validated).
fn signal_reload(config: &std::path::Path, pid_file: &std::path::Path) -> ExitCode {
    let sent = tollgate::running_proxy(pid_file).and_then(|pid| {
        tollgate::signal(pid, "HUP")?;
        Ok(pid)
    });
    match sent {
        Ok(pid) => {
            let _ = writeln!(
                std::io::stdout(),
                "{}: valid; reload signalled to proxy {pid}",
                config.display()
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "proxy: {e}");
            ExitCode::FAILURE
        }
    }
}
