//! The sweeper: every proxy asks suppliers about unfinished tasks nobody polled recently, so a
//! task ends (and its hold is settled) even when its client stopped polling or the proxy that
//! created it died. Each check is claimed in the task book first (`TaskBook::claim`), so the
//! proxies of a fleet share the work without asking twice.
//!
//! Rules (ARCHITECTURE §3 "Videos"):
//! - a task still `submitting` after the create's longest wait (the upstream read timeout plus
//!   60 s) lost its supplier answer with its proxy, or its acceptance was never recorded: it is
//!   failed and its hold released (if the create's end had not released it already);
//! - a task older than `video.task_ttl_ms` that the supplier still reports running is failed
//!   (`timed_out`) and its hold released;
//! - anything else is refreshed like a poll.

use super::poll;
use super::settle;
use super::supplier_state::SupplierState;
use crate::shared::Shared;
use chrono::Utc;
use opstate::{TaskBook, TaskStatus};
use std::time::Duration;
use tokio::sync::watch;

/// Tasks checked per round at most.
const BATCH: u64 = 32;

/// Sweeps every `video.sweep_interval_ms` until `shutdown` turns true; skips the rounds while no
/// video model is configured (a text-only fleet never queries the task book; a reload may add
/// one).
pub(crate) async fn run(s: &Shared, mut shutdown: watch::Receiver<bool>) {
    let every = Duration::from_millis(s.settings.video.sweep_interval_ms);
    loop {
        tokio::select! {
            _ = shutdown.wait_for(|s| *s) => return,
            () = tokio::time::sleep(every) => {}
        }
        let video = s
            .live()
            .settings
            .models
            .iter()
            .any(|m| m.kind == settings::ModelKind::Video);
        if let (true, Some(book)) = (video, super::task_book(s)) {
            sweep_once(s, book).await;
        }
    }
}

/// One round; returns the tasks checked.
pub(crate) async fn sweep_once(s: &Shared, book: &dyn TaskBook) -> usize {
    let every = Duration::from_millis(s.settings.video.sweep_interval_ms);
    let now = Utc::now();
    let Ok(every) = chrono::Duration::from_std(every) else {
        return 0;
    };
    let due = match book.due(now - every, BATCH).await {
        Ok(d) => d,
        Err(e) => {
            tracing::warn!(error = %e, "video sweep: task book unavailable");
            return 0;
        }
    };
    let grace =
        Duration::from_millis(s.settings.server.upstream_read_timeout_ms) + Duration::from_secs(60);
    let ttl = Duration::from_millis(s.settings.video.task_ttl_ms);
    let live = s.live();
    let ledger = super::ledger(s, &live);
    let mut checked = 0;
    for task in due {
        match book.claim(&task).await {
            Ok(true) => {}
            Ok(false) => continue,
            Err(e) => {
                tracing::warn!(task = %task.id, error = %e, "video sweep: claim failed");
                continue;
            }
        }
        checked += 1;
        let age = (now - task.created_at).to_std().unwrap_or_default();
        if task.status == TaskStatus::Submitting {
            if age > grace {
                let lost = SupplierState::failed(
                    "task_lost",
                    "the supplier's answer to the create was lost",
                );
                settle::finish(&ledger, book, task, &lost).await;
            }
            continue;
        }
        let task = poll::refresh(super::supplier(s), &ledger, book, task).await;
        if !task.status.is_final() && age > ttl {
            let late = SupplierState::failed("timed_out", "the task did not finish in time");
            settle::finish(&ledger, book, task, &late).await;
        }
    }
    checked
}
