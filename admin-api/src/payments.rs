//! Stripe for partner funding (`[payments] provider = "stripe"`): Checkout Sessions for top-ups
//! (payment mode) and for saving a card (setup mode, issue 32's automatic recharge), the saved
//! card's Customer and SetupIntent, off-session PaymentIntents charging it, reading each back,
//! and verifying the `Stripe-Signature` of a webhook.
//!
//! Only the two API calls the flow needs, over one HTTPS client (hyper with rustls, ring and the
//! system's roots, 15 s timeout): `POST /v1/checkout/sessions` (form-encoded, an `Idempotency-Key` derived
//! from our top-up id, so a retried create returns the same session) and
//! `GET /v1/checkout/sessions/{id}`. Webhook events are acted on after reading the session back:
//! its current `payment_status`, amount and currency decide, not the event's copy (events may
//! arrive late, twice or out of order). Facts used here: `../shared/notes/payments.md`.

use bytes::Bytes;
use hmac::{Hmac, Mac};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde::Deserialize;
use settings::Stripe;
use sha2::Sha256;
use std::time::Duration;

/// Longest a Stripe call may take, connecting included.
const CALL_TIMEOUT: Duration = Duration::from_secs(15);

/// What a Stripe call failed with.
#[derive(Debug, thiserror::Error)]
pub enum PaymentError {
    #[error("payment provider unreachable: {0}")]
    Unreachable(String),
    #[error("payment provider refused the call ({status}): {message}")]
    Refused { status: u16, message: String },
    #[error("payment provider answered something unexpected: {0}")]
    Unexpected(String),
}

/// The fields of a Checkout Session the top-up flow reads.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
pub struct CheckoutSession {
    pub id: String,
    /// The hosted payment page (present while the session is open).
    #[serde(default)]
    pub url: Option<String>,
    /// `open`, `complete` or `expired`.
    #[serde(default)]
    pub status: Option<String>,
    /// `paid`, `unpaid` or `no_payment_required`.
    #[serde(default)]
    pub payment_status: Option<String>,
    /// In the currency's minor unit (cents).
    #[serde(default)]
    pub amount_total: Option<i64>,
    #[serde(default)]
    pub currency: Option<String>,
    #[serde(default)]
    pub client_reference_id: Option<String>,
    /// `payment` or `setup`.
    #[serde(default)]
    pub mode: Option<String>,
    /// A setup session's SetupIntent (`seti_…`).
    #[serde(default)]
    pub setup_intent: Option<String>,
    #[serde(default)]
    pub customer: Option<String>,
}

/// A Stripe Customer (the owner of a saved card).
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
pub struct Customer {
    pub id: String,
}

/// The fields of a SetupIntent the recharge flow reads.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
pub struct SetupIntent {
    pub id: String,
    /// `succeeded` once the card is saved.
    #[serde(default)]
    pub status: Option<String>,
    /// The saved card (`pm_…`).
    #[serde(default)]
    pub payment_method: Option<String>,
    #[serde(default)]
    pub customer: Option<String>,
}

/// The fields of a PaymentIntent the recharge flow reads.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
pub struct PaymentIntent {
    pub id: String,
    /// `succeeded`, `processing`, `requires_payment_method` (declined), `requires_action`, …
    #[serde(default)]
    pub status: Option<String>,
    /// In the currency's minor unit.
    #[serde(default)]
    pub amount: Option<i64>,
    #[serde(default)]
    pub amount_received: Option<i64>,
    #[serde(default)]
    pub currency: Option<String>,
    #[serde(default)]
    pub metadata: std::collections::HashMap<String, String>,
}

/// What an off-session charge came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Charge {
    /// The PaymentIntent exists (succeeded, processing, …); funding is credited only by its
    /// webhook.
    Created(PaymentIntent),
    /// The card was declined (or needs the cardholder, which off-session cannot ask): Stripe's
    /// 402 `card_error`, with the PaymentIntent it made when it made one.
    Declined {
        payment_intent: Option<String>,
        message: String,
    },
}

impl CheckoutSession {
    /// Whether the money is in: Stripe's fulfilment rule (`paid`, or nothing to pay).
    pub fn is_paid(&self) -> bool {
        matches!(
            self.payment_status.as_deref(),
            Some("paid" | "no_payment_required")
        )
    }
}

/// A Stripe client for one configuration.
#[derive(Clone)]
pub struct StripeClient {
    http: Client<hyper_rustls::HttpsConnector<HttpConnector>, Full<Bytes>>,
    conf: Stripe,
}

impl std::fmt::Debug for StripeClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StripeClient")
            .field("conf", &self.conf)
            .finish_non_exhaustive()
    }
}

impl StripeClient {
    pub fn new(conf: &Stripe) -> Result<StripeClient, String> {
        let mut roots = rustls::RootCertStore::empty();
        let native = rustls_native_certs::load_native_certs();
        for cert in native.certs {
            let _ = roots.add(cert);
        }
        let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
        let tls = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("payments: TLS set-up: {e}"))?
            .with_root_certificates(roots)
            .with_no_client_auth();
        let mut tcp = HttpConnector::new();
        tcp.enforce_http(false);
        tcp.set_connect_timeout(Some(Duration::from_secs(5)));
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .wrap_connector(tcp);
        let http = Client::builder(TokioExecutor::new()).build(connector);
        Ok(StripeClient {
            http,
            conf: conf.clone(),
        })
    }

    /// The configuration this client uses.
    pub fn conf(&self) -> &Stripe {
        &self.conf
    }

    fn url(&self, path: &str) -> String {
        format!(
            "{}{path}",
            self.conf.api_base.as_str().trim_end_matches('/')
        )
    }

    /// Creates the Checkout Session of top-up `top_up_id` for `cents` (one line item).
    pub async fn create_session(
        &self,
        top_up_id: i64,
        partner_id: i64,
        cents: i64,
    ) -> Result<CheckoutSession, PaymentError> {
        let form: Vec<(&str, String)> = vec![
            ("mode", "payment".into()),
            ("line_items[0][quantity]", "1".into()),
            (
                "line_items[0][price_data][currency]",
                self.conf.currency.clone(),
            ),
            ("line_items[0][price_data][unit_amount]", cents.to_string()),
            (
                "line_items[0][price_data][product_data][name]",
                "Gateway partner funding".into(),
            ),
            ("success_url", self.conf.success_url.to_string()),
            ("cancel_url", self.conf.cancel_url.to_string()),
            ("client_reference_id", top_up_id.to_string()),
            ("metadata[top_up_id]", top_up_id.to_string()),
            ("metadata[partner_id]", partner_id.to_string()),
        ];
        let body = url::form_urlencoded::Serializer::new(String::new())
            .extend_pairs(&form)
            .finish();
        let request = self
            .request(http::Method::POST, "/v1/checkout/sessions")
            .header("idempotency-key", format!("tollgate-top-up-{top_up_id}"))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(Full::new(Bytes::from(body)));
        self.session_from(request).await
    }

    /// A form POST to `path` under `idempotency_key`.
    fn post_form(
        &self,
        path: &str,
        idempotency_key: &str,
        form: &[(&str, String)],
    ) -> Result<http::Request<Full<Bytes>>, http::Error> {
        let body = url::form_urlencoded::Serializer::new(String::new())
            .extend_pairs(form)
            .finish();
        self.request(http::Method::POST, path)
            .header("idempotency-key", idempotency_key)
            .header("content-type", "application/x-www-form-urlencoded")
            .body(Full::new(Bytes::from(body)))
    }

    /// Creates the Stripe Customer of partner `partner_id`'s saved card.
    pub async fn create_customer(&self, partner_id: i64) -> Result<Customer, PaymentError> {
        let form = [
            ("description", format!("Tollgate partner {partner_id}")),
            ("metadata[partner_id]", partner_id.to_string()),
        ];
        let request = self.post_form(
            "/v1/customers",
            &format!("tollgate-customer-{partner_id}"),
            &form,
        );
        self.typed(request).await
    }

    /// Creates the setup-mode Checkout Session `setup_id` that saves a card for `customer`.
    pub async fn create_setup_session(
        &self,
        setup_id: i64,
        partner_id: i64,
        customer: &str,
    ) -> Result<CheckoutSession, PaymentError> {
        let form = [
            ("mode", "setup".to_string()),
            ("customer", customer.to_string()),
            ("currency", self.conf.currency.clone()),
            ("payment_method_types[0]", "card".into()),
            ("success_url", self.conf.success_url.to_string()),
            ("cancel_url", self.conf.cancel_url.to_string()),
            ("client_reference_id", format!("recharge-setup-{setup_id}")),
            ("metadata[purpose]", "recharge_setup".into()),
            ("metadata[partner_id]", partner_id.to_string()),
            (
                "setup_intent_data[metadata][partner_id]",
                partner_id.to_string(),
            ),
        ];
        let request = self.post_form(
            "/v1/checkout/sessions",
            &format!("tollgate-recharge-setup-{setup_id}"),
            &form,
        );
        self.typed(request).await
    }

    /// Reads a SetupIntent back.
    pub async fn setup_intent(&self, id: &str) -> Result<SetupIntent, PaymentError> {
        check_id(id)?;
        let request = self
            .request(http::Method::GET, &format!("/v1/setup_intents/{id}"))
            .body(Full::new(Bytes::new()));
        self.typed(request).await
    }

    /// Reads a PaymentIntent back.
    pub async fn payment_intent(&self, id: &str) -> Result<PaymentIntent, PaymentError> {
        check_id(id)?;
        let request = self
            .request(http::Method::GET, &format!("/v1/payment_intents/{id}"))
            .body(Full::new(Bytes::new()));
        self.typed(request).await
    }

    /// Charges the saved card off-session: a confirmed PaymentIntent of `cents` under
    /// `idempotency_key` (one per crossing, so a retried call never charges twice).
    pub async fn charge(
        &self,
        attempt_id: i64,
        partner_id: i64,
        customer: &str,
        payment_method: &str,
        cents: i64,
        idempotency_key: &str,
    ) -> Result<Charge, PaymentError> {
        let form = [
            ("amount", cents.to_string()),
            ("currency", self.conf.currency.clone()),
            ("customer", customer.to_string()),
            ("payment_method", payment_method.to_string()),
            ("off_session", "true".into()),
            ("confirm", "true".into()),
            (
                "description",
                "Tollgate partner funding (automatic recharge)".into(),
            ),
            ("metadata[purpose]", "recharge".into()),
            ("metadata[partner_id]", partner_id.to_string()),
            ("metadata[recharge_attempt_id]", attempt_id.to_string()),
        ];
        let request = self.post_form("/v1/payment_intents", idempotency_key, &form);
        let request = request.map_err(|e| PaymentError::Unexpected(e.to_string()))?;
        let (status, bytes) = self.send(request).await?;
        if (200..300).contains(&status) {
            return serde_json::from_slice(&bytes)
                .map(Charge::Created)
                .map_err(|e| PaymentError::Unexpected(e.to_string()));
        }
        let v: serde_json::Value = serde_json::from_slice(&bytes).unwrap_or_default();
        let error = &v["error"];
        if status == 402 || error["type"] == "card_error" {
            return Ok(Charge::Declined {
                payment_intent: error["payment_intent"]["id"].as_str().map(str::to_string),
                message: error["message"]
                    .as_str()
                    .unwrap_or("the card was declined")
                    .to_string(),
            });
        }
        Err(PaymentError::Refused {
            status,
            message: error["message"].as_str().unwrap_or_default().to_string(),
        })
    }

    /// Sends `request`; (status, body).
    async fn send(
        &self,
        request: http::Request<Full<Bytes>>,
    ) -> Result<(u16, Bytes), PaymentError> {
        let call = async {
            let resp = self
                .http
                .request(request)
                .await
                .map_err(|e| PaymentError::Unreachable(e.to_string()))?;
            let status = resp.status().as_u16();
            let bytes = resp
                .into_body()
                .collect()
                .await
                .map_err(|e| PaymentError::Unreachable(e.to_string()))?
                .to_bytes();
            Ok::<_, PaymentError>((status, bytes))
        };
        tokio::time::timeout(CALL_TIMEOUT, call)
            .await
            .map_err(|_| PaymentError::Unreachable("timed out".into()))?
    }

    /// Sends `request` and reads a 2xx answer as `T` (anything else: `Refused`).
    async fn typed<T: serde::de::DeserializeOwned>(
        &self,
        request: Result<http::Request<Full<Bytes>>, http::Error>,
    ) -> Result<T, PaymentError> {
        let request = request.map_err(|e| PaymentError::Unexpected(e.to_string()))?;
        let (status, bytes) = self.send(request).await?;
        if !(200..300).contains(&status) {
            let message = serde_json::from_slice::<serde_json::Value>(&bytes)
                .ok()
                .and_then(|v| v["error"]["message"].as_str().map(str::to_string))
                .unwrap_or_else(|| String::from_utf8_lossy(&bytes).chars().take(200).collect());
            return Err(PaymentError::Refused { status, message });
        }
        serde_json::from_slice(&bytes).map_err(|e| PaymentError::Unexpected(e.to_string()))
    }

    fn request(&self, method: http::Method, path: &str) -> http::request::Builder {
        http::Request::builder()
            .method(method)
            .uri(self.url(path))
            .header("authorization", format!("Bearer {}", self.conf.secret_key))
            .header("user-agent", "tollgate")
    }

    /// Reads a Checkout Session back (its current state).
    pub async fn session(&self, id: &str) -> Result<CheckoutSession, PaymentError> {
        check_id(id)?;
        let request = self
            .request(http::Method::GET, &format!("/v1/checkout/sessions/{id}"))
            .body(Full::new(Bytes::new()));
        self.session_from(request).await
    }

    async fn session_from(
        &self,
        request: Result<http::Request<Full<Bytes>>, http::Error>,
    ) -> Result<CheckoutSession, PaymentError> {
        self.typed(request).await
    }
}

/// An id Stripe gave, safe in a path.
fn check_id(id: &str) -> Result<(), PaymentError> {
    if id.is_empty() || !id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
        return Err(PaymentError::Unexpected(format!("id {id:?}")));
    }
    Ok(())
}

/// Why a webhook's signature was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    #[error("no Stripe-Signature header")]
    Missing,
    #[error("the Stripe-Signature header has no timestamp or no v1 signature")]
    Malformed,
    #[error("the signature's timestamp is outside the tolerance")]
    Stale,
    #[error("no v1 signature matches")]
    Mismatch,
}

/// HMAC-SHA256 under the endpoint `secret` of Stripe's signed payload: `"{t}.{body}"`.
fn signed_payload(secret: &str, t: i64, body: &[u8]) -> Option<Hmac<Sha256>> {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).ok()?;
    mac.update(t.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    Some(mac)
}

/// Verifies `Stripe-Signature` (`t=<unix seconds>,v1=<hex>[,v1=<hex>…]`, other schemes ignored)
/// over the raw `body`: HMAC-SHA256 keyed with the endpoint secret over `"{t}.{body}"`, compared
/// in constant time with every `v1` (several appear while a secret is rolled); the timestamp must
/// be within `tolerance` seconds of `now` either way.
pub fn verify_signature(
    header: Option<&str>,
    body: &[u8],
    secret: &str,
    now: i64,
    tolerance: u64,
) -> Result<(), SignatureError> {
    let header = header.ok_or(SignatureError::Missing)?;
    let mut timestamp: Option<i64> = None;
    let mut signatures: Vec<Vec<u8>> = Vec::new();
    for part in header.split(',') {
        let Some((k, v)) = part.trim().split_once('=') else {
            continue;
        };
        match k {
            "t" => timestamp = v.parse().ok(),
            "v1" => {
                if let Ok(sig) = hex::decode(v) {
                    signatures.push(sig);
                }
            }
            _ => {}
        }
    }
    let t = timestamp.ok_or(SignatureError::Malformed)?;
    if signatures.is_empty() {
        return Err(SignatureError::Malformed);
    }
    if now.abs_diff(t) > tolerance {
        return Err(SignatureError::Stale);
    }
    let mac = signed_payload(secret, t, body).ok_or(SignatureError::Mismatch)?;
    // `verify_slice` compares in constant time.
    if signatures
        .iter()
        .any(|sig| mac.clone().verify_slice(sig).is_ok())
    {
        return Ok(());
    }
    Err(SignatureError::Mismatch)
}

/// The `Stripe-Signature` header Stripe would send for `body` at `t` (tests and the stand-in).
pub fn sign(body: &[u8], secret: &str, t: i64) -> String {
    match signed_payload(secret, t, body) {
        Some(mac) => format!("t={t},v1={}", hex::encode(mac.finalize().into_bytes())),
        None => String::new(),
    }
}

/// The parts of a webhook event the flow reads.
#[derive(Debug, Clone, Deserialize)]
pub struct Event {
    pub id: String,
    #[serde(rename = "type")]
    pub kind: String,
    pub data: EventData,
}

#[derive(Debug, Clone, Deserialize)]
pub struct EventData {
    pub object: serde_json::Value,
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "whsec_test_secret";

    #[test]
    fn a_signature_verifies_only_with_its_secret_body_and_time() {
        let body = br#"{"id":"evt_1"}"#;
        let header = sign(body, SECRET, 1_000);
        assert_eq!(
            verify_signature(Some(&header), body, SECRET, 1_000, 300),
            Ok(())
        );
        assert_eq!(
            verify_signature(Some(&header), body, SECRET, 1_300, 300),
            Ok(())
        );
        assert_eq!(
            verify_signature(Some(&header), body, SECRET, 1_301, 300),
            Err(SignatureError::Stale)
        );
        assert_eq!(
            verify_signature(Some(&header), body, SECRET, 699, 300),
            Err(SignatureError::Stale),
            "far in the future too"
        );
        assert_eq!(
            verify_signature(Some(&header), b"{\"id\":\"evt_2\"}", SECRET, 1_000, 300),
            Err(SignatureError::Mismatch)
        );
        assert_eq!(
            verify_signature(Some(&header), body, "whsec_other", 1_000, 300),
            Err(SignatureError::Mismatch)
        );
        assert_eq!(
            verify_signature(None, body, SECRET, 1_000, 300),
            Err(SignatureError::Missing)
        );
        for bad in ["", "t=1000", "v1=abcd", "t=x,v1=abcd", "garbage"] {
            assert_eq!(
                verify_signature(Some(bad), body, SECRET, 1_000, 300),
                Err(SignatureError::Malformed),
                "{bad}"
            );
        }
    }

    #[test]
    fn any_v1_may_match_and_other_schemes_are_ignored() {
        let body = b"{}";
        let good = sign(body, SECRET, 50);
        let v1 = good.split_once("v1=").map(|(_, v)| v).unwrap_or_default();
        let rolled = format!("t=50,v1={},v0=deadbeef,v1={v1}", "00".repeat(32));
        assert_eq!(
            verify_signature(Some(&rolled), body, SECRET, 50, 300),
            Ok(())
        );
        let only_v0 = format!("t=50,v0={v1}");
        assert_eq!(
            verify_signature(Some(&only_v0), body, SECRET, 50, 300),
            Err(SignatureError::Malformed)
        );
    }

    #[test]
    fn form_bodies_keep_brackets_and_encode_values() {
        let body = url::form_urlencoded::Serializer::new(String::new())
            .extend_pairs([
                ("line_items[0][quantity]", "1"),
                ("success_url", "https://x.example/a b?c=d"),
            ])
            .finish();
        assert_eq!(
            body,
            "line_items%5B0%5D%5Bquantity%5D=1&success_url=https%3A%2F%2Fx.example%2Fa+b%3Fc%3Dd"
        );
    }
}
