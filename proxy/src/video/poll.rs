//! `GET /compat/v1/videos/{id}`: the supplier's state of a task (OpenAI video object or Veo
//! operation, read into one `SupplierState`), refreshed into the task book; an ending settles.

use super::content::{operation_path, veo_file};
use super::serve::{OBJECT_LIMIT, encode_segment};
use super::settle::{Ledger, finish};
use crate::errors::GatewayError;
use crate::upstream::direct::Call;
use opstate::{Task, TaskBook, TaskStatus};
use serde_json::Value;
use settings::Provider;

/// What a supplier says about a task (OpenAI's video object).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct SupplierState {
    pub id: Option<String>,
    pub status: TaskStatus,
    pub progress: i32,
    pub seconds: Option<u64>,
    pub failure: Option<(String, String)>,
}

impl SupplierState {
    /// A task the gateway ends as failed with `code` and `message` (not the supplier's word).
    pub fn failed(code: &str, message: &str) -> SupplierState {
        SupplierState {
            id: None,
            status: TaskStatus::Failed,
            progress: 0,
            seconds: None,
            failure: Some((code.to_string(), message.to_string())),
        }
    }

    /// A Veo create's answer, `{"name": "models/…/operations/…"}`: the operation's name is the
    /// task's id at the supplier.
    pub fn operation_started(body: &[u8]) -> Option<SupplierState> {
        let v: Value = serde_json::from_slice(body).ok()?;
        let name = v.get("name")?.as_str()?;
        operation_path(name)?;
        Some(SupplierState {
            id: Some(name.to_string()),
            status: TaskStatus::Queued,
            progress: 0,
            seconds: None,
            failure: None,
        })
    }

    /// A Veo operation: running until `done`; done with a generated sample → completed (its
    /// length is `seconds`, what the create asked: Veo makes exactly that); done with an `error`
    /// or with samples filtered by safety (`raiMediaFilteredCount`) and none made → failed,
    /// charged nothing.
    pub fn operation(body: &[u8], seconds: Option<u64>) -> Option<SupplierState> {
        let v: Value = serde_json::from_slice(body).ok()?;
        let name = v.get("name").and_then(Value::as_str).map(str::to_string);
        let running = SupplierState {
            id: name,
            status: TaskStatus::InProgress,
            progress: 50,
            seconds: None,
            failure: None,
        };
        if v.get("done").and_then(Value::as_bool) != Some(true) {
            return Some(running);
        }
        let clip = |s: &str| s.chars().take(1000).collect::<String>();
        if let Some(error) = v.get("error") {
            let message = error
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or("the supplier failed the task");
            let code = error
                .get("status")
                .and_then(Value::as_str)
                .unwrap_or("video_generation_failed");
            return Some(SupplierState::failed(
                &code.to_ascii_lowercase(),
                &clip(message),
            ));
        }
        let response = v
            .get("response")
            .and_then(|r| r.get("generateVideoResponse"));
        if veo_file(&v).is_some() {
            return Some(SupplierState {
                status: TaskStatus::Completed,
                progress: 100,
                seconds,
                ..running
            });
        }
        let reasons = response
            .and_then(|r| r.get("raiMediaFilteredReasons"))
            .and_then(Value::as_array)
            .and_then(|a| a.first())
            .and_then(Value::as_str)
            .unwrap_or("the supplier made no video");
        let filtered = response
            .and_then(|r| r.get("raiMediaFilteredCount"))
            .and_then(Value::as_u64)
            .is_some_and(|n| n > 0);
        let code = if filtered {
            "moderation_blocked"
        } else {
            "video_generation_failed"
        };
        Some(SupplierState::failed(code, &clip(reasons)))
    }

    /// Reads `{id, status, progress, seconds, error: {code, message}}`; statuses of other
    /// OpenAI-compatible suppliers are mapped too (`pending` → queued, `processing`/`running` →
    /// in progress, `succeeded` → completed, `cancelled`/`expired` → failed).
    pub fn parse(body: &[u8]) -> Option<SupplierState> {
        let v: Value = serde_json::from_slice(body).ok()?;
        let status = match v.get("status")?.as_str()? {
            "queued" | "pending" | "submitted" => TaskStatus::Queued,
            "completed" | "succeeded" | "success" => TaskStatus::Completed,
            "failed" | "cancelled" | "canceled" | "expired" | "error" => TaskStatus::Failed,
            _ => TaskStatus::InProgress,
        };
        let seconds = match v.get("seconds") {
            Some(Value::String(s)) => s.trim().parse::<f64>().ok(),
            Some(Value::Number(n)) => n.as_f64(),
            _ => None,
        }
        .filter(|s| s.is_finite() && *s > 0.0 && *s < 3600.0)
        .map(|s| s.ceil() as u64);
        let failure = (status == TaskStatus::Failed).then(|| {
            let error = v.get("error");
            let text = |k: &str| {
                error
                    .and_then(|e| e.get(k))
                    .and_then(Value::as_str)
                    .map(|s| s.chars().take(1000).collect::<String>())
            };
            (
                text("code").unwrap_or_else(|| "video_generation_failed".to_string()),
                text("message").unwrap_or_else(|| "the supplier failed the task".to_string()),
            )
        });
        Some(SupplierState {
            id: v.get("id").and_then(Value::as_str).map(str::to_string),
            status,
            progress: v
                .get("progress")
                .and_then(Value::as_f64)
                .map_or(0, |p| p.clamp(0.0, 100.0) as i32),
            seconds,
            failure,
        })
    }
}

/// Asks the supplier about a running task and records what it says; ends the task (and settles
/// its hold) when the supplier ended it. A supplier that cannot be asked changes nothing: the
/// recorded state is answered and the next poll or sweep asks again.
pub(crate) async fn refresh(
    supplier: super::Supplier<'_>,
    ledger: &Ledger<'_>,
    book: &dyn TaskBook,
    task: Task,
) -> Task {
    let (Some(account), Some(sid)) = (&task.account_id, &task.supplier_task_id) else {
        return task;
    };
    if task.status.is_final() {
        return task;
    }
    // A task outlives its request: the account is looked up in the configuration in force.
    let Some(upstream) = ledger
        .live
        .accounts
        .all()
        .iter()
        .find(|u| &u.account.id == account)
    else {
        tracing::warn!(task = %task.id, account = %account, "video task's account is no longer configured");
        return task;
    };
    let provider = upstream.account.provider;
    let suffix = match provider {
        Provider::Gemini => match operation_path(sid) {
            Some(path) => path,
            None => {
                tracing::warn!(task = %task.id, "video task's operation name is not a path");
                return task;
            }
        },
        Provider::OpenAi | Provider::Anthropic => format!("/videos/{}", encode_segment(sid)),
    };
    let call = Call {
        method: "GET",
        suffix: &suffix,
        body: None,
        headers: Vec::new(),
    };
    let mut answer = match supplier.client.send(upstream, supplier.server, call).await {
        Ok(a) => a,
        Err(e) => {
            tracing::warn!(task = %task.id, error = %e.message(), "video task not polled");
            return task;
        }
    };
    let status = answer.status();
    let read = answer.body(OBJECT_LIMIT).await;
    supplier.client.release(answer).await;
    let asked = task.seconds_requested.and_then(|s| u64::try_from(s).ok());
    let state = match (status, read) {
        (200..=299, Ok(bytes)) if provider == Provider::Gemini => {
            SupplierState::operation(&bytes, asked)
        }
        (200..=299, Ok(bytes)) => SupplierState::parse(&bytes),
        (404, _) => Some(SupplierState::failed(
            "not_found",
            "the supplier no longer knows this task",
        )),
        _ => None,
    };
    let Some(state) = state else {
        tracing::warn!(task = %task.id, status, "video task poll answered without a task object");
        return task;
    };
    if state.status.is_final() {
        return finish(ledger, book, task, &state).await;
    }
    if let Err(e) = book
        .progressed(&task.id, state.status, state.progress)
        .await
    {
        tracing::warn!(task = %task.id, error = %e, "video task progress not recorded");
    }
    Task {
        status: state.status,
        progress: state.progress,
        ..task
    }
}

/// A `GET` of `suffix` at `upstream` for `task`'s content; a supplier that cannot be reached is
/// logged (`what`) and answered 502.
pub(super) async fn get(
    supplier: super::Supplier<'_>,
    upstream: &crate::upstream::accounts::Upstream,
    task: &Task,
    suffix: &str,
    headers: Vec<(http::HeaderName, String)>,
    what: &'static str,
) -> Result<crate::upstream::direct::Answer, GatewayError> {
    let call = Call {
        method: "GET",
        suffix,
        body: None,
        headers,
    };
    let sent = supplier.client.send(upstream, supplier.server, call).await;
    sent.map_err(|e| {
        tracing::warn!(task = %task.id, error = %e.message(), "{what}");
        GatewayError::UpstreamUnreachable
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn supplier_objects() {
        let done = SupplierState::parse(
            br#"{"id":"v1","status":"completed","progress":100,"seconds":"8"}"#,
        )
        .unwrap();
        assert_eq!(
            (done.status, done.seconds, done.progress),
            (TaskStatus::Completed, Some(8), 100)
        );
        let failed = SupplierState::parse(
            br#"{"id":"v1","status":"failed","error":{"code":"moderation_blocked","message":"safety review"}}"#,
        )
        .unwrap();
        assert_eq!(
            failed.failure,
            Some(("moderation_blocked".into(), "safety review".into()))
        );
        let running =
            SupplierState::parse(br#"{"id":"v1","status":"processing","progress":33.5}"#).unwrap();
        assert_eq!(
            (running.status, running.progress),
            (TaskStatus::InProgress, 33)
        );
        assert!(SupplierState::parse(b"not json").is_none());
        assert!(SupplierState::parse(br#"{"id":"v1"}"#).is_none());
    }

    #[test]
    fn veo_operations() {
        let running =
            SupplierState::operation(br#"{"name":"models/veo/operations/a1"}"#, Some(8)).unwrap();
        assert_eq!(running.status, TaskStatus::InProgress);
        let done = br#"{"name":"models/veo/operations/a1","done":true,"response":{"generateVideoResponse":{"generatedSamples":[{"video":{"uri":"https://generativelanguage.googleapis.com/v1beta/files/qu4d28:download?alt=media"}}]}}}"#;
        let state = SupplierState::operation(done, Some(8)).unwrap();
        assert_eq!(
            (state.status, state.seconds),
            (TaskStatus::Completed, Some(8))
        );
        let v: Value = serde_json::from_slice(done).unwrap();
        assert_eq!(veo_file(&v).as_deref(), Some("qu4d28"));
        let filtered = SupplierState::operation(
            br#"{"name":"n/x","done":true,"response":{"generateVideoResponse":{"raiMediaFilteredCount":1,"raiMediaFilteredReasons":["blocked; You have not been charged"]}}}"#,
            Some(8),
        )
        .unwrap();
        assert_eq!(filtered.status, TaskStatus::Failed);
        assert_eq!(filtered.failure.unwrap().0, "moderation_blocked");
        let failed = SupplierState::operation(
            br#"{"name":"n/x","done":true,"error":{"code":3,"message":"bad","status":"INVALID_ARGUMENT"}}"#,
            None,
        )
        .unwrap();
        assert_eq!(
            failed.failure,
            Some(("invalid_argument".into(), "bad".into()))
        );
        assert_eq!(
            operation_path("models/veo-3/operations/x.1").as_deref(),
            Some("/v1beta/models/veo-3/operations/x.1")
        );
        for bad in ["../x", "models//x", "a/b?c", "x"] {
            assert!(operation_path(bad).is_none(), "{bad}");
        }
        assert!(SupplierState::operation_started(br#"{"name":"../../etc"}"#).is_none());
    }
}
