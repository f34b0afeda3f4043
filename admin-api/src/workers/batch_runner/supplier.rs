//! Lines run in a supplier's own batch API (issue 46): where an account with the `batch`
//! capability serves a line's model on a chat or responses batch, the line is **held** at the
//! gateway (its hold at the batch price, the account, the body to send it:
//! `proxy::batch_offload`), the held lines are sent to that account as one supplier batch (a
//! **chunk**: at most `[batches] supplier_lines` lines, one chunk of a batch at a time, so a
//! batch never holds more), the chunk is asked whether it ended every `[batches]
//! supplier_poll_interval_ms`, and each of its results is **booked** at the gateway (metered and
//! charged once from the supplier's reported usage; a failed, expired or cancelled line
//! charged nothing).
//!
//! Crash safety: a chunk's row and its lines' membership are written before anything is sent to
//! the supplier; its file id once uploaded, its batch id once created. A runner taking the batch
//! on uploads a chunk that has no file, and looks for a chunk with a file but no batch among
//! the supplier's batches (by its input file) before creating it, so a chunk runs once at the
//! supplier. Bookings are idempotent at the gateway (the hold is the once-gate, the answer kept).

use super::outcome::Outcome;
use super::{Runner, Sent, Stop};
use crate::state::AppState;
use entities::{batch_lines, batches, supplier_batches};
use sea_orm::sea_query::Expr;
use sea_orm::{
    ActiveModelTrait, ColumnTrait, DbErr, EntityTrait, PaginatorTrait, QueryFilter, QueryOrder,
    Set, TransactionTrait,
};
use serde_json::{Value, json};
use settings::{Account, Capability, Provider};

/// The supplier batch statuses after which it runs nothing more.
const SUPPLIER_ENDED: [&str; 4] = ["completed", "failed", "expired", "cancelled"];

/// Whether `line` of a batch on `endpoint` may be held for a supplier's batch: the endpoint is
/// one the supplier's batch API runs and an account with the `batch` capability serves its
/// model (the gateway decides which account, or refuses with 409).
pub(super) fn offloadable(state: &AppState, endpoint: &str, line: &batch_lines::Model) -> bool {
    if !matches!(
        endpoint,
        "/v1/chat/completions" | "/v1/responses" | "/v1/messages"
    ) {
        return false;
    }
    let body: Value = serde_json::from_str(&line.body).unwrap_or_default();
    let Some(model) = body["model"].as_str() else {
        return false;
    };
    state
        .settings
        .accounts
        .iter()
        .any(|a| a.capabilities.contains(&Capability::Batch) && a.models.iter().any(|m| m == model))
}

impl Runner<'_> {
    /// The gateway would not hold `line` (no account of its call runs a supplier's batch): the
    /// lines of its model are sent as calls.
    pub(super) fn not_holdable(&self, line: &batch_lines::Model) {
        if let Ok(mut m) = self.plain_models.lock() {
            m.insert(model_of(line));
        }
    }
}

/// The model a line's body names.
pub(super) fn model_of(line: &batch_lines::Model) -> String {
    let body: Value = serde_json::from_str(&line.body).unwrap_or_default();
    body["model"].as_str().unwrap_or_default().to_string()
}

fn account<'a>(state: &'a AppState, id: &str) -> Option<&'a Account> {
    state.settings.accounts.iter().find(|a| a.id == id)
}

/// `{base_url}{path}` of an account (an OpenAI account's base URL names the API root, `…/v1`;
/// an Anthropic account's the host).
fn url(a: &Account, path: &str) -> String {
    format!("{}{path}", a.base_url.as_str().trim_end_matches('/'))
}

/// Where an account's batches are: OpenAI's `/batches`, Anthropic's `/v1/messages/batches`.
fn batches_path(a: &Account) -> &'static str {
    match a.provider {
        Provider::Anthropic => "/v1/messages/batches",
        _ => "/batches",
    }
}

/// What a supplier answered: its status and body, or why there was none.
type Answered = Result<(u16, String), String>;

impl Runner<'_> {
    async fn supplier(&self, req: reqwest::RequestBuilder, a: &Account) -> Answered {
        let req = match a.provider {
            Provider::Anthropic => req
                .header("x-api-key", &a.api_key)
                .header("anthropic-version", "2023-06-01"),
            _ => req.bearer_auth(&a.api_key),
        };
        let resp = req.send().await.map_err(|e| e.to_string())?;
        let status = resp.status().as_u16();
        let body = resp.text().await.map_err(|e| e.to_string())?;
        Ok((status, body))
    }

    /// Records a line the gateway held: the account and the body to send it.
    pub(super) async fn held(&self, line: &batch_lines::Model, body: &str) -> Result<(), DbErr> {
        let v: Value = serde_json::from_str(body).unwrap_or_default();
        let now = self.state.clock.now();
        batch_lines::Entity::update_many()
            .col_expr(batch_lines::Column::Status, Expr::value("held"))
            .col_expr(
                batch_lines::Column::SupplierAccount,
                Expr::value(v["account"].as_str().map(str::to_string)),
            )
            .col_expr(
                batch_lines::Column::SupplierBody,
                Expr::value(v["body"].to_string()),
            )
            .col_expr(batch_lines::Column::UpdatedAt, Expr::value(now))
            .filter(batch_lines::Column::BatchId.eq(line.batch_id))
            .filter(batch_lines::Column::Line.eq(line.line))
            .filter(batch_lines::Column::Status.eq("running"))
            .exec(&self.state.db)
            .await?;
        Ok(())
    }

    /// Lines of `batch` in `status`.
    pub(super) async fn count(&self, batch: i64, status: &str) -> Result<u64, DbErr> {
        batch_lines::Entity::find()
            .filter(batch_lines::Column::BatchId.eq(batch))
            .filter(batch_lines::Column::Status.eq(status))
            .count(&self.state.db)
            .await
    }

    /// The chunk of `batch` not yet booked, if any.
    pub(super) async fn open_chunk(
        &self,
        batch: i64,
    ) -> Result<Option<supplier_batches::Model>, DbErr> {
        supplier_batches::Entity::find()
            .filter(supplier_batches::Column::BatchId.eq(batch))
            .filter(supplier_batches::Column::Status.ne("booked"))
            .order_by_asc(supplier_batches::Column::Id)
            .one(&self.state.db)
            .await
    }

    /// Makes a chunk of the held lines of `batch` (those of the first one's account and model),
    /// its row and membership written before the supplier is asked anything; then sends it.
    pub(super) async fn submit(&self, batch: &batches::Model) -> Result<(), DbErr> {
        let held = batch_lines::Entity::find()
            .filter(batch_lines::Column::BatchId.eq(batch.id))
            .filter(batch_lines::Column::Status.eq("held"))
            .order_by_asc(batch_lines::Column::Line)
            .all(&self.state.db)
            .await?;
        // One account and one model a chunk: an OpenAI input file names a single model.
        let served = |l: &batch_lines::Model| {
            let body: Value = serde_json::from_str(l.supplier_body.as_deref().unwrap_or("null"))
                .unwrap_or_default();
            (
                l.supplier_account.clone(),
                body["model"].as_str().map(str::to_string),
            )
        };
        let Some((Some(account_id), model)) = held.first().map(served) else {
            return Ok(());
        };
        // At most `supplier_lines` a chunk (more may be held when holds in flight ended after
        // the count that let them go: the rest waits for the next chunk).
        let limit =
            usize::try_from(self.state.settings.batches.supplier_lines).unwrap_or(usize::MAX);
        let members: Vec<i32> = held
            .iter()
            .filter(|l| served(l) == (Some(account_id.clone()), model.clone()))
            .map(|l| l.line)
            .take(limit)
            .collect();
        let now = self.state.clock.now();
        let txn = self.state.db.begin().await?;
        let chunk = supplier_batches::ActiveModel {
            batch_id: Set(batch.id),
            account_id: Set(account_id.clone()),
            supplier_file_id: Set(None),
            supplier_batch_id: Set(None),
            status: Set("uploading".into()),
            created_at: Set(now),
            updated_at: Set(now),
            ..Default::default()
        }
        .insert(&txn)
        .await?;
        batch_lines::Entity::update_many()
            .col_expr(batch_lines::Column::Status, Expr::value("submitted"))
            .col_expr(batch_lines::Column::SupplierBatch, Expr::value(chunk.id))
            .col_expr(batch_lines::Column::UpdatedAt, Expr::value(now))
            .filter(batch_lines::Column::BatchId.eq(batch.id))
            .filter(batch_lines::Column::Status.eq("held"))
            .filter(batch_lines::Column::Line.is_in(members))
            .exec(&txn)
            .await?;
        txn.commit().await?;
        self.send_chunk(batch, chunk).await
    }

    /// Uploads the chunk's lines (unless uploaded) and creates its supplier batch (unless the
    /// supplier has one on that file). A supplier that cannot be reached leaves it to the next
    /// round; an account no longer configured, or a refusal, books its lines failed.
    pub(super) async fn send_chunk(
        &self,
        batch: &batches::Model,
        chunk: supplier_batches::Model,
    ) -> Result<(), DbErr> {
        let Some(a) = account(self.state, &chunk.account_id) else {
            return self
                .fail_chunk(batch, &chunk, "account_not_configured")
                .await;
        };
        if a.provider == Provider::Anthropic {
            let created = self.create_message_batch(&chunk, a).await?;
            return self.created(batch, &chunk, created).await;
        }
        let file = match chunk.supplier_file_id.clone() {
            Some(f) => f,
            None => match self.upload(batch, &chunk, a).await? {
                Some(f) => f,
                None => return Ok(()),
            },
        };
        let existing = self.find_supplier_batch(a, &file).await;
        let created = match existing {
            Some(id) => Ok((200, json!({"id": id}).to_string())),
            None => {
                let ask = json!({"input_file_id": file, "endpoint": batch.endpoint,
                                 "completion_window": "24h",
                                 "metadata": {"tollgate_batch": batch.public_id}});
                let req = self.client.post(url(a, "/batches")).json(&ask);
                self.supplier(req, a).await
            }
        };
        self.created(batch, &chunk, created).await
    }

    /// Records what the supplier said to a chunk's creation (its id; a refusal fails its lines;
    /// anything else is tried again).
    async fn created(
        &self,
        batch: &batches::Model,
        chunk: &supplier_batches::Model,
        created: Answered,
    ) -> Result<(), DbErr> {
        match created {
            Ok((200..=299, body)) => {
                let v: Value = serde_json::from_str(&body).unwrap_or_default();
                let id = v["id"].as_str().map(str::to_string);
                self.chunk_state(chunk.id, "submitted", None, id).await
            }
            Ok((status, body)) if status < 500 && status != 429 => {
                tracing::error!(status, body = %body, "a supplier refused a batch; its lines fail");
                self.fail_chunk(batch, chunk, "supplier_refused_batch")
                    .await
            }
            Ok((status, _)) => {
                tracing::warn!(status, "a supplier batch was not created; tried again");
                Ok(())
            }
            Err(e) => {
                tracing::warn!(error = %e, "a supplier batch was not created; tried again");
                Ok(())
            }
        }
    }

    /// Uploads the chunk's lines as a JSONL file (each line's request id its `custom_id`); the
    /// file's id, recorded.
    async fn upload(
        &self,
        batch: &batches::Model,
        chunk: &supplier_batches::Model,
        a: &Account,
    ) -> Result<Option<String>, DbErr> {
        let lines = self.chunk_lines(chunk.id).await?;
        let mut jsonl = String::new();
        for l in &lines {
            let body: Value = serde_json::from_str(l.supplier_body.as_deref().unwrap_or("null"))
                .unwrap_or_default();
            let row = json!({"custom_id": l.request_id, "method": "POST",
                             "url": batch.endpoint, "body": body});
            jsonl.push_str(&row.to_string());
            jsonl.push('\n');
        }
        let boundary = format!("tollgate-{}", uuid::Uuid::now_v7().simple());
        let form = format!(
            "--{boundary}\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\nbatch\r\n\
             --{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"{}.jsonl\"\r\n\
             Content-Type: application/jsonl\r\n\r\n{jsonl}\r\n--{boundary}--\r\n",
            batch.public_id
        );
        let req = self
            .client
            .post(url(a, "/files"))
            .header(
                reqwest::header::CONTENT_TYPE,
                format!("multipart/form-data; boundary={boundary}"),
            )
            .body(form);
        match self.supplier(req, a).await {
            Ok((200..=299, body)) => {
                let v: Value = serde_json::from_str(&body).unwrap_or_default();
                let id = v["id"].as_str().map(str::to_string);
                self.chunk_state(chunk.id, "uploading", id.clone(), None)
                    .await?;
                Ok(id)
            }
            other => {
                tracing::warn!(answer = ?other, "a supplier batch file was not uploaded; tried again");
                Ok(None)
            }
        }
    }

    /// Creates an Anthropic message batch of the chunk's lines (each line's request id its
    /// `custom_id`, the gateway's body its `params`). A runner that dies between the supplier's
    /// answer and recording it leaves no trace to find the batch by: the chunk is created again
    /// (run twice at the supplier, booked once).
    async fn create_message_batch(
        &self,
        chunk: &supplier_batches::Model,
        a: &Account,
    ) -> Result<Answered, DbErr> {
        let requests: Vec<Value> = self
            .chunk_lines(chunk.id)
            .await?
            .iter()
            .map(|l| {
                let params: Value =
                    serde_json::from_str(l.supplier_body.as_deref().unwrap_or("null"))
                        .unwrap_or_default();
                json!({"custom_id": l.request_id, "params": params})
            })
            .collect();
        let req = self
            .client
            .post(url(a, batches_path(a)))
            .json(&json!({"requests": requests}));
        Ok(self.supplier(req, a).await)
    }

    /// The supplier batch already made on `file` (a runner that died before recording it).
    async fn find_supplier_batch(&self, a: &Account, file: &str) -> Option<String> {
        let req = self.client.get(url(a, "/batches?limit=100"));
        let (status, body) = self.supplier(req, a).await.ok()?;
        if status != 200 {
            return None;
        }
        let v: Value = serde_json::from_str(&body).ok()?;
        v["data"]
            .as_array()?
            .iter()
            .find(|b| b["input_file_id"] == file)
            .and_then(|b| b["id"].as_str().map(str::to_string))
    }

    async fn chunk_lines(&self, chunk: i64) -> Result<Vec<batch_lines::Model>, DbErr> {
        batch_lines::Entity::find()
            .filter(batch_lines::Column::SupplierBatch.eq(chunk))
            .filter(batch_lines::Column::Status.eq("submitted"))
            .order_by_asc(batch_lines::Column::Line)
            .all(&self.state.db)
            .await
    }

    async fn chunk_state(
        &self,
        chunk: i64,
        status: &str,
        file: Option<String>,
        batch: Option<String>,
    ) -> Result<(), DbErr> {
        let mut q = supplier_batches::Entity::update_many()
            .col_expr(supplier_batches::Column::Status, Expr::value(status))
            .col_expr(
                supplier_batches::Column::UpdatedAt,
                Expr::value(self.state.clock.now()),
            );
        if let Some(f) = file {
            q = q.col_expr(supplier_batches::Column::SupplierFileId, Expr::value(f));
        }
        if let Some(b) = batch {
            q = q.col_expr(supplier_batches::Column::SupplierBatchId, Expr::value(b));
        }
        q.filter(supplier_batches::Column::Id.eq(chunk))
            .exec(&self.state.db)
            .await?;
        Ok(())
    }

    /// Books every line of a chunk that cannot run at the supplier as failed with `code`.
    async fn fail_chunk(
        &self,
        batch: &batches::Model,
        chunk: &supplier_batches::Model,
        code: &str,
    ) -> Result<(), DbErr> {
        for line in self.chunk_lines(chunk.id).await? {
            let result = Outcome::Error {
                code: code.to_string(),
                message: "The supplier's batch API could not run this line.".into(),
            };
            self.book(batch, &line, result).await?;
        }
        self.close_chunk(chunk.id).await
    }

    /// Marks the chunk booked once none of its lines waits.
    async fn close_chunk(&self, chunk: i64) -> Result<(), DbErr> {
        let waiting = batch_lines::Entity::find()
            .filter(batch_lines::Column::SupplierBatch.eq(chunk))
            .filter(batch_lines::Column::Status.eq("submitted"))
            .count(&self.state.db)
            .await?;
        if waiting == 0 {
            self.chunk_state(chunk, "booked", None, None).await?;
        }
        Ok(())
    }

    /// Asks the supplier whether the open chunk ended (asking it to cancel when `stop` says the
    /// batch stops), and books its results when it has.
    pub(super) async fn follow(
        &self,
        batch: &batches::Model,
        stop: Option<&Stop>,
    ) -> Result<(), DbErr> {
        let Some(chunk) = self.open_chunk(batch.id).await? else {
            return Ok(());
        };
        let Some(supplier_batch) = chunk.supplier_batch_id.clone() else {
            return self.send_chunk(batch, chunk).await;
        };
        let Some(a) = account(self.state, &chunk.account_id) else {
            return self
                .fail_chunk(batch, &chunk, "account_not_configured")
                .await;
        };
        let at = format!("{}/{supplier_batch}", batches_path(a));
        if matches!(stop, Some(Stop::Cancelled | Stop::Expired)) && chunk.status == "submitted" {
            let req = self.client.post(url(a, &format!("{at}/cancel")));
            if let Ok((200..=299, _)) = self.supplier(req, a).await {
                self.chunk_state(chunk.id, "cancelling", None, None).await?;
            }
        }
        let Some(mut results) = self.results(a, &at).await else {
            return Ok(());
        };
        for line in self.chunk_lines(chunk.id).await? {
            let id = line.request_id.clone().unwrap_or_default();
            let result = results.remove(&id).unwrap_or(Outcome::Error {
                code: "supplier_lost_line".into(),
                message: "The supplier's batch ended without a result for this line.".into(),
            });
            self.book(batch, &line, result).await?;
        }
        self.close_chunk(chunk.id).await
    }

    /// The results of the supplier batch at `at`, by `custom_id`, once it ended and they could
    /// all be read (`None` otherwise: asked again next round, nothing booked from half of them).
    async fn results(
        &self,
        a: &Account,
        at: &str,
    ) -> Option<std::collections::HashMap<String, Outcome>> {
        let (status, body) = self.supplier(self.client.get(url(a, at)), a).await.ok()?;
        let v: Value = serde_json::from_str(&body).ok().filter(|_| status == 200)?;
        let mut results = std::collections::HashMap::new();
        let mut read = |content: &str, of: fn(&Value) -> Outcome| {
            for row in content.lines().filter(|l| !l.trim().is_empty()) {
                let row: Value = serde_json::from_str(row).unwrap_or_default();
                if let Some(id) = row["custom_id"].as_str() {
                    results.insert(id.to_string(), of(&row));
                }
            }
        };
        if a.provider == Provider::Anthropic {
            if v["processing_status"] != "ended" {
                return None;
            }
            // An absolute URL from the supplier, or its path.
            let link = v["results_url"].as_str()?;
            let link = match link.starts_with("http") {
                true => link.to_string(),
                false => url(a, link),
            };
            match self.supplier(self.client.get(link), a).await {
                Ok((200, content)) => read(&content, Outcome::of_message),
                _ => return None,
            }
            return Some(results);
        }
        if !SUPPLIER_ENDED.contains(&v["status"].as_str().unwrap_or("")) {
            return None;
        }
        for file in [&v["output_file_id"], &v["error_file_id"]] {
            let Some(file) = file.as_str() else { continue };
            let req = self.client.get(url(a, &format!("/files/{file}/content")));
            match self.supplier(req, a).await {
                Ok((200, content)) => read(&content, Outcome::of),
                _ => return None,
            }
        }
        Some(results)
    }

    /// Books `result` for `line` at the gateway and ends the line as the booking says. A
    /// gateway not reached (or 5xx of its own) leaves the line submitted: booked next round.
    pub(super) async fn book(
        &self,
        batch: &batches::Model,
        line: &batch_lines::Model,
        result: Outcome,
    ) -> Result<(), DbErr> {
        let (booking, ends_as) = result.booking();
        let sent = self
            .gateway(batch, line, Some("book"), booking.to_string())
            .await;
        let (status, body) = match sent {
            Sent::Answered {
                status,
                body,
                booked: true,
                ..
            } => (status, body),
            // The gateway's own refusal: a lapsed hold (settled by the reconciler from its
            // description) or a booking it cannot take (a 4xx: an answer larger than it keeps)
            // ends the line; a wait (409, 429) or a fault of its own (5xx) is booked next round.
            Sent::Answered { status, body, .. }
                if super::lines::code_of(&body) == "batch_line_not_held"
                    || ((400..500).contains(&status) && !matches!(status, 409 | 429)) =>
            {
                (status, body)
            }
            Sent::Answered { status, .. } => {
                tracing::warn!(
                    status,
                    "a supplier batch line was not booked; booked next round"
                );
                return Ok(());
            }
            Sent::Transport(e) => {
                tracing::warn!(error = %e, "a supplier batch line was not booked; booked next round");
                return Ok(());
            }
        };
        let end = match (status, ends_as) {
            (200..=299, _) => super::lines::End::succeeded(status, body),
            (_, "") => super::lines::End::failed(
                &super::lines::code_of(&body),
                super::lines::message_of(&body),
                Some((status, body)),
            ),
            (_, as_status) => super::lines::End {
                status: as_status,
                answer: None,
                code: Some(super::lines::code_of(&body)),
                message: super::lines::message_of(&body),
            },
        };
        self.end(line, end).await
    }
}
