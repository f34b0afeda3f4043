//! The bodies of a call, made once after routing and before any supplier is contacted: one per
//! format the decision's accounts speak — the client's own body (rewritten by its format's
//! `wire` module) for accounts of the client's format, a translation (`wire::cells`, the
//! `translate` crate) for the others. A field one of the targets cannot express is refused here
//! (400 naming it), before anything is sent.

use crate::classify::Route;
use crate::errors::GatewayError;
use crate::inspect::{Kind, Work};
use crate::wire;
use crate::wire::cells::{self, Bodies, BodyOptions};
use bytes::Bytes;
use translate::Format;

/// The body to forward for a call served by `served_model`: the original when nothing changes,
/// else a copy rewritten in the client's wire format (`translate::request::forward`).
pub(crate) fn forward(
    work: &Work<'_>,
    route: Route,
    original: &Bytes,
    served_model: &str,
) -> Result<Bytes, GatewayError> {
    match &work.kind {
        Kind::Image(call) => wire::images::openai_body(call, served_model),
        Kind::Text { fields, call } => {
            let format = route.format().ok_or(GatewayError::Internal)?;
            let endpoint = route.endpoint();
            Ok(translate::request::forward(
                format,
                endpoint,
                original,
                fields,
                call,
                served_model,
            )?)
        }
        Kind::Audio { form, .. } => Ok(form.forward_body(original, served_model)),
        Kind::Embedding(call) => wire::embeddings::openai_body(call, served_model),
        // Video tasks are sent by the gateway itself (`video::serve`), never proxied.
        Kind::Video(_) => Err(GatewayError::Internal),
    }
}

/// The bodies to send for a call served by `served_model` to accounts speaking `targets`: the
/// client's own body (rewritten as [`forward`] does) for accounts of the client's
/// format, a translation for the others. Computed before any supplier is contacted, so a field
/// one of the targets cannot express is refused first (400 naming it). With the `codex`
/// feature a responses payload is adapted (`translate::codex`) before it is translated; the
/// client's own format gets it as it is (OpenAI's Responses API is the one Codex speaks).
///
/// An image model's bodies follow its profile (`wire::images`): the OpenAI-style body for
/// `openai` accounts, a `generateContent` body for `gemini` ones; on the native surface the
/// image rules are checked and the body forwarded as sent.
pub(crate) fn build(
    work: &Work<'_>,
    route: Route,
    original: &Bytes,
    served: &settings::Model,
    targets: impl IntoIterator<Item = Option<Format>>,
    options: BodyOptions,
) -> Result<Bodies, GatewayError> {
    let served_model = served.id.as_str();
    let mut bodies = Bodies::default();
    if served.kind == settings::ModelKind::Image {
        for target in targets {
            if bodies.contains(target) {
                continue;
            }
            let body = match (&work.kind, target) {
                (Kind::Image(call), Some(Format::Gemini)) => wire::images::gemini_body(call)?,
                (Kind::Image(call), _) => wire::images::openai_body(call, served_model)?,
                (Kind::Text { fields, .. }, _) => {
                    wire::images::check_native(fields, served)?;
                    original.clone()
                }
                (Kind::Audio { .. } | Kind::Video(_) | Kind::Embedding(_), _) => {
                    return Err(GatewayError::Internal);
                }
            };
            bodies.insert(target, body);
        }
        return Ok(bodies);
    }
    if let Kind::Embedding(call) = &work.kind {
        // Each format's body made from the one reading (`wire::embeddings`).
        for target in targets {
            if !bodies.contains(target) {
                let body = match target {
                    Some(Format::Gemini) => wire::embeddings::gemini_body(call, served_model)?,
                    _ => wire::embeddings::openai_body(call, served_model)?,
                };
                bodies.insert(target, body);
            }
        }
        return Ok(bodies);
    }
    let adapts = options.codex && route == Route::Responses;
    // The Codex adaptation, made at the first translated target only (a call served only
    // by OpenAI-format accounts never parses its body for it).
    let mut adapted: Option<Vec<u8>> = None;
    for target in targets {
        if bodies.contains(target) {
            continue;
        }
        let body = match target {
            Some(t) if Some(t) != route.format() => {
                if adapts && adapted.is_none() {
                    let (body, tools) = translate::codex::adapt(original)
                        .unwrap_or_else(|| (original.to_vec(), Default::default()));
                    bodies.codex = tools;
                    adapted = Some(body);
                }
                let source = adapted.as_deref().unwrap_or(original);
                let max = options.default_max_tokens;
                cells::translated(route, t, source, served_model, max)?
            }
            _ => forward(work, route, original, served_model)?,
        };
        bodies.insert(target, body);
    }
    Ok(bodies)
}
