//! The key-directory keeper: the operational store's key directory (what the gateway
//! authenticates against) and wallet mirrors follow the ledger database, also after the store lost
//! them.

/// Keeps the key directory a faithful mirror of the database until `shutdown` turns true: every
/// `tick` it rebuilds the directory when the store lost its contents (Redis flushed or restarted)
/// or a publish failed, and re-revokes keys disabled recently, so a rebuild racing a disable can
/// resurrect a key for at most one tick.
pub async fn run(
    state: crate::state::AppState,
    tick: std::time::Duration,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) {
    use std::sync::atomic::Ordering;
    loop {
        let started = chrono::Utc::now();
        let lost = !state.stores.keys.is_loaded().await.unwrap_or(false);
        if lost {
            // The store lost its contents: wallet mirrors went with the key directory. Wallets are
            // reloaded first, so the "loaded" mark the directory sets last covers both.
            match crate::services::wallets::reload_all(&state).await {
                Ok(n) => tracing::info!(wallets = n, "wallet mirrors reloaded from the ledger"),
                Err(e) => tracing::error!(error = %e, "wallet reload failed; retrying"),
            }
        }
        for org in state.take_stale_wallets() {
            if let Err(e) = crate::services::wallets::reload(&state, org).await {
                tracing::warn!(error = %e, org, "wallet reload failed; retrying");
                state.wallet_stale(org);
            }
        }
        if lost || state.stale_directory.swap(false, Ordering::SeqCst) {
            match crate::keys::rebuild_directory(&state.db, state.stores.keys.as_ref()).await {
                Ok(n) => tracing::info!(keys = n, lost, "key directory rebuilt from the database"),
                Err(e) => {
                    state.directory_stale();
                    tracing::error!(error = %e, "key directory rebuild failed; retrying");
                }
            }
        }
        let window = started
            - chrono::Duration::milliseconds(i64::try_from(tick.as_millis()).unwrap_or(1000) * 3);
        if let Err(e) =
            crate::keys::revoke_disabled_since(&state.db, state.stores.keys.as_ref(), window).await
        {
            tracing::warn!(error = %e, "re-revoking recently disabled keys failed");
        }
        tokio::select! {
            _ = shutdown.wait_for(|s| *s) => return,
            _ = tokio::time::sleep(tick) => {}
        }
    }
}
