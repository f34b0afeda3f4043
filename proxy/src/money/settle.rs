//! Phase 7, settlement: runs once in `logging`, after the request ended on any path.
//!
//! Takes the finished request as plain data ([`Finished`]) and the store capability it writes
//! ([`Calls::finish`]): in one store step the capacity slot is given back, the hold settled and
//! the usage event appended with what the settlement charged.
//!
//! Turns the meter's result into one usage event per metered request (a request that reached at
//! least one supplier account), appends it to the usage stream, and records metrics and one
//! structured log line. Requests the gateway refused before contacting a supplier produce no usage
//! event: nothing was served.
//!
//! A step that fails is retried a few times (a retry after a step that did run finds the hold
//! resolved and appends the event again, charged nothing: the settler books a request id once,
//! the first time); if the store stays down, the end is handed back ([`Unfinished`]): the hold
//! stays listed for renewal and the proxy's watcher (`money::resend`) runs the money step again
//! every second until the store takes it, so a call that ended while its shard failed over is
//! still charged exactly. Only a proxy that stops with ends still waiting writes them to the error
//! log in full (to be replayed), counts them in `usage_events_lost_total` and leaves their holds
//! to the reconciler.

use crate::call::Finished;
use crate::classify::Route;
use crate::metrics::Metrics;
use crate::money::admit::Hold;
use crate::money::price;
use crate::money::resend::Unfinished;
use crate::wire::Usage;
use money::NanoUsd;
use opstate::{Calls, Finish, Measurement, Settlement, UsageEvent, UsageStream};
use std::time::Duration;

/// Attempts to append a usage event before giving up.
const APPEND_ATTEMPTS: u32 = 3;

/// What a finished request holds until it is settled.
pub(crate) struct Held<'a> {
    /// Its wallet hold.
    pub hold: Option<Hold>,
    /// Its capacity slot: (account, slot id).
    pub slot: Option<(&'a str, &'a str)>,
    /// The gates (capacity layers) it holds a slot in, under the same slot id.
    pub gates: &'a [&'a str],
}

/// Settles a finished request: gives its capacity slot (and its gates' slots) back, closes its
/// hold (if any) at the price of what was served, appends its usage event (every request that
/// reached a supplier account), and writes one log line.
///
/// `Err`: the store never took the end (after a few attempts); the caller keeps it for the
/// watcher to store ([`Unfinished`]).
pub(crate) async fn settle(
    f: Finished<'_>,
    held: Held<'_>,
    calls: &dyn Calls,
    metrics: &Metrics,
) -> Result<Option<UsageEvent>, Unfinished> {
    let Held { hold, slot, gates } = held;
    let mut event = usage_event(&f);
    let cost = hold
        .as_ref()
        .map_or(NanoUsd::ZERO, |h| cost_of(&f, h, event.as_ref()));
    if let (Some(h), Some(e)) = (&hold, event.as_mut()) {
        e.cost_nanos = cost;
        e.hold_nanos = h.amount;
        e.retail_rate = Some(h.rate);
        e.wholesale_rate = h.wholesale;
    }
    let step = Finish {
        slot,
        gates,
        hold: hold.as_ref().map(|h| (h.org, h.id.as_str())),
        cost,
        event: event.as_ref(),
    };
    let finished = if slot.is_some() || hold.is_some() || event.is_some() {
        finish(calls, step, f.request_id).await
    } else {
        Some(None)
    };
    if let (Some(_), Some(e)) = (&hold, event.as_mut()) {
        // A store that never answered charged nothing known: the cost is excess, as when the
        // hold was already gone.
        let settlement = finished.unwrap_or(Some(Settlement::Unknown));
        (e.charged_nanos, e.excess_nanos) = opstate::charged(settlement, cost);
    }
    if let Some(h) = &hold {
        report(f.request_id, h.org, finished, metrics);
    }
    log(&f, event.as_ref());
    if let Some(event) = &event {
        metrics.record_tokens(event);
        metrics.account_call(&event.account_id, event.status);
    }
    if finished.is_none() {
        return Err(Unfinished::new(hold.map(|h| (h.org, h.id)), cost, event));
    }
    Ok(event)
}

/// Logs and counts what the store said of a held call's end: a mirror found below its open
/// holds, an excess the wallet could not pay, a hold already gone, or no answer.
fn report(request_id: &str, org: i64, finished: Option<Option<Settlement>>, metrics: &Metrics) {
    if let Some(Some(Settlement::Settled {
        below_holds: true, ..
    })) = finished
    {
        tracing::error!(request_id = %request_id, org, "wallet mirror below its open holds: charged nothing; the mirror waits for a reload from the ledger");
        metrics.wallets_below_holds.inc();
    }
    match finished {
        Some(Some(Settlement::Settled { excess, .. })) if excess.is_positive() => {
            tracing::warn!(request_id = %request_id, org, excess = excess.nanos(), "usage cost exceeded what the wallet could pay");
        }
        Some(Some(Settlement::Settled { .. })) => {}
        Some(_) => {
            // The hold is gone (resolved by the reconciler after its deadline, or the store
            // lost it): the usage event still carries the cost; the settler books it.
            tracing::warn!(request_id = %request_id, org, "hold already resolved or lost at settlement");
            metrics.settlements_unresolved.inc();
        }
        None => {
            tracing::warn!(request_id = %request_id, org, "call end not stored; the watcher stores it when the store answers");
        }
    }
}

/// The call's log line: settled (model, account, tokens, measurement, timings) or answered by
/// the gateway (the refusal).
fn log(f: &Finished<'_>, event: Option<&UsageEvent>) {
    let route = f.route.map(|r| r.label()).unwrap_or("unknown");
    let latency_ms = elapsed_ms(f.latency);
    // The split `Server-Timing` gave the client (0: no header was written, or no supplier).
    let gateway_ms = f.gateway_time.map_or(0, elapsed_ms);
    let upstream_ms = f.upstream_wait.map_or(0, elapsed_ms);
    let status = f.status;
    match event {
        Some(e) => tracing::info!(
            request_id = %f.request_id,
            route,
            status,
            model = %e.model_served,
            account = %e.account_id,
            org_id = e.org_id,
            key_id = e.key_id,
            input_tokens = e.input_tokens,
            output_tokens = e.output_tokens,
            measurement = ?e.measurement,
            attempts = e.attempts,
            latency_ms,
            gateway_ms,
            upstream_ms,
            "request settled"
        ),
        None => tracing::info!(
            request_id = %f.request_id,
            route,
            status,
            refusal = f.refusal.unwrap_or("-"),
            latency_ms,
            gateway_ms,
            "request answered by the gateway"
        ),
    }
}

/// Runs the call's end step, retrying a few times. `None`: the store never answered.
async fn finish(
    calls: &dyn Calls,
    step: Finish<'_>,
    request_id: &str,
) -> Option<Option<Settlement>> {
    for attempt in 0..APPEND_ATTEMPTS {
        match calls.finish(step).await {
            Ok(settlement) => return Some(settlement),
            Err(e) => {
                tracing::warn!(%request_id, error = %e, attempt, "call end not stored; retrying");
                tokio::time::sleep(Duration::from_millis(50 * u64::from(attempt + 1))).await;
            }
        }
    }
    None
}

/// The price of what was served (zero when nothing was); the hold when it cannot be priced.
fn cost_of(f: &Finished<'_>, hold: &Hold, event: Option<&UsageEvent>) -> NanoUsd {
    let (Some(e), Some(call)) = (event, f.call) else {
        return NanoUsd::ZERO;
    };
    let usage = Usage {
        input: e.input_tokens,
        output: e.output_tokens,
        cached: e.cached_tokens,
        cache_write: e.cache_write_tokens,
        cache_write_1h: e.cache_write_1h_tokens,
        reasoning: 0,
    };
    let prices = &call.model.model.prices;
    let priced = match (call.audio_seconds, call.images) {
        (Some(_), _) => price::audio_cost(prices, e.audio_seconds, hold.rate),
        (None, Some(_)) => price::image_cost(prices, e.images, hold.rate),
        (None, None) => price::cost(prices, usage, hold.rate),
    };
    priced.unwrap_or_else(|err| {
        tracing::error!(request_id = %f.request_id, error = %err, "cannot price the usage; charging the hold");
        hold.amount
    })
}

/// The usage event of a request that reached a supplier account; `None` for one the gateway
/// answered itself, and for a video create (its task's usage event is written when the task
/// ends: `video::settle`).
fn usage_event(f: &Finished<'_>) -> Option<UsageEvent> {
    if f.route == Some(Route::VideoCreate) {
        return None;
    }
    let call = f.call?;
    let caller = f.caller?;
    let account = f.account?;
    let (usage, measurement, audio_seconds, images) = served(call, f.status, f.meter, f.images);
    Some(UsageEvent {
        request_id: f.request_id.to_string(),
        key_id: caller.key_id,
        org_id: caller.org_id,
        group_id: caller.group_id,
        route: f.route.map(|r| r.label()).unwrap_or("unknown").to_string(),
        model_requested: call.requested_model.clone(),
        model_served: call.model.model.id.clone(),
        account_id: account.to_string(),
        input_tokens: usage.input,
        output_tokens: usage.output,
        cached_tokens: usage.cached,
        cache_write_tokens: usage.cache_write,
        cache_write_1h_tokens: usage.cache_write_1h,
        measurement,
        status: f.status,
        stream: call.stream,
        started_at_ms: f.started_at_ms,
        latency_ms: elapsed_ms(f.latency),
        ttfb_ms: f.ttfb.map(elapsed_ms),
        attempts: f.attempts,
        cost_nanos: NanoUsd::ZERO,
        charged_nanos: NanoUsd::ZERO,
        excess_nanos: NanoUsd::ZERO,
        hold_nanos: NanoUsd::ZERO,
        project: call.project.clone(),
        workflow: call.workflow.clone(),
        audio_seconds,
        images,
        video_seconds: 0,
        retail_rate: None,
        wholesale_rate: None,
        resent: false,
        supplier: supplier_side(call, f, usage, images, audio_seconds),
        batch: f.batch.cloned(),
    })
}

/// What an attempt's answer served as the ledger counts it — usage, how it was measured, seconds
/// of audio and images — from its `status`, its meter and (image calls) the images of the whole
/// answer (`images`: `None` when it was not read whole).
pub(crate) fn served(
    call: &crate::call::Call,
    status: u16,
    meter: Option<&crate::meter::Meter>,
    images: Option<u64>,
) -> (Usage, Measurement, u64, u64) {
    let nothing = (Usage::default(), Measurement::Exact, 0, 0);
    match (meter, call.audio_seconds) {
        (Some(m), _) if status >= 400 && !m.has_usage() => nothing,
        // Image calls: the images of a whole, readable answer (0 when it failed, was cut or
        // carried none; flagged estimated when the answer could not be read), tokens as the
        // supplier reported.
        (Some(m), _) if call.images.is_some() => {
            let measurement = match images {
                Some(_) => Measurement::Exact,
                None if m.served_bytes() => Measurement::Estimated,
                None => Measurement::Exact,
            };
            let usage = m.reported().unwrap_or_default();
            (usage, measurement, 0, images.unwrap_or(0))
        }
        // An error answer without usage (a refusal, a rate limit) served nothing; so did a
        // supplier that sent no body byte (stalled after its headers, or closed).
        (Some(m), _) if !m.served_bytes() && !m.has_usage() => nothing,
        // Audio: the duration the supplier reported, else the one read from the file.
        (Some(m), Some(estimate)) => match m.audio_seconds() {
            Some(seconds) => (
                m.reported().unwrap_or_default(),
                Measurement::Exact,
                seconds,
                0,
            ),
            None => (Usage::default(), Measurement::Estimated, estimate, 0),
        },
        (Some(m), None) => {
            let (usage, measurement) = m.outcome(call.request_bytes, call.output_bound);
            (usage, measurement, 0, 0)
        }
        // The supplier never answered with a body, or refused: nothing was served.
        (None, _) => nothing,
    }
}

/// The supplier's side of the call: the attempts it moved on from, and what the answering one
/// costs at the supplier's prices (`None`: unknown; audio has no supplier price yet).
fn supplier_side(
    call: &crate::call::Call,
    f: &Finished<'_>,
    usage: Usage,
    images: u64,
    audio_seconds: u64,
) -> opstate::Supplier {
    opstate::Supplier {
        cost_nanos: f
            .supplier_rate
            .and_then(|rate| supplier_cost(call, rate, usage, images, audio_seconds)),
        earlier: f.earlier.to_vec(),
    }
}

/// What one attempt that `served` this costs at the supplier's prices × the account's `rate`
/// (`None`: unknown; audio has no supplier price yet).
pub(crate) fn supplier_cost(
    call: &crate::call::Call,
    rate: money::RateMultiplier,
    usage: Usage,
    images: u64,
    audio_seconds: u64,
) -> Option<NanoUsd> {
    let prices = &call.model.model.supplier_prices;
    // An image call is billed per image, as its customer is (the tokens it reports are not).
    let usage = match call.images {
        Some(_) => Usage::default(),
        None => usage,
    };
    match audio_seconds {
        0 => price::supplier_cost(prices, usage, images, 0, rate),
        _ => None,
    }
}

/// Appends `event`, retrying a few times; if the store stays down, the event is logged in full
/// (so it can be replayed) and counted as lost.
pub(crate) async fn append(usage: &dyn UsageStream, metrics: &Metrics, event: &UsageEvent) {
    let mut last_error = None;
    for attempt in 0..APPEND_ATTEMPTS {
        match usage.append(event).await {
            Ok(()) => return,
            Err(e) => {
                last_error = Some(e);
                tokio::time::sleep(Duration::from_millis(50 * u64::from(attempt + 1))).await;
            }
        }
    }
    let error = last_error.map(|e| e.to_string()).unwrap_or_default();
    crate::money::resend::lost(metrics, event, &error);
}

pub(crate) fn elapsed_ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
