//! A call's two steps on the hot path, each one store round trip: admission (the cooldowns of its
//! candidate accounts, a capacity slot on the first open one with room, and the wallet hold) and
//! its end (the slot given back, the hold settled, the usage event appended with what was
//! charged).
//!
//! Each is what [`crate::Cooldowns`], [`crate::Slots`], [`crate::Wallets`] and
//! [`crate::UsageStream`] do one by one, with the same rules; the Redis backend runs each as one
//! versioned script (`admit.v1`, `finish.v1`), so a call costs two round trips to the store
//! instead of seven.

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

/// A hold to open with the slot.
#[derive(Debug, Clone, Copy)]
pub struct HoldAsk<'a> {
    pub org: i64,
    pub hold_id: &'a str,
    pub amount: NanoUsd,
    pub ttl_ms: u64,
    /// The call's description (see [`crate::Wallets::reserve`]).
    pub meta: &'a str,
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
}

/// The end of a call.
#[derive(Debug, Clone, Copy)]
pub struct Finish<'a> {
    /// The slot to give back: (account, slot id).
    pub slot: Option<(&'a str, &'a str)>,
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
    /// Checks the cooldowns of `accounts`, takes slot `slot_id` (for `slot_ttl`) on the first
    /// open account with room and, when `hold` is given, opens the hold; a refused hold gives the
    /// slot back. No account with room: nothing is held.
    async fn admit(
        &self,
        accounts: &[SlotAsk<'_>],
        slot_id: &str,
        slot_ttl: Duration,
        hold: Option<HoldAsk<'_>>,
    ) -> StoreResult<Admitted>;

    /// Gives the slot back, settles the hold at `cost` and appends the event with what was
    /// charged. Returns the settlement (`None` when no hold was given). A hold already resolved
    /// or lost charges nothing: the event then carries the cost as excess. The event is appended
    /// whatever the settlement; when this returns `Ok`, it survives the caller's death.
    async fn finish(&self, finish: Finish<'_>) -> StoreResult<Option<Settlement>>;
}

/// What a settlement charged: (charged, excess) for a call of `cost`.
pub fn charged(settlement: Option<Settlement>, cost: NanoUsd) -> (NanoUsd, NanoUsd) {
    match settlement {
        Some(Settlement::Settled { charged, excess }) => (charged, excess),
        Some(Settlement::Unknown | Settlement::Missing) => (NanoUsd::ZERO, cost),
        None => (NanoUsd::ZERO, NanoUsd::ZERO),
    }
}
