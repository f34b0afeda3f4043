//! An organization's wallet as the in-memory store keeps it: balance, holds, pending charges and
//! the confirmed charges remembered for a while (a confirmation delivered twice is known).

use crate::budget::{HoldTag, SpendCounters};
use crate::error::{StoreError, StoreResult};
use money::NanoUsd;
use std::collections::HashMap;
use std::collections::HashSet;
use std::time::{Duration, Instant};

#[derive(Default)]
pub(crate) struct WalletState {
    pub(crate) present: bool,
    pub(crate) balance: NanoUsd,
    /// hold id → (amount, deadline)
    pub(crate) holds: HashMap<String, (NanoUsd, Instant)>,
    /// hold id → the gateway's description of the call
    pub(crate) meta: HashMap<String, String>,
    pub(crate) adjusted: HashSet<String>,
    pub(crate) pending: NanoUsd,
    /// Holds charged in this incarnation and not yet confirmed: hold id → amount.
    pub(crate) charged: HashMap<String, NanoUsd>,
    /// Charges confirmed in the last [`CONFIRMED_RETENTION`] (see [`Confirmed`]).
    pub(crate) confirmed: Confirmed,
    /// A settlement found the mirror below its open holds; cleared by the next load.
    pub(crate) unreconciled: bool,
    /// hold id → its key and admission windows (holds of a key's call, `crate::budget`).
    pub(crate) tags: HashMap<String, HoldTag>,
    /// key id → its spend counters.
    pub(crate) spend: HashMap<i64, SpendCounters>,
}

/// How long a confirmed charge's id is remembered. The settler marks each usage record whose
/// charge it confirmed (`usage_records.mirror_confirmed`) and never confirms a marked one again;
/// this memory covers only the moment between the confirmation and that mark (a redelivery comes
/// after the settler's 30 s claim timeout), so a minute is ample, and memory stays bounded by a
/// minute of traffic instead of growing with every request served.
pub(crate) const CONFIRMED_RETENTION: Duration = Duration::from_secs(60);

/// Confirmed ids are kept in buckets of this span, dropped whole once older than the retention.
pub(crate) const CONFIRMED_BUCKET: Duration = Duration::from_secs(15);

/// Recently confirmed charge ids, as 128-bit keys in time buckets (16 bytes per id, no allocation
/// per id): a request id (32 hexadecimal digits) is its own key, any other id a 128-bit hash.
#[derive(Default)]
pub(crate) struct Confirmed {
    pub(crate) buckets: std::collections::VecDeque<(Instant, HashSet<u128>)>,
}

impl Confirmed {
    /// Records a confirmed charge; `false` when it was confirmed within the retention.
    pub(crate) fn insert(&mut self, hold_id: &str, now: Instant) -> bool {
        while self.buckets.front().is_some_and(|(start, _)| {
            now.duration_since(*start) >= CONFIRMED_RETENTION + CONFIRMED_BUCKET
        }) {
            self.buckets.pop_front();
        }
        let key = confirmed_key(hold_id);
        if self.buckets.iter().any(|(_, ids)| ids.contains(&key)) {
            return false;
        }
        match self.buckets.back_mut() {
            Some((start, ids)) if now.duration_since(*start) < CONFIRMED_BUCKET => {
                ids.insert(key);
            }
            _ => self.buckets.push_back((now, HashSet::from([key]))),
        }
        true
    }

    /// Ids remembered now.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.buckets.iter().map(|(_, ids)| ids.len()).sum()
    }
}

/// The 128-bit key of a hold id.
pub(crate) fn confirmed_key(hold_id: &str) -> u128 {
    if hold_id.len() == 32
        && let Ok(key) = u128::from_str_radix(hold_id, 16)
    {
        return key;
    }
    use std::hash::{BuildHasher, Hasher};
    let half = |seed: u64| {
        let mut h =
            std::hash::BuildHasherDefault::<std::collections::hash_map::DefaultHasher>::default()
                .build_hasher();
        h.write_u64(seed);
        h.write(hold_id.as_bytes());
        h.finish()
    };
    (u128::from(half(0x5157)) << 64) | u128::from(half(0x7a11))
}

impl WalletState {
    /// Records a confirmed charge; `false` when it was confirmed before (within the retention).
    pub(crate) fn remember_confirmed(&mut self, hold_id: &str, now: Instant) -> bool {
        self.confirmed.insert(hold_id, now)
    }
}

impl WalletState {
    /// Takes a closed hold's tag off its key's held amount and counts what it charged.
    pub(crate) fn close_tag(&mut self, hold_id: &str, amount: NanoUsd, charged: NanoUsd) {
        if let Some(tag) = self.tags.remove(hold_id) {
            let c = self.spend.entry(tag.key_id).or_default();
            c.held = c
                .held
                .checked_sub(amount)
                .filter(|h| !h.is_negative())
                .unwrap_or(NanoUsd::ZERO);
            c.count(tag, charged);
        }
    }

    pub(crate) fn reserved(&self) -> StoreResult<NanoUsd> {
        NanoUsd::checked_sum(self.holds.values().map(|(a, _)| *a)).ok_or_else(overflow)
    }

    /// Balance minus open holds.
    pub(crate) fn available(&self) -> StoreResult<NanoUsd> {
        self.balance
            .checked_sub(self.reserved()?)
            .ok_or_else(overflow)
    }
}

/// An amount outside 64-bit nano-USD: the mirror is broken, never wrapped.
pub(crate) fn overflow() -> StoreError {
    StoreError::Corrupt("wallet amount overflow".into())
}

#[cfg(test)]
mod confirmed_tests {
    use super::{CONFIRMED_BUCKET, CONFIRMED_RETENTION, Confirmed, confirmed_key};
    use std::time::{Duration, Instant};

    #[test]
    fn remembers_for_the_retention_then_forgets_whole_buckets() {
        let mut c = Confirmed::default();
        let t0 = Instant::now();
        let id = "0193a4b2c3d4e5f60718293a4b5c6d7e";
        assert!(c.insert(id, t0));
        assert!(!c.insert(id, t0 + Duration::from_secs(1)), "a duplicate");
        assert!(
            !c.insert(id, t0 + CONFIRMED_RETENTION),
            "still remembered at the retention"
        );
        // A steady flow: memory holds about a retention's worth of ids, never more.
        for i in 0..10_000u64 {
            let at = t0 + Duration::from_millis(i * 30);
            assert!(c.insert(&format!("{i:032x}"), at));
        }
        let per_second = 1_000 / 30;
        let most = (CONFIRMED_RETENTION + CONFIRMED_BUCKET * 2).as_secs() as usize * per_second;
        assert!(c.len() <= most, "{} ids kept", c.len());
        assert!(
            c.insert(id, t0 + Duration::from_secs(300)),
            "forgotten after the retention"
        );
    }

    #[test]
    fn request_ids_are_their_own_keys_and_other_ids_are_hashed() {
        assert_eq!(confirmed_key("0000000000000000000000000000002a"), 42);
        assert_ne!(confirmed_key("hold-1"), confirmed_key("hold-2"));
        assert_eq!(confirmed_key("hold-1"), confirmed_key("hold-1"));
    }
}
