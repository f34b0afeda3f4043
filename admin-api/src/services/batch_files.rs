//! Batch files (issue 46): an uploaded JSONL of requests (`purpose=batch`), checked line by line
//! before it is kept, and a batch's output and error files, written from its lines when read.
//!
//! A line is `{"custom_id": …, "method": "POST", "url": …, "body": {…}}` (OpenAI's batch input
//! format): `custom_id` a non-empty string of at most 512 characters, unique in the file; `url`
//! one of [`ENDPOINTS`], the same on every line (a batch runs one endpoint); `body` an object
//! naming a configured `model` of the endpoint's kind, without `stream: true` (a batch answer is
//! whole). Everything else about a body is the gateway's to judge when the line runs: a line it
//! refuses fails alone, in the error file, as at OpenAI.

use crate::state::AppState;
use chrono::{DateTime, Duration, Utc};
use entities::batch_files;
use sea_orm::{ActiveModelTrait, ColumnTrait, DbErr, EntityTrait, QueryFilter, Set};
use serde_json::{Value, json};

/// The endpoints a batch may run, as lines and batches name them.
pub const ENDPOINTS: [&str; 3] = ["/v1/chat/completions", "/v1/responses", "/v1/embeddings"];

/// A refusal of a file or a batch, in the gateway's words.
#[derive(Debug)]
pub enum Refused {
    /// 400: what is wrong, the parameter it concerns, and a code.
    Invalid {
        message: String,
        param: Option<&'static str>,
        code: &'static str,
    },
    /// 413: the file is larger than `[batches] max_file_bytes`.
    TooLarge(String),
    /// 404: no such file or batch of the organization (`file_not_found`, `batch_not_found`).
    NotFound(&'static str),
    /// 409: the batch cannot do that in its state.
    Conflict(String),
    /// The database failed.
    Database(DbErr),
}

impl From<DbErr> for Refused {
    fn from(e: DbErr) -> Self {
        Refused::Database(e)
    }
}

pub(crate) fn invalid(message: impl Into<String>, param: Option<&'static str>) -> Refused {
    Refused::Invalid {
        message: message.into(),
        param,
        code: "invalid_request",
    }
}

/// One checked line of an input file.
#[derive(Debug, Clone)]
pub struct InputLine {
    pub custom_id: String,
    pub url: String,
    /// The body, JSON.
    pub body: String,
}

/// Checks every line of `content` (see the module), each `url` one of `endpoints`; the lines, or the first fault with its line
/// number (from 1, as an editor counts).
pub fn check(
    state: &AppState,
    content: &[u8],
    endpoints: &[&str],
) -> Result<Vec<InputLine>, Refused> {
    let max = state.settings.batches.max_lines as usize;
    let text = std::str::from_utf8(content)
        .map_err(|_| invalid("The file is not UTF-8 text.", Some("file")))?;
    let text = text.strip_suffix('\n').unwrap_or(text);
    if text.trim().is_empty() {
        return Err(invalid("The file has no lines.", Some("file")));
    }
    let mut lines = Vec::new();
    let mut ids = std::collections::HashSet::new();
    let mut endpoint: Option<String> = None;
    for (i, raw) in text.split('\n').enumerate() {
        let n = i + 1;
        if lines.len() == max {
            return Err(invalid(
                format!("The file has more than {max} lines (batches.max_lines)."),
                Some("file"),
            ));
        }
        let line = one_line(state, raw.strip_suffix('\r').unwrap_or(raw), endpoints)
            .map_err(|why| invalid(format!("Line {n}: {why}"), Some("file")))?;
        if !ids.insert(line.custom_id.clone()) {
            return Err(invalid(
                format!(
                    "Line {n}: custom_id {:?} is used by an earlier line; each must be unique.",
                    line.custom_id
                ),
                Some("file"),
            ));
        }
        match &endpoint {
            Some(e) if *e != line.url => {
                return Err(invalid(
                    format!(
                        "Line {n}: url {:?} differs from the first line's {e:?}; a batch runs one endpoint.",
                        line.url
                    ),
                    Some("file"),
                ));
            }
            _ => endpoint = Some(line.url.clone()),
        }
        lines.push(line);
    }
    Ok(lines)
}

/// One line, checked (the reason when it is refused).
fn one_line(state: &AppState, raw: &str, endpoints: &[&str]) -> Result<InputLine, String> {
    let v: Value = serde_json::from_str(raw).map_err(|e| format!("not a JSON object ({e})."))?;
    let obj = v.as_object().ok_or("not a JSON object.")?;
    for key in obj.keys() {
        if !matches!(key.as_str(), "custom_id" | "method" | "url" | "body") {
            return Err(format!(
                "unknown field {key:?} (custom_id, method, url, body)."
            ));
        }
    }
    let custom_id = obj
        .get("custom_id")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty() && s.chars().count() <= 512)
        .ok_or("custom_id must be a non-empty string of at most 512 characters.")?;
    if obj.get("method").and_then(Value::as_str) != Some("POST") {
        return Err("method must be \"POST\".".into());
    }
    let url = obj
        .get("url")
        .and_then(Value::as_str)
        .filter(|u| endpoints.contains(u))
        .ok_or_else(|| format!("url must be one of {}.", endpoints.join(", ")))?;
    let body = obj
        .get("body")
        .and_then(Value::as_object)
        .ok_or("body must be a JSON object.")?;
    let model = body
        .get("model")
        .and_then(Value::as_str)
        .ok_or("body.model must name a model.")?;
    let kind = state
        .settings
        .models
        .iter()
        .find(|m| {
            m.id == model
                || m.author
                    .as_ref()
                    .is_some_and(|a| model == format!("{a}/{}", m.id))
        })
        .map(|m| m.kind)
        .ok_or_else(|| format!("body.model {model:?} is not a model this gateway serves."))?;
    let wanted = match url {
        "/v1/embeddings" => settings::ModelKind::Embedding,
        _ => settings::ModelKind::Text,
    };
    if kind != wanted {
        return Err(format!("body.model {model:?} cannot serve {url}."));
    }
    if body.get("stream").and_then(Value::as_bool) == Some(true) {
        return Err("body.stream must not be true: a batch line's answer is whole.".into());
    }
    Ok(InputLine {
        custom_id: custom_id.to_string(),
        url: url.to_string(),
        body: Value::Object(body.clone()).to_string(),
    })
}

/// A new public id with `prefix` (`file-`, `batch_`).
pub(crate) fn public_id(prefix: &str) -> String {
    format!("{prefix}{}", uuid::Uuid::now_v7().simple())
}

/// Keeps an input file of `org` (checked by [`check`]).
pub async fn store(
    state: &AppState,
    org: i64,
    filename: &str,
    content: Vec<u8>,
    lines: usize,
) -> Result<batch_files::Model, Refused> {
    let now = state.clock.now();
    let file = batch_files::ActiveModel {
        public_id: Set(public_id("file-")),
        organization_id: Set(org),
        purpose: Set("batch".into()),
        filename: Set(filename.chars().take(255).collect()),
        bytes: Set(i64::try_from(content.len()).unwrap_or(i64::MAX)),
        lines: Set(i32::try_from(lines).unwrap_or(i32::MAX)),
        content: Set(Some(content)),
        batch_id: Set(None),
        created_at: Set(now),
        expires_at: Set(now + retention(state)),
        ..Default::default()
    };
    Ok(file.insert(&state.db).await?)
}

/// How long files and ended batches are kept (`[batches] retention_days`).
pub(crate) fn retention(state: &AppState) -> Duration {
    Duration::days(i64::from(state.settings.batches.retention_days))
}

/// The file `public_id` of `org`, unexpired.
pub async fn find(
    state: &AppState,
    org: i64,
    public_id: &str,
) -> Result<batch_files::Model, Refused> {
    batch_files::Entity::find()
        .filter(batch_files::Column::PublicId.eq(public_id))
        .filter(batch_files::Column::OrganizationId.eq(org))
        .filter(batch_files::Column::ExpiresAt.gt(state.clock.now()))
        .one(&state.db)
        .await?
        .ok_or(Refused::NotFound("file_not_found"))
}

/// A file as OpenAI's API shows one.
pub fn view(f: &batch_files::Model) -> Value {
    json!({
        "id": f.public_id,
        "object": "file",
        "bytes": f.bytes,
        "created_at": f.created_at.timestamp(),
        "expires_at": f.expires_at.timestamp(),
        "filename": f.filename,
        "purpose": f.purpose,
        "status": "processed",
        "status_details": null,
    })
}

/// When an output or error file of a batch that ended at `ended` expires.
pub(crate) fn expiry_after(state: &AppState, ended: DateTime<Utc>) -> DateTime<Utc> {
    ended + retention(state)
}
