//! Phase 2, inspection: what the call asks for, learned once from its headers and its body.
//!
//! [`body`] reads the body (bounded, replayable) and scans a JSON body's top level; [`form`] reads
//! a multipart form. [`work`] turns route, headers and body into one typed [`Work`] value that the
//! rest of the request only reads: the body's fields in the client's wire format, the session
//! signal and the attribution headers, each computed here and nowhere else.

pub(crate) mod body;
pub(crate) mod embedding;
pub(crate) mod form;
pub(crate) mod image;
pub(crate) mod video;

use crate::classify::Route;
use crate::errors::GatewayError;
use crate::wire;
use crate::wire::TopLevel;
use bytes::Bytes;
use pingora::http::RequestHeader;
use translate::Format;

/// What inspection learned from a generation call.
pub(crate) struct Work<'a> {
    pub kind: Kind<'a>,
    /// The session signal (see [`session_signal`]), when the call carries one.
    pub session: Option<String>,
    /// Attribution headers (`x-tollgate-project`, `x-tollgate-workflow`).
    pub project: Option<String>,
    pub workflow: Option<String>,
    /// The client asked never to be downgraded (`x-tollgate-downgrade: never`).
    pub no_downgrade: bool,
    /// Size of the client's body in bytes (feeds the estimates).
    pub body_bytes: usize,
    /// The request's `Host` (builds the URLs of hosted images when no public base URL is set).
    pub host: Option<String>,
    /// Native calls: reference images (`inlineData` parts) in `contents`; for an image model they
    /// make the call an edit.
    pub native_references: usize,
}

/// The body of a generation call, per kind of body.
pub(crate) enum Kind<'a> {
    /// A JSON call (chat completions, responses): its top-level fields and what they ask.
    Text {
        fields: TopLevel<'a>,
        call: wire::Head,
    },
    /// A multipart audio transcription and the duration of its file (seconds, see `form`).
    Audio { form: form::AudioForm, seconds: u64 },
    /// An image generation or edit on the compat surface.
    Image(Box<image::ImageCall>),
    /// A video task's create body (`video.rs`).
    Video(Box<video::Job>),
    /// An embedding call, on either surface (`embedding.rs`).
    Embedding(Box<embedding::EmbeddingCall>),
}

impl Work<'_> {
    /// The model id exactly as the client sent it.
    pub fn model(&self) -> &str {
        match &self.kind {
            Kind::Text { call, .. } => &call.model,
            Kind::Audio { form, .. } => &form.model,
            Kind::Image(call) => &call.model,
            Kind::Video(job) => &job.model,
            Kind::Embedding(call) => &call.model,
        }
    }

    /// Images the call asks for (`n` of a compat image call, else 1): what an image model's hold
    /// is priced on.
    pub fn images_asked(&self) -> u64 {
        match &self.kind {
            Kind::Image(call) => call.n,
            Kind::Text { .. } | Kind::Audio { .. } | Kind::Video(_) | Kind::Embedding(_) => 1,
        }
    }

    /// Whether the call edits reference images (an image model's edit accounts serve it).
    pub fn is_edit(&self) -> bool {
        match &self.kind {
            Kind::Image(call) => call.edit,
            Kind::Text { .. } => self.native_references > 0,
            Kind::Audio { .. } | Kind::Video(_) | Kind::Embedding(_) => false,
        }
    }

    /// Image calls: whether the client asked for URLs (`response_format=url`).
    pub fn wants_urls(&self) -> bool {
        matches!(&self.kind, Kind::Image(call) if call.url)
    }

    /// Audio calls: the duration read from the file (seconds); `None` for other calls.
    pub fn audio_seconds(&self) -> Option<u64> {
        match &self.kind {
            Kind::Text { .. } | Kind::Image(_) | Kind::Video(_) | Kind::Embedding(_) => None,
            Kind::Audio { seconds, .. } => Some(*seconds),
        }
    }

    /// The output cap a text call sets (`max_tokens`, `max_output_tokens`, …), if any.
    pub fn output_cap(&self) -> Option<u64> {
        match &self.kind {
            Kind::Text { call, .. } => call.output_cap,
            // An embedding makes no tokens.
            Kind::Embedding(_) => Some(0),
            Kind::Audio { .. } | Kind::Image(_) | Kind::Video(_) => None,
        }
    }

    /// Whether the client asked for a stream.
    pub fn stream(&self) -> bool {
        match &self.kind {
            Kind::Text { call, .. } => call.stream,
            Kind::Audio { form, .. } => form.stream,
            Kind::Image(_) | Kind::Video(_) | Kind::Embedding(_) => false,
        }
    }
}

/// Inspects a generation call on `route` whose body is `original`.
pub(crate) fn work<'a>(
    route: Route,
    header: &RequestHeader,
    original: &'a Bytes,
) -> Result<Work<'a>, GatewayError> {
    let (project, workflow) = attribution(header)?;
    let content_type = header
        .headers
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok());
    let kind = match route {
        Route::ImageGenerations => Kind::Image(Box::new(image::json_call(original, false)?)),
        Route::VideoCreate => Kind::Video(Box::new(video::parse(original)?)),
        Route::Embeddings => Kind::Embedding(Box::new(embedding::openai(original)?)),
        Route::NativeEmbed | Route::NativeBatchEmbed => {
            let model = Route::native_model(header.uri.path()).unwrap_or_default();
            let batch = route == Route::NativeBatchEmbed;
            Kind::Embedding(Box::new(embedding::native(original, model, batch)?))
        }
        Route::ImageEdits => {
            let json = content_type.is_some_and(|c| {
                c.split(';')
                    .next()
                    .is_some_and(|e| e.trim().eq_ignore_ascii_case("application/json"))
            });
            Kind::Image(Box::new(if json {
                image::json_call(original, true)?
            } else {
                image::form_call(original, content_type)?
            }))
        }
        Route::AudioTranscriptions => {
            let form = form::audio_form(original, content_type)?;
            let (seconds, _exact) = form::audio_seconds(form.file(original));
            Kind::Audio { form, seconds }
        }
        _ => {
            let fields = translate::request::top_level(original)?;
            native_only(route, &fields)?;
            // Every other route is answered before inspection (local, media, video) or read
            // above (images, audio): a text route always has a format.
            let format = route.format().ok_or(GatewayError::Internal)?;
            let path_model = Route::native_model(header.uri.path()).unwrap_or_default();
            let call = translate::request::head(format, route.endpoint(), path_model, &fields)?;
            Kind::Text { fields, call }
        }
    };
    let no_fields = TopLevel::new();
    let fields = match &kind {
        Kind::Text { fields, .. } => fields,
        Kind::Audio { .. } | Kind::Image(_) | Kind::Video(_) | Kind::Embedding(_) => &no_fields,
    };
    let native_references = match route {
        Route::NativeGenerate | Route::NativeStream => wire::images::native_references(fields),
        _ => 0,
    };
    let session = session_signal(header, fields);
    let no_downgrade = header
        .headers
        .get("x-tollgate-downgrade")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("never"));
    Ok(Work {
        kind,
        session,
        project,
        workflow,
        no_downgrade,
        body_bytes: original.len(),
        native_references,
        host: header
            .headers
            .get(http::header::HOST)
            .and_then(|v| v.to_str().ok())
            .filter(|h| !h.is_empty() && h.len() <= 255)
            .map(str::to_string),
    })
}

/// Cached-content requests (a `cachedContent` reference to content cached at a Gemini supplier)
/// need the native route (SPEC); on chat completions, responses and Messages they are refused
/// with 400 naming the field, never silently dropped (the call would be served and billed
/// without the cached context).
fn native_only(route: Route, fields: &TopLevel<'_>) -> Result<(), GatewayError> {
    if route.format() == Some(Format::Gemini) {
        return Ok(());
    }
    for (field, param) in [
        ("cachedContent", "cachedContent"),
        ("cached_content", "cached_content"),
    ] {
        if fields.contains_key(field) {
            return Err(GatewayError::invalid(
                format!(
                    "'{field}': cached-content requests are served on the native route only (POST /v1beta/models/{{model}}:generateContent)"
                ),
                Some(param),
            ));
        }
    }
    Ok(())
}

/// Attribution headers: a project and a workflow the client names for reporting. At most 64
/// visible ASCII characters each; anything else is refused (it would be reported as sent).
fn attribution(req: &RequestHeader) -> Result<(Option<String>, Option<String>), GatewayError> {
    let read = |name: &'static str| -> Result<Option<String>, GatewayError> {
        let mut values = req.headers.get_all(name).iter();
        match (values.next(), values.next()) {
            (None, _) => Ok(None),
            (Some(v), None) => {
                let s = v.to_str().unwrap_or_default().trim();
                if s.is_empty() || s.len() > 64 || !s.bytes().all(|b| (0x20..=0x7e).contains(&b)) {
                    return Err(GatewayError::invalid(
                        format!("header {name} must be 1 to 64 visible ASCII characters"),
                        Some(name),
                    ));
                }
                Ok(Some(s.to_string()))
            }
            _ => Err(GatewayError::invalid(
                format!("header {name} may appear once"),
                Some(name),
            )),
        }
    };
    Ok((read("x-tollgate-project")?, read("x-tollgate-workflow")?))
}

/// The session signal of a call, in this precedence: header `x-session-id`, header `session_id`,
/// body `session_id`, body `conversation_id`, body `prompt_cache_key` (the first present, non-empty
/// string of at most 256 characters). Requests with the same signal prefer the same account.
fn session_signal(req: &RequestHeader, fields: &TopLevel<'_>) -> Option<String> {
    let usable = |s: &str| {
        let s = s.trim();
        (!s.is_empty() && s.len() <= 256).then(|| s.to_string())
    };
    for name in ["x-session-id", "session_id"] {
        if let Some(v) = req
            .headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .and_then(usable)
        {
            return Some(v);
        }
    }
    for field in ["session_id", "conversation_id", "prompt_cache_key"] {
        if let Some(v) = fields
            .get(field)
            .and_then(|raw| serde_json::from_str::<String>(raw.get()).ok())
            .and_then(|s| usable(&s))
        {
            return Some(v);
        }
    }
    None
}
