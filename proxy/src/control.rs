//! The gateway's handle for the binaries: build it, count its calls in flight, reload its
//! configuration, report its configuration's state and gauges (the request path itself is
//! `gateway.rs`).

use crate::gateway::Gateway;
use crate::live::Live;
use crate::metrics::Metrics;
use crate::shared::Shared;
use opstate::Stores;
use settings::Settings;
use std::sync::Arc;

impl Gateway {
    /// A gateway over `stores` that answers the admin routes with 503 (no admin-api).
    pub fn new(settings: Arc<Settings>, stores: Stores, metrics: Arc<Metrics>) -> Gateway {
        Gateway::with_admin(settings, stores, metrics, None)
    }

    /// A gateway that also forwards the admin routes to admin-api at `admin`.
    pub fn with_admin(
        settings: Arc<Settings>,
        stores: Stores,
        metrics: Arc<Metrics>,
        admin: Option<std::net::SocketAddr>,
    ) -> Gateway {
        Gateway {
            shared: Arc::new(Shared::new(settings, stores, metrics, admin)),
        }
    }

    /// Requests in progress in this gateway now.
    pub fn in_flight(&self) -> usize {
        self.shared
            .in_flight
            .load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Applies `new`, settings read from the configuration file (see `crate::live`): returns the
    /// keys that changed but need a restart. Counted in `tollgate_config_reloads_total`, shown by
    /// `/readyz`.
    pub fn reload(&self, new: Settings) -> Vec<String> {
        let restart = apply(&self.shared, new);
        if restart.is_empty() {
            tracing::info!("configuration reloaded");
        } else {
            tracing::warn!(needs_restart = ?restart, "configuration reloaded; these keys keep their running values until a restart");
        }
        restart
    }

    /// A reload whose file was refused (`error` names the file and the key): nothing changed.
    pub fn reload_refused(&self, error: String) {
        tracing::error!(error = %error, "configuration reload refused; nothing changed");
        if let Ok(mut state) = self.shared.reloads.lock() {
            state.last = Some((crate::live::unix_now(), Some(error)));
        }
        self.shared
            .metrics
            .reloads
            .with_label_values(&["failed"])
            .inc();
    }

    /// Re-reads the configuration file at `path` and applies it ([`Gateway::reload`]); `Err`
    /// (nothing changed) with the refusal, naming the key at fault.
    pub fn reload_from(&self, path: &std::path::Path) -> Result<Vec<String>, String> {
        match Settings::load(path) {
            Ok(new) => Ok(self.reload(new)),
            Err(e) => {
                let message = format!("{}: {e}", path.display());
                self.reload_refused(message.clone());
                Err(message)
            }
        }
    }
}

/// Applies `new` (validated settings read from the configuration file): the sections a reload
/// can change take effect for calls that start from now on; the others keep their start-up
/// values and are returned (they need a restart). Calls in flight keep their configuration.
fn apply(shared: &Shared, new: Settings) -> Vec<String> {
    let current = shared.live();
    let (merged, restart) = crate::live::merge(&shared.settings, &new);
    let next = Arc::new(Live::build(Arc::new(merged), Some(&current)));
    match shared.live_now.write() {
        Ok(mut live) => *live = next,
        Err(poisoned) => *poisoned.into_inner() = next,
    }
    let now = crate::live::unix_now();
    if let Ok(mut state) = shared.reloads.lock() {
        state.loaded_at = now;
        state.last = Some((now, None));
        state.needs_restart = restart.clone();
    }
    shared.metrics.reloads.with_label_values(&["ok"]).inc();
    restart
}

/// Sets the gauges read at scrape time (each account's estimated capacity).
pub(crate) fn refresh_gauges(shared: &Shared) {
    let live = shared.live();
    // Each configured downgrade's series exists before its first use.
    for model in &live.settings.models {
        if let Some(to) = &model.downgrade_to {
            shared
                .metrics
                .downgrades
                .with_label_values(&[model.id.as_str(), to.as_str()]);
        }
    }
    for u in live.accounts.all() {
        shared
            .metrics
            .account_capacity
            .with_label_values(&[u.account.id.as_str()])
            .set(i64::from(u.estimate.now()));
    }
}

/// Reads what only the store knows, for a scrape (bounded by 1 s): which accounts cool down now,
/// counted per model, and whether the store answered (`tollgate_store_up`).
pub(crate) async fn refresh_store_gauges(shared: &Shared) {
    let live = shared.live();
    let accounts: Vec<&settings::Account> =
        live.accounts.all().iter().map(|u| &u.account).collect();
    let ids: Vec<&str> = accounts.iter().map(|a| a.id.as_str()).collect();
    let m = &shared.metrics;
    let read = tokio::time::timeout(
        std::time::Duration::from_secs(1),
        shared.stores().cooldowns.remaining(&ids),
    )
    .await;
    let cooling = match read {
        Ok(Ok(c)) => {
            m.store_up.set(1);
            c
        }
        _ => {
            m.store_up.set(0);
            return;
        }
    };
    let mut per_model: std::collections::BTreeMap<&str, (i64, i64)> = Default::default();
    for (account, cool) in accounts.iter().zip(&cooling) {
        for model in &account.models {
            let e = per_model.entry(model.as_str()).or_default();
            e.0 += 1;
            e.1 += i64::from(cool.is_some());
        }
    }
    for (model, (all, cool)) in per_model {
        m.model_accounts.with_label_values(&[model]).set(all);
        m.model_accounts_cooling
            .with_label_values(&[model])
            .set(cool);
    }
}

/// The state of the configuration in use, for `/readyz`: always valid (an invalid file is never
/// applied), when it was loaded, and the last reload's outcome.
pub(crate) fn configuration_state(shared: &Shared) -> serde_json::Value {
    let state = shared.reloads.lock().map(|s| s.clone()).unwrap_or_default();
    let last = state.last.map(|(at, error)| {
        serde_json::json!({
            "at": at,
            "result": if error.is_some() { "failed" } else { "ok" },
            "error": error,
        })
    });
    serde_json::json!({
        "state": "valid",
        "loaded_at": state.loaded_at,
        "last_reload": last,
        "needs_restart": state.needs_restart,
    })
}
