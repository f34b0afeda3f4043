//! The one limiter of every password or code check (issue 42): sign-in, an invitation's
//! acceptance, a join link, a password reset, a password change and two-factor codes all count
//! here, per address and per client network (an IPv4 address, an IPv6 /64).
//!
//! Every attempt counts as a failure until it succeeds ([`attempt`] counts before the
//! password is even read, so concurrent guesses cannot slip past between a check and its count).
//! [`ADDRESS`]: 8 attempts go at once (an acceptance takes two, a mistyped code one more); from then on each attempt locks the key for 1 minute,
//! doubling up to 15 minutes; an hour without attempts forgets them. [`NETWORK`]: the same from
//! 30 attempts, up to an hour. A successful, proven sign-in (or acceptance) starts its address
//! afresh and gives its network back the attempt. So an owner whose address is being guessed at
//! waits at most 15 minutes between tries, and the guesser gets about four tries an hour.
//!
//! The state lives in the database (`console_throttles`), shared by every admin-api of a
//! deployment; each write is conditional on the version it read (two concurrent attempts never
//! both pass as the same attempt). A database that cannot answer refuses the attempt.

use chrono::{DateTime, Duration, Utc};
use entities::console_throttles;
use sea_orm::sea_query::{Expr, OnConflict};
use sea_orm::{ColumnTrait, ConnectionTrait, DbErr, EntityTrait, QueryFilter, Set};
use sha2::{Digest, Sha256};

/// How one kind of key is limited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    /// Attempts that go through before the first lock.
    pub free: u32,
    /// The first lock; each further attempt doubles it.
    pub base: Duration,
    /// The longest lock.
    pub cap: Duration,
    /// A pause this long forgets the attempts.
    pub quiet: Duration,
}

/// An address: 8 free attempts, then 1 minute doubling to 15 minutes.
pub const ADDRESS: Policy = Policy {
    free: 8,
    base: Duration::minutes(1),
    cap: Duration::minutes(15),
    quiet: Duration::hours(1),
};

/// A client network: 30 free attempts, then 1 minute doubling to an hour.
pub const NETWORK: Policy = Policy {
    free: 30,
    base: Duration::minutes(1),
    cap: Duration::hours(1),
    quiet: Duration::hours(1),
};

/// One key's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct State {
    pub failures: u32,
    pub locked_until: Option<DateTime<Utc>>,
    pub last_at: Option<DateTime<Utc>>,
}

impl Policy {
    /// The lock after the `failures`-th attempt (none before [`Policy::free`]).
    pub fn lock(&self, failures: u32) -> Option<Duration> {
        let over = failures.checked_sub(self.free)?;
        let factor = 1i32.checked_shl(over.min(20)).unwrap_or(i32::MAX);
        Some(
            self.base
                .checked_mul(factor)
                .map_or(self.cap, |d| d.min(self.cap)),
        )
    }

    /// An attempt at `now`: `Err(seconds to wait)` while the key is locked, else the state with
    /// this attempt counted (and locked for the next one past the free attempts).
    pub fn attempt(&self, s: State, now: DateTime<Utc>) -> Result<State, u64> {
        if let Some(until) = s.locked_until.filter(|t| *t > now) {
            let ms = (until - now).num_milliseconds().max(1);
            return Err(u64::try_from(ms.saturating_add(999) / 1000).unwrap_or(1));
        }
        let quiet = s.last_at.is_some_and(|t| now - t >= self.quiet);
        let failures = if quiet {
            1
        } else {
            s.failures.saturating_add(1)
        };
        Ok(State {
            failures,
            locked_until: self.lock(failures).map(|d| now + d),
            last_at: Some(now),
        })
    }

    /// After a proven success: an address starts afresh; a network gets the attempt back.
    pub fn success(&self, s: State, reset: bool) -> State {
        if reset {
            State::default()
        } else {
            State {
                failures: s.failures.saturating_sub(1),
                ..s
            }
        }
    }
}

/// What a check is, for the audit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Check {
    SignIn,
    Invitation,
    Join,
    PasswordChange,
    TwoFactor,
}

impl Check {
    pub fn name(self) -> &'static str {
        match self {
            Check::SignIn => "sign_in",
            Check::Invitation => "invitation",
            Check::Join => "join",
            Check::PasswordChange => "password_change",
            Check::TwoFactor => "two_factor",
        }
    }
}

/// Why an attempt may not go on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    /// too many attempts: wait this many seconds
    #[error("too many attempts; try again in {0} s")]
    Throttled(u64),
    /// the limiter's store cannot answer (refused rather than unlimited)
    #[error("the limiter cannot answer")]
    Unavailable,
}

/// The address key of `email` (only a hash of the address is stored).
pub fn address_key(email: &str) -> String {
    let normal = super::people::normal_email(email);
    format!("addr:{}", hex::encode(Sha256::digest(normal.as_bytes())))
}

/// The network key of a client address: an IPv4 address, an IPv6 /64, or `unknown`.
pub fn network_key(ip: Option<&str>) -> String {
    match ip.and_then(|i| i.parse::<std::net::IpAddr>().ok()) {
        Some(std::net::IpAddr::V4(v4)) => format!("net:{v4}"),
        Some(std::net::IpAddr::V6(v6)) => match v6.to_ipv4_mapped() {
            Some(v4) => format!("net:{v4}"),
            None => {
                let s = v6.segments();
                let prefix = std::net::Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0);
                format!("net:{prefix}/64")
            }
        },
        None => "net:unknown".to_string(),
    }
}

/// The keys one attempt counts against.
#[derive(Debug, Clone)]
pub struct Attempt {
    pub address: String,
    pub network: String,
    /// Whether this attempt locked one of its keys (the audit records the throttle once).
    pub locked: bool,
}

/// How many times a write races another before the attempt is refused.
const RACES: usize = 8;

/// Counts an attempt for `email` from `ip`; refused while either key is locked.
pub async fn attempt(
    db: &impl ConnectionTrait,
    email: &str,
    ip: Option<&str>,
    now: DateTime<Utc>,
) -> Result<Attempt, Refused> {
    let address = address_key(email);
    let network = network_key(ip);
    // Both keys are checked before either is counted: a locked network does not also lock the
    // address of the person behind it, nor the other way round.
    let mut wait = 0;
    for (key, policy) in [(&address, &ADDRESS), (&network, &NETWORK)] {
        let (state, _) = read(db, key).await.map_err(unavailable)?;
        if let Err(secs) = policy.attempt(state, now) {
            wait = wait.max(secs);
        }
    }
    if wait > 0 {
        return Err(Refused::Throttled(wait));
    }
    let mut locked = false;
    for (key, policy) in [(&address, &ADDRESS), (&network, &NETWORK)] {
        locked |= count(db, key, policy, now).await?;
    }
    Ok(Attempt {
        address,
        network,
        locked,
    })
}

/// The attempt succeeded and the person is proven: the address starts afresh, the network gets
/// the attempt back. A failure to write is logged (the keys then decay on their own).
pub async fn succeeded(db: &impl ConnectionTrait, a: &Attempt) {
    for (key, policy, reset) in [(&a.address, &ADDRESS, true), (&a.network, &NETWORK, false)] {
        for _ in 0..RACES {
            match read(db, key).await {
                Ok((s, version)) => match write(db, key, policy.success(s, reset), version).await {
                    Ok(true) => break,
                    Ok(false) => continue,
                    Err(e) => {
                        tracing::warn!(error = %e, "limiter not reset after a success");
                        break;
                    }
                },
                Err(e) => {
                    tracing::warn!(error = %e, "limiter not reset after a success");
                    break;
                }
            }
        }
    }
}

fn unavailable(e: DbErr) -> Refused {
    tracing::error!(error = %e, "limiter unavailable: the attempt is refused");
    Refused::Unavailable
}

/// Counts one attempt on `key`; `Ok(true)` when it locked the key.
async fn count(
    db: &impl ConnectionTrait,
    key: &str,
    policy: &Policy,
    now: DateTime<Utc>,
) -> Result<bool, Refused> {
    for _ in 0..RACES {
        let (state, version) = read(db, key).await.map_err(unavailable)?;
        let next = policy.attempt(state, now).map_err(Refused::Throttled)?;
        if write(db, key, next, version).await.map_err(unavailable)? {
            return Ok(next.locked_until.is_some() && state.locked_until.is_none());
        }
    }
    // Lost every race: many attempts on one key at once. Refuse this one.
    Err(Refused::Throttled(1))
}

/// A key's state and version (a missing key is a fresh one, version -1).
async fn read(db: &impl ConnectionTrait, key: &str) -> Result<(State, i64), DbErr> {
    Ok(
        match console_throttles::Entity::find_by_id(key.to_string())
            .one(db)
            .await?
        {
            Some(row) => (
                State {
                    failures: u32::try_from(row.failures).unwrap_or(0),
                    locked_until: row.locked_until,
                    last_at: Some(row.last_at),
                },
                row.version,
            ),
            None => (State::default(), -1),
        },
    )
}

/// Writes `s` if the key is still at `version`; `false` when another write came first.
async fn write(
    db: &impl ConnectionTrait,
    key: &str,
    s: State,
    version: i64,
) -> Result<bool, DbErr> {
    let failures = i32::try_from(s.failures).unwrap_or(i32::MAX);
    let last_at = s.last_at.unwrap_or_else(Utc::now);
    if version < 0 {
        let inserted = console_throttles::Entity::insert(console_throttles::ActiveModel {
            key: Set(key.to_string()),
            failures: Set(failures),
            locked_until: Set(s.locked_until),
            last_at: Set(last_at),
            version: Set(0),
        })
        .on_conflict(
            OnConflict::column(console_throttles::Column::Key)
                .do_nothing()
                .to_owned(),
        )
        .exec_without_returning(db)
        .await?;
        return Ok(inserted == 1);
    }
    let updated = console_throttles::Entity::update_many()
        .col_expr(console_throttles::Column::Failures, Expr::value(failures))
        .col_expr(
            console_throttles::Column::LockedUntil,
            Expr::value(s.locked_until),
        )
        .col_expr(console_throttles::Column::LastAt, Expr::value(last_at))
        .col_expr(console_throttles::Column::Version, Expr::value(version + 1))
        .filter(console_throttles::Column::Key.eq(key))
        .filter(console_throttles::Column::Version.eq(version))
        .exec(db)
        .await?;
    Ok(updated.rows_affected == 1)
}

/// Forgets keys quiet for a day (the keeper calls this now and then).
pub async fn forget_quiet(db: &impl ConnectionTrait, now: DateTime<Utc>) -> Result<u64, DbErr> {
    Ok(console_throttles::Entity::delete_many()
        .filter(console_throttles::Column::LastAt.lt(now - Duration::days(1)))
        .exec(db)
        .await?
        .rows_affected)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]
    use super::*;
    use proptest::prelude::*;

    fn at(secs: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000 + secs, 0).unwrap()
    }

    #[test]
    fn eight_go_then_the_locks_double_up_to_the_cap() {
        let p = ADDRESS;
        let mut s = State::default();
        for _ in 0..7 {
            s = p.attempt(s, at(0)).unwrap();
            assert_eq!(s.locked_until, None);
        }
        s = p.attempt(s, at(0)).unwrap();
        assert_eq!(s.locked_until, Some(at(60)));
        assert_eq!(p.attempt(s, at(1)), Err(59));
        s = p.attempt(s, at(60)).unwrap();
        assert_eq!(s.locked_until, Some(at(180)));
        for _ in 0..30 {
            let t = s.locked_until.unwrap();
            s = p.attempt(s, t).unwrap();
            assert!(s.locked_until.unwrap() - t <= p.cap);
        }
        assert_eq!(s.locked_until.unwrap() - s.last_at.unwrap(), p.cap);
        // A success starts the address afresh.
        let fresh = p.success(s, true);
        assert_eq!(p.attempt(fresh, s.last_at.unwrap()).unwrap().failures, 1);
    }

    #[test]
    fn networks_are_ipv4_addresses_and_ipv6_slash_64s() {
        assert_eq!(network_key(Some("203.0.113.7")), "net:203.0.113.7");
        assert_eq!(
            network_key(Some("2001:db8:1:2:aaaa::1")),
            network_key(Some("2001:db8:1:2:bbbb::9"))
        );
        assert_ne!(
            network_key(Some("2001:db8:1:2::1")),
            network_key(Some("2001:db8:1:3::1"))
        );
        assert_eq!(network_key(Some("::ffff:203.0.113.7")), "net:203.0.113.7");
        assert_eq!(network_key(None), "net:unknown");
        assert_eq!(network_key(Some("not an ip")), "net:unknown");
        assert_eq!(
            address_key(" Ann@Example.com"),
            address_key("ann@example.com")
        );
    }

    proptest! {
        /// Whatever the timing of failed attempts, no 15-minute span admits more than the free
        /// attempts plus one per lock it can hold (a lock is at least the base), and no wait is
        /// ever longer than the cap.
        #[test]
        fn failures_are_bounded_and_no_wait_exceeds_the_cap(
            gaps in proptest::collection::vec(0i64..400, 1..200),
            network in any::<bool>(),
        ) {
            let p = if network { NETWORK } else { ADDRESS };
            let mut s = State::default();
            let mut t = 0;
            let mut admitted = Vec::new();
            for gap in gaps {
                t += gap;
                match p.attempt(s, at(t)) {
                    Ok(next) => { s = next; admitted.push(t); }
                    Err(wait) => {
                        prop_assert!(i64::try_from(wait).unwrap() <= p.cap.num_seconds());
                        prop_assert!(wait >= 1);
                    }
                }
            }
            let span = 15 * 60;
            let max_locks = span / p.base.num_seconds() + 1;
            for (i, start) in admitted.iter().enumerate() {
                let within = admitted[i..].iter().take_while(|x| **x < start + span).count();
                prop_assert!(
                    i64::try_from(within).unwrap() <= i64::from(p.free) + max_locks,
                    "{within} attempts in 15 minutes from {start}"
                );
            }
        }

        /// However an address was guessed at, its owner waits at most the cap, and after a
        /// success the next attempt goes through at once.
        #[test]
        fn an_owner_is_never_locked_out_for_long(
            gaps in proptest::collection::vec(0i64..120, 0..100),
        ) {
            let p = ADDRESS;
            let mut s = State::default();
            let mut t = 0;
            for gap in gaps {
                t += gap;
                if let Ok(next) = p.attempt(s, at(t)) { s = next; }
            }
            let later = at(t + p.cap.num_seconds());
            let s = p.attempt(s, later);
            prop_assert!(s.is_ok());
            let s = p.success(s.unwrap(), true);
            prop_assert!(p.attempt(s, later).is_ok());
        }

        /// A network that gets each successful attempt back is never locked by its own people.
        #[test]
        fn successes_never_lock_a_network(n in 1usize..500) {
            let p = NETWORK;
            let mut s = State::default();
            for i in 0..n {
                let now = at(i64::try_from(i).unwrap());
                let next = p.attempt(s, now);
                prop_assert!(next.is_ok());
                s = p.success(next.unwrap(), false);
            }
        }
    }
}
