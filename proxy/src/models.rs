//! Routing: which configured model a call names, whether the key may use it, and which
//! accounts could serve it (the plan). The order in which the plan is tried is `select`'s job.
//!
//! A model's pool is the accounts that list it **and** have the capability its kind needs
//! (`audio_transcription` for audio models, `video` for video models, `image_generation` for image
//! models; text needs none). An account that lists an audio model without the capability never
//! receives its calls: with no capable account the call fails (503 `no_account_available`) rather
//! than going to another kind of account. A model is only served on the routes of its kind.
//!
//! Serving cells (DESIGN §6b): a text model is served on chat completions, responses and Messages
//! by all its accounts, whatever their provider (the gateway translates); the native surface
//! (`/v1beta`) serves a model only through its `gemini` accounts, so a model without one is
//! unknown there (404). Embedding models are the exception: both surfaces reach every account
//! (`openai` and `gemini`; the gateway translates, `wire::embeddings`). `google/<id>` names a gemini-served model when the key's group has the
//! `google_alias` feature; otherwise it is an unknown model, like any other wrong prefix.

use crate::classify::Route;
use crate::errors::{Family, GatewayError};
use crate::upstream::Upstream;
use settings::{Capability, GroupFeature, Model, ModelKind, Provider, Settings};
use std::collections::HashMap;
use std::sync::Arc;

/// The model table, built once from the configuration.
pub(crate) struct Router {
    models: HashMap<String, Arc<ModelRoute>>,
    /// The same models served on the native surface: only their `gemini` accounts (models
    /// without one are absent).
    native: HashMap<String, Arc<ModelRoute>>,
    groups: HashMap<i64, GroupModels>,
}

/// What a group exposes.
struct GroupModels {
    models: Vec<String>,
    google_alias: bool,
    codex: bool,
    video: bool,
}

/// A model and the accounts (indexes into the upstream list) that serve it.
pub(crate) struct ModelRoute {
    pub model: Model,
    pub accounts: Vec<usize>,
    /// Image models: the accounts that take edits (listing the model with `image_edit`).
    pub edit_accounts: Vec<usize>,
    /// Image models: the profile their accounts' provider decides (DESIGN §6b).
    pub profile: Option<ImageProfile>,
}

/// The two image profiles of SPEC.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ImageProfile {
    /// Served by `openai` accounts: generation only, OpenAI's size rules.
    OpenAi,
    /// Served by `gemini` accounts: `generateContent`, fixed sizes, edits with `image_edit`.
    Native,
}

impl ModelRoute {
    /// The accounts a call serves from: the edit accounts for an image edit, else the pool.
    pub fn pool(&self, edit: bool) -> &[usize] {
        if edit && self.model.kind == ModelKind::Image {
            &self.edit_accounts
        } else {
            &self.accounts
        }
    }
}

impl Router {
    pub fn new(settings: &Settings, upstreams: &[Upstream]) -> Router {
        let models = settings
            .models
            .iter()
            .map(|m| (m.id.clone(), Arc::new(model_route(m, upstreams))))
            .collect::<HashMap<_, _>>();
        let native = models
            .iter()
            .filter_map(|(id, route)| {
                native_route(route, upstreams).map(|route| (id.clone(), Arc::new(route)))
            })
            .collect();
        let groups = settings
            .groups
            .iter()
            .map(|g| {
                let exposed = GroupModels {
                    models: g.models.clone(),
                    google_alias: g.has(GroupFeature::GoogleAlias),
                    codex: g.has(GroupFeature::Codex),
                    video: g.has(GroupFeature::Video),
                };
                (g.id, exposed)
            })
            .collect();
        Router {
            models,
            native,
            groups,
        }
    }

    /// The model ids a key of `group_id` may use, in configuration order. An unknown group
    /// exposes nothing.
    pub fn group_models(&self, group_id: i64) -> &[String] {
        self.groups
            .get(&group_id)
            .map(|g| g.models.as_slice())
            .unwrap_or(&[])
    }

    /// Whether keys of `group_id` may use the video routes (`video` feature).
    pub fn allows_video(&self, group_id: i64) -> bool {
        self.groups.get(&group_id).is_some_and(|g| g.video)
    }

    /// Whether keys of `group_id` get Codex-style responses payloads adapted (`codex` feature).
    pub fn adapts_codex(&self, group_id: i64) -> bool {
        self.groups.get(&group_id).is_some_and(|g| g.codex)
    }

    /// The models a key of `group_id` may use on `surface`'s model list: every model on the
    /// OpenAI-style list, text models on the Messages list, models with a native serving cell on
    /// the native list; in configuration order.
    pub fn listed(&self, group_id: i64, surface: crate::errors::Surface) -> Vec<&Model> {
        use crate::errors::Surface;
        self.group_models(group_id)
            .iter()
            .filter_map(|id| match surface {
                Surface::Client(Family::OpenAi) | Surface::Admin => self.models.get(id),
                Surface::Client(Family::Anthropic) => self
                    .models
                    .get(id)
                    .filter(|r| r.model.kind == ModelKind::Text),
                Surface::Client(Family::Gemini) => self.native.get(id),
            })
            .map(|r| &r.model)
            .collect()
    }

    /// Resolves a requested id (`gpt-4o-mini` or `openai/gpt-4o-mini`) for a key's group.
    /// A model the key cannot use is answered exactly like a model that does not exist.
    /// A model of another kind than the route serves is refused with 400 (`param: model`).
    pub fn resolve(
        &self,
        requested: &str,
        group_id: i64,
        call_route: Route,
    ) -> Result<Arc<ModelRoute>, GatewayError> {
        let unknown = || GatewayError::UnknownModel(requested.to_string());
        let table = match call_route.surface() {
            crate::errors::Surface::Client(Family::Gemini) => &self.native,
            _ => &self.models,
        };
        let group = self.groups.get(&group_id).ok_or_else(unknown)?;
        let route = match table.get(requested) {
            Some(r) => r,
            None => {
                let (author, id) = requested.split_once('/').ok_or_else(unknown)?;
                let r = table.get(id).ok_or_else(unknown)?;
                let allowed = if author == "google" {
                    group.google_alias && self.native.contains_key(id)
                } else {
                    r.model.author.as_deref() == Some(author)
                };
                if !allowed {
                    return Err(unknown());
                }
                r
            }
        };
        if !group.models.iter().any(|m| m == &route.model.id) {
            return Err(unknown());
        }
        let model = route;
        if call_route.model_kind().is_some() && !call_route.serves(model.model.kind) {
            let kind = call_route.model_kind().unwrap_or(ModelKind::Text);
            return Err(GatewayError::InvalidBody {
                message: format!(
                    "model {:?} is {} model; this route serves {} models",
                    model.model.id,
                    article(model.model.kind),
                    kind_name(kind)
                ),
                param: Some("model"),
            });
        }
        if model.model.kind == ModelKind::Image {
            image_route(model, call_route)?;
        }
        if model.accounts.is_empty() && model.edit_accounts.is_empty() {
            return Err(GatewayError::NoAccount(model.model.id.clone()));
        }
        Ok(model.clone())
    }
}

/// The routes an image model takes: edits only on the native-style profile with edit accounts
/// (400 otherwise: the model does not edit, whatever its accounts' state); natively
/// `generateContent` only (streaming and token counting are unavailable: 400).
fn image_route(model: &ModelRoute, route: Route) -> Result<(), GatewayError> {
    let id = &model.model.id;
    let refuse = |message: String| GatewayError::field(message, "model");
    match route {
        Route::ImageEdits if model.profile != Some(ImageProfile::Native) => Err(refuse(format!(
            "model {id:?} generates images only: image edits are not available for it"
        ))),
        Route::ImageEdits if model.edit_accounts.is_empty() => {
            Err(refuse(format!("model {id:?} does not support image edits")))
        }
        Route::NativeStream => Err(refuse(format!(
            "streamGenerateContent is unavailable for image model {id:?}; use generateContent"
        ))),
        Route::NativeCountTokens => Err(refuse(format!(
            "countTokens is unavailable for image model {id:?}"
        ))),
        _ => Ok(()),
    }
}

/// The capability an account needs to serve a model of `kind`.
fn capability_for(kind: ModelKind) -> Option<Capability> {
    match kind {
        ModelKind::Text => None,
        ModelKind::Audio => Some(Capability::AudioTranscription),
        ModelKind::Image => Some(Capability::ImageGeneration),
        ModelKind::Video => Some(Capability::Video),
        // Any openai or gemini account listing it (settings refuses anthropic ones).
        ModelKind::Embedding => None,
    }
}

fn kind_name(kind: ModelKind) -> &'static str {
    match kind {
        ModelKind::Text => "text",
        ModelKind::Image => "image",
        ModelKind::Audio => "audio",
        ModelKind::Video => "video",
        ModelKind::Embedding => "embedding",
    }
}

fn article(kind: ModelKind) -> String {
    match kind {
        ModelKind::Audio | ModelKind::Image | ModelKind::Embedding => {
            format!("an {}", kind_name(kind))
        }
        ModelKind::Text | ModelKind::Video => format!("a {}", kind_name(kind)),
    }
}

/// The route of model `m`: the accounts that list it and can serve its kind, those that can also
/// edit images, and (an image model) the wire profile of its image routes.
fn model_route(m: &Model, upstreams: &[Upstream]) -> ModelRoute {
    let listing: Vec<usize> = upstreams
        .iter()
        .enumerate()
        .filter(|(_, u)| u.account.models.iter().any(|id| id == &m.id))
        .map(|(i, _)| i)
        .collect();
    let can = |i: usize, c: Capability| {
        upstreams
            .get(i)
            .is_some_and(|u| u.account.capabilities.contains(&c))
    };
    let needs = capability_for(m.kind);
    let accounts: Vec<usize> = listing
        .iter()
        .copied()
        .filter(|&i| needs.is_none_or(|c| can(i, c)))
        .collect();
    let edit_accounts: Vec<usize> = listing
        .iter()
        .copied()
        .filter(|&i| m.kind == ModelKind::Image && can(i, Capability::ImageEdit))
        .collect();
    let profile = (m.kind == ModelKind::Image).then(|| {
        let gemini = listing.iter().any(|&i| {
            upstreams
                .get(i)
                .is_some_and(|u| u.account.provider == Provider::Gemini)
        });
        if gemini {
            ImageProfile::Native
        } else {
            ImageProfile::OpenAi
        }
    });
    if accounts.len() < listing.len() && m.kind != ModelKind::Image {
        tracing::warn!(
            model = %m.id,
            capability = ?needs,
            skipped = listing.len() - accounts.len(),
            "accounts list this model without the capability its kind needs; they never receive its calls"
        );
    }
    ModelRoute {
        model: m.clone(),
        accounts,
        edit_accounts,
        profile,
    }
}

/// The native (Gemini) route of `route`: its Gemini accounts, when it has any or is listed as a
/// native image model; every account of an embedding model.
fn native_route(route: &ModelRoute, upstreams: &[Upstream]) -> Option<ModelRoute> {
    if route.model.kind == ModelKind::Embedding {
        // Embeddings translate both ways (`wire::embeddings`): every account serves the native
        // surface too.
        return Some(ModelRoute {
            model: route.model.clone(),
            accounts: route.accounts.clone(),
            edit_accounts: Vec::new(),
            profile: None,
        });
    }
    let is_gemini = |&i: &usize| {
        upstreams
            .get(i)
            .is_some_and(|u| u.account.provider == Provider::Gemini)
    };
    let gemini: Vec<usize> = route.accounts.iter().copied().filter(is_gemini).collect();
    let listed = route.profile == Some(ImageProfile::Native);
    (!gemini.is_empty() || listed).then(|| ModelRoute {
        model: route.model.clone(),
        accounts: gemini,
        edit_accounts: route
            .edit_accounts
            .iter()
            .copied()
            .filter(is_gemini)
            .collect(),
        profile: route.profile,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONFIG: &str = r#"
[server]
listen = "127.0.0.1:8080"
[admin]
embedded = true
[database]
url = "sqlite::memory:"
[security]
key_pepper = "0123456789abcdef"

[[models]]
id = "gpt-4o-mini"
family = "gpt-4o"
kind = "text"
input_per_mtok = 0.15
output_per_mtok = 0.6

[[models]]
id = "whisper-1"
family = "whisper"
kind = "audio"
per_minute_audio = 0.006

[[models]]
id = "whisper-2"
family = "whisper"
kind = "audio"
per_minute_audio = 0.006

[[accounts]]
id = "plain"
provider = "openai"
base_url = "http://127.0.0.1:9/v1"
api_key = "sk-a"
models = ["gpt-4o-mini", "whisper-1", "whisper-2"]

[[accounts]]
id = "speech"
provider = "openai"
base_url = "http://127.0.0.1:9/v1"
api_key = "sk-b"
models = ["gpt-4o-mini", "whisper-1"]
capabilities = ["audio_transcription"]

[[groups]]
id = 1
name = "All"
product_code = "all"
models = ["gpt-4o-mini", "whisper-1", "whisper-2"]
wholesale_rate_multiplier = 1
"#;

    fn router() -> Router {
        let settings = Settings::parse(CONFIG, &|_| None).unwrap();
        let accounts =
            crate::upstream::Accounts::new(&settings.accounts, std::time::Duration::from_secs(1));
        Router::new(&settings, accounts.all())
    }

    #[test]
    fn pools_are_filtered_by_capability() {
        let r = router();
        let text = r.resolve("gpt-4o-mini", 1, Route::ChatCompletions).unwrap();
        assert_eq!(text.accounts, [0, 1], "text needs no capability");
        let audio = r
            .resolve("whisper-1", 1, Route::AudioTranscriptions)
            .unwrap();
        assert_eq!(audio.accounts, [1], "only the account with the capability");
        // Listed only by an account without the capability: fails, never goes elsewhere.
        match r.resolve("whisper-2", 1, Route::AudioTranscriptions) {
            Err(GatewayError::NoAccount(id)) => assert_eq!(id, "whisper-2"),
            other => panic!("{:?}", other.map(|m| m.accounts.clone())),
        }
    }

    #[test]
    fn native_cells_and_the_google_alias() {
        let config = CONFIG.replace(
            "[[groups]]\nid = 1",
            "[[accounts]]\nid = \"gem\"\nprovider = \"gemini\"\nbase_url = \"http://127.0.0.1:9\"\napi_key = \"g\"\nmodels = [\"gpt-4o-mini\"]\n\n[[groups]]\nid = 2\nname = \"Alias\"\nproduct_code = \"alias\"\nmodels = [\"gpt-4o-mini\"]\nwholesale_rate_multiplier = 1\nfeatures = [\"google_alias\"]\n\n[[groups]]\nid = 1",
        );
        let settings = Settings::parse(&config, &|_| None).unwrap();
        let accounts =
            crate::upstream::Accounts::new(&settings.accounts, std::time::Duration::from_secs(1));
        let r = Router::new(&settings, accounts.all());
        let every = r.resolve("gpt-4o-mini", 1, Route::Messages).unwrap();
        assert_eq!(
            every.accounts,
            [0, 1, 2],
            "translated cells use every account"
        );
        let native = r.resolve("gpt-4o-mini", 1, Route::NativeGenerate).unwrap();
        assert_eq!(
            native.accounts,
            [2],
            "the native cell only its gemini account"
        );
        assert!(matches!(
            r.resolve("whisper-1", 1, Route::NativeGenerate),
            Err(GatewayError::UnknownModel(_))
        ));
        // google/ only with the group feature.
        assert!(
            r.resolve("google/gpt-4o-mini", 2, Route::NativeGenerate)
                .is_ok()
        );
        assert!(
            r.resolve("google/gpt-4o-mini", 2, Route::ChatCompletions)
                .is_ok()
        );
        assert!(matches!(
            r.resolve("google/gpt-4o-mini", 1, Route::NativeGenerate),
            Err(GatewayError::UnknownModel(_))
        ));
        let listed = |surface| -> Vec<String> {
            r.listed(1, surface).iter().map(|m| m.id.clone()).collect()
        };
        use crate::errors::Surface;
        assert_eq!(listed(Surface::Client(Family::Gemini)), ["gpt-4o-mini"]);
        assert_eq!(listed(Surface::Client(Family::Anthropic)), ["gpt-4o-mini"]);
        assert_eq!(listed(Surface::Client(Family::OpenAi)).len(), 3);
    }

    #[test]
    fn models_only_on_routes_of_their_kind() {
        let r = router();
        for (model, route) in [
            ("whisper-1", Route::ChatCompletions),
            ("whisper-1", Route::Responses),
            ("gpt-4o-mini", Route::AudioTranscriptions),
        ] {
            match r.resolve(model, 1, route) {
                Err(GatewayError::InvalidBody { param, .. }) => assert_eq!(param, Some("model")),
                other => panic!("{model} on {route:?}: {:?}", other.is_ok()),
            }
        }
    }
}
