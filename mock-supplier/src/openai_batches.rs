//! OpenAI's Batch API as a supplier serves it (issue 46; shapes and sources in
//! `docs/WIRE-BATCHES.md`, "The suppliers' own batch APIs"): `POST /v1/files` (multipart,
//! `purpose=batch`), `GET /v1/files/{id}/content`, `POST /v1/batches`, `GET /v1/batches/{id}`,
//! `POST /v1/batches/{id}/cancel`. Files and batches live in the mock's memory.
//!
//! A batch runs every line when it is created, each answered as this mock answers that endpoint
//! (`/v1/chat/completions`, `/v1/responses`, `/v1/embeddings`), so its usage is what a call would
//! have reported. Its lines must name one model and the batch's endpoint (else 400, as OpenAI
//! refuses a file of several models). It is `in_progress` until it has been read `polls` times
//! (default 1), then `completed` with its output file (a line answered 2xx) and error file (a
//! line whose body this mock refuses: 400), lines in any order (here: reversed, as OpenAI does
//! not keep order). The create's `x-mock-batch` header, comma-separated `key=value`:
//! * `polls=N`: reads before it ends;
//! * `expire=true`: it ends `expired`, every line in the error file with code `batch_expired`;
//! * `drop=CUSTOM_ID`: that line is in neither file (a supplier losing a line).
//!
//! `GET /v1/batches` lists them all. `MockHandle::set_batch_behaviour` sets the header's value
//! for creates that send none. Cancel: `cancelling`, then at the next read `cancelled`, the first half of the lines in the
//! output file, the rest in the error file with code `batch_cancelled`.

use crate::batch_state::MockBatch;
use crate::respond::{Rec, Req, Wire, bad_request, error, full, header_str};
use axum::response::Response;
use bytes::Bytes;
use http::{HeaderMap, Method, StatusCode};
use serde_json::{Value, json};

fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn ok(rec: &Rec, v: &Value) -> Response {
    let body = Bytes::from(v.to_string());
    full(rec, StatusCode::OK, "application/json", body, Vec::new())
}

/// The batch and file routes; `None` when the path is not one of them.
pub(crate) fn serve(req: &Req<'_>) -> Option<Response> {
    let rec = req.rec;
    let path = req.path;
    Some(match (req.method, path) {
        (&Method::POST, "/v1/files") => upload(req),
        (&Method::POST, "/v1/batches") => create(req),
        (&Method::GET, "/v1/batches") => list(rec),
        (&Method::GET, p) if p.starts_with("/v1/files/") && p.ends_with("/content") => {
            let id = &p["/v1/files/".len()..p.len() - "/content".len()];
            let file = rec.shared.batch_files.lock().ok()?.get(id).cloned();
            match file {
                Some((_, bytes)) => full(
                    rec,
                    StatusCode::OK,
                    "application/octet-stream",
                    bytes,
                    Vec::new(),
                ),
                None => error(
                    rec,
                    Wire::OpenAi,
                    StatusCode::NOT_FOUND,
                    "No such File object",
                ),
            }
        }
        (&Method::GET, p) if p.starts_with("/v1/batches/") => read(rec, &p["/v1/batches/".len()..]),
        (&Method::POST, p) if p.starts_with("/v1/batches/") && p.ends_with("/cancel") => {
            let id = &p["/v1/batches/".len()..p.len() - "/cancel".len()];
            cancel(rec, id)
        }
        _ => return None,
    })
}

fn upload(req: &Req<'_>) -> Response {
    let rec = req.rec;
    let content_type = header_str(req.headers, "content-type").unwrap_or("");
    let Some(parts) = crate::audio::parts(content_type, req.body) else {
        return bad_request(rec, "the body must be multipart/form-data");
    };
    let field = |name: &str| parts.iter().find(|(n, _)| n == name).map(|(_, v)| *v);
    if field("purpose") != Some(b"batch".as_slice()) {
        return bad_request(rec, "purpose must be batch");
    }
    let Some(file) = field("file") else {
        return bad_request(rec, "file is required");
    };
    let Ok(mut files) = rec.shared.batch_files.lock() else {
        return error(rec, Wire::OpenAi, StatusCode::INTERNAL_SERVER_ERROR, "lock");
    };
    let id = format!("file-mock{}", files.len() + 1);
    files.insert(id.clone(), ("batch".into(), Bytes::copy_from_slice(file)));
    let object = json!({"id": id, "object": "file", "bytes": file.len(), "created_at": now(),
                        "filename": "batch.jsonl", "purpose": "batch", "status": "processed"});
    ok(rec, &object)
}

/// The answer this mock gives `body` on `endpoint`: (status, body).
fn answer(endpoint: &str, body: &Value) -> (u16, Value) {
    let bytes = body.to_string();
    let refused = |m: String| {
        (
            400,
            json!({"error": {"message": m, "type": "invalid_request_error"}}),
        )
    };
    let out = match endpoint {
        "/v1/embeddings" => crate::embeddings::openai(body, None),
        _ => {
            let Some(model) = body.get("model").and_then(Value::as_str) else {
                return refused("`model` is required".into());
            };
            let p = match crate::respond::params(&HeaderMap::new(), bytes.len()) {
                Ok(p) => p,
                Err(m) => return refused(m),
            };
            let responses = endpoint == "/v1/responses";
            let tool_api = match responses {
                true => crate::tools::ToolApi::Responses,
                false => crate::tools::ToolApi::Chat,
            };
            let reply = crate::reply::Reply {
                hash: crate::reply::body_hash_hex(bytes.as_bytes()),
                model: model.to_owned(),
                n: p.n,
                usage: p.usage,
                include_usage: false,
                tool: crate::tools::tool_to_call(tool_api, body),
                pad: p.pad,
            };
            Ok(reply.whole(responses).to_vec())
        }
    };
    match out.map(|b| serde_json::from_slice::<Value>(&b)) {
        Ok(Ok(v)) => (200, v),
        Ok(Err(e)) => refused(e.to_string()),
        Err(m) => refused(m),
    }
}

/// Each line of an input file run on `endpoint`: (custom id, status, body); refused when a line
/// is not JSON, names another endpoint, or the lines name more than one model.
fn run_lines(endpoint: &str, bytes: &[u8]) -> Result<Vec<(String, u16, Value)>, String> {
    let mut results = Vec::new();
    let mut models = std::collections::BTreeSet::new();
    for (n, line) in bytes.split(|b| *b == b'\n').enumerate() {
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let Ok(line) = serde_json::from_slice::<Value>(line) else {
            return Err(format!("line {} is not JSON", n + 1));
        };
        if line["url"] != endpoint {
            return Err(format!("line {}: url is not the endpoint", n + 1));
        }
        models.insert(line["body"]["model"].as_str().unwrap_or("").to_string());
        let (status, body) = answer(endpoint, &line["body"]);
        let custom_id = line["custom_id"].as_str().unwrap_or("").to_string();
        results.push((custom_id, status, body));
    }
    if models.len() > 1 {
        return Err("each input file can only include requests to a single model".into());
    }
    Ok(results)
}

fn create(req: &Req<'_>) -> Response {
    let rec = req.rec;
    let Ok(ask) = serde_json::from_slice::<Value>(req.body) else {
        return bad_request(rec, "request body is not valid JSON");
    };
    let endpoint = ask["endpoint"].as_str().unwrap_or("").to_string();
    if !["/v1/chat/completions", "/v1/responses", "/v1/embeddings"].contains(&endpoint.as_str()) {
        return bad_request(rec, "endpoint is not one a batch runs");
    }
    if ask["completion_window"] != "24h" {
        return bad_request(rec, "completion_window must be 24h");
    }
    let input = ask["input_file_id"].as_str().unwrap_or("").to_string();
    let file = rec
        .shared
        .batch_files
        .lock()
        .ok()
        .and_then(|f| f.get(&input).cloned());
    let Some((_, bytes)) = file else {
        return bad_request(rec, "input_file_id names no file");
    };
    let results = match run_lines(&endpoint, &bytes) {
        Ok(r) => r,
        Err(m) => return bad_request(rec, &m),
    };
    let behaviour = crate::batch_state::behaviour(&rec.shared.batch_behaviour, req.headers);
    let batch = MockBatch::new(
        endpoint,
        input,
        results,
        &behaviour,
        ask["metadata"].clone(),
    );
    let Ok(mut batches) = rec.shared.batches.lock() else {
        return error(rec, Wire::OpenAi, StatusCode::INTERNAL_SERVER_ERROR, "lock");
    };
    let id = format!("batch_mock{}", batches.len() + 1);
    let object = view(&id, &batch);
    batches.insert(id, batch);
    ok(rec, &object)
}

fn view(id: &str, b: &MockBatch) -> Value {
    let total = b.results.len();
    let completed = b
        .results
        .iter()
        .filter(|(c, s, _)| *s < 400 && b.drop.as_deref() != Some(c.as_str()))
        .count();
    let ended = !matches!(b.status, "in_progress" | "cancelling");
    json!({
        "id": id, "object": "batch", "endpoint": b.endpoint, "errors": null,
        "input_file_id": b.input_file_id, "completion_window": "24h", "status": b.status,
        "output_file_id": b.output_file_id, "error_file_id": b.error_file_id,
        "created_at": b.created_at, "in_progress_at": b.created_at, "expires_at": b.created_at + 86_400,
        "completed_at": (b.status == "completed").then_some(now()),
        "request_counts": {"total": total, "completed": if ended { completed } else { 0 },
                           "failed": if ended { total - completed } else { 0 }},
        "metadata": b.metadata,
    })
}

/// One output or error line.
fn line(custom_id: &str, n: usize, status: Option<(u16, &Value)>, code: Option<&str>) -> String {
    let response = status.map(
        |(s, body)| json!({"status_code": s, "request_id": format!("req_mock{n}"), "body": body}),
    );
    let error = code.map(|c| json!({"code": c, "message": format!("mock: {c}")}));
    json!({"id": format!("batch_req_mock{n}"), "custom_id": custom_id, "response": response, "error": error})
        .to_string()
        + "\n"
}

/// Ends `b` (its files written) when its reads ran out.
fn end(rec: &Rec, b: &mut MockBatch) {
    let (mut output, mut errors) = (String::new(), String::new());
    let half = b.results.len().div_ceil(2);
    for (n, (custom_id, status, body)) in b.results.iter().enumerate().rev() {
        if b.drop.as_deref() == Some(custom_id.as_str()) {
            continue;
        }
        if b.expire {
            errors += &line(custom_id, n, None, Some("batch_expired"));
        } else if b.cancelled && n >= half {
            errors += &line(custom_id, n, None, Some("batch_cancelled"));
        } else if *status < 400 {
            output += &line(custom_id, n, Some((*status, body)), None);
        } else {
            errors += &line(custom_id, n, Some((*status, body)), None);
        }
    }
    let Ok(mut files) = rec.shared.batch_files.lock() else {
        return;
    };
    let mut keep = |content: String| {
        let id = format!("file-mock{}", files.len() + 1);
        files.insert(id.clone(), ("batch_output".into(), Bytes::from(content)));
        id
    };
    b.output_file_id = (!output.is_empty()).then(|| keep(output));
    b.error_file_id = (!errors.is_empty()).then(|| keep(errors));
    b.status = match (b.expire, b.cancelled) {
        (true, _) => "expired",
        (false, true) => "cancelled",
        (false, false) => "completed",
    };
}

fn read(rec: &Rec, id: &str) -> Response {
    let Ok(mut batches) = rec.shared.batches.lock() else {
        return error(rec, Wire::OpenAi, StatusCode::INTERNAL_SERVER_ERROR, "lock");
    };
    let Some(b) = batches.get_mut(id) else {
        return error(
            rec,
            Wire::OpenAi,
            StatusCode::NOT_FOUND,
            "No such Batch object",
        );
    };
    if matches!(b.status, "in_progress" | "cancelling") {
        if b.polls_left == 0 || b.cancelled {
            end(rec, b);
        } else {
            b.polls_left -= 1;
        }
    }
    let object = view(id, b);
    ok(rec, &object)
}

/// Every batch, newest first (`limit` and cursors are not honoured: a mock holds few).
fn list(rec: &Rec) -> Response {
    let Ok(batches) = rec.shared.batches.lock() else {
        return error(rec, Wire::OpenAi, StatusCode::INTERNAL_SERVER_ERROR, "lock");
    };
    let mut data: Vec<(u64, Value)> = batches
        .iter()
        .filter(|(id, _)| id.starts_with("batch_mock"))
        .map(|(id, b)| {
            let n = id.trim_start_matches("batch_mock").parse().unwrap_or(0);
            (n, view(id, b))
        })
        .collect();
    data.sort_by_key(|d| std::cmp::Reverse(d.0));
    let data: Vec<Value> = data.into_iter().map(|(_, v)| v).collect();
    ok(
        rec,
        &json!({"object": "list", "data": data, "has_more": false}),
    )
}

fn cancel(rec: &Rec, id: &str) -> Response {
    let Ok(mut batches) = rec.shared.batches.lock() else {
        return error(rec, Wire::OpenAi, StatusCode::INTERNAL_SERVER_ERROR, "lock");
    };
    let Some(b) = batches.get_mut(id) else {
        return error(
            rec,
            Wire::OpenAi,
            StatusCode::NOT_FOUND,
            "No such Batch object",
        );
    };
    if b.status == "in_progress" {
        b.cancelled = true;
        b.status = "cancelling";
    }
    let object = view(id, b);
    ok(rec, &object)
}
