//! `[[models]]`: the models the gateway sells, their kinds, official prices, options and
//! downgrades.

use crate::error::{ConfigError, err};
use crate::values::{RawPrice, non_empty_id, price};
use money::NanoUsd;
use serde::Deserialize;
use std::collections::{HashMap, HashSet};

/// A `[[models]]` entry as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawModel {
    pub id: String,
    pub family: String,
    pub kind: String,
    pub author: Option<String>,
    pub input_per_mtok: Option<RawPrice>,
    pub output_per_mtok: Option<RawPrice>,
    pub cached_input_per_mtok: Option<RawPrice>,
    pub cache_write_per_mtok: Option<RawPrice>,
    pub cache_write_1h_per_mtok: Option<RawPrice>,
    pub per_image: Option<RawPrice>,
    pub per_second: Option<RawPrice>,
    pub per_minute_audio: Option<RawPrice>,
    pub downgrade_to: Option<String>,
    pub image_aspect_ratios: Option<Vec<String>>,
    pub image_sizes: Option<Vec<String>>,
    pub video_durations: Option<Vec<u64>>,
    pub video_resolutions: Option<Vec<String>>,
    pub per_second_by_resolution: Option<std::collections::BTreeMap<String, RawPrice>>,
    pub batch_discount: Option<RawPrice>,
    pub supplier_input_per_mtok: Option<RawPrice>,
    pub supplier_output_per_mtok: Option<RawPrice>,
    pub supplier_cache_read_per_mtok: Option<RawPrice>,
    pub supplier_cache_write_per_mtok: Option<RawPrice>,
    pub supplier_cache_write_1h_per_mtok: Option<RawPrice>,
    pub supplier_per_image: Option<RawPrice>,
    pub supplier_per_second: Option<RawPrice>,
    pub supplier_batch_discount: Option<RawPrice>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModelKind {
    Text,
    Image,
    Audio,
    Video,
    /// Embeddings (`POST {compat_base}/embeddings`, native `:embedContent` and
    /// `:batchEmbedContents`): priced per input token only.
    Embedding,
}

/// Official prices in nano-USD. Which fields are present depends on the kind; the ones a kind
/// needs are required (an unknown price is an error, never a free request).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ModelPrices {
    pub input_per_mtok: Option<NanoUsd>,
    pub output_per_mtok: Option<NanoUsd>,
    pub cached_input_per_mtok: Option<NanoUsd>,
    /// Input tokens written to a supplier's prompt cache (Anthropic's cache creation), per
    /// million; `None`: the input price.
    pub cache_write_per_mtok: Option<NanoUsd>,
    /// Input tokens written to the cache for an hour (Anthropic's 1-hour lifetime, billed 2×
    /// input where the 5-minute writes are 1.25×), per million; default `cache_write_per_mtok`.
    pub cache_write_1h_per_mtok: Option<NanoUsd>,
    pub per_image: Option<NanoUsd>,
    pub per_second: Option<NanoUsd>,
    pub per_minute_audio: Option<NanoUsd>,
}

#[derive(Debug, Clone)]
pub struct Model {
    pub id: String,
    pub family: String,
    pub kind: ModelKind,
    /// Accepted prefix in `author/model` ids (`openai` in `openai/gpt-4o-mini`).
    pub author: Option<String>,
    pub prices: ModelPrices,
    pub downgrade_to: Option<String>,
    /// Image models served natively (`gemini` accounts): the `imageConfig.aspectRatio` values the
    /// native surface accepts (default `["1:1"]`).
    pub image_aspect_ratios: Vec<String>,
    /// Image models served natively: the `imageConfig.imageSize` values accepted (default
    /// `["1K"]`).
    pub image_sizes: Vec<String>,
    /// Video models: durations, resolutions and their prices (`None` for other kinds).
    pub video: Option<VideoOptions>,
    /// The fraction of the price charged for batch work (`[[models]] batch_discount`, DESIGN
    /// §6e): above 0, at most 1; default 0.5.
    pub batch_discount: money::RateMultiplier,
    /// What the supplier charges the operator for it (issue 47; `[[models]] supplier_*`): each
    /// price optional, and an absent one is unknown (never zero). `cached_input_per_mtok` is the
    /// cache read price.
    pub supplier_prices: ModelPrices,
    /// The fraction of the supplier prices its batch API charges (`[[models]]
    /// supplier_batch_discount`; default 0.5).
    pub supplier_batch_discount: money::RateMultiplier,
}

/// What a video model accepts and how each resolution is priced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VideoOptions {
    /// `durationSeconds` values accepted, ascending (default `[4, 8, 12]`); the largest is what a
    /// request without `durationSeconds` holds.
    pub durations: Vec<u64>,
    /// `resolution` values accepted (`720p`, `1080p`, `4k`; default all three).
    pub resolutions: Vec<String>,
    /// Per-second price of a resolution when it differs from `per_second`.
    pub per_second_by_resolution: std::collections::BTreeMap<String, NanoUsd>,
}

impl Model {
    /// The per-second price of a video at `resolution` (`per_second` unless the resolution has
    /// its own).
    pub fn per_second(&self, resolution: &str) -> Option<NanoUsd> {
        self.video
            .as_ref()
            .and_then(|v| v.per_second_by_resolution.get(resolution).copied())
            .or(self.prices.per_second)
    }
}

/// Video resolutions the gateway knows.
pub const VIDEO_RESOLUTIONS: [&str; 3] = ["720p", "1080p", "4k"];

/// Validates `[[models]]`: unique ids, the prices a kind needs, each kind's options, downgrades
/// inside a family and kind.
pub(crate) fn validate(raw: &[RawModel]) -> Result<Vec<Model>, ConfigError> {
    let mut models = Vec::with_capacity(raw.len());
    let mut seen = HashSet::new();
    for (i, m) in raw.iter().enumerate() {
        let p = |field: &str| format!("models[{i}].{field}");
        non_empty_id(&m.id, &p("id"))?;
        if !seen.insert(m.id.as_str()) {
            return Err(err(p("id"), format!("duplicate model id {:?}", m.id)));
        }
        non_empty_id(&m.family, &p("family"))?;
        let kind = match m.kind.as_str() {
            "text" => ModelKind::Text,
            "image" => ModelKind::Image,
            "audio" => ModelKind::Audio,
            "video" => ModelKind::Video,
            "embedding" => ModelKind::Embedding,
            other => {
                return Err(err(
                    p("kind"),
                    format!(
                        "{other:?} is not one of \"text\", \"image\", \"audio\", \"video\", \"embedding\""
                    ),
                ));
            }
        };
        let prices = prices_of(m, kind, &p)?;
        if let Some(author) = &m.author
            && (author.is_empty() || author.contains('/'))
        {
            return Err(err(p("author"), "must be a non-empty name without '/'"));
        }
        let (image_aspect_ratios, image_sizes) = image_options(m, kind, &p)?;
        let video = video_options(m, kind, &p)?;
        let batch_discount = fraction(&m.batch_discount, &p("batch_discount"))?;
        let supplier_batch_discount =
            fraction(&m.supplier_batch_discount, &p("supplier_batch_discount"))?;
        models.push(Model {
            id: m.id.clone(),
            family: m.family.clone(),
            kind,
            author: m.author.clone(),
            prices,
            downgrade_to: m.downgrade_to.clone(),
            image_aspect_ratios,
            image_sizes,
            video,
            batch_discount,
            supplier_prices: supplier_prices_of(m, &p)?,
            supplier_batch_discount,
        });
    }
    downgrades(&models)?;
    Ok(models)
}

/// A batch discount (`batch_discount`, `supplier_batch_discount`): above 0, at most 1; default
/// 0.5 (what OpenAI's and Anthropic's batch APIs charge: docs/notes-supplier-batches.md).
fn fraction(raw: &Option<RawPrice>, path: &str) -> Result<money::RateMultiplier, ConfigError> {
    let Some(raw) = raw else {
        return Ok(money::RateMultiplier::from_ppm(500_000).unwrap_or(money::RateMultiplier::ONE));
    };
    let d = crate::values::multiplier(raw, path)?;
    if d > money::RateMultiplier::ONE {
        return Err(err(
            path,
            "must be above 0 and at most 1 (the fraction of the price batch work is charged)",
        ));
    }
    Ok(d)
}

/// What the supplier charges for a model (`supplier_*`), each price checked as the model's own
/// are; none required (an absent one is unknown).
fn supplier_prices_of(
    m: &RawModel,
    p: &dyn Fn(&str) -> String,
) -> Result<ModelPrices, ConfigError> {
    let opt =
        |v: &Option<RawPrice>, field: &str| v.as_ref().map(|v| price(v, &p(field))).transpose();
    Ok(ModelPrices {
        input_per_mtok: opt(&m.supplier_input_per_mtok, "supplier_input_per_mtok")?,
        output_per_mtok: opt(&m.supplier_output_per_mtok, "supplier_output_per_mtok")?,
        cached_input_per_mtok: opt(
            &m.supplier_cache_read_per_mtok,
            "supplier_cache_read_per_mtok",
        )?,
        cache_write_per_mtok: opt(
            &m.supplier_cache_write_per_mtok,
            "supplier_cache_write_per_mtok",
        )?,
        cache_write_1h_per_mtok: opt(
            &m.supplier_cache_write_1h_per_mtok,
            "supplier_cache_write_1h_per_mtok",
        )?,
        per_image: opt(&m.supplier_per_image, "supplier_per_image")?,
        per_second: opt(&m.supplier_per_second, "supplier_per_second")?,
        per_minute_audio: None,
    })
}

/// A model's prices, each checked; the ones its kind requires must be there (an unknown price is
/// never free).
fn prices_of(
    m: &RawModel,
    kind: ModelKind,
    p: &dyn Fn(&str) -> String,
) -> Result<ModelPrices, ConfigError> {
    let opt =
        |v: &Option<RawPrice>, field: &str| v.as_ref().map(|v| price(v, &p(field))).transpose();
    let prices = ModelPrices {
        input_per_mtok: opt(&m.input_per_mtok, "input_per_mtok")?,
        output_per_mtok: opt(&m.output_per_mtok, "output_per_mtok")?,
        cached_input_per_mtok: opt(&m.cached_input_per_mtok, "cached_input_per_mtok")?,
        cache_write_per_mtok: opt(&m.cache_write_per_mtok, "cache_write_per_mtok")?,
        cache_write_1h_per_mtok: opt(&m.cache_write_1h_per_mtok, "cache_write_1h_per_mtok")?,
        per_image: opt(&m.per_image, "per_image")?,
        per_second: opt(&m.per_second, "per_second")?,
        per_minute_audio: opt(&m.per_minute_audio, "per_minute_audio")?,
    };
    let required: &[(&str, &Option<NanoUsd>)] = match kind {
        ModelKind::Text => &[
            ("input_per_mtok", &prices.input_per_mtok),
            ("output_per_mtok", &prices.output_per_mtok),
        ],
        ModelKind::Image => &[("per_image", &prices.per_image)],
        ModelKind::Audio => &[("per_minute_audio", &prices.per_minute_audio)],
        ModelKind::Video => &[("per_second", &prices.per_second)],
        ModelKind::Embedding => &[("input_per_mtok", &prices.input_per_mtok)],
    };
    // An embedding makes no tokens: an output price would be a price nobody pays.
    if kind == ModelKind::Embedding && prices.output_per_mtok.is_some() {
        return Err(err(
            p("output_per_mtok"),
            "an embedding model is priced on its input only (input_per_mtok)",
        ));
    }
    for (field, value) in required {
        if value.is_none() {
            return Err(err(
                p(field),
                format!(
                    "required for a {} model (an unknown price is never free)",
                    m.kind
                ),
            ));
        }
    }
    Ok(prices)
}

/// Every `downgrade_to` names another configured model of the same family and kind.
fn downgrades(models: &[Model]) -> Result<(), ConfigError> {
    let by_id: HashMap<&str, &Model> = models.iter().map(|m| (m.id.as_str(), m)).collect();
    for (i, m) in models.iter().enumerate() {
        if let Some(target) = &m.downgrade_to {
            let path = format!("models[{i}].downgrade_to");
            let Some(t) = by_id.get(target.as_str()) else {
                return Err(err(path, format!("unknown model {target:?}")));
            };
            if t.id == m.id {
                return Err(err(path, "a model cannot downgrade to itself"));
            }
            if t.family != m.family || t.kind != m.kind {
                return Err(err(
                    path,
                    format!(
                        "{target:?} is family {:?}; a downgrade never crosses families or kinds",
                        t.family
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// The video options of a model: only video models take them; durations 1–60 seconds,
/// ascending without duplicates; resolutions among [`VIDEO_RESOLUTIONS`]; a per-resolution price
/// only for an accepted resolution.
fn video_options(
    m: &RawModel,
    kind: ModelKind,
    p: &dyn Fn(&str) -> String,
) -> Result<Option<VideoOptions>, ConfigError> {
    if kind != ModelKind::Video {
        if m.video_durations.is_some() {
            return Err(err(
                p("video_durations"),
                "only video models take video options",
            ));
        }
        if m.video_resolutions.is_some() {
            return Err(err(
                p("video_resolutions"),
                "only video models take video options",
            ));
        }
        if m.per_second_by_resolution.is_some() {
            return Err(err(
                p("per_second_by_resolution"),
                "only video models take video options",
            ));
        }
        return Ok(None);
    }
    let durations = m.video_durations.clone().unwrap_or_else(|| vec![4, 8, 12]);
    if durations.is_empty() {
        return Err(err(p("video_durations"), "must list at least one value"));
    }
    for (j, d) in durations.iter().enumerate() {
        if !(1..=60).contains(d) || (j > 0 && durations[j - 1] >= *d) {
            return Err(err(
                format!("{}[{j}]", p("video_durations")),
                format!("{d} is not valid: seconds 1-60, ascending, no duplicates"),
            ));
        }
    }
    let resolutions = m
        .video_resolutions
        .clone()
        .unwrap_or_else(|| VIDEO_RESOLUTIONS.iter().map(|r| r.to_string()).collect());
    if resolutions.is_empty() {
        return Err(err(p("video_resolutions"), "must list at least one value"));
    }
    let mut seen = HashSet::new();
    for (j, r) in resolutions.iter().enumerate() {
        if !VIDEO_RESOLUTIONS.contains(&r.as_str()) || !seen.insert(r.as_str()) {
            return Err(err(
                format!("{}[{j}]", p("video_resolutions")),
                format!("{r:?} is not one of \"720p\", \"1080p\", \"4k\" (or is listed twice)"),
            ));
        }
    }
    let mut per_second_by_resolution = std::collections::BTreeMap::new();
    for (r, v) in m.per_second_by_resolution.iter().flatten() {
        let path = format!("{}.{r}", p("per_second_by_resolution"));
        if !resolutions.contains(r) {
            return Err(err(path, format!("{r:?} is not in video_resolutions")));
        }
        per_second_by_resolution.insert(r.clone(), price(v, &path)?);
    }
    Ok(Some(VideoOptions {
        durations,
        resolutions,
        per_second_by_resolution,
    }))
}

/// The native image options of a model: only image models take them; aspect ratios are `W:H`
/// (positive integers), sizes `1K`, `2K` or `4K`; each list non-empty and without duplicates.
fn image_options(
    m: &RawModel,
    kind: ModelKind,
    p: &dyn Fn(&str) -> String,
) -> Result<(Vec<String>, Vec<String>), ConfigError> {
    if kind != ModelKind::Image {
        for (field, value) in [
            ("image_aspect_ratios", &m.image_aspect_ratios),
            ("image_sizes", &m.image_sizes),
        ] {
            if value.is_some() {
                return Err(err(p(field), "only image models take image options"));
            }
        }
        return Ok((Vec::new(), Vec::new()));
    }
    let list = |value: &Option<Vec<String>>,
                field: &str,
                default: &str,
                valid: &dyn Fn(&str) -> bool|
     -> Result<Vec<String>, ConfigError> {
        let Some(values) = value else {
            return Ok(vec![default.to_string()]);
        };
        if values.is_empty() {
            return Err(err(p(field), "must list at least one value"));
        }
        let mut seen = HashSet::new();
        for (j, v) in values.iter().enumerate() {
            if !valid(v) {
                return Err(err(
                    format!("{}[{j}]", p(field)),
                    format!("{v:?} is not valid"),
                ));
            }
            if !seen.insert(v.as_str()) {
                return Err(err(
                    format!("{}[{j}]", p(field)),
                    format!("duplicate {v:?}"),
                ));
            }
        }
        Ok(values.clone())
    };
    let ratio = |v: &str| {
        v.split_once(':').is_some_and(|(w, h)| {
            [w, h].iter().all(|n| {
                !n.is_empty()
                    && n.len() <= 3
                    && n.bytes().all(|b| b.is_ascii_digit())
                    && !n.starts_with('0')
            })
        })
    };
    let size = |v: &str| matches!(v, "1K" | "2K" | "4K");
    Ok((
        list(&m.image_aspect_ratios, "image_aspect_ratios", "1:1", &ratio)?,
        list(&m.image_sizes, "image_sizes", "1K", &size)?,
    ))
}

/// Checks a list of model ids at `path`: non-empty, every id configured.
pub(crate) fn known_models(
    list: &[String],
    path: &str,
    model_ids: &HashSet<&str>,
) -> Result<(), ConfigError> {
    if list.is_empty() {
        return Err(err(path, "must list at least one model"));
    }
    for (j, id) in list.iter().enumerate() {
        if !model_ids.contains(id.as_str()) {
            return Err(err(
                format!("{path}[{j}]"),
                format!("unknown model {id:?} (not in [[models]])"),
            ));
        }
    }
    Ok(())
}
