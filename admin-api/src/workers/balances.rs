//! The balance watcher: low-balance alerts and automatic allocations (`services::watch`), one
//! pass every `money.watch_interval_ms` in every admin-api (each crossing acts once across them).

use crate::state::AppState;
use std::time::Duration;
use tokio::sync::watch;

/// Runs until `shutdown` turns true.
pub async fn run(state: AppState, every: Duration, mut shutdown: watch::Receiver<bool>) {
    loop {
        match crate::services::watch::watch_once(&state).await {
            Ok(pass) if pass != Default::default() => {
                tracing::info!(?pass, "balance watcher acted");
                let actions = &state.meters.rule_actions;
                for (action, n) in [
                    ("alert_sent", pass.alerts_sent),
                    ("allocated", pass.allocated),
                    ("allocation_refused", pass.refused),
                    ("recharged", pass.recharged),
                    ("recharge_declined", pass.declined),
                ] {
                    actions
                        .with_label_values(&[action])
                        .inc_by(u64::try_from(n).unwrap_or(0));
                }
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "balance watcher pass failed; retrying"),
        }
        tokio::select! {
            _ = shutdown.wait_for(|s| *s) => return,
            _ = tokio::time::sleep(every) => {}
        }
    }
}
