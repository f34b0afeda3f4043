//! Leases on the usage streams (issue 48): every admin-api process runs a settler, and the
//! streams (one per money slot on a cluster, one on a single server) are shared out among the
//! live settlers, each stream read by one settler at a time.
//!
//! - *Who is alive*: each settler's heartbeat ([`StreamLeases::heartbeat`]) lives
//!   [`LEASE_TTL`]; the live count `n` gives each its fair share, `⌈streams / n⌉`.
//! - *Leases*: stream `i`'s lease holds its settler's id for [`LEASE_TTL`], renewed every
//!   [`LEASE_ROUND`] ([`round`]): a settler renews what it holds, gives back what is beyond its
//!   share (so a newcomer finds free streams within a round or two) and takes free ones up to it.
//! - *A settler that dies* stops renewing: its leases lapse within [`LEASE_TTL`] and the others
//!   take its streams, with the entries it had claimed and not acknowledged (the new owner claims
//!   them at once: `UsageStream::claim_from`'s `taken`).
//!
//! A lease keeps two settlers off one stream; it is not what books an event once. A settler
//! paused past its lease may still settle a batch the new owner also reads: the usage record's
//! unique request id, written in the ledger's transaction, makes the second a no-op.

use crate::error::StoreResult;
use async_trait::async_trait;
use std::time::Duration;

/// How long a heartbeat and a lease last unless renewed.
pub const LEASE_TTL: Duration = Duration::from_secs(5);
/// How often a settler renews its heartbeat and leases: four renewals may fail in a row before
/// a lease lapses.
pub const LEASE_ROUND: Duration = Duration::from_secs(1);

/// The store side of the leases; [`round`] is the rule that uses it.
#[async_trait]
pub trait StreamLeases: Send + Sync {
    /// How many usage streams there are (`UsageStream::claim_from` names them `0..count`).
    fn stream_count(&self) -> usize;

    /// Settler `me` is alive for `ttl` more; returns the live settlers, `me` included.
    async fn heartbeat(&self, me: &str, ttl: Duration) -> StoreResult<usize>;

    /// Takes stream `i`'s lease for `me` when it is free, or renews it when `me` holds it:
    /// whether `me` holds it for `ttl` from now.
    async fn take(&self, i: usize, me: &str, ttl: Duration) -> StoreResult<bool>;

    /// Gives stream `i`'s lease back when `me` holds it (nothing otherwise).
    async fn give(&self, i: usize, me: &str) -> StoreResult<()>;

    /// Settler `me` leaves: its heartbeat is removed at once.
    async fn leave(&self, me: &str) -> StoreResult<()>;

    /// Who holds stream `i`'s lease now (`None`: free).
    async fn holder(&self, i: usize) -> StoreResult<Option<String>>;
}

/// The in-memory store's leases: one stream (its one usage list), settlers of one process.
#[derive(Default)]
pub(crate) struct MemoryLeases {
    /// settler → until
    settlers: std::collections::HashMap<String, std::time::Instant>,
    /// the one stream's holder and until
    holder: Option<(String, std::time::Instant)>,
}

#[async_trait]
impl StreamLeases for crate::MemoryStore {
    fn stream_count(&self) -> usize {
        1
    }

    async fn heartbeat(&self, me: &str, ttl: Duration) -> StoreResult<usize> {
        let now = self.now();
        let mut l = self.leases.lock().map_err(|_| poisoned())?;
        l.settlers.retain(|_, until| *until > now);
        l.settlers.insert(me.to_string(), now + ttl);
        Ok(l.settlers.len())
    }

    async fn take(&self, i: usize, me: &str, ttl: Duration) -> StoreResult<bool> {
        let now = self.now();
        let mut l = self.leases.lock().map_err(|_| poisoned())?;
        let free = match &l.holder {
            None => true,
            Some((who, until)) => who == me || *until <= now,
        };
        if i != 0 || !free {
            return Ok(false);
        }
        l.holder = Some((me.to_string(), now + ttl));
        Ok(true)
    }

    async fn give(&self, i: usize, me: &str) -> StoreResult<()> {
        let mut l = self.leases.lock().map_err(|_| poisoned())?;
        if i == 0 && l.holder.as_ref().is_some_and(|(who, _)| who == me) {
            l.holder = None;
        }
        Ok(())
    }

    async fn leave(&self, me: &str) -> StoreResult<()> {
        let mut l = self.leases.lock().map_err(|_| poisoned())?;
        l.settlers.remove(me);
        Ok(())
    }

    async fn holder(&self, i: usize) -> StoreResult<Option<String>> {
        let now = self.now();
        let l = self.leases.lock().map_err(|_| poisoned())?;
        Ok(l.holder
            .as_ref()
            .filter(|(_, until)| i == 0 && *until > now)
            .map(|(who, _)| who.clone()))
    }
}

fn poisoned() -> crate::StoreError {
    crate::StoreError::Unavailable("lease lock poisoned".into())
}

#[async_trait]
impl StreamLeases for crate::RedisStore {
    fn stream_count(&self) -> usize {
        self.schema.usage_streams().len()
    }

    async fn heartbeat(&self, me: &str, ttl: Duration) -> StoreResult<usize> {
        let mut conn = self.conn.clone();
        let n: i64 = SETTLERS
            .key(self.schema.settlers())
            .arg(me)
            .arg(ms(ttl))
            .arg("beat")
            .invoke_async(&mut conn)
            .await?;
        Ok(usize::try_from(n).unwrap_or(1))
    }

    async fn take(&self, i: usize, me: &str, ttl: Duration) -> StoreResult<bool> {
        let mut conn = self.conn.clone();
        let held: i64 = STREAM_LEASE
            .key(self.schema.stream_lease(i))
            .arg(me)
            .arg(ms(ttl))
            .arg("take")
            .invoke_async(&mut conn)
            .await?;
        Ok(held == 1)
    }

    async fn give(&self, i: usize, me: &str) -> StoreResult<()> {
        let mut conn = self.conn.clone();
        let _: i64 = STREAM_LEASE
            .key(self.schema.stream_lease(i))
            .arg(me)
            .arg(0)
            .arg("give")
            .invoke_async(&mut conn)
            .await?;
        Ok(())
    }

    async fn leave(&self, me: &str) -> StoreResult<()> {
        let mut conn = self.conn.clone();
        let _: i64 = SETTLERS
            .key(self.schema.settlers())
            .arg(me)
            .arg(0)
            .arg("leave")
            .invoke_async(&mut conn)
            .await?;
        Ok(())
    }

    async fn holder(&self, i: usize) -> StoreResult<Option<String>> {
        use redis::AsyncCommands;
        let mut conn = self.conn.clone();
        Ok(conn.get(self.schema.stream_lease(i)).await?)
    }
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1)
}

/// The live settlers' heartbeats (a sorted set by expiry, on Redis's own clock).
static SETTLERS: std::sync::LazyLock<redis::Script> =
    std::sync::LazyLock::new(|| redis::Script::new(include_str!("lua/settlers.v1.lua")));
/// A usage stream's lease: taken when free, renewed by its holder, given back by it alone.
static STREAM_LEASE: std::sync::LazyLock<redis::Script> =
    std::sync::LazyLock::new(|| redis::Script::new(include_str!("lua/stream_lease.v1.lua")));

/// The fair share of `streams` among `settlers` live settlers.
pub fn fair_share(streams: usize, settlers: usize) -> usize {
    streams.div_ceil(settlers.max(1))
}

/// One round of settler `me`, which held `held` after its last round: heartbeat, renew, give
/// back beyond the fair share, take free streams up to it (starting at a place of its own, so
/// settlers starting together do not all try the same stream first). Returns the streams `me`
/// holds now, in ascending order.
pub async fn round(leases: &dyn StreamLeases, me: &str, held: &[usize]) -> StoreResult<Vec<usize>> {
    let count = leases.stream_count();
    let share = fair_share(count, leases.heartbeat(me, LEASE_TTL).await?);
    let mut kept = Vec::with_capacity(share);
    for &i in held {
        if leases.take(i, me, LEASE_TTL).await? {
            kept.push(i);
        }
    }
    while kept.len() > share {
        if let Some(i) = kept.pop() {
            leases.give(i, me).await?;
        }
    }
    let start = start_of(me, count);
    for k in 0..count {
        if kept.len() >= share {
            break;
        }
        let i = (start + k) % count;
        if !kept.contains(&i) && leases.take(i, me, LEASE_TTL).await? {
            kept.push(i);
        }
    }
    kept.sort_unstable();
    Ok(kept)
}

/// Gives back every lease of `held` and removes `me`'s heartbeat (a settler stopping): the
/// others take its streams in their next round instead of after [`LEASE_TTL`].
pub async fn leave(leases: &dyn StreamLeases, me: &str, held: &[usize]) -> StoreResult<()> {
    for &i in held {
        leases.give(i, me).await?;
    }
    leases.leave(me).await
}

/// Where `me` starts looking for free streams: a hash of its id.
fn start_of(me: &str, count: usize) -> usize {
    // FNV-1a: stable across processes and releases (the standard hasher is not).
    let h = me.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    usize::try_from(h % u64::try_from(count.max(1)).unwrap_or(1)).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::fair_share;

    #[test]
    fn the_fair_share_covers_every_stream() {
        for streams in [1usize, 16] {
            for n in 1..=20 {
                assert!(fair_share(streams, n) * n >= streams, "{streams} over {n}");
                assert!(fair_share(streams, n) >= 1);
            }
        }
        assert_eq!(fair_share(16, 0), 16, "no heartbeat read: all");
        assert_eq!(fair_share(16, 3), 6);
    }
}
