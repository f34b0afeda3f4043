//! The gateway as a Pingora proxy: `impl ProxyHttp` is the table of contents of a request.
//!
//! Each hook delegates to the module named for its phase, handing it plain data and the store
//! capability it needs; per-request state lives in [`RequestCtx`]. Order: classify → authenticate
//! → inspect → route → admit → upstream (rewrite) → meter → settle. Failover only happens before
//! any response byte went to the client: a connection failure or a refusing supplier moves the
//! request to the next account of its decision.

use crate::classify::Route;
use crate::ctx::RequestCtx;
use crate::errors::GatewayError;
use crate::meter::Meter;
use crate::route::cooldown::{self, Cooling, Reason, UsageLimit};
use crate::{admission, respond, route::select, shared::Shared};
use crate::{money::settle, upstream::accounts, upstream::rewrite};
use async_trait::async_trait;
use bytes::Bytes;
use pingora::http::{RequestHeader, ResponseHeader};
use pingora::proxy::{FailToProxy, ProxyHttp, Session};
use pingora::upstreams::peer::HttpPeer;
use pingora::{Error, ErrorType};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The Pingora application. Cheap to clone.
#[derive(Clone)]
pub struct Gateway {
    pub(crate) shared: Arc<Shared>,
}

#[async_trait]
impl ProxyHttp for Gateway {
    type CTX = RequestCtx;

    fn new_ctx(&self) -> RequestCtx {
        RequestCtx::new(self.shared.live(), &self.shared.in_flight)
    }

    /// Classify, authenticate, inspect, route, admit; answer errors and local routes (a streamed
    /// answer cut after its header is closed, never finished).
    async fn request_filter(
        &self,
        session: &mut Session,
        ctx: &mut RequestCtx,
    ) -> pingora::Result<bool> {
        match admission::prepare(&self.shared, session, ctx).await {
            Ok(answered) => Ok(answered),
            Err(_) if session.response_written().is_some() => {
                Error::e_explain(ErrorType::WriteError, "cut")
            }
            Err(e) => {
                let surface = ctx.surface();
                ctx.refusal = Some(respond::error(session, surface, &e, &ctx.request_id).await?);
                Ok(true)
            }
        }
    }

    /// Select the next untried account of the decision (admin routes: admin-api).
    async fn upstream_peer(
        &self,
        _session: &mut Session,
        ctx: &mut RequestCtx,
    ) -> pingora::Result<Box<HttpPeer>> {
        self.shared.cool(ctx).await;
        let live = ctx.live.clone();
        let server = &self.shared.settings.server;
        if ctx.route == Some(Route::Admin) {
            let Some(admin) = self.shared.admin else {
                return Error::e_explain(ErrorType::ConnectNoRoute, "admin-api is not configured");
            };
            return Ok(Box::new(accounts::admin_peer(admin, server)));
        }
        while let Some(i) = select::next(&ctx.order, &ctx.tried) {
            ctx.tried.push(i);
            ctx.first_attempt_at.get_or_insert_with(Instant::now);
            let Some(upstream) = live.accounts.get(i) else {
                continue;
            };
            if ctx.slot != Some(i) && !self.shared.move_slot(ctx, i).await {
                // That account is full: the failover goes on to the next one.
                continue;
            }
            match upstream.address().await {
                Ok(addr) => return Ok(Box::new(accounts::peer(upstream, addr, server))),
                Err(e) => {
                    tracing::warn!(account = %upstream.account.id, error = %e, "cannot resolve supplier")
                }
            }
        }
        Error::e_explain(ErrorType::ConnectNoRoute, "no supplier account left to try")
    }

    /// A connection failure means nothing reached the supplier: cool it, retry on the next account.
    fn fail_to_connect(
        &self,
        _session: &mut Session,
        peer: &HttpPeer,
        ctx: &mut RequestCtx,
        mut e: Box<Error>,
    ) -> Box<Error> {
        if let Some(account) = ctx.current() {
            let id = ctx.live.accounts.id(account).unwrap_or("-");
            tracing::warn!(request_id = %ctx.request_id, account = %id, %peer, error = %e, "supplier connection failed");
            let duration = Duration::from_millis(ctx.live.settings.routing.error_cooldown_ms);
            let reason = Reason::Unreachable;
            ctx.to_cool.push(Cooling::new(account, reason, duration));
        }
        e.set_retry(ctx.may_retry(ctx.live.settings.routing.max_attempts));
        e
    }

    /// Rewrite path, credential and framing for the chosen account.
    async fn upstream_request_filter(
        &self,
        session: &mut Session,
        upstream_request: &mut RequestHeader,
        ctx: &mut RequestCtx,
    ) -> pingora::Result<()> {
        if ctx.route == Some(Route::Admin) {
            // admin-api throttles the console's sign-in per client address: it learns it here
            // (whatever the client claimed in the same header is replaced).
            return rewrite::client_address(upstream_request, session.client_addr());
        }
        let (Some(route), Some(call), Some(i)) = (ctx.route, ctx.call.as_ref(), ctx.current())
        else {
            return Error::e_explain(ErrorType::InternalError, "upstream request without a call");
        };
        let live = ctx.live.clone();
        let Some(upstream) = live.accounts.get(i) else {
            return Error::e_explain(ErrorType::InternalError, "unknown account index");
        };
        let sent = (&call.bodies, call.model.model.id.as_str(), call.stream);
        ctx.sending = rewrite::for_account(upstream_request, upstream, route, sent)?;
        Ok(())
    }

    /// Send the full (rewritten) body on every attempt.
    async fn request_body_filter(
        &self,
        _session: &mut Session,
        body: &mut Option<Bytes>,
        end_of_stream: bool,
        ctx: &mut RequestCtx,
    ) -> pingora::Result<()> {
        if ctx.call.is_some() {
            rewrite::substitute_body(body, end_of_stream, &ctx.sending);
        }
        Ok(())
    }

    /// Judge the supplier's answer: pass it on, or cool its account and fail over.
    async fn upstream_response_filter(
        &self,
        _session: &mut Session,
        upstream_response: &mut ResponseHeader,
        ctx: &mut RequestCtx,
    ) -> pingora::Result<()> {
        let s = &self.shared;
        if let (Some(at), Some(route)) = (ctx.first_attempt_at, ctx.route) {
            s.metrics.upstream_answered(route.label(), at.elapsed());
        }
        let (Some(account), true) = (ctx.current(), ctx.call.is_some()) else {
            return Ok(());
        };
        let verdict = cooldown::judge(upstream_response, &ctx.live.settings.routing);
        let cooldown::Verdict::Cool { reason, duration } = verdict else {
            if upstream_response.status.is_success() {
                s.remember_session(ctx, account).await;
            }
            return Ok(());
        };
        if !ctx.may_retry(ctx.live.settings.routing.max_attempts) {
            // No account left: a rate limit is answered in SPEC's shape (and cooled at the end);
            // a server error reaches the client as the supplier sent it.
            if reason == Reason::RateLimited {
                let limit = UsageLimit::take_over(upstream_response, account, duration)?;
                ctx.usage_limit = Some(limit);
            } else {
                ctx.to_cool.push(Cooling::new(account, reason, duration));
                s.cool(ctx).await;
            }
            return Ok(());
        }
        ctx.to_cool.push(Cooling::new(account, reason, duration));
        s.cool(ctx).await;
        s.metrics
            .failovers
            .with_label_values(&[reason.label()])
            .inc();
        ctx.status_failover = true;
        let status = upstream_response.status.as_u16();
        let mut e = Error::explain(
            ErrorType::HTTPStatus(status),
            "supplier refused; failing over",
        );
        e.set_retry(true);
        Err(e.into_up())
    }

    /// Clean supplier headers and start metering the body.
    async fn response_filter(
        &self,
        _session: &mut Session,
        upstream_response: &mut ResponseHeader,
        ctx: &mut RequestCtx,
    ) -> pingora::Result<()> {
        // admin-api's answers are the gateway's own (its console sets session cookies): only
        // suppliers' answers are cleaned.
        if ctx.route == Some(Route::Admin) {
            upstream_response.insert_header("x-request-id", ctx.request_id.as_str())?;
        } else {
            rewrite::downstream_response(upstream_response, &ctx.request_id)?;
        }
        // Only metered calls are measured; admin traffic passes through without a meter.
        let Some(call) = &ctx.call else {
            return Ok(());
        };
        if ctx.downgraded_from.is_some() {
            upstream_response
                .insert_header("x-tollgate-model-served", call.model.model.id.as_str())?;
        }
        crate::answer::start(&self.shared, ctx, upstream_response)
    }

    /// Observe each chunk for usage; bytes pass through untouched.
    fn response_body_filter(
        &self,
        _session: &mut Session,
        body: &mut Option<Bytes>,
        end_of_stream: bool,
        ctx: &mut RequestCtx,
    ) -> pingora::Result<Option<Duration>> {
        crate::answer::body(ctx, body, end_of_stream);
        Ok(None)
    }

    /// Errors after connecting are retried only when a supplier status moved the request to
    /// another account (nothing reached the client, the supplier refused). Any other is not: the
    /// request (a generation, not idempotent) may have reached the supplier.
    fn error_while_proxy(
        &self,
        peer: &HttpPeer,
        _session: &mut Session,
        e: Box<Error>,
        ctx: &mut RequestCtx,
        _client_reused: bool,
    ) -> Box<Error> {
        let mut e = e.more_context(format!("peer: {peer}"));
        e.set_retry(std::mem::take(&mut ctx.status_failover));
        e
    }

    /// The request failed: answer with a JSON error in the route's shape, if still possible.
    async fn fail_to_proxy(
        &self,
        session: &mut Session,
        e: &Error,
        ctx: &mut RequestCtx,
    ) -> FailToProxy {
        ctx.meter.iter_mut().for_each(Meter::finish);
        let written = session.response_written().map(|h| h.status.as_u16());
        let error_code = match (written, GatewayError::from_pingora(e)) {
            (Some(status), _) => {
                tracing::warn!(request_id = %ctx.request_id, error = %e, "response cut after headers were sent");
                status
            }
            (None, None) => 0,
            (None, Some(failure)) => {
                tracing::warn!(request_id = %ctx.request_id, error = %e, "request failed");
                let surface = ctx.surface();
                // Pingora 0.9 closes the client connection after a proxy failure whatever
                // `can_reuse_downstream` says: the answer must say `Connection: close`.
                session.set_keepalive(None);
                match respond::error(session, surface, &failure, &ctx.request_id).await {
                    Ok(label) => ctx.refusal = Some(label),
                    Err(write) => {
                        tracing::debug!(error = %write, "could not send the error response")
                    }
                }
                failure.reply(surface).status
            }
        };
        FailToProxy {
            error_code,
            can_reuse_downstream: false,
        }
    }

    /// Settle exactly once, on success and on failure.
    async fn logging(&self, session: &mut Session, _e: Option<&Error>, ctx: &mut RequestCtx) {
        let s = &self.shared;
        // Cooldowns not yet written: the last account's connection failure or usage limit.
        if let Some(limit) = ctx.usage_limit.take() {
            let reset = limit.reset(ctx.meter.as_ref().and_then(Meter::reset_hint));
            ctx.to_cool
                .push(Cooling::new(limit.account, Reason::RateLimited, reset));
        }
        s.cool(ctx).await;
        let status = session.response_written().map_or(0, |h| h.status.as_u16());
        let live = ctx.live.clone();
        let slot = ctx.slot.take().and_then(|i| live.accounts.id(i));
        let hold = ctx.hold.take();
        hold.iter().for_each(|h| s.live_holds.remove(&h.id));
        let finished = ctx.finished(status, &live.accounts);
        s.metrics.finished(&finished.outcome());
        let calls = s.stores().calls.as_ref();
        let slot = slot.map(|account| (account, ctx.request_id.as_str()));
        let gates: Vec<&str> = ctx.gates.iter().map(String::as_str).collect();
        let held = settle::Held {
            hold,
            slot,
            gates: &gates,
        };
        s.recent
            .keep(settle::settle(finished, held, calls, &s.metrics).await);
        s.queue_depth_gauge();
    }
}
