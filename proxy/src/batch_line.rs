//! A batch line's state in a request (`crate::batch` has the rules): the verified signature and
//! the answer collected for the store.

use crate::errors::GatewayError;
use bytes::Bytes;
use opstate::{BatchRef, MediaFile};
use pingora::http::ResponseHeader;
use pingora::proxy::Session;
use std::time::Duration;

/// How long a line's answer is kept: a runner that died comes back well within it.
pub(crate) const ANSWER_TTL: Duration = Duration::from_secs(48 * 3600);
/// The prefix of a kept answer's content type: `batch-answer {status}`.
pub(crate) const ANSWERED: &str = "tollgate/batch-answer ";
/// The content type of a line held for a supplier's batch (`crate::batch_offload`).
pub(crate) const HELD: &str = "tollgate/batch-line-held";

/// How long a batch line's claim lasts unless renewed: the gateway serving the line renews it
/// (`crate::batch::renew_claims`), so a gateway that died mid-line lets the line be served again
/// within this.
pub(crate) const CLAIM_TTL: Duration = Duration::from_secs(30);
/// The content type of a claim that has no answer yet.
pub(crate) const CLAIMED: &str = "tollgate/batch-line-claimed";

/// The store ids of the lines this gateway is serving now (claimed, not yet answered).
#[derive(Default)]
pub(crate) struct LiveClaims(std::sync::Mutex<std::collections::HashSet<String>>);

impl LiveClaims {
    pub(crate) fn insert(&self, id: String) {
        if let Ok(mut m) = self.0.lock() {
            m.insert(id);
        }
    }

    pub(crate) fn remove(&self, id: &str) {
        if let Ok(mut m) = self.0.lock() {
            m.remove(id);
        }
    }

    pub(crate) fn snapshot(&self) -> Vec<String> {
        self.0
            .lock()
            .map(|m| m.iter().cloned().collect())
            .unwrap_or_default()
    }
}

/// Moves the deadline of every claim this gateway serves to [`CLAIM_TTL`] from now; a claim no
/// longer in the store (answered, given back) is forgotten.
pub(crate) async fn renew_claims_once(claims: &LiveClaims, media: &dyn opstate::Media) {
    for id in claims.snapshot() {
        match media.touch(&id, CLAIMED, CLAIM_TTL).await {
            Ok(true) => {}
            Ok(false) => claims.remove(&id),
            Err(e) => {
                tracing::warn!(error = %e, line = %id, "batch line claim not renewed; retrying")
            }
        }
    }
}

/// Where the store keeps a line's claim, answer or hold record.
pub(crate) fn store_id(request_id: &str) -> String {
    format!("batch-line:{request_id}")
}

/// The largest answer kept; a larger one is kept as 502 `batch_line_interrupted`.
pub(crate) const MAX_ANSWER_BYTES: usize = 8 * 1024 * 1024;

/// The header naming a signed line's stage (`crate::batch_offload`).
pub(crate) const STAGE_HEADER: &str = "x-tollgate-batch-stage";

/// What a signed batch line asks of the gateway.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum Stage {
    /// Serve it as a call.
    #[default]
    Call,
    Hold,
    Book,
}

impl Stage {
    /// The stage a request names; 400 for an unknown one.
    pub(crate) fn of(header: &pingora::http::RequestHeader) -> Result<Stage, GatewayError> {
        match header.headers.get(STAGE_HEADER).map(|v| v.as_bytes()) {
            None => Ok(Stage::Call),
            Some(b"hold") => Ok(Stage::Hold),
            Some(b"book") => Ok(Stage::Book),
            Some(_) => Err(GatewayError::InvalidBody {
                message: format!("{STAGE_HEADER} must be hold or book"),
                param: None,
            }),
        }
    }
}

/// A verified batch line.
#[derive(Debug, Clone)]
pub(crate) struct Line {
    pub batch: BatchRef,
    pub request_id: String,
    pub key_hash: String,
    /// The claim is this request's (given back or replaced by the answer at its end).
    pub claimed: bool,
    /// Served as a call, held for the supplier's batch, or booked from it.
    pub stage: Stage,
}

/// The answer being collected for a batch line (`answer::body`).
#[derive(Debug, Default)]
pub(crate) struct Capture {
    pub status: u16,
    pub body: Vec<u8>,
    pub complete: bool,
    pub overflow: bool,
}

impl Capture {
    /// Adds a chunk the client is sent.
    pub(crate) fn add(&mut self, chunk: Option<&Bytes>, end_of_stream: bool) {
        if let Some(c) = chunk {
            if self.body.len() + c.len() > MAX_ANSWER_BYTES {
                self.overflow = true;
            } else if !self.overflow {
                self.body.extend_from_slice(c);
            }
        }
        self.complete |= end_of_stream;
    }
}

/// Answers a line with what the store kept of it: its answer (`Ok(true)`), or 409 while it is
/// being served.
pub(crate) async fn answer_kept(
    session: &mut Session,
    kept: MediaFile,
    request_id: &str,
) -> Result<bool, GatewayError> {
    let status = kept
        .content_type
        .strip_prefix(ANSWERED)
        .and_then(|s| s.parse::<u16>().ok())
        .ok_or(GatewayError::BatchLineInProgress)?;
    replay(session, status, kept.bytes, request_id)
        .await
        .map_err(|_| GatewayError::Internal)?;
    Ok(true)
}

/// Answers a line sent again with its kept answer.
async fn replay(
    session: &mut Session,
    status: u16,
    body: Bytes,
    request_id: &str,
) -> pingora::Result<()> {
    let mut header = ResponseHeader::build(status, Some(4))?;
    header.insert_header(http::header::CONTENT_TYPE, "application/json")?;
    header.insert_header(http::header::CONTENT_LENGTH, body.len().to_string())?;
    header.insert_header("x-request-id", request_id)?;
    header.insert_header("x-tollgate-batch-replay", "true")?;
    session
        .write_response_header(Box::new(header), false)
        .await?;
    session.write_response_body(Some(body), true).await
}
