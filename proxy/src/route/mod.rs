//! Phase 3, the routing decision, made here and only here ([`decide`]): the model that serves the
//! call (after a downgrade under pressure), the session, and the accounts to try in order, the
//! first holding a capacity slot. The rest of the request only follows the [`Decision`]: failover
//! takes the next account of its order.
//!
//! The parts, each in its own module: [`models`] (which configured model, which accounts could
//! serve it), [`downgrade`] (a cheaper model under pressure), [`select`] (rendezvous order, session
//! memory), [`cooldown`] (what a supplier's answer means for its account; cooling accounts are
//! left out), [`capacity`] (slots and the wait queue). See docs/ARCHITECTURE.md §3.

pub(crate) mod capacity;
pub(crate) mod cooldown;
pub(crate) mod downgrade;
pub(crate) mod select;

use crate::classify::Route;
use crate::errors::GatewayError;
use crate::inspect::Work;
use crate::metrics::Metrics;
use crate::models::{ModelRoute, Router};
use crate::money::admit::{self, Hold, HoldPlan};
use crate::upstream::Accounts;
use capacity::Layer;
use opstate::{Calls, GateAsk, HoldAsk, Limits, RateAsk, Sessions, SlotAsk, Slots};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The routing decision for one call.
pub(crate) struct Decision {
    /// The model that serves the call (the downgrade target when it was downgraded).
    pub model: Arc<ModelRoute>,
    /// The model the call asked for, when it was downgraded.
    pub downgraded_from: Option<String>,
    /// The session key (a hash of the session signal), when the call carries one.
    pub session: Option<String>,
    /// Accounts to try, in order; the first holds the call's capacity slot.
    pub order: Vec<usize>,
    /// The wallet hold opened with the slot, when one was asked ([`HoldRequest`]).
    pub hold: Option<Hold>,
    /// The gates (capacity layers) the call holds a slot in, given back with its account slot.
    pub gates: Vec<String>,
}

/// The hold a call opens together with its capacity slot, in the same store step, under the
/// caller's organization and request id: the plan is made for the model the decision settles on
/// (after a downgrade).
pub(crate) struct HoldRequest<'a> {
    pub ttl_ms: u64,
    pub plan: &'a (dyn Fn(&ModelRoute) -> Result<HoldPlan, GatewayError> + Sync),
}

/// What the decision reads: the tables built at start-up, this proxy's wait queue, and the store
/// capabilities routing shares with the fleet.
pub(crate) struct Routing<'a> {
    pub router: &'a Router,
    pub accounts: &'a Accounts,
    pub settings: &'a settings::Routing,
    /// Batch lines' share of capacity (`[batches] yield_above`).
    pub batches: &'a settings::Batches,
    pub queue: &'a capacity::Queue,
    pub metrics: &'a Metrics,
    pub sessions: &'a dyn Sessions,
    pub slots: &'a dyn Slots,
    /// Cooldowns, slot and hold in one step (the fast path).
    pub calls: &'a dyn Calls,
}

impl<'a> Routing<'a> {
    /// What the routing decision reads: the request's configuration, the stores, this proxy's
    /// queue and metrics.
    pub(crate) fn new(
        live: &'a crate::live::Live,
        stores: &'a opstate::Stores,
        queue: &'a capacity::Queue,
        metrics: &'a Metrics,
    ) -> Routing<'a> {
        Routing {
            router: &live.router,
            accounts: &live.accounts,
            settings: &live.settings.routing,
            batches: &live.settings.batches,
            queue,
            metrics,
            sessions: stores.sessions.as_ref(),
            slots: stores.slots.as_ref(),
            calls: stores.calls.as_ref(),
        }
    }
}

/// The caller as routing sees it.
pub(crate) struct Caller<'a> {
    pub org_id: i64,
    pub group_id: i64,
    pub key_id: i64,
    /// The keyed hash of the caller's key: admission refuses a key revoked since its record was
    /// read (`opstate::Limits::key`).
    pub key_hash: &'a str,
    /// The request id: the capacity slot's id, and the rendezvous seed of a call without session.
    pub request_id: &'a str,
    /// The key's calls in flight at most (its own limit, else its group's).
    pub key_concurrency: Option<u32>,
    /// The key's calls per minute at most (its own limit, else its group's).
    pub key_per_minute: Option<u32>,
    /// The key's spend budget, checked with its hold (`opstate::budget`).
    pub budget: Option<opstate::KeyBudget>,
    /// A batch line (issue 46): takes a slot only below `[batches] yield_above` of an account's
    /// capacity, and never waits in the queue (429 `batch_capacity_yielded`).
    pub batch: bool,
}

impl Caller<'_> {
    /// The caller of `key`, its limits resolved against its group in `settings`.
    pub fn of<'a>(
        key: &opstate::KeyRecord,
        key_hash: &'a str,
        request_id: &'a str,
        settings: &settings::Settings,
    ) -> Caller<'a> {
        let group = settings.groups.iter().find(|g| g.id == key.group_id);
        Caller {
            org_id: key.org_id,
            group_id: key.group_id,
            key_id: key.key_id,
            key_hash,
            request_id,
            key_concurrency: key
                .limits
                .max_concurrency
                .or(group.and_then(|g| g.key_max_concurrency)),
            key_per_minute: key
                .limits
                .requests_per_minute
                .or(group.and_then(|g| g.key_requests_per_minute)),
            budget: key.budget,
            batch: false,
        }
    }

    /// The name of the key's gate and per-minute counter.
    fn key_gate(&self) -> String {
        format!("key:{}", self.key_id)
    }
}

/// The deployment-wide gate's name.
const GLOBAL_GATE: &str = "global";

/// Decides how `work` on `route` is served: the model (resolved for the caller's group, maybe
/// downgraded), the accounts in rendezvous order of the session (else the request) with the
/// session's sticky account first and cooling accounts out, and a capacity slot on the first
/// account with room (else a bounded wait) together with the call's hold when `hold` asks for one.
pub(crate) async fn decide(
    r: &Routing<'_>,
    work: &Work<'_>,
    route: Route,
    caller: Caller<'_>,
    hold: Option<HoldRequest<'_>>,
) -> Result<Decision, GatewayError> {
    let mut downgraded_from = None;
    let mut model = r.router.resolve(work.model(), caller.group_id, route)?;
    if let Some(target) = downgrade::target(r, work, &model, caller.group_id, route).await {
        r.metrics
            .downgrades
            .with_label_values(&[model.model.id.as_str(), target.model.id.as_str()])
            .inc();
        downgraded_from = Some(model.model.id.clone());
        model = target;
    }
    let seed = match &work.session {
        Some(signal) => format!("{}:{signal}", caller.org_id),
        None => caller.request_id.to_string(),
    };
    let session = work.session.as_deref().map(select::session_key);
    let ids = r.accounts.ids();
    let edit = work.is_edit();
    if edit && model.model.kind == settings::ModelKind::Image && model.edit_accounts.is_empty() {
        return Err(GatewayError::field(
            format!(
                "contents[0].parts: model {:?} does not support reference images (image edits)",
                model.model.id
            ),
            "contents[0].parts",
        ));
    }
    let pool = model.pool(edit);
    if pool.is_empty() {
        return Err(GatewayError::NoAccount(model.model.id.clone()));
    }
    let mut ordered = select::order(pool, &ids, &seed);
    if let Some(key) = &session
        && let Some(account) = select::sticky(r.sessions, caller.org_id, key).await?
    {
        // The account this conversation moved to (after a failover) keeps it while alive.
        select::prefer(&mut ordered, &ids, &account);
    }
    let plan = hold
        .map(|h| (h.plan)(&model).map(|p| (p, h.ttl_ms)))
        .transpose()?;
    let plan = plan.as_ref().map(|(p, ttl)| (p, *ttl));
    let waited = Instant::now();
    let admitted = admit(r, &ordered, &ids, &caller, plan).await;
    r.metrics.queue_wait.observe(waited.elapsed().as_secs_f64());
    let (mut order, chosen, held, gates) = admitted?;
    order.retain(|&i| i != chosen);
    order.insert(0, chosen);
    Ok(Decision {
        model,
        downgraded_from,
        session,
        order,
        hold: held,
        gates,
    })
}

/// One admission step (`Calls::admit`); a store that does not answer is 503.
async fn attempt(
    calls: &dyn Calls,
    asks: &[SlotAsk<'_>],
    slot_id: &str,
    slot_ttl: Duration,
    limits: Limits<'_>,
    hold: Option<HoldAsk<'_>>,
) -> Result<opstate::Admitted, GatewayError> {
    let admitted = calls
        .admit(asks, slot_id, slot_ttl, limits, hold)
        .await
        .map_err(|e| {
            tracing::error!(error = %e, "admission lookup failed");
            GatewayError::StoreUnavailable
        })?;
    // The key was disabled since this proxy read its record: refused like any unknown key.
    match admitted.limited {
        Some(opstate::Limited::Revoked) => {
            tracing::debug!("refused a key revoked since its record was cached");
            return Err(GatewayError::InvalidKey);
        }
        // Over the key's budget: refused at once (waiting does not help before the period ends).
        Some(opstate::Limited::Budget(over)) => {
            return Err(GatewayError::BudgetExceeded {
                resets_in_seconds: over.resets_in.as_secs().max(1),
            });
        }
        _ => {}
    }
    Ok(admitted)
}

/// One slot ask per account in `ordered`, with its estimated room now.
/// Batch work never waits: refused (429), counted; the runner tries again later.
fn batch_yield(metrics: &Metrics) -> GatewayError {
    metrics.limits_hit.with_label_values(&["batch_yield"]).inc();
    GatewayError::BatchYield
}

/// A batch line's room is its share below `yield_above` (see `settings::Batches::slots_of`).
fn slot_asks<'a>(
    r: &Routing<'_>,
    ordered: &[usize],
    ids: &[&'a str],
    batch: bool,
) -> Vec<SlotAsk<'a>> {
    let upstreams = r.accounts.all();
    ordered
        .iter()
        .map(|&i| {
            let room = upstreams.get(i).map_or(0, |u| u.estimate.now());
            SlotAsk {
                account: ids.get(i).copied().unwrap_or_default(),
                max: match batch {
                    true if room > 0 => r.batches.slots_of(room),
                    _ => room,
                },
            }
        })
        .collect()
}

/// The concurrency gates a call takes (the gateway's in-flight bound, its key's concurrency) and
/// the capacity layer each stands for.
fn gate_asks<'a>(
    r: &Routing<'_>,
    caller: &Caller<'_>,
    key_gate: &'a str,
) -> (Vec<GateAsk<'a>>, Vec<Layer>) {
    let mut gates = Vec::with_capacity(2);
    let mut layers = Vec::with_capacity(2);
    if let Some(max) = r.settings.max_in_flight {
        gates.push(GateAsk {
            gate: GLOBAL_GATE,
            max,
        });
        layers.push(Layer::Global);
    }
    if let Some(max) = caller.key_concurrency {
        gates.push(GateAsk {
            gate: key_gate,
            max,
        });
        layers.push(Layer::KeyConcurrency);
    }
    (gates, layers)
}

/// A capacity slot on the first open account of `ordered` with room (at its estimated capacity)
/// and in the gates of the caller's limits, counted in the key's minute, and, with a `plan` (and
/// its hold TTL), the call's hold: all in one store step (`Calls::admit`). A call kept out by a
/// layer waits in the queue (`capacity::wait`), trying that step again. Returns the open accounts
/// of `ordered`, the one whose slot is held, the hold and the gates held.
async fn admit(
    r: &Routing<'_>,
    ordered: &[usize],
    ids: &[&str],
    caller: &Caller<'_>,
    plan: Option<(&HoldPlan, u64)>,
) -> Result<(Vec<usize>, usize, Option<Hold>, Vec<String>), GatewayError> {
    let slot_ttl = Duration::from_millis(r.settings.slot_ttl_ms);
    let (org, hold_id) = (caller.org_id, caller.request_id);
    let asks = slot_asks(r, ordered, ids, caller.batch);
    let key_gate = caller.key_gate();
    let (gates, layers) = gate_asks(r, caller, &key_gate);
    let limits = Limits {
        gates: &gates,
        per_minute: caller.key_per_minute.map(|limit| RateAsk {
            counter: &key_gate,
            limit,
        }),
        key: (!caller.key_hash.is_empty()).then_some(caller.key_hash),
    };
    let meta = plan.map(|(p, _)| admit::describe(p)).transpose()?;
    let ask = plan
        .zip(meta.as_deref())
        .map(|((p, ttl_ms), meta)| HoldAsk {
            org,
            hold_id,
            amount: p.amount,
            ttl_ms,
            meta,
            spend: Some(opstate::SpendAsk {
                key_id: caller.key_id,
                budget: caller.budget,
            }),
        });
    let mut admitted = attempt(r.calls, &asks, hold_id, slot_ttl, limits, ask).await?;
    let open = select::available(ordered, &admitted.cooldowns)?;
    if let Some(first) = capacity::blocked(&admitted, &layers) {
        if caller.batch {
            return Err(batch_yield(r.metrics));
        }
        r.metrics
            .limits_hit
            .with_label_values(&[first.label()])
            .inc();
        let bounds = capacity::Bounds {
            depth: r.settings.queue_depth,
            max_wait: Duration::from_millis(r.settings.queue_wait_ms),
        };
        let waiter = capacity::enter(r.queue, bounds, r.metrics, first).await?;
        let mut layer = first;
        loop {
            waiter.pause(layer).await?;
            admitted = attempt(r.calls, &asks, hold_id, slot_ttl, limits, ask).await?;
            // Every account cooled meanwhile: that answer (503, or 429 with the reset), not a
            // longer wait.
            select::available(ordered, &admitted.cooldowns)?;
            match capacity::blocked(&admitted, &layers) {
                None => break,
                Some(next) => layer = next,
            }
        }
    }
    let held = match (plan, admitted.reservation) {
        (Some((p, _)), Some(reservation)) => {
            Some(admit::outcome(org, hold_id, p, Ok(reservation))?)
        }
        _ => None,
    };
    // Admitted, or refused by the wallet (`outcome` answered its error above): the store takes
    // the slot, the gates and the hold together or none of them.
    let pos = admitted.taken.ok_or(GatewayError::Internal)?;
    let chosen = *ordered.get(pos).ok_or(GatewayError::Internal)?;
    let mut held_gates: Vec<String> = Vec::with_capacity(gates.len());
    held_gates.extend(gates.iter().map(|g| g.gate.to_string()));
    Ok((open, chosen, held, held_gates))
}
