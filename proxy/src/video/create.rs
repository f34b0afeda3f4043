//! `POST /compat/v1/videos`, a create through the phases of any call. Admission ([`admit`], from
//! `admission::prepare`): check the body, route, hold, record the task `submitting`, and leave the
//! call the create body its accounts take. Then the attempts of every call (`attempt.rs`: the next
//! account of the decision, a connection failure or a rate limit or server error cooled and failed
//! over; a create that may have reached a supplier is never sent twice), the rewrite for the
//! account (`upstream::rewrite`: `/videos` or Veo's `predictLongRunning`), and the answer
//! (`answer.rs`): a supplier's refusal passes on as any supplier error; its acceptance (2xx) is
//! collected and the client gets the task's object instead ([`answered`]). At the end
//! ([`ended`], from `ending::end`, before the call's settlement): an accepted task is recorded
//! and keeps the hold; a task that never ran is ended unpaid and the settlement releases the hold.

use super::supplier_state::SupplierState;
use super::wire::{ID_PREFIX, object, unavailable};
use super::{Desk, Links};
use crate::call::Call;
use crate::classify::Route;
use crate::ctx::RequestCtx;
use crate::errors::GatewayError;
use crate::inspect::video::Job;
use crate::inspect::{self, Kind};
use crate::money::admit;
use crate::route;
use crate::wire::cells::{self, Bodies};
use bytes::Bytes;
use chrono::Utc;
use money::RateMultiplier;
use opstate::KeyRecord;
use opstate::{Ending, Task, TaskBook, TaskStatus};
use pingora::proxy::Session;
use settings::{Model, Provider};
use std::time::Duration;

/// Admits `POST /compat/v1/videos`: check, route, hold, record the task; the call then goes to
/// the decision's accounts like any other.
pub(super) async fn admit(
    desk: &Desk<'_>,
    book: &dyn TaskBook,
    session: &mut Session,
    ctx: &mut RequestCtx,
    caller: &KeyRecord,
) -> Result<(), GatewayError> {
    let server = desk.server;
    let idle = Duration::from_millis(server.request_body_timeout_ms);
    let original = inspect::body::read_body(session, server.max_body_bytes, idle).await?;
    let work = inspect::work(Route::VideoCreate, session.req_header(), &original)?;
    let Kind::Video(job) = &work.kind else {
        return Err(GatewayError::Internal);
    };
    let live = ctx.live.clone();
    let key_hash = ctx.admission.key_hash.clone().unwrap_or_default();
    let who = route::Caller::of(caller, &key_hash, &ctx.request_id, &live.settings);
    let decision = route::decide(
        &route::Routing::new(&live, desk.stores, desk.queue, desk.metrics),
        &work,
        Route::VideoCreate,
        who,
        None,
    )
    .await?;
    let model = decision.model.clone();
    let served = &model.model;
    ctx.follow(decision);
    // Every account of a video model speaks one provider (configuration rule).
    let provider = ctx
        .attempts
        .order
        .first()
        .and_then(|&i| live.accounts.get(i))
        .map_or(Provider::OpenAi, |u| u.account.provider);
    job.check(served, provider)?;
    let resolution = job.resolution(served).to_string();
    // Veo is always told the seconds (the ones held), so the length made is the one charged.
    let seconds_sent = match provider {
        Provider::Gemini => Some(job.held_seconds(served)),
        Provider::OpenAi | Provider::Anthropic => job.seconds,
    };
    let plan = admit::hold_for(
        &work,
        Route::VideoCreate,
        served,
        caller,
        admit::On {
            settings: &live.settings,
            started_at_ms: ctx.started_at_ms,
            batch: None,
        },
    )?;
    let wallets = desk.stores.wallets.as_ref();
    let ttl = desk.hold_ttl_ms;
    let hold = admit::reserve(wallets, caller.org_id, &ctx.request_id, &plan, ttl).await?;
    // Until the supplier accepts the task, the call's settlement releases the hold like any
    // refused call's.
    ctx.admission.hold = Some(hold.clone());
    let task = new_task(
        caller,
        &job.model,
        &served.id,
        &resolution,
        seconds_sent,
        &hold,
    );
    book.insert(task.clone()).await.map_err(unavailable)?;
    let body = create_body(provider, job, served, &resolution);
    let mut bodies = Bodies::default();
    bodies.insert(cells::target(provider, Route::VideoCreate), body);
    ctx.admission.task = Some(Box::new(task));
    let default_output = live.settings.money.default_output_tokens;
    ctx.admission.call = Some(Call::new(work, None, bodies, model, default_output));
    Ok(())
}

/// What the client gets for a create the supplier accepted (2xx), from the supplier's whole
/// answer `bytes` (`provider`'s: an OpenAI video object, or a Veo operation) on `account`: the
/// task's object, with the gateway's id. A 2xx that names no task is the supplier's protocol
/// failure: the task ends failed (`upstream_invalid_response`) and its object says so (the
/// status line was already written).
pub(super) fn answered(
    links: &Links<'_>,
    task: &mut Task,
    (provider, account): (Provider, &str),
    bytes: &[u8],
    host: Option<&str>,
) -> Bytes {
    let created = match provider {
        Provider::Gemini => SupplierState::operation_started(bytes),
        Provider::OpenAi | Provider::Anthropic => SupplierState::parse(bytes),
    };
    match created {
        Some(state) if state.id.as_deref().is_some_and(|id| !id.is_empty()) => {
            task.account_id = Some(account.to_string());
            task.supplier_task_id = state.id;
            task.status = state.status;
            task.progress = state.progress;
        }
        _ => {
            tracing::warn!(task = %task.id, account = %account, "video create answered without a task id");
            task.status = TaskStatus::Failed;
            task.failure_code = Some("upstream_invalid_response".to_string());
            task.failure_message = Some("the supplier accepted the task without naming it".into());
        }
    }
    Bytes::from(object(links, task, host).to_string())
}

/// Records how the create ended, before the call's settlement: an accepted task in the task
/// book (the hold then belongs to the task, settled when it ends), any other task ended unpaid
/// (the settlement releases the hold). `status`: what the client received (0: nothing).
pub(super) async fn ended(book: &dyn TaskBook, ctx: &mut RequestCtx, status: u16) {
    let Some(task) = ctx.admission.task.take() else {
        return;
    };
    if let (Some(account), Some(sid)) = (&task.account_id, &task.supplier_task_id) {
        match book
            .accepted(&task.id, account, sid, task.status, task.progress)
            .await
        {
            Ok(_) => ctx.admission.hold = None,
            // The client has the task's id: the settlement releases the hold, and the sweeper
            // ends the `submitting` record as lost (the supplier's task is the gateway's loss,
            // logged here).
            Err(e) => {
                tracing::error!(task = %task.id, supplier_task = %sid, error = %e, "accepted video task not recorded")
            }
        }
        return;
    }
    let failure = match (task.failure_code, ctx.admission.refusal) {
        (Some(code), _) => (code, task.failure_message.unwrap_or_default()),
        (None, Some(refusal)) => ("supplier_unavailable".to_string(), refusal.to_string()),
        (None, None) if status > 0 => (
            "supplier_refused".to_string(),
            format!("the supplier answered {status}"),
        ),
        (None, None) => (
            "supplier_unavailable".to_string(),
            "no answer was written".to_string(),
        ),
    };
    end_unpaid(book, &task.id, failure).await;
}

/// A create's failure once its request may have reached a supplier: a connection that broke
/// after the request was written (read, write, closed) lost the answer, which is said as a
/// timeout (504 `upstream_timeout`), never as an unreachable supplier: the task may be running.
pub(super) fn lost(e: &pingora::Error, failure: GatewayError) -> GatewayError {
    use pingora::ErrorType::{ConnectionClosed, ReadError, WriteError};
    match (failure, e.etype()) {
        (GatewayError::UpstreamUnreachable, ReadError | WriteError | ConnectionClosed) => {
            GatewayError::UpstreamTimeout
        }
        (failure, _) => failure,
    }
}

/// The task's record before its submission (`submitting`): who asked, the model asked and
/// served, the resolution and seconds sent, and the hold it will be settled against.
fn new_task(
    caller: &KeyRecord,
    model_requested: &str,
    served: &str,
    resolution: &str,
    seconds_sent: Option<u64>,
    hold: &admit::Hold,
) -> Task {
    let now = Utc::now();
    Task {
        id: format!("{ID_PREFIX}{}", uuid::Uuid::new_v4().simple()),
        organization_id: caller.org_id,
        api_key_id: caller.key_id,
        group_id: caller.group_id,
        model_requested: model_requested.to_string(),
        model_served: served.to_string(),
        resolution: resolution.to_string(),
        seconds_requested: seconds_sent.map(|s| i64::try_from(s).unwrap_or(i64::MAX)),
        account_id: None,
        supplier_task_id: None,
        hold_id: hold.id.clone(),
        hold_nanos: hold.amount.nanos(),
        retail_rate_ppm: hold.rate.ppm(),
        wholesale_rate_ppm: hold.wholesale.map(RateMultiplier::ppm),
        status: TaskStatus::Submitting,
        progress: 0,
        failure_code: None,
        failure_message: None,
        seconds_charged: None,
        cost_nanos: None,
        created_at: now,
        updated_at: now,
        checked_at: now,
        completed_at: None,
    }
}

/// The create's body as `provider`'s accounts take it: Veo's long-running predict, or the
/// OpenAI video API's (the path is `wire::cells::upstream_path`'s).
fn create_body(provider: Provider, job: &Job, served: &Model, resolution: &str) -> Bytes {
    match provider {
        Provider::Gemini => Bytes::from(job.veo_body(job.held_seconds(served), resolution)),
        Provider::OpenAi | Provider::Anthropic => {
            Bytes::from(job.openai_body(&served.id, resolution))
        }
    }
}

/// Ends a task that never ran (its hold is released by the call's settlement, which still owns
/// it).
async fn end_unpaid(book: &dyn TaskBook, id: &str, failure: (String, String)) {
    let ending = Ending {
        status: TaskStatus::Failed,
        seconds: 0,
        cost_nanos: 0,
        failure: Some(failure),
    };
    if let Err(e) = book.ended(id, &ending).await {
        tracing::warn!(task = %id, error = %e, "refused video task not marked failed");
    }
}
