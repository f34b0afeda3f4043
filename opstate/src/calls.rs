//! A call's two steps on the hot path, each one store round trip: admission (the cooldowns of its
//! candidate accounts, a capacity slot on the first open one with room, and the wallet hold) and
//! its end (the slot given back, the hold settled, the usage event appended with what was
//! charged).
//!
//! Each is what [`crate::Cooldowns`], [`crate::Slots`], [`crate::Wallets`] and
//! [`crate::UsageStream`] do one by one, with the same rules; the Redis backend runs each as one
//! versioned script (`admit.v4`, `finish.v5`), so a call costs two round trips to the store
//! instead of seven.
//!
//! Admission also checks the call's limits besides its account's capacity ([`Limits`]): gates
//! (calls in flight under a name, across every proxy: the deployment's global limit, a key's
//! concurrency) and one per-minute counter (a key's requests per minute). A call over any of them
//! takes nothing ([`Admitted::limited`] says which); an admitted call holds a slot in each gate
//! (given back by [`Calls::finish`], expiring after the slot TTL like account slots) and counts
//! once in the minute it was admitted.

use crate::budget::{OverBudget, SpendAsk};
use crate::cooldowns::Cooldown;
use crate::error::StoreResult;
use crate::usage::UsageEvent;
use crate::wallets::{Reservation, Settlement};
use async_trait::async_trait;
use money::NanoUsd;
use std::time::Duration;

/// An account a call may take a slot on.
#[derive(Debug, Clone, Copy)]
pub struct SlotAsk<'a> {
    pub account: &'a str,
    /// Its live slots at most (`max_concurrency`).
    pub max: u32,
}

/// A gate a call must fit under: at most `max` calls in flight under the name `gate`.
#[derive(Debug, Clone, Copy)]
pub struct GateAsk<'a> {
    pub gate: &'a str,
    pub max: u32,
}

/// A per-minute limit a call must fit under: at most `limit` calls admitted under the name
/// `counter` in the current minute (fixed windows on the store's clock).
#[derive(Debug, Clone, Copy)]
pub struct RateAsk<'a> {
    pub counter: &'a str,
    pub limit: u32,
}

/// The limits of a call besides its account's capacity.
#[derive(Debug, Clone, Copy, Default)]
pub struct Limits<'a> {
    pub gates: &'a [GateAsk<'a>],
    pub per_minute: Option<RateAsk<'a>>,
    /// The keyed hash of the caller's key, checked against the key directory in the same step:
    /// a key revoked since the caller's record was read (a proxy's cached copy) is refused
    /// ([`Limited::Revoked`]), so a disabled key stops at once on every proxy without a round
    /// trip of its own. `None`: not checked.
    pub key: Option<&'a str>,
}

/// Which limit refused a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limited {
    /// The gate at this index of [`Limits::gates`] is full.
    Gate(usize),
    /// The per-minute limit is reached; the minute ends in `resets_in`.
    PerMinute { resets_in: Duration },
    /// The caller's key is no longer in the key directory (revoked).
    Revoked,
    /// The hold would take the caller's key past its budget (checked in the hold's step).
    Budget(OverBudget),
}

/// The length of a per-minute window.
pub const MINUTE: Duration = Duration::from_secs(60);

/// A hold to open with the slot.
#[derive(Debug, Clone, Copy)]
pub struct HoldAsk<'a> {
    pub org: i64,
    pub hold_id: &'a str,
    pub amount: NanoUsd,
    pub ttl_ms: u64,
    /// The call's description (see [`crate::Wallets::reserve`]).
    pub meta: &'a str,
    /// The caller's key, whose spend the hold counts in and whose budget it is checked against
    /// (`crate::budget`). `None`: not a key's call.
    pub spend: Option<SpendAsk>,
}

/// What admission did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Admitted {
    /// Each asked account's cooldown in progress, in the order asked.
    pub cooldowns: Vec<Option<Cooldown>>,
    /// The account (index into the accounts asked) whose slot the call now holds: the first with
    /// no cooldown and room, when the hold (if asked) was taken too. `None`: no slot is held.
    pub taken: Option<usize>,
    /// The hold's outcome: `None` when no hold was asked or no account had room (nothing was
    /// asked of the wallet).
    pub reservation: Option<Reservation>,
    /// The limit that refused the call, when one did: then nothing was taken (no gate, account
    /// slot or hold) and `taken` and `reservation` are `None`.
    pub limited: Option<Limited>,
}

/// The end of a call.
#[derive(Debug, Clone, Copy)]
pub struct Finish<'a> {
    /// The slot to give back: (account, slot id).
    pub slot: Option<(&'a str, &'a str)>,
    /// The gates whose slot (the same slot id) to give back.
    pub gates: &'a [&'a str],
    /// The hold to settle: (org, hold id).
    pub hold: Option<(i64, &'a str)>,
    /// What the call cost (charged at settlement, at most what the wallet can pay).
    pub cost: NanoUsd,
    /// The usage event to append; its `charged_nanos` and `excess_nanos` are set by settlement.
    pub event: Option<&'a UsageEvent>,
}

/// A call's admission and end, each in one step.
#[async_trait]
pub trait Calls: Send + Sync {
    /// Checks the cooldowns of `accounts` and the `limits`, takes slot `slot_id` (for
    /// `slot_ttl`) on the first open account with room and in every gate, counts the call in its
    /// minute and, when `hold` is given, opens the hold; a refused hold gives everything back. A
    /// limit reached or no account with room: nothing is taken.
    async fn admit(
        &self,
        accounts: &[SlotAsk<'_>],
        slot_id: &str,
        slot_ttl: Duration,
        limits: Limits<'_>,
        hold: Option<HoldAsk<'_>>,
    ) -> StoreResult<Admitted>;

    /// Gives the slot (and its gates' slots) back, settles the hold at `cost` and appends the event with what was
    /// charged. Returns the settlement (`None` when no hold was given). A hold already resolved
    /// or lost charges nothing: the event then carries the cost as excess. The event is appended
    /// whatever the settlement; when this returns `Ok`, it survives the caller's death.
    async fn finish(&self, finish: Finish<'_>) -> StoreResult<Option<Settlement>>;

    /// The reconciler's resolution of an expired hold, in one step (issue 48): settles hold
    /// `hold_id` of `org` at `cost` and, only when this settlement charged it, appends `event`
    /// with what it charged. A hold its gateway settled meanwhile already has that gateway's
    /// event; a failover keeps or loses the settlement and its event together.
    async fn resolve(
        &self,
        org: i64,
        hold_id: &str,
        cost: NanoUsd,
        event: &UsageEvent,
    ) -> StoreResult<Settlement>;
}

/// What a settlement charged: (charged, excess) for a call of `cost`.
pub fn charged(settlement: Option<Settlement>, cost: NanoUsd) -> (NanoUsd, NanoUsd) {
    match settlement {
        Some(Settlement::Settled {
            charged, excess, ..
        }) => (charged, excess),
        Some(Settlement::Unknown | Settlement::Missing) => (NanoUsd::ZERO, cost),
        None => (NanoUsd::ZERO, NanoUsd::ZERO),
    }
}
