//! The three video routes, answered from the request filter: the gateway makes the supplier calls
//! itself (`supplier.rs`) because a create's task id must be in the task book before the client
//! sees it, and a poll may end a task (and settle its hold) before it answers.

use super::supplier::{Call, CallError};
use crate::classify::Route;
use crate::ctx::RequestCtx;
use crate::errors::GatewayError;
use crate::inspect::{self, Kind};
use crate::money::admit::{self, Hold};
use crate::money::{price, settle};
use crate::route::cooldown::{self, Cooling, Reason};
use crate::shared::Shared;
use crate::{auth, respond, route};
use bytes::Bytes;
use chrono::Utc;
use money::{NanoUsd, RateMultiplier};
use opstate::{Ending, Task, TaskBook, TaskBookError, TaskStatus};
use opstate::{KeyRecord, Measurement, Settlement, UsageEvent};
use pingora::http::ResponseHeader;
use pingora::proxy::Session;
use serde_json::{Value, json};
use settings::Provider;
use std::time::Duration;

/// Largest task object read from a supplier.
const OBJECT_LIMIT: usize = 1024 * 1024;
/// Prefix of the gateway's task ids.
const ID_PREFIX: &str = "video_";

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
        return content(s, session, ctx, &task).await;
    }
    // Only a create goes through admission (which checks the key again in its store step).
    let admitted = route == Route::VideoCreate;
    let (caller, key_hash) = s.authenticate(header, route.surface(), admitted).await?;
    let caller = ctx.caller.insert(caller).clone();
    ctx.key_hash = Some(key_hash);
    auth::permit(&caller, route)?;
    if !ctx.live.router.allows_video(caller.group_id) {
        return Err(GatewayError::VideoNotPermitted);
    }
    let book = super::task_book(s).ok_or(GatewayError::TasksUnavailable)?;
    if route == Route::VideoCreate {
        return create(s, book, session, ctx, &caller).await;
    }
    let id = id.ok_or(GatewayError::Internal)?;
    let task = match book.get(&id).await.map_err(unavailable)? {
        Some(t) if t.organization_id == caller.org_id => t,
        _ => return Err(GatewayError::VideoNotFound(id)),
    };
    if route == Route::VideoContent {
        return content(s, session, ctx, &task).await;
    }
    let task = refresh(s, book, task).await;
    let body = object(
        s,
        &task,
        session.req_header().headers.get(http::header::HOST),
    );
    respond::local(session, Bytes::from(body.to_string()), &ctx.request_id).await
}

fn unavailable(e: TaskBookError) -> GatewayError {
    tracing::error!(error = %e, "video task book unavailable");
    GatewayError::TasksUnavailable
}

/// `POST /compat/v1/videos`: check, route, hold, record, submit.
async fn create(
    s: &Shared,
    book: &dyn TaskBook,
    session: &mut Session,
    ctx: &mut RequestCtx,
    caller: &KeyRecord,
) -> Result<bool, GatewayError> {
    let server = &s.settings.server;
    let idle = Duration::from_millis(server.request_body_timeout_ms);
    let original = inspect::body::read_body(session, server.max_body_bytes, idle).await?;
    let work = inspect::work(Route::VideoCreate, session.req_header(), &original)?;
    let Kind::Video(job) = &work.kind else {
        return Err(GatewayError::Internal);
    };
    let live = ctx.live.clone();
    let key_hash = ctx.key_hash.clone().unwrap_or_default();
    let who = route::Caller::of(caller, &key_hash, &ctx.request_id, &live.settings);
    let decision = route::decide(&s.routing(&live), &work, Route::VideoCreate, who, None).await?;
    let served = decision.model.model.clone();
    ctx.follow(decision);
    // Every account of a video model speaks one provider (configuration rule).
    let provider = ctx
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
    let ttl = s.settings.video.task_ttl_ms + s.settings.money.hold_ttl_ms;
    let wallets = s.stores().wallets.as_ref();
    let hold = admit::reserve(wallets, caller.org_id, &ctx.request_id, &plan, ttl).await?;
    // Until the supplier accepts the task, `logging` releases the hold like any refused call.
    ctx.hold = Some(hold.clone());
    let now = Utc::now();
    let task = Task {
        id: format!("{ID_PREFIX}{}", uuid::Uuid::new_v4().simple()),
        organization_id: caller.org_id,
        api_key_id: caller.key_id,
        group_id: caller.group_id,
        model_requested: job.model.clone(),
        model_served: served.id.clone(),
        resolution: resolution.clone(),
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
    };
    book.insert(task.clone()).await.map_err(unavailable)?;
    let create = match provider {
        Provider::Gemini => Create {
            suffix: format!(
                "/v1beta/models/{}:predictLongRunning",
                encode_segment(&served.id)
            ),
            body: Bytes::from(job.veo_body(job.held_seconds(&served), &resolution)),
            provider,
        },
        Provider::OpenAi | Provider::Anthropic => Create {
            suffix: "/videos".to_string(),
            body: Bytes::from(job.openai_body(&served.id, &resolution)),
            provider,
        },
    };
    let outcome = submit(s, ctx, &create, &session.req_header().headers).await;
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
            ctx.hold = None;
            let task = Task {
                account_id: Some(account),
                supplier_task_id: Some(sid),
                status,
                progress: state.progress,
                ..task
            };
            let host = session.req_header().headers.get(http::header::HOST);
            let body = object(s, &task, host).to_string();
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
struct Create {
    suffix: String,
    body: Bytes,
    provider: Provider,
}

enum Submitted {
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
async fn submit(
    s: &Shared,
    ctx: &mut RequestCtx,
    create: &Create,
    client: &http::HeaderMap,
) -> Submitted {
    let server = &s.settings.server;
    let live = ctx.live.clone();
    let routing = &live.settings.routing;
    let mut last = Submitted::Failed(GatewayError::UpstreamUnreachable);
    for i in ctx.order.clone() {
        if ctx.tried.len() >= routing.max_attempts as usize {
            break;
        }
        let Some(upstream) = live.accounts.get(i) else {
            continue;
        };
        ctx.tried.push(i);
        ctx.first_attempt_at
            .get_or_insert_with(std::time::Instant::now);
        // Of the client's headers only the account's `forward_headers` pass, as on every call.
        let headers = upstream
            .account
            .forward_headers
            .iter()
            .filter_map(|name| {
                let name = http::HeaderName::from_bytes(name.as_bytes()).ok()?;
                let value = client.get(&name)?.to_str().ok()?.to_string();
                Some((name, value))
            })
            .collect();
        let call = Call {
            method: "POST",
            suffix: &create.suffix,
            body: Some(("application/json", create.body.clone())),
            headers,
        };
        let mut answer = match s.supplier.send(upstream, server, call).await {
            Ok(a) => a,
            Err(CallError::NotSent(m)) => {
                tracing::warn!(account = %upstream.account.id, error = %m, "video create not sent");
                let cooling = Duration::from_millis(routing.error_cooldown_ms);
                ctx.to_cool
                    .push(Cooling::new(i, Reason::Unreachable, cooling));
                s.cool(ctx).await;
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
        s.supplier.release(answer).await;
        let Ok(bytes) = read else {
            return Submitted::Failed(GatewayError::UpstreamProtocol);
        };
        if let cooldown::Verdict::Cool { reason, duration } = verdict {
            ctx.to_cool.push(Cooling::new(i, reason, duration));
            s.cool(ctx).await;
            last = if reason == Reason::RateLimited {
                Submitted::Failed(GatewayError::UsageLimitReached {
                    resets_in_seconds: duration.as_secs().max(1),
                })
            } else {
                Submitted::Refused {
                    status,
                    body: bytes,
                }
            };
            continue;
        }
        if !(200..300).contains(&status) {
            return Submitted::Refused {
                status,
                body: bytes,
            };
        }
        let created = match create.provider {
            Provider::Gemini => SupplierState::operation_started(&bytes),
            Provider::OpenAi | Provider::Anthropic => SupplierState::parse(&bytes),
        };
        return match created {
            Some(state) if state.id.as_deref().is_some_and(|id| !id.is_empty()) => {
                Submitted::Accepted {
                    account: upstream.account.id.clone(),
                    state,
                }
            }
            _ => {
                tracing::warn!(account = %upstream.account.id, "video create answered without a task id");
                Submitted::Failed(GatewayError::UpstreamProtocol)
            }
        };
    }
    last
}

/// Ends a task that never ran (its hold is released by `logging`, which still owns it).
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

/// What a supplier says about a task (OpenAI's video object).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct SupplierState {
    pub id: Option<String>,
    pub status: TaskStatus,
    pub progress: i32,
    pub seconds: Option<u64>,
    pub failure: Option<(String, String)>,
}

impl SupplierState {
    /// A task the gateway ends as failed with `code` and `message` (not the supplier's word).
    pub fn failed(code: &str, message: &str) -> SupplierState {
        SupplierState {
            id: None,
            status: TaskStatus::Failed,
            progress: 0,
            seconds: None,
            failure: Some((code.to_string(), message.to_string())),
        }
    }

    /// A Veo create's answer, `{"name": "models/…/operations/…"}`: the operation's name is the
    /// task's id at the supplier.
    pub fn operation_started(body: &[u8]) -> Option<SupplierState> {
        let v: Value = serde_json::from_slice(body).ok()?;
        let name = v.get("name")?.as_str()?;
        operation_path(name)?;
        Some(SupplierState {
            id: Some(name.to_string()),
            status: TaskStatus::Queued,
            progress: 0,
            seconds: None,
            failure: None,
        })
    }

    /// A Veo operation: running until `done`; done with a generated sample → completed (its
    /// length is `seconds`, what the create asked: Veo makes exactly that); done with an `error`
    /// or with samples filtered by safety (`raiMediaFilteredCount`) and none made → failed,
    /// charged nothing.
    pub fn operation(body: &[u8], seconds: Option<u64>) -> Option<SupplierState> {
        let v: Value = serde_json::from_slice(body).ok()?;
        let name = v.get("name").and_then(Value::as_str).map(str::to_string);
        let running = SupplierState {
            id: name,
            status: TaskStatus::InProgress,
            progress: 50,
            seconds: None,
            failure: None,
        };
        if v.get("done").and_then(Value::as_bool) != Some(true) {
            return Some(running);
        }
        let clip = |s: &str| s.chars().take(1000).collect::<String>();
        if let Some(error) = v.get("error") {
            let message = error
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or("the supplier failed the task");
            let code = error
                .get("status")
                .and_then(Value::as_str)
                .unwrap_or("video_generation_failed");
            return Some(SupplierState::failed(
                &code.to_ascii_lowercase(),
                &clip(message),
            ));
        }
        let response = v
            .get("response")
            .and_then(|r| r.get("generateVideoResponse"));
        if veo_file(&v).is_some() {
            return Some(SupplierState {
                status: TaskStatus::Completed,
                progress: 100,
                seconds,
                ..running
            });
        }
        let reasons = response
            .and_then(|r| r.get("raiMediaFilteredReasons"))
            .and_then(Value::as_array)
            .and_then(|a| a.first())
            .and_then(Value::as_str)
            .unwrap_or("the supplier made no video");
        let filtered = response
            .and_then(|r| r.get("raiMediaFilteredCount"))
            .and_then(Value::as_u64)
            .is_some_and(|n| n > 0);
        let code = if filtered {
            "moderation_blocked"
        } else {
            "video_generation_failed"
        };
        Some(SupplierState::failed(code, &clip(reasons)))
    }

    /// Reads `{id, status, progress, seconds, error: {code, message}}`; statuses of other
    /// OpenAI-compatible suppliers are mapped too (`pending` → queued, `processing`/`running` →
    /// in progress, `succeeded` → completed, `cancelled`/`expired` → failed).
    pub fn parse(body: &[u8]) -> Option<SupplierState> {
        let v: Value = serde_json::from_slice(body).ok()?;
        let status = match v.get("status")?.as_str()? {
            "queued" | "pending" | "submitted" => TaskStatus::Queued,
            "completed" | "succeeded" | "success" => TaskStatus::Completed,
            "failed" | "cancelled" | "canceled" | "expired" | "error" => TaskStatus::Failed,
            _ => TaskStatus::InProgress,
        };
        let seconds = match v.get("seconds") {
            Some(Value::String(s)) => s.trim().parse::<f64>().ok(),
            Some(Value::Number(n)) => n.as_f64(),
            _ => None,
        }
        .filter(|s| s.is_finite() && *s > 0.0 && *s < 3600.0)
        .map(|s| s.ceil() as u64);
        let failure = (status == TaskStatus::Failed).then(|| {
            let error = v.get("error");
            let text = |k: &str| {
                error
                    .and_then(|e| e.get(k))
                    .and_then(Value::as_str)
                    .map(|s| s.chars().take(1000).collect::<String>())
            };
            (
                text("code").unwrap_or_else(|| "video_generation_failed".to_string()),
                text("message").unwrap_or_else(|| "the supplier failed the task".to_string()),
            )
        });
        Some(SupplierState {
            id: v.get("id").and_then(Value::as_str).map(str::to_string),
            status,
            progress: v
                .get("progress")
                .and_then(Value::as_f64)
                .map_or(0, |p| p.clamp(0.0, 100.0) as i32),
            seconds,
            failure,
        })
    }
}

/// Asks the supplier about a running task and records what it says; ends the task (and settles
/// its hold) when the supplier ended it. A supplier that cannot be asked changes nothing: the
/// recorded state is answered and the next poll or sweep asks again.
pub(crate) async fn refresh(s: &Shared, book: &dyn TaskBook, task: Task) -> Task {
    let (Some(account), Some(sid)) = (&task.account_id, &task.supplier_task_id) else {
        return task;
    };
    if task.status.is_final() {
        return task;
    }
    // A task outlives its request: the account is looked up in the configuration in force.
    let live = s.live();
    let Some(upstream) = live
        .accounts
        .all()
        .iter()
        .find(|u| &u.account.id == account)
    else {
        tracing::warn!(task = %task.id, account = %account, "video task's account is no longer configured");
        return task;
    };
    let provider = upstream.account.provider;
    let suffix = match provider {
        Provider::Gemini => match operation_path(sid) {
            Some(path) => path,
            None => {
                tracing::warn!(task = %task.id, "video task's operation name is not a path");
                return task;
            }
        },
        Provider::OpenAi | Provider::Anthropic => format!("/videos/{}", encode_segment(sid)),
    };
    let call = Call {
        method: "GET",
        suffix: &suffix,
        body: None,
        headers: Vec::new(),
    };
    let mut answer = match s.supplier.send(upstream, &s.settings.server, call).await {
        Ok(a) => a,
        Err(e) => {
            tracing::warn!(task = %task.id, error = %e.message(), "video task not polled");
            return task;
        }
    };
    let status = answer.status();
    let read = answer.body(OBJECT_LIMIT).await;
    s.supplier.release(answer).await;
    let asked = task.seconds_requested.and_then(|s| u64::try_from(s).ok());
    let state = match (status, read) {
        (200..=299, Ok(bytes)) if provider == Provider::Gemini => {
            SupplierState::operation(&bytes, asked)
        }
        (200..=299, Ok(bytes)) => SupplierState::parse(&bytes),
        (404, _) => Some(SupplierState::failed(
            "not_found",
            "the supplier no longer knows this task",
        )),
        _ => None,
    };
    let Some(state) = state else {
        tracing::warn!(task = %task.id, status, "video task poll answered without a task object");
        return task;
    };
    if state.status.is_final() {
        return finish(s, book, task, &state).await;
    }
    if let Err(e) = book
        .progressed(&task.id, state.status, state.progress)
        .await
    {
        tracing::warn!(task = %task.id, error = %e, "video task progress not recorded");
    }
    Task {
        status: state.status,
        progress: state.progress,
        ..task
    }
}

/// Ends `task` as the supplier said: a completed task is charged the seconds produced (reported,
/// else requested, else held) at its resolution's price and its rate; a failed one nothing. The
/// wallet hold is the once-gate: only the settlement that resolved it writes the usage event, so
/// two proxies ending the same task (or a crash between the two writes) never charge twice. When
/// the wallet cannot be reached the task stays running and is ended by the next poll or sweep.
pub(crate) async fn finish(
    s: &Shared,
    book: &dyn TaskBook,
    task: Task,
    state: &SupplierState,
) -> Task {
    let completed = state.status == TaskStatus::Completed;
    let live = s.live();
    let model = live.settings.model(&task.model_served);
    let held = model
        .and_then(|m| m.video.as_ref())
        .and_then(|v| v.durations.last().copied())
        .unwrap_or(0);
    let requested = task.seconds_requested.and_then(|s| u64::try_from(s).ok());
    let (seconds, measurement) = match (completed, state.seconds, requested) {
        (false, ..) => (0, Measurement::Exact),
        (true, Some(reported), _) => (reported, Measurement::Exact),
        (true, None, Some(asked)) => (asked, Measurement::Estimated),
        (true, None, None) => (held, Measurement::Estimated),
    };
    let rate = RateMultiplier::from_ppm(task.retail_rate_ppm);
    let per_second = model.and_then(|m| m.per_second(&task.resolution));
    let cost = match (rate, per_second) {
        (Some(rate), Some(per_second)) => price::video_cost(per_second, seconds, rate).ok(),
        _ => None,
    }
    // A model or price removed from the configuration since: the hold is what was agreed.
    .unwrap_or(NanoUsd::from_nanos(task.hold_nanos));
    let cost = if completed { cost } else { NanoUsd::ZERO };
    let wallets = s.stores().wallets.as_ref();
    let hold = Hold {
        org: task.organization_id,
        id: task.hold_id.clone(),
        amount: NanoUsd::from_nanos(task.hold_nanos),
        rate: rate.unwrap_or(RateMultiplier::ONE),
        wholesale: task.wholesale_rate_ppm.and_then(RateMultiplier::from_ppm),
    };
    match wallets.settle(hold.org, &hold.id, cost).await {
        Ok(Settlement::Settled {
            charged,
            excess,
            below_holds,
        }) => {
            if below_holds {
                s.metrics.wallets_below_holds.inc();
            }
            let event = usage_event(&task, &hold, seconds, measurement, cost, charged, excess);
            settle::append(s.stores().usage.as_ref(), &s.metrics, &event).await;
            s.recent.keep(Some(event));
        }
        // Resolved before: by another proxy ending the same task, or by the reconciler.
        Ok(Settlement::Unknown) => {}
        Ok(Settlement::Missing) | Err(_) => {
            tracing::warn!(task = %task.id, "video task not settled (wallet unavailable); retried later");
            return task;
        }
    }
    let ending = Ending {
        status: state.status,
        seconds: i64::try_from(seconds).unwrap_or(i64::MAX),
        cost_nanos: cost.nanos(),
        failure: state.failure.clone(),
    };
    if let Err(e) = book.ended(&task.id, &ending).await {
        tracing::warn!(task = %task.id, error = %e, "video task ending not recorded");
    }
    tracing::info!(task = %task.id, status = ?state.status, seconds, cost = cost.nanos(), "video task ended");
    Task {
        status: state.status,
        progress: if completed { 100 } else { task.progress },
        seconds_charged: Some(ending.seconds),
        cost_nanos: Some(ending.cost_nanos),
        failure_code: ending.failure.as_ref().map(|f| f.0.clone()),
        failure_message: ending.failure.map(|f| f.1),
        completed_at: Some(Utc::now()),
        ..task
    }
}

fn usage_event(
    task: &Task,
    hold: &Hold,
    seconds: u64,
    measurement: Measurement,
    cost: NanoUsd,
    charged: NanoUsd,
    excess: NanoUsd,
) -> UsageEvent {
    let started_at_ms = u64::try_from(task.created_at.timestamp_millis()).unwrap_or(0);
    let now_ms = u64::try_from(Utc::now().timestamp_millis()).unwrap_or(0);
    UsageEvent {
        request_id: task.hold_id.clone(),
        key_id: task.api_key_id,
        org_id: task.organization_id,
        group_id: task.group_id,
        route: Route::VideoCreate.label().to_string(),
        model_requested: task.model_requested.clone(),
        model_served: task.model_served.clone(),
        account_id: task.account_id.clone().unwrap_or_default(),
        input_tokens: 0,
        output_tokens: 0,
        cached_tokens: 0,
        cache_write_tokens: 0,
        measurement,
        status: 200,
        stream: false,
        started_at_ms,
        latency_ms: now_ms.saturating_sub(started_at_ms),
        ttfb_ms: None,
        attempts: 1,
        cost_nanos: cost,
        charged_nanos: charged,
        excess_nanos: excess,
        hold_nanos: hold.amount,
        project: None,
        workflow: None,
        audio_seconds: 0,
        images: 0,
        video_seconds: seconds,
        retail_rate: Some(hold.rate),
        wholesale_rate: hold.wholesale,
        resent: false,
    }
}

/// The task as the client sees it: the gateway's id, never the supplier's or the account.
fn object(s: &Shared, task: &Task, host: Option<&http::HeaderValue>) -> Value {
    let status = match task.status {
        TaskStatus::Submitting | TaskStatus::Queued => "queued",
        TaskStatus::InProgress => "in_progress",
        TaskStatus::Completed => "completed",
        TaskStatus::Failed => "failed",
    };
    let mut o = json!({
        "id": task.id,
        "object": "video",
        "model": task.model_requested,
        "status": status,
        "progress": task.progress,
        "created_at": task.created_at.timestamp(),
        "resolution": task.resolution,
        "seconds": task.seconds_charged.or(task.seconds_requested),
    });
    if let Some(at) = task.completed_at {
        o["completed_at"] = json!(at.timestamp());
    }
    match task.status {
        TaskStatus::Completed => {
            let host = host.and_then(|h| h.to_str().ok());
            let (url, expires) = content_url(s, &task.id, host);
            o["data"] = json!([{"url": url, "expires_at": expires}]);
        }
        TaskStatus::Failed => {
            o["error"] = json!({
                "code": task.failure_code.as_deref().unwrap_or("video_generation_failed"),
                "message": task.failure_message.as_deref().unwrap_or("the task failed"),
            });
        }
        _ => {}
    }
    o
}

/// A fresh signed content URL and its expiry (Unix seconds).
fn content_url(s: &Shared, id: &str, host: Option<&str>) -> (String, u64) {
    let ttl = s.settings.video.url_ttl_ms.div_ceil(1000).max(1);
    let expires = crate::media::unix_now() + ttl;
    let signature = s.signer.signature(&signed_id(id), expires);
    let base = s.media_base(host);
    let base = base.trim_end_matches('/');
    let url =
        format!("{base}/compat/v1/videos/{id}/content?expires={expires}&signature={signature}");
    (url, expires)
}

/// What a content URL signs: the task id, domain-separated from hosted media ids.
fn signed_id(id: &str) -> String {
    format!("video:{id}")
}

/// `expires` and `signature` of a signed content URL.
struct Signed {
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

/// A `GET` of `suffix` at `upstream` for `task`'s content; a supplier that cannot be reached is
/// logged (`what`) and answered 502.
async fn get(
    s: &Shared,
    upstream: &crate::upstream::accounts::Upstream,
    task: &Task,
    suffix: &str,
    headers: Vec<(http::HeaderName, String)>,
    what: &'static str,
) -> Result<super::supplier::Answer, GatewayError> {
    let call = Call {
        method: "GET",
        suffix,
        body: None,
        headers,
    };
    s.supplier
        .send(upstream, &s.settings.server, call)
        .await
        .map_err(|e| {
            tracing::warn!(task = %task.id, error = %e.message(), "{what}");
            GatewayError::UpstreamUnreachable
        })
}

/// Where a completed Veo task's content is downloaded: the operation is read again for its
/// sample's file id (the task book keeps the operation, not the file), then
/// `/v1beta/files/{id}:download?alt=media` on the account itself.
async fn veo_download(
    s: &Shared,
    upstream: &crate::upstream::accounts::Upstream,
    task: &Task,
    operation: &str,
) -> Result<String, GatewayError> {
    let path = operation_path(operation).ok_or(GatewayError::UpstreamProtocol)?;
    let mut answer = get(
        s,
        upstream,
        task,
        &path,
        Vec::new(),
        "video operation not read",
    )
    .await?;
    let status = answer.status();
    let read = answer.body(OBJECT_LIMIT).await;
    s.supplier.release(answer).await;
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

/// The path of a Veo operation's name (`models/{model}/operations/{id}`), each segment encoded;
/// `None` for a name that is not plain segments (it must never change the path).
fn operation_path(name: &str) -> Option<String> {
    let segments: Vec<&str> = name.split('/').collect();
    let plain = |s: &&str| {
        !s.is_empty()
            && *s != "."
            && *s != ".."
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
    };
    (segments.len() >= 2 && segments.iter().all(plain)).then(|| {
        let encoded: Vec<String> = segments.iter().map(|s| encode_segment(s)).collect();
        format!("/v1beta/{}", encoded.join("/"))
    })
}

/// The file id of a done Veo operation's first sample (`…/files/{id}:download…`): the content
/// is then downloaded from the account's own base URL with its key, never from the uri as given.
fn veo_file(operation: &Value) -> Option<String> {
    let uri = operation
        .get("response")?
        .get("generateVideoResponse")?
        .get("generatedSamples")?
        .get(0)?
        .get("video")?
        .get("uri")?
        .as_str()?;
    let after = &uri[uri.find("/files/")? + "/files/".len()..];
    let id: String = after
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_'))
        .collect();
    (!id.is_empty()).then_some(id)
}

/// A supplier's id as one path segment (ids are opaque; anything outside `[A-Za-z0-9._~-]` is
/// percent-encoded so an id can never change the path).
fn encode_segment(id: &str) -> String {
    let mut out = String::with_capacity(id.len());
    for b in id.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Headers of the supplier's content answer passed to the client.
const CONTENT_HEADERS: [http::HeaderName; 6] = [
    http::header::CONTENT_TYPE,
    http::header::CONTENT_LENGTH,
    http::header::CONTENT_RANGE,
    http::header::ACCEPT_RANGES,
    http::header::ETAG,
    http::header::LAST_MODIFIED,
];

/// Streams a completed task's content from its supplier: chunk by chunk as it arrives (never
/// held whole), `Range` passed through, the supplier's credential added here and never shown.
async fn content(
    s: &Shared,
    session: &mut Session,
    ctx: &mut RequestCtx,
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
    let live = s.live();
    let upstream = live
        .accounts
        .all()
        .iter()
        .find(|u| &u.account.id == account)
        .ok_or_else(|| GatewayError::NoAccount(task.model_served.clone()))?;
    let mut headers = Vec::new();
    for name in [http::header::RANGE, http::header::IF_RANGE] {
        if let Some(v) = session
            .req_header()
            .headers
            .get(&name)
            .and_then(|v| v.to_str().ok())
        {
            headers.push((name, v.to_string()));
        }
    }
    let suffix = match upstream.account.provider {
        Provider::Gemini => veo_download(s, upstream, task, sid).await?,
        Provider::OpenAi | Provider::Anthropic => {
            format!("/videos/{}/content", encode_segment(sid))
        }
    };
    let mut answer = get(
        s,
        upstream,
        task,
        &suffix,
        headers,
        "video content not fetched",
    )
    .await?;
    let status = answer.status();
    if !(200..300).contains(&status) && status != 416 {
        s.supplier.release(answer).await;
        tracing::warn!(task = %task.id, status, "supplier refused the video content");
        return Err(if status == 404 {
            GatewayError::VideoNotReady(task.id.clone(), "no longer available at the supplier")
        } else {
            GatewayError::UpstreamProtocol
        });
    }
    let mut header = ResponseHeader::build(status, Some(8)).map_err(|_| GatewayError::Internal)?;
    let supplier = answer.header().ok_or(GatewayError::UpstreamProtocol)?;
    let chunked = !supplier.headers.contains_key(http::header::CONTENT_LENGTH);
    for name in CONTENT_HEADERS {
        if let Some(v) = supplier.headers.get(&name) {
            header
                .insert_header(name, v.clone())
                .map_err(|_| GatewayError::Internal)?;
        }
    }
    let extra = [
        (http::header::CACHE_CONTROL, "private, no-store"),
        (
            http::HeaderName::from_static("x-request-id"),
            ctx.request_id.as_str(),
        ),
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
    s.supplier.release(answer).await;
    let done = session.write_response_body(Some(Bytes::new()), true).await;
    done.map(|()| true).map_err(|_| GatewayError::Internal)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn supplier_objects() {
        let done = SupplierState::parse(
            br#"{"id":"v1","status":"completed","progress":100,"seconds":"8"}"#,
        )
        .unwrap();
        assert_eq!(
            (done.status, done.seconds, done.progress),
            (TaskStatus::Completed, Some(8), 100)
        );
        let failed = SupplierState::parse(
            br#"{"id":"v1","status":"failed","error":{"code":"moderation_blocked","message":"safety review"}}"#,
        )
        .unwrap();
        assert_eq!(
            failed.failure,
            Some(("moderation_blocked".into(), "safety review".into()))
        );
        let running =
            SupplierState::parse(br#"{"id":"v1","status":"processing","progress":33.5}"#).unwrap();
        assert_eq!(
            (running.status, running.progress),
            (TaskStatus::InProgress, 33)
        );
        assert!(SupplierState::parse(b"not json").is_none());
        assert!(SupplierState::parse(br#"{"id":"v1"}"#).is_none());
    }

    #[test]
    fn veo_operations() {
        let running =
            SupplierState::operation(br#"{"name":"models/veo/operations/a1"}"#, Some(8)).unwrap();
        assert_eq!(running.status, TaskStatus::InProgress);
        let done = br#"{"name":"models/veo/operations/a1","done":true,"response":{"generateVideoResponse":{"generatedSamples":[{"video":{"uri":"https://generativelanguage.googleapis.com/v1beta/files/qu4d28:download?alt=media"}}]}}}"#;
        let state = SupplierState::operation(done, Some(8)).unwrap();
        assert_eq!(
            (state.status, state.seconds),
            (TaskStatus::Completed, Some(8))
        );
        let v: Value = serde_json::from_slice(done).unwrap();
        assert_eq!(veo_file(&v).as_deref(), Some("qu4d28"));
        let filtered = SupplierState::operation(
            br#"{"name":"n/x","done":true,"response":{"generateVideoResponse":{"raiMediaFilteredCount":1,"raiMediaFilteredReasons":["blocked; You have not been charged"]}}}"#,
            Some(8),
        )
        .unwrap();
        assert_eq!(filtered.status, TaskStatus::Failed);
        assert_eq!(filtered.failure.unwrap().0, "moderation_blocked");
        let failed = SupplierState::operation(
            br#"{"name":"n/x","done":true,"error":{"code":3,"message":"bad","status":"INVALID_ARGUMENT"}}"#,
            None,
        )
        .unwrap();
        assert_eq!(
            failed.failure,
            Some(("invalid_argument".into(), "bad".into()))
        );
        assert_eq!(
            operation_path("models/veo-3/operations/x.1").as_deref(),
            Some("/v1beta/models/veo-3/operations/x.1")
        );
        for bad in ["../x", "models//x", "a/b?c", "x"] {
            assert!(operation_path(bad).is_none(), "{bad}");
        }
        assert!(SupplierState::operation_started(br#"{"name":"../../etc"}"#).is_none());
    }

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
