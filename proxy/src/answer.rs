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
use crate::upstream::rewrite;
use crate::wire::cells::{self, Reshape};
use crate::wire::images::ImageAnswer;
use bytes::Bytes;
use std::sync::Arc;
use translate::Format;
use translate::response::Answer;

/// The supplier answered: start metering its body (in the supplier's format) and, for a
/// translated cell, translating it into the client's format. Token counts are neither metered
/// nor charged.
pub(crate) fn start(
    shared: &Shared,
    ctx: &mut RequestCtx,
    upstream_response: &mut pingora::http::ResponseHeader,
) -> pingora::Result<()> {
    let Some(call) = &ctx.call else {
        return Ok(());
    };
    if ctx.route.is_some_and(Route::counts_tokens) {
        return Ok(());
    }
    let content_type = upstream_response.headers.get(http::header::CONTENT_TYPE);
    let content_type = content_type
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let content_type = content_type.as_deref();
    let (audio, watch_reset) = (call.audio_seconds.is_some(), ctx.usage_limit.is_some());
    let live = ctx.live.clone();
    let provider = ctx.current().and_then(|i| live.accounts.get(i));
    let supplier =
        provider.and_then(|u| ctx.route.and_then(|r| cells::target(u.account.provider, r)));
    let status = upstream_response.status.as_u16();
    // Calls without a text format (audio) are read as OpenAI's.
    let format = supplier.unwrap_or(Format::Chat);
    if let Some(images) = call
        .images
        .filter(|_| ctx.route.is_some_and(Route::is_image))
    {
        let mut meter = Meter::new(format, content_type).watching(audio, watch_reset);
        let gemini = supplier == Some(Format::Gemini);
        let host = Arc::new(crate::media::Hosting {
            pending: Arc::clone(&shared.pending_media),
            signer: shared.signer.clone(),
            base: shared.media_base(call.host.as_deref()),
        });
        let created = ctx.started_at_ms / 1000;
        let answer = ImageAnswer::new(gemini, images.urls, status, created, host);
        ctx.reshape = answer.map(|a| Reshape::Image(Box::new(a)));
        // Image answers are counted by the meter, unless they are rewritten: then the rewrite,
        // which reads the whole answer anyway, counts them (one parse, one buffer).
        meter.count_images(ctx.reshape.is_none());
        if let Some(reshape) = &ctx.reshape {
            rewrite::reshaped_response(upstream_response, reshape.content_type())?;
        }
        ctx.meter = Some(meter);
        return Ok(());
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
            rewrite::reshaped_response(upstream_response, answer.content_type())?;
            Meter::reading(format, answer)
        }
        None => {
            ctx.reshape = Reshape::error(supplier, call.client, status).filter(|_| status >= 400);
            if let Some(reshape) = &ctx.reshape {
                rewrite::reshaped_response(upstream_response, reshape.content_type())?;
            }
            Meter::new(format, content_type)
        }
    };
    let mut meter = meter.watching(audio, watch_reset);
    meter.count_images(call.images.is_some());
    ctx.meter = Some(meter);
    Ok(())
}

/// One chunk of the supplier's body on its way to the client (`end_of_stream`: the last): the
/// meter reads it (and replaces it by the client's bytes when translating); a rate-limited
/// answer is replaced at its end by the gateway's own, a reshaped one by its rewrite.
pub(crate) fn body(ctx: &mut RequestCtx, body: &mut Option<Bytes>, end_of_stream: bool) {
    if body.as_ref().is_some_and(|b| !b.is_empty()) {
        ctx.ttfb.get_or_insert_with(|| ctx.started.elapsed());
    }
    if let Some(meter) = ctx.meter.as_mut() {
        meter.body(body, end_of_stream);
    }
    if let Some(limit) = &ctx.usage_limit {
        let (hint, surface) = (
            ctx.meter.as_ref().and_then(Meter::reset_hint),
            ctx.surface(),
        );
        *body = end_of_stream.then(|| limit.body(surface, hint));
    } else if let Some(reshape) = ctx.reshape.as_mut() {
        reshape.body(body, end_of_stream);
    }
}
