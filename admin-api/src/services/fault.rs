//! What no service answers for itself: a store that failed, a ledger posting refused, a row the
//! ledger names that is missing. Every service error carries a [`Fault`]; every surface answers it
//! as "unavailable, retry" (a store) or "internal" (a broken invariant), and logs it there.
//!
//! Also the one refusal several services share: partner funding that does not cover a
//! reservation ([`Shortfall`]).

use money::NanoUsd;

/// A failure below the service's rules.
#[derive(Debug, thiserror::Error)]
pub enum Fault {
    /// The database failed or could not be reached.
    #[error("the database failed: {0}")]
    Store(#[from] sea_orm::DbErr),
    /// A ledger posting was refused (an unbalanced or duplicate posting: a bug, not a refusal).
    #[error("a ledger posting failed: {0}")]
    Ledger(#[from] crate::ledger::LedgerError),
    /// The operational store (wallet mirrors, keys) failed or could not be reached.
    #[error("the operational store failed: {0}")]
    OpState(#[from] opstate::StoreError),
    /// Something that must hold did not (a row the ledger names is missing, a stored value out
    /// of range); the text says what.
    #[error("internal: {0}")]
    Broken(&'static str),
}

/// Two faults are the same when they say the same (the stores' errors compare no other way), so
/// a service error can be compared in a test.
impl PartialEq for Fault {
    fn eq(&self, other: &Fault) -> bool {
        self.to_string() == other.to_string()
    }
}

/// Available partner funding does not cover what a change must reserve.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shortfall {
    pub available: NanoUsd,
    pub required: NanoUsd,
}

/// `From` the stores' errors (and [`Fault`]) for a service error with a `Fault(Fault)` variant, so
/// `?` works on a query inside the service.
macro_rules! faults {
    ($t:ty) => {
        impl From<$crate::services::fault::Fault> for $t {
            fn from(f: $crate::services::fault::Fault) -> Self {
                Self::Fault(f)
            }
        }
        impl From<sea_orm::DbErr> for $t {
            fn from(e: sea_orm::DbErr) -> Self {
                Self::Fault(e.into())
            }
        }
        impl From<$crate::ledger::LedgerError> for $t {
            fn from(e: $crate::ledger::LedgerError) -> Self {
                Self::Fault(e.into())
            }
        }
        impl From<opstate::StoreError> for $t {
            fn from(e: opstate::StoreError) -> Self {
                Self::Fault(e.into())
            }
        }
    };
}
pub(crate) use faults;
