//! Phases 4–5b, the attempts: pick the next account of the decision, connect, and judge the
//! supplier's status — pass the answer on, or cool the account and fail over. Failover only
//! happens before any response byte went to the client. Cooldowns decided along the way are
//! written at the next hook ([`cool`]).

use crate::classify::Route;
use crate::ctx::RequestCtx;
use crate::metrics::Metrics;
use crate::route::capacity;
use crate::route::cooldown::{self, Cooling, Reason, UsageLimit};
use crate::shared::Shared;
use crate::upstream::accounts;
use pingora::http::ResponseHeader;
use pingora::upstreams::peer::HttpPeer;
use pingora::{Error, ErrorType};
use std::time::{Duration, Instant};

/// The next untried account of the decision, resolved (admin routes: admin-api). Writes the
/// cooldowns of the attempt before first.
pub(crate) async fn peer(s: &Shared, ctx: &mut RequestCtx) -> pingora::Result<Box<HttpPeer>> {
    cool(s.stores(), &s.metrics, ctx).await;
    let live = ctx.live.clone();
    let server = &s.settings.server;
    if ctx.route.is_some_and(Route::to_admin_api) {
        let Some(admin) = s.admin else {
            return Error::e_explain(ErrorType::ConnectNoRoute, "admin-api is not configured");
        };
        return Ok(Box::new(accounts::admin_peer(admin, server)));
    }
    while let Some(i) = ctx.attempts.next() {
        ctx.attempts.tried.push(i);
        ctx.attempts
            .first_attempt_at
            .get_or_insert_with(Instant::now);
        let Some(upstream) = live.accounts.get(i) else {
            continue;
        };
        if ctx.attempts.slot != Some(i) && !move_slot(s, ctx, i).await {
            // That account is full: the failover goes on to the next one.
            continue;
        }
        match upstream.address().await {
            Ok(addr) => {
                ctx.trace.attempt(&upstream.account.id);
                return Ok(Box::new(accounts::peer(upstream, addr, server)));
            }
            Err(e) => {
                tracing::warn!(account = %upstream.account.id, error = %e, "cannot resolve supplier")
            }
        }
    }
    Error::e_explain(ErrorType::ConnectNoRoute, "no supplier account left to try")
}

/// A connection failure means nothing reached the supplier: cool it, retry on the next account.
pub(crate) fn connect_failed(ctx: &mut RequestCtx, peer: &HttpPeer, e: &mut Error) {
    if let Some(account) = ctx.current() {
        let id = ctx.live.accounts.id(account).unwrap_or("-");
        tracing::warn!(request_id = %ctx.request_id, account = %id, %peer, error = %e, "supplier connection failed");
        let duration = Duration::from_millis(ctx.live.settings.routing.error_cooldown_ms);
        let reason = Reason::Unreachable;
        ctx.trace
            .attempt_ended("connection_failed".into(), Some((reason.label(), duration)));
        ctx.attempts
            .to_cool
            .push(Cooling::new(account, reason, duration));
    }
    let retry = ctx.may_retry(ctx.live.settings.routing.max_attempts);
    if retry {
        moved_on(ctx, opstate::AttemptOutcome::Unreachable, 0);
    }
    e.set_retry(retry);
}

/// Records the current attempt as one the request moves on from (the supplier's side of the
/// call: `UsageEvent::supplier`).
fn moved_on(ctx: &mut RequestCtx, outcome: opstate::AttemptOutcome, status: u16) {
    let Some(id) = ctx.current().and_then(|i| ctx.live.accounts.id(i)) else {
        return;
    };
    let attempt = opstate::EarlierAttempt {
        account_id: id.to_string(),
        outcome,
        status,
        served: None,
    };
    ctx.attempts.earlier.push(attempt);
}

/// The answer held back from the client broke (the supplier's stream was cut or timed out before
/// its content began): record what the attempt served (the supplier may bill it), cool the
/// account and fail over (`true`), unless no account is left to try.
pub(crate) fn abandon(s: &Shared, ctx: &mut RequestCtx, status: u16) -> bool {
    let max_attempts = ctx.live.settings.routing.max_attempts;
    let (Some(account), true) = (ctx.current(), ctx.may_retry(max_attempts)) else {
        return false;
    };
    let answer = std::mem::take(&mut ctx.answer);
    let live = ctx.live.clone();
    let (Some(upstream), Some(call)) = (live.accounts.get(account), &ctx.admission.call) else {
        return false;
    };
    let mut meter = answer.meter;
    meter.iter_mut().for_each(|m| m.finish());
    let images = answer
        .reshape
        .as_ref()
        .and_then(crate::wire::cells::Reshape::images)
        .or_else(|| meter.as_deref().and_then(crate::meter::Meter::images));
    let (usage, measurement, audio, images) =
        crate::money::settle::served(call, status, meter.as_deref(), images);
    let rate = upstream.account.supplier_price_multiplier;
    let cost_nanos = crate::money::settle::supplier_cost(call, rate, usage, images, audio);
    tracing::warn!(request_id = %ctx.request_id, account = %upstream.account.id, "supplier answer broke before its content; failing over");
    let duration = Duration::from_millis(live.settings.routing.error_cooldown_ms);
    ctx.attempts
        .to_cool
        .push(Cooling::new(account, Reason::ServerError, duration));
    s.metrics.failovers.with_label_values(&["abandoned"]).inc();
    ctx.attempts.earlier.push(opstate::EarlierAttempt {
        account_id: upstream.account.id.clone(),
        outcome: opstate::AttemptOutcome::Abandoned,
        status,
        served: Some(opstate::Served {
            input_tokens: usage.input,
            output_tokens: usage.output,
            cached_tokens: usage.cached,
            cache_write_tokens: usage.cache_write,
            cache_write_1h_tokens: usage.cache_write_1h,
            images,
            measurement,
            cost_nanos,
        }),
    });
    true
}

/// Judges the supplier's answer: pass it on, or cool its account and fail over (`Err`).
pub(crate) async fn judge(
    s: &Shared,
    ctx: &mut RequestCtx,
    upstream_response: &mut ResponseHeader,
) -> pingora::Result<()> {
    if let (Some(at), Some(route)) = (ctx.attempts.first_attempt_at, ctx.route) {
        ctx.attempts.upstream_wait = Some(at.elapsed());
        s.metrics.upstream_answered(route.label(), at.elapsed());
    }
    let (Some(account), true) = (ctx.current(), ctx.admission.call.is_some()) else {
        return Ok(());
    };
    let verdict = cooldown::judge(upstream_response, &ctx.live.settings.routing);
    if ctx.trace.on() {
        let cooled = match &verdict {
            cooldown::Verdict::Cool { reason, duration } => Some((reason.label(), *duration)),
            cooldown::Verdict::Pass => None,
        };
        ctx.trace
            .attempt_ended(upstream_response.status.as_u16().to_string(), cooled);
    }
    let cooldown::Verdict::Cool { reason, duration } = verdict else {
        if upstream_response.status.is_success() {
            remember_session(s, ctx, account).await;
        }
        return Ok(());
    };
    if !ctx.may_retry(ctx.live.settings.routing.max_attempts) {
        // No account left: a rate limit is answered in SPEC's shape (and cooled at the end);
        // a server error reaches the client as the supplier sent it.
        if reason == Reason::RateLimited {
            let limit = UsageLimit::take_over(upstream_response, account, duration)?;
            ctx.attempts.usage_limit = Some(limit);
        } else {
            ctx.attempts
                .to_cool
                .push(Cooling::new(account, reason, duration));
            cool(s.stores(), &s.metrics, ctx).await;
        }
        return Ok(());
    }
    ctx.attempts
        .to_cool
        .push(Cooling::new(account, reason, duration));
    cool(s.stores(), &s.metrics, ctx).await;
    s.metrics
        .failovers
        .with_label_values(&[reason.label()])
        .inc();
    ctx.attempts.status_failover = true;
    let status = upstream_response.status.as_u16();
    moved_on(ctx, opstate::AttemptOutcome::Refused, status);
    let mut e = Error::explain(
        ErrorType::HTTPStatus(status),
        "supplier refused; failing over",
    );
    e.set_retry(true);
    Err(e.into_up())
}

/// Writes the cooldowns `ctx` decided so far (see `cooldown::apply`).
pub(crate) async fn cool(stores: &opstate::Stores, metrics: &Metrics, ctx: &mut RequestCtx) {
    if ctx.attempts.to_cool.is_empty() {
        return;
    }
    let cooling = std::mem::take(&mut ctx.attempts.to_cool);
    // Each 429 or failure also halves the account's estimated capacity in this proxy.
    let live = ctx.live.clone();
    for c in &cooling {
        if let Some(u) = live.accounts.get(c.account) {
            let estimate = u.estimate.cut();
            tracing::debug!(account = %u.account.id, estimate, "account capacity estimate cut");
        }
    }
    let (counters, cooldowns) = (stores.counters.as_ref(), stores.cooldowns.as_ref());
    let accounts = &live.accounts;
    cooldown::apply(
        cooling,
        accounts,
        counters,
        cooldowns,
        metrics,
        &ctx.request_id,
    )
    .await;
}

/// Moves `ctx`'s capacity slot to account `i` (a failover). `false`: `i` is full.
pub(crate) async fn move_slot(s: &Shared, ctx: &mut RequestCtx, i: usize) -> bool {
    let live = ctx.live.clone();
    let Some(to) = live.accounts.get(i) else {
        return false;
    };
    let from = ctx.attempts.slot.and_then(|o| live.accounts.get(o));
    let ttl = Duration::from_millis(live.settings.routing.slot_ttl_ms);
    let slots = s.stores().slots.as_ref();
    let moved = capacity::move_to(slots, from, to, &ctx.request_id, ttl).await;
    if moved {
        ctx.attempts.slot = Some(i);
    }
    moved
}

/// Records that `ctx`'s session succeeded on account `i` (kept for `routing.session_ttl_ms`; `route::select::sticky` reads it).
pub(crate) async fn remember_session(s: &Shared, ctx: &RequestCtx, i: usize) {
    let live = ctx.live.clone();
    let (Some(key), Some(caller), Some(id)) = (
        &ctx.attempts.session,
        &ctx.admission.caller,
        live.accounts.id(i),
    ) else {
        return;
    };
    let ttl = Duration::from_millis(live.settings.routing.session_ttl_ms);
    let sessions = s.stores().sessions.as_ref();
    // A failure is logged: the next call of the session then follows its rendezvous order.
    if let Err(e) = sessions.remember(caller.org_id, key, id, ttl).await {
        tracing::warn!(error = %e, "session record not stored");
    }
}
