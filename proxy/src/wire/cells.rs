//! Serving cells: which wire format the gateway speaks to an account for a client's call, the body
//! it sends in that format, the supplier path, and how the answer is turned back into the client's
//! format.
//!
//! | client route | `openai` account | `anthropic` account | `gemini` account |
//! |---|---|---|---|
//! | chat completions | chat (pass-through) | Messages (translated) | generateContent (translated) |
//! | responses | responses (pass-through) | Messages (translated) | generateContent (translated) |
//! | Messages | chat (translated) | Messages (pass-through) | generateContent (translated) |
//! | native | — (no cell: 404) | — (no cell: 404) | generateContent (pass-through) |
//!
//! Same format in and out passes the bytes through untouched (only the model id and the usage
//! options are rewritten, as before); a different format goes through the `translate` crate: the
//! request once, before any supplier is contacted (what the target cannot express is refused with
//! 400 naming the field), the answer event by event as it arrives.

use crate::classify::Route;
use crate::errors::GatewayError;
use bytes::Bytes;
use settings::Provider;
use translate::Format;

/// The format the gateway speaks to a `provider` account for a call on `route`; `None` for calls
/// that are not JSON generation (audio forms go to OpenAI-format accounts as they are, image calls
/// to OpenAI-style accounts in the client's own images format, a video create in the OpenAI video
/// API's; a Gemini account gets image calls as `generateContent`, a video create as Veo's
/// `predictLongRunning`).
pub(crate) fn target(provider: Provider, route: Route) -> Option<Format> {
    // Embeddings: OpenAI's API (named by its family's format) or Gemini's.
    if route.is_embedding() {
        return Some(match provider {
            Provider::Gemini => Format::Gemini,
            Provider::OpenAi | Provider::Anthropic => Format::Chat,
        });
    }
    if route.is_image() || route == Route::VideoCreate {
        return (provider == Provider::Gemini).then_some(Format::Gemini);
    }
    let client = route.format()?;
    Some(match (provider, client) {
        (Provider::OpenAi, Format::Responses) => Format::Responses,
        (Provider::OpenAi, _) => Format::Chat,
        (Provider::Anthropic, _) => Format::Messages,
        (Provider::Gemini, _) => Format::Gemini,
    })
}

/// The bodies of one call: one per format its accounts speak (usually one).
#[derive(Debug, Default)]
pub(crate) struct Bodies {
    list: Vec<(Option<Format>, Bytes)>,
    /// The tools a Codex-style request declared in its own kinds, when its payload was adapted
    /// (`codex` feature): their calls go back to the client in those kinds.
    pub codex: translate::codex::CodexTools,
}

/// How a call's bodies are made.
#[derive(Debug, Clone, Copy)]
pub(crate) struct BodyOptions {
    /// The output cap a translation sends when the target requires one and the client set none.
    pub default_max_tokens: u64,
    /// The key's group has the `codex` feature: a responses payload translated for another
    /// format is adapted first (`translate::codex`).
    pub codex: bool,
}

impl Bodies {
    pub fn insert(&mut self, format: Option<Format>, body: Bytes) {
        if self.get(format).is_none() {
            self.list.push((format, body));
        }
    }

    pub fn get(&self, format: Option<Format>) -> Option<&Bytes> {
        self.list.iter().find(|(f, _)| *f == format).map(|(_, b)| b)
    }

    pub fn contains(&self, format: Option<Format>) -> bool {
        self.get(format).is_some()
    }
}

/// The body of a call on `route` (client format) for an account speaking `target`, translated
/// from the client's `original` for the upstream model `model`.
pub(crate) fn translated(
    route: Route,
    target: Format,
    original: &[u8],
    model: &str,
    default_max_tokens: u64,
) -> Result<Bytes, GatewayError> {
    let client = route.format().ok_or(GatewayError::Internal)?;
    let options = translate::request::Options { default_max_tokens };
    translate::request::translate(client, target, original, model, &options)
        .map(Bytes::from)
        .map_err(|r| GatewayError::Untranslatable {
            message: r.message,
            param: r.param,
        })
}

/// The path (with query) appended to an account's `base_url` path for a call on `route` spoken in
/// `target`: OpenAI `/chat/completions`, `/responses`, `/audio/transcriptions`, `/videos`;
/// Anthropic `/v1/messages` (`/count_tokens`); Gemini `/v1beta/models/{model}:generateContent`,
/// `:streamGenerateContent?alt=sse`, `:countTokens`, `:predictLongRunning` (a video create).
pub(crate) fn upstream_path(
    route: Route,
    target: Option<Format>,
    model: &str,
    stream: bool,
    client_query: Option<&str>,
) -> String {
    if route.is_embedding() {
        return match target {
            Some(Format::Gemini) => format!(
                "/v1beta/models/{}{}",
                super::segment(model),
                match route {
                    Route::NativeEmbed => ":embedContent",
                    _ => ":batchEmbedContents",
                }
            ),
            _ => "/embeddings".to_string(),
        };
    }
    match target {
        Some(Format::Gemini) if route == Route::VideoCreate => {
            format!(
                "/v1beta/models/{}:predictLongRunning",
                super::segment(model)
            )
        }
        None => match route {
            Route::ImageGenerations => "/images/generations",
            Route::ImageEdits => "/images/edits",
            Route::VideoCreate => "/videos",
            _ => "/audio/transcriptions",
        }
        .to_string(),
        Some(Format::Chat) => "/chat/completions".to_string(),
        Some(Format::Responses) => "/responses".to_string(),
        Some(Format::Messages) if route == Route::MessagesCountTokens => {
            "/v1/messages/count_tokens".to_string()
        }
        Some(Format::Messages) => "/v1/messages".to_string(),
        Some(Format::Gemini) => {
            let action = match route {
                Route::NativeCountTokens => ":countTokens",
                _ if stream => ":streamGenerateContent",
                _ => ":generateContent",
            };
            // A native client's own `alt` is kept (without it the stream is a JSON array);
            // a translated stream always asks for SSE.
            let sse = match route {
                Route::NativeStream => {
                    client_query.is_some_and(|q| q.split('&').any(|p| p == "alt=sse"))
                }
                _ => stream,
            };
            let query = if sse { "?alt=sse" } else { "" };
            format!("/v1beta/models/{model}{action}{query}")
        }
    }
}

/// An answer rewritten on its way back, other than a successful text answer (which the meter
/// translates as it reads it, `translate::response::Answer`).
pub(crate) enum Reshape {
    /// An image answer translated from Gemini, or with its base64 images hosted as URLs.
    Image(Box<super::images::ImageAnswer>),
    /// An embedding answer in the other format than the supplier's.
    Embedding(Box<super::embeddings::EmbeddingAnswer>),
    /// A supplier error (status ≥ 400): its body is collected and rewritten in the client's error
    /// shape at the end.
    Error {
        supplier: Format,
        client: Format,
        status: u16,
        body: Vec<u8>,
    },
}

/// Largest supplier error body collected for rewriting; the rest is dropped.
const ERROR_CAP: usize = 64 * 1024;

impl Reshape {
    /// A supplier error (`status` ≥ 400) for a `client` call answered by an account speaking
    /// `supplier`; `None` for a success, or when both speak the same format (the error passes
    /// through untouched).
    pub fn error(supplier: Option<Format>, client: Option<Format>, status: u16) -> Option<Reshape> {
        let (Some(supplier), Some(client)) = (supplier, client) else {
            return None;
        };
        (supplier != client && status >= 400).then_some(Reshape::Error {
            supplier,
            client,
            status,
            body: Vec::new(),
        })
    }

    /// The `Content-Type` of the reshaped body.
    pub fn content_type(&self) -> &'static str {
        "application/json"
    }

    /// Replaces one chunk of the supplier's body (`None` at the very end) by what the client gets
    /// now: the translation of every event the chunk completed, possibly nothing.
    pub fn body(&mut self, body: &mut Option<Bytes>, end_of_stream: bool) {
        let out = match self {
            Reshape::Image(answer) => return answer.body(body, end_of_stream),
            Reshape::Embedding(answer) => return answer.body(body, end_of_stream),
            Reshape::Error {
                supplier,
                client,
                status,
                body: kept,
            } => {
                if let Some(chunk) = body.as_ref() {
                    let room = ERROR_CAP.saturating_sub(kept.len());
                    kept.extend_from_slice(&chunk[..chunk.len().min(room)]);
                }
                match end_of_stream {
                    true => translate::response::error_body(*supplier, *client, *status, kept),
                    false => Vec::new(),
                }
            }
        };
        *body = Some(Bytes::from(out));
    }

    /// Image answers: the images the rewritten answer carried (see `ImageAnswer::images`).
    pub fn images(&self) -> Option<u64> {
        match self {
            Reshape::Image(answer) => answer.images(),
            Reshape::Error { .. } | Reshape::Embedding(_) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_cell() {
        use Provider::*;
        assert_eq!(target(OpenAi, Route::ChatCompletions), Some(Format::Chat));
        assert_eq!(target(OpenAi, Route::Responses), Some(Format::Responses));
        assert_eq!(target(OpenAi, Route::Messages), Some(Format::Chat));
        assert_eq!(target(Anthropic, Route::Responses), Some(Format::Messages));
        assert_eq!(target(Gemini, Route::Messages), Some(Format::Gemini));
        assert_eq!(target(OpenAi, Route::AudioTranscriptions), None);
        assert_eq!(
            upstream_path(Route::Messages, Some(Format::Gemini), "g", true, None),
            "/v1beta/models/g:streamGenerateContent?alt=sse"
        );
        assert_eq!(
            upstream_path(
                Route::NativeStream,
                Some(Format::Gemini),
                "g",
                true,
                Some("key=k")
            ),
            "/v1beta/models/g:streamGenerateContent"
        );
        assert_eq!(
            upstream_path(
                Route::NativeStream,
                Some(Format::Gemini),
                "g",
                true,
                Some("alt=sse&key=k")
            ),
            "/v1beta/models/g:streamGenerateContent?alt=sse"
        );
        assert_eq!(
            upstream_path(
                Route::MessagesCountTokens,
                Some(Format::Messages),
                "c",
                false,
                None
            ),
            "/v1/messages/count_tokens"
        );
        // A video create: the OpenAI video API's, or Veo's long-running predict (the model id one
        // encoded segment).
        assert_eq!(target(OpenAi, Route::VideoCreate), None);
        assert_eq!(target(Gemini, Route::VideoCreate), Some(Format::Gemini));
        assert_eq!(
            upstream_path(Route::VideoCreate, None, "sora-2", false, None),
            "/videos"
        );
        assert_eq!(
            upstream_path(
                Route::VideoCreate,
                Some(Format::Gemini),
                "v/e?o",
                false,
                None
            ),
            "/v1beta/models/v%2Fe%3Fo:predictLongRunning"
        );
    }
}
