//! Anthropic's Message Batches as a supplier serves them (issue 46; shapes and sources in
//! `docs/notes-supplier-batches.md`): `POST /v1/messages/batches` (`{requests: [{custom_id,
//! params}]}`), `GET /v1/messages/batches/{id}`, `GET /v1/messages/batches/{id}/results`, `POST
//! /v1/messages/batches/{id}/cancel`, and `GET /v1/messages/batches` (every batch, newest first).
//! Batches live in the mock's memory beside OpenAI's.
//!
//! Each request is answered when the batch is created, as `POST /v1/messages` answers it (a
//! request this mock refuses is `errored` with its `invalid_request_error`). `custom_id` must
//! match `^[a-zA-Z0-9_-]{1,64}$` and be unique (else 400). The batch is `in_progress` until read
//! `polls` times, then `ended`; `x-mock-batch` (or `MockHandle::set_batch_behaviour`) as for
//! OpenAI's batches: `polls=N`, `expire=true` (every request `expired`), `drop=CUSTOM_ID` (no
//! result for it). Cancel: `canceling`, then at the next read `ended`, the first half `succeeded`
//! (or `errored`), the rest `canceled`. Results (JSONL, `{custom_id, result}`) only once ended.

use crate::batch_state::MockBatch;
use crate::reply::{self, Reply};
use crate::respond::{Rec, Req, Wire, error, full, header_str};
use axum::response::Response;
use bytes::Bytes;
use http::{HeaderMap, Method, StatusCode};
use serde_json::{Value, json};

const PREFIX: &str = "/v1/messages/batches";

fn ok(rec: &Rec, v: &Value, content_type: &str) -> Response {
    let body = Bytes::from(v.to_string());
    full(rec, StatusCode::OK, content_type, body, Vec::new())
}

fn bad(rec: &Rec, message: &str) -> Response {
    error(rec, Wire::Anthropic, StatusCode::BAD_REQUEST, message)
}

/// The message batch routes; `None` when the path is not one of them.
pub(crate) fn serve(req: &Req<'_>) -> Option<Response> {
    let rest = req.path.strip_prefix(PREFIX)?;
    let rec = req.rec;
    Some(match (req.method, rest) {
        (&Method::POST, "") => create(req),
        (&Method::GET, "") => list(rec),
        (&Method::GET, r) => match r.trim_start_matches('/').split_once('/') {
            None => read(rec, r.trim_start_matches('/'), false),
            Some((id, "results")) => read(rec, id, true),
            Some(_) => return None,
        },
        (&Method::POST, r) => match r.trim_start_matches('/').split_once('/') {
            Some((id, "cancel")) => cancel(rec, id),
            _ => return None,
        },
        _ => return None,
    })
}

fn valid_id(id: &str) -> bool {
    (1..=64).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// The answer `POST /v1/messages` gives `params`: (status, body).
fn answer(params: &Value) -> (u16, Value) {
    let model = match crate::anthropic_check::validate(
        params,
        crate::anthropic_check::Endpoint::Messages,
    ) {
        Ok(m) => m.to_owned(),
        Err(message) => {
            let body = json!({"type": "error", "error": {"type": "invalid_request_error", "message": message}});
            return (400, body);
        }
    };
    let bytes = params.to_string();
    let Ok(p) = crate::respond::params(&HeaderMap::new(), bytes.len()) else {
        return (
            500,
            json!({"type": "error", "error": {"type": "api_error", "message": "mock"}}),
        );
    };
    let reply = Reply {
        hash: reply::body_hash_hex(bytes.as_bytes()),
        model,
        n: p.n,
        usage: p.usage,
        include_usage: false,
        tool: crate::tools::tool_to_call(crate::tools::ToolApi::Anthropic, params),
        pad: 0,
    };
    let body = serde_json::from_slice(&reply.anthropic_message()).unwrap_or_default();
    (200, body)
}

fn create(req: &Req<'_>) -> Response {
    let rec = req.rec;
    if header_str(req.headers, "anthropic-version").is_none() {
        return bad(rec, "anthropic-version: header is required");
    }
    let Ok(ask) = serde_json::from_slice::<Value>(req.body) else {
        return bad(rec, "request body is not valid JSON");
    };
    let Some(requests) = ask["requests"].as_array().filter(|r| !r.is_empty()) else {
        return bad(rec, "requests: must be a non-empty list");
    };
    let mut results = Vec::with_capacity(requests.len());
    let mut seen = std::collections::HashSet::new();
    for (i, r) in requests.iter().enumerate() {
        let id = r["custom_id"].as_str().unwrap_or("");
        if !valid_id(id) || !seen.insert(id.to_string()) {
            return bad(rec, &format!("requests.{i}.custom_id: invalid or repeated"));
        }
        let (status, body) = answer(&r["params"]);
        results.push((id.to_string(), status, body));
    }
    let behaviour = crate::batch_state::behaviour(&rec.shared.batch_behaviour, req.headers);
    let batch = MockBatch::new(
        "/v1/messages".into(),
        String::new(),
        results,
        &behaviour,
        Value::Null,
    );
    let Ok(mut batches) = rec.shared.batches.lock() else {
        return error(
            rec,
            Wire::Anthropic,
            StatusCode::INTERNAL_SERVER_ERROR,
            "lock",
        );
    };
    let id = format!("msgbatch_mock{}", batches.len() + 1);
    let object = view(&id, &batch);
    batches.insert(id, batch);
    ok(rec, &object, "application/json")
}

/// Each request's result once the batch ended (none for a dropped one).
fn results(b: &MockBatch) -> Vec<(String, Value)> {
    let half = b.results.len().div_ceil(2);
    b.results
        .iter()
        .enumerate()
        .filter(|(_, (id, ..))| b.drop.as_deref() != Some(id.as_str()))
        .map(|(n, (id, status, body))| {
            let result = match (b.expire, b.cancelled && n >= half, *status < 400) {
                (true, ..) => json!({"type": "expired"}),
                (false, true, _) => json!({"type": "canceled"}),
                (false, false, true) => json!({"type": "succeeded", "message": body}),
                (false, false, false) => json!({"type": "errored", "error": body}),
            };
            (id.clone(), result)
        })
        .collect()
}

fn view(id: &str, b: &MockBatch) -> Value {
    let ended = b.status == "ended";
    let mut counts =
        json!({"processing": 0, "succeeded": 0, "errored": 0, "canceled": 0, "expired": 0});
    if ended {
        for (_, r) in results(b) {
            let kind = r["type"].as_str().unwrap_or("errored").to_string();
            counts[kind] = json!(counts[&kind].as_u64().unwrap_or(0) + 1);
        }
    } else {
        counts["processing"] = json!(b.results.len());
    }
    json!({
        "id": id, "type": "message_batch", "processing_status": b.status,
        "request_counts": counts,
        "ended_at": ended.then(|| crate::clock::rfc3339_in(0)),
        "created_at": crate::clock::rfc3339_in(0),
        "expires_at": crate::clock::rfc3339_in(86_400),
        "archived_at": null,
        "cancel_initiated_at": b.cancelled.then(|| crate::clock::rfc3339_in(0)),
        "results_url": ended.then(|| format!("{PREFIX}/{id}/results")),
    })
}

fn read(rec: &Rec, id: &str, results_asked: bool) -> Response {
    let Ok(mut batches) = rec.shared.batches.lock() else {
        return error(
            rec,
            Wire::Anthropic,
            StatusCode::INTERNAL_SERVER_ERROR,
            "lock",
        );
    };
    let Some(b) = batches.get_mut(id) else {
        return error(
            rec,
            Wire::Anthropic,
            StatusCode::NOT_FOUND,
            "message batch not found",
        );
    };
    if results_asked {
        if b.status != "ended" {
            return bad(rec, "the message batch has not ended");
        }
        let mut out = String::new();
        for (custom_id, result) in results(b) {
            out += &json!({"custom_id": custom_id, "result": result}).to_string();
            out.push('\n');
        }
        return full(
            rec,
            StatusCode::OK,
            "application/binary",
            Bytes::from(out),
            Vec::new(),
        );
    }
    if matches!(b.status, "in_progress" | "canceling") {
        if b.polls_left == 0 || b.cancelled {
            b.status = "ended";
        } else {
            b.polls_left -= 1;
        }
    }
    let object = view(id, b);
    ok(rec, &object, "application/json")
}

fn list(rec: &Rec) -> Response {
    let Ok(batches) = rec.shared.batches.lock() else {
        return error(
            rec,
            Wire::Anthropic,
            StatusCode::INTERNAL_SERVER_ERROR,
            "lock",
        );
    };
    let mut data: Vec<(u64, Value)> = batches
        .iter()
        .filter(|(id, _)| id.starts_with("msgbatch_mock"))
        .map(|(id, b)| {
            let n = id.trim_start_matches("msgbatch_mock").parse().unwrap_or(0);
            (n, view(id, b))
        })
        .collect();
    data.sort_by_key(|d| std::cmp::Reverse(d.0));
    let data: Vec<Value> = data.into_iter().map(|(_, v)| v).collect();
    ok(
        rec,
        &json!({"data": data, "has_more": false}),
        "application/json",
    )
}

fn cancel(rec: &Rec, id: &str) -> Response {
    let Ok(mut batches) = rec.shared.batches.lock() else {
        return error(
            rec,
            Wire::Anthropic,
            StatusCode::INTERNAL_SERVER_ERROR,
            "lock",
        );
    };
    let Some(b) = batches.get_mut(id) else {
        return error(
            rec,
            Wire::Anthropic,
            StatusCode::NOT_FOUND,
            "message batch not found",
        );
    };
    if b.status == "in_progress" {
        b.cancelled = true;
        b.status = "canceling";
    }
    let object = view(id, b);
    ok(rec, &object, "application/json")
}
