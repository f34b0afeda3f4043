//! Reading a supplier's own usage report of one UTC day for one account (shapes and sources:
//! `docs/WIRE-USAGE-REPORTS.md`), summed per model in the ledger's terms: input is every input
//! token (cache reads and writes included), cached the cache reads, cache_write the cache writes.
//!
//! - OpenAI: `GET {base_url}/organization/usage/completions?start_time&end_time&bucket_width=1d
//!   &group_by=model[&api_key_ids=ID]&limit=1` with the admin key as bearer token; `input_tokens`
//!   (cached included), `input_cached_tokens`, `output_tokens`, `num_model_requests`.
//! - Anthropic: `GET {base_url}/v1/organizations/usage_report/messages?starting_at&ending_at
//!   &bucket_width=1d&group_by[]=model[&api_key_ids[]=ID]&limit=1` with the admin key as
//!   `x-api-key`; input = `uncached_input_tokens` + `cache_read_input_tokens` + both
//!   `cache_creation` lifetimes; it counts no requests.
//!
//! Pages are followed (`has_more`, `next_page`) up to [`MAX_PAGES`]. Every answer is read whole
//! up to [`MAX_BYTES`].

use chrono::{DateTime, Utc};
use serde_json::Value;
use settings::{Account, Provider, UsageReport};
use std::collections::BTreeMap;

/// Pages read of one day's report at most.
pub const MAX_PAGES: usize = 20;
/// The largest answer read (a day of one key's usage grouped by model is a few kilobytes).
pub const MAX_BYTES: usize = 4 * 1024 * 1024;

/// Token counts of one model on one side.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tokens {
    /// Requests counted (`None`: the report counts none).
    pub requests: Option<i64>,
    pub input: i64,
    pub output: i64,
    pub cached: i64,
    pub cache_write: i64,
    /// The hour-long part of `cache_write`.
    pub cache_write_1h: i64,
}

impl Tokens {
    pub fn add(&mut self, o: &Tokens) {
        self.requests = match (self.requests, o.requests) {
            (Some(a), Some(b)) => Some(a + b),
            (a, b) => a.or(b),
        };
        self.input += o.input;
        self.output += o.output;
        self.cached += o.cached;
        self.cache_write += o.cache_write;
        self.cache_write_1h += o.cache_write_1h;
    }
}

/// The report's totals of the day starting at `day`, by the model it names (`""`: none named).
pub async fn read(
    client: &reqwest::Client,
    account: &Account,
    report: &UsageReport,
    day: DateTime<Utc>,
) -> Result<BTreeMap<String, Tokens>, String> {
    let end = day + chrono::TimeDelta::days(1);
    let anthropic = account.provider == Provider::Anthropic;
    let base = account.base_url.as_str().trim_end_matches('/');
    let mut by_model: BTreeMap<String, Tokens> = BTreeMap::new();
    let mut page: Option<String> = None;
    for _ in 0..MAX_PAGES {
        let mut query: Vec<(&str, String)> = if anthropic {
            vec![
                ("starting_at", day.format("%Y-%m-%dT%H:%M:%SZ").to_string()),
                ("ending_at", end.format("%Y-%m-%dT%H:%M:%SZ").to_string()),
                ("group_by[]", "model".into()),
            ]
        } else {
            vec![
                ("start_time", day.timestamp().to_string()),
                ("end_time", end.timestamp().to_string()),
                ("group_by", "model".into()),
            ]
        };
        query.push(("bucket_width", "1d".into()));
        query.push(("limit", "1".into()));
        if let Some(id) = &report.api_key_id {
            let name = if anthropic {
                "api_key_ids[]"
            } else {
                "api_key_ids"
            };
            query.push((name, id.clone()));
        }
        if let Some(p) = &page {
            query.push(("page", p.clone()));
        }
        let path = match anthropic {
            true => "/v1/organizations/usage_report/messages",
            false => "/organization/usage/completions",
        };
        let url = reqwest::Url::parse_with_params(&format!("{base}{path}"), &query)
            .map_err(|e| e.to_string())?;
        let req = match anthropic {
            true => client
                .get(url)
                .header("x-api-key", &report.admin_key)
                .header("anthropic-version", "2023-06-01"),
            false => client.get(url).bearer_auth(&report.admin_key),
        };
        let page_json = fetch(req).await?;
        for (model, tokens) in results(&page_json, anthropic)? {
            by_model.entry(model).or_default().add(&tokens);
        }
        page = match (
            page_json["has_more"].as_bool(),
            page_json["next_page"].as_str(),
        ) {
            (Some(true), Some(next)) => Some(next.to_string()),
            _ => return Ok(by_model),
        };
    }
    Err(format!(
        "the report of {day} has more than {MAX_PAGES} pages"
    ))
}

async fn fetch(req: reqwest::RequestBuilder) -> Result<Value, String> {
    let mut resp = req.send().await.map_err(|e| e.to_string())?;
    let status = resp.status().as_u16();
    let mut body = Vec::new();
    while let Some(chunk) = resp.chunk().await.map_err(|e| e.to_string())? {
        if body.len() + chunk.len() > MAX_BYTES {
            return Err(format!("the report is larger than {MAX_BYTES} bytes"));
        }
        body.extend_from_slice(&chunk);
    }
    if !(200..300).contains(&status) {
        let text = String::from_utf8_lossy(&body);
        return Err(format!(
            "the supplier answered {status}: {}",
            text.chars().take(300).collect::<String>()
        ));
    }
    serde_json::from_slice(&body).map_err(|e| format!("the report is not JSON: {e}"))
}

/// Every result of a page's buckets, as (model, tokens).
fn results(page: &Value, anthropic: bool) -> Result<Vec<(String, Tokens)>, String> {
    let buckets = page["data"]
        .as_array()
        .ok_or("the report has no `data` array")?;
    let n = |v: &Value, k: &str| v[k].as_i64().unwrap_or(0);
    let mut out = Vec::new();
    for bucket in buckets {
        let results = bucket["results"]
            .as_array()
            .ok_or("a bucket has no `results` array")?;
        for r in results {
            let model = r["model"].as_str().unwrap_or_default().to_string();
            let tokens = if anthropic {
                let hour = n(&r["cache_creation"], "ephemeral_1h_input_tokens");
                let writes = n(&r["cache_creation"], "ephemeral_5m_input_tokens") + hour;
                let read = n(r, "cache_read_input_tokens");
                Tokens {
                    requests: None,
                    input: n(r, "uncached_input_tokens") + read + writes,
                    output: n(r, "output_tokens"),
                    cached: read,
                    cache_write: writes,
                    cache_write_1h: hour,
                }
            } else {
                Tokens {
                    requests: Some(n(r, "num_model_requests")),
                    input: n(r, "input_tokens"),
                    output: n(r, "output_tokens"),
                    cached: n(r, "input_cached_tokens"),
                    cache_write: 0,
                    cache_write_1h: 0,
                }
            };
            out.push((model, tokens));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Both shapes as their references show them, summed in the ledger's terms.
    #[test]
    fn both_shapes_read_in_the_ledgers_terms() {
        let openai = json!({"object": "page", "data": [{"object": "bucket", "start_time": 0,
            "end_time": 86400, "results": [{"object": "organization.usage.completions.result",
            "input_tokens": 1000, "output_tokens": 500, "input_cached_tokens": 800,
            "num_model_requests": 5, "model": "gpt-4o-mini-2024-07-18", "api_key_id": null}]}],
            "has_more": false, "next_page": null});
        let got = results(&openai, false).unwrap();
        assert_eq!(got[0].0, "gpt-4o-mini-2024-07-18");
        assert_eq!(
            got[0].1,
            Tokens {
                requests: Some(5),
                input: 1000,
                output: 500,
                cached: 800,
                cache_write: 0,
                cache_write_1h: 0
            }
        );
        let anthropic = json!({"data": [{"starting_at": "2025-08-01T00:00:00Z",
            "ending_at": "2025-08-02T00:00:00Z", "results": [{"api_key_id": "apikey_01",
            "cache_creation": {"ephemeral_1h_input_tokens": 1000, "ephemeral_5m_input_tokens": 500},
            "cache_read_input_tokens": 200, "model": "claude-sonnet-4-20250514",
            "output_tokens": 500, "uncached_input_tokens": 1500}]}],
            "has_more": false, "next_page": null});
        let got = results(&anthropic, true).unwrap();
        assert_eq!(
            got[0].1,
            Tokens {
                requests: None,
                input: 3200,
                output: 500,
                cached: 200,
                cache_write: 1500,
                cache_write_1h: 1000
            }
        );
        assert!(results(&json!({"error": "x"}), false).is_err());
    }

    /// A local supplier answering every request with `answer` (a whole HTTP response), counting
    /// the requests; its base URL.
    async fn supplier(
        answer: Vec<u8>,
    ) -> (
        String,
        std::sync::Arc<std::sync::atomic::AtomicUsize>,
        tokio::task::JoinSet<()>,
    ) {
        use std::sync::atomic::{AtomicUsize, Ordering};
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}/v1", listener.local_addr().unwrap());
        let asked = std::sync::Arc::new(AtomicUsize::new(0));
        let count = asked.clone();
        let mut served = tokio::task::JoinSet::new();
        served.spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                count.fetch_add(1, Ordering::SeqCst);
                let mut request = [0u8; 4096];
                let _ = socket.read(&mut request).await;
                let _ = socket.write_all(&answer).await;
                let _ = socket.shutdown().await;
            }
        });
        (base, asked, served)
    }

    fn http(status: &str, body: &[u8]) -> Vec<u8> {
        let mut out = format!(
            "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
            body.len()
        )
        .into_bytes();
        out.extend_from_slice(body);
        out
    }

    async fn read_from(base: &str) -> Result<BTreeMap<String, Tokens>, String> {
        let settings = testkit::TestConfig::embedded()
            .model(testkit::Model::gpt_4o_mini())
            .account(
                testkit::Account::openai("oa", base, &["gpt-4o-mini"])
                    .line("usage_report_key = \"sk-admin\""),
            )
            .group(testkit::Group::new(1, &["gpt-4o-mini"]))
            .settings();
        let account = settings.account("oa").unwrap();
        let report = account.usage_report.as_ref().unwrap();
        let client = reqwest::Client::builder().no_proxy().build().unwrap();
        read(&client, account, report, DateTime::<Utc>::UNIX_EPOCH).await
    }

    /// A report that never ends is read `MAX_PAGES` pages and refused; one larger than
    /// `MAX_BYTES` is refused; an error status is named.
    #[tokio::test]
    async fn a_report_past_its_caps_is_refused() {
        let endless = json!({"object": "page", "data": [], "has_more": true, "next_page": "p"});
        let (base, asked, _serving) =
            supplier(http("200 OK", endless.to_string().as_bytes())).await;
        let e = read_from(&base).await.unwrap_err();
        assert!(e.contains("more than 20 pages"), "{e}");
        assert_eq!(asked.load(std::sync::atomic::Ordering::SeqCst), MAX_PAGES);
        let huge = vec![b' '; MAX_BYTES + 1];
        let (base, _, _huge) = supplier(http("200 OK", &huge)).await;
        let e = read_from(&base).await.unwrap_err();
        assert!(e.contains("larger than"), "{e}");
        let (base, _, _refusing) = supplier(http("401 Unauthorized", br#"{"error":"no"}"#)).await;
        let e = read_from(&base).await.unwrap_err();
        assert!(e.contains("401"), "{e}");
    }
}
