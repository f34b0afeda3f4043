//! Delivers the partner webhooks' outbox (issue 45), in every admin-api process at once.
//!
//! A delivery is due when pending and its next attempt's time has come. A process claims it with
//! one conditional update (pending, due, and no live claim: `claimed_until` unset or past), so of
//! several processes exactly one holds it; the claim lasts the delivery's timeout plus 5 s, so a
//! process that dies mid-delivery lets it go and another (or its restart) sends it again: at
//! least once, with the same event id. Each attempt is logged (status and first bytes, or why
//! none) in one transaction with the delivery's new state: a 2xx delivers it; anything else
//! schedules the next attempt after `retry_base_ms` × 2^(attempts − 1) (at most `retry_max_ms`),
//! or fails it when that would fall past its deadline (72 hours after the event by default).
//! Once a minute it also sweeps for the events no change writes (expired invitations, statements
//! of the month that ended), each once whoever finds it.

use crate::services::partner_webhooks::{body, secret_of};
use crate::state::AppState;
use crate::webhooks::send::{Answer, Sender};
use crate::webhooks::signature;
use chrono::{DateTime, Duration, Utc};
use entities::{webhook_attempts, webhook_deliveries, webhook_endpoints, webhook_events};
use sea_orm::sea_query::{Condition, Expr};
use sea_orm::{
    ActiveModelTrait, ColumnTrait, DbErr, EntityTrait, QueryFilter, QueryOrder, QuerySelect, Set,
    TransactionTrait,
};
use tokio::sync::watch;

/// How often the events no change writes are swept for (`services::webhook_sweeps`).
pub const SWEEP_EVERY: std::time::Duration = std::time::Duration::from_secs(60);

/// Deliveries a process claims at once (sent concurrently).
pub const BATCH: u64 = 8;

/// The worker: delivers what is due, rests `poll_interval_ms` when nothing was.
pub async fn run(state: AppState, worker: String, mut shutdown: watch::Receiver<bool>) {
    let sender = match Sender::new(state.settings.webhooks.allow_private_addresses) {
        Ok(s) => s,
        Err(e) => {
            tracing::error!(error = %e, "webhook deliveries cannot start");
            return;
        }
    };
    let idle = std::time::Duration::from_millis(state.settings.webhooks.poll_interval_ms);
    let mut swept: Option<std::time::Instant> = None;
    loop {
        if swept.is_none_or(|t| t.elapsed() >= SWEEP_EVERY) {
            if let Err(e) = crate::services::webhook_sweeps::sweep(&state).await {
                tracing::warn!(error = %e, "webhook sweep failed; retried at the next");
            }
            swept = Some(std::time::Instant::now());
        }
        let sent = match deliver_due(&state, &sender, &worker).await {
            Ok(n) => n,
            Err(e) => {
                tracing::warn!(error = %e, "webhook deliveries: database unavailable");
                0
            }
        };
        if sent == 0 {
            tokio::select! {
                _ = tokio::time::sleep(idle) => {}
                _ = shutdown.changed() => {}
            }
        }
        if *shutdown.borrow() {
            return;
        }
    }
}

/// The wait after `attempts` failed attempts.
pub fn backoff(base_ms: u64, max_ms: u64, attempts: i32) -> Duration {
    let doublings = u32::try_from(attempts.saturating_sub(1).clamp(0, 30)).unwrap_or(30);
    let ms = base_ms.saturating_mul(1u64 << doublings).min(max_ms);
    Duration::milliseconds(i64::try_from(ms).unwrap_or(i64::MAX))
}

/// Claims up to [`BATCH`] due deliveries for `worker`; returns them.
async fn claim(
    state: &AppState,
    worker: &str,
    now: DateTime<Utc>,
) -> Result<Vec<webhook_deliveries::Model>, DbErr> {
    let free = || {
        Condition::any()
            .add(webhook_deliveries::Column::ClaimedUntil.is_null())
            .add(webhook_deliveries::Column::ClaimedUntil.lt(now))
    };
    let due = webhook_deliveries::Entity::find()
        .filter(webhook_deliveries::Column::Status.eq("pending"))
        .filter(webhook_deliveries::Column::NextAttemptAt.lte(now))
        .filter(free())
        .order_by_asc(webhook_deliveries::Column::NextAttemptAt)
        .limit(BATCH)
        .all(&state.db)
        .await?;
    let lease = Duration::milliseconds(
        i64::try_from(state.settings.webhooks.timeout_ms).unwrap_or(10_000) + 5_000,
    );
    let mut claimed = Vec::new();
    for d in due {
        let won = webhook_deliveries::Entity::update_many()
            .col_expr(
                webhook_deliveries::Column::ClaimedUntil,
                Expr::value(now + lease),
            )
            .col_expr(webhook_deliveries::Column::ClaimedBy, Expr::value(worker))
            .filter(webhook_deliveries::Column::Id.eq(d.id))
            .filter(webhook_deliveries::Column::Status.eq("pending"))
            .filter(free())
            .exec(&state.db)
            .await?
            .rows_affected
            == 1;
        if won {
            claimed.push(d);
        }
    }
    Ok(claimed)
}

/// Sends every delivery due now that this process can claim; returns how many it attempted.
pub async fn deliver_due(state: &AppState, sender: &Sender, worker: &str) -> Result<usize, DbErr> {
    let now = state.clock.now();
    let claimed = claim(state, worker, now).await?;
    let n = claimed.len();
    let sends = claimed
        .into_iter()
        .map(|d| attempt(state, sender, worker, d));
    for result in futures_util::future::join_all(sends).await {
        result?;
    }
    Ok(n)
}

/// The delivery of `event` to `endpoint`, signed at `at` (an endpoint disabled or gone, or a
/// secret that cannot be opened, is an attempt without an answer).
async fn send(
    state: &AppState,
    sender: &Sender,
    endpoint: Option<&webhook_endpoints::Model>,
    event: Option<&webhook_events::Model>,
    at: DateTime<Utc>,
) -> Answer {
    let (Some(e), Some(ev)) = (endpoint, event) else {
        return Answer::Failed("endpoint deleted".into());
    };
    if e.status != "active" {
        return Answer::Failed("endpoint disabled".into());
    }
    let Some(secret) = secret_of(state, e) else {
        return Answer::Failed("the signing secret cannot be opened".into());
    };
    let payload = body(ev);
    let headers = [
        (
            signature::HEADER,
            signature::sign(&secret, at.timestamp(), payload.as_bytes()),
        ),
        ("tollgate-event-id", ev.public_id.clone()),
        ("tollgate-event-type", ev.event_type.clone()),
    ];
    sender.post(&e.url, &headers, payload.into()).await
}

/// One attempt of delivery `d` and its log, committed with the delivery's next state.
async fn attempt(
    state: &AppState,
    sender: &Sender,
    worker: &str,
    d: webhook_deliveries::Model,
) -> Result<(), DbErr> {
    let endpoint = webhook_endpoints::Entity::find_by_id(d.endpoint_id)
        .one(&state.db)
        .await?;
    let event = webhook_events::Entity::find_by_id(d.event_id)
        .one(&state.db)
        .await?;
    let started = state.clock.now();
    let clock = std::time::Instant::now();
    let answer = send(state, sender, endpoint.as_ref(), event.as_ref(), started).await;
    let elapsed = i64::try_from(clock.elapsed().as_millis()).unwrap_or(i64::MAX);
    let finished = state.clock.now();
    let attempts = d.attempts + 1;
    let (status_code, first, error) = match &answer {
        Answer::Status {
            status,
            first_bytes,
        } => (Some(i32::from(*status)), Some(first_bytes.clone()), None),
        Answer::Failed(why) => (None, None, Some(why.clone())),
    };
    let w = &state.settings.webhooks;
    let next = finished + backoff(w.retry_base_ms, w.retry_max_ms, attempts);
    let gone = endpoint.as_ref().is_none_or(|e| e.status != "active");
    let outcome = if answer.succeeded() {
        "succeeded"
    } else if gone || next > d.deadline_at {
        "failed"
    } else {
        "pending"
    };
    let txn = state.db.begin().await?;
    webhook_attempts::ActiveModel {
        delivery_id: Set(d.id),
        attempt: Set(attempts),
        started_at: Set(started),
        duration_ms: Set(elapsed),
        status_code: Set(status_code),
        answer: Set(first),
        error: Set(error.clone()),
        worker: Set(worker.to_string()),
        ..Default::default()
    }
    .insert(&txn)
    .await?;
    let mut row: webhook_deliveries::ActiveModel = d.into();
    row.attempts = Set(attempts);
    row.status = Set(outcome.to_string());
    row.next_attempt_at = Set(next);
    row.claimed_until = Set(None);
    row.claimed_by = Set(None);
    row.last_status = Set(status_code);
    row.last_error = Set(match (&answer, status_code) {
        (Answer::Failed(why), _) => Some(why.clone()),
        (_, Some(s)) if !(200..300).contains(&s) => Some(format!("the receiver answered {s}")),
        _ => None,
    });
    if outcome == "succeeded" {
        row.succeeded_at = Set(Some(finished));
    }
    row.updated_at = Set(finished);
    row.update(&txn).await?;
    txn.commit().await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wait_doubles_up_to_its_cap() {
        let ms = |n| backoff(30_000, 6 * 3_600_000, n).num_milliseconds();
        assert_eq!(
            [ms(1), ms(2), ms(3), ms(4)],
            [30_000, 60_000, 120_000, 240_000]
        );
        assert_eq!(ms(10), 15_360_000);
        assert_eq!(ms(11), 6 * 3_600_000, "capped");
        assert_eq!(ms(1_000), 6 * 3_600_000, "no overflow");
        assert_eq!(ms(0), 30_000);
    }
}
