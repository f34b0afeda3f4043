//! Starting admin-api: database, migrations, operational store, mailer, and its background work
//! (the key-directory keeper). Used by the `admin-api` binary and by an embedded proxy.

use crate::mail::Mailer;
use crate::state::AppState;
use crate::{db, keys};
use opstate::Stores;
use settings::Settings;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::JoinSet;

/// How long the settler rests when the usage stream is empty.
pub const SETTLER_IDLE: Duration = Duration::from_millis(250);

/// How often the key directory is checked against the database.
pub const DIRECTORY_TICK: Duration = Duration::from_secs(2);

/// Connects and migrates the database and builds the shared state over `stores`.
pub async fn state(settings: Arc<Settings>, stores: Stores) -> Result<AppState, String> {
    let url = &settings.require_database().map_err(|e| e.to_string())?.url;
    db::prepare_sqlite_path(url).map_err(|e| format!("database.url: {e}"))?;
    let conn = db::connect(url)
        .await
        .map_err(|e| format!("database.url: {e}"))?;
    db::migrate(&conn)
        .await
        .map_err(|e| format!("migrations: {e}"))?;
    let mailer = Mailer::from_settings(&settings.mail).map_err(|e| e.to_string())?;
    Ok(AppState::new(conn, stores, settings, mailer))
}

/// Reloads the wallet mirrors and rebuilds the key directory now (before a gateway serves), then
/// keeps both in a tracked task, and starts the settler.
pub async fn start_background(
    state: &AppState,
    tasks: &mut JoinSet<()>,
    shutdown: watch::Receiver<bool>,
) -> Result<usize, String> {
    crate::services::wallets::reload_all(state)
        .await
        .map_err(|e| format!("wallet mirrors: {e}"))?;
    let loaded = keys::rebuild_directory(&state.db, state.stores.keys.as_ref())
        .await
        .map_err(|e| format!("key directory: {e}"))?;
    tasks.spawn(keys::keep_directory(
        state.clone(),
        DIRECTORY_TICK,
        shutdown.clone(),
    ));
    tasks.spawn(crate::reconciler::run(
        state.clone(),
        Duration::from_millis(state.settings.money.reconcile_interval_ms),
        shutdown.clone(),
    ));
    tasks.spawn(crate::settler::run(
        state.clone(),
        format!("settler-{}", std::process::id()),
        SETTLER_IDLE,
        shutdown,
    ));
    Ok(loaded)
}
