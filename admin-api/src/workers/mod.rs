//! admin-api's background work, each a task tracked by the caller's `JoinSet` that stops when
//! shutdown turns true: the settler (usage stream → ledger), the reconciler (holds of dead
//! gateways), the key-directory keeper (directory and wallet mirrors follow the ledger), and the
//! usage ledger's partition keeper (PostgreSQL: months made ahead, old ones dropped), the
//! console's housekeeping (`forget`: the limiter's quiet keys, expired code challenges), and the
//! partner webhooks' deliveries (`webhooks`).
//! Used by the `admin-api` binary and by an embedded proxy.

pub mod balances;
pub mod batch;
pub mod batch_runner;
mod budget_events;
pub mod directory;
pub mod forget;
pub mod partitions;
pub mod reconciler;
mod rollup;
pub mod settler;
pub mod settler_share;
pub mod supplier_usage;
pub mod webhooks;
mod wholesale;

use crate::state::AppState;
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::JoinSet;

/// How long the settler rests when the usage stream is empty.
pub const SETTLER_IDLE: Duration = Duration::from_millis(250);

/// How often the key directory is checked against the database.
pub const DIRECTORY_TICK: Duration = Duration::from_secs(2);

/// Reloads the wallet mirrors and rebuilds the key directory now (before a gateway serves), then
/// keeps both in a tracked task, and starts the settler.
pub async fn start(
    state: &AppState,
    tasks: &mut JoinSet<()>,
    shutdown: watch::Receiver<bool>,
) -> Result<usize, String> {
    crate::services::wallets::reload_all(state)
        .await
        .map_err(|e| format!("wallet mirrors: {e}"))?;
    let loaded = crate::keys::rebuild_directory(&state.db, state.stores.keys.as_ref())
        .await
        .map_err(|e| format!("key directory: {e}"))?;
    // The usage ledger's partitions are made before the settler writes (PostgreSQL). A failed
    // round stops nothing: the default partition takes any month's rows until the next one.
    if let Err(e) =
        partitions::round(&state.db, partitions::retention(state), chrono::Utc::now()).await
    {
        tracing::error!(error = %e, "usage partitions: round failed at start; retried within the hour");
    }
    tasks.spawn(partitions::run(state.clone(), shutdown.clone()));
    tasks.spawn(forget::run(state.clone(), shutdown.clone()));
    tasks.spawn(supplier_usage::run(state.clone(), shutdown.clone()));
    tasks.spawn(directory::run(
        state.clone(),
        DIRECTORY_TICK,
        shutdown.clone(),
    ));
    tasks.spawn(reconciler::run(
        state.clone(),
        Duration::from_millis(state.settings.money.reconcile_interval_ms),
        shutdown.clone(),
    ));
    tasks.spawn(balances::run(
        state.clone(),
        Duration::from_millis(state.settings.money.watch_interval_ms),
        shutdown.clone(),
    ));
    tasks.spawn(webhooks::run(
        state.clone(),
        format!(
            "webhooks-{}-{}",
            std::process::id(),
            uuid::Uuid::new_v4().simple()
        ),
        shutdown.clone(),
    ));
    tasks.spawn(batch_runner::run(
        state.clone(),
        format!(
            "batches-{}-{}",
            std::process::id(),
            uuid::Uuid::new_v4().simple()
        ),
        shutdown.clone(),
    ));
    // Unique across the fleet (process ids repeat across machines): a settler's leases and its
    // consumer in the streams' group are its own.
    tasks.spawn(settler_share::run(
        state.clone(),
        format!(
            "settler-{}-{}",
            std::process::id(),
            uuid::Uuid::new_v4().simple()
        ),
        SETTLER_IDLE,
        shutdown,
    ));
    Ok(loaded)
}
