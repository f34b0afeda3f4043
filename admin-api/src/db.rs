//! Connecting to the ledger database, bringing its schema up to date, and starting write
//! transactions.

use migrations::{Migrator, MigratorTrait};
use sea_orm::{
    ConnectOptions, Database, DatabaseConnection, DatabaseTransaction, DbBackend, DbErr,
    TransactionTrait,
};
use std::time::Duration;

/// Connects to `url` (`sqlite:` or `postgres://`). SQLite gets WAL, a busy timeout and a pool that
/// keeps its connections (an in-memory database vanishes with its last connection).
pub async fn connect(url: &str) -> Result<DatabaseConnection, DbErr> {
    let mut options = ConnectOptions::new(url.to_string());
    options
        .sqlx_logging(false)
        .connect_timeout(Duration::from_secs(5))
        .acquire_timeout(Duration::from_secs(5));
    if url.starts_with("sqlite:") {
        let memory = url.contains(":memory:") || url.contains("mode=memory");
        options
            .max_connections(if memory { 1 } else { 4 })
            .min_connections(1)
            .idle_timeout(None)
            .max_lifetime(None)
            .map_sqlx_sqlite_opts(|o| {
                o.journal_mode(sea_orm::sqlx::sqlite::SqliteJournalMode::Wal)
                    .busy_timeout(Duration::from_secs(5))
            });
    } else {
        options.max_connections(16).min_connections(1);
    }
    // Switching a new SQLite file to WAL takes an exclusive lock that the busy timeout does not
    // cover: a connection opened at the same moment gets "database is locked". Retry briefly.
    let mut attempt = 0;
    loop {
        match Database::connect(options.clone()).await {
            Err(e) if attempt < 5 && e.to_string().contains("database is locked") => {
                attempt += 1;
                tokio::time::sleep(Duration::from_millis(100 * attempt)).await;
            }
            result => return result,
        }
    }
}

/// Applies every pending migration.
pub async fn migrate(db: &DatabaseConnection) -> Result<(), DbErr> {
    Migrator::up(db, None).await
}

/// Creates the parent directory of a SQLite database file, so `mode=rwc` can create the file.
pub fn prepare_sqlite_path(url: &str) -> std::io::Result<()> {
    let Some(rest) = url
        .strip_prefix("sqlite://")
        .or_else(|| url.strip_prefix("sqlite:"))
    else {
        return Ok(());
    };
    let path = rest.split('?').next().unwrap_or_default();
    if path.is_empty() || path.contains(":memory:") {
        return Ok(());
    }
    match std::path::Path::new(path).parent() {
        Some(parent) if !parent.as_os_str().is_empty() => std::fs::create_dir_all(parent),
        _ => Ok(()),
    }
}

/// Starts a write transaction. On SQLite it takes the write lock at once (IMMEDIATE), so
/// read-then-write transactions never fail with "database is locked" halfway.
pub async fn begin(
    db: &sea_orm::DatabaseConnection,
) -> Result<DatabaseTransaction, sea_orm::DbErr> {
    if db.get_database_backend() == DbBackend::Sqlite {
        db.begin_with_options(sea_orm::TransactionOptions {
            sqlite_transaction_mode: Some(sea_orm::SqliteTransactionMode::Immediate),
            ..Default::default()
        })
        .await
    } else {
        db.begin().await
    }
}
