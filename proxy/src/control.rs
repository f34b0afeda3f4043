//! The gateway's handle for the binaries: build it, count its calls in flight, reload its
//! configuration (the request path itself is `gateway.rs`).

use crate::gateway::Gateway;
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
        let restart = self.shared.reload(new);
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
        self.shared.reload_failed(error);
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
