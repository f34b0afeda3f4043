//! What every admin-api handler shares.

use crate::db;
use crate::mail::Mailer;
use credentials::{Env, KeyHasher};
use opstate::Stores;
use sea_orm::DatabaseConnection;
use settings::{Environment, Settings};
use std::sync::Arc;

/// The time admin-api's rules read (invitation lifetimes): the system clock, unless a test fixed
/// it ([`Clock::set`]); each `AppState` has its own.
#[derive(Debug, Default)]
pub struct Clock {
    fixed: std::sync::Mutex<Option<chrono::DateTime<chrono::Utc>>>,
}

impl Clock {
    /// Now: the fixed time, else the system clock.
    pub fn now(&self) -> chrono::DateTime<chrono::Utc> {
        self.fixed
            .lock()
            .ok()
            .and_then(|f| *f)
            .unwrap_or_else(chrono::Utc::now)
    }

    /// Fixes the time to `at` (`None`: the system clock again).
    pub fn set(&self, at: Option<chrono::DateTime<chrono::Utc>>) {
        if let Ok(mut f) = self.fixed.lock() {
            *f = at;
        }
    }
}

/// Shared state: the ledger database, the operational store, configuration and the mailer.
#[derive(Clone)]
pub struct AppState {
    pub db: DatabaseConnection,
    pub stores: Stores,
    pub settings: Arc<Settings>,
    pub hasher: KeyHasher,
    pub env: Env,
    pub mailer: Arc<Mailer>,
    /// Mails sent after their answer (a password reset's, so its time tells nothing): owned
    /// here, finished ones reaped at each new one, the rest stopped with the state's last clone.
    pub mail_tasks: Arc<std::sync::Mutex<tokio::task::JoinSet<()>>>,
    /// Set when a key could not be published: the directory rebuild runs at its next tick.
    pub stale_directory: Arc<std::sync::atomic::AtomicBool>,
    /// Organizations whose wallet mirror must be reloaded from the ledger at the next tick.
    pub stale_wallets: Arc<std::sync::Mutex<std::collections::BTreeSet<i64>>>,
    /// The gateway the batch runner sends lines to when `[batches] gateway_url` is not set: the
    /// embedding process's own gateway, once it is bound (its port may be chosen at start).
    pub batch_gateway: Arc<std::sync::OnceLock<String>>,
    /// Stripe, when `[payments] provider = "stripe"` (partner top-ups through Checkout).
    pub stripe: Option<crate::payments::StripeClient>,
    /// The time the rules read (see [`Clock`]).
    pub clock: Arc<Clock>,
    /// admin-api's Prometheus figures (`crate::meters`).
    pub meters: Arc<crate::meters::Meters>,
    /// The tracer of `[telemetry]` (set by the binaries); `None`: requests are not traced.
    pub tracer: Option<opentelemetry_sdk::trace::SdkTracer>,
    /// The model groups in force: `settings.groups` at start, replaced by a configuration reload
    /// (`AppState::set_groups`; the rest of `settings` needs a restart).
    groups: Arc<std::sync::RwLock<Arc<Vec<settings::Group>>>>,
}

impl AppState {
    /// Connects and migrates the database and builds the shared state over `stores`.
    pub async fn connect(settings: Arc<Settings>, stores: Stores) -> Result<AppState, String> {
        let url = &settings.require_database().map_err(|e| e.to_string())?.url;
        db::prepare_sqlite_path(url).map_err(|e| format!("database.url: {e}"))?;
        let conn = db::connect(url)
            .await
            .map_err(|e| format!("database.url: {e}"))?;
        db::migrate(&conn)
            .await
            .map_err(|e| format!("migrations: {e}"))?;
        let mailer = Mailer::from_settings(&settings.mail).map_err(|e| e.to_string())?;
        let stripe = settings
            .payments
            .stripe
            .as_ref()
            .map(crate::payments::StripeClient::new)
            .transpose()?;
        let mut state = AppState::new(conn, stores, settings, mailer);
        state.stripe = stripe;
        Ok(state)
    }

    #[allow(
        clippy::expect_used,
        reason = "the metric names are constants, built by every test"
    )]
    pub fn new(
        db: DatabaseConnection,
        stores: Stores,
        settings: Arc<Settings>,
        mailer: Mailer,
    ) -> AppState {
        let groups = Arc::new(settings.groups.clone());
        let labels = settings
            .metrics
            .as_ref()
            .map_or(0, |m| m.organization_labels);
        AppState {
            hasher: KeyHasher::new(&settings.security.key_pepper),
            env: env_of(&settings),
            db,
            stores,
            settings,
            mailer: Arc::new(mailer),
            mail_tasks: Default::default(),
            stale_directory: Arc::new(std::sync::atomic::AtomicBool::new(false)),
            stale_wallets: Arc::new(std::sync::Mutex::new(std::collections::BTreeSet::new())),
            batch_gateway: Arc::new(std::sync::OnceLock::new()),
            stripe: None,
            clock: Arc::new(Clock::default()),
            meters: Arc::new(
                crate::meters::Meters::new(labels).expect("admin-api's metric names are valid"),
            ),
            tracer: None,
            groups: Arc::new(std::sync::RwLock::new(groups)),
        }
    }

    /// How long console sessions last (`[console]`).
    pub fn lifetimes(&self) -> crate::services::sessions::Lifetimes {
        crate::services::sessions::Lifetimes::of(&self.settings.console)
    }

    /// `path` under the one public base URL (`server.public_base_url`), e.g. an invitation link.
    pub fn public_url(&self, path: &str) -> String {
        let base = self.settings.server.public_base_url.as_str();
        format!("{}{path}", base.trim_end_matches('/'))
    }

    /// The model groups in force.
    pub fn groups(&self) -> Arc<Vec<settings::Group>> {
        match self.groups.read() {
            Ok(g) => g.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// The group `id` in force, if configured.
    pub fn group(&self, id: i64) -> Option<settings::Group> {
        self.groups().iter().find(|g| g.id == id).cloned()
    }

    /// A configuration reload: the groups (names, wholesale multipliers, per-key limits) in
    /// force from now on, for every clone of this state.
    pub fn set_groups(&self, groups: Vec<settings::Group>) {
        let groups = Arc::new(groups);
        match self.groups.write() {
            Ok(mut g) => *g = groups,
            Err(poisoned) => *poisoned.into_inner() = groups,
        }
    }

    /// Marks an organization's wallet mirror for a reload from the ledger.
    pub fn wallet_stale(&self, org: i64) {
        if let Ok(mut s) = self.stale_wallets.lock() {
            s.insert(org);
        }
    }

    /// How many organizations wait for a wallet reload.
    pub fn stale_wallet_count(&self) -> usize {
        self.stale_wallets.lock().map_or(0, |s| s.len())
    }

    /// Takes the organizations marked for a wallet reload.
    pub fn take_stale_wallets(&self) -> Vec<i64> {
        self.stale_wallets
            .lock()
            .map(|mut s| std::mem::take(&mut *s).into_iter().collect())
            .unwrap_or_default()
    }

    /// Marks the key directory as needing a rebuild.
    pub fn directory_stale(&self) {
        self.stale_directory
            .store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

/// The credential environment of a deployment.
pub fn env_of(settings: &Settings) -> Env {
    match settings.server.environment {
        Environment::Production => Env::Live,
        Environment::Development => Env::Dev,
    }
}
