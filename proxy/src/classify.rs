//! Phase 0, classification: which gateway route a request is for, from its method and path.
//!
//! Classification looks at the method and path only. It decides the error shape of everything
//! that follows, so it runs first, before authentication.

use crate::errors::{Family, Surface};
use http::Method;
use settings::ModelKind;
use translate::Format;

/// A gateway route the proxy serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// `GET /compat/v1/models`, answered locally.
    Models,
    /// `POST /compat/v1/chat/completions`.
    ChatCompletions,
    /// `POST /compat/v1/responses`.
    Responses,
    /// `POST /compat/v1/audio/transcriptions` (multipart), only to accounts with the
    /// `audio_transcription` capability.
    AudioTranscriptions,
    /// `POST /compat/v1/images/generations` (JSON), only to accounts with `image_generation`.
    ImageGenerations,
    /// `POST /compat/v1/images/edits` (multipart `image[]` parts or JSON `images[].image_url`),
    /// only to accounts with `image_edit`.
    ImageEdits,
    /// `GET /media/{id}`: an image the gateway hosts for a `response_format=url` answer, behind
    /// a signed, expiring URL (no key: the signature is the credential).
    Media,
    /// `POST /compat/v1/videos`: create a video task (keys of groups with the `video` feature,
    /// accounts with the `video` capability).
    VideoCreate,
    /// `GET /compat/v1/videos/{task_id}`: poll a video task.
    VideoStatus,
    /// `GET /compat/v1/videos/{task_id}/content`: download a completed video, with the key or
    /// with a signed URL's `expires` and `signature` (then no key).
    VideoContent,
    /// `POST /compat/v1/embeddings` (OpenAI shape), to `openai` and `gemini` accounts of an
    /// embedding model.
    Embeddings,
    /// `POST /v1beta/models/{model}:embedContent` (also under `/v1/models/…`).
    NativeEmbed,
    /// `POST /v1beta/models/{model}:batchEmbedContents`.
    NativeBatchEmbed,
    /// `POST /v1/messages`: the Anthropic-style Messages surface.
    Messages,
    /// `POST /v1/messages/count_tokens`.
    MessagesCountTokens,
    /// `GET /v1/models`: the model list in Anthropic's shape, answered locally (in Gemini's
    /// shape, as [`Route::NativeModels`], when the request carries a Google client's marks).
    MessagesModels,
    /// `GET /v1/models/{model}`: one model in Anthropic's shape, answered locally (or
    /// [`Route::NativeModel`] for a Google client).
    MessagesModel,
    /// `POST /v1beta/models/{model}:generateContent` (also under `/v1/models/…`).
    NativeGenerate,
    /// `POST /v1beta/models/{model}:streamGenerateContent` (`?alt=sse`).
    NativeStream,
    /// `POST /v1beta/models/{model}:countTokens`.
    NativeCountTokens,
    /// `GET /v1beta/models`: the native model list, answered locally (also `GET /v1/models` from a
    /// Google client).
    NativeModels,
    /// `GET /v1beta/models/{model}`: one native model, answered locally (also under `/v1/models/`
    /// from a Google client).
    NativeModel,
    /// `/partner/v1/*`, `/api/v1/*`, `/invitations/*`, `/billing/top-up` and `/billing/top-up/*`,
    /// `/console` and `/console/*` (the web console), `/billing/webhooks/*`: forwarded to
    /// admin-api untouched (it authenticates and answers them).
    Admin,
    /// A customer key's routes served by admin-api: its reads of the ledger, `GET
    /// /compat/v1/key` (the key's standing) and `GET /compat/v1/generations/{request_id}` (one
    /// call's cost), and batch work, `/compat/v1/files…` and `/compat/v1/batches…` (issue 46):
    /// forwarded to admin-api like
    /// [`Route::Admin`], but on the OpenAI surface: the gateway's own errors about them (admin-api
    /// unreachable) are in the gateway's shape, as admin-api's are (issue 45).
    KeyReads,
}

/// `GET {compat_base}/key`: served by admin-api.
const KEY_STANDING: &str = "/compat/v1/key";
/// `GET {compat_base}/generations/{request_id}`: served by admin-api.
const GENERATIONS: &str = "/compat/v1/generations/";

/// Path prefixes served by admin-api behind the one public base URL.
const ADMIN_PREFIXES: [&str; 6] = [
    "/partner/v1",
    "/api/v1/",
    "/invitations/",
    "/billing/top-up",
    "/billing/webhooks/",
    "/console",
];

/// Batch files and batches, and Anthropic's message batches: served by admin-api (issue 46).
const BATCH_ROOTS: [&str; 3] = [
    "/compat/v1/files",
    "/compat/v1/batches",
    "/v1/messages/batches",
];

/// The roots of the native surface's model paths (`google-genai` uses `v1beta` by default; some
/// releases and clients use `v1`).
/// The root of the video task paths.
const VIDEOS: &str = "/compat/v1/videos/";

const NATIVE_ROOTS: [&str; 2] = ["/v1beta/models/", "/v1/models/"];

impl Route {
    /// The route of a request, or `None` when the gateway has no such route. Only the exact paths
    /// count: `/responses` without the compat segment is not a route.
    pub fn classify(method: &Method, path: &str) -> Option<Route> {
        if ADMIN_PREFIXES.iter().any(|p| path.starts_with(p)) {
            return Some(Route::Admin);
        }
        let path = path.strip_suffix('/').unwrap_or(path);
        // A key's own standing (DESIGN §6d) and one call's cost (§6e): admin-api reads them
        // from the ledger and authenticates the key itself.
        if method == Method::GET
            && (path == KEY_STANDING
                || path
                    .strip_prefix(GENERATIONS)
                    .is_some_and(|id| !id.is_empty() && !id.contains('/')))
        {
            return Some(Route::KeyReads);
        }
        if BATCH_ROOTS.iter().any(|root| {
            path.strip_prefix(root)
                .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
        }) {
            return Some(Route::KeyReads);
        }
        let route = match (method, path) {
            (&Method::GET, "/compat/v1/models") => Route::Models,
            (&Method::POST, "/compat/v1/chat/completions") => Route::ChatCompletions,
            (&Method::POST, "/compat/v1/responses") => Route::Responses,
            (&Method::POST, "/compat/v1/audio/transcriptions") => Route::AudioTranscriptions,
            (&Method::POST, "/compat/v1/images/generations") => Route::ImageGenerations,
            (&Method::POST, "/compat/v1/images/edits") => Route::ImageEdits,
            (&Method::POST, "/compat/v1/embeddings") => Route::Embeddings,
            (&Method::GET, p) if media_id(p).is_some() => Route::Media,
            (&Method::POST, "/compat/v1/videos") => Route::VideoCreate,
            (&Method::GET, p) if p.starts_with(VIDEOS) => return Route::video(p),
            (&Method::POST, "/v1/messages") => Route::Messages,
            (&Method::POST, "/v1/messages/count_tokens") => Route::MessagesCountTokens,
            (&Method::GET, "/v1/models") => Route::MessagesModels,
            (&Method::GET, "/v1beta/models") => Route::NativeModels,
            (method, path) => return Route::native(method, path),
        };
        Some(route)
    }

    /// `GET /compat/v1/videos/{id}` or `…/{id}/content`.
    fn video(path: &str) -> Option<Route> {
        let rest = path.strip_prefix(VIDEOS)?;
        match rest.split_once('/') {
            None if Route::video_task_id(path).is_some() => Some(Route::VideoStatus),
            Some((_, "content")) if Route::video_task_id(path).is_some() => {
                Some(Route::VideoContent)
            }
            _ => None,
        }
    }

    /// The task id a video path names: one path segment of letters, digits, `_` and `-` (at most
    /// 64). Whether such a task exists is the task book's question.
    pub fn video_task_id(path: &str) -> Option<&str> {
        let rest = path.strip_prefix(VIDEOS)?;
        let id = rest.split('/').next()?;
        let valid = !id.is_empty()
            && id.len() <= 64
            && id
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
        valid.then_some(id)
    }

    /// Whether the route is one of the video task routes.
    pub fn is_video(self) -> bool {
        matches!(
            self,
            Route::VideoCreate | Route::VideoStatus | Route::VideoContent
        )
    }

    /// A native model route: `{root}{model}:{action}` (POST) or `{root}{model}` (GET).
    fn native(method: &Method, path: &str) -> Option<Route> {
        let rest = NATIVE_ROOTS.iter().find_map(|r| path.strip_prefix(r))?;
        match (method, rest.rsplit_once(':')) {
            (&Method::POST, Some((model, action))) if !model.is_empty() => match action {
                "generateContent" => Some(Route::NativeGenerate),
                "streamGenerateContent" => Some(Route::NativeStream),
                "countTokens" => Some(Route::NativeCountTokens),
                "embedContent" => Some(Route::NativeEmbed),
                "batchEmbedContents" => Some(Route::NativeBatchEmbed),
                _ => None,
            },
            (&Method::GET, None) if !rest.is_empty() => Some(if path.starts_with("/v1beta/") {
                Route::NativeModel
            } else {
                Route::MessagesModel
            }),
            _ => None,
        }
    }

    /// The model id a native route names in its path (`gemini-2.5-flash`, or with an author
    /// prefix `google/gemini-2.5-flash`), percent-decoding nothing: ids are plain ASCII.
    pub fn native_model(path: &str) -> Option<&str> {
        let rest = NATIVE_ROOTS.iter().find_map(|r| path.strip_prefix(r))?;
        let rest = rest.strip_suffix('/').unwrap_or(rest);
        let model = rest.rsplit_once(':').map_or(rest, |(m, _)| m);
        (!model.is_empty()).then_some(model)
    }

    /// The route of a request header; an unknown route is the client's error (404).
    ///
    /// `GET /v1/models[/{model}]` is both Anthropic's and Gemini's (google-genai's default API
    /// version is `v1`): it is the native list when the request carries a Google client's marks
    /// (`x-goog-api-key`, `x-goog-api-client` or a `key` query parameter), else Anthropic's.
    pub fn of(header: &pingora::http::RequestHeader) -> Result<Route, crate::errors::GatewayError> {
        let path = header.uri.path();
        let route = Route::classify(&header.method, path).ok_or_else(|| {
            crate::errors::GatewayError::UnknownRoute {
                method: header.method.to_string(),
                path: path.chars().take(200).collect(),
            }
        })?;
        Ok(match route {
            Route::MessagesModels if google_client(header) => Route::NativeModels,
            Route::MessagesModel if google_client(header) => Route::NativeModel,
            route => route,
        })
    }

    /// The surface an unknown path would have belonged to, for the shape of its 404.
    pub fn surface_of_path(path: &str) -> Surface {
        if path.starts_with("/compat/") {
            Surface::Client(Family::OpenAi)
        } else if path.starts_with("/v1beta/") || path.contains(':') {
            Surface::Client(Family::Gemini)
        } else if path.starts_with("/v1/") {
            Surface::Client(Family::Anthropic)
        } else {
            Surface::Client(Family::OpenAi)
        }
    }

    /// Bounded label for metrics, logs and usage events.
    pub fn label(self) -> &'static str {
        match self {
            Route::Models => "models",
            Route::ChatCompletions => "chat_completions",
            Route::Responses => "responses",
            Route::AudioTranscriptions => "audio_transcriptions",
            Route::ImageGenerations => "image_generations",
            Route::ImageEdits => "image_edits",
            Route::Media => "media",
            Route::VideoCreate => "video_create",
            Route::VideoStatus => "video_status",
            Route::VideoContent => "video_content",
            Route::Embeddings => "embeddings",
            Route::NativeEmbed => "native_embed",
            Route::NativeBatchEmbed => "native_batch_embed",
            Route::Messages => "messages",
            Route::MessagesCountTokens => "messages_count_tokens",
            Route::MessagesModels => "messages_models",
            Route::MessagesModel => "messages_model",
            Route::NativeGenerate => "native_generate",
            Route::NativeStream => "native_stream",
            Route::NativeCountTokens => "native_count_tokens",
            Route::NativeModels => "native_models",
            Route::NativeModel => "native_model",
            Route::Admin => "admin",
            Route::KeyReads => "key_reads",
        }
    }

    /// The API family the route belongs to: its key permission and its error shape.
    pub fn surface(self) -> Surface {
        match self {
            Route::Models
            | Route::ChatCompletions
            | Route::Responses
            | Route::AudioTranscriptions
            | Route::ImageGenerations
            | Route::ImageEdits
            | Route::Media
            | Route::VideoCreate
            | Route::VideoStatus
            | Route::VideoContent
            | Route::Embeddings
            | Route::KeyReads => Surface::Client(Family::OpenAi),
            Route::Messages
            | Route::MessagesCountTokens
            | Route::MessagesModels
            | Route::MessagesModel => Surface::Client(Family::Anthropic),
            Route::NativeGenerate
            | Route::NativeStream
            | Route::NativeCountTokens
            | Route::NativeModels
            | Route::NativeModel
            | Route::NativeEmbed
            | Route::NativeBatchEmbed => Surface::Client(Family::Gemini),
            Route::Admin => Surface::Admin,
        }
    }

    /// The kind of model a generation route serves (`None`: not a generation route). The native
    /// `generateContent` route also serves image models (see [`Route::serves`]).
    pub fn model_kind(self) -> Option<ModelKind> {
        match self {
            Route::ChatCompletions
            | Route::Responses
            | Route::Messages
            | Route::MessagesCountTokens
            | Route::NativeGenerate
            | Route::NativeStream
            | Route::NativeCountTokens => Some(ModelKind::Text),
            Route::AudioTranscriptions => Some(ModelKind::Audio),
            Route::ImageGenerations | Route::ImageEdits => Some(ModelKind::Image),
            Route::VideoCreate => Some(ModelKind::Video),
            Route::Embeddings | Route::NativeEmbed | Route::NativeBatchEmbed => {
                Some(ModelKind::Embedding)
            }
            Route::Models
            | Route::MessagesModels
            | Route::MessagesModel
            | Route::NativeModels
            | Route::NativeModel
            | Route::Media
            | Route::VideoStatus
            | Route::VideoContent
            | Route::Admin
            | Route::KeyReads => None,
        }
    }

    /// Whether the request is forwarded to admin-api as it came (admin-api authenticates and
    /// answers it): the admin routes and a key's ledger reads.
    pub fn to_admin_api(self) -> bool {
        matches!(self, Route::Admin | Route::KeyReads)
    }

    /// Whether the route serves models of `kind`: its own kind, and on the native surface image
    /// models too (their `generateContent` is checked against the image rules; streaming and
    /// token counting refuse them).
    pub fn serves(self, kind: ModelKind) -> bool {
        self.model_kind() == Some(kind)
            || (kind == ModelKind::Image
                && matches!(
                    self,
                    Route::NativeGenerate | Route::NativeStream | Route::NativeCountTokens
                ))
    }

    /// Whether the route is one of the embedding routes (OpenAI-style or native).
    pub fn is_embedding(self) -> bool {
        matches!(
            self,
            Route::Embeddings | Route::NativeEmbed | Route::NativeBatchEmbed
        )
    }

    /// Whether the route is one of the compat image routes.
    pub fn is_image(self) -> bool {
        matches!(self, Route::ImageGenerations | Route::ImageEdits)
    }

    /// The wire format the client speaks on a generation route (`None`: not a JSON generation
    /// route).
    pub fn format(self) -> Option<Format> {
        match self {
            Route::ChatCompletions => Some(Format::Chat),
            Route::Responses => Some(Format::Responses),
            Route::Messages | Route::MessagesCountTokens => Some(Format::Messages),
            Route::NativeGenerate | Route::NativeStream | Route::NativeCountTokens => {
                Some(Format::Gemini)
            }
            Route::Models
            | Route::AudioTranscriptions
            | Route::ImageGenerations
            | Route::ImageEdits
            | Route::Media
            | Route::VideoCreate
            | Route::VideoStatus
            | Route::VideoContent
            | Route::Embeddings
            | Route::NativeEmbed
            | Route::NativeBatchEmbed
            | Route::MessagesModels
            | Route::MessagesModel
            | Route::NativeModels
            | Route::NativeModel
            | Route::Admin
            | Route::KeyReads => None,
        }
    }

    /// What the route asks of a text body, for its format's reading (`translate::request::head`).
    pub fn endpoint(self) -> translate::request::Endpoint {
        use translate::request::Endpoint;
        match self {
            Route::MessagesCountTokens | Route::NativeCountTokens => Endpoint::Count,
            Route::NativeStream => Endpoint::Stream,
            _ => Endpoint::Generate,
        }
    }

    /// Whether the route counts tokens (free: nothing is held or charged).
    /// Whether a batch line may run on this route (the endpoints a batch may name).
    pub fn batchable(self) -> bool {
        matches!(
            self,
            Route::ChatCompletions | Route::Responses | Route::Embeddings | Route::Messages
        )
    }

    pub fn counts_tokens(self) -> bool {
        matches!(self, Route::MessagesCountTokens | Route::NativeCountTokens)
    }

    /// Whether the gateway answers the route itself, without a supplier.
    pub fn is_local(self) -> bool {
        matches!(
            self,
            Route::Models
                | Route::Media
                | Route::MessagesModels
                | Route::MessagesModel
                | Route::NativeModels
                | Route::NativeModel
        )
    }
}

/// Whether a request carries a Google client's marks: google-genai sends `x-goog-api-key` and
/// `x-goog-api-client`; REST clients put the key in `?key=`.
fn google_client(header: &pingora::http::RequestHeader) -> bool {
    header.headers.contains_key("x-goog-api-key")
        || header.headers.contains_key("x-goog-api-client")
        || query_key(header).is_some()
}

/// The `key` query parameter of a native-surface request (Google's REST form): a Google client's
/// mark here, the credential in `auth`.
pub(crate) fn query_key(req: &pingora::http::RequestHeader) -> Option<&str> {
    req.uri
        .query()?
        .split('&')
        .find_map(|pair| pair.strip_prefix("key="))
}

/// Where hosted media is served: `/media/{id}`.
pub(crate) const MEDIA_PREFIX: &str = "/media/";

/// The id of a media path (`/media/{32 hex digits}`).
pub fn media_id(path: &str) -> Option<&str> {
    let id = path.strip_prefix(MEDIA_PREFIX)?;
    (id.len() == 32 && id.bytes().all(|b| b.is_ascii_hexdigit())).then_some(id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_paths_only() {
        assert_eq!(
            Route::classify(&Method::POST, "/compat/v1/responses"),
            Some(Route::Responses)
        );
        assert_eq!(Route::classify(&Method::POST, "/responses"), None);
        assert_eq!(
            Route::classify(&Method::PUT, "/partner/v1/customers/by-external-id/x"),
            Some(Route::Admin)
        );
        assert_eq!(
            Route::classify(&Method::GET, "/partner/v1"),
            Some(Route::Admin)
        );
        assert_eq!(
            Route::classify(&Method::GET, "/api/v1/organization/billing/balance"),
            Some(Route::Admin)
        );
        assert_eq!(
            Route::classify(&Method::GET, "/invitations/abc"),
            Some(Route::Admin),
        );
        assert_eq!(
            Route::classify(&Method::POST, "/billing/webhooks/stripe"),
            Some(Route::Admin)
        );
        for console in [
            "/console",
            "/console/",
            "/console/orgs/7",
            "/console/assets/console.css",
        ] {
            assert_eq!(
                Route::classify(&Method::GET, console),
                Some(Route::Admin),
                "{console}"
            );
        }
        for reads in [
            "/compat/v1/key",
            "/compat/v1/key/",
            "/compat/v1/generations/01a225d33e0b75f287d89dc673838d57",
            "/compat/v1/generations/anything",
        ] {
            assert_eq!(
                Route::classify(&Method::GET, reads),
                Some(Route::KeyReads),
                "{reads}"
            );
        }
        for (method, batch) in [
            (Method::POST, "/compat/v1/files"),
            (Method::GET, "/compat/v1/files/file-1/content"),
            (Method::POST, "/compat/v1/batches"),
            (Method::GET, "/compat/v1/batches/batch_1"),
            (Method::POST, "/compat/v1/batches/batch_1/cancel"),
            (Method::POST, "/v1/messages/batches"),
            (Method::GET, "/v1/messages/batches/msgbatch_1/results"),
        ] {
            assert_eq!(
                Route::classify(&method, batch),
                Some(Route::KeyReads),
                "{batch}"
            );
        }
        assert_eq!(Route::classify(&Method::POST, "/compat/v1/filesx"), None);
        assert_eq!(Route::KeyReads.surface(), Surface::Client(Family::OpenAi));
        assert!(Route::KeyReads.to_admin_api() && Route::Admin.to_admin_api());
        assert_eq!(Route::classify(&Method::POST, "/compat/v1/key"), None);
        for not_reads in [
            "/compat/v1/generations",
            "/compat/v1/generations/",
            "/compat/v1/generations/a/b",
        ] {
            assert_eq!(
                Route::classify(&Method::GET, not_reads),
                None,
                "{not_reads}"
            );
        }
        assert_eq!(
            Route::classify(&Method::POST, "/compat/v1/generations/x"),
            None
        );
        assert_eq!(Route::classify(&Method::GET, "/api/v10/x"), None);
        assert_eq!(Route::classify(&Method::POST, "/v1/responses"), None);
        assert_eq!(
            Route::classify(&Method::POST, "/v1/messages"),
            Some(Route::Messages)
        );
        assert_eq!(
            Route::classify(&Method::POST, "/v1/messages/count_tokens"),
            Some(Route::MessagesCountTokens)
        );
        assert_eq!(
            Route::classify(&Method::GET, "/v1/models"),
            Some(Route::MessagesModels)
        );
        for (path, route) in [
            ("/v1beta/models/g:generateContent", Route::NativeGenerate),
            ("/v1/models/g:generateContent", Route::NativeGenerate),
            (
                "/v1beta/models/google/g:streamGenerateContent",
                Route::NativeStream,
            ),
            ("/v1beta/models/g:countTokens", Route::NativeCountTokens),
        ] {
            assert_eq!(Route::classify(&Method::POST, path), Some(route), "{path}");
        }
        assert_eq!(
            Route::native_model("/v1beta/models/google/g:streamGenerateContent"),
            Some("google/g")
        );
        assert_eq!(Route::native_model("/v1beta/models/g"), Some("g"));
        assert_eq!(
            Route::classify(&Method::POST, "/v1beta/models/g:embedContent"),
            Some(Route::NativeEmbed)
        );
        assert_eq!(
            Route::classify(&Method::POST, "/v1/models/g:batchEmbedContents"),
            Some(Route::NativeBatchEmbed)
        );
        assert_eq!(
            Route::classify(&Method::POST, "/compat/v1/embeddings"),
            Some(Route::Embeddings)
        );
        assert_eq!(
            Route::classify(&Method::POST, "/v1beta/models/g:predict"),
            None
        );
        assert_eq!(
            Route::classify(&Method::POST, "/v1beta/models/:generateContent"),
            None
        );
        assert_eq!(
            Route::classify(&Method::GET, "/v1beta/models/g"),
            Some(Route::NativeModel)
        );
        assert_eq!(
            Route::classify(&Method::GET, "/v1beta/models"),
            Some(Route::NativeModels)
        );
        assert_eq!(
            Route::classify(&Method::GET, "/v1/models/claude-x"),
            Some(Route::MessagesModel)
        );
        assert_eq!(
            Route::classify(&Method::GET, "/compat/v1/chat/completions"),
            None
        );
        assert_eq!(
            Route::classify(&Method::GET, "/compat/v1/models/"),
            Some(Route::Models)
        );
        for (method, path, route) in [
            (Method::POST, "/compat/v1/videos", Some(Route::VideoCreate)),
            (
                Method::GET,
                "/compat/v1/videos/video_ab12",
                Some(Route::VideoStatus),
            ),
            (
                Method::GET,
                "/compat/v1/videos/video_ab12/content",
                Some(Route::VideoContent),
            ),
            (Method::GET, "/compat/v1/videos/video_ab12/other", None),
            (Method::GET, "/compat/v1/videos/a.b", None),
            (Method::GET, "/compat/v1/videos/", None),
            (Method::POST, "/compat/v1/videos/video_ab12", None),
            (Method::GET, "/videos/video_ab12", None),
        ] {
            assert_eq!(Route::classify(&method, path), route, "{method} {path}");
        }
        assert_eq!(
            Route::video_task_id("/compat/v1/videos/video_ab12/content"),
            Some("video_ab12")
        );
    }

    #[test]
    fn v1_model_routes_belong_to_google_clients_by_their_marks() {
        let request = |path: &str, header: Option<(&str, &str)>| {
            let mut h = pingora::http::RequestHeader::build("GET", path.as_bytes(), None).unwrap();
            if let Some((k, v)) = header {
                h.insert_header(k.to_string(), v).unwrap();
            }
            Route::of(&h).unwrap()
        };
        let anthropic = ("x-api-key", "k");
        assert_eq!(
            request("/v1/models", Some(anthropic)),
            Route::MessagesModels
        );
        assert_eq!(request("/v1/models", None), Route::MessagesModels);
        assert_eq!(
            request("/v1/models/m", Some(anthropic)),
            Route::MessagesModel
        );
        for google in [("x-goog-api-key", "k"), ("x-goog-api-client", "genai")] {
            assert_eq!(request("/v1/models", Some(google)), Route::NativeModels);
            assert_eq!(request("/v1/models/m", Some(google)), Route::NativeModel);
        }
        assert_eq!(request("/v1/models?key=k", None), Route::NativeModels);
        assert_eq!(
            request("/v1/models?pageSize=5&key=k", None),
            Route::NativeModels
        );
        assert_eq!(request("/v1/models?monkey=1", None), Route::MessagesModels);
    }
}
