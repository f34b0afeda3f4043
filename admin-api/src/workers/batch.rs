//! What the settler computes for each new event of a batch (`Charge`) and how settling a batch
//! fails (`SettleError`), shared by the settler and the partner side of a batch (`wholesale`).

use crate::ledger;
use chrono::{DateTime, Utc};
use money::NanoUsd;
use opstate::{StreamEntry, UsageEvent};
use sea_orm::DbErr;

/// Why settling failed (the entry stays in the stream and is retried).
#[derive(Debug, thiserror::Error)]
pub enum SettleError {
    #[error("database: {0}")]
    Database(#[from] DbErr),
    #[error("ledger: {0}")]
    Ledger(#[from] ledger::LedgerError),
    #[error("store: {0}")]
    Store(#[from] opstate::StoreError),
    /// A round that failed after claiming its entries: they are still this settler's.
    #[error("{0}")]
    Held(Box<SettleError>, Vec<StreamEntry>),
}

/// What one new event of a batch is charged, and what it could not be.
pub(super) struct Charge<'a> {
    pub(super) event: &'a UsageEvent,
    pub(super) charged: NanoUsd,
    pub(super) excess: NanoUsd,
    /// The partner's wholesale cost of `charged` (zero without a partner).
    pub(super) wholesale: NanoUsd,
}

/// When a request started, as its record and its hourly bucket say: the time its UUIDv7 request
/// id carries (minted by the gateway in the same instant as the event's own start, to the
/// millisecond), so every copy of one request's event — its gateway's, a re-sent one, the
/// reconciler's, a video task's end — dates it alike and lands in one month's partition under
/// one `(request_id, started_at)`. An id of another form (none the gateway mints) keeps the
/// event's start.
pub(super) fn started_at(e: &UsageEvent) -> DateTime<Utc> {
    gateway_id_time(&e.request_id).unwrap_or_else(|| at_ms(e.started_at_ms))
}

/// The millisecond a gateway's request id (a UUIDv7) carries; `None` for an id of another form.
pub(super) fn gateway_id_time(id: &str) -> Option<DateTime<Utc>> {
    let id = uuid::Uuid::try_parse(id).ok()?;
    if id.get_version() != Some(uuid::Version::SortRand) {
        return None;
    }
    let (secs, nanos) = id.get_timestamp()?.to_unix();
    Some(at_ms(
        secs.saturating_mul(1000)
            .saturating_add(u64::from(nanos / 1_000_000)),
    ))
}

pub(super) fn at_ms(ms: u64) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(i64::try_from(ms).unwrap_or(i64::MAX)).unwrap_or_else(Utc::now)
}
