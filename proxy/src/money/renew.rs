//! Hold renewal: a call in progress keeps its hold open past the hold's deadline.
//!
//! A hold carries a deadline (`money.hold_ttl_ms`) so that the reconciler can settle it from its
//! description if the gateway dies. A live call that outlives it (a long stream) must not be taken
//! for a dead one: the reconciler would charge only the input estimate and the call's real usage
//! would never be booked. Every hold this proxy admits is listed here until `logging` settles it,
//! and one tracked task moves the deadline of each listed hold forward every third of the TTL.
//! When the proxy dies, the list dies with it and the holds expire as designed.

use opstate::Wallets;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;
use tokio::sync::watch;

/// The holds of calls in progress in this proxy: request id → organization.
#[derive(Default)]
pub(crate) struct LiveHolds(Mutex<HashMap<String, i64>>);

impl LiveHolds {
    /// Lists a hold just reserved.
    pub fn insert(&self, hold_id: &str, org: i64) {
        if let Ok(mut m) = self.0.lock() {
            m.insert(hold_id.to_string(), org);
        }
    }

    /// Forgets a hold about to be settled or released.
    pub fn remove(&self, hold_id: &str) {
        if let Ok(mut m) = self.0.lock() {
            m.remove(hold_id);
        }
    }

    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.0.lock().map(|m| m.is_empty()).unwrap_or(true)
    }

    fn snapshot(&self) -> Vec<(String, i64)> {
        self.0
            .lock()
            .map(|m| m.iter().map(|(k, v)| (k.clone(), *v)).collect())
            .unwrap_or_default()
    }
}

/// How often live holds are renewed: a third of their TTL, so two renewals may fail in a row
/// before a hold expires.
pub(crate) fn period(ttl_ms: u64) -> Duration {
    Duration::from_millis((ttl_ms / 3).max(100))
}

/// Moves the deadline of every listed hold to `ttl_ms` from now. A hold the store no longer has
/// (settled meanwhile, or resolved by the reconciler) is forgotten.
pub(crate) async fn renew_once(holds: &LiveHolds, wallets: &dyn Wallets, ttl_ms: u64) {
    for (id, org) in holds.snapshot() {
        match wallets.extend(org, &id, ttl_ms).await {
            Ok(true) => {}
            Ok(false) => holds.remove(&id),
            Err(e) => tracing::warn!(error = %e, hold = %id, "hold not renewed; retrying"),
        }
    }
}

/// Renews until `shutdown` turns true.
pub(crate) async fn run(
    holds: &LiveHolds,
    wallets: impl Fn() -> std::sync::Arc<dyn Wallets>,
    ttl_ms: u64,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        tokio::select! {
            _ = shutdown.wait_for(|s| *s) => return,
            _ = tokio::time::sleep(period(ttl_ms)) => {}
        }
        renew_once(holds, wallets().as_ref(), ttl_ms).await;
    }
}
