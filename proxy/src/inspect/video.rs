//! The create body of a video task: read and checked once, before anything is held or sent.
//!
//! Fields (SPEC "Video tasks"): `model`, `prompt`, `reference_images` (`[{url}]`), `image_urls`
//! (`[string]`), `durationSeconds`, `resolution` (`720p`, `1080p`, `4k`), `aspectRatio` (`16:9`,
//! `9:16`), `generate_audio`, `watermark`, `return_last_frame` (booleans). Anything else, a wrong
//! type or a value outside the model's lists is a 400 naming the field; nothing reaches a supplier.
//!
//! Reference image URLs are forwarded as given: the gateway never fetches what a client names (no
//! SSRF surface). They must be `http(s)` URLs with a host, or `data:image/…` URLs.
//!
//! What the served model's accounts accept ([`Job::check`]): `openai` accounts (the OpenAI video
//! API) take one reference image, by URL or data URL; `gemini` accounts (Veo) take up to three,
//! as inline bytes only, so a `data:image/…;base64,` URL is sent as its bytes and an `http(s)` URL
//! is refused with 400 naming the field (*decision*: the gateway does not fetch client-chosen
//! URLs); Veo on the Gemini API always adds audio and its watermark and returns no last frame, so
//! `generate_audio: false`, `watermark: false` and `return_last_frame: true` are refused on
//! `gemini` accounts rather than silently ignored.

use crate::errors::GatewayError;
use serde_json::{Map, Value, json};
use settings::{Model, Provider};

/// Longest prompt accepted, in characters.
const MAX_PROMPT_CHARS: usize = 32_000;
/// Longest reference URL accepted, in bytes (a data URL carries the image itself).
const MAX_URL_BYTES: usize = 8 * 1024 * 1024;
/// Reference images a create may name at all (each account kind takes fewer: [`Job::check`]).
const MAX_REFERENCES: usize = 16;
/// Reference images the OpenAI video API takes (`input_reference`).
const OPENAI_REFERENCES: usize = 1;
/// Reference images Veo takes (`instances[0].referenceImages`, "up to 3").
const VEO_REFERENCES: usize = 3;

/// A checked create request.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Job {
    pub model: String,
    pub prompt: String,
    /// `reference_images[].url` then `image_urls[]`, in order.
    pub references: Vec<Reference>,
    pub seconds: Option<u64>,
    pub resolution: Option<String>,
    pub aspect_ratio: Option<String>,
    /// `generate_audio`, `watermark`, `return_last_frame` as sent.
    pub flags: Vec<(&'static str, bool)>,
}

/// One reference image and the field it came from (for error messages).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Reference {
    pub url: String,
    pub param: String,
}

fn field(message: impl Into<String>, param: impl Into<String>) -> GatewayError {
    GatewayError::field(message, param)
}

/// Reads the create body (JSON object) without looking at the model yet.
pub(crate) fn parse(body: &[u8]) -> Result<Job, GatewayError> {
    let value: Value = serde_json::from_slice(body)
        .map_err(|e| GatewayError::invalid(format!("the body is not valid JSON: {e}"), None))?;
    let Value::Object(map) = value else {
        return Err(GatewayError::invalid(
            "the body must be a JSON object",
            None,
        ));
    };
    let string = |name: &str| -> Result<Option<String>, GatewayError> {
        match map.get(name) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(_) => Err(field(format!("'{name}' must be a string"), name)),
        }
    };
    let mut job = Job {
        model: string("model")?
            .filter(|m| !m.is_empty())
            .ok_or_else(|| field("'model' is required", "model"))?,
        prompt: string("prompt")?
            .filter(|p| !p.trim().is_empty())
            .ok_or_else(|| field("'prompt' is required", "prompt"))?,
        references: Vec::new(),
        seconds: None,
        resolution: None,
        aspect_ratio: None,
        flags: Vec::new(),
    };
    if job.prompt.chars().count() > MAX_PROMPT_CHARS {
        return Err(field(
            format!("'prompt' is longer than {MAX_PROMPT_CHARS} characters"),
            "prompt",
        ));
    }
    for (name, value) in &map {
        option(&mut job, name, value)?;
    }
    // `reference_images` first, then `image_urls`, whatever order the object had.
    if let Some(value) = map.get("reference_images").filter(|v| !v.is_null()) {
        reference_images(value, &mut job.references)?;
    }
    if let Some(value) = map.get("image_urls").filter(|v| !v.is_null()) {
        image_urls(value, &mut job.references)?;
    }
    if let Some(extra) = job.references.get(MAX_REFERENCES) {
        return Err(field(
            format!("at most {MAX_REFERENCES} reference images are accepted"),
            extra.param.clone(),
        ));
    }
    Ok(job)
}

/// Takes one field of a video task's body into `job` (the model, prompt and references are read
/// apart); an unknown field is refused by name.
fn option(job: &mut Job, name: &str, value: &Value) -> Result<(), GatewayError> {
    match name {
        "model" | "prompt" | "reference_images" | "image_urls" => {}
        "durationSeconds" => job.seconds = seconds(value)?,
        "resolution" => {
            job.resolution = match value {
                Value::Null => None,
                Value::String(r) => Some(resolution(r)?),
                _ => return Err(field("'resolution' must be a string", "resolution")),
            }
        }
        "aspectRatio" => {
            job.aspect_ratio = match value {
                Value::Null => None,
                Value::String(r) if matches!(r.as_str(), "16:9" | "9:16") => Some(r.clone()),
                _ => {
                    return Err(field(
                        "'aspectRatio' must be \"16:9\" or \"9:16\"",
                        "aspectRatio",
                    ));
                }
            }
        }
        "generate_audio" | "watermark" | "return_last_frame" => {
            let name = flag_name(name);
            match value {
                Value::Null => {}
                Value::Bool(b) => job.flags.push((name, *b)),
                _ => return Err(field(format!("'{name}' must be a boolean"), name)),
            }
        }
        other => {
            return Err(field(
                format!("unknown field '{other}' for a video task"),
                other.chars().take(64).collect::<String>(),
            ));
        }
    }
    Ok(())
}

fn flag_name(name: &str) -> &'static str {
    match name {
        "generate_audio" => "generate_audio",
        "watermark" => "watermark",
        _ => "return_last_frame",
    }
}

fn resolution(r: &str) -> Result<String, GatewayError> {
    let r = r.to_ascii_lowercase();
    if settings::VIDEO_RESOLUTIONS.contains(&r.as_str()) {
        Ok(r)
    } else {
        Err(field(
            "'resolution' must be \"720p\", \"1080p\" or \"4k\"",
            "resolution",
        ))
    }
}

fn seconds(value: &Value) -> Result<Option<u64>, GatewayError> {
    match value {
        Value::Null => Ok(None),
        Value::Number(n) => match n.as_u64() {
            Some(s) if s > 0 => Ok(Some(s)),
            _ => Err(field(
                "'durationSeconds' must be a positive whole number of seconds",
                "durationSeconds",
            )),
        },
        _ => Err(field(
            "'durationSeconds' must be a number",
            "durationSeconds",
        )),
    }
}

fn reference_images(value: &Value, out: &mut Vec<Reference>) -> Result<(), GatewayError> {
    let Value::Array(items) = value else {
        return Err(field(
            "'reference_images' must be an array of {url}",
            "reference_images",
        ));
    };
    for (i, item) in items.iter().enumerate() {
        let param = format!("reference_images[{i}]");
        let Value::Object(obj) = item else {
            return Err(field(format!("'{param}' must be an object {{url}}"), param));
        };
        if let Some(other) = obj.keys().find(|k| k.as_str() != "url") {
            let p = format!("{param}.{other}");
            return Err(field(format!("unknown field '{p}'"), p));
        }
        let p = format!("{param}.url");
        match obj.get("url") {
            Some(Value::String(url)) => out.push(Reference {
                url: checked_url(url, &p)?,
                param: p,
            }),
            _ => return Err(field(format!("'{p}' must be a URL string"), p)),
        }
    }
    Ok(())
}

fn image_urls(value: &Value, out: &mut Vec<Reference>) -> Result<(), GatewayError> {
    let Value::Array(items) = value else {
        return Err(field(
            "'image_urls' must be an array of URL strings",
            "image_urls",
        ));
    };
    for (i, item) in items.iter().enumerate() {
        let p = format!("image_urls[{i}]");
        match item {
            Value::String(url) => out.push(Reference {
                url: checked_url(url, &p)?,
                param: p,
            }),
            _ => return Err(field(format!("'{p}' must be a URL string"), p)),
        }
    }
    Ok(())
}

/// An `http(s)` URL with a host, or a `data:image/…` URL; never fetched here.
fn checked_url(url: &str, param: &str) -> Result<String, GatewayError> {
    let bad = || {
        field(
            format!("'{param}' must be an http(s) URL or a data:image/… URL"),
            param,
        )
    };
    if url.len() > MAX_URL_BYTES {
        return Err(field(
            format!("'{param}' is longer than {MAX_URL_BYTES} bytes"),
            param,
        ));
    }
    let lower: String = url
        .chars()
        .take(16)
        .collect::<String>()
        .to_ascii_lowercase();
    if lower.starts_with("data:image/") {
        return url
            .contains(";base64,")
            .then(|| url.to_string())
            .ok_or_else(bad);
    }
    let rest = lower
        .strip_prefix("https://")
        .or_else(|| lower.strip_prefix("http://"))
        .ok_or_else(bad)?;
    let host_starts = rest
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphanumeric() || c == '[');
    if !host_starts || url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(bad());
    }
    Ok(url.to_string())
}

impl Job {
    /// Checks the request against the served model's options (durations and resolutions) and
    /// what its accounts' `provider` takes (see the module).
    pub fn check(&self, model: &Model, provider: Provider) -> Result<(), GatewayError> {
        let Some(options) = &model.video else {
            return Err(GatewayError::Internal);
        };
        let most = match provider {
            Provider::Gemini => VEO_REFERENCES,
            Provider::OpenAi | Provider::Anthropic => OPENAI_REFERENCES,
        };
        if let Some(extra) = self.references.get(most) {
            return Err(field(
                format!(
                    "at most {most} reference image(s) are supported by model {:?}",
                    model.id
                ),
                extra.param.clone(),
            ));
        }
        if provider == Provider::Gemini {
            if let Some(r) = self.references.iter().find(|r| inline(&r.url).is_none()) {
                return Err(field(
                    format!(
                        "'{}': model {:?} takes reference images as inline data only; send a data:image/…;base64, URL",
                        r.param, model.id
                    ),
                    r.param.clone(),
                ));
            }
            for (name, value) in &self.flags {
                let refused = match *name {
                    "generate_audio" | "watermark" => !value,
                    _ => *value,
                };
                if refused {
                    return Err(field(
                        format!("'{name}: {value}' is not available on model {:?}", model.id),
                        *name,
                    ));
                }
            }
        }
        if let Some(s) = self.seconds
            && !options.durations.contains(&s)
        {
            return Err(field(
                format!(
                    "'durationSeconds' must be one of {:?} for model {:?}",
                    options.durations, model.id
                ),
                "durationSeconds",
            ));
        }
        match &self.resolution {
            Some(r) if !options.resolutions.contains(r) => Err(field(
                format!(
                    "'resolution' must be one of {:?} for model {:?}",
                    options.resolutions, model.id
                ),
                "resolution",
            )),
            _ => Ok(()),
        }
    }

    /// The resolution the task is made and priced at: the request's, else the model's first.
    pub fn resolution<'a>(&'a self, model: &'a Model) -> &'a str {
        self.resolution.as_deref().unwrap_or_else(|| {
            model
                .video
                .as_ref()
                .and_then(|v| v.resolutions.first())
                .map_or("720p", String::as_str)
        })
    }

    /// The seconds a hold covers: the request's, else the model's longest.
    pub fn held_seconds(&self, model: &Model) -> u64 {
        self.seconds.unwrap_or_else(|| {
            model
                .video
                .as_ref()
                .and_then(|v| v.durations.last().copied())
                .unwrap_or(0)
        })
    }

    /// The body for an OpenAI-format account (`POST {base}/videos`): the served model id,
    /// `seconds` as a string when asked, `size` from resolution and aspect ratio (default 16:9),
    /// the reference as `input_reference.image_url`; the three flags under their own names when
    /// the client set them.
    pub fn openai_body(&self, served: &str, resolution: &str) -> Vec<u8> {
        let mut body = Map::new();
        body.insert("model".into(), json!(served));
        body.insert("prompt".into(), json!(self.prompt));
        if let Some(s) = self.seconds {
            body.insert("seconds".into(), json!(s.to_string()));
        }
        let landscape = self.aspect_ratio.as_deref() != Some("9:16");
        body.insert("size".into(), json!(size(resolution, landscape)));
        if let Some(r) = self.references.first() {
            body.insert("input_reference".into(), json!({"image_url": r.url}));
        }
        for (name, value) in &self.flags {
            body.insert((*name).into(), json!(value));
        }
        Value::Object(body).to_string().into_bytes()
    }
}

impl Job {
    /// The body for a `gemini` account (Veo, `POST {base}/v1beta/models/{model}:predictLongRunning`):
    /// `instances[0]` with the prompt and the reference images as inline bytes (`asset`),
    /// `parameters` with `durationSeconds` (always sent: the seconds held, so the length made is
    /// the length charged), `aspectRatio`, `resolution` and `sampleCount: 1`.
    pub fn veo_body(&self, seconds: u64, resolution: &str) -> Vec<u8> {
        let mut instance = Map::new();
        instance.insert("prompt".into(), json!(self.prompt));
        let references: Vec<Value> = self
            .references
            .iter()
            .filter_map(|r| inline(&r.url))
            .map(|(mime, data)| {
                json!({"image": {"bytesBase64Encoded": data, "mimeType": mime}, "referenceType": "asset"})
            })
            .collect();
        if !references.is_empty() {
            instance.insert("referenceImages".into(), Value::Array(references));
        }
        let mut parameters = Map::new();
        parameters.insert("durationSeconds".into(), json!(seconds));
        if let Some(ratio) = &self.aspect_ratio {
            parameters.insert("aspectRatio".into(), json!(ratio));
        }
        parameters.insert("resolution".into(), json!(resolution));
        parameters.insert("sampleCount".into(), json!(1));
        json!({"instances": [Value::Object(instance)], "parameters": Value::Object(parameters)})
            .to_string()
            .into_bytes()
    }
}

/// The media type and base64 data of a `data:image/…;base64,` URL (`None` for any other URL).
fn inline(url: &str) -> Option<(&str, &str)> {
    let rest = url.strip_prefix("data:").or_else(|| {
        url.get(..5)
            .filter(|p| p.eq_ignore_ascii_case("data:"))
            .map(|_| &url[5..])
    })?;
    let (mime, data) = rest.split_once(";base64,")?;
    (mime.to_ascii_lowercase().starts_with("image/") && !data.is_empty()).then_some((mime, data))
}

/// `WxH` of a resolution and orientation.
fn size(resolution: &str, landscape: bool) -> String {
    let (long, short) = match resolution {
        "4k" => (3840, 2160),
        "1080p" => (1920, 1080),
        _ => (1280, 720),
    };
    if landscape {
        format!("{long}x{short}")
    } else {
        format!("{short}x{long}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err_param(body: &str) -> String {
        match parse(body.as_bytes()) {
            Err(GatewayError::InvalidField { param, .. }) => param,
            Err(GatewayError::InvalidBody { param, .. }) => param.unwrap_or("-").to_string(),
            other => panic!("{body}: {other:?}"),
        }
    }

    #[test]
    fn reads_every_field() {
        let job = parse(
            br#"{"model":"v","prompt":"a cat","reference_images":[{"url":"https://x.test/a.png"}],
                "durationSeconds":8,"resolution":"4K","aspectRatio":"9:16","generate_audio":true,
                "watermark":false,"return_last_frame":true}"#,
        )
        .unwrap();
        assert_eq!(job.seconds, Some(8));
        assert_eq!(job.resolution.as_deref(), Some("4k"));
        assert_eq!(job.references[0].url, "https://x.test/a.png");
        let body: Value = serde_json::from_slice(&job.openai_body("sora-2", "4k")).unwrap();
        assert_eq!(
            body,
            json!({"model":"sora-2","prompt":"a cat","seconds":"8","size":"2160x3840",
                   "input_reference":{"image_url":"https://x.test/a.png"},
                   "generate_audio":true,"watermark":false,"return_last_frame":true})
        );
    }

    fn model(durations: Vec<u64>) -> Model {
        Model {
            id: "veo".into(),
            family: "veo".into(),
            kind: settings::ModelKind::Video,
            author: None,
            prices: settings::ModelPrices::default(),
            downgrade_to: None,
            image_aspect_ratios: Vec::new(),
            image_sizes: Vec::new(),
            video: Some(settings::VideoOptions {
                durations,
                resolutions: vec!["720p".into(), "1080p".into()],
                per_second_by_resolution: Default::default(),
            }),
            batch_discount: money::RateMultiplier::ONE,
            supplier_prices: settings::ModelPrices::default(),
            supplier_batch_discount: money::RateMultiplier::ONE,
        }
    }

    #[test]
    fn veo_bodies_and_what_veo_accounts_refuse() {
        let png = "data:image/png;base64,iVBORw0KGgo=";
        let job = parse(
            format!(
                r#"{{"model":"veo","prompt":"a fox","reference_images":[{{"url":"{png}"}}],"image_urls":["{png}"],
                    "aspectRatio":"9:16","generate_audio":true,"watermark":true}}"#
            )
            .as_bytes(),
        )
        .unwrap();
        let m = model(vec![4, 6, 8]);
        job.check(&m, Provider::Gemini).unwrap();
        let body: Value =
            serde_json::from_slice(&job.veo_body(job.held_seconds(&m), "720p")).unwrap();
        assert_eq!(
            body,
            json!({"instances": [{"prompt": "a fox", "referenceImages": [
                {"image": {"bytesBase64Encoded": "iVBORw0KGgo=", "mimeType": "image/png"}, "referenceType": "asset"},
                {"image": {"bytesBase64Encoded": "iVBORw0KGgo=", "mimeType": "image/png"}, "referenceType": "asset"}]}],
                "parameters": {"durationSeconds": 8, "aspectRatio": "9:16", "resolution": "720p", "sampleCount": 1}})
        );
        // OpenAI accounts take one reference; Veo three, inline only; Veo's fixed behaviours.
        let refused = |body: String, provider| match parse(body.as_bytes())
            .and_then(|j| j.check(&m, provider))
        {
            Err(GatewayError::InvalidField { param, .. }) => param,
            other => panic!("{body}: {other:?}"),
        };
        let two = format!(r#"{{"model":"veo","prompt":"p","image_urls":["{png}","{png}"]}}"#);
        assert_eq!(refused(two, Provider::OpenAi), "image_urls[1]");
        let four = format!(
            r#"{{"model":"veo","prompt":"p","image_urls":["{png}","{png}","{png}","{png}"]}}"#
        );
        assert_eq!(refused(four, Provider::Gemini), "image_urls[3]");
        let url =
            r#"{"model":"veo","prompt":"p","reference_images":[{"url":"https://x.test/a.png"}]}"#;
        assert_eq!(
            refused(url.into(), Provider::Gemini),
            "reference_images[0].url"
        );
        assert!(
            parse(url.as_bytes())
                .unwrap()
                .check(&m, Provider::OpenAi)
                .is_ok()
        );
        for (flag, value) in [
            ("generate_audio", false),
            ("watermark", false),
            ("return_last_frame", true),
        ] {
            let body = format!(r#"{{"model":"veo","prompt":"p","{flag}":{value}}}"#);
            assert_eq!(refused(body, Provider::Gemini), flag);
        }
    }

    #[test]
    fn refuses_with_the_field_named() {
        for (body, param) in [
            (r#"{"prompt":"p"}"#, "model"),
            (r#"{"model":"v"}"#, "prompt"),
            (r#"{"model":"v","prompt":"p","seconds":4}"#, "seconds"),
            (
                r#"{"model":"v","prompt":"p","durationSeconds":"8"}"#,
                "durationSeconds",
            ),
            (
                r#"{"model":"v","prompt":"p","durationSeconds":0}"#,
                "durationSeconds",
            ),
            (
                r#"{"model":"v","prompt":"p","durationSeconds":2.5}"#,
                "durationSeconds",
            ),
            (
                r#"{"model":"v","prompt":"p","resolution":"8k"}"#,
                "resolution",
            ),
            (
                r#"{"model":"v","prompt":"p","aspectRatio":"1:1"}"#,
                "aspectRatio",
            ),
            (
                r#"{"model":"v","prompt":"p","watermark":"no"}"#,
                "watermark",
            ),
            (
                r#"{"model":"v","prompt":"p","image_urls":["ftp://x/a.png"]}"#,
                "image_urls[0]",
            ),
            (
                r#"{"model":"v","prompt":"p","image_urls":["file:///etc/passwd"]}"#,
                "image_urls[0]",
            ),
            (
                r#"{"model":"v","prompt":"p","image_urls":"https://x/a.png"}"#,
                "image_urls",
            ),
            (
                r#"{"model":"v","prompt":"p","reference_images":[{"uri":"https://x/a"}]}"#,
                "reference_images[0].uri",
            ),
            ("[1]", "-"),
        ] {
            assert_eq!(err_param(body), param, "{body}");
        }
    }
}
