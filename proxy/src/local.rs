//! Routes the gateway answers itself, without a supplier: the model lists of each surface.
//!
//! Each list shows only the models the key's group exposes on that surface (SPEC: "seeing a model
//! in the list confirms key access only"), in the surface's own shape:
//! - `GET /compat/v1/models`: `{object: "list", data: [{id, object: "model"}]}` (every model);
//! - `GET /v1/models`: Anthropic's page `{data: [{id, type: "model", display_name, created_at}],
//!   has_more: false, first_id, last_id}` (text models, served on Messages whatever the provider);
//!   `GET /v1/models/{id}`: one of them, 404 otherwise;
//! - `GET /v1beta/models`: Gemini's `{models: [{name: "models/ID", …,
//!   supportedGenerationMethods}]}` (models with a native serving cell: gemini accounts);
//!   `GET /v1beta/models/{id}`: one of them, 404 otherwise. From a Google client (google-genai's
//!   default API version is `v1`), `GET /v1/models[/{id}]` answers these ([`Route::of`]).

use crate::classify::Route;
use crate::errors::{Family, GatewayError, Surface};
use crate::models::Router;
use bytes::Bytes;
use serde_json::{Value, json};
use settings::Model;

/// The answer of a local route for a key of `group_id`; `path` names the model of
/// `GET /v1beta/models/{id}`.
pub fn answer(
    router: &Router,
    group_id: i64,
    route: Route,
    path: &str,
) -> Result<Bytes, GatewayError> {
    let body = match route {
        Route::MessagesModels => {
            let data: Vec<Value> = router
                .listed(group_id, Surface::Client(Family::Anthropic))
                .iter()
                .map(|m| anthropic(m))
                .collect();
            let first = data.first().map(|m| m["id"].clone());
            let last = data.last().map(|m| m["id"].clone());
            json!({"data": data, "has_more": false, "first_id": first, "last_id": last})
        }
        Route::MessagesModel => {
            let id = path.strip_prefix("/v1/models/").unwrap_or_default();
            let id = id.strip_suffix('/').unwrap_or(id);
            router
                .listed(group_id, Surface::Client(Family::Anthropic))
                .iter()
                .find(|m| m.id == id)
                .map(|m| anthropic(m))
                .ok_or_else(|| GatewayError::UnknownModel(id.to_string()))?
        }
        Route::NativeModels => {
            let models: Vec<Value> = router
                .listed(group_id, Surface::Client(Family::Gemini))
                .iter()
                .map(|m| native(m))
                .collect();
            json!({ "models": models })
        }
        Route::NativeModel => {
            let requested = Route::native_model(path).unwrap_or_default();
            let id = requested.strip_prefix("models/").unwrap_or(requested);
            let model = router
                .resolve(id, group_id, Route::NativeGenerate)
                .map_err(|_| GatewayError::UnknownModel(id.to_string()))?;
            native(&model.model)
        }
        _ => {
            let data: Vec<Value> = router
                .listed(group_id, Surface::Client(Family::OpenAi))
                .iter()
                .map(|m| json!({"id": m.id, "object": "model"}))
                .collect();
            json!({"object": "list", "data": data})
        }
    };
    Ok(Bytes::from(body.to_string()))
}

/// One model in Anthropic's shape.
fn anthropic(m: &Model) -> Value {
    json!({
        "id": m.id,
        "type": "model",
        "display_name": m.id,
        "created_at": "1970-01-01T00:00:00Z",
    })
}

/// One model in Gemini's shape (an embedding model's methods are the embedding ones).
fn native(m: &Model) -> Value {
    let methods = match m.kind {
        settings::ModelKind::Embedding => json!(["embedContent", "batchEmbedContents"]),
        _ => json!(["generateContent", "streamGenerateContent", "countTokens"]),
    };
    json!({
        "name": format!("models/{}", m.id),
        "baseModelId": m.id,
        "version": "001",
        "displayName": m.id,
        "description": "",
        "supportedGenerationMethods": methods,
    })
}

/// The answer of a token count that no account of the model can count in the client's format
/// (`/v1/messages/count_tokens` for a model served by OpenAI- or Gemini-format accounts): an
/// estimate of ⌈body bytes / 4⌉ input tokens, the gateway's usual input estimate (docs/ARCHITECTURE.md).
pub fn count_estimate(route: Route, body_bytes: usize) -> Bytes {
    let tokens = (body_bytes as u64).div_ceil(4);
    let body = match route {
        Route::NativeCountTokens => json!({ "totalTokens": tokens }),
        _ => json!({ "input_tokens": tokens }),
    };
    Bytes::from(body.to_string())
}
