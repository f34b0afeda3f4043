//! What an operator watches: every metric the Grafana dashboard and the alert rules query is
//! exported by a deployment that served traffic, and the labels stay within bounded sets.

use super::*;
use std::collections::BTreeSet;

const DASHBOARD: &str = include_str!("../../../deploy/grafana/tollgate.json");
const ALERTS: &str = include_str!("../../../deploy/prometheus/alerts.yml");

/// Every `tollgate_…` name in `text`.
fn names_in(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let bytes = text.as_bytes();
    let mut i = 0;
    while let Some(at) = text[i..].find("tollgate_") {
        let start = i + at;
        let mut end = start + "tollgate_".len();
        while end < bytes.len() && (bytes[end].is_ascii_lowercase() || bytes[end] == b'_') {
            end += 1;
        }
        // A name, not the tail of another word (`deploy/grafana/tollgate.json` has none).
        if start == 0 || !(bytes[start - 1].is_ascii_alphanumeric() || bytes[start - 1] == b'_') {
            out.insert(text[start..end].to_string());
        }
        i = end;
    }
    out
}

/// The exposition's sample names and every label name it uses.
fn exported(exposition: &str) -> (BTreeSet<String>, BTreeSet<String>) {
    let (mut names, mut labels) = (BTreeSet::new(), BTreeSet::new());
    for line in exposition
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let name_end = line.find(['{', ' ']).unwrap();
        names.insert(line[..name_end].to_string());
        if let Some(rest) = line[name_end..].strip_prefix('{') {
            let inside = &rest[..rest.rfind('}').unwrap()];
            for pair in inside.split("\",").filter(|p| !p.is_empty()) {
                labels.insert(pair.split('=').next().unwrap().trim().to_string());
            }
        }
    }
    (names, labels)
}

/// An embedded deployment of `text`, serving, and a fresh key of its demo organization.
async fn embedded(text: &str) -> (tollgate::Running, admin_api::demo::DemoKey) {
    let settings = Arc::new(Settings::parse(text, &|_| None).unwrap());
    let app = App::build(settings, Role::Proxy).await.unwrap();
    let state = app.admin_state().unwrap().clone();
    let key = admin_api::demo::demo_key(
        &state.db,
        state.stores.keys.as_ref(),
        &state.hasher,
        state.env,
        1,
    )
    .await
    .unwrap();
    admin_api::services::wallets::reload(&state, key.organization_id)
        .await
        .unwrap();
    (app.start(), key)
}

#[tokio::test]
async fn every_metric_the_dashboard_and_the_alerts_query_is_exported() {
    let mock = MockSupplier::start(MockConfig::default()).await.unwrap();
    let text = config_builder(&mock.base_url(), "http://127.0.0.1:9")
        .set("server", "listen", "127.0.0.1:0")
        .set("metrics", "listen", "127.0.0.1:0")
        .set("metrics", "organization_labels", 5u64)
        .model(
            Model::text("gpt-4o-large", 5.0, 15.0)
                .family("gpt-4o")
                .downgrade_to("gpt-4o-mini"),
        )
        .toml();
    let (running, key) = embedded(&text).await;
    let addresses = running.addresses();
    let base = running.base_url().unwrap();
    let scrape = format!("http://{}/metrics", addresses.metrics.unwrap());
    let http = reqwest::Client::new();

    // Traffic: calls served, a stream, and calls to a model whose only account is down.
    for (model, stream) in [
        ("gpt-4o-mini", false),
        ("gpt-4o-mini", true),
        ("gpt-4o-mini", false),
        ("dead-model", false),
        ("dead-model", false),
    ] {
        let r = http
            .post(format!("{base}/compat/v1/chat/completions"))
            .bearer_auth(&key.api_key)
            .json(&chat(model, stream))
            .send()
            .await
            .unwrap();
        let _ = r.bytes().await.unwrap();
    }
    // The settler books the calls that reached an account (the served ones, and the dead
    // account's failures, charged nothing).
    let exact = |body: &str| -> u64 {
        body.lines()
            .find_map(|l| l.strip_prefix("tollgate_usage_records_total{measurement=\"exact\"} "))
            .map_or(0, |v| v.trim().parse().unwrap())
    };
    let deadline = Instant::now() + Duration::from_secs(15);
    let exposition = loop {
        let body = http
            .get(&scrape)
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        if exact(&body) >= 3 || Instant::now() > deadline {
            break body;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(
        exact(&exposition) >= 3,
        "an embedded admin-api's figures are on the proxy's endpoint: {exposition}"
    );
    let org_label = format!(
        "tollgate_organization_spend_usd_total{{organization=\"{}\"}}",
        key.organization_id
    );
    assert!(exposition.contains(&org_label), "{exposition}");
    assert!(exposition.contains("tollgate_store_up 1"), "{exposition}");
    assert!(
        exposition.contains("tollgate_model_accounts{model=\"gpt-4o-mini\"} 1"),
        "{exposition}"
    );

    let (names, labels) = exported(&exposition);
    let queried: BTreeSet<String> = names_in(DASHBOARD)
        .union(&names_in(ALERTS))
        .cloned()
        .collect();
    assert!(
        queried.len() > 25,
        "the dashboard and the rules query the metrics: {queried:?}"
    );
    let missing: Vec<&String> = queried.iter().filter(|n| !names.contains(*n)).collect();
    assert!(missing.is_empty(), "queried but not exported: {missing:?}");

    // Hygiene: counters end in _total, and labels come from bounded sets (no key or request
    // id; the organization only because organization_labels turned it on, with its cap).
    let allowed: BTreeSet<&str> = [
        "route",
        "model",
        "status",
        "reason",
        "kind",
        "measurement",
        "from",
        "to",
        "layer",
        "account",
        "result",
        "status_class",
        "action",
        "organization",
        "le",
    ]
    .into();
    let unexpected: Vec<&String> = labels
        .iter()
        .filter(|l| !allowed.contains(l.as_str()))
        .collect();
    assert!(
        unexpected.is_empty(),
        "labels outside the documented sets: {unexpected:?}"
    );
    for line in exposition.lines().filter(|l| l.starts_with("# TYPE ")) {
        let mut parts = line["# TYPE ".len()..].split(' ');
        let (name, kind) = (parts.next().unwrap(), parts.next().unwrap());
        assert!(name.starts_with("tollgate_"), "{line}");
        assert_eq!(kind == "counter", name.ends_with("_total"), "{line}");
    }
    running.stop().await.unwrap();
}

mod otlp {
    //! A local OTLP/HTTP collector: keeps every `/v1/traces` body it receives.
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
    use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value::Value};
    use opentelemetry_proto::tonic::trace::v1::Span;
    use prost::Message;
    use std::collections::HashMap;
    use std::sync::{Arc, Mutex};

    pub struct Collector {
        pub url: String,
        bodies: Arc<Mutex<Vec<Vec<u8>>>>,
        _server: tokio::task::JoinHandle<()>,
    }

    /// A span as received, with its service and attributes in a map.
    pub struct Received {
        pub span: Span,
        pub service: String,
        pub attributes: HashMap<String, Value>,
    }

    impl Received {
        pub fn str(&self, key: &str) -> &str {
            match self.attributes.get(key) {
                Some(Value::StringValue(s)) => s,
                other => panic!("{key}: {other:?} in {:?}", self.span.name),
            }
        }

        pub fn int(&self, key: &str) -> i64 {
            match self.attributes.get(key) {
                Some(Value::IntValue(n)) => *n,
                other => panic!("{key}: {other:?} in {:?}", self.span.name),
            }
        }
    }

    fn text(v: &Option<AnyValue>) -> String {
        match v.as_ref().and_then(|v| v.value.as_ref()) {
            Some(Value::StringValue(s)) => s.clone(),
            _ => String::new(),
        }
    }

    fn map(attributes: &[KeyValue]) -> HashMap<String, Value> {
        attributes
            .iter()
            .filter_map(|kv| Some((kv.key.clone(), kv.value.as_ref()?.value.clone()?)))
            .collect()
    }

    impl Collector {
        pub async fn start() -> Collector {
            let bodies = Arc::new(Mutex::new(Vec::new()));
            let kept = bodies.clone();
            let app = axum::Router::new().route(
                "/v1/traces",
                axum::routing::post(move |headers: http::HeaderMap, body: bytes::Bytes| {
                    let kept = kept.clone();
                    async move {
                        assert_eq!(
                            headers.get("content-type").unwrap(),
                            "application/x-protobuf"
                        );
                        kept.lock().unwrap().push(body.to_vec());
                        (
                            [("content-type", "application/x-protobuf")],
                            Vec::<u8>::new(),
                        )
                    }
                }),
            );
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let url = format!("http://{}", listener.local_addr().unwrap());
            #[allow(
                clippy::disallowed_methods,
                reason = "the handle is kept and the server dropped with the test"
            )]
            let server = tokio::spawn(async move {
                axum::serve(listener, app).await.unwrap();
            });
            Collector {
                url,
                bodies,
                _server: server,
            }
        }

        /// Every body received, as bytes (to search for what must never be there).
        pub fn raw(&self) -> Vec<u8> {
            self.bodies.lock().unwrap().concat()
        }

        /// Every span received.
        pub fn spans(&self) -> Vec<Received> {
            let mut out = Vec::new();
            for body in self.bodies.lock().unwrap().iter() {
                let request = ExportTraceServiceRequest::decode(body.as_slice()).unwrap();
                for rs in request.resource_spans {
                    let service = rs
                        .resource
                        .as_ref()
                        .and_then(|r| {
                            r.attributes
                                .iter()
                                .find(|kv| kv.key == "service.name")
                                .map(|kv| text(&kv.value))
                        })
                        .unwrap_or_default();
                    for ss in rs.scope_spans {
                        for span in ss.spans {
                            let attributes = map(&span.attributes);
                            out.push(Received {
                                span,
                                service: service.clone(),
                                attributes,
                            });
                        }
                    }
                }
            }
            out
        }
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[tokio::test]
async fn calls_are_traced_with_the_genai_conventions_and_nothing_secret() {
    let collector = otlp::Collector::start().await;
    let mock = MockSupplier::start(MockConfig::default()).await.unwrap();
    let text = TestConfig::embedded()
        .set("server", "listen", "127.0.0.1:0")
        .set("telemetry", "otlp_endpoint", collector.url.clone())
        .set("telemetry", "service_name", "tollgate-test")
        .model(Model::gpt_4o_mini())
        .model(Model::text("dead-model", 1.0, 1.0))
        .account(Account::openai("mock", &mock.base_url(), &["gpt-4o-mini"]).forward_traceparent())
        .account(Account::openai(
            "dead",
            "http://127.0.0.1:9",
            &["dead-model"],
        ))
        .group(Group::new(1, &["gpt-4o-mini", "dead-model"]))
        .toml();
    let (running, key) = embedded(&text).await;
    let base = running.base_url().unwrap();
    let http = reqwest::Client::builder().no_proxy().build().unwrap();

    // A call inside the client's trace, with a prompt that must never reach a span.
    let (trace_id, client_span) = ("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7");
    let prompt = "the secret prompt zebra-42";
    let r = http
        .post(format!("{base}/compat/v1/chat/completions"))
        .bearer_auth(&key.api_key)
        .header("traceparent", format!("00-{trace_id}-{client_span}-01"))
        .json(&json!({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": prompt}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let answer: Value = r.json().await.unwrap();
    let answer_text = answer["choices"][0]["message"]["content"]
        .as_str()
        .unwrap()
        .to_string();
    // A call whose only account is down, in a trace of its own.
    let r = http
        .post(format!("{base}/compat/v1/chat/completions"))
        .bearer_auth(&key.api_key)
        .json(&chat("dead-model", false))
        .send()
        .await
        .unwrap();
    assert!(r.status().is_server_error(), "{}", r.status());
    // An admin-api request (refused: no token).
    let r = http
        .get(format!("{base}/api/v1/organization/billing/balance"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    // Stopping exports what is queued.
    running.stop().await.unwrap();

    let spans = collector.spans();
    assert!(spans.iter().all(|s| s.service == "tollgate-test"));
    let named = |name: &str| -> Vec<&otlp::Received> {
        spans.iter().filter(|s| s.span.name == name).collect()
    };
    // The call's span continues the client's trace and speaks GenAI.
    let call = named("chat gpt-4o-mini");
    assert_eq!(
        call.len(),
        1,
        "{:?}",
        spans.iter().map(|s| &s.span.name).collect::<Vec<_>>()
    );
    let call = call[0];
    assert_eq!(hex(&call.span.trace_id), trace_id);
    assert_eq!(hex(&call.span.parent_span_id), client_span);
    assert_eq!(call.span.kind, 2, "a server span");
    assert_eq!(call.str("gen_ai.operation.name"), "chat");
    assert_eq!(call.str("gen_ai.provider.name"), "openai");
    assert_eq!(call.str("gen_ai.request.model"), "gpt-4o-mini");
    assert_eq!(call.str("gen_ai.response.model"), "gpt-4o-mini");
    assert!(call.int("gen_ai.usage.input_tokens") > 0);
    assert!(call.int("gen_ai.usage.output_tokens") > 0);
    assert_eq!(call.int("tollgate.organization.id"), key.organization_id);
    assert_eq!(call.int("tollgate.key.id"), key.key_id);
    assert_eq!(call.int("tollgate.group.id"), 1);
    assert_eq!(call.str("tollgate.account"), "mock");
    assert_eq!(call.int("tollgate.attempts"), 1);
    assert_eq!(call.str("tollgate.measurement"), "exact");
    assert!(call.int("tollgate.charged_nanousd") > 0);
    assert_eq!(call.int("http.response.status_code"), 200);
    // Its children: admission, the attempt, settlement, in the same trace.
    for child in ["admission", "upstream attempt", "settlement"] {
        let found: Vec<_> = named(child)
            .into_iter()
            .filter(|s| s.span.parent_span_id == call.span.span_id)
            .collect();
        assert_eq!(found.len(), 1, "{child}");
        assert_eq!(found[0].span.trace_id, call.span.trace_id);
        assert!(found[0].span.start_time_unix_nano >= call.span.start_time_unix_nano);
        assert!(found[0].span.end_time_unix_nano <= call.span.end_time_unix_nano);
    }
    let attempt = named("upstream attempt")
        .into_iter()
        .find(|s| s.span.parent_span_id == call.span.span_id)
        .unwrap();
    assert_eq!(attempt.str("tollgate.account"), "mock");
    assert_eq!(attempt.str("tollgate.outcome"), "200");
    // The account allows it: the supplier was told the call's span.
    let sent = mock.requests();
    let traceparent = sent[0]
        .headers
        .iter()
        .find(|(k, _)| k == "traceparent")
        .map(|(_, v)| v.clone())
        .unwrap();
    assert_eq!(
        traceparent,
        format!("00-{trace_id}-{}-01", hex(&call.span.span_id))
    );

    // The failed call: an attempt cut at the connection, its account cooled, the span an error.
    let failed = named("chat dead-model");
    assert_eq!(failed.len(), 1);
    let failed = failed[0];
    assert_ne!(hex(&failed.span.trace_id), trace_id, "a trace of its own");
    assert!(failed.span.parent_span_id.is_empty(), "a root");
    assert_eq!(failed.span.status.as_ref().unwrap().code, 2, "an error");
    let attempt = named("upstream attempt")
        .into_iter()
        .find(|s| s.span.parent_span_id == failed.span.span_id)
        .unwrap();
    assert_eq!(attempt.str("tollgate.outcome"), "connection_failed");
    assert_eq!(attempt.str("tollgate.cooldown.reason"), "unreachable");
    assert!(attempt.int("tollgate.cooldown.ms") > 0);

    // admin-api's request: its route's template, its status.
    let admin = named("GET /api/v1/organization/billing/balance");
    assert_eq!(admin.len(), 1);
    assert_eq!(admin[0].int("http.response.status_code"), 401);

    // Nothing secret: no key, no supplier credential, no prompt, no answer.
    let raw = collector.raw();
    let contains = |needle: &str| raw.windows(needle.len()).any(|w| w == needle.as_bytes());
    assert!(
        contains("gpt-4o-mini"),
        "the search reads the exported strings"
    );
    for secret in [
        key.api_key.as_str(),
        "sk-mock-supplier",
        prompt,
        answer_text.as_str(),
    ] {
        assert!(!contains(secret), "{secret:?} reached the collector");
    }
}
