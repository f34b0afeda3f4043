//! The console's housekeeping (issue 42): every hour, the limiter's keys quiet for a day and the
//! code challenges expired a day ago are deleted, so neither table grows with every address or
//! network ever tried.

use crate::state::AppState;
use std::time::Duration;
use tokio::sync::watch;

/// How often the housekeeping runs.
pub const TICK: Duration = Duration::from_secs(3600);

/// Runs [`round`] every [`TICK`] until shutdown.
pub async fn run(state: AppState, mut shutdown: watch::Receiver<bool>) {
    loop {
        tokio::select! {
            _ = shutdown.wait_for(|s| *s) => return,
            _ = tokio::time::sleep(TICK) => {}
        }
        round(&state).await;
    }
}

/// One round at the service's clock; a failure is logged and retried next round.
pub async fn round(state: &AppState) {
    let now = state.clock.now();
    match crate::services::limiter::forget_quiet(&state.db, now).await {
        Ok(n) if n > 0 => tracing::info!(forgotten = n, "limiter keys quiet for a day deleted"),
        Ok(_) => {}
        Err(e) => tracing::warn!(error = %e, "limiter housekeeping failed"),
    }
    match crate::services::proof::forget_old(&state.db, now).await {
        Ok(n) if n > 0 => tracing::info!(forgotten = n, "expired code challenges deleted"),
        Ok(_) => {}
        Err(e) => tracing::warn!(error = %e, "challenge housekeeping failed"),
    }
}
