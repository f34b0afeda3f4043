//! Wallet mirrors: each organization's spendable balance and its open holds, where admission
//! checks and reserves in one atomic step.
//!
//! The ledger of record (admin-api's database) is the truth; a mirror is rebuilt from it with
//! [`Wallets::load`] whenever the store lost it. A missing mirror is never read as zero or as
//! unlimited: every operation answers `Missing` and callers fail closed.
//!
//! Invariants kept by every operation (and checked by the contract and property tests):
//! `reserved` = Σ open holds, `balance − reserved ≥ 0`, a hold is resolved (settled, released or
//! expired) at most once. Hold deadlines are computed on one clock (the Redis server's `TIME`, or
//! the process clock in memory).
//!
//! Settlement policy when the actual cost exceeds the hold (a supplier ignoring the output cap): the
//! wallet is charged at most what it can pay (`balance − other holds`), so it never goes negative;
//! the uncovered remainder is returned as `excess` for the ledger to book as a loss.
//!
//! A settlement never creates money: it charges between zero and what the wallet can pay, never a
//! negative amount. A mirror found below its open holds at settlement (loaded below them: the
//! ledger balance dropped while calls were held) can pay nothing; the settlement charges zero
//! (the cost is excess), says so (`below_holds`), and the mirror is marked **unreconciled** until
//! it is loaded again from the ledger ([`WalletSnapshot::unreconciled`]: the billing balance then
//! answers 503, never a figure).

use crate::budget::{SpendReport, Windows};
use crate::error::StoreResult;
use async_trait::async_trait;
use money::NanoUsd;

/// A wallet's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WalletSnapshot {
    /// Spendable book balance, nano-USD.
    pub balance: NanoUsd,
    /// Sum of open holds, nano-USD.
    pub reserved: NanoUsd,
    /// Charged here and not yet confirmed by the ledger, nano-USD: the ledger's wallet balance
    /// equals `balance + pending` when mirror and ledger agree.
    pub pending: NanoUsd,
    /// The mirror was found below its open holds (by a settlement, or now: `balance <
    /// reserved`); it is not to be reported until loaded again from the ledger.
    pub unreconciled: bool,
}

impl WalletSnapshot {
    /// Balance minus open holds (`None` only for a corrupt snapshot that overflows).
    pub fn available(&self) -> Option<NanoUsd> {
        self.balance.checked_sub(self.reserved)
    }
}

/// Outcome of a reservation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reservation {
    /// Held; `available` is what remains spendable.
    Held { available: NanoUsd },
    /// A hold with this id is already open (an idempotent retry): nothing changed.
    AlreadyHeld,
    /// Not enough available balance: nothing changed.
    Insufficient { available: NanoUsd },
    /// No mirror for this organization (store lost it, or never loaded): fail closed.
    Missing,
}

/// Outcome of a settlement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settlement {
    /// The hold is closed; `charged` (≥ 0) left the balance; `excess` could not be charged;
    /// `below_holds`: the mirror was below its other open holds (it could pay nothing and is now
    /// marked unreconciled).
    Settled {
        charged: NanoUsd,
        excess: NanoUsd,
        below_holds: bool,
    },
    /// No such open hold (already settled, released or expired): nothing changed.
    Unknown,
    Missing,
}

/// Outcome of a balance adjustment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Adjustment {
    Applied {
        balance: NanoUsd,
    },
    /// This reference was applied before: nothing changed.
    Duplicate,
    /// A debit larger than the available balance (holds cannot be taken back): nothing changed.
    Insufficient {
        available: NanoUsd,
    },
    Missing,
}

/// What a gateway writes with a hold, so the reconciler can settle it if the gateway dies: who
/// called, what, and the estimate that may be charged (the input, which reached the supplier).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct HoldMeta {
    pub key_id: i64,
    pub group_id: i64,
    pub route: String,
    pub model_requested: String,
    pub model_served: String,
    pub stream: bool,
    pub started_at_ms: u64,
    /// Input tokens estimated at admission.
    pub input_tokens: u64,
    /// Price of that input (for audio: of the estimated duration), nano-USD.
    pub input_cost_nanos: NanoUsd,
    /// Seconds of audio estimated at admission (audio transcriptions; 0 otherwise).
    #[serde(default)]
    pub audio_seconds: u64,
    /// Images asked for at admission (image calls; 0 otherwise).
    #[serde(default)]
    pub images: u64,
    /// Seconds of video held for (video tasks; 0 otherwise).
    #[serde(default)]
    pub video_seconds: u64,
    /// The retail multiplier the call was priced at.
    #[serde(default)]
    pub retail_rate: Option<money::RateMultiplier>,
    /// The group's wholesale multiplier at admission.
    #[serde(default)]
    pub wholesale_rate: Option<money::RateMultiplier>,
    /// The batch line the call runs (issue 46), so a hold its gateway never settled is booked
    /// against its line too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch: Option<crate::usage::BatchRef>,
}

/// Outcome of a confirmation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Confirmation {
    /// The charge was pending here and no longer is.
    Confirmed,
    /// The mirror did not know the charge (reloaded before the ledger had it): debited now.
    Applied,
    /// Confirmed before: nothing changed.
    Duplicate,
    Missing,
}

/// An open hold past its deadline.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExpiredHold {
    pub hold_id: String,
    pub amount: NanoUsd,
    /// What the gateway wrote when it reserved (empty when nothing).
    pub meta: String,
}

/// Wallet mirrors with atomic holds.
#[async_trait]
pub trait Wallets: Send + Sync {
    /// Sets the mirror's balance from the ledger (open holds are kept) and marks it present.
    async fn load(&self, org: i64, balance: NanoUsd) -> StoreResult<()>;

    /// As [`Wallets::load`], from a ledger balance that already holds the charges of `booked`
    /// (request ids booked and not yet confirmed to the mirror: their confirmation may still
    /// come, from a settler that died between booking and confirming). They are remembered as
    /// confirmed, so that confirmation takes no second debit from the balance just loaded.
    async fn load_booked(&self, org: i64, balance: NanoUsd, booked: &[String]) -> StoreResult<()>;

    /// Moves the balance by `delta` once per `reference`; a debit may not exceed the available
    /// balance.
    async fn adjust(&self, org: i64, delta: NanoUsd, reference: &str) -> StoreResult<Adjustment>;

    /// Reserves `amount` under `hold_id` until `ttl_ms` from now. `meta` describes the call (the
    /// reconciler settles a hold past its deadline from it); it goes when the hold goes.
    async fn reserve(
        &self,
        org: i64,
        hold_id: &str,
        amount: NanoUsd,
        ttl_ms: u64,
        meta: &str,
    ) -> StoreResult<Reservation>;

    /// Closes a hold, charging `actual` (see the settlement policy above).
    async fn settle(&self, org: i64, hold_id: &str, actual: NanoUsd) -> StoreResult<Settlement>;

    /// Closes a hold without charging. `true` when an open hold was released.
    async fn release(&self, org: i64, hold_id: &str) -> StoreResult<bool>;

    /// Moves an open hold's deadline to `ttl_ms` from now (a call still in progress keeps its
    /// hold away from the reconciler). `false` when no such hold is open.
    async fn extend(&self, org: i64, hold_id: &str, ttl_ms: u64) -> StoreResult<bool>;

    /// The ledger now holds the charge of `hold_id` (`amount`): it stops being pending, or, when
    /// the mirror was reloaded before the ledger had it, the mirror takes the debit now. Once per
    /// hold.
    async fn confirm(&self, org: i64, hold_id: &str, amount: NanoUsd) -> StoreResult<Confirmation>;

    /// [`Wallets::confirm`] for each (org, hold id, amount), in order; one round trip on Redis
    /// (the settler confirms a batch at once).
    async fn confirm_many(
        &self,
        charges: &[(i64, &str, NanoUsd)],
    ) -> StoreResult<Vec<Confirmation>> {
        let mut out = Vec::with_capacity(charges.len());
        for (org, hold_id, amount) in charges {
            out.push(self.confirm(*org, hold_id, *amount).await?);
        }
        Ok(out)
    }

    /// Open holds past their deadline (they stay open until settled or released).
    async fn expired(&self, org: i64) -> StoreResult<Vec<ExpiredHold>>;

    /// The wallet's state, or `None` when there is no mirror.
    async fn snapshot(&self, org: i64) -> StoreResult<Option<WalletSnapshot>>;

    /// Organizations that have held money (the reconciler's work list).
    async fn holding_orgs(&self) -> StoreResult<Vec<i64>>;

    /// The spend of `keys` (of organization `org`) at the store's present moment, in the order
    /// asked (see `crate::budget`). `None`: no mirror (unknown, never zero).
    async fn key_spend(&self, org: i64, keys: &[i64]) -> StoreResult<Option<SpendReport>>;

    /// Restores the keys' spend after the store lost it, before the wallet is loaded: for each
    /// (key, charged in `windows.day`, charged in `windows.month`), a window the store already
    /// holds for the key is kept.
    async fn load_key_spend(
        &self,
        org: i64,
        windows: Windows,
        spends: &[(i64, NanoUsd, NanoUsd)],
    ) -> StoreResult<()>;
}
