//! The reconciler: resolves holds whose gateway died (past their deadline, never settled).
//!
//! Each expired hold is settled at its estimate, the price of the input tokens estimated at
//! admission (the request reached the supplier, whose output is unknown), and a usage event flagged
//! `estimated` goes into the usage stream, so the settler books it like any other; the
//! settlement and the append are one step in the store (`Calls::resolve`). Settling is
//! atomic and at most once: if the gateway was only slow and settles later, its settlement finds
//! no hold and its usage event is a duplicate the settler skips (the request id is the hold id).
//! A hold without a description is released (nothing is known to charge). A mirror found below
//! its open holds (`WalletSnapshot::unreconciled`) is handed to the keeper to be reloaded.

use crate::state::AppState;
use opstate::{HoldMeta, Measurement, Settlement, UsageEvent};
use std::time::Duration;
use tokio::sync::watch;

/// Runs until `shutdown` turns true.
pub async fn run(state: AppState, every: Duration, mut shutdown: watch::Receiver<bool>) {
    loop {
        if let Err(e) = reconcile_once(&state).await {
            tracing::error!(error = %e, "reconciler round failed; retrying");
        }
        tokio::select! {
            _ = shutdown.wait_for(|s| *s) => return,
            _ = tokio::time::sleep(every) => {}
        }
    }
}

/// The usage event of an expired hold settled at its estimate: the call's description from the
/// hold, what was charged and what could not be.
fn estimated_event(
    org: i64,
    hold: &opstate::ExpiredHold,
    meta: HoldMeta,
    estimate: money::NanoUsd,
    (charged, excess): (money::NanoUsd, money::NanoUsd),
) -> UsageEvent {
    let now_ms = u64::try_from(chrono::Utc::now().timestamp_millis()).unwrap_or(0);
    UsageEvent {
        request_id: hold.hold_id.clone(),
        key_id: meta.key_id,
        org_id: org,
        group_id: meta.group_id,
        route: meta.route,
        model_requested: meta.model_requested,
        model_served: meta.model_served,
        account_id: String::new(),
        input_tokens: meta.input_tokens,
        output_tokens: 0,
        cached_tokens: 0,
        cache_write_tokens: 0,
        cache_write_1h_tokens: 0,
        measurement: Measurement::Estimated,
        status: 0,
        stream: meta.stream,
        started_at_ms: meta.started_at_ms,
        latency_ms: now_ms.saturating_sub(meta.started_at_ms),
        ttfb_ms: None,
        attempts: 0,
        cost_nanos: estimate,
        charged_nanos: charged,
        excess_nanos: excess,
        hold_nanos: hold.amount,
        project: None,
        workflow: None,
        audio_seconds: meta.audio_seconds,
        images: meta.images,
        video_seconds: meta.video_seconds,
        retail_rate: meta.retail_rate,
        wholesale_rate: meta.wholesale_rate,
        resent: false,
        supplier: Default::default(),
        batch: meta.batch,
    }
}

/// One pass over every organization that holds money; returns how many holds it resolved.
pub async fn reconcile_once(state: &AppState) -> Result<usize, opstate::StoreError> {
    let wallets = &state.stores.wallets;
    let mut resolved = 0;
    let (mut holding, mut reserved) = (0i64, money::NanoUsd::ZERO);
    for org in wallets.holding_orgs().await? {
        // A mirror a settlement found below its open holds is reloaded from the ledger by the
        // keeper (until then the billing balance answers 503).
        let snapshot = wallets.snapshot(org).await?;
        if snapshot.as_ref().is_some_and(|s| s.unreconciled) {
            state.wallet_stale(org);
        }
        if let Some(s) = snapshot.filter(|s| s.reserved.is_positive()) {
            holding += 1;
            reserved = reserved.checked_add(s.reserved).unwrap_or(reserved);
        }
        for hold in wallets.expired(org).await? {
            let meta: Option<HoldMeta> = serde_json::from_str(&hold.meta).ok();
            let Some(meta) = meta else {
                if wallets.release(org, &hold.hold_id).await? {
                    tracing::warn!(org, hold = %hold.hold_id, "expired hold without description released");
                    resolved += 1;
                }
                continue;
            };
            let estimate = meta.input_cost_nanos.max(money::NanoUsd::ZERO);
            // Settled and its event appended in one step (`Calls::resolve`): a failover keeps or
            // loses both. The event's charged and excess are the settlement's.
            let zero = money::NanoUsd::ZERO;
            let event = estimated_event(org, &hold, meta, estimate, (zero, zero));
            let resolution = state
                .stores
                .calls
                .resolve(org, &hold.hold_id, estimate, &event);
            let charged = match resolution.await? {
                Settlement::Settled { charged, .. } => charged,
                // Settled by its gateway in the meantime, or the wallet is being rebuilt.
                Settlement::Unknown | Settlement::Missing => continue,
            };
            resolved += 1;
            state.meters.holds_expired.inc();
            tracing::warn!(org, hold = %hold.hold_id, charged = %charged, "expired hold settled at its estimate (its gateway died)");
        }
    }
    let m = &state.meters;
    m.wallets_holding.set(holding);
    m.holds_reserved.set(reserved.nanos() as f64 / 1e9);
    m.wallets_unreconciled
        .set(i64::try_from(state.stale_wallet_count()).unwrap_or(i64::MAX));
    if let Ok(backlog) = state.stores.usage.backlog().await {
        m.backlog.set(i64::try_from(backlog).unwrap_or(i64::MAX));
    }
    Ok(resolved)
}
