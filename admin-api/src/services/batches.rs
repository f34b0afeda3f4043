//! Batches (issue 46): made from an input file (its lines copied into `batch_lines`), read and
//! cancelled by the organization's keys, run by the runner (`workers::batch_runner`). OpenAI's
//! shapes: the batch object, and output and error lines `{id, custom_id, response: {status_code,
//! request_id, body}, error}`.

use super::batch_files::{self, Refused, invalid};
use crate::state::AppState;
use entities::{batch_files as files, batch_lines, batches, customer_api_keys};
use sea_orm::sea_query::Expr;
use sea_orm::{
    ActiveModelTrait, ColumnTrait, EntityTrait, QueryFilter, QueryOrder, Set, TransactionTrait,
};
use serde_json::{Value, json};

/// The statuses after which a batch runs no more lines.
pub const ENDED: [&str; 4] = ["completed", "failed", "expired", "cancelled"];

/// What a create asks for.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateBatch {
    pub input_file_id: String,
    pub endpoint: String,
    pub completion_window: String,
    #[serde(default)]
    pub metadata: Option<serde_json::Map<String, Value>>,
}

/// The create's own fields checked (the file's lines are checked with it).
fn check_ask(ask: &CreateBatch) -> Result<(), Refused> {
    if !batch_files::ENDPOINTS.contains(&ask.endpoint.as_str()) {
        return Err(invalid(
            format!(
                "endpoint must be one of {}.",
                batch_files::ENDPOINTS.join(", ")
            ),
            Some("endpoint"),
        ));
    }
    if ask.completion_window != "24h" {
        return Err(invalid(
            "completion_window must be \"24h\".",
            Some("completion_window"),
        ));
    }
    if let Some(m) = &ask.metadata
        && (m.len() > 16
            || m.iter().any(|(k, v)| {
                k.chars().count() > 64 || v.as_str().is_none_or(|s| s.chars().count() > 512)
            }))
    {
        return Err(invalid(
            "metadata holds at most 16 string values (keys up to 64 characters, values up to 512).",
            Some("metadata"),
        ));
    }
    Ok(())
}

/// Creates a batch of `key`'s organization from its input file; its lines run as `key`.
pub async fn create(
    state: &AppState,
    key: &customer_api_keys::Model,
    ask: CreateBatch,
) -> Result<batches::Model, Refused> {
    check_ask(&ask)?;
    if !key.allow_openai {
        return Err(Refused::Invalid {
            message: "This API key may not use the OpenAI-style surface a batch runs on.".into(),
            param: None,
            code: "permission_denied",
        });
    }
    let file = batch_files::find(state, key.organization_id, &ask.input_file_id)
        .await
        .map_err(|e| match e {
            Refused::NotFound(_) => invalid(
                format!("No file {:?} of this organization.", ask.input_file_id),
                Some("input_file_id"),
            ),
            other => other,
        })?;
    if file.purpose != "batch" {
        return Err(invalid(
            "The input file must have been uploaded with purpose \"batch\".",
            Some("input_file_id"),
        ));
    }
    let content = file.content.as_deref().unwrap_or_default();
    let lines = batch_files::check(state, content, &batch_files::ENDPOINTS)?;
    if let Some((n, line)) = lines
        .iter()
        .enumerate()
        .find(|(_, l)| l.url != ask.endpoint)
    {
        return Err(invalid(
            format!(
                "Line {}: url {:?} is not the batch's endpoint {:?}.",
                n + 1,
                line.url,
                ask.endpoint
            ),
            Some("endpoint"),
        ));
    }
    let new = New {
        prefix: "batch_",
        endpoint: ask.endpoint,
        completion_window: ask.completion_window,
        metadata: ask.metadata.map(|m| Value::Object(m).to_string()),
    };
    start(state, key, &file, new, &lines).await
}

/// A batch to start: its id's prefix (`batch_`, `msgbatch_`), endpoint, window and metadata.
pub struct New {
    pub prefix: &'static str,
    pub endpoint: String,
    pub completion_window: String,
    pub metadata: Option<String>,
}

/// Starts a batch of `key`'s organization over `file`'s checked `lines` (`validating` until a
/// runner takes it).
pub async fn start(
    state: &AppState,
    key: &customer_api_keys::Model,
    file: &files::Model,
    new: New,
    lines: &[batch_files::InputLine],
) -> Result<batches::Model, Refused> {
    let now = state.clock.now();
    let txn = state.db.begin().await?;
    let batch = batches::ActiveModel {
        public_id: Set(batch_files::public_id(new.prefix)),
        organization_id: Set(key.organization_id),
        api_key_id: Set(key.id),
        endpoint: Set(new.endpoint),
        completion_window: Set(new.completion_window),
        metadata: Set(new.metadata),
        input_file_id: Set(file.id),
        output_file_id: Set(None),
        error_file_id: Set(None),
        status: Set("validating".into()),
        total: Set(i32::try_from(lines.len()).unwrap_or(i32::MAX)),
        completed: Set(0),
        failed: Set(0),
        errors: Set(None),
        created_at: Set(now),
        expires_at: Set(now + chrono::Duration::hours(24)),
        updated_at: Set(now),
        ..Default::default()
    }
    .insert(&txn)
    .await?;
    insert_lines(&txn, batch.id, lines, now).await?;
    txn.commit().await?;
    Ok(batch)
}

/// The batch's lines, pending, in the file's order (500 a statement).
async fn insert_lines(
    txn: &sea_orm::DatabaseTransaction,
    batch: i64,
    lines: &[batch_files::InputLine],
    now: chrono::DateTime<chrono::Utc>,
) -> Result<(), Refused> {
    for (chunk_at, chunk) in lines.chunks(500).enumerate() {
        let rows = chunk
            .iter()
            .enumerate()
            .map(|(i, l)| batch_lines::ActiveModel {
                batch_id: Set(batch),
                line: Set(i32::try_from(chunk_at * 500 + i).unwrap_or(i32::MAX)),
                custom_id: Set(l.custom_id.clone()),
                body: Set(l.body.clone()),
                status: Set("pending".into()),
                request_id: Set(None),
                answer_status: Set(None),
                answer: Set(None),
                error_code: Set(None),
                error_message: Set(None),
                attempts: Set(0),
                updated_at: Set(now),
                ..Default::default()
            });
        batch_lines::Entity::insert_many(rows)
            .exec_without_returning(txn)
            .await?;
    }
    Ok(())
}

/// The batch `public_id` of `org`.
pub async fn find(state: &AppState, org: i64, public_id: &str) -> Result<batches::Model, Refused> {
    batches::Entity::find()
        .filter(batches::Column::PublicId.eq(public_id))
        .filter(batches::Column::OrganizationId.eq(org))
        .one(&state.db)
        .await?
        .ok_or(Refused::NotFound("batch_not_found"))
}

/// Asks the batch to stop: no line starts after this; the lines in flight finish (and are
/// charged), the rest are `cancelled` (charged nothing) when the runner sees it. A batch that
/// ended is refused (409).
pub async fn cancel(
    state: &AppState,
    org: i64,
    public_id: &str,
) -> Result<batches::Model, Refused> {
    let batch = find(state, org, public_id).await?;
    if ENDED.contains(&batch.status.as_str()) || batch.status == "finalizing" {
        return Err(Refused::Conflict(format!(
            "The batch is {} and cannot be cancelled.",
            batch.status
        )));
    }
    let now = state.clock.now();
    batches::Entity::update_many()
        .col_expr(batches::Column::Status, Expr::value("cancelling"))
        .col_expr(batches::Column::CancellingAt, Expr::value(now))
        .col_expr(batches::Column::UpdatedAt, Expr::value(now))
        .filter(batches::Column::Id.eq(batch.id))
        .filter(batches::Column::Status.is_in(["validating", "in_progress"]))
        .exec(&state.db)
        .await?;
    find(state, org, public_id).await
}

/// A batch as OpenAI's API shows one (its files by their public ids).
pub async fn view(state: &AppState, b: &batches::Model) -> Result<Value, Refused> {
    let ids: Vec<i64> = [Some(b.input_file_id), b.output_file_id, b.error_file_id]
        .into_iter()
        .flatten()
        .collect();
    let names: std::collections::HashMap<i64, String> = files::Entity::find()
        .filter(files::Column::Id.is_in(ids))
        .all(&state.db)
        .await?
        .into_iter()
        .map(|f| (f.id, f.public_id))
        .collect();
    let name = |id: Option<i64>| id.and_then(|i| names.get(&i).cloned());
    let t = |at: Option<chrono::DateTime<chrono::Utc>>| at.map(|t| t.timestamp());
    let errors = b
        .errors
        .as_deref()
        .and_then(|e| serde_json::from_str::<Value>(e).ok())
        .map(|data| json!({"object": "list", "data": data}));
    Ok(json!({
        "id": b.public_id,
        "object": "batch",
        "endpoint": b.endpoint,
        "errors": errors,
        "input_file_id": name(Some(b.input_file_id)).unwrap_or_default(),
        "completion_window": b.completion_window,
        "status": b.status,
        "output_file_id": name(b.output_file_id),
        "error_file_id": name(b.error_file_id),
        "created_at": b.created_at.timestamp(),
        "in_progress_at": t(b.in_progress_at),
        "expires_at": b.expires_at.timestamp(),
        "finalizing_at": t(b.finalizing_at),
        "completed_at": t(b.completed_at),
        "failed_at": t(b.failed_at),
        "expired_at": t(b.expired_at),
        "cancelling_at": t(b.cancelling_at),
        "cancelled_at": t(b.cancelled_at),
        "request_counts": {"total": b.total, "completed": b.completed, "failed": b.failed},
        "metadata": b.metadata.as_deref().and_then(|m| serde_json::from_str::<Value>(m).ok()),
    }))
}

/// The output (`errors` false: lines answered 2xx) or error lines (every other line that ended)
/// of a batch, as JSONL in line order.
pub async fn results(state: &AppState, batch: i64, errors: bool) -> Result<Vec<u8>, Refused> {
    let lines = batch_lines::Entity::find()
        .filter(batch_lines::Column::BatchId.eq(batch))
        .order_by_asc(batch_lines::Column::Line)
        .all(&state.db)
        .await?;
    let mut out = Vec::new();
    for l in lines {
        let ok = l.status == "succeeded";
        if ok == errors || l.status == "pending" || l.status == "running" {
            continue;
        }
        let response = l.answer_status.map(|status| {
            json!({
                "status_code": status,
                "request_id": l.request_id,
                "body": l.answer.as_deref().and_then(|a| serde_json::from_str::<Value>(a).ok()),
            })
        });
        let error = l
            .error_code
            .as_ref()
            .map(|code| json!({"code": code, "message": l.error_message}));
        let row = json!({
            "id": format!("batch_req_{}", l.request_id.as_deref().unwrap_or("none")),
            "custom_id": l.custom_id,
            "response": response,
            "error": error,
        });
        out.extend_from_slice(row.to_string().as_bytes());
        out.push(b'\n');
    }
    Ok(out)
}

/// The content of a file: an input file's as uploaded; an output or error file's written from
/// its batch's lines (in line order).
pub async fn content(state: &AppState, f: &files::Model) -> Result<Vec<u8>, Refused> {
    if let Some(c) = &f.content {
        return Ok(c.clone());
    }
    let batch = f.batch_id.ok_or(Refused::NotFound("file_not_found"))?;
    let errors = f.purpose == "batch_error";
    results(state, batch, errors).await
}

/// Which page of an organization's batches a list asks for: newest first, `limit` of them,
/// older than `after` or newer than `before` (batch ids; at most one of the two).
#[derive(Debug, Default)]
pub struct Page {
    pub after: Option<String>,
    pub before: Option<String>,
    pub limit: u64,
}

/// A page of `org`'s batches run on one of `endpoints`, newest first, and whether more lie
/// beyond it (in the direction asked). A cursor that names no batch of those is refused (400
/// naming it).
pub async fn list(
    state: &AppState,
    org: i64,
    endpoints: &[&str],
    page: &Page,
) -> Result<(Vec<batches::Model>, bool), Refused> {
    use sea_orm::QuerySelect;
    let mine = || {
        batches::Entity::find()
            .filter(batches::Column::OrganizationId.eq(org))
            .filter(batches::Column::Endpoint.is_in(endpoints.iter().copied()))
    };
    let cursor = |id: &Option<String>, param: &'static str| {
        let id = id.clone();
        async move {
            let Some(id) = id else { return Ok(None) };
            mine()
                .filter(batches::Column::PublicId.eq(id.as_str()))
                .one(&state.db)
                .await?
                .map(|b| Some(b.id))
                .ok_or_else(|| invalid(format!("No batch {id:?} to page from."), Some(param)))
        }
    };
    let after = cursor(&page.after, "after").await?;
    let before = cursor(&page.before, "before").await?;
    let mut query = mine();
    query = match (after, before) {
        (_, Some(b)) => query
            .filter(batches::Column::Id.gt(b))
            .order_by_asc(batches::Column::Id),
        (Some(a), None) => query
            .filter(batches::Column::Id.lt(a))
            .order_by_desc(batches::Column::Id),
        (None, None) => query.order_by_desc(batches::Column::Id),
    };
    let mut rows = query.limit(page.limit + 1).all(&state.db).await?;
    let more = rows.len() as u64 > page.limit;
    rows.truncate(page.limit as usize);
    if before.is_some() {
        rows.reverse();
    }
    Ok((rows, more))
}
