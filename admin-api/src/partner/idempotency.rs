//! `Idempotency-Key` on every partner write (SPEC conventions; TESTING I-1…I-12).
//!
//! - The key is required on PUT, POST and DELETE: exactly one header, 1 to 255 visible ASCII
//!   characters, else 400 `IDEMPOTENCY_KEY_REQUIRED`. Keys are scoped to the partner.
//! - The fingerprint is method + path + the canonical JSON body (object keys sorted, numbers
//!   compared by decimal value, so `10` and `10.0` are the same request).
//! - The claim is one atomic insert on the unique (partner, key) index. A second request with the
//!   key while the first runs gets 409 `IDEMPOTENCY_IN_PROGRESS` (a claim older than 90 s is
//!   taken over: its process died). Another fingerprint gets 409 `IDEMPOTENCY_KEY_CONFLICT`.
//! - What is stored: successes and business refusals after execution started (e.g. 403
//!   `PARTNER_FUNDING_INSUFFICIENT`, 409 `PARTNER_CUSTOMER_SLUG_EXISTS`), replayed byte-identical
//!   with `Idempotent-Replayed: true`. Not stored (the key can be retried): validation errors (the
//!   handler validates before claiming) and server failures (the transaction rolled back).
//! - Secrets are never stored: the success is stored in its redacted form (no `data.key`, no
//!   `activation.invite_url`), which is also what a replay returns.
//! - A success is recorded in the same database transaction as its effects, so a crash can never
//!   leave an effect without its record (and thus execute twice).
//! - Records are kept 24 hours; after that the key is new again.

use crate::caller::Caller;
use crate::db::begin;
use crate::dto::Envelope;
use crate::error::ApiError;
use crate::services::effects::{Effect, Written, apply};
use crate::state::AppState;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use chrono::{Duration as ChronoDuration, Utc};
use entities::idempotency_records as rec;
use entities::status::RecordState;
use futures_util::future::BoxFuture;
use rust_decimal::Decimal;
use sea_orm::sea_query::OnConflict;
use sea_orm::{
    ActiveModelTrait, ColumnTrait, ConnectionTrait, DatabaseTransaction, EntityTrait, QueryFilter,
    Set,
};
use serde::Serialize;
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::str::FromStr;

/// Header carrying the key.
pub const HEADER: &str = "idempotency-key";
/// A claim older than this belongs to a dead process and may be taken over.
const LOCK_TIMEOUT_SECS: i64 = 90;
/// How long records are kept.
pub const RETENTION_HOURS: i64 = 24;

/// A write's identity: its key and what it asked.
#[derive(Debug, Clone)]
pub struct Request {
    pub key: String,
    pub method: String,
    pub path: String,
    pub fingerprint: String,
}

impl Request {
    /// Reads and validates the key; fingerprints the request.
    pub fn new(
        headers: &HeaderMap,
        method: &str,
        path: &str,
        body: &Value,
    ) -> Result<Request, ApiError> {
        let mut values = headers.get_all(HEADER).iter();
        let key = match (values.next(), values.next()) {
            (Some(v), None) => v.to_str().map_err(|_| ApiError::IdempotencyKeyRequired)?,
            _ => return Err(ApiError::IdempotencyKeyRequired),
        };
        if key.is_empty() || key.len() > 255 || !key.bytes().all(|b| (0x21..=0x7e).contains(&b)) {
            return Err(ApiError::IdempotencyKeyRequired);
        }
        let mut h = Sha256::new();
        h.update(method.as_bytes());
        h.update(b" ");
        h.update(path.as_bytes());
        h.update(b"\n");
        h.update(canonical(body).as_bytes());
        Ok(Request {
            key: key.to_string(),
            method: method.to_string(),
            path: path.to_string(),
            fingerprint: hex::encode(h.finalize()),
        })
    }
}

/// Canonical JSON: sorted keys, numbers as normalized decimals.
pub fn canonical(v: &Value) -> String {
    match v {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            let inner: Vec<String> = keys
                .into_iter()
                .map(|k| format!("{}:{}", Value::String(k.clone()), canonical(&map[k])))
                .collect();
            format!("{{{}}}", inner.join(","))
        }
        Value::Array(items) => format!(
            "[{}]",
            items.iter().map(canonical).collect::<Vec<_>>().join(",")
        ),
        Value::Number(n) => Decimal::from_str(&n.to_string())
            .or_else(|_| Decimal::from_scientific(&n.to_string()))
            .map(|d| d.normalize().to_string())
            .unwrap_or_else(|_| n.to_string()),
        other => other.to_string(),
    }
}

/// The work of a write, run inside its transaction. Its second argument is the operation's
/// reference, unique per claimed execution (partner, idempotency record id and claim time): ledger
/// postings derive their references from it, so a retried execution can never post twice and a
/// key reused after the retention period can never collide with an old posting.
pub type Work<'a, T> = Box<
    dyn for<'t> FnOnce(
            &'t DatabaseTransaction,
            String,
        ) -> BoxFuture<'t, Result<Written<T>, ApiError>>
        + Send
        + 'a,
>;

enum Claim {
    Claimed(i64, String),
    Replay(u16, String),
}

/// Runs `work` at most once per (partner, key), replaying its stored outcome afterwards.
pub async fn execute<T: Serialize>(
    state: &AppState,
    caller: &Caller,
    req: Request,
    work: Work<'_, T>,
) -> Response {
    match run(state, caller, req, work).await {
        Ok(r) => r,
        Err(e) => e.into_response(),
    }
}

async fn run<T: Serialize>(
    state: &AppState,
    caller: &Caller,
    req: Request,
    work: Work<'_, T>,
) -> Result<Response, ApiError> {
    let (record_id, op) = match claim(state, caller.partner_id, &req).await? {
        Claim::Claimed(id, op) => (id, op),
        Claim::Replay(status, body) => return Ok(replay(status, body)),
    };
    let txn = begin(&state.db).await?;
    match work(&txn, op).await {
        Ok(success) => {
            let stored = serde_json::to_string(&Envelope::ok(&success.stored)).map_err(|e| {
                tracing::error!(error = %e, "cannot serialize a write's response");
                ApiError::Internal
            })?;
            complete(&txn, record_id, StatusCode::OK.as_u16(), &stored).await?;
            if let Err(e) = txn.commit().await {
                for effect in &success.effects {
                    if let Effect::ReloadWalletIfAborted { org } = effect {
                        state.wallet_stale(*org);
                    }
                }
                return Err(e.into());
            }
            apply(state, success.effects).await;
            Ok((StatusCode::OK, axum::Json(Envelope::ok(success.data))).into_response())
        }
        Err(e) if e.is_business_outcome() => {
            txn.rollback().await?;
            let (status, _, _) = e.parts();
            let body = serde_json::to_string(&e.body()).map_err(|_| ApiError::Internal)?;
            complete(&state.db, record_id, status.as_u16(), &body).await?;
            Ok(e.into_response())
        }
        Err(e) => {
            txn.rollback().await?;
            rec::Entity::delete_by_id(record_id).exec(&state.db).await?;
            Err(e)
        }
    }
}

fn replay(status: u16, body: String) -> Response {
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::OK);
    let mut response = (
        status,
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        body,
    )
        .into_response();
    response
        .headers_mut()
        .insert("idempotent-replayed", HeaderValue::from_static("true"));
    response
}

async fn claim(state: &AppState, partner_id: i64, req: &Request) -> Result<Claim, ApiError> {
    for _ in 0..2 {
        let now = Utc::now();
        let inserted = rec::Entity::insert(rec::ActiveModel {
            partner_id: Set(partner_id),
            idem_key: Set(req.key.clone()),
            method: Set(req.method.clone()),
            path: Set(req.path.clone()),
            fingerprint: Set(req.fingerprint.clone()),
            state: Set(RecordState::InProgress),
            response_status: Set(None),
            response_body: Set(None),
            created_at: Set(now),
            locked_at: Set(now),
            ..Default::default()
        })
        .on_conflict(
            OnConflict::columns([rec::Column::PartnerId, rec::Column::IdemKey])
                .do_nothing()
                .to_owned(),
        )
        .exec_without_returning(&state.db)
        .await?;
        let existing = rec::Entity::find()
            .filter(rec::Column::PartnerId.eq(partner_id))
            .filter(rec::Column::IdemKey.eq(req.key.as_str()))
            .one(&state.db)
            .await?
            .ok_or(ApiError::Internal)?;
        if inserted == 1 {
            return Ok(Claim::Claimed(
                existing.id,
                op_reference(partner_id, &existing),
            ));
        }
        if existing.created_at < now - ChronoDuration::hours(RETENTION_HOURS) {
            rec::Entity::delete_by_id(existing.id)
                .exec(&state.db)
                .await?;
            continue;
        }
        if existing.fingerprint != req.fingerprint {
            return Err(ApiError::IdempotencyKeyConflict);
        }
        if existing.state == RecordState::Completed {
            let status = existing.response_status.unwrap_or(200);
            let body = existing.response_body.unwrap_or_default();
            return Ok(Claim::Replay(u16::try_from(status).unwrap_or(200), body));
        }
        if existing.locked_at > now - ChronoDuration::seconds(LOCK_TIMEOUT_SECS) {
            return Err(ApiError::IdempotencyInProgress);
        }
        // The owner died: take the claim over, unless someone else just did.
        let taken = rec::Entity::update_many()
            .col_expr(rec::Column::LockedAt, sea_orm::sea_query::Expr::value(now))
            .filter(rec::Column::Id.eq(existing.id))
            .filter(rec::Column::LockedAt.eq(existing.locked_at))
            .filter(rec::Column::State.eq(RecordState::InProgress))
            .exec(&state.db)
            .await?;
        return if taken.rows_affected == 1 {
            Ok(Claim::Claimed(
                existing.id,
                op_reference(partner_id, &existing),
            ))
        } else {
            Err(ApiError::IdempotencyInProgress)
        };
    }
    Err(ApiError::IdempotencyInProgress)
}

fn op_reference(partner_id: i64, record: &rec::Model) -> String {
    format!(
        "p{partner_id}:w{}:{}",
        record.id,
        record.created_at.timestamp_micros()
    )
}

async fn complete(
    db: &impl ConnectionTrait,
    id: i64,
    status: u16,
    body: &str,
) -> Result<(), ApiError> {
    rec::ActiveModel {
        id: Set(id),
        state: Set(RecordState::Completed),
        response_status: Set(Some(i32::from(status))),
        response_body: Set(Some(body.to_string())),
        ..Default::default()
    }
    .update(db)
    .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn canonical_ignores_order_spacing_and_number_form() {
        let a: Value =
            serde_json::from_str(r#"{"b": 10, "a": {"y": [1, 2.50], "x": "s"}}"#).unwrap();
        let b: Value = serde_json::from_str(r#"{"a":{"x":"s","y":[1.0,2.5]},"b":10.0}"#).unwrap();
        assert_eq!(canonical(&a), canonical(&b));
        assert_ne!(canonical(&json!({"b": 10})), canonical(&json!({"b": 11})));
    }

    #[test]
    fn keys_are_validated() {
        let mut h = HeaderMap::new();
        assert_eq!(
            Request::new(&h, "PUT", "/x", &Value::Null).unwrap_err(),
            ApiError::IdempotencyKeyRequired
        );
        h.insert(HEADER, HeaderValue::from_static(""));
        assert!(Request::new(&h, "PUT", "/x", &Value::Null).is_err());
        h.insert(HEADER, HeaderValue::from_str(&"k".repeat(256)).unwrap());
        assert!(Request::new(&h, "PUT", "/x", &Value::Null).is_err());
        h.insert(HEADER, HeaderValue::from_static("a b"));
        assert!(Request::new(&h, "PUT", "/x", &Value::Null).is_err());
        h.insert(HEADER, HeaderValue::from_static("key-1"));
        h.append(HEADER, HeaderValue::from_static("key-2"));
        assert!(Request::new(&h, "PUT", "/x", &Value::Null).is_err());
        let mut h = HeaderMap::new();
        h.insert(HEADER, HeaderValue::from_static("key-1"));
        let a = Request::new(&h, "PUT", "/x", &json!({"a": 1})).unwrap();
        let b = Request::new(&h, "PUT", "/y", &json!({"a": 1})).unwrap();
        assert_ne!(
            a.fingerprint, b.fingerprint,
            "another route is another request"
        );
    }
}
