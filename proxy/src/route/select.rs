//! Selection: the order in which a call tries the accounts of its plan, and the session memory
//! that keeps a conversation on the account it moved to.
//!
//! Rendezvous (highest-random-weight) hashing of a seed over account ids: every account gets a
//! score, highest first. The same seed always gives the same order, and removing an account only
//! moves the calls that preferred it. An account is never tried twice in one request.

use crate::errors::GatewayError;
use opstate::{CoolCause, Cooldown, Sessions};

/// Orders `plan` (account indexes) for `seed`; `ids[i]` is the id of account `i`.
pub fn order(plan: &[usize], ids: &[&str], seed: &str) -> Vec<usize> {
    let mut scored: Vec<(u64, usize)> = plan
        .iter()
        .map(|&i| (score(seed, ids.get(i).copied().unwrap_or_default()), i))
        .collect();
    scored.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    scored.into_iter().map(|(_, i)| i).collect()
}

/// The account the session `key` of `org` last succeeded on, if the record is alive.
pub(crate) async fn sticky(
    sessions: &dyn Sessions,
    org: i64,
    key: &str,
) -> Result<Option<String>, GatewayError> {
    sessions.account_of(org, key).await.map_err(|e| {
        tracing::error!(error = %e, "session lookup failed");
        GatewayError::StoreUnavailable
    })
}

/// The accounts of `ordered` that are not cooling (`cooling[i]` is account `ordered[i]`'s cooldown
/// in progress). When every one is cooling: 429 `usage_limit_reached` if one of them cools after a
/// usage limit, else 503 (they failed); both name the shortest wait.
pub fn available(
    ordered: &[usize],
    cooling: &[Option<Cooldown>],
) -> Result<Vec<usize>, GatewayError> {
    let open: Vec<usize> = ordered
        .iter()
        .zip(cooling)
        .filter(|(_, c)| c.is_none())
        .map(|(i, _)| *i)
        .collect();
    if !open.is_empty() || ordered.is_empty() {
        return Ok(open);
    }
    let shortest = cooling
        .iter()
        .flatten()
        .map(|c| c.left)
        .min()
        .unwrap_or_default();
    let wait = super::cooldown::whole_seconds(shortest);
    if cooling
        .iter()
        .flatten()
        .any(|c| c.cause == CoolCause::UsageLimit)
    {
        Err(GatewayError::UsageLimitReached {
            resets_in_seconds: wait,
        })
    } else {
        Err(GatewayError::AccountsFailing {
            retry_after_secs: wait,
        })
    }
}

/// Moves `account` (by id) to the front of `ordered` when it is there.
pub fn prefer(ordered: &mut Vec<usize>, ids: &[&str], account: &str) {
    if let Some(pos) = ordered
        .iter()
        .position(|&i| ids.get(i).copied() == Some(account))
    {
        let i = ordered.remove(pos);
        ordered.insert(0, i);
    }
}

/// A short, store-safe key for a session signal (FNV-1a, hex).
pub fn session_key(signal: &str) -> String {
    format!("{:016x}", score(signal, "session"))
}

fn score(seed: &str, account: &str) -> u64 {
    // FNV-1a over seed, a separator and the account id, then a 64-bit finalizer (splitmix64) so
    // similar inputs spread well.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in seed.bytes().chain([0xff]).chain(account.bytes()) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h ^= h >> 30;
    h = h.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h ^= h >> 27;
    h = h.wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn cooling(secs: u64, cause: CoolCause) -> Option<Cooldown> {
        Some(Cooldown {
            left: Duration::from_millis(secs * 1000 - 10),
            cause,
        })
    }

    #[test]
    fn all_cooling_is_a_usage_limit_only_when_one_hit_a_limit() {
        use CoolCause::{Failure, UsageLimit};
        assert_eq!(
            available(&[0, 1], &[None, cooling(3, Failure)]),
            Ok(vec![0])
        );
        assert_eq!(
            available(&[0, 1], &[cooling(5, Failure), cooling(3, Failure)]),
            Err(GatewayError::AccountsFailing {
                retry_after_secs: 3
            })
        );
        assert_eq!(
            available(&[0, 1], &[cooling(5, UsageLimit), cooling(3, Failure)]),
            Err(GatewayError::UsageLimitReached {
                resets_in_seconds: 3
            })
        );
        assert_eq!(available(&[], &[]), Ok(vec![]));
    }

    #[test]
    fn stable_and_spread() {
        let ids = ["a", "b", "c"];
        let plan = [0, 1, 2];
        assert_eq!(order(&plan, &ids, "s1"), order(&plan, &ids, "s1"));
        let firsts: std::collections::HashSet<usize> = (0..50)
            .map(|i| order(&plan, &ids, &format!("seed-{i}"))[0])
            .collect();
        assert_eq!(firsts.len(), 3, "every account is somebody's first choice");
    }

    #[test]
    fn removing_an_account_moves_only_its_calls() {
        let ids = ["a", "b", "c"];
        for i in 0..100 {
            let seed = format!("s{i}");
            let full = order(&[0, 1, 2], &ids, &seed);
            let without_c = order(&[0, 1], &ids, &seed);
            if full[0] != 2 {
                assert_eq!(full[0], without_c[0]);
            }
        }
    }
}
