//! Capacity: the layers a call must fit under, and the bounded wait when it does not.
//!
//! Layers, checked together in the store's admission step (`opstate::Calls::admit`):
//! - **global**: calls in flight across the deployment at most (`routing.max_in_flight`; a gate
//!   shared through Redis when present);
//! - **key**: calls of one key in flight at most, and calls of one key admitted per minute at most
//!   (the key's own `max_concurrency` / `requests_per_minute`, else its group's
//!   `key_max_concurrency` / `key_requests_per_minute`);
//! - **pool**: a slot on an account of the model's pool, each account counting at most its
//!   estimated capacity (`upstream::accounts::Estimate`: `max_concurrency`, cut by half on a 429 or
//!   a failure, recovering one slot per `routing.health_recovery_ms`);
//! - upstream account pressure and provider usage limits are the cooldowns (`cooldown.rs`).
//!
//! A call over a layer waits in this proxy's bounded queue: at most `routing.queue_depth` wait, the
//! next one is refused at once with 429 `capacity_queue_full`, and so is a waiter whose
//! `routing.queue_wait_ms` runs out. Waiters for the shared layers (pool, global) go in arrival
//! order (a fair lock: only the head polls); a waiter for its own key's limit polls on its own, so
//! one busy key never holds up the others. A key over its per-minute limit waits for the next
//! minute only when it starts within the wait bound; otherwise it is refused at once. Slots are
//! given back when the request ends (`logging`), and expire after `routing.slot_ttl_ms` if the
//! proxy dies.

use crate::errors::GatewayError;
use crate::metrics::Metrics;
use crate::upstream::Upstream;
use opstate::{Admitted, Limited, Slots};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// How often a waiter tries again.
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

/// The queue's bounds.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Bounds {
    pub depth: usize,
    pub max_wait: Duration,
}

/// The layer that kept a call out (the `layer` label of `tollgate_limits_hit_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Layer {
    /// Every open account of the pool is at its estimated capacity.
    Pool,
    /// The deployment's calls in flight.
    Global,
    /// The key's calls in flight.
    KeyConcurrency,
    /// The key's calls this minute; the minute ends in the duration.
    KeyRate(Duration),
}

impl Layer {
    pub fn label(self) -> &'static str {
        match self {
            Layer::Pool => "pool",
            Layer::Global => "global",
            Layer::KeyConcurrency => "key_concurrency",
            Layer::KeyRate(_) => "key_rate",
        }
    }

    /// Whether the layer is shared with other callers (waiters queue in arrival order).
    fn shared(self) -> bool {
        matches!(self, Layer::Pool | Layer::Global)
    }
}

/// The layer an admission was kept out by, if any: `gates` names what each gate index of the
/// call's limits is. `None`: the call was admitted, or refused by its wallet.
pub(crate) fn blocked(admitted: &Admitted, gates: &[Layer]) -> Option<Layer> {
    match admitted.limited {
        Some(Limited::Gate(i)) => Some(gates.get(i).copied().unwrap_or(Layer::Global)),
        Some(Limited::PerMinute { resets_in }) => Some(Layer::KeyRate(resets_in)),
        // Refused as an invalid key by `route::attempt` before anything waits.
        Some(Limited::Revoked | Limited::Budget(_)) => None,
        None if admitted.taken.is_none() && admitted.reservation.is_none() => Some(Layer::Pool),
        None => None,
    }
}

/// A call waiting in this proxy's queue (see the module): entered with [`enter`], it pauses
/// between admission attempts with [`Waiter::pause`] until its wait bound runs out. Leaving (drop)
/// frees its place in the queue, and its turn when it held one.
pub(crate) struct Waiter<'a> {
    waiting: &'a AtomicUsize,
    _turn: Option<tokio::sync::MutexGuard<'a, ()>>,
    deadline: Instant,
    metrics: &'a Metrics,
}

impl Drop for Waiter<'_> {
    fn drop(&mut self) {
        self.waiting.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A refusal after (or instead of) waiting: 429 `capacity_queue_full`, counted.
fn full(metrics: &Metrics, layer: Layer) -> GatewayError {
    metrics.limits_hit.with_label_values(&["queue_full"]).inc();
    tracing::debug!(layer = layer.label(), "capacity: refused");
    GatewayError::CapacityQueueFull
}

/// Enters the queue after a first admission attempt was kept out by `first`: refused at once
/// (429 `capacity_queue_full`) when the queue is full, or when `first` is the key's minute and the
/// next one starts after the wait bound. Waiters for a shared layer take their turn in arrival
/// order.
pub(crate) async fn enter<'a>(
    queue: &'a Queue,
    bounds: Bounds,
    metrics: &'a Metrics,
    first: Layer,
) -> Result<Waiter<'a>, GatewayError> {
    if let Layer::KeyRate(resets_in) = first
        && resets_in > bounds.max_wait
    {
        return Err(full(metrics, first));
    }
    if queue.waiting.fetch_add(1, Ordering::SeqCst) >= bounds.depth {
        queue.waiting.fetch_sub(1, Ordering::SeqCst);
        return Err(full(metrics, first));
    }
    let mut waiter = Waiter {
        waiting: &queue.waiting,
        _turn: None,
        deadline: Instant::now() + bounds.max_wait,
        metrics,
    };
    if first.shared() {
        match tokio::time::timeout(bounds.max_wait, queue.turn.lock()).await {
            Ok(turn) => waiter._turn = Some(turn),
            Err(_) => return Err(full(metrics, first)),
        }
    }
    Ok(waiter)
}

impl Waiter<'_> {
    /// Waits before the next attempt of a call kept out by `layer` (until the key's next minute,
    /// else [`POLL`]); 429 `capacity_queue_full` when that would pass the wait bound.
    pub async fn pause(&self, layer: Layer) -> Result<(), GatewayError> {
        let pause = match layer {
            Layer::KeyRate(resets_in) => resets_in.max(POLL),
            _ => POLL,
        };
        if Instant::now() + pause > self.deadline {
            return Err(full(self.metrics, layer));
        }
        tokio::time::sleep(pause).await;
        Ok(())
    }
}

/// Moves the slot `slot_id` from `from` (if any) to `to` (a failover), counting `to` at its
/// estimated capacity. `false`: `to` is full, or the store did not answer; the slot stays where it
/// was.
pub(crate) async fn move_to(
    slots: &dyn Slots,
    from: Option<&Upstream>,
    to: &Upstream,
    slot_id: &str,
    ttl: Duration,
) -> bool {
    match slots
        .acquire(&to.account.id, slot_id, to.estimate.now(), ttl)
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
