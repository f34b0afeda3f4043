//! What the settler computes for each new event of a batch (`Charge`) and how settling a batch
//! fails (`SettleError`), shared by the settler and the partner side of a batch (`wholesale`).

use crate::ledger;
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
