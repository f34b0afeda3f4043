//! The three video routes, answered from the request filter: the gateway makes the supplier calls
//! itself (`upstream::direct`) because a create's task id must be in the task book before the client
//! sees it, and a poll may end a task (and settle its hold) before it answers.

use super::content::content;
use super::create::create;
use super::poll::refresh;
use super::wire::{object, signed_id, unavailable};
use crate::classify::Route;
use crate::ctx::RequestCtx;
use crate::errors::GatewayError;
use crate::shared::Shared;
use crate::{auth, respond};
use bytes::Bytes;
use opstate::Task;
use pingora::proxy::Session;

/// Answers a video route (`Ok(true)`: answered). The signed content URL needs no key; everything
/// else needs a key whose group has the `video` feature.
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
    // Only a create goes through admission (which checks the key again in its store step).
    let admitted = route == Route::VideoCreate;
    let (caller, key_hash) = crate::auth::caller(s, header, route.surface(), admitted).await?;
    let caller = ctx.admission.caller.insert(caller).clone();
    ctx.admission.key_hash = Some(key_hash);
    auth::permit(&caller, route)?;
    if !ctx.live.router.allows_video(caller.group_id) {
        return Err(GatewayError::VideoNotPermitted);
    }
    let book = super::task_book(s).ok_or(GatewayError::TasksUnavailable)?;
    if route == Route::VideoCreate {
        return create(&super::desk(s), book, session, ctx, &caller).await;
    }
    let id = id.ok_or(GatewayError::Internal)?;
    let task = match book.get(&id).await.map_err(unavailable)? {
        Some(t) if t.organization_id == caller.org_id => t,
        _ => return Err(GatewayError::VideoNotFound(id)),
    };
    if route == Route::VideoContent {
        return download(s, session, ctx, &task).await;
    }
    let live = s.live();
    let ledger = super::ledger(s, &live);
    let task = refresh(super::supplier(s), &ledger, book, task).await;
    let body = object(
        &super::links(s),
        &task,
        session.req_header().headers.get(http::header::HOST),
    );
    respond::local(session, Bytes::from(body.to_string()), &ctx.request_id).await
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
    use crate::video::wire::encode_segment;

    #[test]
    fn signed_queries_and_segments() {
        assert!(Signed::of(None).is_none());
        assert!(Signed::of(Some("variant=video")).is_none());
        let s = Signed::of(Some("expires=12&signature=ab")).unwrap();
        assert_eq!((s.expires, s.signature.as_str()), (12, "ab"));
        assert_eq!(Signed::of(Some("signature=ab")).unwrap().expires, 0);
        assert_eq!(encode_segment("a/b?c"), "a%2Fb%3Fc");
    }
}
