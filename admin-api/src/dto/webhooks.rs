//! Partner webhooks on the partner API (issue 45; DESIGN §6e): what the routes take and answer.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use utoipa::ToSchema;

/// `POST /webhooks` and `PATCH /webhooks/{id}` (every field optional on `PATCH`).
#[derive(Debug, Clone, Deserialize, ToSchema)]
pub struct WebhookRequest {
    /// Where deliveries are POSTed: an `https` URL of a public host (checked again at every
    /// delivery, after DNS resolution), at most 2048 bytes, no user name or password.
    #[schema(value_type = String)]
    pub url: Option<Value>,
    /// The event types delivered; omitted on create: every type.
    #[schema(value_type = Option<Vec<String>>)]
    pub events: Option<Value>,
    /// A note of the partner's own, at most 200 characters.
    #[schema(value_type = Option<String>)]
    pub description: Option<Value>,
    /// `active` or `disabled` (`PATCH` only: a disabled endpoint gets no new deliveries).
    #[schema(value_type = Option<String>)]
    pub status: Option<Value>,
    #[serde(flatten)]
    #[schema(ignore)]
    pub unknown: Map<String, Value>,
}

/// An endpoint as the routes answer it.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Webhook {
    pub id: i64,
    pub url: String,
    pub events: Vec<String>,
    pub description: Option<String>,
    /// `active` or `disabled`.
    pub status: String,
    /// The signing secret's first characters.
    pub secret_preview: String,
    /// The signing secret (`whsec_…`): in the create's first answer only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
    pub created_at: String,
    pub updated_at: String,
}

/// One attempt of a delivery.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct WebhookAttempt {
    pub attempt: i32,
    pub started_at: String,
    pub duration_ms: i64,
    /// The receiver's status, when it answered.
    pub status_code: Option<i32>,
    /// The first bytes of its answer (at most 512).
    pub response_excerpt: Option<String>,
    /// Why there was no answer (refused address, connection failure, timeout).
    pub error: Option<String>,
}

/// One event to one endpoint, with its attempts.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct WebhookDelivery {
    pub id: i64,
    /// The event's id (`evt_…`), the same on every delivery and attempt of it.
    pub event_id: String,
    pub event_type: String,
    /// `pending`, `succeeded` or `failed`.
    pub status: String,
    pub attempts: i32,
    /// When the next attempt is due (pending deliveries).
    pub next_attempt_at: Option<String>,
    /// No attempt is made after it.
    pub deadline_at: String,
    pub last_status_code: Option<i32>,
    pub last_error: Option<String>,
    pub created_at: String,
    pub succeeded_at: Option<String>,
    pub attempt_log: Vec<WebhookAttempt>,
}

/// `GET /webhooks/{id}/deliveries`: newest first, 50 at most per page.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct WebhookDeliveries {
    pub deliveries: Vec<WebhookDelivery>,
    /// Pass as `before` for the next (older) page; absent on the last.
    pub next_before: Option<i64>,
}
