//! The video module's entry points. A create's steps in the phases of every call: its admission
//! ([`admit`]), its answer ([`answered`]), its failure ([`lost`]) and its end ([`ended`]). The
//! poll and download routes, answered from the request filter ([`serve`]): the gateway makes
//! their supplier calls itself (`upstream::direct`) because a poll may end a task (and settle its
//! hold) before it answers, and a download streams a file the supplier keeps.

use super::content::content;
use super::create;
use super::poll::refresh;
use super::wire::{object, signed_id, unavailable};
use crate::classify::Route;
use crate::ctx::RequestCtx;
use crate::errors::GatewayError;
use crate::shared::Shared;
use crate::{auth, respond};
use bytes::Bytes;
use opstate::{KeyRecord, Task};
use pingora::proxy::Session;

/// Admits a create of `caller`, whose key was checked and permitted (`admission::prepare`):
/// its group must have the `video` feature and the gateway a task book.
pub(crate) async fn admit(
    s: &Shared,
    session: &mut Session,
    ctx: &mut RequestCtx,
    caller: &KeyRecord,
) -> Result<(), GatewayError> {
    if !ctx.live.router.allows_video(caller.group_id) {
        return Err(GatewayError::VideoNotPermitted);
    }
    let book = super::task_book(s).ok_or(GatewayError::TasksUnavailable)?;
    create::admit(&super::desk(s), book, session, ctx, caller).await
}

/// The client's body for a create whose supplier accepted it (2xx): the supplier's whole answer
/// `bytes` becomes the task's object (`create::answered`). `None`: not a video create.
pub(crate) fn answered(s: &Shared, ctx: &mut RequestCtx, bytes: &[u8]) -> Option<Bytes> {
    let live = ctx.live.clone();
    let upstream = ctx.current().and_then(|i| live.accounts.get(i))?;
    let host = ctx.admission.call.as_ref().and_then(|c| c.host.clone());
    let task = ctx.admission.task.as_mut()?;
    let answerer = (upstream.account.provider, upstream.account.id.as_str());
    let links = super::links(s);
    Some(create::answered(
        &links,
        task,
        answerer,
        bytes,
        host.as_deref(),
    ))
}

/// A video create's failure as the client is told it (`create::lost`); any other call's as it is.
pub(crate) fn lost(ctx: &RequestCtx, e: &pingora::Error, failure: GatewayError) -> GatewayError {
    match ctx.admission.task {
        Some(_) => create::lost(e, failure),
        None => failure,
    }
}

/// Records how a video create ended (`create::ended`), before the call's settlement; nothing for
/// any other call.
pub(crate) async fn ended(s: &Shared, ctx: &mut RequestCtx, status: u16) {
    if ctx.admission.task.is_none() {
        return;
    }
    match super::task_book(s) {
        Some(book) => create::ended(book, ctx, status).await,
        None => {
            tracing::error!(request_id = %ctx.request_id, "video create ended without a task book")
        }
    }
}

/// Answers a poll or a download (`Ok(true)`: answered). The signed content URL needs no key;
/// everything else needs a key whose group has the `video` feature.
pub(crate) async fn serve(
    s: &Shared,
    session: &mut Session,
    ctx: &mut RequestCtx,
    route: Route,
) -> Result<bool, GatewayError> {
    let header = session.req_header();
    let id = Route::video_task_id(header.uri.path()).map(str::to_string);
    if route == Route::VideoContent
        && let Some(signed) = Signed::of(header.uri.query())
    {
        let id = id.ok_or(GatewayError::VideoUrlInvalid)?;
        if !s.signer.verify(
            &signed_id(&id),
            signed.expires,
            &signed.signature,
            crate::media::unix_now(),
        ) {
            return Err(GatewayError::VideoUrlInvalid);
        }
        let book = super::task_book(s).ok_or(GatewayError::TasksUnavailable)?;
        let task = book.get(&id).await.map_err(unavailable)?;
        let task = task.ok_or(GatewayError::VideoUrlInvalid)?;
        return download(s, session, ctx, &task).await;
    }
    // A poll or a download is no admitted call (the key is not checked again in a store step).
    let (caller, key_hash) = crate::auth::caller(s, header, route.surface(), false).await?;
    let caller = ctx.admission.caller.insert(caller).clone();
    ctx.admission.key_hash = Some(key_hash);
    auth::permit(&caller, route)?;
    if !ctx.live.router.allows_video(caller.group_id) {
        return Err(GatewayError::VideoNotPermitted);
    }
    let book = super::task_book(s).ok_or(GatewayError::TasksUnavailable)?;
    let id = id.ok_or(GatewayError::Internal)?;
    let task = match book.get(&id).await.map_err(unavailable)? {
        Some(t) if t.organization_id == caller.org_id => t,
        _ => return Err(GatewayError::VideoNotFound(id)),
    };
    if route == Route::VideoContent {
        return download(s, session, ctx, &task).await;
    }
    let task = past_submission(book, task).await;
    let live = s.live();
    let ledger = super::ledger(s, &live);
    let task = refresh(super::supplier(s), &ledger, book, task).await;
    let host = session.req_header().headers.get(http::header::HOST);
    let body = object(&super::links(s), &task, host.and_then(|h| h.to_str().ok()));
    respond::local(session, Bytes::from(body.to_string()), &ctx.request_id).await
}

/// A task read while still `submitting`, if it is young: its create's acceptance is recorded
/// when that call ends, just after its client got the task's id (`create::ended`), so a poll sent
/// at once may come first. It is read again, every 20 ms for up to a second, until the acceptance
/// is there; a task whose acceptance never comes is answered as it stands (the sweeper ends it).
async fn past_submission(book: &dyn opstate::TaskBook, mut task: Task) -> Task {
    let young = chrono::Utc::now() - task.created_at < chrono::Duration::seconds(10);
    if !young {
        return task;
    }
    for _ in 0..50 {
        if task.status != opstate::TaskStatus::Submitting {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        match book.get(&task.id).await {
            Ok(Some(again)) => task = again,
            _ => break,
        }
    }
    task
}

/// A task's content, from the accounts in force (a task outlives the configuration it began in).
async fn download(
    s: &Shared,
    session: &mut Session,
    ctx: &RequestCtx,
    task: &Task,
) -> Result<bool, GatewayError> {
    let live = s.live();
    content(
        super::supplier(s),
        &live.accounts,
        session,
        &ctx.request_id,
        task,
    )
    .await
}

/// `expires` and `signature` of a signed content URL.
pub(super) struct Signed {
    expires: u64,
    signature: String,
}

impl Signed {
    /// `None` when the query carries neither (the request must then bring a key); a query with
    /// one of them but not a valid pair is a bad signature (`expires` 0 never verifies).
    fn of(query: Option<&str>) -> Option<Signed> {
        let query = query?;
        let mut expires = None;
        let mut signature = None;
        for pair in query.split('&') {
            match pair.split_once('=') {
                Some(("expires", v)) => expires = Some(v.parse::<u64>().unwrap_or(0)),
                Some(("signature", v)) => signature = Some(v.to_string()),
                _ => {}
            }
        }
        if expires.is_none() && signature.is_none() {
            return None;
        }
        Some(Signed {
            expires: expires.unwrap_or(0),
            signature: signature.unwrap_or_default(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::segment;

    #[test]
    fn signed_queries_and_segments() {
        assert!(Signed::of(None).is_none());
        assert!(Signed::of(Some("variant=video")).is_none());
        let s = Signed::of(Some("expires=12&signature=ab")).unwrap();
        assert_eq!((s.expires, s.signature.as_str()), (12, "ab"));
        assert_eq!(Signed::of(Some("signature=ab")).unwrap().expires, 0);
        assert_eq!(segment("a/b?c"), "a%2Fb%3Fc");
    }
}
