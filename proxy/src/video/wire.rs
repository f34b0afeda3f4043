//! The task as the client sees it: the gateway's id and object (never the supplier's id or the
//! account), its signed content URL, and the limits on what is read from a supplier.

use super::Links;
pub(super) use super::OBJECT_LIMIT;
use crate::errors::GatewayError;
use opstate::{Task, TaskBookError, TaskStatus};
use serde_json::{Value, json};

/// Prefix of the gateway's task ids.
pub(super) const ID_PREFIX: &str = "video_";

/// The task book could not be read or written: logged, answered 503.
pub(super) fn unavailable(e: TaskBookError) -> GatewayError {
    tracing::error!(error = %e, "video task book unavailable");
    GatewayError::TasksUnavailable
}

/// The task as the client sees it: the gateway's id, never the supplier's or the account.
pub(crate) fn object(links: &Links<'_>, task: &Task, host: Option<&str>) -> Value {
    let status = match task.status {
        TaskStatus::Submitting | TaskStatus::Queued => "queued",
        TaskStatus::InProgress => "in_progress",
        TaskStatus::Completed => "completed",
        TaskStatus::Failed => "failed",
    };
    let mut o = json!({
        "id": task.id,
        "object": "video",
        "model": task.model_requested,
        "status": status,
        "progress": task.progress,
        "created_at": task.created_at.timestamp(),
        "resolution": task.resolution,
        "seconds": task.seconds_charged.or(task.seconds_requested),
    });
    if let Some(at) = task.completed_at {
        o["completed_at"] = json!(at.timestamp());
    }
    match task.status {
        TaskStatus::Completed => {
            let (url, expires) = content_url(links, &task.id, host);
            o["data"] = json!([{"url": url, "expires_at": expires}]);
        }
        TaskStatus::Failed => {
            o["error"] = json!({
                "code": task.failure_code.as_deref().unwrap_or("video_generation_failed"),
                "message": task.failure_message.as_deref().unwrap_or("the task failed"),
            });
        }
        _ => {}
    }
    o
}

/// A fresh signed content URL and its expiry (Unix seconds).
pub(super) fn content_url(links: &Links<'_>, id: &str, host: Option<&str>) -> (String, u64) {
    let ttl = links.url_ttl_ms.div_ceil(1000).max(1);
    let expires = crate::media::unix_now() + ttl;
    let signature = links.signer.signature(&signed_id(id), expires);
    let base = crate::media::base(links.server, host);
    let base = base.trim_end_matches('/');
    let url =
        format!("{base}/compat/v1/videos/{id}/content?expires={expires}&signature={signature}");
    (url, expires)
}

/// What a content URL signs: the task id, domain-separated from hosted media ids.
pub(super) fn signed_id(id: &str) -> String {
    format!("video:{id}")
}
