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
    /// Automatic recharge (issue 32): customers made, SetupIntents, PaymentIntents by id and by
    /// Idempotency-Key, the charge calls received (key, form), and whether cards decline.
    customers: Vec<String>,
    setup_intents: HashMap<String, Value>,
    payment_intents: HashMap<String, Value>,
    pi_by_key: HashMap<String, String>,
    charges: Vec<(String, HashMap<String, String>)>,
    decline: bool,
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
    if form.get("mode").map(String::as_str) == Some("setup") {
        let seti = format!("seti_{}", st.setup_intents.len() + 1);
        st.setup_intents.insert(
            seti.clone(),
            json!({"id": seti, "object": "setup_intent", "status": "requires_payment_method",
                "payment_method": null, "customer": form["customer"]}),
        );
        let session = json!({
            "id": id, "object": "checkout.session", "mode": "setup",
            "url": format!("{}/pay/{id}", st.base),
            "status": "open", "payment_status": "no_payment_required",
            "setup_intent": seti, "customer": form["customer"],
            "client_reference_id": form["client_reference_id"],
        });
        st.sessions.insert(id.clone(), session.clone());
        st.by_key.insert(key, id);
        return (Http::OK, axum::Json(session));
    }
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

fn form_of(body: &str) -> HashMap<String, String> {
    body.split('&')
        .filter_map(|p| p.split_once('='))
        .map(|(k, v)| (decode(k), decode(v)))
        .collect()
}

fn authorized(headers: &HeaderMap) -> bool {
    headers.get("authorization").and_then(|v| v.to_str().ok())
        == Some(&format!("Bearer {SECRET_KEY}"))
}

async fn create_customer(
    State(s): State<Shared>,
    headers: HeaderMap,
    body: String,
) -> (Http, axum::Json<Value>) {
    let mut st = s.lock().unwrap();
    if st.down || !authorized(&headers) {
        return (
            Http::SERVICE_UNAVAILABLE,
            axum::Json(json!({"error": {"message": "no"}})),
        );
    }
    let form = form_of(&body);
    let id = format!("cus_{}", st.customers.len() + 1);
    st.customers.push(id.clone());
    (
        Http::OK,
        axum::Json(
            json!({"id": id, "object": "customer", "metadata": {"partner_id": form["metadata[partner_id]"]}}),
        ),
    )
}

async fn read_setup_intent(
    State(s): State<Shared>,
    Path(id): Path<String>,
) -> (Http, axum::Json<Value>) {
    let st = s.lock().unwrap();
    match st.setup_intents.get(&id) {
        Some(v) => (Http::OK, axum::Json(v.clone())),
        None => (
            Http::NOT_FOUND,
            axum::Json(json!({"error": {"message": "No such setup_intent"}})),
        ),
    }
}

/// `POST /v1/payment_intents` (confirm, off-session): one PaymentIntent per Idempotency-Key;
/// declined cards answer Stripe's 402 `card_error` with the PaymentIntent it made.
async fn create_payment_intent(
    State(s): State<Shared>,
    headers: HeaderMap,
    body: String,
) -> (Http, axum::Json<Value>) {
    let mut st = s.lock().unwrap();
    if st.down || !authorized(&headers) {
        return (
            Http::SERVICE_UNAVAILABLE,
            axum::Json(json!({"error": {"message": "no"}})),
        );
    }
    let key = headers
        .get("idempotency-key")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    let form = form_of(&body);
    st.charges.push((key.clone(), form.clone()));
    let decline = st.decline;
    let declined = |pi: &Value| {
        (
            Http::PAYMENT_REQUIRED,
            axum::Json(
                json!({"error": {"type": "card_error", "code": "card_declined",
                "decline_code": "insufficient_funds", "message": "Your card has insufficient funds.",
                "payment_intent": pi}}),
            ),
        )
    };
    if let Some(id) = st.pi_by_key.get(&key) {
        let pi = st.payment_intents[id].clone();
        if pi["status"] == "requires_payment_method" {
            return declined(&pi);
        }
        return (Http::OK, axum::Json(pi));
    }
    let id = format!("pi_{}", st.payment_intents.len() + 1);
    let amount: i64 = form["amount"].parse().unwrap();
    let metadata: serde_json::Map<String, Value> = form
        .iter()
        .filter_map(|(k, v)| {
            k.strip_prefix("metadata[")
                .and_then(|k| k.strip_suffix(']'))
                .map(|k| (k.to_string(), json!(v)))
        })
        .collect();
    let pi = json!({"id": id, "object": "payment_intent", "amount": amount,
        "amount_received": if decline { 0 } else { amount }, "currency": form["currency"],
        "status": if decline { "requires_payment_method" } else { "succeeded" },
        "customer": form["customer"], "payment_method": form["payment_method"],
        "metadata": metadata});
    st.payment_intents.insert(id.clone(), pi.clone());
    st.pi_by_key.insert(key, id);
    if decline {
        return declined(&pi);
    }
    (Http::OK, axum::Json(pi))
}

async fn read_payment_intent(
    State(s): State<Shared>,
    Path(id): Path<String>,
) -> (Http, axum::Json<Value>) {
    let st = s.lock().unwrap();
    match st.payment_intents.get(&id) {
        Some(v) => (Http::OK, axum::Json(v.clone())),
        None => (
            Http::NOT_FOUND,
            axum::Json(json!({"error": {"message": "No such payment_intent"}})),
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
            .route("/v1/customers", post(create_customer))
            .route("/v1/setup_intents/{id}", get(read_setup_intent))
            .route("/v1/payment_intents", post(create_payment_intent))
            .route("/v1/payment_intents/{id}", get(read_payment_intent))
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

    /// The cardholder finishes setup session `id`: the session completes and its SetupIntent
    /// succeeds with card `card`.
    fn complete_setup(&self, id: &str, card: &str) {
        let mut st = self.state.lock().unwrap();
        let session = st.sessions.get_mut(id).unwrap();
        session["status"] = json!("complete");
        let seti = session["setup_intent"].as_str().unwrap().to_string();
        let intent = st.setup_intents.get_mut(&seti).unwrap();
        intent["status"] = json!("succeeded");
        intent["payment_method"] = json!(card);
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

fn pi_event(id: &str, kind: &str, intent: &str) -> String {
    json!({"id": id, "object": "event", "type": kind,
        "data": {"object": {"id": intent, "object": "payment_intent"}}})
    .to_string()
}

/// Automatic recharge (issue 32): a card saved by a setup-mode Checkout Session; below the
/// threshold, one off-session charge per crossing (one Idempotency-Key, even with several
/// watchers at once); funding credited only by the signed webhook, exactly once through replays
/// and reordered events; a declined card stops the rule and mails the owners.
#[tokio::test]
async fn automatic_recharge_charges_once_per_crossing_and_credits_by_webhook_only() {
    recharge_on(None).await;
    if let Some(url) = testkit::redis_url() {
        let stores = Stores::redis(&url, &testkit::redis_prefix("recharge"))
            .await
            .unwrap();
        recharge_on(Some(stores)).await;
    }
}

/// The recharge scenario on the in-memory store (`None`) or on `stores`.
async fn recharge_on(stores: Option<Stores>) {
    use admin_api::services::watch::watch_once;
    let stripe = StandIn::start().await;
    let config = payments_config(&stripe.base);
    let api = match stores {
        Some(s) => Api::start_on(&config, s).await,
        None => Api::start_with(&config).await,
    };
    let owner = api.owner("100").await;
    super::console::joined(&api, None, Some(owner.id), "pat@acme.example", "owner").await;
    let available = |f: &Value| f["available_funding_usd"].as_f64().unwrap();

    // Bad rules, and a card session before any rule.
    for body in [
        json!({"below_usd": 50, "amount_usd": 0.25}),
        json!({"below_usd": 50, "amount_usd": 10.005}),
        json!({"below_usd": -1, "amount_usd": 10}),
        json!({"amount_usd": 10}),
        json!({"below_usd": 50, "amount_usd": 10, "card": "x"}),
    ] {
        let (s, v) = api
            .write(&owner, Method::PUT, "/funding/recharge", Some(&body))
            .await;
        assert_error(s, &v, 400, "INVALID_PARTNER_RECHARGE");
    }
    let (s, v) = api
        .write(
            &owner,
            Method::POST,
            "/funding/recharge/card-sessions",
            None,
        )
        .await;
    assert_error(s, &v, 409, "RECHARGE_RULE_REQUIRED");
    let (s, v) = api
        .write(
            &owner,
            Method::PUT,
            "/funding/recharge",
            Some(&json!({"below_usd": 50, "amount_usd": 200})),
        )
        .await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["data"]["rule"]["status"], "needs_card");

    // The card: a setup-mode session at Stripe, completed by the cardholder, its webhook.
    let (s, v) = api
        .write(
            &owner,
            Method::POST,
            "/funding/recharge/card-sessions",
            None,
        )
        .await;
    assert_eq!(s, 200, "{v}");
    let session = v["data"]["url"]
        .as_str()
        .unwrap()
        .rsplit('/')
        .next()
        .unwrap()
        .to_string();
    {
        let st = stripe.state.lock().unwrap();
        let (_, form) = st.creates.last().unwrap();
        assert_eq!(form["mode"], "setup");
        assert_eq!(form["customer"], "cus_1");
    }
    // Before the cardholder finished: nothing saved.
    let (_, out) = api
        .signed(&event("evt_s0", "checkout.session.completed", &session))
        .await;
    assert_eq!(out["outcome"], "pending", "{out}");
    stripe.complete_setup(&session, "pm_card_1");
    let (s, out) = api
        .signed(&event("evt_s1", "checkout.session.completed", &session))
        .await;
    assert_eq!(
        (s.as_u16(), &out["outcome"]),
        (200, &json!("card_saved")),
        "{out}"
    );
    let (_, out) = api
        .signed(&event("evt_s1", "checkout.session.completed", &session))
        .await;
    assert_eq!(out["outcome"], "already_done", "a replay: {out}");
    let (_, v) = api.get(&owner, "/funding/recharge").await;
    assert_eq!(v["data"]["rule"]["status"], "active", "{v}");
    assert_eq!(v["data"]["rule"]["card_saved"], true);

    // Above the threshold: nothing. Funding falls to 40 (a customer's allocation): several
    // watchers at once make one charge, under one key; funding is not credited yet.
    assert_eq!(watch_once(&api.state).await.unwrap().recharged, 0);
    api.active_customer(&owner, "drain", 70.0, 1.0).await;
    let low = available(&api.funding(&owner).await);
    assert!(low < 50.0, "{low}");
    let second = admin_api::AppState::connect(api.state.settings.clone(), api.state.stores.clone())
        .await
        .unwrap();
    let passes = futures_util::future::join_all(
        (0..6).map(|i| watch_once(if i % 2 == 0 { &api.state } else { &second })),
    )
    .await;
    let recharged: usize = passes.iter().map(|p| p.as_ref().unwrap().recharged).sum();
    assert_eq!(recharged, 1, "{passes:?}");
    let (key, form) = {
        let st = stripe.state.lock().unwrap();
        assert_eq!(st.charges.len(), 1, "one charge call");
        st.charges[0].clone()
    };
    assert_eq!(key, format!("tollgate-recharge-{}-1", owner.id));
    assert_eq!(
        (
            form["amount"].as_str(),
            form["off_session"].as_str(),
            form["payment_method"].as_str()
        ),
        ("20000", "true", "pm_card_1")
    );
    assert_eq!(
        available(&api.funding(&owner).await),
        low,
        "credited only by the webhook"
    );
    assert_eq!(
        watch_once(&api.state).await.unwrap().recharged,
        0,
        "once per crossing"
    );

    // The webhook credits it once; a replay and a late, reordered failure event change nothing.
    let (_, out) = api
        .signed(&pi_event("evt_p1", "payment_intent.succeeded", "pi_1"))
        .await;
    assert_eq!(out["outcome"], "credited", "{out}");
    assert_eq!(available(&api.funding(&owner).await), low + 200.0);
    for (id, kind) in [
        ("evt_p1", "payment_intent.succeeded"),
        ("evt_p0", "payment_intent.payment_failed"),
    ] {
        let (s, out) = api.signed(&pi_event(id, kind, "pi_1")).await;
        assert_eq!(
            (s.as_u16(), &out["outcome"]),
            (200, &json!("already_done")),
            "{kind}: {out}"
        );
    }
    assert_eq!(available(&api.funding(&owner).await), low + 200.0);
    assert_eq!(
        super::rules::webhook_events(&api, "funding.recharge_succeeded").await,
        1,
        "one webhook event per credited recharge, replays none"
    );
    // A forged event (unsigned) credits nothing.
    let (s, _) = api
        .deliver(&pi_event("evt_x", "payment_intent.succeeded", "pi_1"), None)
        .await;
    assert_eq!(s, 400);

    // Back above re-arms; the next crossing's card is declined: the rule stops, owners are told.
    assert_eq!(watch_once(&api.state).await.unwrap().recharged, 0);
    api.active_customer(&owner, "drain-2", 220.0, 1.0).await;
    let low = available(&api.funding(&owner).await);
    assert!(low < 50.0, "{low}");
    // Stripe does not answer the charge: the attempt waits without a PaymentIntent and the next
    // pass asks again under the same key (never a second charge).
    stripe.state.lock().unwrap().down = true;
    assert_eq!(watch_once(&api.state).await.unwrap(), Default::default());
    let (_, v) = api.get(&owner, "/funding/recharge").await;
    assert_eq!(v["data"]["attempts"][0]["status"], "pending", "{v}");
    {
        let mut st = stripe.state.lock().unwrap();
        st.down = false;
        st.decline = true;
    }
    let pass = watch_once(&api.state).await.unwrap();
    assert_eq!((pass.recharged, pass.declined), (0, 1));
    assert_eq!(
        stripe.state.lock().unwrap().charges[1].0,
        format!("tollgate-recharge-{}-3", owner.id),
        "the crossing's own key"
    );
    let (_, v) = api.get(&owner, "/funding/recharge").await;
    assert_eq!(v["data"]["rule"]["status"], "stopped", "{v}");
    assert!(
        v["data"]["rule"]["stop_reason"]
            .as_str()
            .unwrap()
            .contains("insufficient funds"),
        "{v}"
    );
    assert_eq!(v["data"]["attempts"][0]["status"], "declined");
    assert_eq!(v["data"]["attempts"][1]["status"], "succeeded");
    let told: Vec<String> = std::fs::read_dir(&api.outbox)
        .unwrap()
        .filter_map(|e| std::fs::read_to_string(e.unwrap().path()).ok())
        .filter(|m| m.contains("Automatic recharge declined"))
        .collect();
    assert_eq!(told.len(), 1);
    assert!(told[0].contains("pat@acme.example"), "{}", told[0]);
    // Its webhook (payment_failed) is a replay of what is known; stopped rules charge nothing.
    let (_, out) = api
        .signed(&pi_event("evt_p2", "payment_intent.payment_failed", "pi_2"))
        .await;
    assert_eq!(out["outcome"], "already_done", "{out}");
    assert_eq!(
        super::rules::webhook_events(&api, "funding.recharge_failed").await,
        1
    );
    assert_eq!(watch_once(&api.state).await.unwrap(), Default::default());
    assert_eq!(stripe.state.lock().unwrap().charges.len(), 2);
    assert_eq!(available(&api.funding(&owner).await), low);
}

/// The dashboard's Funding page sets the automatic recharge, sends the browser to Stripe's page
/// that saves a card, and removes it; a viewer may not, even with a forged post.
#[tokio::test]
async fn the_dashboard_sets_the_recharge_and_opens_the_card_page() {
    use super::console::joined;
    let stripe = StandIn::start().await;
    let api = Api::start_with(&payments_config(&stripe.base)).await;
    let owner = api.owner("100").await;
    let mut olga = joined(&api, None, Some(owner.id), "olga@acme.example", "admin").await;
    let path = format!("/console/partners/{}/funding", owner.id);
    let page = olga.get(&path).await;
    assert!(
        page.body.contains("No automatic recharge is set."),
        "{}",
        page.body
    );
    let csrf = page.csrf();
    let bad = olga
        .post(
            &format!("{path}/recharge"),
            &[
                ("csrf", &csrf),
                ("action", "set"),
                ("below_usd", "50"),
                ("amount_usd", "0.1"),
            ],
            None,
        )
        .await;
    assert_eq!(bad.status, 400, "{}", bad.body);
    assert!(bad.body.contains("whole cents"), "{}", bad.body);
    let set = olga
        .post(
            &format!("{path}/recharge"),
            &[
                ("csrf", &csrf),
                ("action", "set"),
                ("below_usd", "50"),
                ("amount_usd", "125"),
            ],
            None,
        )
        .await;
    assert_eq!(set.status, 200, "{}", set.body);
    assert!(
        set.body.contains(
            "charged <strong><data value=\"125\" title=\"125 USD\">125.00</data> USD</strong>"
        ) && set.body.contains("waiting for a saved card"),
        "{}",
        set.body
    );
    let card = olga
        .post(
            &format!("{path}/recharge"),
            &[("csrf", &csrf), ("action", "card")],
            None,
        )
        .await;
    assert_eq!(card.status, 303, "{}", card.body);
    assert!(
        card.location()
            .starts_with(&format!("{}/pay/cs_test_", stripe.base)),
        "{}",
        card.location()
    );
    let mut viewer = joined(&api, None, Some(owner.id), "vic@acme.example", "viewer").await;
    let seen = viewer.get(&path).await;
    assert!(
        !seen.body.contains("Save automatic recharge"),
        "{}",
        seen.body
    );
    let forged = viewer
        .post(
            &format!("{path}/recharge"),
            &[("csrf", &seen.csrf()), ("action", "remove")],
            None,
        )
        .await;
    assert_eq!(forged.status, 403);
    let (_, v) = api.get(&owner, "/funding/recharge").await;
    assert_eq!(v["data"]["rule"]["amount_usd"], 125, "{v}");
    let removed = olga
        .post(
            &format!("{path}/recharge"),
            &[("csrf", &csrf), ("action", "remove")],
            None,
        )
        .await;
    assert!(
        removed.body.contains("The automatic recharge was removed."),
        "{}",
        removed.body
    );
    let (_, v) = api.get(&owner, "/funding/recharge").await;
    assert_eq!(v["data"]["rule"], Value::Null);
}

/// Without a payment provider a card cannot be saved: 409 `RECHARGE_PROVIDER_REQUIRED`, and
/// nothing reaches any provider.
#[tokio::test]
async fn a_card_needs_a_payment_provider() {
    let api = Api::start().await;
    let owner = api.owner("100").await;
    let (s, _) = api
        .write(
            &owner,
            Method::PUT,
            "/funding/recharge",
            Some(&json!({"below_usd": 50, "amount_usd": 100})),
        )
        .await;
    assert_eq!(s, 200);
    let (s, v) = api
        .write(
            &owner,
            Method::POST,
            "/funding/recharge/card-sessions",
            None,
        )
        .await;
    assert_error(s, &v, 409, "RECHARGE_PROVIDER_REQUIRED");
    assert_eq!(api.count("recharge_setups").await, 0);
}
