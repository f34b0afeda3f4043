//! `POST /compat/v1/videos`: check the body, route, hold, record the task, submit it to the
//! supplier; a refused or failed submission ends the task unpaid and releases the hold.

use super::supplier_state::SupplierState;
use super::wire::{ID_PREFIX, OBJECT_LIMIT, encode_segment, object, unavailable};
use super::{Desk, Supplier};
use crate::classify::Route;
use crate::ctx::RequestCtx;
use crate::errors::GatewayError;
use crate::inspect::video::Job;
use crate::inspect::{self, Kind};
use crate::money::admit::{self};
use crate::route::cooldown::{self, Cooling, Reason};
use crate::upstream::direct::{Call, CallError};
use crate::{respond, route};
use bytes::Bytes;
use chrono::Utc;
use money::RateMultiplier;
use opstate::KeyRecord;
use opstate::{Ending, Task, TaskBook, TaskStatus};
use pingora::proxy::Session;
use settings::{Model, Provider};
use std::time::Duration;

/// `POST /compat/v1/videos`: check, route, hold, record, submit.
pub(super) async fn create(
    desk: &Desk<'_>,
    book: &dyn TaskBook,
    session: &mut Session,
    ctx: &mut RequestCtx,
    caller: &KeyRecord,
) -> Result<bool, GatewayError> {
    let server = desk.supplier.server;
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
    let served = decision.model.model.clone();
    ctx.follow(decision);
    // Every account of a video model speaks one provider (configuration rule).
    let provider = ctx
        .attempts
        .order
        .first()
        .and_then(|&i| live.accounts.get(i))
        .map_or(Provider::OpenAi, |u| u.account.provider);
    job.check(&served, provider)?;
    let resolution = job.resolution(&served).to_string();
    // Veo is always told the seconds (the ones held), so the length made is the one charged.
    let seconds_sent = match provider {
        Provider::Gemini => Some(job.held_seconds(&served)),
        Provider::OpenAi | Provider::Anthropic => job.seconds,
    };
    let plan = admit::hold_for(
        &work,
        Route::VideoCreate,
        &served,
        caller,
        &live.settings,
        ctx.started_at_ms,
    )?;
    let wallets = desk.stores.wallets.as_ref();
    let ttl = desk.hold_ttl_ms;
    let hold = admit::reserve(wallets, caller.org_id, &ctx.request_id, &plan, ttl).await?;
    // Until the supplier accepts the task, `logging` releases the hold like any refused call.
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
    let create = Create::of(provider, job, &served, &resolution);
    let outcome = submit(desk, ctx, &create, &session.req_header().headers).await;
    answer(desk, book, session, ctx, task, outcome).await
}

/// Answers the client from the submission's outcome: the task object once the supplier accepted
/// it (the hold then belongs to the task), the supplier's refusal, or the failure; a task that
/// never ran is ended unpaid.
async fn answer(
    desk: &Desk<'_>,
    book: &dyn TaskBook,
    session: &mut Session,
    ctx: &mut RequestCtx,
    task: Task,
    outcome: Submitted,
) -> Result<bool, GatewayError> {
    match outcome {
        Submitted::Accepted { account, state } => {
            let sid = state.id.clone().unwrap_or_default();
            let status = state.status;
            if let Err(e) = book
                .accepted(&task.id, &account, &sid, status, state.progress)
                .await
            {
                // A task id that could not be recorded is never handed out: the client gets 503,
                // `logging` releases the hold, and the sweeper ends the `submitting` record as
                // lost (the supplier's task is the gateway's loss, logged here).
                tracing::error!(task = %task.id, supplier_task = %sid, error = %e, "accepted video task not recorded");
                return Err(GatewayError::TasksUnavailable);
            }
            // The hold now belongs to the task: settled when it ends.
            ctx.admission.hold = None;
            let task = Task {
                account_id: Some(account),
                supplier_task_id: Some(sid),
                status,
                progress: state.progress,
                ..task
            };
            let host = session.req_header().headers.get(http::header::HOST);
            let body = object(&desk.links, &task, host).to_string();
            respond::local(session, Bytes::from(body), &ctx.request_id).await
        }
        Submitted::Refused { status, body } => {
            let failure = (
                "supplier_refused".to_string(),
                format!("the supplier answered {status}"),
            );
            end_unpaid(book, &task.id, failure).await;
            let written = respond::json(session, status, body, &ctx.request_id).await;
            written.map(|()| true).map_err(|_| GatewayError::Internal)
        }
        Submitted::Failed(error) => {
            let failure = ("supplier_unavailable".to_string(), error.to_string());
            end_unpaid(book, &task.id, failure).await;
            Err(error)
        }
    }
}

/// A create as the served model's accounts take it.
pub(super) struct Create {
    suffix: String,
    body: Bytes,
    provider: Provider,
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

impl Create {
    /// The create as `provider`'s accounts take it (Veo's long-running predict, or OpenAI's
    /// `/videos`).
    fn of(provider: Provider, job: &Job, served: &Model, resolution: &str) -> Create {
        match provider {
            Provider::Gemini => Create {
                suffix: format!(
                    "/v1beta/models/{}:predictLongRunning",
                    encode_segment(&served.id)
                ),
                body: Bytes::from(job.veo_body(job.held_seconds(served), resolution)),
                provider,
            },
            Provider::OpenAi | Provider::Anthropic => Create {
                suffix: "/videos".to_string(),
                body: Bytes::from(job.openai_body(&served.id, resolution)),
                provider,
            },
        }
    }
}

pub(super) enum Submitted {
    Accepted {
        account: String,
        state: SupplierState,
    },
    /// The supplier refused the task (a 4xx, or the last account's 5xx): its answer is passed on.
    Refused {
        status: u16,
        body: Bytes,
    },
    Failed(GatewayError),
}

/// Sends the create to the accounts of the decision in order. Another account is tried only when
/// nothing reached the first (no connection) or it refused with a rate limit or a server error;
/// a create that may have reached a supplier is never sent twice (each costs money).
pub(super) async fn submit(
    desk: &Desk<'_>,
    ctx: &mut RequestCtx,
    create: &Create,
    client: &http::HeaderMap,
) -> Submitted {
    let Supplier {
        client: supplier,
        server,
    } = desk.supplier;
    let live = ctx.live.clone();
    let routing = &live.settings.routing;
    let mut last = Submitted::Failed(GatewayError::UpstreamUnreachable);
    for i in ctx.attempts.order.clone() {
        if ctx.attempts.tried.len() >= routing.max_attempts as usize {
            break;
        }
        let Some(upstream) = live.accounts.get(i) else {
            continue;
        };
        ctx.attempts.tried.push(i);
        ctx.attempts
            .first_attempt_at
            .get_or_insert_with(std::time::Instant::now);
        let call = Call {
            method: "POST",
            suffix: &create.suffix,
            body: Some(("application/json", create.body.clone())),
            headers: forwarded(&upstream.account.forward_headers, client),
        };
        let mut answer = match supplier.send(upstream, server, call).await {
            Ok(a) => a,
            Err(CallError::NotSent(m)) => {
                tracing::warn!(account = %upstream.account.id, error = %m, "video create not sent");
                let cooling = Duration::from_millis(routing.error_cooldown_ms);
                ctx.attempts
                    .to_cool
                    .push(Cooling::new(i, Reason::Unreachable, cooling));
                crate::attempt::cool(desk.stores, desk.metrics, ctx).await;
                continue;
            }
            Err(CallError::Lost(m)) => {
                tracing::warn!(account = %upstream.account.id, error = %m, "video create sent, answer lost");
                return Submitted::Failed(GatewayError::UpstreamTimeout);
            }
        };
        let status = answer.status();
        let verdict = answer
            .header()
            .map(|h| cooldown::judge(h, routing))
            .unwrap_or(cooldown::Verdict::Pass);
        let read = answer.body(OBJECT_LIMIT).await;
        supplier.release(answer).await;
        let Ok(bytes) = read else {
            return Submitted::Failed(GatewayError::UpstreamProtocol);
        };
        if let cooldown::Verdict::Cool { reason, duration } = verdict {
            ctx.attempts.to_cool.push(Cooling::new(i, reason, duration));
            crate::attempt::cool(desk.stores, desk.metrics, ctx).await;
            last = cooled(reason, duration, status, bytes);
            continue;
        }
        if !(200..300).contains(&status) {
            return Submitted::Refused {
                status,
                body: bytes,
            };
        }
        return accepted(create.provider, &bytes, &upstream.account.id);
    }
    last
}

/// What a cooled account's answer leaves if no other account takes the create: a rate limit
/// (with its reset), or the supplier's refusal passed on.
fn cooled(reason: Reason, duration: Duration, status: u16, body: Bytes) -> Submitted {
    if reason == Reason::RateLimited {
        Submitted::Failed(GatewayError::UsageLimitReached {
            resets_in_seconds: duration.as_secs().max(1),
        })
    } else {
        Submitted::Refused { status, body }
    }
}

/// Of the client's headers only the account's `forward_headers` pass, as on every call.
fn forwarded(names: &[String], client: &http::HeaderMap) -> Vec<(http::HeaderName, String)> {
    names
        .iter()
        .filter_map(|name| {
            let name = http::HeaderName::from_bytes(name.as_bytes()).ok()?;
            let value = client.get(&name)?.to_str().ok()?.to_string();
            Some((name, value))
        })
        .collect()
}

/// A supplier's 2xx answer to a create: the task it started, or a protocol failure when it names
/// no task.
fn accepted(provider: Provider, bytes: &[u8], account: &str) -> Submitted {
    let created = match provider {
        Provider::Gemini => SupplierState::operation_started(bytes),
        Provider::OpenAi | Provider::Anthropic => SupplierState::parse(bytes),
    };
    match created {
        Some(state) if state.id.as_deref().is_some_and(|id| !id.is_empty()) => {
            Submitted::Accepted {
                account: account.to_string(),
                state,
            }
        }
        _ => {
            tracing::warn!(account = %account, "video create answered without a task id");
            Submitted::Failed(GatewayError::UpstreamProtocol)
        }
    }
}

/// Ends a task that never ran (its hold is released by `logging`, which still owns it).
pub(super) async fn end_unpaid(book: &dyn TaskBook, id: &str, failure: (String, String)) {
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
