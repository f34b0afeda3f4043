//! Partner top-ups through Stripe Checkout, against a local stand-in for Stripe's two endpoints
//! (`POST /v1/checkout/sessions`, `GET /v1/checkout/sessions/{id}`): the hosted URL returned, the
//! webhook's signature checks (unsigned, badly signed, stale: 400 and nothing credited), one
//! credit per paid session whatever the replays and the order of events, and closed sessions.

use super::*;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode as Http};
use axum::routing::{get, post};
use std::collections::HashMap;
use std::sync::Mutex;

const SECRET_KEY: &str = "sk_test_standin";
const WEBHOOK_SECRET: &str = "whsec_standin_secret";

#[derive(Default)]
struct Stripe {
    sessions: HashMap<String, Value>,
    /// Idempotency-Key → session id.
    by_key: HashMap<String, String>,
    /// Create calls received: (idempotency key, decoded form).
    creates: Vec<(String, HashMap<String, String>)>,
    down: bool,
    base: String,
}

type Shared = std::sync::Arc<Mutex<Stripe>>;

fn decode(s: &str) -> String {
    let bytes = s.replace('+', " ").into_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap();
            out.push(u8::from_str_radix(hex, 16).unwrap());
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).unwrap()
}

async fn create(
    State(s): State<Shared>,
    headers: HeaderMap,
    body: String,
) -> (Http, axum::Json<Value>) {
    let mut st = s.lock().unwrap();
    if st.down {
        return (
            Http::SERVICE_UNAVAILABLE,
            axum::Json(json!({"error": {"message": "down"}})),
        );
    }
    if headers.get("authorization").and_then(|v| v.to_str().ok())
        != Some(&format!("Bearer {SECRET_KEY}"))
    {
        return (
            Http::UNAUTHORIZED,
            axum::Json(json!({"error": {"message": "Invalid API Key"}})),
        );
    }
    let key = headers
        .get("idempotency-key")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    let form: HashMap<String, String> = body
        .split('&')
        .filter_map(|p| p.split_once('='))
        .map(|(k, v)| (decode(k), decode(v)))
        .collect();
    st.creates.push((key.clone(), form.clone()));
    if let Some(id) = st.by_key.get(&key) {
        return (Http::OK, axum::Json(st.sessions[id].clone()));
    }
    let id = format!("cs_test_{}", st.sessions.len() + 1);
    let session = json!({
        "id": id, "object": "checkout.session",
        "url": format!("{}/pay/{id}", st.base),
        "status": "open", "payment_status": "unpaid",
        "amount_total": form["line_items[0][price_data][unit_amount]"].parse::<i64>().unwrap(),
        "currency": form["line_items[0][price_data][currency]"],
        "client_reference_id": form["client_reference_id"],
    });
    st.sessions.insert(id.clone(), session.clone());
    st.by_key.insert(key, id);
    (Http::OK, axum::Json(session))
}

async fn read(State(s): State<Shared>, Path(id): Path<String>) -> (Http, axum::Json<Value>) {
    let st = s.lock().unwrap();
    if st.down {
        return (
            Http::SERVICE_UNAVAILABLE,
            axum::Json(json!({"error": {"message": "down"}})),
        );
    }
    match st.sessions.get(&id) {
        Some(v) => (Http::OK, axum::Json(v.clone())),
        None => (
            Http::NOT_FOUND,
            axum::Json(json!({"error": {"message": "No such checkout.session"}})),
        ),
    }
}

struct StandIn {
    state: Shared,
    base: String,
    _tasks: JoinSet<()>,
}

impl StandIn {
    async fn start() -> StandIn {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let state: Shared = Shared::default();
        state.lock().unwrap().base = base.clone();
        let app = axum::Router::new()
            .route("/v1/checkout/sessions", post(create))
            .route("/v1/checkout/sessions/{id}", get(read))
            .with_state(state.clone());
        let mut tasks = JoinSet::new();
        tasks.spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        StandIn {
            state,
            base,
            _tasks: tasks,
        }
    }

    fn set(&self, id: &str, field: &str, value: Value) {
        self.state.lock().unwrap().sessions.get_mut(id).unwrap()[field] = value;
    }
}

fn payments_config(base: &str) -> String {
    format!(
        r#"
[payments]
provider = "stripe"
stripe_secret_key = "{SECRET_KEY}"
stripe_webhook_secret = "{WEBHOOK_SECRET}"
stripe_api_base = "{base}"
"#
    )
}

fn event(id: &str, kind: &str, session: &str) -> String {
    json!({"id": id, "object": "event", "type": kind,
        "data": {"object": {"id": session, "object": "checkout.session"}}})
    .to_string()
}

impl Api {
    /// Delivers `body` to the webhook with `signature` (`None`: unsigned).
    async fn deliver(&self, body: &str, signature: Option<String>) -> (StatusCode, Value) {
        let mut req = self
            .http
            .post(format!("{}/billing/webhooks/stripe", self.base))
            .header("content-type", "application/json")
            .body(body.to_string());
        if let Some(sig) = signature {
            req = req.header("stripe-signature", sig);
        }
        let resp = req.send().await.unwrap();
        let status = resp.status();
        (status, resp.json().await.unwrap_or(Value::Null))
    }

    /// Creates a top-up of `usd` for `owner` and returns its Checkout Session id (from the URL).
    async fn checkout(&self, owner: &Partner, usd: u64) -> String {
        let (s, v) = self
            .write(
                owner,
                Method::POST,
                "/funding/top-up-sessions",
                Some(&json!({ "amount_usd": usd })),
            )
            .await;
        assert_eq!(s, 200, "{v}");
        let url = v["data"]["url"].as_str().unwrap();
        url.rsplit('/').next().unwrap().to_string()
    }

    async fn signed(&self, body: &str) -> (StatusCode, Value) {
        let now = chrono::Utc::now().timestamp();
        let sig = admin_api::payments::sign(body.as_bytes(), WEBHOOK_SECRET, now);
        self.deliver(body, Some(sig)).await
    }
}

#[tokio::test]
async fn a_paid_checkout_session_credits_partner_funding_exactly_once() {
    let stripe = StandIn::start().await;
    let api = Api::start_with(&payments_config(&stripe.base)).await;
    let owner = api.owner("10").await;
    let available = |f: &Value| f["available_funding_usd"].as_f64().unwrap();
    assert_eq!(available(&api.funding(&owner).await), 10.0);

    // Amounts Stripe cannot take: fractions of a cent, below 0.50 USD. Nothing reaches Stripe.
    for amount in [json!(10.005), json!(0.49)] {
        let (s, v) = api
            .write(
                &owner,
                Method::POST,
                "/funding/top-up-sessions",
                Some(&json!({"amount_usd": amount})),
            )
            .await;
        assert_error(s, &v, 400, "INVALID_PARTNER_TOP_UP_AMOUNT");
    }
    assert!(stripe.state.lock().unwrap().creates.is_empty());

    // A session for 25 USD: Stripe's hosted URL comes back; a replay of the write is the same.
    let body = json!({"amount_usd": 25});
    let key = api.next_key();
    let (s, _, first, _) = api
        .call(
            Method::POST,
            Some(&owner.token),
            "/partner/v1/funding/top-up-sessions",
            Some(&body),
            Some(&key),
        )
        .await;
    assert_eq!(s, 200, "{first}");
    let url = first["data"]["url"].as_str().unwrap().to_string();
    assert!(
        url.starts_with(&format!("{}/pay/cs_test_", stripe.base)),
        "{url}"
    );
    let (s, headers, replay, _) = api
        .call(
            Method::POST,
            Some(&owner.token),
            "/partner/v1/funding/top-up-sessions",
            Some(&body),
            Some(&key),
        )
        .await;
    assert_eq!(s, 200);
    assert_eq!(headers["idempotent-replayed"], "true");
    assert_eq!(replay["data"]["url"], url.as_str());
    let (created, form) = {
        let st = stripe.state.lock().unwrap();
        assert_eq!(st.creates.len(), 1, "one create call");
        st.creates[0].clone()
    };
    assert!(created.starts_with("tollgate-top-up-"), "{created}");
    assert_eq!(form["mode"], "payment");
    assert_eq!(form["line_items[0][price_data][unit_amount]"], "2500");
    assert_eq!(form["line_items[0][price_data][currency]"], "usd");
    assert_eq!(form["metadata[partner_id]"], owner.id.to_string());
    let session = url.rsplit('/').next().unwrap().to_string();

    // Unsigned, badly signed, stale, or signed with another secret: 400, nothing credited.
    stripe.set(&session, "payment_status", json!("paid"));
    stripe.set(&session, "status", json!("complete"));
    let completed = event("evt_1", "checkout.session.completed", &session);
    let now = chrono::Utc::now().timestamp();
    for sig in [
        None,
        Some("garbage".to_string()),
        Some(admin_api::payments::sign(
            completed.as_bytes(),
            "whsec_other",
            now,
        )),
        Some(admin_api::payments::sign(
            completed.as_bytes(),
            WEBHOOK_SECRET,
            now - 3600,
        )),
        Some(admin_api::payments::sign(b"{}", WEBHOOK_SECRET, now)),
    ] {
        let (s, v) = api.deliver(&completed, sig.clone()).await;
        assert_eq!(s, 400, "{sig:?}: {v}");
        assert!(
            v["error"]["message"]
                .as_str()
                .unwrap()
                .contains("signature"),
            "{v}"
        );
    }
    assert_eq!(available(&api.funding(&owner).await), 10.0);

    // Signed: credited once; the replay, a second event of the same payment and a late
    // `expired` change nothing.
    let (s, v) = api.signed(&completed).await;
    assert_eq!(
        (s.as_u16(), &v["outcome"]),
        (200, &json!("credited")),
        "{v}"
    );
    assert_eq!(available(&api.funding(&owner).await), 35.0);
    for body in [
        completed.clone(),
        event(
            "evt_2",
            "checkout.session.async_payment_succeeded",
            &session,
        ),
        event("evt_3", "checkout.session.expired", &session),
    ] {
        let (s, v) = api.signed(&body).await;
        assert_eq!(
            (s.as_u16(), &v["outcome"]),
            (200, &json!("already_credited")),
            "{v}"
        );
    }
    assert_eq!(available(&api.funding(&owner).await), 35.0);
    // Other event types are acknowledged and ignored.
    let (s, v) = api
        .signed(&event("evt_4", "payment_intent.created", &session))
        .await;
    assert_eq!((s.as_u16(), &v["outcome"]), (200, &json!("ignored")));
}

#[tokio::test]
async fn unpaid_expired_and_unreachable_sessions_credit_nothing() {
    let stripe = StandIn::start().await;
    let api = Api::start_with(&payments_config(&stripe.base)).await;
    let owner = api.owner("0").await;
    let available = |f: &Value| f["available_funding_usd"].as_f64().unwrap();
    let session = api.checkout(&owner, 40).await;

    // Completed but not paid yet (a delayed payment method): pending, nothing credited.
    let (s, v) = api
        .signed(&event("evt_a", "checkout.session.completed", &session))
        .await;
    assert_eq!((s.as_u16(), &v["outcome"]), (200, &json!("pending")), "{v}");
    // Stripe unreachable while reading the session back: 5xx (Stripe delivers again), nothing
    // credited; once it answers and the payment failed, the top-up is closed.
    stripe.state.lock().unwrap().down = true;
    let failed = event("evt_b", "checkout.session.async_payment_failed", &session);
    let (s, v) = api.signed(&failed).await;
    assert!(s.is_server_error(), "{s} {v}");
    assert_eq!(v["reason"], "PAYMENT_PROVIDER_UNAVAILABLE");
    stripe.state.lock().unwrap().down = false;
    let (s, v) = api.signed(&failed).await;
    assert_eq!((s.as_u16(), &v["outcome"]), (200, &json!("closed")), "{v}");
    assert_eq!(available(&api.funding(&owner).await), 0.0);

    // Another session expires unpaid: closed; a forged "paid" event for it cannot credit,
    // because the session read back from Stripe is not paid.
    let other = api.checkout(&owner, 5).await;
    stripe.set(&other, "status", json!("expired"));
    let (s, v) = api
        .signed(&event("evt_c", "checkout.session.expired", &other))
        .await;
    assert_eq!((s.as_u16(), &v["outcome"]), (200, &json!("closed")), "{v}");
    let (s, v) = api
        .signed(&event(
            "evt_d",
            "checkout.session.async_payment_succeeded",
            &other,
        ))
        .await;
    assert_eq!((s.as_u16(), &v["outcome"]), (200, &json!("closed")), "{v}");
    // A paid amount that differs from the top-up's: nothing credited.
    let third = api.checkout(&owner, 7).await;
    stripe.set(&third, "payment_status", json!("paid"));
    stripe.set(&third, "amount_total", json!(70));
    let (s, v) = api
        .signed(&event("evt_e", "checkout.session.completed", &third))
        .await;
    assert_eq!(
        (s.as_u16(), &v["outcome"]),
        (200, &json!("mismatch")),
        "{v}"
    );
    // A session this deployment never created.
    let (s, v) = api
        .signed(&event("evt_f", "checkout.session.completed", "cs_test_404"))
        .await;
    assert!(
        s.is_server_error() || v["outcome"] == "unknown_session",
        "{s} {v}"
    );
    assert_eq!(available(&api.funding(&owner).await), 0.0);

    // Stripe down when creating: 502 PAYMENT_PROVIDER_UNAVAILABLE, nothing stored.
    stripe.state.lock().unwrap().down = true;
    let (s, v) = api
        .write(
            &owner,
            Method::POST,
            "/funding/top-up-sessions",
            Some(&json!({"amount_usd": 9})),
        )
        .await;
    assert_error(s, &v, 502, "PAYMENT_PROVIDER_UNAVAILABLE");
}

/// Without a payment provider the webhook route does not exist for this deployment (404, nothing
/// credited), and a delivery larger than the webhook's body limit is refused (413) before it is
/// read.
#[tokio::test]
async fn the_webhook_needs_a_provider_and_bounds_its_body() {
    let plain = Api::start().await;
    let owner = plain.owner("5").await;
    let body = event("evt_x", "checkout.session.completed", "cs_test_1");
    let (s, v) = plain.signed(&body).await;
    assert_eq!(s, 404, "{v}");
    assert!(v["error"]["message"].is_string(), "{v}");
    assert_eq!(
        plain.funding(&owner).await["available_funding_usd"],
        5,
        "nothing credited"
    );

    let stripe = StandIn::start().await;
    let api = Api::start_with(&payments_config(&stripe.base)).await;
    let huge = format!("{{\"id\":\"{}\"}}", "x".repeat(300 * 1024));
    let (s, _) = api.signed(&huge).await;
    assert_eq!(s, 413);
}
