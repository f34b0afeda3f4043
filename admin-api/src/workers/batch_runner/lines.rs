//! A line's sending and its outcome, a batch's end, and the retention sweep (see the parent
//! module for the rules).

use super::{Runner, SERVER_ATTEMPTS, Sent, Stop, TRANSPORT_ATTEMPTS};
use crate::services::batch_files;
use crate::services::batches::{ENDED, results};
use crate::state::AppState;
use entities::{batch_files as files, batch_lines, batches};
use sea_orm::sea_query::{Expr, ExprTrait};
use sea_orm::{
    ActiveModelTrait, ColumnTrait, DbErr, EntityTrait, PaginatorTrait, QueryFilter, Set,
    TransactionTrait,
};
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// The gateway's path of a batch endpoint (`/v1/embeddings` → `/compat/v1/embeddings`).
/// A message batch's lines go to the Messages surface as they are (`/v1/messages`).
fn gateway_path(endpoint: &str) -> String {
    match endpoint {
        crate::services::message_batches::ENDPOINT => endpoint.to_string(),
        _ => format!("/compat{endpoint}"),
    }
}

/// Where lines are sent: `[batches] gateway_url`, else the embedding process's gateway, else
/// this deployment's gateway listener (a wildcard address read as loopback).
pub(crate) fn gateway_url(state: &AppState) -> String {
    if let Some(url) = &state.settings.batches.gateway_url {
        return url.trim_end_matches('/').to_string();
    }
    if let Some(url) = state.batch_gateway.get() {
        return url.clone();
    }
    let mut listen = state.settings.server.listen;
    if listen.ip().is_unspecified() {
        listen.set_ip(match listen {
            std::net::SocketAddr::V4(_) => std::net::Ipv4Addr::LOCALHOST.into(),
            std::net::SocketAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
        });
    }
    format!("http://{listen}")
}

/// The code of an error answer (`error.code`, else `error.type`), else `request_failed`.
pub(super) fn code_of(body: &str) -> String {
    let v: serde_json::Value = serde_json::from_str(body).unwrap_or_default();
    let e = &v["error"];
    e["code"]
        .as_str()
        .or_else(|| e["type"].as_str())
        .unwrap_or("request_failed")
        .to_string()
}

pub(super) fn message_of(body: &str) -> Option<String> {
    let v: serde_json::Value = serde_json::from_str(body).ok()?;
    v["error"]["message"].as_str().map(str::to_string)
}

impl Runner<'_> {
    /// Sends `line` of `batch` to the gateway, signed as the batch's key: as a call, or (`hold`)
    /// to be held for a supplier's batch (`super::supplier`).
    pub(super) async fn send(
        &self,
        batch: &batches::Model,
        line: batch_lines::Model,
        hold: bool,
    ) -> (batch_lines::Model, Sent) {
        let stage = hold.then_some("hold");
        let sent = self.gateway(batch, &line, stage, line.body.clone()).await;
        (line, sent)
    }

    /// Sends `body` for `line` of `batch` to the gateway at `stage`, signed as the batch's key.
    pub(super) async fn gateway(
        &self,
        batch: &batches::Model,
        line: &batch_lines::Model,
        stage: Option<&str>,
        body: String,
    ) -> Sent {
        let signed = credentials::batch_line::BatchLine {
            batch_id: batch.public_id.clone(),
            line: u32::try_from(line.line).unwrap_or(0),
            request_id: line.request_id.clone().unwrap_or_default(),
            key_hash: self.key_hash.clone(),
        };
        let now_ms = u64::try_from(chrono::Utc::now().timestamp_millis()).unwrap_or(0);
        let header = credentials::batch_line::sign(&self.state.hasher, &signed, now_ms);
        let url = format!(
            "{}{}",
            gateway_url(self.state),
            gateway_path(&batch.endpoint)
        );
        let mut req = self
            .client
            .post(url)
            .header(credentials::batch_line::HEADER, header)
            .header(reqwest::header::CONTENT_TYPE, "application/json");
        if let Some(stage) = stage {
            req = req.header("x-tollgate-batch-stage", stage);
        }
        match req.body(body).send().await {
            Ok(resp) => {
                let status = resp.status().as_u16();
                let has = |h: &str| resp.headers().contains_key(h);
                let held = has("x-tollgate-batch-held");
                let booked = has("x-tollgate-batch-booked") || has("x-tollgate-batch-replay");
                match resp.text().await {
                    Ok(body) => Sent::Answered {
                        status,
                        body,
                        held,
                        booked,
                    },
                    Err(e) => Sent::Transport(e.to_string()),
                }
            }
            Err(e) => Sent::Transport(e.to_string()),
        }
    }

    /// Records what became of `line`; the batch's stop when the answer stops it.
    pub(super) async fn record(
        &self,
        line: &batch_lines::Model,
        sent: Sent,
        later: &mut HashMap<i32, Instant>,
    ) -> Result<Option<Stop>, DbErr> {
        let (status, body) = match sent {
            Sent::Answered {
                held: true, body, ..
            } => {
                self.held(line, &body).await?;
                return Ok(None);
            }
            Sent::Answered { status, body, .. } => (status, body),
            Sent::Transport(why) if line.attempts < TRANSPORT_ATTEMPTS => {
                tracing::warn!(error = %why, line = line.line, "batch line: gateway not reached; sent again shortly");
                return self.again(line, Duration::from_secs(1), later).await;
            }
            Sent::Transport(why) => {
                let end = End::failed("gateway_unreachable", Some(why), None);
                return self.end(line, end).await.map(|()| None);
            }
        };
        match status {
            200..=299 => {
                self.end(line, End::succeeded(status, body)).await?;
                Ok(None)
            }
            401 | 402 => {
                let code = match status {
                    402 => "insufficient_quota",
                    _ => "invalid_api_key",
                };
                let message = message_of(&body).unwrap_or_else(|| code.to_string());
                let end = End::failed(code, Some(message.clone()), Some((status, body)));
                self.end(line, end).await?;
                Ok(Some(Stop::Refused {
                    code: code.to_string(),
                    message,
                }))
            }
            409 if code_of(&body) == "batch_offload_unavailable" => {
                // No account of this line's call runs a supplier's batch: sent as a call.
                self.not_holdable(line);
                self.again(line, Duration::ZERO, later).await
            }
            409 | 429 => self.again(line, Duration::from_secs(1), later).await,
            500..=599 if line.attempts < SERVER_ATTEMPTS => {
                let pause = Duration::from_secs(1 << line.attempts.clamp(0, 6));
                self.again(line, pause, later).await
            }
            _ => {
                let code = code_of(&body);
                let end = End::failed(&code, message_of(&body), Some((status, body)));
                self.end(line, end).await.map(|()| None)
            }
        }
    }

    /// `line` waits `pause` and is sent again (under its request id).
    async fn again(
        &self,
        line: &batch_lines::Model,
        pause: Duration,
        later: &mut HashMap<i32, Instant>,
    ) -> Result<Option<Stop>, DbErr> {
        batch_lines::Entity::update_many()
            .col_expr(batch_lines::Column::Status, Expr::value("pending"))
            .filter(batch_lines::Column::BatchId.eq(line.batch_id))
            .filter(batch_lines::Column::Line.eq(line.line))
            .filter(batch_lines::Column::Status.eq("running"))
            .exec(&self.state.db)
            .await?;
        later.insert(line.line, Instant::now() + pause);
        Ok(None)
    }

    /// Ends `line` as `end` says, counting it in its batch (once: only a line running, held or
    /// in a supplier's batch ends).
    pub(super) async fn end(&self, line: &batch_lines::Model, end: End) -> Result<(), DbErr> {
        let now = self.state.clock.now();
        let txn = self.state.db.begin().await?;
        let (status, answer) = end
            .answer
            .map_or((None, None), |(s, b)| (Some(i32::from(s)), Some(b)));
        let ended = batch_lines::Entity::update_many()
            .col_expr(batch_lines::Column::Status, Expr::value(end.status))
            .col_expr(batch_lines::Column::AnswerStatus, Expr::value(status))
            .col_expr(batch_lines::Column::Answer, Expr::value(answer))
            .col_expr(batch_lines::Column::ErrorCode, Expr::value(end.code))
            .col_expr(batch_lines::Column::ErrorMessage, Expr::value(end.message))
            .col_expr(batch_lines::Column::UpdatedAt, Expr::value(now))
            .filter(batch_lines::Column::BatchId.eq(line.batch_id))
            .filter(batch_lines::Column::Line.eq(line.line))
            .filter(batch_lines::Column::Status.is_in(["running", "held", "submitted"]))
            .exec(&txn)
            .await?
            .rows_affected
            == 1;
        let counter = match end.status {
            "succeeded" => Some(batches::Column::Completed),
            "failed" => Some(batches::Column::Failed),
            _ => None,
        };
        if let (true, Some(counter)) = (ended, counter) {
            batches::Entity::update_many()
                .col_expr(counter, Expr::col(counter).add(1))
                .col_expr(batches::Column::UpdatedAt, Expr::value(now))
                .filter(batches::Column::Id.eq(line.batch_id))
                .exec(&txn)
                .await?;
        }
        txn.commit().await
    }

    /// Ends `batch`: the lines not started take the stop's status, its output and error files
    /// are written, and it takes its final status (see the parent module).
    pub(super) async fn finish(
        &self,
        batch: &batches::Model,
        stop: Option<Stop>,
    ) -> Result<(), DbErr> {
        let now = self.state.clock.now();
        let (line_status, code, message, status) = ending(stop.as_ref());
        let stopped = self
            .stop_rest(batch.id, line_status, &code, &message)
            .await?;
        let output = results(self.state, batch.id, false).await.map_err(db)?;
        let errors = results(self.state, batch.id, true).await.map_err(db)?;
        let txn = self.state.db.begin().await?;
        let file_of = |purpose: &'static str, bytes: usize| files::ActiveModel {
            public_id: Set(batch_files::public_id("file-")),
            organization_id: Set(batch.organization_id),
            purpose: Set(purpose.into()),
            filename: Set(format!("{}_{purpose}.jsonl", batch.public_id)),
            bytes: Set(i64::try_from(bytes).unwrap_or(i64::MAX)),
            lines: Set(0),
            content: Set(None),
            batch_id: Set(Some(batch.id)),
            created_at: Set(now),
            expires_at: Set(batch_files::expiry_after(self.state, now)),
            ..Default::default()
        };
        let output_file = match output.is_empty() {
            true => None,
            false => Some(file_of("batch_output", output.len()).insert(&txn).await?.id),
        };
        let error_file = match errors.is_empty() {
            true => None,
            false => Some(file_of("batch_error", errors.len()).insert(&txn).await?.id),
        };
        let batch_errors = matches!(stop, Some(Stop::Refused { .. })).then(|| {
            serde_json::json!([{"code": code, "message": message, "line": null, "param": null}])
                .to_string()
        });
        let at = match status {
            "cancelled" => batches::Column::CancelledAt,
            "expired" => batches::Column::ExpiredAt,
            "failed" => batches::Column::FailedAt,
            _ => batches::Column::CompletedAt,
        };
        let counted = match line_status {
            "failed" => i32::try_from(stopped).unwrap_or(i32::MAX),
            _ => 0,
        };
        batches::Entity::update_many()
            .col_expr(batches::Column::Status, Expr::value(status))
            .col_expr(at, Expr::value(now))
            .col_expr(batches::Column::FinalizingAt, Expr::value(now))
            .col_expr(batches::Column::OutputFileId, Expr::value(output_file))
            .col_expr(batches::Column::ErrorFileId, Expr::value(error_file))
            .col_expr(batches::Column::Errors, Expr::value(batch_errors))
            .col_expr(
                batches::Column::Failed,
                Expr::col(batches::Column::Failed).add(counted),
            )
            .col_expr(
                batches::Column::ClaimedUntil,
                Expr::value(Option::<chrono::DateTime<chrono::Utc>>::None),
            )
            .col_expr(batches::Column::UpdatedAt, Expr::value(now))
            .filter(batches::Column::Id.eq(batch.id))
            .filter(batches::Column::ClaimedBy.eq(self.worker))
            .filter(batches::Column::Status.is_not_in(ENDED))
            .exec(&txn)
            .await?;
        txn.commit().await
    }
}

impl Runner<'_> {
    /// The lines of `batch` not ended take `status` (none when empty) with `code` and
    /// `message`; how many did.
    async fn stop_rest(
        &self,
        batch: i64,
        status: &str,
        code: &str,
        message: &str,
    ) -> Result<u64, DbErr> {
        if status.is_empty() {
            return Ok(0);
        }
        let now = self.state.clock.now();
        Ok(batch_lines::Entity::update_many()
            .col_expr(batch_lines::Column::Status, Expr::value(status))
            .col_expr(batch_lines::Column::ErrorCode, Expr::value(code))
            .col_expr(batch_lines::Column::ErrorMessage, Expr::value(message))
            .col_expr(batch_lines::Column::UpdatedAt, Expr::value(now))
            .filter(batch_lines::Column::BatchId.eq(batch))
            .filter(batch_lines::Column::Status.is_in(["pending", "running"]))
            .exec(&self.state.db)
            .await?
            .rows_affected)
    }
}

/// What a stop makes of the lines not started and of the batch: (their status, code, message;
/// the batch's status). No stop: nothing is left, the batch completed.
fn ending(stop: Option<&Stop>) -> (&'static str, String, String, &'static str) {
    match stop {
        None | Some(Stop::Leaving) => ("", String::new(), String::new(), "completed"),
        Some(Stop::Cancelled) => (
            "cancelled",
            "batch_cancelled".to_string(),
            "The batch was cancelled before this line started.".to_string(),
            "cancelled",
        ),
        Some(Stop::Expired) => (
            "expired",
            "batch_expired".to_string(),
            "The batch's completion window ended before this line started.".to_string(),
            "expired",
        ),
        Some(Stop::Refused { code, message }) => {
            ("failed", code.clone(), message.clone(), "failed")
        }
    }
}

fn db(e: batch_files::Refused) -> DbErr {
    match e {
        batch_files::Refused::Database(e) => e,
        other => DbErr::Custom(format!("{other:?}")),
    }
}

/// How a line ends.
pub(super) struct End {
    pub(super) status: &'static str,
    pub(super) answer: Option<(u16, String)>,
    pub(super) code: Option<String>,
    pub(super) message: Option<String>,
}

impl End {
    pub(super) fn succeeded(status: u16, body: String) -> End {
        End {
            status: "succeeded",
            answer: Some((status, body)),
            code: None,
            message: None,
        }
    }

    pub(super) fn failed(
        code: &str,
        message: Option<String>,
        answer: Option<(u16, String)>,
    ) -> End {
        End {
            status: "failed",
            answer,
            code: Some(code.to_string()),
            message,
        }
    }
}

/// Removes batches that ended more than `[batches] retention_days` ago (their lines and files)
/// and files past their expiry.
pub async fn sweep(state: &AppState) -> Result<(), DbErr> {
    let now = state.clock.now();
    let before = now - batch_files::retention(state);
    let old: Vec<i64> = batches::Entity::find()
        .filter(batches::Column::Status.is_in(ENDED))
        .filter(batches::Column::UpdatedAt.lt(before))
        .all(&state.db)
        .await?
        .into_iter()
        .map(|b| b.id)
        .collect();
    for chunk in old.chunks(100) {
        let txn = state.db.begin().await?;
        batch_lines::Entity::delete_many()
            .filter(batch_lines::Column::BatchId.is_in(chunk.to_vec()))
            .exec(&txn)
            .await?;
        files::Entity::delete_many()
            .filter(files::Column::BatchId.is_in(chunk.to_vec()))
            .exec(&txn)
            .await?;
        batches::Entity::delete_many()
            .filter(batches::Column::Id.is_in(chunk.to_vec()))
            .exec(&txn)
            .await?;
        txn.commit().await?;
    }
    let expired = files::Entity::find()
        .filter(files::Column::ExpiresAt.lt(now))
        .count(&state.db)
        .await?;
    if expired > 0 {
        files::Entity::delete_many()
            .filter(files::Column::ExpiresAt.lt(now))
            .exec(&state.db)
            .await?;
    }
    Ok(())
}
