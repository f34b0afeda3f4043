//! Phase 7, settlement: runs once in `logging`, after the request ended on any path.
//!
//! Turns the meter's result into one usage event per metered request (a request that reached at
//! least one supplier account), appends it to the usage stream, and records metrics and one
//! structured log line. Requests the gateway refused before contacting a supplier produce no usage
//! event: nothing was served.
//!
//! An append that fails is retried a few times; if the store stays down, the event is written to
//! the error log in full (so it can be replayed) and counted in `usage_events_lost_total`.

use crate::ctx::RequestCtx;
use crate::gateway::Shared;
use opstate::UsageEvent;
use std::time::Duration;

/// Attempts to append a usage event before giving up.
const APPEND_ATTEMPTS: u32 = 3;

/// Settles a finished request. `status` is what the client received (0: nothing was sent).
pub async fn settle(shared: &Shared, ctx: &mut RequestCtx, status: u16) {
    let route = ctx.route.map(|r| r.label()).unwrap_or("unknown");
    if ctx.route.is_some() {
        shared.metrics.in_flight.with_label_values(&[route]).dec();
    }
    let model_label = ctx
        .call
        .as_ref()
        .map(|c| c.model.model.id.as_str())
        .unwrap_or("-");
    let status_label = status.to_string();
    shared
        .metrics
        .requests
        .with_label_values(&[route, model_label, status_label.as_str()])
        .inc();
    if let Some(reason) = ctx.refusal {
        shared.metrics.refused.with_label_values(&[reason]).inc();
    }
    if let Some(ttfb) = ctx.ttfb {
        shared
            .metrics
            .ttfb
            .with_label_values(&[route])
            .observe(ttfb.as_secs_f64());
    }

    if let Some(u) = ctx.slot.take().and_then(|i| shared.upstreams.get(i))
        && let Err(e) = shared
            .stores()
            .slots
            .release(&u.account.id, &ctx.request_id)
            .await
    {
        tracing::warn!(error = %e, "capacity slot not released; it expires by itself");
    }
    shared
        .metrics
        .queue_depth
        .set(i64::try_from(shared.queue.depth()).unwrap_or(i64::MAX));
    let mut event = usage_event(shared, ctx, status);
    if let Some(hold) = ctx.hold.take() {
        settle_hold(shared, ctx, hold, event.as_mut()).await;
    }
    let latency_ms = elapsed_ms(ctx.started.elapsed());
    match &event {
        Some(e) => tracing::info!(
            request_id = %ctx.request_id,
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
            "request settled"
        ),
        None => tracing::info!(
            request_id = %ctx.request_id,
            route,
            status,
            refusal = ctx.refusal.unwrap_or("-"),
            latency_ms,
            "request answered by the gateway"
        ),
    }
    if let Some(event) = event {
        record_tokens(shared, &event);
        append(shared, &event).await;
    }
}

/// Closes the request's hold exactly once: charges the price of what was served (zero when nothing
/// was), and records cost, charge and excess on the usage event.
async fn settle_hold(
    shared: &Shared,
    ctx: &RequestCtx,
    hold: crate::admit::Hold,
    event: Option<&mut UsageEvent>,
) {
    let cost = match (&event, ctx.call.as_ref()) {
        (Some(e), Some(call)) => {
            let usage = crate::meter::Usage {
                input: e.input_tokens,
                output: e.output_tokens,
                cached: e.cached_tokens,
            };
            let prices = &call.model.model.prices;
            let priced = match call.audio_seconds {
                Some(_) => crate::price::audio_cost(prices, e.audio_seconds, hold.rate_ppm),
                None => crate::price::cost(prices, usage, hold.rate_ppm),
            };
            match priced {
                Ok(c) => c,
                Err(err) => {
                    tracing::error!(request_id = %ctx.request_id, error = %err, "cannot price the usage; charging the hold");
                    hold.amount
                }
            }
        }
        _ => settings::NanoUsd::ZERO,
    };
    let outcome = shared
        .stores()
        .wallets
        .settle(hold.org, &hold.id, cost.0)
        .await;
    let (charged, excess) = match outcome {
        Ok(opstate::Settlement::Settled { charged, excess }) => (charged, excess),
        Ok(opstate::Settlement::Unknown | opstate::Settlement::Missing) => {
            // The hold is gone (resolved by the reconciler after its deadline, or the store lost
            // it): the usage event still carries the cost; the settler books it.
            tracing::warn!(request_id = %ctx.request_id, org = hold.org, "hold already resolved or lost at settlement");
            shared.metrics.settlements_unresolved.inc();
            (0, cost.0)
        }
        Err(e) => {
            tracing::error!(request_id = %ctx.request_id, error = %e, "settlement failed; the reconciler resolves the hold after its deadline");
            shared.metrics.settlements_unresolved.inc();
            (0, cost.0)
        }
    };
    if excess > 0 {
        tracing::warn!(request_id = %ctx.request_id, org = hold.org, excess, "usage cost exceeded what the wallet could pay");
    }
    if let Some(e) = event {
        e.cost_nanos = cost.0;
        e.charged_nanos = charged;
        e.excess_nanos = excess;
        e.hold_nanos = hold.amount.0;
    }
}

fn usage_event(shared: &Shared, ctx: &RequestCtx, status: u16) -> Option<UsageEvent> {
    let call = ctx.call.as_ref()?;
    let caller = ctx.caller.as_ref()?;
    let account = *ctx.tried.last()?;
    let upstream = shared.upstreams.get(account)?;
    let nothing = (
        crate::meter::Usage::default(),
        opstate::Measurement::Exact,
        0,
    );
    let (usage, measurement, audio_seconds) = match (&ctx.meter, call.audio_seconds) {
        // An error answer without usage (a refusal, a rate limit) served nothing.
        (Some(m), _) if status >= 400 && !m.has_usage() => nothing,
        // Audio: the duration the supplier reported, else the one read from the file.
        (Some(m), Some(estimate)) => match m.audio_seconds() {
            Some(seconds) => (
                m.reported().unwrap_or_default(),
                opstate::Measurement::Exact,
                seconds,
            ),
            None => (
                crate::meter::Usage::default(),
                opstate::Measurement::Estimated,
                estimate,
            ),
        },
        (Some(m), None) => {
            let (usage, measurement) = m.outcome(call.request_bytes);
            (usage, measurement, 0)
        }
        // The supplier never answered with a body, or refused: nothing was served.
        (None, _) => nothing,
    };
    Some(UsageEvent {
        request_id: ctx.request_id.clone(),
        key_id: caller.key_id,
        org_id: caller.org_id,
        group_id: caller.group_id,
        route: ctx
            .route
            .map(|r| r.label())
            .unwrap_or("unknown")
            .to_string(),
        model_requested: call.requested_model.clone(),
        model_served: call.model.model.id.clone(),
        account_id: upstream.account.id.clone(),
        input_tokens: usage.input,
        output_tokens: usage.output,
        cached_tokens: usage.cached,
        measurement,
        status,
        stream: call.stream,
        started_at_ms: ctx.started_at_ms,
        latency_ms: elapsed_ms(ctx.started.elapsed()),
        ttfb_ms: ctx.ttfb.map(elapsed_ms),
        attempts: u32::try_from(ctx.tried.len()).unwrap_or(u32::MAX),
        cost_nanos: 0,
        charged_nanos: 0,
        excess_nanos: 0,
        hold_nanos: 0,
        project: call.project.clone(),
        workflow: call.workflow.clone(),
        audio_seconds,
    })
}

fn record_tokens(shared: &Shared, e: &UsageEvent) {
    let measurement = match e.measurement {
        opstate::Measurement::Exact => "exact",
        opstate::Measurement::Estimated => "estimated",
    };
    for (kind, n) in [
        ("input", e.input_tokens),
        ("output", e.output_tokens),
        ("cached", e.cached_tokens),
    ] {
        shared
            .metrics
            .tokens
            .with_label_values(&[e.model_served.as_str(), kind, measurement])
            .inc_by(n);
    }
}

async fn append(shared: &Shared, event: &UsageEvent) {
    let mut last_error = None;
    for attempt in 0..APPEND_ATTEMPTS {
        match shared.stores().usage.append(event).await {
            Ok(()) => return,
            Err(e) => {
                last_error = Some(e);
                tokio::time::sleep(Duration::from_millis(50 * u64::from(attempt + 1))).await;
            }
        }
    }
    shared.metrics.usage_events_lost.inc();
    let json = serde_json::to_string(event).unwrap_or_default();
    tracing::error!(
        request_id = %event.request_id,
        error = ?last_error,
        usage_event = %json,
        "usage event could not be appended to the usage stream"
    );
}

fn elapsed_ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
