//! The gateway as a Pingora proxy: `impl ProxyHttp` is the table of contents of a request.
//!
//! Each phase method delegates to the module named for that phase; per-request state lives in
//! [`RequestCtx`]. Order: classify (`surface`) → authenticate (`auth`) → inspect → route →
//! select → rewrite → meter → settle. Failover only happens before any response byte went to the
//! client: a connection failure retries the next account of the plan.

use crate::ctx::{Call, RequestCtx};
use crate::errors::{GatewayError, Surface};
use crate::meter::Meter;
use crate::metrics::Metrics;
use crate::route::Router;
use crate::surface::{self, Route};
use crate::upstreams::Upstream;
use crate::{admit, auth, cooldown, form, inspect, local, respond, rewrite, select, settle};
use async_trait::async_trait;
use bytes::Bytes;
use credentials::{Env, KeyHasher};
use opstate::Stores;
use pingora::http::{RequestHeader, ResponseHeader};
use pingora::proxy::{FailToProxy, ProxyHttp, Session};
use pingora::upstreams::peer::HttpPeer;
use pingora::{Error, ErrorSource, ErrorType};
use settings::{Environment, Settings};
use std::sync::Arc;
use std::time::Duration;

/// State shared by every request of one gateway.
pub struct Shared {
    pub settings: Arc<Settings>,
    pub env: Env,
    pub hasher: KeyHasher,
    /// The stores created at start-up (on the background runtime, shared with an embedded
    /// admin-api). See [`Shared::stores`].
    startup_stores: Stores,
    /// The gateway's own Redis stores, connected from the proxy's runtime on the first request.
    local_stores: tokio::sync::OnceCell<Option<Stores>>,
    pub upstreams: Vec<Upstream>,
    account_ids: Vec<String>,
    pub router: Router,
    pub metrics: Arc<Metrics>,
    /// Where admin-api answers (`/partner/v1`, `/api/v1`, `/invitations`); `None`: not served.
    pub admin: Option<std::net::SocketAddr>,
    /// Requests waiting for capacity in this proxy.
    pub queue: crate::capacity::Queue,
}

/// What inspection learned from a generation call's body, per kind of body.
enum Work<'a> {
    /// A JSON call (chat completions, responses): its top-level fields and what they ask.
    Text {
        fields: inspect::TopLevel<'a>,
        call: inspect::CallBody,
    },
    /// A multipart audio transcription and the duration of its file (seconds, see `form`).
    Audio { form: form::AudioForm, seconds: u64 },
}

impl Work<'_> {
    fn model(&self) -> &str {
        match self {
            Work::Text { call, .. } => &call.model,
            Work::Audio { form, .. } => &form.model,
        }
    }

    fn stream(&self) -> bool {
        match self {
            Work::Text { call, .. } => call.stream,
            Work::Audio { form, .. } => form.stream,
        }
    }
}

/// The routing decision for one call (see [`Gateway::decide`]).
struct Decision {
    /// The model that serves the call (the downgrade target when it was downgraded).
    model: Arc<crate::route::ModelRoute>,
    /// The model the call asked for, when it was downgraded.
    downgraded_from: Option<String>,
    /// The session key (a hash of the session signal), when the call carries one.
    session: Option<String>,
    /// Accounts to try, in order; the first holds the call's capacity slot.
    order: Vec<usize>,
}

impl Shared {
    /// The operational stores the request path uses: the gateway's own Redis connection once it
    /// exists, else the start-up ones (always, with the in-memory store).
    ///
    /// Decision (README "Performance"): a Redis connection's I/O task runs on the runtime that
    /// opened it. Opened at start-up it runs on the background runtime, so every store round trip
    /// of a request hopped between threads twice; the benchmark showed the background thread
    /// taking more CPU than the proxy thread. The gateway therefore opens its own connection from
    /// the proxy's runtime on its first request.
    pub fn stores(&self) -> &Stores {
        self.local_stores
            .get()
            .and_then(Option::as_ref)
            .unwrap_or(&self.startup_stores)
    }

    /// Opens the gateway's own Redis connection once (see [`Shared::stores`]); on failure the
    /// start-up stores stay in use.
    async fn open_local_stores(&self) {
        let Some(redis) = &self.settings.redis else {
            return;
        };
        self.local_stores
            .get_or_init(|| async {
                match Stores::redis(&redis.url, &redis.key_prefix).await {
                    Ok(stores) => Some(stores),
                    Err(e) => {
                        tracing::warn!(error = %e, "the gateway's own redis connection failed; using the start-up one");
                        None
                    }
                }
            })
            .await;
    }
}

/// The Pingora application. Cheap to clone.
#[derive(Clone)]
pub struct Gateway {
    shared: Arc<Shared>,
}

impl Gateway {
    pub fn new(settings: Arc<Settings>, stores: Stores, metrics: Arc<Metrics>) -> Gateway {
        Gateway::with_admin(settings, stores, metrics, None)
    }

    /// A gateway that also forwards the admin routes to admin-api at `admin`.
    pub fn with_admin(
        settings: Arc<Settings>,
        stores: Stores,
        metrics: Arc<Metrics>,
        admin: Option<std::net::SocketAddr>,
    ) -> Gateway {
        let upstreams: Vec<Upstream> = settings.accounts.iter().map(Upstream::new).collect();
        let router = Router::new(&settings, &upstreams);
        let account_ids = upstreams.iter().map(|u| u.account.id.clone()).collect();
        let env = match settings.server.environment {
            Environment::Production => Env::Live,
            Environment::Development => Env::Dev,
        };
        Gateway {
            shared: Arc::new(Shared {
                hasher: KeyHasher::new(&settings.security.key_pepper),
                env,
                startup_stores: stores,
                local_stores: tokio::sync::OnceCell::new(),
                upstreams,
                account_ids,
                router,
                metrics,
                settings,
                admin,
                queue: crate::capacity::Queue::default(),
            }),
        }
    }

    pub fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// Classification, authentication, inspection and routing. `Ok(true)`: answered locally.
    async fn prepare(
        &self,
        session: &mut Session,
        ctx: &mut RequestCtx,
    ) -> Result<bool, GatewayError> {
        let s = &self.shared;
        if s.local_stores.get().is_none() {
            s.open_local_stores().await;
        }
        let header = session.req_header();
        let route = Route::classify(&header.method, header.uri.path()).ok_or_else(|| {
            GatewayError::UnknownRoute {
                method: header.method.to_string(),
                path: header.uri.path().chars().take(200).collect(),
            }
        })?;
        ctx.route = Some(route);
        s.metrics
            .in_flight
            .with_label_values(&[route.label()])
            .inc();
        if route == Route::Admin {
            // admin-api authenticates and answers these itself; the body streams through.
            return match s.admin {
                Some(_) => Ok(false),
                None => Err(GatewayError::UpstreamUnreachable),
            };
        }

        let caller = auth::authenticate(header, s.env, &s.hasher, s.stores().keys.as_ref()).await?;
        let allowed = match route.surface() {
            Surface::OpenAi => caller.permissions.openai,
            // Admin routes returned above, before authentication.
            Surface::Admin => false,
        };
        let group_id = caller.group_id;
        ctx.caller = Some(caller);
        if !allowed {
            return Err(GatewayError::PermissionDenied);
        }

        if route == Route::Models {
            let body = local::models_list(&s.router, group_id);
            respond::json(session, 200, body, &ctx.request_id)
                .await
                .map_err(|_| GatewayError::Internal)?;
            return Ok(true);
        }

        let (project, workflow) = inspect::attribution(session.req_header())?;
        let original = inspect::read_body(session, s.settings.server.max_body_bytes).await?;
        let work = match route {
            Route::AudioTranscriptions => {
                let content_type = session
                    .req_header()
                    .headers
                    .get(http::header::CONTENT_TYPE)
                    .and_then(|v| v.to_str().ok());
                let form = form::audio_form(&original, content_type)?;
                let (seconds, _exact) = form::audio_seconds(form.file(&original));
                Work::Audio { form, seconds }
            }
            _ => {
                let fields = inspect::top_level(&original)?;
                let call = inspect::call_body(route, &fields)?;
                Work::Text { fields, call }
            }
        };
        let requested = work.model().to_string();
        let decision = self
            .decide(session, ctx, &work, original.len(), route)
            .await?;
        ctx.downgraded_from = decision.downgraded_from;
        ctx.session = decision.session;
        ctx.slot = decision.order.first().copied();
        ctx.order = decision.order;
        let model = decision.model;
        let caller = ctx.caller.as_ref().ok_or(GatewayError::Internal)?;
        let prices = &model.model.prices;
        let (amount, rate, input_tokens, input_cost, audio_seconds) = match &work {
            Work::Text { call, .. } => {
                let (amount, rate) = admit::worst_case(
                    prices,
                    caller.rate_ppm,
                    original.len(),
                    call.output_cap,
                    s.settings.money.default_output_tokens,
                )?;
                let (tokens, cost) = admit::input_estimate(prices, rate, original.len());
                (amount, rate, tokens, cost, None)
            }
            // All of an audio call's cost is its input: a dead gateway's hold is charged in full.
            Work::Audio { seconds, .. } => {
                let (amount, rate) = admit::audio_worst_case(prices, caller.rate_ppm, *seconds)?;
                (amount, rate, 0, amount, Some(*seconds))
            }
        };
        let meta = admit::HoldMeta {
            key_id: caller.key_id,
            group_id: caller.group_id,
            route: route.label().to_string(),
            model_requested: requested.clone(),
            model_served: model.model.id.clone(),
            stream: work.stream(),
            started_at_ms: ctx.started_at_ms,
            input_tokens,
            input_cost_nanos: input_cost.0,
            audio_seconds: audio_seconds.unwrap_or(0),
        };
        let hold = admit::reserve(
            s.stores().wallets.as_ref(),
            caller.org_id,
            &ctx.request_id,
            amount,
            rate,
            s.settings.money.hold_ttl_ms,
            &meta,
        )
        .await?;
        ctx.hold = Some(hold);
        let body = match &work {
            Work::Text { fields, call } => {
                rewrite::forward_body(route, &original, fields, call, &model.model.id)?
            }
            Work::Audio { form, .. } => form.forward_body(&original, &model.model.id),
        };
        ctx.call = Some(Call {
            requested_model: requested,
            model,
            stream: work.stream(),
            body,
            request_bytes: original.len(),
            audio_seconds,
            project,
            workflow,
        });
        Ok(false)
    }

    /// Phase 3, the routing decision, made here and only here: the model (after a downgrade under
    /// pressure), the session, and the accounts to try in order, the first holding a capacity slot
    /// (rendezvous order of the session, else the request; the session's sticky account first;
    /// cooling accounts out; a slot on the first account with room, else a bounded wait). See
    /// docs/ARCHITECTURE.md §3 "Routing decision".
    async fn decide(
        &self,
        session: &Session,
        ctx: &RequestCtx,
        work: &Work<'_>,
        body_bytes: usize,
        route: Route,
    ) -> Result<Decision, GatewayError> {
        let s = &self.shared;
        let (org_id, group_id) = ctx
            .caller
            .as_ref()
            .map(|c| (c.org_id, c.group_id))
            .ok_or(GatewayError::Internal)?;
        let mut downgraded_from = None;
        let mut model = s.router.resolve(work.model(), group_id, route)?;
        let downgrade = self
            .downgrade_target(session, work, body_bytes, &model, group_id, route)
            .await;
        if let Some(target) = downgrade {
            s.metrics
                .downgrades
                .with_label_values(&[model.model.id.as_str(), target.model.id.as_str()])
                .inc();
            downgraded_from = Some(model.model.id.clone());
            model = target;
        }
        // Routing: accounts in rendezvous order of the session (else the request), cooling ones out.
        let signal = match work {
            Work::Text { fields, .. } => inspect::session_signal(session.req_header(), fields),
            Work::Audio { .. } => {
                inspect::session_signal(session.req_header(), &inspect::TopLevel::new())
            }
        };
        let seed = match &signal {
            Some(signal) => format!("{org_id}:{signal}"),
            None => ctx.request_id.clone(),
        };
        let session_key = signal.as_deref().map(select::session_key);
        let ids = self.account_id_refs();
        let mut ordered = select::order(&model.accounts, &ids, &seed);
        if let Some(key) = &session_key {
            // The account this conversation moved to (after a failover) keeps it while alive.
            let sticky = s
                .stores()
                .sessions
                .account_of(org_id, key)
                .await
                .map_err(|e| {
                    tracing::error!(error = %e, "session lookup failed");
                    GatewayError::StoreUnavailable
                })?;
            if let Some(account) = sticky {
                select::prefer(&mut ordered, &ids, &account);
            }
        }
        let names: Vec<&str> = ordered
            .iter()
            .map(|&i| ids.get(i).copied().unwrap_or_default())
            .collect();
        let remaining = s.stores().cooldowns.remaining(&names).await.map_err(|e| {
            tracing::error!(error = %e, "cooldown lookup failed");
            GatewayError::StoreUnavailable
        })?;
        let mut order = select::available(&ordered, &remaining)?;
        // Capacity: a slot on the first account with room, else a bounded wait.
        let routing = &s.settings.routing;
        let waited = std::time::Instant::now();
        let taken = crate::capacity::take(
            s.stores().slots.as_ref(),
            &s.upstreams,
            &order,
            &ctx.request_id,
            &s.queue,
            crate::capacity::Limits {
                slot_ttl: Duration::from_millis(routing.slot_ttl_ms),
                depth: routing.queue_depth,
                max_wait: Duration::from_millis(routing.queue_wait_ms),
            },
        )
        .await;
        s.metrics.queue_wait.observe(waited.elapsed().as_secs_f64());
        let pos = taken?;
        let chosen = order.remove(pos);
        order.insert(0, chosen);
        Ok(Decision {
            model,
            downgraded_from,
            session: session_key,
            order,
        })
    }

    /// Whether another account may still be tried for this request.
    fn may_retry(&self, ctx: &RequestCtx) -> bool {
        let attempts = u32::try_from(ctx.tried.len()).unwrap_or(u32::MAX);
        attempts < self.shared.settings.routing.max_attempts
            && select::next(&ctx.order, &ctx.tried).is_some()
    }

    /// Moves the request's capacity slot to account `i` (a failover). `false`: `i` is full.
    async fn move_slot(&self, ctx: &mut RequestCtx, i: usize) -> bool {
        let s = &self.shared;
        let Some(target) = s.upstreams.get(i) else {
            return false;
        };
        let ttl = Duration::from_millis(s.settings.routing.slot_ttl_ms);
        match s
            .stores()
            .slots
            .acquire(
                &target.account.id,
                &ctx.request_id,
                target.account.max_concurrency,
                ttl,
            )
            .await
        {
            Ok(true) => {
                if let Some(old) = ctx.slot.replace(i).and_then(|o| s.upstreams.get(o)) {
                    let _ = s
                        .stores()
                        .slots
                        .release(&old.account.id, &ctx.request_id)
                        .await;
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

    /// The cheaper model a call is served by under pressure, when route, key and work allow it
    /// (see `downgrade`). `None`: the call keeps its model.
    async fn downgrade_target(
        &self,
        session: &Session,
        work: &Work<'_>,
        body_bytes: usize,
        model: &Arc<crate::route::ModelRoute>,
        group_id: i64,
        route: Route,
    ) -> Option<Arc<crate::route::ModelRoute>> {
        let s = &self.shared;
        let target_id = model.model.downgrade_to.as_deref()?;
        // Transcriptions are never downgraded (no cheaper model hears the same audio).
        let Work::Text { fields, call } = work else {
            return None;
        };
        let opted_out = session
            .req_header()
            .headers
            .get("x-tollgate-downgrade")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.trim().eq_ignore_ascii_case("never"));
        if opted_out || !crate::downgrade::is_simple(fields, call, body_bytes) {
            return None;
        }
        let target = s.router.resolve(target_id, group_id, route).ok()?;
        let names: Vec<&str> = model
            .accounts
            .iter()
            .filter_map(|&i| s.upstreams.get(i))
            .map(|u| u.account.id.as_str())
            .collect();
        let capacity: Vec<u32> = model
            .accounts
            .iter()
            .filter_map(|&i| s.upstreams.get(i))
            .map(|u| u.account.max_concurrency)
            .collect();
        let in_use = s.stores().slots.in_use(&names).await.ok()?;
        (crate::downgrade::pressure(&in_use, &capacity) >= s.settings.routing.downgrade_pressure)
            .then_some(target)
    }

    /// Records the account a session's call succeeded on.
    async fn remember_session(&self, ctx: &RequestCtx, account: usize) {
        let (Some(key), Some(caller), Some(u)) = (
            &ctx.session,
            &ctx.caller,
            self.shared.upstreams.get(account),
        ) else {
            return;
        };
        let ttl = Duration::from_millis(self.shared.settings.routing.session_ttl_ms);
        if let Err(e) = self
            .shared
            .stores()
            .sessions
            .remember(caller.org_id, key, &u.account.id, ttl)
            .await
        {
            tracing::warn!(error = %e, "session record not stored");
        }
    }

    /// Writes the cooldowns this request decided to the shared store.
    async fn apply_cooldowns(&self, ctx: &mut RequestCtx) {
        for (i, reason, duration) in std::mem::take(&mut ctx.to_cool) {
            let Some(u) = self.shared.upstreams.get(i) else {
                continue;
            };
            // Repeated failures (not rate limits) eject the account for a growing period.
            let duration = match reason {
                cooldown::Reason::RateLimited => duration,
                cooldown::Reason::ServerError | cooldown::Reason::Unreachable => {
                    let failures = self
                        .shared
                        .stores()
                        .counters
                        .hit(
                            &format!("failures:{}", u.account.id),
                            cooldown::FAILURE_WINDOW,
                        )
                        .await
                        .map(|h| h.count)
                        .unwrap_or(1);
                    cooldown::ejection(duration, failures)
                }
            };
            self.shared
                .metrics
                .cooldowns
                .with_label_values(&[reason.label()])
                .inc();
            tracing::warn!(request_id = %ctx.request_id, account = %u.account.id, reason = reason.label(), cooldown_ms = duration.as_millis() as u64, "account cooling");
            if let Err(e) = self
                .shared
                .stores()
                .cooldowns
                .cool(&u.account.id, duration)
                .await
            {
                tracing::error!(error = %e, "cooldown not stored");
            }
        }
    }

    fn account_id_refs(&self) -> Vec<&str> {
        self.shared.account_ids.iter().map(String::as_str).collect()
    }

    fn peer_options(&self, peer: &mut HttpPeer) {
        let server = &self.shared.settings.server;
        peer.options.connection_timeout =
            Some(Duration::from_millis(server.upstream_connect_timeout_ms));
        peer.options.read_timeout = Some(Duration::from_millis(server.upstream_read_timeout_ms));
        peer.options.write_timeout = Some(Duration::from_millis(server.upstream_read_timeout_ms));
        peer.options.verify_cert = true;
        peer.options.verify_hostname = true;
    }
}

/// Maps a Pingora error that ended a request to the gateway's answer.
fn classify_failure(e: &Error) -> Option<GatewayError> {
    use ErrorType::*;
    match e.etype() {
        ConnectTimedout | ConnectRefused | ConnectNoRoute | TLSWantX509Lookup
        | TLSHandshakeFailure | TLSHandshakeTimedout | InvalidCert | HandshakeError
        | ConnectError | BindError | SocketError | ConnectProxyFailure => {
            Some(GatewayError::UpstreamUnreachable)
        }
        ReadTimedout | WriteTimedout => match e.esource() {
            ErrorSource::Downstream => None,
            _ => Some(GatewayError::UpstreamTimeout),
        },
        InvalidHTTPHeader | H1Error | H2Error | H2Downgrade | InvalidH2 => match e.esource() {
            ErrorSource::Downstream => Some(GatewayError::InvalidBody {
                message: "malformed HTTP request".into(),
                param: None,
            }),
            _ => Some(GatewayError::UpstreamProtocol),
        },
        ReadError | WriteError | ConnectionClosed => match e.esource() {
            ErrorSource::Downstream => None,
            _ => Some(GatewayError::UpstreamUnreachable),
        },
        HTTPStatus(_)
        | AcceptError
        | FileOpenError
        | FileCreateError
        | FileReadError
        | FileWriteError
        | InternalError
        | UnknownError
        | Custom(_)
        | CustomCode(_, _) => Some(GatewayError::Internal),
    }
}

#[async_trait]
impl ProxyHttp for Gateway {
    type CTX = RequestCtx;

    fn new_ctx(&self) -> RequestCtx {
        RequestCtx::new()
    }

    /// Classify, authenticate, inspect and route; answer errors and local routes here.
    async fn request_filter(
        &self,
        session: &mut Session,
        ctx: &mut RequestCtx,
    ) -> pingora::Result<bool> {
        match self.prepare(session, ctx).await {
            Ok(answered) => Ok(answered),
            Err(e) => {
                let surface = ctx
                    .route
                    .map(Route::surface)
                    .unwrap_or_else(|| surface::surface_of_path(session.req_header().uri.path()));
                ctx.refusal = Some(respond::error(session, surface, &e, &ctx.request_id).await?);
                Ok(true)
            }
        }
    }

    /// Select the next untried account of the plan.
    async fn upstream_peer(
        &self,
        _session: &mut Session,
        ctx: &mut RequestCtx,
    ) -> pingora::Result<Box<HttpPeer>> {
        self.apply_cooldowns(ctx).await;
        if ctx.route == Some(Route::Admin) {
            let Some(admin) = self.shared.admin else {
                return Error::e_explain(ErrorType::ConnectNoRoute, "admin-api is not configured");
            };
            let mut peer = HttpPeer::new(admin, false, String::new());
            self.peer_options(&mut peer);
            return Ok(Box::new(peer));
        }
        while let Some(i) = select::next(&ctx.order, &ctx.tried) {
            ctx.tried.push(i);
            ctx.first_attempt_at
                .get_or_insert_with(std::time::Instant::now);
            let Some(upstream) = self.shared.upstreams.get(i) else {
                continue;
            };
            if ctx.slot != Some(i) && !self.move_slot(ctx, i).await {
                // That account is full: the failover goes on to the next one.
                continue;
            }
            match upstream.address().await {
                Ok(addr) => {
                    let mut peer = HttpPeer::new(addr, upstream.tls, upstream.host.clone());
                    self.peer_options(&mut peer);
                    return Ok(Box::new(peer));
                }
                Err(e) => {
                    tracing::warn!(account = %upstream.account.id, error = %e, "cannot resolve supplier")
                }
            }
        }
        Error::e_explain(ErrorType::ConnectNoRoute, "no supplier account left to try")
    }

    /// A connection failure means nothing reached the supplier: retry on the next account.
    fn fail_to_connect(
        &self,
        _session: &mut Session,
        peer: &HttpPeer,
        ctx: &mut RequestCtx,
        mut e: Box<Error>,
    ) -> Box<Error> {
        if let Some(i) = ctx.current() {
            if let Some(u) = self.shared.upstreams.get(i) {
                tracing::warn!(request_id = %ctx.request_id, account = %u.account.id, %peer, error = %e, "supplier connection failed");
            }
            let cool = Duration::from_millis(self.shared.settings.routing.error_cooldown_ms);
            ctx.to_cool.push((i, cooldown::Reason::Unreachable, cool));
        }
        if self.may_retry(ctx) {
            e.set_retry(true);
        }
        e
    }

    /// Rewrite path, credential and framing for the chosen account.
    async fn upstream_request_filter(
        &self,
        _session: &mut Session,
        upstream_request: &mut RequestHeader,
        ctx: &mut RequestCtx,
    ) -> pingora::Result<()> {
        if ctx.route == Some(Route::Admin) {
            return Ok(());
        }
        let (Some(route), Some(call), Some(i)) = (ctx.route, ctx.call.as_ref(), ctx.current())
        else {
            return Error::e_explain(ErrorType::InternalError, "upstream request without a call");
        };
        let Some(upstream) = self.shared.upstreams.get(i) else {
            return Error::e_explain(ErrorType::InternalError, "unknown account index");
        };
        rewrite::upstream_request(upstream_request, upstream, route, call.body.len())
    }

    /// Send the full (rewritten) body on every attempt.
    async fn request_body_filter(
        &self,
        _session: &mut Session,
        body: &mut Option<Bytes>,
        end_of_stream: bool,
        ctx: &mut RequestCtx,
    ) -> pingora::Result<()> {
        if let Some(call) = &ctx.call {
            rewrite::substitute_body(body, end_of_stream, &call.body);
        }
        Ok(())
    }

    async fn upstream_response_filter(
        &self,
        _session: &mut Session,
        upstream_response: &mut ResponseHeader,
        ctx: &mut RequestCtx,
    ) -> pingora::Result<()> {
        if let (Some(at), Some(route)) = (ctx.first_attempt_at, ctx.route) {
            self.shared
                .metrics
                .upstream_latency
                .with_label_values(&[route.label()])
                .observe(at.elapsed().as_secs_f64());
        }
        let (Some(i), true) = (ctx.current(), ctx.call.is_some()) else {
            return Ok(());
        };
        let routing = &self.shared.settings.routing;
        let verdict = cooldown::judge(
            upstream_response,
            Duration::from_millis(routing.default_cooldown_ms),
            Duration::from_millis(routing.error_cooldown_ms),
        );
        let cooldown::Verdict::Cool { reason, duration } = verdict else {
            if upstream_response.status.is_success() {
                self.remember_session(ctx, i).await;
            }
            return Ok(());
        };
        if !self.may_retry(ctx) {
            // No account left: the supplier's answer reaches the client as it is. A rate limit
            // without a reset header is cooled when the request ends, by the hint in its body.
            if reason == cooldown::Reason::RateLimited
                && cooldown::reset_hint(upstream_response).is_none()
            {
                ctx.rate_limited_answer = Some((i, duration));
            } else {
                ctx.to_cool.push((i, reason, duration));
                self.apply_cooldowns(ctx).await;
            }
            return Ok(());
        }
        ctx.to_cool.push((i, reason, duration));
        self.apply_cooldowns(ctx).await;
        self.shared
            .metrics
            .failovers
            .with_label_values(&[reason.label()])
            .inc();
        ctx.status_failover = true;
        let mut e = Error::explain(
            ErrorType::HTTPStatus(upstream_response.status.as_u16()),
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
        rewrite::downstream_response(upstream_response, &ctx.request_id)?;
        if ctx.downgraded_from.is_some()
            && let Some(call) = &ctx.call
        {
            upstream_response
                .insert_header("x-tollgate-model-served", call.model.model.id.as_str())?;
        }
        // Only metered calls are measured; admin traffic passes through without a meter.
        if ctx.call.is_some() {
            let content_type = upstream_response
                .headers
                .get(http::header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok());
            let mut meter = Meter::new(content_type);
            if ctx.route == Some(Route::AudioTranscriptions) {
                meter = meter.for_audio();
            }
            if ctx.rate_limited_answer.is_some() {
                meter = meter.watching_reset();
            }
            ctx.meter = Some(meter);
        }
        Ok(())
    }

    /// Observe each chunk for usage; bytes pass through untouched.
    fn response_body_filter(
        &self,
        _session: &mut Session,
        body: &mut Option<Bytes>,
        end_of_stream: bool,
        ctx: &mut RequestCtx,
    ) -> pingora::Result<Option<Duration>> {
        if let Some(chunk) = body.as_ref().filter(|b| !b.is_empty()) {
            if ctx.ttfb.is_none() {
                ctx.ttfb = Some(ctx.started.elapsed());
            }
            if let Some(m) = ctx.meter.as_mut() {
                m.observe(chunk);
            }
        }
        if end_of_stream && let Some(m) = ctx.meter.as_mut() {
            m.finish();
        }
        Ok(None)
    }

    /// Errors after connecting are retried only when a supplier status moved the request to
    /// another account (nothing reached the client, and the supplier refused the request). Any
    /// other error after connecting is not retried: the request (a generation, which is not
    /// idempotent) may have reached the supplier, and once the client has seen a response there is
    /// nothing to retry.
    fn error_while_proxy(
        &self,
        peer: &HttpPeer,
        _session: &mut Session,
        e: Box<Error>,
        ctx: &mut RequestCtx,
        _client_reused: bool,
    ) -> Box<Error> {
        let mut e = e.more_context(format!("peer: {peer}"));
        let failover = std::mem::take(&mut ctx.status_failover);
        e.set_retry(failover);
        e
    }

    /// The request failed: answer with a JSON error in the route's shape, if the client can
    /// still receive one.
    async fn fail_to_proxy(
        &self,
        session: &mut Session,
        e: &Error,
        ctx: &mut RequestCtx,
    ) -> FailToProxy {
        if let Some(meter) = ctx.meter.as_mut() {
            meter.finish();
        }
        let written = session.response_written().map(|h| h.status.as_u16());
        let failure = classify_failure(e);
        match (written, failure) {
            (Some(status), _) => {
                tracing::warn!(request_id = %ctx.request_id, error = %e, "response cut after headers were sent");
                FailToProxy {
                    error_code: status,
                    can_reuse_downstream: false,
                }
            }
            (None, None) => FailToProxy {
                error_code: 0,
                can_reuse_downstream: false,
            },
            (None, Some(failure)) => {
                tracing::warn!(request_id = %ctx.request_id, error = %e, "request failed");
                let surface = ctx.route.map(Route::surface).unwrap_or(Surface::OpenAi);
                let code = failure.reply(surface).status;
                match respond::error(session, surface, &failure, &ctx.request_id).await {
                    Ok(label) => ctx.refusal = Some(label),
                    Err(write) => {
                        tracing::debug!(error = %write, "could not send the error response")
                    }
                }
                FailToProxy {
                    error_code: code,
                    can_reuse_downstream: false,
                }
            }
        }
    }

    /// Settle exactly once, on success and on failure.
    async fn logging(&self, session: &mut Session, _e: Option<&Error>, ctx: &mut RequestCtx) {
        // Cooldowns not yet written: the last account's connection failure, and a rate-limited
        // answer cooled by the reset its body named.
        if let Some((i, default)) = ctx.rate_limited_answer.take() {
            let hint = ctx.meter.as_ref().and_then(Meter::reset_hint);
            ctx.to_cool
                .push((i, cooldown::Reason::RateLimited, hint.unwrap_or(default)));
        }
        self.apply_cooldowns(ctx).await;
        let status = session
            .response_written()
            .map(|h| h.status.as_u16())
            .unwrap_or(0);
        settle::settle(&self.shared, ctx, status).await;
    }
}
