//! Capacity: a call takes a slot on the account it goes to (`max_concurrency` live slots per
//! account, counted in the shared store), and waits in a bounded FIFO queue when every account of
//! its order is full.
//!
//! The queue is per proxy instance: at most `routing.queue_depth` requests wait, in arrival order
//! (a fair lock: only the head of the queue polls for a free slot); the next one is refused at once
//! with 429 `capacity_queue_full`, and so is a waiter whose `routing.queue_wait_ms` runs out. Slots
//! are given back when the request ends (`logging`), and expire after `routing.slot_ttl_ms` if the
//! proxy dies.

use crate::errors::GatewayError;
use crate::upstream::Upstream;
use opstate::Slots;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// How often the head of the queue looks for a free slot.
const POLL: Duration = Duration::from_millis(20);

/// The wait queue of one proxy.
#[derive(Default)]
pub(crate) struct Queue {
    waiting: AtomicUsize,
    turn: tokio::sync::Mutex<()>,
}

impl Queue {
    /// Requests waiting now.
    pub fn depth(&self) -> usize {
        self.waiting.load(Ordering::SeqCst)
    }
}

struct Waiting<'a>(&'a AtomicUsize);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The queue's bounds and the slots' lifetime.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    pub slot_ttl: Duration,
    pub depth: usize,
    pub max_wait: Duration,
}

/// Takes a slot on the first account of `order` with room, waiting in the queue when all are full.
/// Returns the index into `order` of the account taken.
pub(crate) async fn take(
    slots: &dyn Slots,
    upstreams: &[Upstream],
    order: &[usize],
    slot_id: &str,
    queue: &Queue,
    limits: Limits,
) -> Result<usize, GatewayError> {
    let Limits {
        slot_ttl: ttl,
        depth,
        max_wait,
    } = limits;
    if let Some(pos) = try_take(slots, upstreams, order, slot_id, ttl).await? {
        return Ok(pos);
    }
    if queue.waiting.fetch_add(1, Ordering::SeqCst) >= depth {
        queue.waiting.fetch_sub(1, Ordering::SeqCst);
        return Err(GatewayError::CapacityQueueFull);
    }
    let _waiting = Waiting(&queue.waiting);
    let deadline = Instant::now() + max_wait;
    let Ok(_turn) = tokio::time::timeout(max_wait, queue.turn.lock()).await else {
        return Err(GatewayError::CapacityQueueFull);
    };
    loop {
        if let Some(pos) = try_take(slots, upstreams, order, slot_id, ttl).await? {
            return Ok(pos);
        }
        if Instant::now() + POLL > deadline {
            return Err(GatewayError::CapacityQueueFull);
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Moves the slot `slot_id` from `from` (if any) to `to` (a failover). `false`: `to` is full, or
/// the store did not answer; the slot stays where it was.
pub(crate) async fn move_to(
    slots: &dyn Slots,
    from: Option<&Upstream>,
    to: &Upstream,
    slot_id: &str,
    ttl: Duration,
) -> bool {
    match slots
        .acquire(&to.account.id, slot_id, to.account.max_concurrency, ttl)
        .await
    {
        Ok(true) => {
            if let Some(old) = from {
                release(slots, &old.account.id, slot_id).await;
            }
            true
        }
        Ok(false) => false,
        Err(e) => {
            tracing::error!(error = %e, "capacity slot lookup failed");
            false
        }
    }
}

/// Gives the slot `slot_id` on `account` back; one the store did not release expires by itself.
pub(crate) async fn release(slots: &dyn Slots, account: &str, slot_id: &str) {
    if let Err(e) = slots.release(account, slot_id).await {
        tracing::warn!(error = %e, "capacity slot not released; it expires by itself");
    }
}

/// Takes a slot on the first account of `order` with room, without waiting.
pub(crate) async fn try_take(
    slots: &dyn Slots,
    upstreams: &[Upstream],
    order: &[usize],
    slot_id: &str,
    ttl: Duration,
) -> Result<Option<usize>, GatewayError> {
    for (pos, &i) in order.iter().enumerate() {
        let Some(u) = upstreams.get(i) else { continue };
        let taken = slots
            .acquire(&u.account.id, slot_id, u.account.max_concurrency, ttl)
            .await
            .map_err(|e| {
                tracing::error!(error = %e, "capacity slot lookup failed");
                GatewayError::StoreUnavailable
            })?;
        if taken {
            return Ok(Some(pos));
        }
    }
    Ok(None)
}
