//! The configuration a live reload swaps ([`Live`]) and the reload itself.
//!
//! A reload (`SIGHUP`, or `proxy --config FILE --reload`) re-reads the configuration file. What
//! changes for calls that start afterwards: `[[models]]` (prices included), `[[accounts]]`,
//! `[[groups]]` (features and per-key limits included), `[routing]` and
//! `money.default_output_tokens`. Everything else (listen addresses, threads, environment, public
//! URL, body limits and timeouts, stores, pepper, mail, payments, metrics, admin, video and the
//! other `[money]` keys) keeps its start-up value until a restart; a reload that changes those
//! applies the rest and reports each such key. An invalid file changes nothing. The swap is one
//! pointer: a call keeps the [`Live`] it started with until it is settled, so calls in flight
//! finish on the configuration they started with. Accounts keep their capacity estimates across a
//! reload (matched by id).

use crate::route::models::Router;
use crate::upstream::Accounts;
use settings::Settings;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The part of the configuration a reload swaps: the settings and the tables built from them.
pub(crate) struct Live {
    /// The settings in force (the sections a reload cannot change hold their start-up values).
    pub settings: Arc<Settings>,
    pub accounts: Accounts,
    pub router: Router,
}

impl Live {
    /// The tables of `settings`; account capacity estimates carried over from `previous`.
    pub fn build(settings: Arc<Settings>, previous: Option<&Live>) -> Live {
        let recovery = Duration::from_millis(settings.routing.health_recovery_ms);
        let accounts = Accounts::new(&settings.accounts, recovery);
        if let Some(old) = previous {
            for u in accounts.all() {
                if let Some(before) = old
                    .accounts
                    .all()
                    .iter()
                    .find(|o| o.account.id == u.account.id)
                {
                    u.estimate.inherit(&before.estimate);
                }
            }
        }
        let router = Router::new(&settings, accounts.all());
        Live {
            settings,
            accounts,
            router,
        }
    }
}

/// The outcome of the last reload, for `/readyz` and the logs.
#[derive(Debug, Clone, Default)]
pub(crate) struct ReloadState {
    /// When the configuration in force was loaded (Unix seconds).
    pub loaded_at: u64,
    /// The last reload: when, and its error (`None`: it applied).
    pub last: Option<(u64, Option<String>)>,
    /// Keys the last applied reload changed that need a restart.
    pub needs_restart: Vec<String>,
}

pub(crate) fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// `new` with every section a reload cannot change taken from `running`, and the paths of those
/// that differ (they need a restart).
pub(crate) fn merge(running: &Settings, new: &Settings) -> (Settings, Vec<String>) {
    let mut merged = new.clone();
    let mut restart = Vec::new();
    let mut keep = |path: &str, differs: bool| {
        if differs {
            restart.push(path.to_string());
        }
    };
    let dbg = |v: &dyn std::fmt::Debug| format!("{v:?}");
    keep("server", dbg(&running.server) != dbg(&new.server));
    keep("admin", dbg(&running.admin) != dbg(&new.admin));
    keep("metrics", dbg(&running.metrics) != dbg(&new.metrics));
    keep("database", dbg(&running.database) != dbg(&new.database));
    keep("redis", dbg(&running.redis) != dbg(&new.redis));
    keep(
        "security.key_pepper",
        running.security.key_pepper != new.security.key_pepper,
    );
    keep("mail", dbg(&running.mail) != dbg(&new.mail));
    keep("payments", dbg(&running.payments) != dbg(&new.payments));
    keep("video", dbg(&running.video) != dbg(&new.video));
    keep(
        "money.hold_ttl_ms",
        running.money.hold_ttl_ms != new.money.hold_ttl_ms,
    );
    keep(
        "money.reconcile_interval_ms",
        running.money.reconcile_interval_ms != new.money.reconcile_interval_ms,
    );
    merged.server = running.server.clone();
    merged.admin = running.admin.clone();
    merged.metrics = running.metrics.clone();
    merged.database = running.database.clone();
    merged.redis = running.redis.clone();
    merged.security = running.security.clone();
    merged.mail = running.mail.clone();
    merged.payments = running.payments.clone();
    merged.video = running.video.clone();
    merged.money.hold_ttl_ms = running.money.hold_ttl_ms;
    merged.money.reconcile_interval_ms = running.money.reconcile_interval_ms;
    (merged, restart)
}
