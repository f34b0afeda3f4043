//! The end of a call (Pingora's `logging` hook, once per request whatever happened): the
//! cooldowns not yet written, a video create's task (`video::serve::ended`), the one settle step (slot back, hold closed, usage event appended:
//! `money::settle`), the call's trace, and what the gateway keeps of it (the recent events, a
//! hold still open until its end is stored).

use crate::attempt;
use crate::ctx::RequestCtx;
use crate::meter::Meter;
use crate::money::resend::Unfinished;
use crate::money::settle;
use crate::route::cooldown::{Cooling, Reason};
use crate::shared::Shared;
use crate::telemetry;
use std::time::SystemTime;

/// Ends the call of `ctx`, whose answer had `status` (0: none was written).
pub(crate) async fn end(s: &Shared, status: u16, ctx: &mut RequestCtx) {
    // Cooldowns not yet written: the last account's connection failure or usage limit.
    if let Some(limit) = ctx.attempts.usage_limit.take() {
        let reset = limit.reset(ctx.answer.meter.as_deref().and_then(Meter::reset_hint));
        ctx.attempts
            .to_cool
            .push(Cooling::new(limit.account, Reason::RateLimited, reset));
    }
    attempt::cool(s.stores(), &s.metrics, ctx).await;
    // A video create's task: recorded (it then owns the hold) or ended unpaid.
    crate::video::serve::ended(s, ctx, status).await;
    // A batch line's answer kept before its money step (`batch`: once only).
    crate::batch::ended(s, ctx).await;
    let live = ctx.live.clone();
    let slot = ctx.attempts.slot.take().and_then(|i| live.accounts.id(i));
    let hold = ctx.admission.hold.take();
    hold.iter().for_each(|h| s.live_holds.remove(&h.id));
    let finished = ctx.finished(status, &live.accounts);
    s.metrics.finished(&finished.outcome());
    let calls = s.stores().calls.as_ref();
    let slot = slot.map(|account| (account, ctx.request_id.as_str()));
    let gates: Vec<&str> = ctx.attempts.gates.iter().map(String::as_str).collect();
    let held = settle::Held {
        hold,
        slot,
        gates: &gates,
    };
    let settling = std::time::SystemTime::now();
    let settled = settle::settle(finished, held, calls, &s.metrics).await;
    if ctx.trace.on() {
        trace(ctx, status, settling, &settled);
    }
    match settled {
        Ok(event) => s.recent.keep(event),
        Err(unfinished) => {
            // Its hold stays open (renewed) until the watcher stores the end.
            if let Some((org, id)) = unfinished.hold() {
                s.live_holds.insert(id, org);
            }
            s.recent.unfinished(unfinished, &s.metrics);
        }
    }
    let depth = i64::try_from(s.queue.depth()).unwrap_or(i64::MAX);
    s.metrics.queue_depth.set(depth);
}

/// The call's trace: how it was served and what it was charged (`stored`: the usage event reached
/// the stream).
fn trace(
    ctx: &mut RequestCtx,
    status: u16,
    settling: SystemTime,
    settled: &Result<Option<opstate::UsageEvent>, Unfinished>,
) {
    let live = ctx.live.clone();
    let (event, stored) = match &settled {
        Ok(event) => (event.as_ref(), true),
        Err(unfinished) => (unfinished.event(), false),
    };
    let served_by = ctx
        .attempts
        .tried
        .last()
        .and_then(|&i| live.accounts.get(i))
        .map(|u| (u.account.id.as_str(), u.account.provider));
    let described = telemetry::Described {
        route: ctx.route,
        request_id: &ctx.request_id,
        status,
        model_requested: ctx
            .admission
            .call
            .as_ref()
            .map(|c| c.requested_model.as_str()),
        downgraded_from: ctx.attempts.downgraded_from.as_deref(),
        served_by,
        caller: ctx
            .admission
            .caller
            .as_ref()
            .map(|k| (k.org_id, k.key_id, k.group_id)),
        event,
        stored,
    };
    let arrival = telemetry::at_ms(ctx.started_at_ms);
    ctx.trace.finish(arrival, settling, &described);
}
