//! A call's admission on a Redis Cluster (see `redis_cluster`'s account of the steps): one
//! round of concurrent steps, each atomic on its own slot, folded into the one-server script's
//! outcome; whatever was taken is given back when another step refused.

use crate::budget::OverBudget;
use crate::calls::{Admitted, HoldAsk, Limited, Limits, SlotAsk};
use crate::cooldowns::Cooldown;
use crate::error::{StoreError, StoreResult};
use crate::redis_cluster::{AccountRead, Taken};
use crate::redis_store::{RedisStore, millis};
use crate::wallets::Reservation;
use futures_util::future::join_all;
use money::NanoUsd;
use std::time::Duration;

/// What the concurrent takes of a split admission came back with ([`RedisStore::gather`]).
#[derive(Default)]
struct Gathered {
    taken: Taken,
    failed: Option<StoreError>,
    full_gate: Option<usize>,
    minute_full: Option<Duration>,
    reservation: Option<Reservation>,
    over_budget: Option<OverBudget>,
    cooldowns: Vec<Option<Cooldown>>,
    took_first: bool,
    /// Whether the key was found revoked (`None`: no key asked, or its read failed).
    key: Option<bool>,
}

/// The replies of the round's steps, in `take_all`'s order.
type Replies = (
    StoreResult<Option<bool>>,
    Vec<StoreResult<bool>>,
    StoreResult<Option<Result<i64, Duration>>>,
    StoreResult<Option<(i64, NanoUsd, NanoUsd)>>,
    Vec<StoreResult<AccountRead>>,
);

impl Gathered {
    /// Keeps the first failure of the round.
    fn fail(&mut self, e: StoreError) {
        self.failed.get_or_insert(e);
    }

    /// The hold step's reply: the key's budget refused it (code 3, with the reset and what is
    /// left), or the wallet's answer (an opened hold is noted as taken).
    fn hold(
        &mut self,
        held: StoreResult<Option<(i64, NanoUsd, NanoUsd)>>,
        hold: Option<HoldAsk<'_>>,
    ) {
        match (held, hold) {
            (Ok(Some((3, resets_ms, remaining))), Some(_)) => {
                self.over_budget = Some(OverBudget {
                    resets_in: Duration::from_millis(u64::try_from(resets_ms.nanos()).unwrap_or(0)),
                    remaining,
                });
            }
            (Ok(Some((code, available, _))), Some(h)) => {
                if code == 1 {
                    self.taken.hold = Some((h.org, h.hold_id.to_string()));
                }
                self.reservation = Some(match code {
                    -1 => Reservation::Missing,
                    2 => Reservation::AlreadyHeld,
                    0 => Reservation::Insufficient { available },
                    _ => Reservation::Held { available },
                });
            }
            (Ok(_), _) => {}
            (Err(e), _) => self.fail(e),
        }
    }
}

impl RedisStore {
    pub(crate) async fn admit_split(
        &self,
        accounts: &[SlotAsk<'_>],
        slot_id: &str,
        slot_ttl: Duration,
        limits: Limits<'_>,
        hold: Option<HoldAsk<'_>>,
    ) -> StoreResult<Admitted> {
        let ttl = millis(slot_ttl);
        let replies = self.take_all(accounts, slot_id, ttl, limits, hold).await;
        let Gathered {
            mut taken,
            failed,
            full_gate,
            minute_full,
            reservation,
            over_budget,
            mut cooldowns,
            took_first,
            key,
        } = self.gather(replies, accounts, limits, hold);
        if let Some(e) = failed {
            self.give_back(taken, slot_id).await;
            return Err(e);
        }
        let limited = if key == Some(true) {
            Some(Limited::Revoked)
        } else if let Some(j) = full_gate {
            Some(Limited::Gate(j))
        } else {
            minute_full.map(|resets_in| Limited::PerMinute { resets_in })
        };
        if let Some(limited) = limited {
            self.give_back(taken, slot_id).await;
            if limited == Limited::Revoked {
                cooldowns = vec![None; accounts.len()];
            }
            return Ok(Admitted {
                cooldowns,
                taken: None,
                reservation: None,
                limited: Some(limited),
            });
        }
        // The first account could not serve: the next open ones, in order, one step each.
        let at = match took_first {
            true => Some(0),
            false => match self
                .next_account(accounts, &mut cooldowns, slot_id, ttl)
                .await
            {
                Ok(Some((i, slots))) => {
                    taken.account = Some(slots);
                    Some(i)
                }
                Ok(None) => None,
                Err(e) => {
                    self.give_back(taken, slot_id).await;
                    return Err(e);
                }
            },
        };
        let (admitted, give_back) = outcome(at, over_budget, reservation, cooldowns);
        if give_back {
            self.give_back(taken, slot_id).await;
        }
        Ok(admitted)
    }

    /// The round of concurrent steps: the key's standing, each gate, the per-minute count, the
    /// hold, and each account's cooldown (the first account's slot taken too).
    async fn take_all(
        &self,
        accounts: &[SlotAsk<'_>],
        slot_id: &str,
        ttl: u64,
        limits: Limits<'_>,
        hold: Option<HoldAsk<'_>>,
    ) -> Replies {
        let key = async {
            match limits.key {
                Some(hash) => self.key_revoked(hash).await.map(Some),
                None => Ok(None),
            }
        };
        let gates = join_all(
            limits
                .gates
                .iter()
                .map(|g| self.take_slot(self.schema.gate(g.gate), slot_id, g.max, ttl)),
        );
        let minute = async {
            match limits.per_minute {
                Some(rate) => self.rate_take(rate.counter, rate.limit).await.map(Some),
                None => Ok(None),
            }
        };
        let held = async {
            match hold {
                Some(h) => self.hold_take(h).await.map(Some),
                None => Ok(None),
            }
        };
        let reads = join_all(
            accounts
                .iter()
                .enumerate()
                .map(|(i, a)| self.account_take(a, slot_id, ttl, i == 0)),
        );
        tokio::join!(key, gates, minute, held, reads)
    }

    /// Folds the concurrent takes of a split admission: what was taken (to give back on a
    /// refusal), the first failure, and each limit's, the wallet's and the accounts' answers.
    fn gather(
        &self,
        replies: Replies,
        accounts: &[SlotAsk<'_>],
        limits: Limits<'_>,
        hold: Option<HoldAsk<'_>>,
    ) -> Gathered {
        let (key, gates, minute, held, reads) = replies;
        let mut g = Gathered::default();
        for (j, r) in gates.into_iter().enumerate() {
            match r {
                Ok(true) => g.taken.gates.push(self.schema.gate(limits.gates[j].gate)),
                Ok(false) => {
                    g.full_gate.get_or_insert(j);
                }
                Err(e) => g.fail(e),
            }
        }
        match minute {
            Ok(Some(Ok(counted))) => {
                if let Some(rate) = limits.per_minute {
                    g.taken.minute = Some((self.schema.minute_counter(rate.counter), counted));
                }
            }
            Ok(Some(Err(resets_in))) => g.minute_full = Some(resets_in),
            Ok(None) => {}
            Err(e) => g.fail(e),
        }
        g.hold(held, hold);
        g.cooldowns = Vec::with_capacity(accounts.len());
        for (i, r) in reads.into_iter().enumerate() {
            match r {
                Ok((took, cd)) => {
                    if took && i == 0 {
                        g.took_first = true;
                        g.taken.account = Some(self.schema.slots(accounts[0].account));
                    }
                    g.cooldowns.push(cd);
                }
                Err(e) => {
                    g.fail(e);
                    g.cooldowns.push(None);
                }
            }
        }
        match key {
            Ok(revoked) => g.key = revoked,
            Err(e) => g.fail(e),
        }
        g
    }

    /// After the first account could not serve, takes a slot of the next open account in order
    /// (one step each); returns its position and its slots' key, `None` when none has room
    /// (each one's cooldown noted in `cooldowns`).
    async fn next_account(
        &self,
        accounts: &[SlotAsk<'_>],
        cooldowns: &mut [Option<Cooldown>],
        slot_id: &str,
        ttl: u64,
    ) -> StoreResult<Option<(usize, String)>> {
        for (i, a) in accounts.iter().enumerate().skip(1) {
            if cooldowns[i].is_some() {
                continue;
            }
            match self.account_take(a, slot_id, ttl, true).await? {
                (true, _) => return Ok(Some((i, self.schema.slots(a.account)))),
                (false, cd) => cooldowns[i] = cd,
            }
        }
        Ok(None)
    }
}

/// A split admission's outcome once an account was looked for, and whether what was taken goes
/// back: no account with room (nothing was asked of the wallet), the key's budget, or a refused
/// hold (the wallet kept nothing) leave nothing taken, as on one server.
fn outcome(
    at: Option<usize>,
    over_budget: Option<OverBudget>,
    reservation: Option<Reservation>,
    cooldowns: Vec<Option<Cooldown>>,
) -> (Admitted, bool) {
    let refused_hold = matches!(
        reservation,
        Some(Reservation::Missing | Reservation::Insufficient { .. })
    );
    let give_back = at.is_none() || over_budget.is_some() || refused_hold;
    let admitted = match (at, over_budget) {
        (None, _) => Admitted {
            cooldowns,
            taken: None,
            reservation: None,
            limited: None,
        },
        (Some(_), Some(over)) => Admitted {
            cooldowns,
            taken: None,
            reservation: None,
            limited: Some(Limited::Budget(over)),
        },
        (Some(at), None) => Admitted {
            cooldowns,
            taken: (!refused_hold).then_some(at),
            reservation,
            limited: None,
        },
    };
    (admitted, give_back)
}
