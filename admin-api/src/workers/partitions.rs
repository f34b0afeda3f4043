//! The usage ledger's partitions on PostgreSQL (issue 31; `migrations::usage_partitions`): made
//! ahead of time, never on the hot path, and dropped whole past the retention.
//!
//! Each round, in one transaction under an advisory lock (two admin-api processes never make the
//! same month twice):
//! - makes the partitions of the current UTC month and the [`AHEAD`] next ones that are missing
//!   (rows of such a month already in the default partition move in with it);
//! - with `database.usage_retention_days`, drops every month's partition whose whole month ended
//!   more than that many days ago, and deletes the default partition's rows that old. The hourly
//!   and daily rollups (`usage_hourly`, `partner_usage`, `partner_usage_hourly`) are other tables
//!   and stay, so every report but a day's project and workflow breakdown still answers.
//!
//! A round runs when admin-api starts (before the settler) and then every [`TICK`]. SQLite keeps
//! one table: nothing to do.

use crate::state::AppState;
use chrono::{DateTime, Datelike, TimeDelta, Utc};
use migrations::usage_partitions::{AHEAD, LIST_SQL, LOCK_SQL, Month, expire_default};
use sea_orm::{ConnectionTrait, DbBackend, DbErr, Statement, TransactionTrait};
use std::time::Duration;
use tokio::sync::watch;

/// How often partitions are checked.
pub const TICK: Duration = Duration::from_secs(3600);

/// What one round did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Round {
    /// Partitions made.
    pub made: Vec<String>,
    /// Partitions dropped past the retention.
    pub dropped: Vec<String>,
    /// Rows of the default partition deleted past the retention.
    pub expired_rows: u64,
}

/// Rounds every [`TICK`] until `shutdown` turns true (the first one is [`round`] at start).
pub async fn run(state: AppState, mut shutdown: watch::Receiver<bool>) {
    loop {
        tokio::select! {
            _ = shutdown.wait_for(|s| *s) => return,
            _ = tokio::time::sleep(TICK) => {}
        }
        if let Err(e) = round(&state.db, retention(&state), Utc::now()).await {
            tracing::error!(error = %e, "usage partitions: round failed; retried next hour");
        }
    }
}

/// One round at `now` (see the module's documentation). Nothing on SQLite.
pub async fn round(
    db: &sea_orm::DatabaseConnection,
    retention_days: Option<u32>,
    now: DateTime<Utc>,
) -> Result<Round, DbErr> {
    let mut done = Round::default();
    if db.get_database_backend() != DbBackend::Postgres {
        return Ok(done);
    }
    let txn = db.begin().await?;
    txn.execute_unprepared(LOCK_SQL).await?;
    let existing: Vec<Month> = txn
        .query_all_raw(Statement::from_string(DbBackend::Postgres, LIST_SQL))
        .await?
        .iter()
        .filter_map(|row| row.try_get::<String>("", "relname").ok())
        .filter_map(|name| Month::parse(&name))
        .collect();
    let current = month_of(now);
    for k in 0..=AHEAD {
        let month = current.plus(k);
        if !existing.contains(&month) {
            for sql in month.make() {
                txn.execute_unprepared(&sql).await?;
            }
            done.made.push(month.name());
        }
    }
    if let Some(days) = retention_days {
        let cutoff = now - TimeDelta::days(i64::from(days));
        for month in existing {
            // The month's end (the next month's first instant) is past the cutoff's reach.
            if month.next() <= month_of(cutoff) && month.next() != month {
                txn.execute_unprepared(&month.drop_partition()).await?;
                done.dropped.push(month.name());
            }
        }
        let literal = format!("'{}'", cutoff.format("%Y-%m-%d %H:%M:%S%.6f+00"));
        done.expired_rows = txn
            .execute_unprepared(&expire_default(&literal))
            .await?
            .rows_affected();
    }
    txn.commit().await?;
    if !done.made.is_empty() || !done.dropped.is_empty() || done.expired_rows > 0 {
        tracing::info!(made = ?done.made, dropped = ?done.dropped, expired_rows = done.expired_rows, "usage partitions");
    }
    Ok(done)
}

/// The UTC month of an instant.
fn month_of(t: DateTime<Utc>) -> Month {
    Month::clamped(t.year(), t.month())
}

/// The configured retention (`database.usage_retention_days`).
pub fn retention(state: &AppState) -> Option<u32> {
    state
        .settings
        .database
        .as_ref()
        .and_then(|d| d.usage_retention_days)
}
