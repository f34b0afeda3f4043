//! Writing the gateway's own answers (errors and local routes) to the client.

use crate::errors::{GatewayError, Surface};
use bytes::Bytes;
use pingora::http::ResponseHeader;
use pingora::proxy::Session;

/// Writes a complete JSON response.
pub async fn json(
    session: &mut Session,
    status: u16,
    body: Bytes,
    request_id: &str,
) -> pingora::Result<()> {
    json_with(session, status, body, request_id, None, None).await
}

/// Answers a local route with `body` (200): `Ok(true)`, the request is answered.
pub async fn local(
    session: &mut Session,
    body: Bytes,
    request_id: &str,
) -> Result<bool, GatewayError> {
    json(session, 200, body, request_id)
        .await
        .map(|()| true)
        .map_err(|_| GatewayError::Internal)
}

/// Answers with a hosted file (200): `Ok(true)`, the request is answered.
pub async fn file(
    session: &mut Session,
    file: opstate::MediaFile,
    request_id: &str,
) -> Result<bool, GatewayError> {
    let write = async {
        let mut header = ResponseHeader::build(200, Some(4))?;
        header.insert_header(http::header::CONTENT_TYPE, file.content_type.as_str())?;
        header.insert_header(http::header::CONTENT_LENGTH, file.bytes.len().to_string())?;
        header.insert_header(http::header::CACHE_CONTROL, "private, max-age=300")?;
        header.insert_header("x-request-id", request_id)?;
        session
            .write_response_header(Box::new(header), false)
            .await?;
        session.write_response_body(Some(file.bytes), true).await
    };
    write
        .await
        .map(|()| true)
        .map_err(|_: Box<pingora::Error>| GatewayError::Internal)
}

/// Writes a complete JSON response, with `Retry-After` and `Server-Timing` when given.
async fn json_with(
    session: &mut Session,
    status: u16,
    body: Bytes,
    request_id: &str,
    retry_after: Option<u64>,
    timing: Option<String>,
) -> pingora::Result<()> {
    let mut header = ResponseHeader::build(status, Some(4))?;
    header.insert_header(http::header::CONTENT_TYPE, "application/json")?;
    header.insert_header(http::header::CONTENT_LENGTH, body.len().to_string())?;
    header.insert_header("x-request-id", request_id)?;
    if let Some(secs) = retry_after {
        header.insert_header(http::header::RETRY_AFTER, secs.to_string())?;
    }
    if let Some(t) = timing {
        header.insert_header("server-timing", t)?;
    }
    session
        .write_response_header(Box::new(header), false)
        .await?;
    session.write_response_body(Some(body), true).await
}

/// Answers with `error` in the shape of `surface` (with the gateway's `Server-Timing`, when
/// given); returns its metric label. The connection is not reused when the request body may be
/// unread.
pub async fn error(
    session: &mut Session,
    surface: Surface,
    error: &GatewayError,
    request_id: &str,
    timing: Option<String>,
) -> pingora::Result<&'static str> {
    let reply = error.reply(surface);
    if !session.is_body_done() {
        session.set_keepalive(None);
    }
    let retry_after = error.retry_after();
    json_with(
        session,
        reply.status,
        reply.body,
        request_id,
        retry_after,
        timing,
    )
    .await?;
    Ok(reply.label)
}
