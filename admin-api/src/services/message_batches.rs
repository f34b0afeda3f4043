//! Anthropic's Message Batches on the Messages surface (issue 46, scope 4): `POST
//! /v1/messages/batches` (`{requests: [{custom_id, params}]}`), `GET …/{id}`, `GET
//! …/{id}/results`, `POST …/{id}/cancel`, in the shapes of Anthropic's API reference and its
//! official SDK's types (`docs/WIRE-BATCHES.md`). A message batch is a batch like any other
//! (`services::batches`): its requests become the lines of an input file with `url`
//! `/v1/messages`, run by the same runner through the gateway's Messages route, at the same
//! batch price, settled once.

use super::batch_files::{self, InputLine, Refused, invalid};
use super::batches::{self, New};
use crate::state::AppState;
use entities::{batch_lines, batches as batch_rows, customer_api_keys};
use sea_orm::{ColumnTrait, EntityTrait, QueryFilter, QueryOrder, QuerySelect};
use serde_json::{Value, json};

/// The line endpoint of a message batch.
pub const ENDPOINT: &str = "/v1/messages";

/// Whether `id` is a custom id Anthropic accepts: 1 to 64 of `[a-zA-Z0-9_-]`.
fn custom_id_ok(id: &str) -> bool {
    (1..=64).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// The requests of a create's body as the lines of an input file (JSONL), checked.
fn lines_of(body: &[u8]) -> Result<(String, usize), Refused> {
    let v: Value = serde_json::from_slice(body)
        .map_err(|e| invalid(format!("The body is not JSON: {e}"), None))?;
    let obj = v
        .as_object()
        .ok_or_else(|| invalid("The body must be an object.", None))?;
    if let Some(k) = obj.keys().find(|k| k.as_str() != "requests") {
        return Err(invalid(
            format!("{k}: Extra inputs are not permitted"),
            None,
        ));
    }
    let requests = obj
        .get("requests")
        .and_then(Value::as_array)
        .filter(|r| !r.is_empty())
        .ok_or_else(|| invalid("requests: a non-empty list is required", Some("requests")))?;
    let mut out = String::new();
    for (i, r) in requests.iter().enumerate() {
        let r = r
            .as_object()
            .ok_or_else(|| invalid(format!("requests.{i}: must be an object"), Some("requests")))?;
        if let Some(k) = r
            .keys()
            .find(|k| !matches!(k.as_str(), "custom_id" | "params"))
        {
            return Err(invalid(
                format!("requests.{i}.{k}: Extra inputs are not permitted"),
                Some("requests"),
            ));
        }
        let custom_id = r
            .get("custom_id")
            .and_then(Value::as_str)
            .filter(|c| custom_id_ok(c))
            .ok_or_else(|| {
                invalid(
                    format!("requests.{i}.custom_id: 1 to 64 letters, digits, '_' or '-'"),
                    Some("requests"),
                )
            })?;
        let params = r.get("params").filter(|p| p.is_object()).ok_or_else(|| {
            invalid(
                format!("requests.{i}.params: an object is required"),
                Some("requests"),
            )
        })?;
        let line =
            json!({"custom_id": custom_id, "method": "POST", "url": ENDPOINT, "body": params});
        out.push_str(&line.to_string());
        out.push('\n');
    }
    Ok((out, requests.len()))
}

/// Creates a message batch of `key`'s organization from a create's `body`.
pub async fn create(
    state: &AppState,
    key: &customer_api_keys::Model,
    body: &[u8],
) -> Result<batch_rows::Model, Refused> {
    if !key.allow_anthropic {
        return Err(Refused::Invalid {
            message: "This API key may not use the Messages surface.".into(),
            param: None,
            code: "permission_denied",
        });
    }
    let (jsonl, n) = lines_of(body)?;
    // The file's checks, each fault named by its request (`Line n` is request n - 1).
    let lines: Vec<InputLine> =
        batch_files::check(state, jsonl.as_bytes(), &[ENDPOINT]).map_err(|e| match e {
            Refused::Invalid { message, code, .. } => Refused::Invalid {
                message: renumber(&message),
                param: Some("requests"),
                code,
            },
            other => other,
        })?;
    let file = batch_files::store(
        state,
        key.organization_id,
        "message_batch.jsonl",
        jsonl.into_bytes(),
        n,
    )
    .await?;
    let new = New {
        prefix: "msgbatch_",
        endpoint: ENDPOINT.to_string(),
        completion_window: "24h".to_string(),
        metadata: None,
    };
    batches::start(state, key, &file, new, &lines).await
}

/// `Line n: …` (a file's words) as `requests.{n-1}: …`.
fn renumber(message: &str) -> String {
    let Some(rest) = message.strip_prefix("Line ") else {
        return message.to_string();
    };
    match rest.split_once(':') {
        Some((n, tail)) => match n.parse::<usize>() {
            Ok(n) => format!("requests.{}:{tail}", n.saturating_sub(1)),
            Err(_) => message.to_string(),
        },
        None => message.to_string(),
    }
}

/// A time as Anthropic writes one (RFC 3339, UTC).
fn rfc3339(t: chrono::DateTime<chrono::Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
}

/// How many lines of `batch` are in each status.
async fn counts(
    state: &AppState,
    batch: i64,
) -> Result<std::collections::HashMap<String, i64>, Refused> {
    let rows: Vec<(String, i64)> = batch_lines::Entity::find()
        .select_only()
        .column(batch_lines::Column::Status)
        .column_as(batch_lines::Column::Line.count(), "n")
        .filter(batch_lines::Column::BatchId.eq(batch))
        .group_by(batch_lines::Column::Status)
        .into_tuple()
        .all(&state.db)
        .await?;
    Ok(rows.into_iter().collect())
}

/// A message batch as Anthropic's API shows one; `base` is the public base URL its results are
/// read from (`None`: the path alone).
pub async fn view(
    state: &AppState,
    b: &batch_rows::Model,
    base: Option<&str>,
) -> Result<Value, Refused> {
    let c = counts(state, b.id).await?;
    let n = |s: &str| c.get(s).copied().unwrap_or(0);
    let ended = batches::ENDED.contains(&b.status.as_str());
    let processing_status = match b.status.as_str() {
        "cancelling" => "canceling",
        _ if ended => "ended",
        _ => "in_progress",
    };
    let ended_at = [b.completed_at, b.failed_at, b.cancelled_at, b.expired_at]
        .into_iter()
        .flatten()
        .next();
    let path = format!("/v1/messages/batches/{}/results", b.public_id);
    let results_url = ended.then(|| format!("{}{path}", base.unwrap_or("")));
    Ok(json!({
        "id": b.public_id,
        "type": "message_batch",
        "processing_status": processing_status,
        "request_counts": {
            "processing": n("pending") + n("running"),
            "succeeded": n("succeeded"),
            "errored": n("failed"),
            "canceled": n("cancelled"),
            "expired": n("expired"),
        },
        "ended_at": ended_at.map(rfc3339),
        "created_at": rfc3339(b.created_at),
        "expires_at": rfc3339(b.expires_at),
        "archived_at": null,
        "cancel_initiated_at": b.cancelling_at.map(rfc3339),
        "results_url": results_url,
    }))
}

/// The results of an ended message batch, one JSON line per request in request order:
/// `{custom_id, result: {type: "succeeded", message} | {type: "errored", error} | {type:
/// "canceled"} | {type: "expired"}}`. 409 before it ended.
pub async fn results(state: &AppState, b: &batch_rows::Model) -> Result<Vec<u8>, Refused> {
    if !batches::ENDED.contains(&b.status.as_str()) {
        return Err(Refused::Conflict(
            "The message batch has not ended: its results are available once processing ends."
                .into(),
        ));
    }
    let lines = batch_lines::Entity::find()
        .filter(batch_lines::Column::BatchId.eq(b.id))
        .order_by_asc(batch_lines::Column::Line)
        .all(&state.db)
        .await?;
    let mut out = Vec::new();
    for l in lines {
        let answer = l
            .answer
            .as_deref()
            .and_then(|a| serde_json::from_str::<Value>(a).ok());
        let result = match l.status.as_str() {
            "succeeded" => json!({"type": "succeeded", "message": answer}),
            "cancelled" => json!({"type": "canceled"}),
            "expired" => json!({"type": "expired"}),
            _ => {
                let error = answer.filter(|a| a["type"] == "error").unwrap_or_else(|| {
                    json!({"type": "error", "error": {
                        "type": "api_error",
                        "message": l.error_message.clone().or(l.error_code.clone()).unwrap_or_default(),
                    }})
                });
                json!({"type": "errored", "error": error})
            }
        };
        out.extend_from_slice(
            json!({"custom_id": l.custom_id, "result": result})
                .to_string()
                .as_bytes(),
        );
        out.push(b'\n');
    }
    Ok(out)
}
