//! Phase 0, classification: which gateway route a request is for, from its method and path.
//!
//! Classification looks at the method and path only. It decides the error shape of everything
//! that follows, so it runs first, before authentication.

use crate::errors::Surface;
use http::Method;
use settings::ModelKind;

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
    /// `/partner/v1/*`, `/api/v1/*`, `/invitations/*`, `/billing/top-up/*`: forwarded to
    /// admin-api untouched (it authenticates and answers them).
    Admin,
}

/// Path prefixes served by admin-api behind the one public base URL.
const ADMIN_PREFIXES: [&str; 4] = [
    "/partner/v1",
    "/api/v1/",
    "/invitations/",
    "/billing/top-up/",
];

impl Route {
    /// The route of a request, or `None` when the gateway has no such route. Only the exact paths
    /// count: `/responses` without the compat segment is not a route.
    pub fn classify(method: &Method, path: &str) -> Option<Route> {
        if ADMIN_PREFIXES.iter().any(|p| path.starts_with(p)) {
            return Some(Route::Admin);
        }
        let path = path.strip_suffix('/').unwrap_or(path);
        match (method, path) {
            (&Method::GET, "/compat/v1/models") => Some(Route::Models),
            (&Method::POST, "/compat/v1/chat/completions") => Some(Route::ChatCompletions),
            (&Method::POST, "/compat/v1/responses") => Some(Route::Responses),
            (&Method::POST, "/compat/v1/audio/transcriptions") => Some(Route::AudioTranscriptions),
            _ => None,
        }
    }

    /// The route of a request header; an unknown route is the client's error (404).
    pub fn of(header: &pingora::http::RequestHeader) -> Result<Route, crate::errors::GatewayError> {
        let path = header.uri.path();
        Route::classify(&header.method, path).ok_or_else(|| {
            crate::errors::GatewayError::UnknownRoute {
                method: header.method.to_string(),
                path: path.chars().take(200).collect(),
            }
        })
    }

    /// Bounded label for metrics, logs and usage events.
    pub fn label(self) -> &'static str {
        match self {
            Route::Models => "models",
            Route::ChatCompletions => "chat_completions",
            Route::Responses => "responses",
            Route::AudioTranscriptions => "audio_transcriptions",
            Route::Admin => "admin",
        }
    }

    pub fn surface(self) -> Surface {
        match self {
            Route::Models
            | Route::ChatCompletions
            | Route::Responses
            | Route::AudioTranscriptions => Surface::OpenAi,
            Route::Admin => Surface::Admin,
        }
    }

    /// The kind of model a generation route serves (`None`: not a generation route).
    pub fn model_kind(self) -> Option<ModelKind> {
        match self {
            Route::ChatCompletions | Route::Responses => Some(ModelKind::Text),
            Route::AudioTranscriptions => Some(ModelKind::Audio),
            Route::Models | Route::Admin => None,
        }
    }

    /// The path appended to the account's `base_url` when forwarding.
    pub fn upstream_suffix(self) -> &'static str {
        match self {
            Route::Models => "/models",
            Route::ChatCompletions => "/chat/completions",
            Route::Responses => "/responses",
            Route::AudioTranscriptions => "/audio/transcriptions",
            Route::Admin => "",
        }
    }
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
            Some(Route::Admin)
        );
        assert_eq!(Route::classify(&Method::GET, "/api/v10/x"), None);
        assert_eq!(Route::classify(&Method::POST, "/v1/responses"), None);
        assert_eq!(
            Route::classify(&Method::GET, "/compat/v1/chat/completions"),
            None
        );
        assert_eq!(
            Route::classify(&Method::GET, "/compat/v1/models/"),
            Some(Route::Models)
        );
    }
}
