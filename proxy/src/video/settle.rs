//! A task's end: the charge for the seconds made (or the hold released), the usage event, the
//! ending recorded once.

use super::supplier_state::SupplierState;
use crate::classify::Route;
use crate::live::Live;
use crate::metrics::Metrics;
use crate::money::admit::Hold;
use crate::money::resend::RecentEvents;
use crate::money::{price, settle};
use chrono::Utc;
use money::{NanoUsd, RateMultiplier};
use opstate::{Ending, Task, TaskBook, TaskStatus};
use opstate::{Measurement, Settlement, Stores, UsageEvent};

/// What a task's end reads and writes, and nothing else: the configuration in force (the model's
/// price), the stores (the wallet hold, the usage stream), the metrics and this proxy's recent
/// usage events (re-sent if the stream loses them).
pub(crate) struct Ledger<'a> {
    pub live: &'a Live,
    pub stores: &'a Stores,
    pub metrics: &'a Metrics,
    pub recent: &'a RecentEvents,
}

/// Ends `task` as the supplier said: a completed task is charged the seconds produced (reported,
/// else requested, else held) at its resolution's price and its rate; a failed one nothing. The
/// wallet hold is the once-gate: only the settlement that resolved it writes the usage event, so
/// two proxies ending the same task (or a crash between the two writes) never charge twice. When
/// the wallet cannot be reached the task stays running and is ended by the next poll or sweep.
pub(crate) async fn finish(
    ledger: &Ledger<'_>,
    book: &dyn TaskBook,
    task: Task,
    state: &SupplierState,
) -> Task {
    let completed = state.status == TaskStatus::Completed;
    let model = ledger.live.settings.model(&task.model_served);
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
    let wallets = ledger.stores.wallets.as_ref();
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
                ledger.metrics.wallets_below_holds.inc();
            }
            let mut event = usage_event(&task, &hold, seconds, measurement, cost, charged, excess);
            event.supplier.cost_nanos = supplier_cost(ledger.live, &task, seconds);
            settle::append(ledger.stores.usage.as_ref(), ledger.metrics, &event).await;
            ledger.recent.keep(Some(event));
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

/// What the supplier bills for `seconds` of the task's video: the model's `supplier_per_second`
/// × its account's `supplier_price_multiplier` (`None`: unknown).
fn supplier_cost(live: &Live, task: &Task, seconds: u64) -> Option<NanoUsd> {
    let model = live.settings.model(&task.model_served)?;
    let account = task.account_id.as_deref()?;
    let rate = live.settings.account(account)?.supplier_price_multiplier;
    let usage = crate::wire::Usage::default();
    price::supplier_cost(&model.supplier_prices, usage, 0, seconds, rate)
}

pub(super) fn usage_event(
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
        cache_write_1h_tokens: 0,
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
        supplier: Default::default(),
        batch: None,
    }
}
