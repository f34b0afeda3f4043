//! What every admin-api handler shares.

use crate::mail::Mailer;
use credentials::{Env, KeyHasher};
use opstate::Stores;
use sea_orm::DatabaseConnection;
use settings::{Environment, Settings};
use std::sync::Arc;

/// Shared state: the ledger database, the operational store, configuration and the mailer.
#[derive(Clone)]
pub struct AppState {
    pub db: DatabaseConnection,
    pub stores: Stores,
    pub settings: Arc<Settings>,
    pub hasher: KeyHasher,
    pub env: Env,
    pub mailer: Arc<Mailer>,
    /// Set when a key could not be published: the directory rebuild runs at its next tick.
    pub stale_directory: Arc<std::sync::atomic::AtomicBool>,
}

impl AppState {
    pub fn new(
        db: DatabaseConnection,
        stores: Stores,
        settings: Arc<Settings>,
        mailer: Mailer,
    ) -> AppState {
        AppState {
            hasher: KeyHasher::new(&settings.security.key_pepper),
            env: env_of(&settings),
            db,
            stores,
            settings,
            mailer: Arc::new(mailer),
            stale_directory: Arc::new(std::sync::atomic::AtomicBool::new(false)),
        }
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
