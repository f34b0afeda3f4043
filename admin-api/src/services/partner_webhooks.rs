//! Partner webhooks (issue 45; DESIGN §6e): the endpoints a partner registers (owners, admins
//! and operators through the partner API's write rules; the dashboard's owners and admins), the
//! outbox ([`emit`], called in the transaction of the change that causes an event, so an event
//! exists exactly when its change committed), the delivery log and redelivery. Delivering is
//! `workers::webhooks`.

use crate::caller::Caller;
use crate::dto::{Webhook, WebhookAttempt, WebhookDeliveries, WebhookDelivery, WebhookRequest};
use crate::services::effects::Written;
use crate::services::fault::Fault;
use crate::services::sealing::{self, Purpose};
use crate::state::AppState;
use crate::webhooks::address;
use chrono::{DateTime, Duration, SecondsFormat, Utc};
use entities::{webhook_attempts, webhook_deliveries, webhook_endpoints, webhook_events};
use sea_orm::sea_query::OnConflict;
use sea_orm::{
    ActiveModelTrait, ColumnTrait, ConnectionTrait, DbErr, EntityTrait, PaginatorTrait,
    QueryFilter, QueryOrder, QuerySelect, Set,
};
use serde_json::Value;

/// Why a webhook change or read was refused.
#[derive(Debug, PartialEq, thiserror::Error)]
pub enum WebhookError {
    /// A field is wrong; the text says which.
    #[error("invalid webhook: {0}")]
    Invalid(String),
    /// No such endpoint of this partner.
    #[error("webhook endpoint not found")]
    NotFound,
    /// No such delivery of this endpoint.
    #[error("webhook delivery not found")]
    DeliveryNotFound,
    #[error("a partner has at most {max} webhook endpoints")]
    Limit { max: u64 },
    #[error(transparent)]
    Fault(Fault),
}
super::fault::faults!(WebhookError);

/// Every event type, in the order the docs list them.
pub const EVENT_TYPES: [&str; 8] = [
    "customer.activated",
    "organization.balance_low",
    "key.budget_exceeded",
    "funding.balance_low",
    "funding.recharge_succeeded",
    "funding.recharge_failed",
    "invitation.expired",
    "statement.ready",
];

/// Endpoints a partner may have.
pub const MAX_ENDPOINTS: u64 = 16;
/// Deliveries per page of the log.
pub const PAGE: u64 = 50;
/// Longest description.
const MAX_DESCRIPTION: usize = 200;

pub(super) fn when(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Secs, true)
}

/// An endpoint's fields as asked (absent: unchanged on an update; on a create, `events` absent
/// means every type).
#[derive(Debug, Clone, Default)]
pub struct EndpointInput {
    pub url: Option<String>,
    pub events: Option<Vec<String>>,
    pub description: Option<Option<String>>,
    pub status: Option<String>,
}

impl EndpointInput {
    /// Reads a create (`creating`: `url` required, no `status`) or an update.
    pub fn parse(
        req: WebhookRequest,
        creating: bool,
        allow_private: bool,
    ) -> Result<EndpointInput, WebhookError> {
        let bad = |m: String| WebhookError::Invalid(m);
        if let Some(name) = req.unknown.keys().next() {
            return Err(bad(format!("unknown field {name:?}")));
        }
        let url = match req.url {
            None if creating => return Err(bad("url is required".into())),
            None => None,
            Some(Value::String(u)) => Some(
                address::check_url(&u, allow_private)
                    .map_err(|e| bad(format!("url: {e}")))?
                    .to_string(),
            ),
            Some(_) => return Err(bad("url must be a string".into())),
        };
        let events = match req.events {
            None => None,
            Some(Value::Array(items)) => {
                let mut out: Vec<String> = Vec::new();
                for item in items {
                    let Some(t) = item.as_str().filter(|t| EVENT_TYPES.contains(t)) else {
                        return Err(bad(format!(
                            "events: each must be one of {}",
                            EVENT_TYPES.join(", ")
                        )));
                    };
                    if !out.iter().any(|o| o == t) {
                        out.push(t.to_string());
                    }
                }
                if out.is_empty() {
                    return Err(bad("events must name at least one event type".into()));
                }
                Some(out)
            }
            Some(_) => return Err(bad("events must be an array of event types".into())),
        };
        let description = match req.description {
            None => None,
            Some(Value::Null) => Some(None),
            Some(Value::String(d)) if d.chars().count() <= MAX_DESCRIPTION => {
                if d.chars().any(char::is_control) {
                    return Err(bad("description must be plain text".into()));
                }
                Some(Some(d))
            }
            Some(_) => {
                return Err(bad(format!(
                    "description must be a string of at most {MAX_DESCRIPTION} characters"
                )));
            }
        };
        let status = match req.status {
            None => None,
            Some(_) if creating => return Err(bad("status is set by PATCH only".into())),
            Some(Value::String(s)) if s == "active" || s == "disabled" => Some(s),
            Some(_) => return Err(bad("status must be active or disabled".into())),
        };
        Ok(EndpointInput {
            url,
            events,
            description,
            status,
        })
    }
}

fn view(row: &webhook_endpoints::Model, secret: Option<String>) -> Webhook {
    Webhook {
        id: row.id,
        url: row.url.clone(),
        events: row.events.split_whitespace().map(str::to_string).collect(),
        description: row.description.clone(),
        status: row.status.clone(),
        secret_preview: row.secret_preview.clone(),
        secret,
        created_at: when(row.created_at),
        updated_at: when(row.updated_at),
    }
}

/// A new signing secret: `whsec_` and 48 hex digits (24 random bytes).
fn new_secret() -> String {
    use rand::Rng;
    let mut bytes = [0u8; 24];
    rand::rng().fill(&mut bytes);
    format!("whsec_{}", hex::encode(bytes))
}

/// The signing secret of `row` (`None`: it cannot be opened with this server's secret).
pub fn secret_of(state: &AppState, row: &webhook_endpoints::Model) -> Option<String> {
    sealing::open(state, Purpose::Webhook, &row.secret_sealed)
        .and_then(|b| String::from_utf8(b).ok())
}

/// `POST /webhooks`: the endpoint, its secret in this answer only.
pub async fn create(
    txn: &impl ConnectionTrait,
    state: &AppState,
    caller: &Caller,
    input: EndpointInput,
) -> Result<Written<Webhook>, WebhookError> {
    let count = webhook_endpoints::Entity::find()
        .filter(webhook_endpoints::Column::PartnerId.eq(caller.partner_id))
        .count(txn)
        .await?;
    if count >= MAX_ENDPOINTS {
        return Err(WebhookError::Limit { max: MAX_ENDPOINTS });
    }
    let secret = new_secret();
    let sealed = sealing::seal(state, Purpose::Webhook, secret.as_bytes())
        .ok_or(Fault::Broken("the signing secret could not be sealed"))?;
    let now = state.clock.now();
    let row = webhook_endpoints::ActiveModel {
        partner_id: Set(caller.partner_id),
        url: Set(input.url.ok_or(Fault::Broken("a create without a url"))?),
        description: Set(input.description.flatten()),
        events: Set(input
            .events
            .unwrap_or_else(|| EVENT_TYPES.iter().map(|t| t.to_string()).collect())
            .join(" ")),
        secret_sealed: Set(sealed),
        secret_preview: Set(secret.chars().take(12).collect()),
        status: Set("active".into()),
        created_at: Set(now),
        updated_at: Set(now),
        ..Default::default()
    }
    .insert(txn)
    .await?;
    Ok(Written {
        data: view(&row, Some(secret)),
        stored: view(&row, None),
        effects: Vec::new(),
    })
}

async fn endpoint(
    db: &impl ConnectionTrait,
    partner: i64,
    id: &str,
) -> Result<webhook_endpoints::Model, WebhookError> {
    let id: i64 = id.parse().map_err(|_| WebhookError::NotFound)?;
    webhook_endpoints::Entity::find_by_id(id)
        .filter(webhook_endpoints::Column::PartnerId.eq(partner))
        .one(db)
        .await?
        .ok_or(WebhookError::NotFound)
}

/// `GET /webhooks`: the partner's endpoints, oldest first.
pub async fn list(db: &impl ConnectionTrait, partner: i64) -> Result<Vec<Webhook>, WebhookError> {
    Ok(webhook_endpoints::Entity::find()
        .filter(webhook_endpoints::Column::PartnerId.eq(partner))
        .order_by_asc(webhook_endpoints::Column::Id)
        .all(db)
        .await?
        .iter()
        .map(|r| view(r, None))
        .collect())
}

/// `GET /webhooks/{id}`.
pub async fn get(
    db: &impl ConnectionTrait,
    partner: i64,
    id: &str,
) -> Result<Webhook, WebhookError> {
    Ok(view(&endpoint(db, partner, id).await?, None))
}

/// `PATCH /webhooks/{id}`: the fields given.
pub async fn update(
    txn: &impl ConnectionTrait,
    state: &AppState,
    caller: &Caller,
    id: &str,
    input: EndpointInput,
) -> Result<Written<Webhook>, WebhookError> {
    let row = endpoint(txn, caller.partner_id, id).await?;
    let mut active: webhook_endpoints::ActiveModel = row.into();
    if let Some(url) = input.url {
        active.url = Set(url);
    }
    if let Some(events) = input.events {
        active.events = Set(events.join(" "));
    }
    if let Some(d) = input.description {
        active.description = Set(d);
    }
    if let Some(s) = input.status {
        active.status = Set(s);
    }
    active.updated_at = Set(state.clock.now());
    let row = active.update(txn).await?;
    Ok(Written::plain(view(&row, None)))
}

/// `DELETE /webhooks/{id}`: the endpoint goes; its pending deliveries fail ("endpoint
/// deleted"); its log stays readable no more (the endpoint is gone).
pub async fn delete(
    txn: &impl ConnectionTrait,
    state: &AppState,
    caller: &Caller,
    id: &str,
) -> Result<Written<Webhook>, WebhookError> {
    use sea_orm::sea_query::Expr;
    let row = endpoint(txn, caller.partner_id, id).await?;
    webhook_deliveries::Entity::update_many()
        .col_expr(webhook_deliveries::Column::Status, Expr::value("failed"))
        .col_expr(
            webhook_deliveries::Column::LastError,
            Expr::value("endpoint deleted"),
        )
        .col_expr(
            webhook_deliveries::Column::UpdatedAt,
            Expr::value(state.clock.now()),
        )
        .filter(webhook_deliveries::Column::EndpointId.eq(row.id))
        .filter(webhook_deliveries::Column::Status.eq("pending"))
        .exec(txn)
        .await?;
    webhook_endpoints::Entity::delete_by_id(row.id)
        .exec(txn)
        .await?;
    Ok(Written::plain(view(&row, None)))
}

fn delivery_view(
    d: &webhook_deliveries::Model,
    event: Option<&webhook_events::Model>,
    attempts: Vec<WebhookAttempt>,
) -> WebhookDelivery {
    WebhookDelivery {
        id: d.id,
        event_id: event.map(|e| e.public_id.clone()).unwrap_or_default(),
        event_type: event.map(|e| e.event_type.clone()).unwrap_or_default(),
        status: d.status.clone(),
        attempts: d.attempts,
        next_attempt_at: (d.status == "pending").then(|| when(d.next_attempt_at)),
        deadline_at: when(d.deadline_at),
        last_status_code: d.last_status,
        last_error: d.last_error.clone(),
        created_at: when(d.created_at),
        succeeded_at: d.succeeded_at.map(when),
        attempt_log: attempts,
    }
}

fn attempt_view(a: &webhook_attempts::Model) -> WebhookAttempt {
    WebhookAttempt {
        attempt: a.attempt,
        started_at: when(a.started_at),
        duration_ms: a.duration_ms,
        status_code: a.status_code,
        response_excerpt: a.answer.clone(),
        error: a.error.clone(),
    }
}

/// Deliveries with their events and attempts, in the order given.
async fn with_log(
    db: &impl ConnectionTrait,
    rows: Vec<webhook_deliveries::Model>,
) -> Result<Vec<WebhookDelivery>, WebhookError> {
    let ids: Vec<i64> = rows.iter().map(|d| d.id).collect();
    let event_ids: Vec<i64> = rows.iter().map(|d| d.event_id).collect();
    let events = webhook_events::Entity::find()
        .filter(webhook_events::Column::Id.is_in(event_ids))
        .all(db)
        .await?;
    let attempts = webhook_attempts::Entity::find()
        .filter(webhook_attempts::Column::DeliveryId.is_in(ids))
        .order_by_asc(webhook_attempts::Column::Id)
        .all(db)
        .await?;
    Ok(rows
        .iter()
        .map(|d| {
            let log = attempts
                .iter()
                .filter(|a| a.delivery_id == d.id)
                .map(attempt_view)
                .collect();
            delivery_view(d, events.iter().find(|e| e.id == d.event_id), log)
        })
        .collect())
}

/// `GET /webhooks/{id}/deliveries?before=`: newest first, [`PAGE`] at a time.
pub async fn deliveries(
    db: &impl ConnectionTrait,
    partner: i64,
    id: &str,
    before: Option<&str>,
) -> Result<WebhookDeliveries, WebhookError> {
    let row = endpoint(db, partner, id).await?;
    let mut q = webhook_deliveries::Entity::find()
        .filter(webhook_deliveries::Column::EndpointId.eq(row.id));
    if let Some(b) = before {
        let b: i64 = b
            .parse()
            .map_err(|_| WebhookError::Invalid("before must be a delivery id".into()))?;
        q = q.filter(webhook_deliveries::Column::Id.lt(b));
    }
    let mut rows = q
        .order_by_desc(webhook_deliveries::Column::Id)
        .limit(PAGE + 1)
        .all(db)
        .await?;
    let more = u64::try_from(rows.len()).unwrap_or(u64::MAX) > PAGE;
    rows.truncate(usize::try_from(PAGE).unwrap_or(usize::MAX));
    let next_before = more.then(|| rows.last().map(|d| d.id)).flatten();
    Ok(WebhookDeliveries {
        deliveries: with_log(db, rows).await?,
        next_before,
    })
}

/// `POST /webhooks/{id}/deliveries/{delivery_id}/redeliver`: the delivery is due again now, with
/// a fresh retry window (its attempts so far stay in the log).
pub async fn redeliver(
    txn: &impl ConnectionTrait,
    state: &AppState,
    caller: &Caller,
    id: &str,
    delivery: &str,
) -> Result<Written<WebhookDelivery>, WebhookError> {
    let row = endpoint(txn, caller.partner_id, id).await?;
    if row.status != "active" {
        return Err(WebhookError::Invalid(
            "the endpoint is disabled: enable it (PATCH status active) first".into(),
        ));
    }
    let delivery: i64 = delivery
        .parse()
        .map_err(|_| WebhookError::DeliveryNotFound)?;
    let d = webhook_deliveries::Entity::find_by_id(delivery)
        .filter(webhook_deliveries::Column::EndpointId.eq(row.id))
        .one(txn)
        .await?
        .ok_or(WebhookError::DeliveryNotFound)?;
    let now = state.clock.now();
    let window =
        Duration::hours(i64::try_from(state.settings.webhooks.retry_window_hours).unwrap_or(72));
    let mut active: webhook_deliveries::ActiveModel = d.into();
    active.status = Set("pending".into());
    active.next_attempt_at = Set(now);
    active.deadline_at = Set(now + window);
    active.claimed_until = Set(None);
    active.claimed_by = Set(None);
    active.updated_at = Set(now);
    let d = active.update(txn).await?;
    let mut views = with_log(txn, vec![d]).await?;
    Ok(Written::plain(
        views
            .pop()
            .ok_or(Fault::Broken("a redelivered delivery vanished"))?,
    ))
}

/// Writes event `event_type` of partner `partner` with `data` into the outbox and one delivery
/// per active endpoint of the partner that takes it, in the caller's transaction. `dedupe`: a
/// key that makes the event once-only (a second emit with it writes nothing). Returns the
/// event's public id, or `None` when the dedupe key was already used.
pub async fn emit(
    txn: &impl ConnectionTrait,
    state: &AppState,
    partner: i64,
    event_type: &'static str,
    data: Value,
    dedupe: Option<String>,
) -> Result<Option<String>, DbErr> {
    debug_assert!(EVENT_TYPES.contains(&event_type));
    let now = state.clock.now();
    let public_id = format!("evt_{}", uuid::Uuid::now_v7().simple());
    let inserted = webhook_events::Entity::insert(webhook_events::ActiveModel {
        public_id: Set(public_id.clone()),
        partner_id: Set(partner),
        event_type: Set(event_type.to_string()),
        data: Set(data.to_string()),
        dedupe_key: Set(dedupe),
        created_at: Set(now),
        ..Default::default()
    })
    .on_conflict(
        OnConflict::column(webhook_events::Column::DedupeKey)
            .do_nothing()
            .to_owned(),
    )
    .exec(txn)
    .await;
    let event_id = match inserted {
        Ok(r) => r.last_insert_id,
        Err(DbErr::RecordNotInserted) => return Ok(None),
        Err(e) => return Err(e),
    };
    let window =
        Duration::hours(i64::try_from(state.settings.webhooks.retry_window_hours).unwrap_or(72));
    let endpoints = webhook_endpoints::Entity::find()
        .filter(webhook_endpoints::Column::PartnerId.eq(partner))
        .filter(webhook_endpoints::Column::Status.eq("active"))
        .all(txn)
        .await?;
    for e in endpoints
        .iter()
        .filter(|e| e.events.split_whitespace().any(|t| t == event_type))
    {
        webhook_deliveries::ActiveModel {
            event_id: Set(event_id),
            endpoint_id: Set(e.id),
            partner_id: Set(partner),
            status: Set("pending".into()),
            attempts: Set(0),
            next_attempt_at: Set(now),
            deadline_at: Set(now + window),
            claimed_until: Set(None),
            claimed_by: Set(None),
            last_status: Set(None),
            last_error: Set(None),
            succeeded_at: Set(None),
            created_at: Set(now),
            updated_at: Set(now),
            ..Default::default()
        }
        .insert(txn)
        .await?;
    }
    Ok(Some(public_id))
}

/// The body of a delivery: `{id, type, created_at, data}`.
pub fn body(event: &webhook_events::Model) -> String {
    let data: Value = serde_json::from_str(&event.data).unwrap_or(Value::Null);
    serde_json::json!({
        "id": event.public_id,
        "type": event.event_type,
        "created_at": when(event.created_at),
        "data": data,
    })
    .to_string()
}
