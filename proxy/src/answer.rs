//! Phase 6, the answer: the supplier's status and headers arrived; its body is read (metered, and
//! translated or rewritten when the client expects another shape) on its way to the client.
//!
//! [`start`] decides, once per answer, who reads the body: the meter
//! (`translate::response::Answer` in the supplier's format, passing the bytes through or
//! translating them into the client's format), and for image answers and translated supplier
//! errors a [`Reshape`]. [`body`] runs for each chunk in Pingora's synchronous body filter.

use crate::classify::Route;
use crate::ctx::RequestCtx;
use crate::meter::Meter;
use crate::shared::Shared;
use crate::wire::cells::Reshape;
use crate::wire::embedding_call::Shape;
use crate::wire::embeddings::EmbeddingAnswer;
use crate::wire::images::ImageAnswer;
use bytes::Bytes;
use pingora::http::ResponseHeader;
use std::sync::Arc;
use std::time::{Duration, Instant};
use translate::Format;
use translate::response::Answer;

/// The supplier's headers, for a metered call or not: those that identify the supplier account
/// are removed, the gateway's request id added. admin-api's answers are the gateway's own (its
/// console sets session cookies): they only get the request id.
pub(crate) fn headers(ctx: &mut RequestCtx, resp: &mut ResponseHeader) -> pingora::Result<()> {
    if !ctx.route.is_some_and(Route::to_admin_api) {
        for name in STRIP_RESPONSE {
            resp.remove_header(name);
        }
        // The gateway's own time and the supplier's (`[server] server_timing`).
        if ctx.live.settings.server.server_timing {
            let timing = ctx.server_timing();
            resp.insert_header("server-timing", timing)?;
        }
    }
    resp.insert_header("x-request-id", ctx.request_id.as_str())?;
    if let (Some(call), true) = (&ctx.admission.call, ctx.attempts.downgraded_from.is_some()) {
        resp.insert_header("x-tollgate-model-served", call.model.model.id.as_str())?;
    }
    Ok(())
}

/// Supplier response headers never shown to customers (they identify the supplier account).
const STRIP_RESPONSE: [&str; 4] = [
    "openai-organization",
    "openai-project",
    "anthropic-organization-id",
    "set-cookie",
];

/// The supplier answered: start metering its body (in the supplier's format) and, for a
/// translated cell, translating it into the client's format. Token counts are neither metered
/// nor charged.
pub(crate) fn start(
    shared: &Shared,
    ctx: &mut RequestCtx,
    upstream_response: &mut ResponseHeader,
) -> pingora::Result<()> {
    reader(shared, ctx, upstream_response)?;
    ctx.answer.status = upstream_response.status.as_u16();
    ctx.answer.held_since = hold(ctx, upstream_response.status).then(Instant::now);
    Ok(())
}

/// Whether the answer is held back from the client until its content begins (`[routing]
/// failover_hold_bytes`, `failover_hold_ms`; the Pingora patch `hold_response`): a metered
/// answer of a success status, when another account may still be tried. Held, a supplier whose
/// answer breaks is failed over from and the client never sees the broken answer
/// (`attempt::abandon`).
fn hold(ctx: &RequestCtx, status: http::StatusCode) -> bool {
    let routing = &ctx.live.settings.routing;
    status.is_success()
        && routing.failover_hold_bytes > 0
        && ctx.answer.meter.is_some()
        && ctx.answer.task.is_none()
        && ctx.attempts.usage_limit.is_none()
        && ctx.may_retry(routing.max_attempts)
}

/// Lets go of a held answer once its content began, or past the bytes or the time it may be
/// held; `true` when the held answer broke instead (the supplier's error event: it stays held,
/// and the attempt is abandoned).
fn let_go(ctx: &mut RequestCtx) -> bool {
    let (Some(since), Some(meter)) = (ctx.answer.held_since, ctx.answer.meter.as_deref()) else {
        return false;
    };
    if meter.errored() {
        return true;
    }
    let routing = &ctx.live.settings.routing;
    if meter.began()
        || meter.body_bytes() > routing.failover_hold_bytes
        || since.elapsed() >= Duration::from_millis(routing.failover_hold_ms)
    {
        ctx.answer.held_since = None;
    }
    false
}

/// Who reads the body (see [`start`]).
fn reader(
    shared: &Shared,
    ctx: &mut RequestCtx,
    upstream_response: &mut ResponseHeader,
) -> pingora::Result<()> {
    let Some(call) = &ctx.admission.call else {
        return Ok(());
    };
    if ctx.admission.batch.as_ref().is_some_and(|l| l.claimed) {
        ctx.answer.batch = Some(Box::new(crate::batch_line::Capture {
            status: upstream_response.status.as_u16(),
            ..Default::default()
        }));
    }
    if ctx.route.is_some_and(Route::counts_tokens) {
        return Ok(());
    }
    if ctx.admission.task.is_some() {
        // A video create: an acceptance is collected and becomes the task's object; a refusal
        // passes on as the supplier sent it. Its charge is the task's, at its end.
        if upstream_response.status.is_success() {
            reshaped_response(upstream_response, "application/json")?;
            ctx.answer.task = Some(Vec::new());
        }
        return Ok(());
    }
    let content_type = upstream_response.headers.get(http::header::CONTENT_TYPE);
    let sse = crate::meter::is_sse(content_type.and_then(|v| v.to_str().ok()));
    let (audio, watch_reset) = (
        call.audio_seconds.is_some(),
        ctx.attempts.usage_limit.is_some(),
    );
    // The format spoken to the account that answered (`upstream::rewrite::for_account`).
    let supplier = ctx.attempts.format;
    let status = upstream_response.status.as_u16();
    // Calls without a text format (audio) are read as OpenAI's.
    let format = supplier.unwrap_or(Format::Chat);
    if let Some(images) = call
        .images
        .filter(|_| ctx.route.is_some_and(Route::is_image))
    {
        let meter = Meter::passing(format, sse).watching(audio, watch_reset);
        return image_answer(shared, ctx, upstream_response, images.urls, meter);
    }
    if let Some(plan) = call.embedding {
        return embedding_answer(ctx, upstream_response, plan, watch_reset);
    }
    let translated = match (supplier, call.client) {
        (Some(supplier), Some(client)) if supplier != client && status < 400 => {
            let context = translate::response::Context {
                model: call.model.model.id.clone(),
                request_id: ctx.request_id.clone(),
                created: ctx.started_at_ms / 1000,
                codex: call.bodies.codex.clone(),
            };
            Some(Answer::translate(supplier, client, call.stream, context))
        }
        _ => None,
    };
    let meter = match translated {
        Some(answer) => {
            reshaped_response(upstream_response, answer.content_type())?;
            Meter::reading(format, answer)
        }
        None => {
            ctx.answer.reshape = Reshape::error(supplier, call.client, status);
            if let Some(reshape) = &ctx.answer.reshape {
                reshaped_response(upstream_response, reshape.content_type())?;
            }
            Meter::passing(format, sse)
        }
    };
    let mut meter = meter.watching(audio, watch_reset);
    meter.count_images(call.images.is_some());
    ctx.answer.meter = Some(Box::new(meter));
    Ok(())
}

/// How an image answer comes back: its images counted by `meter`, or by the rewrite when it is
/// rewritten (translated from Gemini, or its base64 hosted as URLs: `urls`).
fn image_answer(
    shared: &Shared,
    ctx: &mut RequestCtx,
    upstream_response: &mut ResponseHeader,
    urls: bool,
    mut meter: Meter,
) -> pingora::Result<()> {
    let gemini = ctx.attempts.format == Some(Format::Gemini);
    let created = ctx.started_at_ms / 1000;
    let asked = (gemini, urls, upstream_response.status.as_u16(), created);
    let host = ctx.admission.call.as_ref().and_then(|c| c.host.as_deref());
    ctx.answer.reshape = image_rewrite(shared, host, asked);
    // Image answers are counted by the meter, unless they are rewritten: then the rewrite,
    // which reads the whole answer anyway, counts them (one parse, one buffer).
    meter.count_images(ctx.answer.reshape.is_none());
    if let Some(reshape) = &ctx.answer.reshape {
        reshaped_response(upstream_response, reshape.content_type())?;
    }
    ctx.answer.meter = Some(Box::new(meter));
    Ok(())
}

/// How an embedding answer comes back: metered in input tokens (`Meter::embedding`), rewritten
/// into the client's shape when the supplier speaks the other format (`EmbeddingAnswer`), a
/// supplier error in the client's error shape.
fn embedding_answer(
    ctx: &mut RequestCtx,
    upstream_response: &mut ResponseHeader,
    plan: crate::wire::embedding_call::Answering,
    watch_reset: bool,
) -> pingora::Result<()> {
    let supplier = ctx.attempts.format;
    let status = upstream_response.status.as_u16();
    let meter = Meter::passing(supplier.unwrap_or(Format::Chat), false)
        .embedding(plan.estimate)
        .watching(false, watch_reset);
    ctx.answer.meter = Some(Box::new(meter));
    let model = ctx
        .admission
        .call
        .as_ref()
        .map(|c| c.requested_model.as_str());
    ctx.answer.reshape = match status < 400 {
        true => EmbeddingAnswer::new(
            supplier == Some(Format::Gemini),
            plan,
            model.unwrap_or_default(),
        )
        .map(|a| Reshape::Embedding(Box::new(a))),
        false => {
            let client = match plan.shape {
                Shape::OpenAi => Format::Chat,
                Shape::NativeOne | Shape::NativeBatch => Format::Gemini,
            };
            Reshape::error(supplier, Some(client), status)
        }
    };
    if let Some(reshape) = &ctx.answer.reshape {
        reshaped_response(upstream_response, reshape.content_type())?;
    }
    Ok(())
}

/// The rewrite of an image answer (`ImageAnswer::new`), its URLs hosted on the gateway's public
/// base (or the request's `host`); `asked`: the supplier speaks Gemini, the client wants URLs,
/// the answer's status, its creation time.
fn image_rewrite(
    shared: &Shared,
    host: Option<&str>,
    (gemini, urls, status, created): (bool, bool, u16, u64),
) -> Option<Reshape> {
    let host = Arc::new(crate::media::Hosting {
        pending: Arc::clone(&shared.pending_media),
        signer: shared.signer.clone(),
        base: crate::media::base(&shared.settings.server, host),
    });
    let answer = ImageAnswer::new(gemini, urls, status, created, host);
    answer.map(|a| Reshape::Image(Box::new(a)))
}

/// One chunk of the supplier's body on its way to the client (`end_of_stream`: the last): the
/// meter reads it (and replaces it by the client's bytes when translating); a rate-limited
/// answer is replaced at its end by the gateway's own, a reshaped one by its rewrite, a video
/// task's acceptance by the task's object. `true`: the answer, held back from the client, broke
/// with the supplier's error event (the caller fails the attempt over).
pub(crate) fn body(
    s: &Shared,
    ctx: &mut RequestCtx,
    body: &mut Option<Bytes>,
    end_of_stream: bool,
) -> bool {
    if body.as_ref().is_some_and(|b| !b.is_empty()) {
        ctx.answer.ttfb.get_or_insert_with(|| ctx.started.elapsed());
    }
    if let Some(kept) = ctx.answer.task.as_mut() {
        if let Some(chunk) = body.as_ref() {
            let room = crate::video::OBJECT_LIMIT.saturating_sub(kept.len());
            kept.extend_from_slice(&chunk[..chunk.len().min(room)]);
        }
        *body = match end_of_stream {
            true => {
                let kept = ctx.answer.task.take().unwrap_or_default();
                crate::video::serve::answered(s, ctx, &kept)
            }
            false => Some(Bytes::new()),
        };
        return false;
    }
    if let Some(meter) = ctx.answer.meter.as_mut() {
        meter.body(body, end_of_stream);
    }
    if let Some(limit) = &ctx.attempts.usage_limit {
        let (hint, surface) = (
            ctx.answer.meter.as_deref().and_then(Meter::reset_hint),
            ctx.surface(),
        );
        *body = end_of_stream.then(|| limit.body(surface, hint));
    } else if let Some(reshape) = ctx.answer.reshape.as_mut() {
        reshape.body(body, end_of_stream);
    }
    if let Some(capture) = ctx.answer.batch.as_mut() {
        capture.add(body.as_ref(), end_of_stream);
    }
    let_go(ctx)
}

/// The response header of a translated answer: the client's content type, and chunked framing
/// (the translated body's length is not known in advance).
pub(crate) fn reshaped_response(
    resp: &mut ResponseHeader,
    content_type: &str,
) -> pingora::Result<()> {
    resp.remove_header(&http::header::CONTENT_LENGTH);
    resp.insert_header(http::header::CONTENT_TYPE, content_type)?;
    resp.insert_header(http::header::TRANSFER_ENCODING, "chunked")?;
    Ok(())
}
