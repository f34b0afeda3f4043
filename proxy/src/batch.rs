//! Batch lines (issue 46): a call sent by admin-api's batch runner on behalf of the key that
//! created a batch, which it knows only by its keyed hash. The line carries the runner's
//! signature (`credentials::batch_line`, header `x-tollgate-batch`); a valid one makes three
//! differences, and nothing else differs from any call:
//!
//! - **Who pays**: the key whose hash the line names (looked up in the key directory as a
//!   presented key would be: a revoked or expired key is 401). A forged, altered or stale
//!   signature is 401, never a free call.
//! - **What it costs**: the served model's price × its `batch_discount` × the key's retail rate
//!   (and the wholesale rate × the discount): `money::admit::hold_for`.
//! - **When it runs**: never in the queue, and only while the account has room below
//!   `[batches] yield_above` of its capacity (429 `batch_capacity_yielded` otherwise: the runner
//!   tries again).
//!
//! **Once only.** The line's request id is the runner's (fixed before it was first sent). The
//! line is claimed in the store under that id before admission ([`claim`]); its answer replaces
//! the claim for [`ANSWER_TTL`] once it is complete ([`ended`]), before the call's money step. A
//! line sent again (a runner that died, a lost answer) is answered from the store, with no second
//! hold and no second charge; one still being served is 409 `batch_line_in_progress`. A line
//! refused before it was served (402, 429, a supplier failure that charged nothing) gives its
//! claim back, so it can be sent again; one whose answer was cut after it started keeps a 502
//! `batch_line_interrupted` as its answer (what was served is charged, as for any cut call).

pub(crate) use crate::batch_line::Line;
use crate::batch_line::renew_claims_once;
use crate::batch_line::{ANSWER_TTL, ANSWERED, CLAIM_TTL, CLAIMED, answer_kept, store_id};
use crate::ctx::RequestCtx;
use crate::errors::{GatewayError, Surface};
use crate::shared::Shared;
use bytes::Bytes;
use opstate::{BatchRef, KeyRecord, MediaFile};
use pingora::http::RequestHeader;
use pingora::proxy::Session;
use std::time::Duration;

/// How often the claims of the lines this gateway serves are renewed: two renewals may fail in
/// a row before a claim lapses.
const CLAIM_RENEW: Duration = Duration::from_secs(10);

/// Renews the claims of [`crate::batch_line::LiveClaims`] every [`CLAIM_RENEW`] until `shutdown` turns true, so a
/// live call keeps its line however long it takes ([`CLAIM_TTL`]).
pub(crate) async fn renew_claims(s: &Shared, mut shutdown: tokio::sync::watch::Receiver<bool>) {
    loop {
        tokio::select! {
            _ = shutdown.wait_for(|s| *s) => return,
            _ = tokio::time::sleep(CLAIM_RENEW) => {}
        }
        renew_claims_once(&s.live_claims, s.stores().media.as_ref()).await;
    }
}

/// The batch line `header` carries, verified; `None` without the header; 401 for one that does
/// not verify.
pub(crate) fn verified(s: &Shared, header: &RequestHeader) -> Result<Option<Line>, GatewayError> {
    let Some(value) = header.headers.get(credentials::batch_line::HEADER) else {
        return Ok(None);
    };
    let now_ms = crate::media::unix_now().saturating_mul(1000);
    let line = value
        .to_str()
        .ok()
        .and_then(|v| credentials::batch_line::verify(&s.hasher, v, now_ms))
        .ok_or_else(|| {
            tracing::warn!("refused a batch line whose signature does not verify");
            GatewayError::InvalidKey
        })?;
    Ok(Some(Line {
        batch: BatchRef {
            id: line.batch_id,
            line: line.line,
        },
        request_id: line.request_id,
        key_hash: line.key_hash,
        claimed: false,
        stage: crate::batch_line::Stage::of(header)?,
    }))
}

/// The key record of the key a line names, found as a presented key's is
/// (`auth::record_of`: a directory still being rebuilt is 503, not a revoked key).
pub(crate) async fn caller(s: &Shared, line: &Line) -> Result<KeyRecord, GatewayError> {
    crate::auth::record_of(&line.key_hash, s.stores().keys.as_ref()).await
}

/// What claiming a line found.
pub(crate) enum Claimed {
    /// This request serves it now.
    Fresh,
    /// It was served before: answered from the store.
    Answered,
    /// It is held for a supplier's batch (`crate::batch_offload`): its record.
    Held(MediaFile),
}

/// Claims the line of `ctx` (see [`Claimed`]); 409 while another request serves it.
pub(crate) async fn claim(
    s: &Shared,
    session: &mut Session,
    ctx: &mut RequestCtx,
) -> Result<Claimed, GatewayError> {
    let Some(line) = ctx.admission.batch.as_mut() else {
        return Ok(Claimed::Fresh);
    };
    let claim = MediaFile {
        content_type: CLAIMED.to_string(),
        bytes: Bytes::new(),
    };
    let media = s.stores().media.clone();
    let before = media
        .put_new(&store_id(&line.request_id), &claim, CLAIM_TTL)
        .await
        .map_err(|e| {
            tracing::error!(error = %e, "batch line claim failed");
            GatewayError::StoreUnavailable
        })?;
    let Some(kept) = before else {
        line.claimed = true;
        s.live_claims.insert(store_id(&line.request_id));
        return Ok(Claimed::Fresh);
    };
    if kept.content_type == crate::batch_line::HELD {
        return Ok(Claimed::Held(kept));
    }
    answer_kept(session, kept, &ctx.request_id).await?;
    Ok(Claimed::Answered)
}

/// Gives the claim of a line refused before it was served back (a 402, a 429, a bad body).
pub(crate) async fn refused(s: &Shared, ctx: &mut RequestCtx) {
    let Some(line) = ctx.admission.batch.as_mut().filter(|l| l.claimed) else {
        return;
    };
    line.claimed = false;
    let id = store_id(&line.request_id);
    s.live_claims.remove(&id);
    if let Err(e) = s.stores().media.remove(&id).await {
        // The claim lapses by itself (`CLAIM_TTL`).
        tracing::warn!(error = %e, "could not give a batch line's claim back");
    }
}

/// At the end of a line this request served (before its money step): its complete answer is
/// kept as the line's; an answer cut after it started is kept as 502 `batch_line_interrupted`;
/// a line nothing answered (the gateway's own error, nothing charged) gives its claim back.
pub(crate) async fn ended(s: &Shared, ctx: &mut RequestCtx) {
    let Some(line) = ctx.admission.batch.as_ref().filter(|l| l.claimed) else {
        return;
    };
    let id = store_id(&line.request_id);
    s.live_claims.remove(&id);
    let kept = match ctx.answer.batch.take() {
        None => None,
        Some(c) if c.complete && !c.overflow => Some((c.status, Bytes::from(c.body))),
        Some(_) => {
            let reply = GatewayError::BatchLineInterrupted
                .reply(Surface::Client(crate::errors::Family::OpenAi));
            Some((reply.status, reply.body))
        }
    };
    let media = s.stores().media.clone();
    let written = match kept {
        Some((status, bytes)) => {
            let file = MediaFile {
                content_type: format!("{ANSWERED}{status}"),
                bytes,
            };
            media.put(&id, &file, ANSWER_TTL).await
        }
        None => media.remove(&id).await,
    };
    if let Err(e) = written {
        // The claim lapses after `CLAIM_TTL`; a line sent again before is told to wait.
        tracing::warn!(error = %e, request_id = %line.request_id, "could not keep a batch line's answer");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch_line::LiveClaims;
    use opstate::Media;

    /// A claim this gateway serves is renewed; once answered (or gone) it is forgotten, and an
    /// answer is never touched.
    #[tokio::test]
    async fn live_claims_are_renewed_until_answered() {
        let store = opstate::MemoryStore::default();
        let claims = LiveClaims::default();
        let claim = MediaFile {
            content_type: CLAIMED.to_string(),
            bytes: Bytes::new(),
        };
        let short = Duration::from_millis(200);
        store.put_new("line-a", &claim, short).await.unwrap();
        store.put_new("line-b", &claim, short).await.unwrap();
        claims.insert("line-a".into());
        claims.insert("line-b".into());
        tokio::time::sleep(Duration::from_millis(120)).await;
        renew_claims_once(&claims, &store).await;
        tokio::time::sleep(Duration::from_millis(120)).await;
        // Past its first TTL: renewed to CLAIM_TTL.
        assert!(store.get("line-a").await.unwrap().is_some());
        let answer = MediaFile {
            content_type: format!("{ANSWERED}200"),
            bytes: Bytes::from_static(b"{}"),
        };
        store.put("line-b", &answer, short).await.unwrap();
        renew_claims_once(&claims, &store).await;
        assert_eq!(
            claims.snapshot(),
            vec!["line-a".to_string()],
            "the answered line is forgotten"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
        assert!(
            store.get("line-b").await.unwrap().is_none(),
            "the answer kept its own TTL"
        );
    }
}
