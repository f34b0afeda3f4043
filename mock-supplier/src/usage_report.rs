//! The suppliers' own usage reports, served from what this mock billed (issue 47: the gateway's
//! reconciliation reads them). Every chat, responses and Anthropic message answer the mock sends
//! with a success status is billed at the usage it was built with — also when a `cut_after`
//! fault ends it early (a supplier bills what it generated, whatever reached the client) — under
//! the key it was called with and the time it arrived.
//!
//! * OpenAI, `GET /v1/organization/usage/completions`: `start_time` (Unix seconds, required),
//!   `end_time`, `bucket_width` (`1d` only), `group_by` (repeated: `model`, `api_key_id`),
//!   `api_key_ids`, `models`, `limit` (buckets, default 7, at most 31), `page` (the `next_page` of
//!   the page before). Answers `{"object":"page","data":[{"object":"bucket","start_time",
//!   "end_time","results":[{"object":"organization.usage.completions.result","input_tokens"
//!   (cached included),"output_tokens","input_cached_tokens","num_model_requests","model",
//!   "api_key_id",…}]}],"has_more","next_page"}`.
//! * Anthropic, `GET /v1/organizations/usage_report/messages`: `starting_at` (RFC 3339,
//!   required), `ending_at`, `bucket_width` (`1d` only), `group_by[]` (`model`, `api_key_id`),
//!   `api_key_ids[]`, `models[]`, `limit`, `page`. Answers `{"data":[{"starting_at","ending_at",
//!   "results":[{"uncached_input_tokens","cache_creation":{"ephemeral_1h_input_tokens",
//!   "ephemeral_5m_input_tokens"},"cache_read_input_tokens","output_tokens","model",
//!   "api_key_id",…}]}],"has_more","next_page"}`; the hour-long cache writes are `x-mock-usage`'s
//!   `cache_creation_1h`, the rest of `cache_creation` 5-minute ones.
//!
//! A key's id is [`key_id`] of its secret (`key_…` for OpenAI, `apikey_…` for Anthropic). Shapes
//! and their sources: the gateway's `docs/WIRE-USAGE-REPORTS.md`.

use crate::respond::{Req, Wire, error, header_str, json_ok};
use crate::shared::{Billed, Shared};
use crate::usage::Usage;
use axum::response::Response;
use http::{Method, StatusCode};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::PoisonError;
use std::time::{SystemTime, UNIX_EPOCH};

const DAY: u64 = 86_400;

/// The id a supplier's usage report gives the key whose secret is `secret`: `key_` (OpenAI) or
/// `apikey_` (Anthropic) and 16 hex digits of its FNV-1a hash.
pub fn key_id(anthropic: bool, secret: &str) -> String {
    let prefix = if anthropic { "apikey_" } else { "key_" };
    format!("{prefix}{:016x}", crate::reply::fnv1a64(secret.as_bytes()))
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Bills an answer of `model` at `usage`, to the key of `headers` (OpenAI's bearer token or
/// Anthropic's `x-api-key`).
pub(crate) fn bill(shared: &Shared, headers: &http::HeaderMap, model: &str, usage: Usage) {
    let key = header_str(headers, "x-api-key")
        .or_else(|| header_str(headers, "authorization").and_then(|a| a.strip_prefix("Bearer ")))
        .unwrap_or("")
        .to_owned();
    let billed = Billed {
        at: now(),
        key,
        model: model.to_owned(),
        usage,
    };
    shared
        .billed
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push(billed);
}

/// The query's pairs, percent-decoded (`group_by%5B%5D` is `group_by[]`).
fn pairs(req: &Req<'_>) -> Vec<(String, String)> {
    let decode = |s: &str| {
        let bytes = s.as_bytes();
        let mut out = Vec::with_capacity(bytes.len());
        let mut i = 0;
        while i < bytes.len() {
            let hex = bytes
                .get(i + 1..i + 3)
                .and_then(|h| std::str::from_utf8(h).ok());
            match (bytes[i], hex.and_then(|h| u8::from_str_radix(h, 16).ok())) {
                (b'%', Some(b)) => {
                    out.push(b);
                    i += 3;
                }
                (b'+', _) => {
                    out.push(b' ');
                    i += 1;
                }
                (b, _) => {
                    out.push(b);
                    i += 1;
                }
            }
        }
        String::from_utf8_lossy(&out).into_owned()
    };
    req.query
        .unwrap_or("")
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (decode(k), decode(v)))
        .collect()
}

/// What a report asks for, read from its query.
struct Ask {
    start: u64,
    end: u64,
    by_model: bool,
    by_key: bool,
    keys: Vec<String>,
    models: Vec<String>,
    limit: u64,
}

fn ask(req: &Req<'_>, anthropic: bool) -> Result<Ask, String> {
    let all = pairs(req);
    let list = |name: &str| -> Vec<String> {
        let bracketed = format!("{name}[]");
        all.iter()
            .filter(|(k, _)| k == name || *k == bracketed)
            .map(|(_, v)| v.clone())
            .collect()
    };
    let one = |name: &str| all.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str());
    let (start_name, end_name) = if anthropic {
        ("starting_at", "ending_at")
    } else {
        ("start_time", "end_time")
    };
    let time = |v: &str| -> Result<u64, String> {
        if anthropic {
            parse_rfc3339(v).ok_or_else(|| format!("{v:?} is not an RFC 3339 time"))
        } else {
            v.parse().map_err(|_| format!("{v:?} is not a Unix time"))
        }
    };
    let page = one("page").filter(|p| !p.is_empty());
    let start = match (page, one(start_name)) {
        (Some(p), _) => time(p)?,
        (None, Some(s)) => time(s)?,
        (None, None) => return Err(format!("{start_name} is required")),
    };
    let end = one(end_name).map(time).transpose()?.unwrap_or_else(now);
    if one("bucket_width").is_some_and(|w| w != "1d") {
        return Err("bucket_width: the mock serves 1d buckets only".into());
    }
    let limit = match one("limit") {
        None => 7,
        Some(l) => l
            .parse::<u64>()
            .ok()
            .filter(|l| (1..=31).contains(l))
            .ok_or("limit must be 1 to 31")?,
    };
    let group = list("group_by");
    Ok(Ask {
        start: start - start % DAY,
        end,
        by_model: group.iter().any(|g| g == "model"),
        by_key: group.iter().any(|g| g == "api_key_id"),
        keys: list("api_key_ids"),
        models: list("models"),
        limit,
    })
}

/// Serves a usage report (`None`: not a report path).
pub(crate) fn serve(req: &Req<'_>) -> Option<Response> {
    let anthropic = match (req.method, req.path) {
        (&Method::GET, "/v1/organization/usage/completions") => false,
        (&Method::GET, "/v1/organizations/usage_report/messages") => true,
        _ => return None,
    };
    let wire = if anthropic {
        Wire::Anthropic
    } else {
        Wire::OpenAi
    };
    let ask = match ask(req, anthropic) {
        Ok(a) => a,
        Err(msg) => return Some(error(req.rec, wire, StatusCode::BAD_REQUEST, &msg)),
    };
    let billed = req
        .rec
        .shared
        .billed
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    let mut data = Vec::new();
    let mut bucket = ask.start;
    while bucket < ask.end && (data.len() as u64) < ask.limit {
        let results = results(&billed, &ask, bucket, anthropic);
        data.push(if anthropic {
            json!({"starting_at": crate::clock::rfc3339(bucket),
                   "ending_at": crate::clock::rfc3339(bucket + DAY), "results": results})
        } else {
            json!({"object": "bucket", "start_time": bucket, "end_time": bucket + DAY,
                   "results": results})
        });
        bucket += DAY;
    }
    let has_more = bucket < ask.end;
    let next = has_more.then(|| match anthropic {
        true => crate::clock::rfc3339(bucket),
        false => bucket.to_string(),
    });
    let mut page = json!({"data": data, "has_more": has_more, "next_page": next});
    if !anthropic {
        page["object"] = json!("page");
    }
    Some(json_ok(req.rec, crate::reply::to_bytes(&page), false))
}

/// One day's results, grouped as asked.
fn results(billed: &[Billed], ask: &Ask, day: u64, anthropic: bool) -> Vec<Value> {
    let mut groups: BTreeMap<(Option<String>, Option<String>), (Usage, u64)> = BTreeMap::new();
    for b in billed.iter().filter(|b| b.at >= day && b.at < day + DAY) {
        let id = key_id(anthropic, &b.key);
        if (!ask.keys.is_empty() && !ask.keys.contains(&id))
            || (!ask.models.is_empty() && !ask.models.contains(&b.model))
        {
            continue;
        }
        let group = (
            ask.by_model.then(|| b.model.clone()),
            ask.by_key.then_some(id),
        );
        let (sum, n) = groups.entry(group).or_insert((Usage::defaults(0, 0), 0));
        sum.prompt += b.usage.prompt;
        sum.completion += b.usage.completion;
        sum.cached += b.usage.cached;
        sum.cache_creation += b.usage.cache_creation;
        sum.cache_creation_1h += b.usage.cache_creation_1h;
        *n += 1;
    }
    groups
        .into_iter()
        .map(|((model, key), (u, n))| match anthropic {
            true => json!({
                "uncached_input_tokens": u.prompt.saturating_sub(u.cached + u.cache_creation),
                "cache_creation": {"ephemeral_1h_input_tokens": u.cache_creation_1h,
                                   "ephemeral_5m_input_tokens":
                                       u.cache_creation.saturating_sub(u.cache_creation_1h)},
                "cache_read_input_tokens": u.cached,
                "output_tokens": u.completion,
                "server_tool_use": {"web_search_requests": 0},
                "api_key_id": key, "workspace_id": null, "model": model,
                "service_tier": "standard", "context_window": "0-200k",
            }),
            false => json!({
                "object": "organization.usage.completions.result",
                "input_tokens": u.prompt, "output_tokens": u.completion,
                "input_cached_tokens": u.cached, "input_audio_tokens": 0,
                "output_audio_tokens": 0, "num_model_requests": n,
                "project_id": null, "user_id": null, "api_key_id": key,
                "model": model, "batch": null,
            }),
        })
        .collect()
}

/// Seconds since the epoch of `YYYY-MM-DDTHH:MM:SS[.frac]Z`.
fn parse_rfc3339(s: &str) -> Option<u64> {
    let s = s.strip_suffix('Z')?;
    let (date, time) = s.split_once('T')?;
    let mut d = date.splitn(3, '-').map(|p| p.parse::<i64>().ok());
    let (y, m, day) = (d.next()??, d.next()??, d.next()??);
    let time = time.split('.').next()?;
    let mut t = time.splitn(3, ':').map(|p| p.parse::<u64>().ok());
    let (h, min, sec) = (t.next()??, t.next()??, t.next()??);
    // Howard Hinnant's days_from_civil.
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = u64::try_from(era * 146_097 + doe - 719_468).ok()?;
    Some(days * DAY + h * 3600 + min * 60 + sec)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_round_trips() {
        for t in [0, 1_764_374_400, 1_764_460_799, 1_790_000_123] {
            assert_eq!(parse_rfc3339(&crate::clock::rfc3339(t)), Some(t), "{t}");
        }
        assert_eq!(parse_rfc3339("2025-08-01T00:00:00.5Z"), Some(1_754_006_400));
        assert_eq!(parse_rfc3339("2025-08-01"), None);
    }
}
