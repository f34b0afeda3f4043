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
use crate::telemetry::{self, CallTrace};
use crate::{admission, attempt, respond, shared::Shared, video};
use crate::{ending, upstream::rewrite};
use async_trait::async_trait;
use bytes::Bytes;
use pingora::http::{RequestHeader, ResponseHeader};
use pingora::proxy::{FailToProxy, ProxyHttp, Session};
use pingora::upstreams::peer::HttpPeer;
use pingora::{Error, ErrorType};
use std::sync::Arc;
use std::time::Duration;

/// The Pingora application. Cheap to clone.
#[derive(Clone)]
pub struct Gateway {
    pub(crate) shared: Arc<Shared>,
}

#[async_trait]
impl ProxyHttp for Gateway {
    type CTX = Box<RequestCtx>;

    fn new_ctx(&self) -> Box<RequestCtx> {
        Box::new(RequestCtx::new(self.shared.live(), &self.shared.in_flight))
    }

    /// Classify, authenticate, inspect, route, admit; answer errors and local routes (a streamed
    /// answer cut after its header is closed, never finished).
    async fn request_filter(
        &self,
        session: &mut Session,
        ctx: &mut Box<RequestCtx>,
    ) -> pingora::Result<bool> {
        ctx.trace = CallTrace::begin(self.shared.tracer.get(), session.req_header());
        let answered = match admission::prepare(&self.shared, session, ctx).await {
            Ok(answered) => Ok(answered),
            Err(_) if session.response_written().is_some() => {
                Error::e_explain(ErrorType::WriteError, "cut")
            }
            Err(e) => {
                let surface = ctx.surface();
                let timing = timing_of(ctx);
                ctx.admission.refusal =
                    Some(respond::error(session, surface, &e, &ctx.request_id, timing).await?);
                Ok(true)
            }
        };
        let outcome = match (ctx.admission.refusal, &answered) {
            (Some(refusal), _) => refusal,
            (None, Ok(false)) => "admitted",
            (None, Ok(true)) => "answered",
            (None, Err(_)) => "cut",
        };
        ctx.trace.admitted(outcome);
        answered
    }

    /// Select the next untried account of the decision (admin routes: admin-api).
    async fn upstream_peer(
        &self,
        _session: &mut Session,
        ctx: &mut Box<RequestCtx>,
    ) -> pingora::Result<Box<HttpPeer>> {
        attempt::peer(&self.shared, ctx).await
    }

    /// A connection failure means nothing reached the supplier: cool it, retry on the next account.
    fn fail_to_connect(
        &self,
        _session: &mut Session,
        peer: &HttpPeer,
        ctx: &mut Box<RequestCtx>,
        mut e: Box<Error>,
    ) -> Box<Error> {
        attempt::connect_failed(ctx, peer, &mut e);
        e
    }

    /// Rewrite path, credential and framing for the chosen account.
    async fn upstream_request_filter(
        &self,
        session: &mut Session,
        upstream_request: &mut RequestHeader,
        ctx: &mut Box<RequestCtx>,
    ) -> pingora::Result<()> {
        if ctx.route.is_some_and(Route::to_admin_api) {
            // admin-api throttles the console's sign-in per client address: it learns it here
            // (whatever the client claimed in the same header is replaced).
            return rewrite::client_address(
                upstream_request,
                session.client_addr(),
                &ctx.live.settings.server,
            );
        }
        let (Some(route), Some(call), Some(i)) =
            (ctx.route, ctx.admission.call.as_ref(), ctx.current())
        else {
            return Error::e_explain(ErrorType::InternalError, "upstream request without a call");
        };
        let live = ctx.live.clone();
        let Some(upstream) = live.accounts.get(i) else {
            return Error::e_explain(ErrorType::InternalError, "unknown account index");
        };
        let sent = (&call.bodies, call.model.model.id.as_str(), call.stream);
        let (format, body) = rewrite::for_account(upstream_request, upstream, route, sent)?;
        (ctx.attempts.format, ctx.attempts.sending) = (format, body);
        if upstream.account.forward_traceparent && ctx.trace.on() {
            let arrival = telemetry::at_ms(ctx.started_at_ms);
            ctx.trace.inject(arrival, upstream_request);
        }
        Ok(())
    }

    /// Send the full (rewritten) body on every attempt.
    async fn request_body_filter(
        &self,
        _session: &mut Session,
        body: &mut Option<Bytes>,
        end_of_stream: bool,
        ctx: &mut Box<RequestCtx>,
    ) -> pingora::Result<()> {
        if ctx.admission.call.is_some() {
            rewrite::substitute_body(body, end_of_stream, &ctx.attempts.sending);
        }
        Ok(())
    }

    /// Judge the supplier's answer: pass it on, or cool its account and fail over.
    async fn upstream_response_filter(
        &self,
        _session: &mut Session,
        upstream_response: &mut ResponseHeader,
        ctx: &mut Box<RequestCtx>,
    ) -> pingora::Result<()> {
        attempt::judge(&self.shared, ctx, upstream_response).await
    }

    /// Clean supplier headers and start metering the body.
    async fn response_filter(
        &self,
        _session: &mut Session,
        upstream_response: &mut ResponseHeader,
        ctx: &mut Box<RequestCtx>,
    ) -> pingora::Result<()> {
        crate::answer::headers(ctx, upstream_response)?;
        crate::answer::start(&self.shared, ctx, upstream_response)
    }

    /// Observe each chunk for usage; bytes pass through untouched.
    fn response_body_filter(
        &self,
        _session: &mut Session,
        body: &mut Option<Bytes>,
        end_of_stream: bool,
        ctx: &mut Box<RequestCtx>,
    ) -> pingora::Result<Option<Duration>> {
        if crate::answer::body(&self.shared, ctx, body, end_of_stream) {
            let e = Error::explain(
                ErrorType::HTTPStatus(502),
                "the supplier's stream carried an error before its content; failing over",
            );
            return Err(e.into_up());
        }
        Ok(None)
    }

    /// Errors after connecting are retried only when a supplier status moved the request to
    /// another account (nothing reached the client, the supplier refused). Any other is not: the
    /// request (a generation, not idempotent) may have reached the supplier.
    fn error_while_proxy(
        &self,
        peer: &HttpPeer,
        session: &mut Session,
        e: Box<Error>,
        ctx: &mut Box<RequestCtx>,
        _client_reused: bool,
    ) -> Box<Error> {
        let mut e = e.more_context(format!("peer: {peer}"));
        // Only the supplier's side breaking abandons a held answer: a client gone meanwhile (a
        // downstream error) must not send the call to another supplier.
        let held = ctx.answer.held_since.is_some()
            && session.response_written().is_none()
            && *e.esource() == pingora::ErrorSource::Upstream;
        let status = ctx.answer.status;
        let abandoned = held && attempt::abandon(&self.shared, ctx, status);
        e.set_retry(std::mem::take(&mut ctx.attempts.status_failover) || abandoned);
        e
    }

    /// An answer is held back from the client until its content begins (`answer::start`).
    fn hold_response(&self, _session: &Session, ctx: &Box<RequestCtx>) -> bool {
        ctx.answer.held_since.is_some()
    }

    /// The request failed: answer with a JSON error in the route's shape, if still possible.
    async fn fail_to_proxy(
        &self,
        session: &mut Session,
        e: &Error,
        ctx: &mut Box<RequestCtx>,
    ) -> FailToProxy {
        ctx.answer.meter.iter_mut().for_each(|m| m.finish());
        let written = session.response_written().map(|h| h.status.as_u16());
        let failure = GatewayError::from_pingora(e)
            .map(|f| video::serve::lost(ctx, e, f))
            .map(|f| match ctx.route {
                // admin-api did not answer a key's ledger read: retry later, in the gateway's
                // shape (issue 45).
                Some(Route::KeyReads) => GatewayError::LedgerUnavailable,
                _ => f,
            });
        let error_code = match (written, failure) {
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
                let timing = timing_of(ctx);
                match respond::error(session, surface, &failure, &ctx.request_id, timing).await {
                    Ok(label) => ctx.admission.refusal = Some(label),
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
    async fn logging(&self, session: &mut Session, _e: Option<&Error>, ctx: &mut Box<RequestCtx>) {
        let status = session.response_written().map_or(0, |h| h.status.as_u16());
        ending::end(&self.shared, status, ctx).await;
    }
}

/// The `Server-Timing` of an answer the gateway writes itself (`[server] server_timing`; admin
/// routes are admin-api's answers).
fn timing_of(ctx: &mut Box<RequestCtx>) -> Option<String> {
    (ctx.live.settings.server.server_timing && !ctx.route.is_some_and(Route::to_admin_api))
        .then(|| ctx.server_timing())
}
