//! The phases before a supplier is called, in order: classify the route, authenticate the key,
//! inspect the body, route to a model and its accounts, admit (wallet hold, capacity, limits). A
//! route answered here (local routes, refusals, hosted media, video polls and downloads) never
//! reaches a supplier through the proxy; a video create is admitted by `video` (its task's record
//! and longer hold) and then proxied like any call.

use crate::batch_line::Stage;
use crate::call::Call;
use crate::classify::Route;
use crate::ctx::RequestCtx;
use crate::errors::GatewayError;
use crate::models::ModelRoute;
use crate::{auth, inspect, local, respond, shared::Shared};
use crate::{money::admit, route};
use opstate::KeyRecord;
use pingora::proxy::Session;
use std::time::Duration;

/// Classification, authentication, inspection, routing and admission. `Ok(true)`: answered
/// locally.
pub(crate) async fn prepare(
    s: &Shared,
    session: &mut Session,
    ctx: &mut RequestCtx,
) -> Result<bool, GatewayError> {
    let live = ctx.live.clone();
    s.open_local_stores().await;
    let header = session.req_header();
    ctx.surface = Route::surface_of_path(header.uri.path());
    let route = *ctx.route.insert(Route::of(header)?);
    s.metrics.started(route.label());
    if route.to_admin_api() {
        // admin-api authenticates and answers these itself; the body streams through.
        let down = match route {
            Route::KeyReads => GatewayError::LedgerUnavailable,
            _ => GatewayError::UpstreamUnreachable,
        };
        return s.admin.map(|_| false).ok_or(down);
    }
    if route == Route::Media || (route.is_video() && route != Route::VideoCreate) {
        // Hosted media, video polls and downloads: answered here, with no proxied supplier call.
        // Boxed, as the video create below: their futures (a direct supplier call) would make
        // every call's `request_filter` future larger, and it is moved by value (README
        // "Performance").
        return Box::pin(answer_here(s, session, ctx, route)).await;
    }
    // A batch line runs as the key its signature names (`batch`); any other call as the key it
    // presents.
    let batch = crate::batch::verified(s, header)?;
    if let Some(line) = batch.as_ref().filter(|l| l.stage == Stage::Book) {
        return book(s, session, ctx, line.clone()).await;
    }
    let (caller, key_hash) = match &batch {
        Some(line) if route.batchable() => {
            (crate::batch::caller(s, line).await?, line.key_hash.clone())
        }
        Some(_) => return Err(GatewayError::InvalidKey),
        None => auth::caller(s, header, route.surface(), !route.is_local()).await?,
    };
    let caller = ctx.admission.caller.insert(caller).clone();
    let key_hash = ctx.admission.key_hash.insert(key_hash).clone();
    auth::permit(&caller, route)?;
    if let Some(line) = batch {
        ctx.request_id.clone_from(&line.request_id);
        let hold = line.stage == Stage::Hold;
        ctx.admission.batch = Some(Box::new(line));
        match crate::batch::claim(s, session, ctx).await? {
            crate::batch::Claimed::Fresh => {}
            crate::batch::Claimed::Answered => return Ok(true),
            crate::batch::Claimed::Held(kept) => {
                return crate::batch_offload::held_again(session, ctx, hold, kept).await;
            }
        }
        let mut admitted = admit_call(s, session, ctx, (&caller, &key_hash)).await;
        if hold && admitted == Ok(false) {
            admitted = Box::pin(crate::batch_offload::hold(s, session, ctx)).await;
        }
        if admitted.is_err() {
            crate::batch::refused(s, ctx).await;
        }
        return admitted;
    }
    if route.is_local() {
        let body = local::answer(&live.router, caller.group_id, route, header.uri.path())?;
        return respond::local(session, body, &ctx.request_id).await;
    }
    if route == Route::VideoCreate {
        // A task's record and hold, then the call goes to its accounts like any other.
        return Box::pin(crate::video::serve::admit(s, session, ctx, &caller))
            .await
            .map(|()| false);
    }
    admit_call(s, session, ctx, (&caller, &key_hash)).await
}

/// The supplier's answer to a held batch line (`batch_offload`): its money was admitted when it
/// was held, so it is booked whatever became of the key since.
async fn book(
    s: &Shared,
    session: &mut Session,
    ctx: &mut RequestCtx,
    line: crate::batch_line::Line,
) -> Result<bool, GatewayError> {
    if !ctx.route.is_some_and(Route::batchable) {
        return Err(GatewayError::InvalidKey);
    }
    ctx.request_id.clone_from(&line.request_id);
    Box::pin(crate::batch_offload::book(s, session, ctx, &line)).await
}

/// Inspects, routes and admits a generation call of `caller` (its key's hash beside it): the
/// body read once, the decision followed, the hold taken with the capacity slot, the bodies for
/// the formats of its accounts. `Ok(true)`: answered locally (a token count nobody counts).
async fn admit_call(
    s: &Shared,
    session: &mut Session,
    ctx: &mut RequestCtx,
    (caller, key_hash): (&KeyRecord, &str),
) -> Result<bool, GatewayError> {
    let live = ctx.live.clone();
    let route = ctx.route.ok_or(GatewayError::Internal)?;
    let server = &s.settings.server;
    let idle = Duration::from_millis(server.request_body_timeout_ms);
    let original = inspect::body::read_body(session, server.max_body_bytes, idle).await?;
    let work = inspect::work(route, session.req_header(), &original)?;
    let mut who = route::Caller::of(caller, key_hash, &ctx.request_id, &live.settings);
    let batch = ctx.admission.batch.as_ref().map(|l| l.batch.clone());
    who.batch = batch.is_some();
    let at = ctx.started_at_ms;
    let plan = |m: &ModelRoute| {
        let on = admit::On {
            settings: &live.settings,
            started_at_ms: at,
            batch: batch.as_ref(),
        };
        admit::hold_for(&work, route, &m.model, caller, on)
    };
    let hold = (!route.counts_tokens()).then_some(route::HoldRequest {
        ttl_ms: s.settings.money.hold_ttl_ms,
        plan: &plan,
    });
    let mut decision = route::decide(
        &route::Routing::new(&live, s.stores(), &s.queue, &s.metrics),
        &work,
        route,
        who,
        hold,
    )
    .await?;
    // From here on the request holds a capacity slot and its hold: `logging` settles both.
    if let Some(hold) = decision.hold.take() {
        s.live_holds.insert(&hold.id, hold.org);
        ctx.admission.hold = Some(hold);
    }
    let served = decision.model.clone();
    ctx.follow(decision);
    if route.counts_tokens() && !live.keep_counting_accounts(route, &mut ctx.attempts.order) {
        // No account counts tokens in the client's format: the gateway estimates.
        let body = local::count_estimate(route, original.len());
        return respond::local(session, body, &ctx.request_id).await;
    }
    let targets = live.targets(route, &ctx.attempts.order);
    let options = live.body_options(caller);
    let bodies = crate::bodies::build(&work, route, &original, &served.model, targets, options)?;
    let default_output = live.settings.money.default_output_tokens;
    ctx.admission.call = Some(Call::new(
        work,
        route.format(),
        bodies,
        served,
        default_output,
    ));
    Ok(false)
}

/// Answers a route the gateway serves without proxying: a hosted media file, or a video poll or
/// download (`crate::video::serve`). `Ok(true)`: answered.
async fn answer_here(
    s: &Shared,
    session: &mut Session,
    ctx: &mut RequestCtx,
    route: Route,
) -> Result<bool, GatewayError> {
    if route.is_video() {
        return crate::video::serve::serve(s, session, ctx, route).await;
    }
    let header = session.req_header();
    let file = crate::media::fetch(s.stores().media.as_ref(), &s.signer, header).await?;
    crate::respond::file(session, file, &ctx.request_id).await
}
