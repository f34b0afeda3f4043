//! Reading the request body: once, bounded, replayable on every upstream attempt; and the top-level
//! scan of a JSON body.
//!
//! Pingora 0.9 has no supported way to read a body before choosing the upstream and still forward
//! it. We use its retry buffer (64 KiB, hard-coded): the body is read here with the buffer enabled
//! only for its last <= 64 KiB, so the buffer is never truncated and the proxy replays it on every
//! upstream attempt through `request_body_filter`, where the full (possibly rewritten) body is
//! substituted (see `upstream::rewrite::substitute_body` and docs/ARCHITECTURE.md §4).
//! Consequences, tested in the integration suite: bodies over 64 KiB need `Content-Length` (else
//! 411); bodies over `server.max_body_bytes` answer 413 before being read.
//!
//! Parsing touches only the top level of the JSON object: values are borrowed raw slices, so a
//! 3 MB conversation is scanned once and never re-encoded unless a field must change.

use crate::errors::GatewayError;
use bytes::{Bytes, BytesMut};
use indexmap::IndexMap;
use pingora::proxy::Session;
use serde_json::value::RawValue;

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

/// The top level of a JSON object body, values left raw.
pub(crate) type TopLevel<'a> = IndexMap<String, &'a RawValue>;

/// How deeply arrays and objects may nest in a JSON body (serde_json's own recursion limit). A
/// deeper body is refused before anything reaches a supplier: a supplier that fails on it with a
/// 5xx would cool its account for every tenant.
pub(crate) const MAX_JSON_DEPTH: usize = 128;

/// Parses the top level of a JSON object body, after checking its nesting depth.
pub(crate) fn top_level(body: &[u8]) -> Result<TopLevel<'_>, GatewayError> {
    if body.is_empty() {
        return Err(GatewayError::invalid("a JSON body is required", None));
    }
    if !nesting_within(body, MAX_JSON_DEPTH) {
        return Err(GatewayError::invalid(
            format!("the JSON body nests arrays and objects deeper than {MAX_JSON_DEPTH} levels"),
            None,
        ));
    }
    serde_json::from_slice::<TopLevel<'_>>(body)
        .map_err(|e| GatewayError::invalid(format!("the body is not a JSON object: {e}"), None))
}

/// Whether the arrays and objects of `body` nest at most `max` deep (brackets inside strings do not
/// count). One pass, no allocation; malformed JSON is left to the parser.
pub(crate) fn nesting_within(body: &[u8], max: usize) -> bool {
    let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
    for &b in body {
        if in_string {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                if depth > max {
                    return false;
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nesting_is_measured_outside_strings() {
        assert!(nesting_within(br#"{"a":[[1]]}"#, 3));
        assert!(!nesting_within(br#"{"a":[[1]]}"#, 2));
        assert!(nesting_within(br#"{"a":"[[[[[[[[\"[[["}"#, 1));
        assert!(!nesting_within(br#"{"a":"x\\"[[["}"#, 1));
        let deep = format!("{}{}", "[".repeat(129), "]".repeat(129));
        assert!(!nesting_within(deep.as_bytes(), MAX_JSON_DEPTH));
        let ok = format!("{}{}", "[".repeat(128), "]".repeat(128));
        assert!(nesting_within(ok.as_bytes(), MAX_JSON_DEPTH));
    }

    mod properties {
        use super::*;
        use proptest::prelude::*;

        proptest! {
            /// Arbitrary bytes never panic the top-level scan: a JSON object or a clear error.
            #[test]
            fn top_level_of_arbitrary_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..4000)) {
                let _ = top_level(&bytes);
            }

            /// Nesting is measured exactly for bracket-only documents.
            #[test]
            fn nesting_depth_is_exact(depth in 0usize..300) {
                let doc = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
                prop_assert_eq!(nesting_within(doc.as_bytes(), MAX_JSON_DEPTH), depth <= MAX_JSON_DEPTH);
            }

            /// Huge numbers and duplicate keys are the parser's business, never a panic.
            #[test]
            fn odd_but_valid_json(n in any::<u64>(), key in "[a-z]{1,8}") {
                let doc = format!(r#"{{"{key}":{n}e400,"{key}":1,"model":"m"}}"#);
                let _ = top_level(doc.as_bytes());
            }
        }
    }
}
