//! Reading the request body: once, bounded, replayable on every upstream attempt (the top-level
//! scan of a JSON body is `translate::request::top_level`).
//!
//! Pingora 0.9 has no supported way to read a body before choosing the upstream and still forward
//! it. We use its retry buffer (64 KiB, hard-coded): the body is read here with the buffer enabled
//! only for its last <= 64 KiB, so the buffer is never truncated and the proxy replays it on every
//! upstream attempt through `request_body_filter`, where the full (possibly rewritten) body is
//! substituted (see `upstream::rewrite::substitute_body` and docs/ARCHITECTURE.md §4).
//! Consequences, tested in the integration suite: bodies over 64 KiB need `Content-Length` (else
//! 411); bodies over `server.max_body_bytes` answer 413 before being read.

use crate::errors::GatewayError;
use bytes::{Bytes, BytesMut};
use pingora::proxy::Session;

/// Pingora's retry buffer size (`BODY_BUF_LIMIT`, not configurable in 0.9.1).
const RETRY_BUFFER_LIMIT: usize = 64 * 1024;

/// The client's body could not be read (or it could not be told to send it): 400, logged at debug.
fn unreadable(what: &str, e: &pingora::Error) -> GatewayError {
    tracing::debug!(error = %e, "{what}");
    GatewayError::InvalidBody {
        message: "the request body could not be read".into(),
        param: None,
    }
}

/// Reads the whole request body, at most `max` bytes, each read within `idle` (a client that
/// stops sending gets 408; its connection is not reused).
pub(crate) async fn read_body(
    session: &mut Session,
    max: usize,
    idle: std::time::Duration,
) -> Result<Bytes, GatewayError> {
    let declared = session
        .req_header()
        .headers
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<usize>().ok());
    if declared.is_some_and(|n| n > max) {
        return Err(GatewayError::BodyTooLarge { limit: max });
    }
    // A client that waits for `100 Continue` before sending its body (curl does for bodies over
    // 1 KiB) gets it now that the call is accepted; Pingora does not send it on its own, and the
    // client would otherwise wait for its own timeout (curl: 1 s). A body refused above never
    // gets one.
    let expects_continue = session
        .req_header()
        .headers
        .get(http::header::EXPECT)
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"));
    if expects_continue {
        session
            .as_mut()
            .write_continue_response()
            .await
            .map_err(|e| unreadable("writing 100 Continue failed", &e))?;
    }
    let mut buf = BytesMut::with_capacity(declared.unwrap_or(0).min(max));
    let mut buffering = false;
    loop {
        let remaining = declared.map(|n| n.saturating_sub(buf.len()));
        if !buffering && remaining.is_none_or(|r| r <= RETRY_BUFFER_LIMIT) {
            session.as_mut().enable_retry_buffering();
            buffering = true;
        }
        let read = tokio::time::timeout(idle, session.read_request_body()).await;
        let chunk = read
            .map_err(|_| GatewayError::RequestTimeout)?
            .map_err(|e| unreadable("reading the request body failed", &e))?;
        match chunk {
            Some(c) => {
                if buf.len() + c.len() > max {
                    return Err(GatewayError::BodyTooLarge { limit: max });
                }
                buf.extend_from_slice(&c);
            }
            None => break,
        }
    }
    if session.as_ref().retry_buffer_truncated() {
        return Err(GatewayError::LengthRequired);
    }
    if !buf.is_empty() && session.as_ref().get_retry_buffer().is_none() {
        tracing::error!(
            "request body read but pingora kept no retry buffer: it would never be forwarded"
        );
        return Err(GatewayError::Internal);
    }
    Ok(buf.freeze())
}
