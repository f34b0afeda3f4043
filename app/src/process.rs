//! The production `proxy` process: the deployment on a background runtime, Pingora's server on
//! the calling thread, the pid file, `SIGHUP` reloads and graceful upgrades (the old process
//! hands over its listening sockets), and the signals `proxy --reload` and `--upgrade` send.

use super::*;
use settings::Settings;
use std::path::PathBuf;
use std::sync::Arc;

/// The `proxy` process: the deployment is built on a one-thread background runtime (stores,
/// embedded admin-api and settler, metrics), then Pingora's server runs the gateway on
/// `server.listen` with `server.threads` workers on the calling thread, until the process ends.
/// With `config` (the file `settings` came from), `SIGHUP` reloads it; the process id is written
/// to `server.pid_file` for `proxy --reload`.
///
/// With `upgrade`, this process takes over the listening sockets of the proxy whose id is in
/// `server.pid_file` (Pingora's graceful upgrade over `server.upgrade_sock`): it asks that
/// process to hand them over (`SIGQUIT`), serves on them without a refused connection, and the
/// old process finishes its calls in flight and exits.
pub fn run_proxy(
    settings: Arc<Settings>,
    config: Option<PathBuf>,
    upgrade: bool,
) -> Result<(), StartError> {
    let background = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("tollgate-bg")
        .enable_all()
        .build()
        .map_err(StartError::Runtime)?;
    let mut app = background.block_on(App::assemble(settings.clone(), Role::Proxy, upgrade))?;
    background.block_on(async {
        // The embedded admin-api's state is taken by serve_sidecars: the watcher first.
        if let Some(path) = config {
            app.reload_on_hangup(path);
        }
        app.serve_sidecars();
    });
    let pid_file = &settings.server.pid_file;
    if upgrade {
        ask_for_sockets(pid_file)?;
    }
    tracing::info!(
        listen = %settings.server.listen,
        base_url = %settings.server.public_base_url,
        store = if settings.redis.is_some() { "redis" } else { "memory" },
        "gateway starting"
    );
    let gateway = app.gateway();
    // With `upgrade`, this waits (up to about 5 s) for the old process's sockets.
    let server = proxy::build_server(&settings, gateway.clone(), upgrade);
    if let Err(e) = std::fs::write(pid_file, format!("{}\n", std::process::id())) {
        tracing::warn!(path = %pid_file.display(), error = %e, "pid file not written: proxy --reload cannot find this process");
    }
    proxy::run_server(server, &gateway);
    // Every call has ended and settled into the store; now the embedded settler drains what is
    // left into the ledger, and the other background work stops.
    tracing::info!(in_flight = gateway.in_flight(), "gateway stopped; draining");
    let stop = app.stop_handle();
    stop.stop();
    background.block_on(async {
        let drained = tokio::time::timeout(STOP_TIMEOUT, async {
            while app.tasks.join_next().await.is_some() {}
        })
        .await;
        if drained.is_err() {
            tracing::warn!("background work did not stop in time");
        }
    });
    if let Some(traces) = app.traces.take() {
        traces.shutdown();
    }
    // Only this process's own pid file (after an upgrade it names the new process).
    let ours =
        std::fs::read_to_string(pid_file).is_ok_and(|t| t.trim() == std::process::id().to_string());
    if ours {
        let _ = std::fs::remove_file(pid_file);
    }
    tracing::info!("proxy stopped");
    Ok(())
}

/// The first step of an upgrade: the old proxy (its id in `pid_file`) is asked, from a thread, to
/// send its listening sockets (`SIGQUIT`) while this process's bootstrap waits for them on the
/// upgrade socket. The old process retries connecting to that socket, so the order is safe.
fn ask_for_sockets(pid_file: &std::path::Path) -> Result<(), StartError> {
    let old = running_proxy(pid_file)
        .map_err(|e| StartError::Serve(format!("no running proxy to upgrade from: {e}")))?;
    let _ = std::thread::Builder::new()
        .name("upgrade".into())
        .spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(300));
            tracing::info!(old, "upgrade: asking the running proxy for its sockets");
            if let Err(e) = signal(old, "QUIT") {
                tracing::error!(error = %e, "upgrade: the running proxy was not asked");
            }
        });
    Ok(())
}

/// The id of the running proxy named by `pid_file` (written at start by [`run_proxy`]); an error
/// that says why there is none.
pub fn running_proxy(pid_file: &std::path::Path) -> Result<u32, String> {
    let text = std::fs::read_to_string(pid_file).map_err(|e| {
        format!(
            "{}: {e} (is the proxy running with this configuration?)",
            pid_file.display()
        )
    })?;
    let pid: u32 = text
        .trim()
        .parse()
        .map_err(|_| format!("{}: not a process id", pid_file.display()))?;
    if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
        return Err(format!(
            "no process {pid} (from {}): the proxy is not running",
            pid_file.display()
        ));
    }
    Ok(pid)
}

/// Sends signal `name` (`HUP`, `QUIT`, …) to process `pid` (with `kill`: the workspace has no
/// unsafe code).
pub fn signal(pid: u32, name: &str) -> Result<(), String> {
    match std::process::Command::new("kill")
        .arg(format!("-{name}"))
        .arg(pid.to_string())
        .status()
    {
        Ok(status) if status.success() => Ok(()),
        Ok(status) => Err(format!("kill -{name} {pid} failed ({status})")),
        Err(e) => Err(format!("kill -{name} {pid}: {e}")),
    }
}

/// Longest a stopping proxy waits for its background work (the settler's final drain included).
const STOP_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(20);
