//! Batch lines run in a supplier's own batch API (issue 46): two more stages of a signed batch
//! line (`crate::batch`), named by `x-tollgate-batch-stage`.
//!
//! - **`hold`**: the line is admitted as any call (key, limits, routing, its hold at the batch
//!   price) but not sent: the first account of the decision that has the `batch` capability and
//!   speaks the client's own format takes it (none: 409 `batch_offload_unavailable`, nothing
//!   held, and the runner sends the line as a call). The hold is kept past the request for
//!   [`HELD_TTL`] (the supplier's 24-hour window and an hour to book), the capacity slot given
//!   back (the supplier's batch queue is not the account's concurrency), and the line's claim
//!   becomes *held*: the account, the body to send it, and what its booking needs. The answer
//!   (200, `x-tollgate-batch-held: true`) names the account and gives the body. Held again, the
//!   same answer, with no second hold.
//! - **`book`**: the runner brings the supplier's answer to the line (`{status_code, body}`).
//!   The gateway meters it as it meters any answer of that format (reported usage exact; none:
//!   the same bounded estimate), prices it at the hold's rate (the batch price), settles the hold
//!   and appends the usage event in one store step (as a call's end; the settler books a request
//!   id once) and keeps the answer as the line's, answered to every later sending. A line not held is 409
//!   `batch_line_not_held`; a hold that lapsed first was settled by the reconciler from its
//!   description, and the booking charges nothing more.

use crate::batch_line::{self, ANSWER_TTL, ANSWERED, HELD, Line, store_id};
use crate::classify::Route;
use crate::ctx::RequestCtx;
use crate::errors::GatewayError;
use crate::meter::Meter;
use crate::money::admit::Hold;
use crate::money::price;
use crate::shared::Shared;
use bytes::Bytes;
use money::{NanoUsd, RateMultiplier};
use opstate::{BatchRef, Finish, Measurement, MediaFile, Settlement, UsageEvent};
use pingora::http::ResponseHeader;
use pingora::proxy::Session;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// How long a held line (its hold and its record) lasts: the supplier's 24-hour window and two
/// hours to book it.
pub(crate) const HELD_TTL: Duration = Duration::from_secs(26 * 3600);
/// The largest booking body: the largest kept answer and its envelope.
const MAX_BOOKING_BYTES: usize = crate::batch_line::MAX_ANSWER_BYTES + 64 * 1024;

/// A held line: its hold, its account and the body to send it, and what its booking needs.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Held {
    pub org: i64,
    pub hold_id: String,
    pub hold_nanos: i64,
    pub rate_ppm: i64,
    pub wholesale_ppm: Option<i64>,
    pub account: String,
    /// The supplier's path for the line (`/v1/chat/completions`, `/v1/responses`).
    pub url: String,
    /// The body to send the account, JSON.
    pub body: String,
    pub key_id: i64,
    pub group_id: i64,
    pub route: String,
    pub model_requested: String,
    pub model_served: String,
    pub started_at_ms: u64,
    pub request_bytes: usize,
    pub output_bound: u64,
    pub project: Option<String>,
    pub workflow: Option<String>,
    pub batch_id: String,
    pub batch_line: u32,
}

/// The booking the runner sends: the supplier's status for the line and its body.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Booking {
    status_code: u16,
    #[serde(default)]
    body: Option<serde_json::Value>,
}

/// After admission of a line to hold: hands its hold and the account over to the supplier's
/// batch (see the module). `Ok(true)`: answered.
pub(crate) async fn hold(
    s: &Shared,
    session: &mut Session,
    ctx: &mut RequestCtx,
) -> Result<bool, GatewayError> {
    let route = ctx.route.ok_or(GatewayError::Internal)?;
    let live = ctx.live.clone();
    let offloadable = matches!(
        route,
        Route::ChatCompletions | Route::Responses | Route::Messages
    );
    let account = ctx.attempts.order.iter().find_map(|&i| {
        let u = live.accounts.get(i)?;
        let own = crate::wire::cells::target(u.account.provider, route) == route.format();
        let batch = u
            .account
            .capabilities
            .contains(&settings::Capability::Batch);
        (offloadable && own && batch).then_some(u)
    });
    let (Some(u), Some(call), Some(line), Some(caller)) = (
        account,
        ctx.admission.call.as_ref(),
        ctx.admission.batch.as_deref(),
        ctx.admission.caller.as_ref(),
    ) else {
        // Given back at the end like any refusal (hold, slot, claim).
        return Err(GatewayError::BatchOffloadUnavailable);
    };
    let held = record(ctx, route, u.account.id.clone(), (call, line, caller))?;
    let ttl_ms = u64::try_from(HELD_TTL.as_millis()).unwrap_or(u64::MAX);
    let kept = s
        .stores()
        .wallets
        .extend(held.org, &held.hold_id, ttl_ms)
        .await;
    if !matches!(kept, Ok(true)) {
        tracing::error!(request_id = %ctx.request_id, "a held batch line's hold could not be kept");
        return Err(GatewayError::WalletUnavailable);
    }
    let record = serde_json::to_vec(&held).map_err(|_| GatewayError::Internal)?;
    let file = MediaFile {
        content_type: HELD.to_string(),
        bytes: Bytes::from(record),
    };
    let id = store_id(&line.request_id);
    if let Err(e) = s.stores().media.put(&id, &file, HELD_TTL).await {
        tracing::error!(error = %e, "a held batch line was not recorded");
        return Err(GatewayError::StoreUnavailable);
    }
    // The hold is the held line's now: `logging` gives the slot back and leaves the hold alone.
    if let Some(h) = ctx.admission.hold.take() {
        s.live_holds.remove(&h.id);
    }
    if let Some(l) = ctx.admission.batch.as_mut() {
        l.claimed = false;
    }
    answer_held(session, &held, &ctx.request_id).await
}

/// The record of the line of `ctx` held for `account`.
fn record(
    ctx: &RequestCtx,
    route: Route,
    account: String,
    (call, line, caller): (&crate::call::Call, &Line, &opstate::KeyRecord),
) -> Result<Held, GatewayError> {
    let body = call
        .bodies
        .get(route.format())
        .ok_or(GatewayError::Internal)?;
    let hold = ctx.admission.hold.as_ref().ok_or(GatewayError::Internal)?;
    Ok(Held {
        org: hold.org,
        hold_id: hold.id.clone(),
        hold_nanos: hold.amount.nanos(),
        rate_ppm: hold.rate.ppm(),
        wholesale_ppm: hold.wholesale.map(RateMultiplier::ppm),
        account,
        url: match route {
            Route::Responses => "/v1/responses",
            Route::Messages => "/v1/messages",
            _ => "/v1/chat/completions",
        }
        .to_string(),
        body: String::from_utf8_lossy(body).into_owned(),
        key_id: caller.key_id,
        group_id: caller.group_id,
        route: route.label().to_string(),
        model_requested: call.requested_model.clone(),
        model_served: call.model.model.id.clone(),
        started_at_ms: ctx.started_at_ms,
        request_bytes: call.request_bytes,
        output_bound: call.output_bound,
        project: call.project.clone(),
        workflow: call.workflow.clone(),
        batch_id: line.batch.id.clone(),
        batch_line: line.batch.line,
    })
}

/// A line whose record says it is held: held again, the same answer; sent as a call, 409 (it
/// would be served twice).
pub(crate) async fn held_again(
    session: &mut Session,
    ctx: &RequestCtx,
    hold: bool,
    kept: MediaFile,
) -> Result<bool, GatewayError> {
    if !hold {
        return Err(GatewayError::BatchLineInProgress);
    }
    let held: Held = serde_json::from_slice(&kept.bytes).map_err(|_| GatewayError::Internal)?;
    answer_held(session, &held, &ctx.request_id).await
}

/// The answer to a line held (now or before).
pub(crate) async fn answer_held(
    session: &mut Session,
    held: &Held,
    request_id: &str,
) -> Result<bool, GatewayError> {
    let body = serde_json::json!({
        "object": "batch_line.held",
        "account": held.account,
        "url": held.url,
        "body": serde_json::from_str::<serde_json::Value>(&held.body).unwrap_or_default(),
        "hold_nanos": held.hold_nanos,
        "model": held.model_served,
    });
    write(
        session,
        200,
        Bytes::from(body.to_string()),
        request_id,
        "x-tollgate-batch-held",
    )
    .await
    .map_err(|_| GatewayError::Internal)?;
    Ok(true)
}

async fn write(
    session: &mut Session,
    status: u16,
    body: Bytes,
    request_id: &str,
    mark: &'static str,
) -> pingora::Result<()> {
    let mut header = ResponseHeader::build(status, Some(4))?;
    header.insert_header(http::header::CONTENT_TYPE, "application/json")?;
    header.insert_header(http::header::CONTENT_LENGTH, body.len().to_string())?;
    header.insert_header("x-request-id", request_id)?;
    header.insert_header(mark, "true")?;
    session
        .write_response_header(Box::new(header), false)
        .await?;
    session.write_response_body(Some(body), true).await
}

/// Books the supplier's answer to the held line of `ctx` (see the module). `Ok(true)`: answered.
pub(crate) async fn book(
    s: &Shared,
    session: &mut Session,
    ctx: &mut RequestCtx,
    line: &Line,
) -> Result<bool, GatewayError> {
    let media = s.stores().media.clone();
    let id = store_id(&line.request_id);
    let kept = media.get(&id).await.map_err(|e| {
        tracing::error!(error = %e, "a batch line's record could not be read");
        GatewayError::StoreUnavailable
    })?;
    let held = match kept {
        Some(f) if f.content_type == HELD => {
            serde_json::from_slice::<Held>(&f.bytes).map_err(|_| GatewayError::Internal)?
        }
        Some(f) => return batch_line::answer_kept(session, f, &ctx.request_id).await,
        None => return Err(GatewayError::BatchLineNotHeld),
    };
    let (status, answer) = read_booking(s, session).await?;
    charge(s, ctx, &held, status, &answer).await?;
    let file = MediaFile {
        content_type: format!("{ANSWERED}{status}"),
        bytes: answer.clone(),
    };
    if let Err(e) = media.put(&id, &file, ANSWER_TTL).await {
        // Booked: a second booking finds the hold resolved and charges nothing.
        tracing::warn!(error = %e, "a booked batch line's answer was not kept");
    }
    write(
        session,
        status,
        answer,
        &line.request_id,
        "x-tollgate-batch-booked",
    )
    .await
    .map_err(|_| GatewayError::Internal)?;
    Ok(true)
}

/// The booking the runner sent: the supplier's status for the line and its body.
async fn read_booking(s: &Shared, session: &mut Session) -> Result<(u16, Bytes), GatewayError> {
    let idle = Duration::from_millis(s.settings.server.request_body_timeout_ms);
    let raw = crate::inspect::body::read_body(session, MAX_BOOKING_BYTES, idle).await?;
    let booking: Booking = serde_json::from_slice(&raw).map_err(|e| GatewayError::InvalidBody {
        message: format!("a booking is {{status_code, body}}: {e}"),
        param: None,
    })?;
    if !(100..=599).contains(&booking.status_code) {
        return Err(GatewayError::InvalidBody {
            message: "status_code must be an HTTP status".into(),
            param: Some("status_code"),
        });
    }
    let answer = Bytes::from(
        booking
            .body
            .as_ref()
            .map(serde_json::Value::to_string)
            .unwrap_or_default(),
    );
    Ok((booking.status_code, answer))
}

/// Settles the hold of `held` at the price of the supplier's `answer` (see the module): the
/// usage event is written by the settlement that resolved the hold, never by another.
async fn charge(
    s: &Shared,
    ctx: &RequestCtx,
    held: &Held,
    status: u16,
    answer: &Bytes,
) -> Result<(), GatewayError> {
    let (usage, measurement) = metered(held, status, answer);
    let live = ctx.live.clone();
    let hold = Hold {
        org: held.org,
        id: held.hold_id.clone(),
        amount: NanoUsd::from_nanos(held.hold_nanos),
        rate: RateMultiplier::from_ppm(held.rate_ppm).ok_or(GatewayError::Internal)?,
        wholesale: held.wholesale_ppm.and_then(RateMultiplier::from_ppm),
    };
    let cost = match live.settings.model(&held.model_served) {
        Some(m) => price::cost(&m.prices, usage, hold.rate).unwrap_or(hold.amount),
        // A model removed from the configuration since: the hold is what was agreed.
        None => hold.amount,
    };
    // One store step, as a call's end: the hold settled and the event appended together (a
    // booking of a line whose hold was resolved before appends an event the settler drops: it
    // books a request id once).
    let mut event = event(held, &hold, status, (usage, measurement), cost);
    event.supplier.cost_nanos = supplier_cost(&live, held, usage);
    let step = Finish {
        slot: None,
        gates: &[],
        hold: Some((hold.org, hold.id.as_str())),
        cost,
        event: Some(&event),
    };
    match s.stores().calls.finish(step).await {
        Ok(settlement) => {
            if let Some(Settlement::Settled {
                below_holds: true, ..
            }) = settlement
            {
                s.metrics.wallets_below_holds.inc();
            }
            let (charged, excess) = opstate::charged(settlement, cost);
            s.recent.keep(Some(UsageEvent {
                charged_nanos: charged,
                excess_nanos: excess,
                ..event
            }));
        }
        Err(e) => {
            tracing::warn!(error = %e, request_id = %held.hold_id, "a booking was not stored; the runner sends it again");
            return Err(GatewayError::StoreUnavailable);
        }
    }
    Ok(())
}

/// What the supplier bills for a line of its batch: the usage at the model's supplier prices ×
/// the account's `supplier_price_multiplier` × the model's `supplier_batch_discount` (`None`:
/// unknown).
fn supplier_cost(
    live: &crate::live::Live,
    held: &Held,
    usage: crate::wire::Usage,
) -> Option<NanoUsd> {
    let model = live.settings.model(&held.model_served)?;
    let account = live.settings.account(&held.account)?;
    let rate = account
        .supplier_price_multiplier
        .discounted(model.supplier_batch_discount);
    price::supplier_cost(&model.supplier_prices, usage, 0, 0, rate)
}

/// The usage of a supplier's answer to a held line, as any answer of its format is metered.
fn metered(held: &Held, status: u16, answer: &Bytes) -> (crate::wire::Usage, Measurement) {
    let format = match held.route.as_str() {
        "responses" => translate::Format::Responses,
        "messages" => translate::Format::Messages,
        _ => translate::Format::Chat,
    };
    let mut meter = Meter::passing(format, false);
    let mut chunk = Some(answer.clone());
    meter.body(&mut chunk, true);
    if status >= 400 && !meter.has_usage() {
        return (crate::wire::Usage::default(), Measurement::Exact);
    }
    meter.outcome(held.request_bytes, held.output_bound)
}

fn event(
    held: &Held,
    hold: &Hold,
    status: u16,
    (usage, measurement): (crate::wire::Usage, Measurement),
    cost: NanoUsd,
) -> UsageEvent {
    let now_ms = crate::media::unix_now().saturating_mul(1000);
    UsageEvent {
        request_id: held.hold_id.clone(),
        key_id: held.key_id,
        org_id: held.org,
        group_id: held.group_id,
        route: held.route.clone(),
        model_requested: held.model_requested.clone(),
        model_served: held.model_served.clone(),
        account_id: held.account.clone(),
        input_tokens: usage.input,
        output_tokens: usage.output,
        cached_tokens: usage.cached,
        cache_write_tokens: usage.cache_write,
        cache_write_1h_tokens: usage.cache_write_1h,
        measurement,
        status,
        stream: false,
        started_at_ms: held.started_at_ms,
        latency_ms: now_ms.saturating_sub(held.started_at_ms),
        ttfb_ms: None,
        attempts: 1,
        cost_nanos: cost,
        charged_nanos: NanoUsd::ZERO,
        excess_nanos: NanoUsd::ZERO,
        hold_nanos: hold.amount,
        project: held.project.clone(),
        workflow: held.workflow.clone(),
        audio_seconds: 0,
        images: 0,
        video_seconds: 0,
        retail_rate: Some(hold.rate),
        wholesale_rate: hold.wholesale,
        resent: false,
        supplier: Default::default(),
        batch: Some(BatchRef {
            id: held.batch_id.clone(),
            line: held.batch_line,
        }),
    }
}
