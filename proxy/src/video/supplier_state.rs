//! What a supplier says about a task, read into one `SupplierState`: OpenAI's video object
//! (and the statuses of other OpenAI-compatible suppliers) or a Veo operation.

use crate::wire::segment;
use opstate::TaskStatus;
use serde_json::Value;

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

/// The path of a Veo operation's name (`models/{model}/operations/{id}`), each segment encoded;
/// `None` for a name that is not plain segments (it must never change the path).
pub(super) fn operation_path(name: &str) -> Option<String> {
    let segments: Vec<&str> = name.split('/').collect();
    let plain = |s: &&str| {
        !s.is_empty()
            && *s != "."
            && *s != ".."
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
    };
    (segments.len() >= 2 && segments.iter().all(plain)).then(|| {
        let encoded: Vec<String> = segments.iter().map(|s| segment(s)).collect();
        format!("/v1beta/{}", encoded.join("/"))
    })
}

/// The file id of a done Veo operation's first sample (`…/files/{id}:download…`): the content
/// is then downloaded from the account's own base URL with its key, never from the uri as given.
pub(super) fn veo_file(operation: &Value) -> Option<String> {
    let uri = operation
        .get("response")?
        .get("generateVideoResponse")?
        .get("generatedSamples")?
        .get(0)?
        .get("video")?
        .get("uri")?
        .as_str()?;
    let after = &uri[uri.find("/files/")? + "/files/".len()..];
    let id: String = after
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_'))
        .collect();
    (!id.is_empty()).then_some(id)
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
