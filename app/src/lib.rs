//! Tollgate's composition: one place that turns validated [`Settings`] into a running deployment.
//!
//! The `proxy` binary runs [`run_proxy`] (the gateway on Pingora's server, with admin-api hosted
//! in-process when `admin.embedded`); the `admin-api` binary runs an [`App`] of
//! [`Role::AdminApi`]. Tests build the same deployments in-process with [`App::build`] (listeners on
//! port 0, the gateway served on the test's runtime) and stop them with [`Stop`].
//!
//! Owns: the stores chosen by the configuration (Redis when `[redis]` is set, else in-memory), the
//! embedded/split decision, the listeners, the background runtime of the production proxy, the
//! tracked tasks, and start-up failures as one typed [`StartError`]. Owns no request or money rule.

mod log_line;
pub mod logging;
mod process;
pub mod telemetry;

pub use process::{run_proxy, running_proxy, signal};

use admin_api::AppState;
use opstate::Stores;
use proxy::{Gateway, Metrics};
use settings::Settings;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinSet;

/// Why a deployment could not start. The message names the configuration key at fault.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The tokio runtime could not be created.
    #[error("cannot start the background runtime: {0}")]
    Runtime(std::io::Error),
    /// The metrics registry refused a collector (a programming error).
    #[error("metrics: {0}")]
    Metrics(String),
    /// The OTLP exporter of `[telemetry]` could not be built.
    #[error("{0}")]
    Telemetry(String),
    /// Redis did not answer at `redis.url` (or no node of `redis.cluster` did).
    #[error("redis: {0}")]
    Redis(String),
    /// admin-api could not start: database, migrations, wallet mirrors, key directory or mailer.
    #[error("{0}")]
    AdminApi(String),
    /// admin-api runs as its own process but `admin.listen` is not set.
    #[error("admin.listen: required to run admin-api as its own process")]
    AdminListenMissing,
    /// The proxy could not open the ledger database (`database.url`) for video tasks.
    #[error("database.url: {0}")]
    Database(String),
    /// A listener could not be bound.
    #[error("{key} {addr}: {source}")]
    Bind {
        key: &'static str,
        addr: SocketAddr,
        source: std::io::Error,
    },
    /// A served listener stopped with an error.
    #[error("{0}")]
    Serve(String),
}

/// Which process a deployment is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The gateway (`proxy`): hosts admin-api and the settler too when `admin.embedded`.
    Proxy,
    /// admin-api on its own (`admin-api`): partner and billing APIs, settler, reconciler, keeper.
    AdminApi,
}

/// Where a started deployment answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Addresses {
    /// The gateway's public base address (role [`Role::Proxy`] built in-process).
    pub gateway: Option<SocketAddr>,
    /// admin-api: hosted here (embedded, or role [`Role::AdminApi`]) or where the gateway forwards.
    pub admin: Option<SocketAddr>,
    /// The Prometheus endpoint (`[metrics] listen`).
    pub metrics: Option<SocketAddr>,
}

/// Stops a deployment's listeners and tasks (dropping it does too).
#[derive(Clone)]
pub struct Stop(Arc<watch::Sender<bool>>);

impl Stop {
    pub fn stop(&self) {
        let _ = self.0.send(true);
    }
}

/// A deployment, built and bound, not yet serving.
pub struct App {
    role: Role,
    settings: Arc<Settings>,
    stores: Stores,
    metrics: Arc<Metrics>,
    admin: Option<(TcpListener, AppState)>,
    /// admin-api's figures, when this deployment hosts admin-api.
    admin_meters: Option<Arc<admin_api::meters::Meters>>,
    /// The traces of `[telemetry]` (shut down, exporting what is queued, when serving ends).
    traces: Option<Arc<telemetry::Traces>>,
    metrics_listener: Option<TcpListener>,
    gateway_listener: Option<TcpListener>,
    addresses: Addresses,
    tasks: JoinSet<()>,
    stop: Stop,
    stop_rx: watch::Receiver<bool>,
    /// The video task book (the ledger database) the gateway reads and writes.
    video_tasks: Option<Arc<dyn opstate::TaskBook>>,
    /// The gateway, built on first use: the one instance that serves, reports readiness and
    /// reloads.
    gateway: Option<Gateway>,
    /// The metrics address to take once the old process of an upgrade released it.
    metrics_later: Option<SocketAddr>,
}

impl App {
    /// Builds the deployment `role` of `settings` on the current runtime, in-process: stores
    /// connected, admin-api's database migrated and its background work started (wallet mirrors
    /// reloaded and the key directory rebuilt before this returns), every listener bound
    /// (`server.listen`, `admin.listen`, `[metrics] listen`; port 0 picks a free port). Serve with
    /// [`App::run_until_stopped`].
    pub async fn build(settings: Arc<Settings>, role: Role) -> Result<App, StartError> {
        let mut app = App::assemble(settings, role, false).await?;
        if role == Role::Proxy {
            let listen = app.settings.server.listen;
            let listener = bind("server.listen", listen).await?;
            let bound = local_addr("server.listen", &listener)?;
            app.addresses.gateway = Some(bound);
            app.gateway_listener = Some(listener);
            // An embedded admin-api's batch runner sends its lines to this gateway.
            if let Some((_, state)) = &app.admin {
                let _ = state.batch_gateway.set(format!("http://{bound}"));
            }
        }
        Ok(app)
    }

    /// Everything but the gateway's listener (which the production proxy leaves to Pingora).
    /// `upgrading`: another proxy still holds the metrics address (it is taken once free).
    async fn assemble(
        settings: Arc<Settings>,
        role: Role,
        upgrading: bool,
    ) -> Result<App, StartError> {
        let metrics = Arc::new(Metrics::new().map_err(|e| StartError::Metrics(e.to_string()))?);
        let traces = telemetry::Traces::start(&settings.telemetry)
            .map_err(StartError::Telemetry)?
            .map(Arc::new);
        let stores = match &settings.redis {
            Some(r) => Stores::redis_at(&r.url, &r.cluster, &r.key_prefix)
                .await
                .map_err(|e| StartError::Redis(e.to_string()))?,
            None => Stores::memory(),
        };
        let (stop_tx, stop_rx) = watch::channel(false);
        let mut tasks = JoinSet::new();
        let hosts_admin = role == Role::AdminApi || settings.admin.embedded;
        let (admin, admin_addr) = if hosts_admin {
            let bind_at = match (role, settings.admin.listen) {
                (_, Some(listen)) => listen,
                (Role::AdminApi, None) => return Err(StartError::AdminListenMissing),
                // Embedded without an address: loopback, a free port.
                (Role::Proxy, None) => SocketAddr::from(([127, 0, 0, 1], 0)),
            };
            let mut state = admin_api::AppState::connect(settings.clone(), stores.clone())
                .await
                .map_err(StartError::AdminApi)?;
            state.tracer = traces.as_ref().map(|t| t.tracer.clone());
            let loaded = admin_api::workers::start(&state, &mut tasks, stop_rx.clone())
                .await
                .map_err(StartError::AdminApi)?;
            if role == Role::Proxy {
                // Embedded: admin-api's figures on the proxy's endpoint.
                state.meters.register_in(metrics.registry());
            }
            let listener = bind("admin.listen", bind_at).await?;
            let addr = local_addr("admin.listen", &listener)?;
            tracing::info!(admin = %addr, keys = loaded, "admin-api ready");
            (Some((listener, state)), Some(addr))
        } else {
            (None, settings.admin.listen)
        };
        // The gateway keeps video tasks in the ledger database: an embedded proxy shares
        // admin-api's connection, a proxy of a fleet opens its own (admin-api migrates it).
        let video_tasks = video_task_book(&admin, &settings, role).await?;
        let metrics_listener = metrics_listener(&settings, role, upgrading).await?;
        let metrics_addr = match &metrics_listener {
            Some(l) => Some(local_addr("metrics.listen", l)?),
            None => None,
        };
        let metrics_later = upgrading && metrics_listener.is_none() && role == Role::Proxy;
        Ok(App {
            metrics_later: metrics_later
                .then(|| settings.metrics.as_ref().map(|m| m.listen))
                .flatten(),
            role,
            settings,
            stores,
            metrics,
            admin_meters: admin.as_ref().map(|(_, state)| state.meters.clone()),
            traces,
            admin,
            metrics_listener,
            gateway_listener: None,
            addresses: Addresses {
                gateway: None,
                admin: admin_addr,
                metrics: metrics_addr,
            },
            tasks,
            stop: Stop(Arc::new(stop_tx)),
            stop_rx,
            video_tasks,
            gateway: None,
        })
    }

    /// Where this deployment answers.
    pub fn addresses(&self) -> Addresses {
        self.addresses
    }

    /// The operational store this deployment uses (shared with its admin-api).
    pub fn stores(&self) -> &Stores {
        &self.stores
    }

    /// The gateway's metrics.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// admin-api's state, when this deployment hosts admin-api.
    pub fn admin_state(&self) -> Option<&AppState> {
        self.admin.as_ref().map(|(_, state)| state)
    }

    /// The handle that stops this deployment.
    pub fn stop_handle(&self) -> Stop {
        self.stop.clone()
    }

    /// The gateway over this deployment's stores, forwarding admin routes to admin-api (built
    /// once; every caller gets the same instance).
    fn gateway(&mut self) -> Gateway {
        if let Some(gateway) = &self.gateway {
            return gateway.clone();
        }
        let (settings, stores) = (self.settings.clone(), self.stores.clone());
        let gateway =
            Gateway::with_admin(settings, stores, self.metrics.clone(), self.addresses.admin);
        if let Some(book) = &self.video_tasks {
            gateway.set_video_tasks(book.clone());
        }
        if let Some(traces) = &self.traces {
            gateway.set_tracer(traces.tracer.clone());
        }
        self.gateway = Some(gateway.clone());
        gateway
    }

    /// Serves admin-api and metrics on the current runtime (not the gateway).
    fn serve_sidecars(&mut self) {
        if let Some((listener, state)) = self.admin.take() {
            let stop = self.stop_rx.clone();
            self.tasks.spawn(async move {
                if let Err(e) = admin_api::serve(listener, state, stop).await {
                    tracing::error!(error = %e, "admin-api stopped");
                }
            });
        }
        if let Some(listener) = self.metrics_listener.take() {
            let stop = self.stop_rx.clone();
            match (self.role, &self.admin_meters) {
                (Role::AdminApi, Some(meters)) => {
                    let meters = meters.clone();
                    self.tasks
                        .spawn(admin_api::http::serve_meters(listener, meters, stop));
                }
                _ => {
                    let gateway = self.gateway();
                    self.tasks
                        .spawn(proxy::serve_metrics(listener, gateway, stop));
                }
            }
        }
        if let Some(addr) = self.metrics_later.take() {
            let (gateway, mut stop) = (self.gateway(), self.stop_rx.clone());
            self.tasks.spawn(async move {
                let listener = loop {
                    if let Ok(l) = TcpListener::bind(addr).await {
                        break l;
                    }
                    tokio::select! {
                        _ = stop.wait_for(|s| *s) => return,
                        _ = tokio::time::sleep(std::time::Duration::from_millis(250)) => {}
                    }
                };
                tracing::info!(metrics = %addr, "metrics listener taken over");
                proxy::serve_metrics(listener, gateway, stop).await;
            });
        }
    }

    /// Serves everything on the current runtime until [`Stop::stop`] is called (or every task
    /// ended), then waits for the tracked tasks to finish.
    pub async fn run_until_stopped(mut self) -> Result<(), StartError> {
        if self.role == Role::Proxy {
            tracing::info!(
                listen = ?self.addresses.gateway,
                store = if self.settings.redis.is_some() { "redis" } else { "memory" },
                "gateway starting"
            );
        }
        self.serve_sidecars();
        if let Some(listener) = self.gateway_listener.take() {
            let gateway = self.gateway();
            let stop = self.stop_rx.clone();
            self.tasks
                .spawn(proxy::serve_listener(listener, gateway, stop));
        }
        let mut stop = self.stop_rx.clone();
        tokio::select! {
            _ = stop.wait_for(|stopped| *stopped) => {}
            _ = async { while self.tasks.join_next().await.is_some() {} } => {}
        }
        self.stop.stop();
        while self.tasks.join_next().await.is_some() {}
        if let Some(traces) = self.traces.take() {
            let _ = tokio::task::spawn_blocking(move || traces.shutdown()).await;
        }
        Ok(())
    }
}

/// A deployment serving on the runtime that started it (see [`App::start`]); stopped when
/// dropped.
pub struct Running {
    addresses: Addresses,
    stop: Stop,
    task: JoinSet<Result<(), StartError>>,
}

impl Running {
    /// Where the deployment answers.
    pub fn addresses(&self) -> Addresses {
        self.addresses
    }

    /// The gateway's base URL (`http://127.0.0.1:PORT`), when this deployment serves one.
    pub fn base_url(&self) -> Option<String> {
        self.addresses.gateway.map(|a| format!("http://{a}"))
    }

    /// Stops the deployment and waits for its tasks to finish.
    pub async fn stop(mut self) -> Result<(), StartError> {
        self.stop.stop();
        match self.task.join_next().await {
            Some(Ok(result)) => result,
            Some(Err(e)) => Err(StartError::Serve(e.to_string())),
            None => Ok(()),
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.stop.stop();
    }
}

impl App {
    /// Serves this deployment in a task of the current runtime (tests, embedding) until the
    /// returned [`Running`] is stopped or dropped.
    pub fn start(self) -> Running {
        let (addresses, stop) = (self.addresses, self.stop.clone());
        let mut task = JoinSet::new();
        task.spawn(self.run_until_stopped());
        Running {
            addresses,
            stop,
            task,
        }
    }
}

/// Re-reads `path` on every `SIGHUP` until `stop` turns true (live reload): the gateway swaps its
/// configuration (`proxy`'s `crate::live`), admin-api its groups. A refused file changes nothing
/// and is logged with the key's path.
async fn reload_on_hangup(
    gateway: Option<Gateway>,
    admin: Option<AppState>,
    path: PathBuf,
    mut stop: watch::Receiver<bool>,
) {
    use tokio::signal::unix::{SignalKind, signal};
    let mut hangup = match signal(SignalKind::hangup()) {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(error = %e, "SIGHUP cannot be watched: live reload is off");
            return;
        }
    };
    loop {
        tokio::select! {
            _ = stop.wait_for(|s| *s) => return,
            got = hangup.recv() => {
                if got.is_none() {
                    return;
                }
                tracing::info!(path = %path.display(), "SIGHUP: reloading the configuration");
                match Settings::load(&path) {
                    Ok(new) => {
                        if let Some(state) = &admin {
                            state.set_groups(new.groups.clone());
                        }
                        match &gateway {
                            Some(g) => {
                                g.reload(new);
                            }
                            None => tracing::info!("configuration reloaded (groups)"),
                        }
                    }
                    Err(e) => {
                        let message = format!("{}: {e}", path.display());
                        match &gateway {
                            Some(g) => g.reload_refused(message),
                            None => tracing::error!(error = %message, "configuration reload refused; nothing changed"),
                        }
                    }
                }
            }
        }
    }
}

impl App {
    /// Reloads `path` on every `SIGHUP` while this deployment runs (its gateway's configuration,
    /// its admin-api's groups). Call on the runtime that serves the deployment.
    pub fn reload_on_hangup(&mut self, path: PathBuf) {
        let gateway = (self.role == Role::Proxy).then(|| self.gateway());
        let admin = self.admin.as_ref().map(|(_, state)| state.clone());
        let stop = self.stop_rx.clone();
        self.tasks
            .spawn(reload_on_hangup(gateway, admin, path, stop));
    }
}

/// The gateway's video task book: the ledger database's (an embedded proxy shares admin-api's
/// connection, a proxy of a fleet opens its own, admin-api migrates it); none without a database
/// (the video routes answer 503) and none for a separate admin-api.
async fn video_task_book(
    admin: &Option<(TcpListener, AppState)>,
    settings: &Settings,
    role: Role,
) -> Result<Option<Arc<dyn opstate::TaskBook>>, StartError> {
    let book: Option<Arc<dyn opstate::TaskBook>> = match (admin, &settings.database, role) {
        (_, _, Role::AdminApi) => None,
        (Some((_, state)), _, Role::Proxy) => Some(Arc::new(
            admin_api::task_book::SqlTaskBook::new(state.db.clone()),
        )),
        (None, Some(db), Role::Proxy) => Some(Arc::new(
            admin_api::task_book::SqlTaskBook::connect(&db.url)
                .await
                .map_err(|e| StartError::Database(e.to_string()))?,
        )),
        (None, None, Role::Proxy) => {
            tracing::warn!("no [database]: the video routes answer 503");
            None
        }
    };
    Ok(book)
}

/// The metrics listener: the proxy's on `metrics.listen` (during an upgrade the old process
/// holds it until it exits: taken then), a separate admin-api's on `metrics.admin_listen`.
async fn metrics_listener(
    settings: &Settings,
    role: Role,
    upgrading: bool,
) -> Result<Option<TcpListener>, StartError> {
    Ok(match (&settings.metrics, role) {
        (Some(m), Role::Proxy) => match bind("metrics.listen", m.listen).await {
            Ok(l) => Some(l),
            // The old process of an upgrade holds it until it exits: taken then.
            Err(_) if upgrading => None,
            Err(e) => return Err(e),
        },
        // A separate admin-api serves its own figures where `admin_listen` says.
        (Some(m), Role::AdminApi) => match m.admin_listen {
            Some(at) => Some(bind("metrics.admin_listen", at).await?),
            None => None,
        },
        _ => None,
    })
}

async fn bind(key: &'static str, addr: SocketAddr) -> Result<TcpListener, StartError> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| StartError::Bind { key, addr, source })
}

fn local_addr(key: &'static str, listener: &TcpListener) -> Result<SocketAddr, StartError> {
    listener.local_addr().map_err(|source| StartError::Bind {
        key,
        addr: SocketAddr::from(([0, 0, 0, 0], 0)),
        source,
    })
}
