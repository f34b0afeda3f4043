//! `GET /compat/v1/videos/{id}/content`: the finished video, streamed from the supplier (OpenAI's
//! content route or Veo's file), with or without a key on a signed URL.

use super::Supplier;
use super::supplier_state::{operation_path, veo_file};
use super::wire::OBJECT_LIMIT;
use crate::errors::GatewayError;
use crate::upstream::accounts::Accounts;
use crate::upstream::direct::{Answer, Call};
use crate::wire::segment;
use bytes::Bytes;
use opstate::{Task, TaskStatus};
use pingora::http::ResponseHeader;
use pingora::proxy::Session;
use serde_json::Value;
use settings::Provider;

/// Where a completed Veo task's content is downloaded: the operation is read again for its
/// sample's file id (the task book keeps the operation, not the file), then
/// `/v1beta/files/{id}:download?alt=media` on the account itself.
pub(super) async fn veo_download(
    supplier: Supplier<'_>,
    upstream: &crate::upstream::accounts::Upstream,
    task: &Task,
    operation: &str,
) -> Result<String, GatewayError> {
    let path = operation_path(operation).ok_or(GatewayError::UpstreamProtocol)?;
    let mut answer = get(
        supplier,
        upstream,
        task,
        &path,
        Vec::new(),
        "video operation not read",
    )
    .await?;
    let status = answer.status();
    let read = answer.body(OBJECT_LIMIT).await;
    supplier.client.release(answer).await;
    let file = match (status, read) {
        (200..=299, Ok(bytes)) => serde_json::from_slice::<Value>(&bytes)
            .ok()
            .and_then(|v| veo_file(&v)),
        _ => None,
    };
    let file = file.ok_or_else(|| {
        tracing::warn!(task = %task.id, status, "video operation names no file");
        GatewayError::VideoNotReady(task.id.clone(), "no longer available at the supplier")
    })?;
    Ok(format!("/v1beta/files/{file}:download?alt=media"))
}

/// Headers of the supplier's content answer passed to the client.
pub(super) const CONTENT_HEADERS: [http::HeaderName; 6] = [
    http::header::CONTENT_TYPE,
    http::header::CONTENT_LENGTH,
    http::header::CONTENT_RANGE,
    http::header::ACCEPT_RANGES,
    http::header::ETAG,
    http::header::LAST_MODIFIED,
];

/// Streams a completed task's content from its supplier: chunk by chunk as it arrives (never
/// held whole), `Range` passed through, the supplier's credential added here and never shown.
pub(super) async fn content(
    supplier: Supplier<'_>,
    accounts: &Accounts,
    session: &mut Session,
    request_id: &str,
    task: &Task,
) -> Result<bool, GatewayError> {
    let not_ready = |status: &'static str| GatewayError::VideoNotReady(task.id.clone(), status);
    match task.status {
        TaskStatus::Completed => {}
        TaskStatus::Failed => return Err(not_ready("failed")),
        TaskStatus::InProgress => return Err(not_ready("in_progress")),
        TaskStatus::Submitting | TaskStatus::Queued => return Err(not_ready("queued")),
    }
    let (Some(account), Some(sid)) = (&task.account_id, &task.supplier_task_id) else {
        return Err(GatewayError::Internal);
    };
    let upstream = accounts
        .all()
        .iter()
        .find(|u| &u.account.id == account)
        .ok_or_else(|| GatewayError::NoAccount(task.model_served.clone()))?;
    let headers = ranges(&session.req_header().headers);
    let suffix = match upstream.account.provider {
        Provider::Gemini => veo_download(supplier, upstream, task, sid).await?,
        Provider::OpenAi | Provider::Anthropic => {
            format!("/videos/{}/content", segment(sid))
        }
    };
    let mut answer = get(
        supplier,
        upstream,
        task,
        &suffix,
        headers,
        "video content not fetched",
    )
    .await?;
    let status = answer.status();
    if !(200..300).contains(&status) && status != 416 {
        supplier.client.release(answer).await;
        tracing::warn!(task = %task.id, status, "supplier refused the video content");
        return Err(if status == 404 {
            GatewayError::VideoNotReady(task.id.clone(), "no longer available at the supplier")
        } else {
            GatewayError::UpstreamProtocol
        });
    }
    let theirs = answer.header().ok_or(GatewayError::UpstreamProtocol)?;
    let header = content_header(status, theirs, request_id)?;
    let written = session.write_response_header(Box::new(header), false).await;
    written.map_err(|_| GatewayError::Internal)?;
    // From here on the client has a status: a failure can only cut the body (the request filter
    // then closes the connection without finishing it).
    loop {
        match answer.chunk().await {
            Ok(Some(chunk)) => {
                if session
                    .write_response_body(Some(chunk), false)
                    .await
                    .is_err()
                {
                    return Err(GatewayError::Internal);
                }
            }
            Ok(None) => break,
            Err(e) => {
                tracing::warn!(task = %task.id, error = %e.message(), "video content cut by the supplier");
                return Err(GatewayError::UpstreamProtocol);
            }
        }
    }
    supplier.client.release(answer).await;
    let done = session.write_response_body(Some(Bytes::new()), true).await;
    done.map(|()| true).map_err(|_| GatewayError::Internal)
}

/// The client's `Range` and `If-Range`, passed on to the supplier.
fn ranges(client: &http::HeaderMap) -> Vec<(http::HeaderName, String)> {
    [http::header::RANGE, http::header::IF_RANGE]
        .into_iter()
        .filter_map(|name| {
            let value = client.get(&name)?.to_str().ok()?.to_string();
            Some((name, value))
        })
        .collect()
}

/// The content's response header: the supplier's status and content headers, never cached,
/// the request id, chunked when the supplier gave no length.
fn content_header(
    status: u16,
    theirs: &ResponseHeader,
    request_id: &str,
) -> Result<ResponseHeader, GatewayError> {
    let mut header = ResponseHeader::build(status, Some(8)).map_err(|_| GatewayError::Internal)?;
    let chunked = !theirs.headers.contains_key(http::header::CONTENT_LENGTH);
    for name in CONTENT_HEADERS {
        if let Some(v) = theirs.headers.get(&name) {
            header
                .insert_header(name, v.clone())
                .map_err(|_| GatewayError::Internal)?;
        }
    }
    let extra = [
        (http::header::CACHE_CONTROL, "private, no-store"),
        (http::HeaderName::from_static("x-request-id"), request_id),
    ];
    for (name, value) in extra {
        header
            .insert_header(name, value)
            .map_err(|_| GatewayError::Internal)?;
    }
    if chunked {
        header
            .insert_header(http::header::TRANSFER_ENCODING, "chunked")
            .map_err(|_| GatewayError::Internal)?;
    }
    Ok(header)
}

/// A `GET` of `suffix` at `upstream` for `task`'s content; a supplier that cannot be reached is
/// logged (`what`) and answered 502.
async fn get(
    supplier: super::Supplier<'_>,
    upstream: &crate::upstream::accounts::Upstream,
    task: &Task,
    suffix: &str,
    headers: Vec<(http::HeaderName, String)>,
    what: &'static str,
) -> Result<Answer, GatewayError> {
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
