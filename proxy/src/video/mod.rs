//! Video tasks (SPEC "Video tasks"): create, poll, download, priced per second of video.
//!
//! A task outlives the request that created it, so it is a record in a task book
//! ([`opstate::TaskBook`]), the ledger database's, which the binaries give every proxy with a
//! database so that any proxy reads it (the gateway links no database code). Its hold
//! outlives the text hold deadline (`video.task_ttl_ms` + `money.hold_ttl_ms`) and is settled
//! when the task ends, by whichever proxy learns it first: a poll, or the sweeper (`sweep.rs`)
//! that asks suppliers about tasks nobody polled.
//!
//! A create is a call like any other (`create.rs`): admitted in `admission::prepare`, sent to
//! the decision's accounts with their failover, its answer read in the response filters, its end
//! in `ending::end`; only what is a task's is here (its record, its object, its end in the task
//! book). The poll and download routes are answered in the request filter (`serve.rs`, then
//! `poll.rs` or `content.rs`; a task's end in `settle.rs`), which makes their supplier calls itself
//! (`upstream::direct`). The create body is checked by `inspect::video`; a supplier's answer is
//! read by `supplier_state.rs`, and the task is shown to the client by `wire.rs` (its object, its
//! signed content URL).
//!
//! Only `serve.rs` and `sweep.rs` (the entry points) read the gateway's state; each step takes
//! what it uses, cut from it here: a create's admission its `Desk`, a poll and a download the
//! `Supplier` side, a task's end its `settle::Ledger`, a task's object its `Links`.

mod content;
mod create;
mod poll;
pub(crate) mod serve;
mod settle;
mod supplier_state;
pub(crate) mod sweep;
mod wire;

use crate::shared::Shared;
use opstate::TaskBook;
use std::sync::Arc;

impl crate::Gateway {
    /// Gives the gateway its video task book: the ledger database's (the binaries give it to
    /// every proxy with a database), or an `opstate::MemoryTaskBook` (one process's tasks, lost
    /// with it). Without one the video routes answer 503. Set once; a second call changes
    /// nothing.
    pub fn set_video_tasks(&self, book: Arc<dyn TaskBook>) {
        if self.shared.tasks.set(book).is_err() {
            tracing::warn!("the video task book was already set");
        }
    }

    /// Traces calls on `tracer` (`[telemetry]`; see `crate::telemetry`).
    pub fn set_tracer(&self, tracer: opentelemetry_sdk::trace::SdkTracer) {
        if self.shared.tracer.set(tracer).is_err() {
            tracing::warn!("the tracer was already set");
        }
    }
}

/// Largest task object read from a supplier (a create's acceptance, a poll's answer).
pub(crate) const OBJECT_LIMIT: usize = 1024 * 1024;

/// The task book the video routes use; `None`: they answer 503.
pub(crate) fn task_book(s: &Shared) -> Option<&dyn TaskBook> {
    s.tasks.get().map(|b| b.as_ref())
}

/// The supplier side of a video step: the client that makes its calls and the server limits they
/// run under.
#[derive(Clone, Copy)]
pub(super) struct Supplier<'a> {
    pub client: &'a crate::upstream::direct::Client,
    pub server: &'a settings::Server,
}

/// What a task's object needs to link its finished content: the signer of content URLs, the
/// gateway's public base (`server`) and how long a URL lives.
pub(super) struct Links<'a> {
    pub signer: &'a crate::media::Signer,
    pub server: &'a settings::Server,
    pub url_ttl_ms: u64,
}

/// What a create's admission needs from the gateway's state: the stores (routing, the wallet
/// hold), this proxy's queue and metrics, the server limits its body is read under and how long
/// its hold lives (`video.task_ttl_ms` + `money.hold_ttl_ms`).
pub(super) struct Desk<'a> {
    pub stores: &'a opstate::Stores,
    pub queue: &'a crate::route::capacity::Queue,
    pub metrics: &'a crate::metrics::Metrics,
    pub server: &'a settings::Server,
    pub hold_ttl_ms: u64,
}

pub(super) fn supplier(s: &Shared) -> Supplier<'_> {
    Supplier {
        client: &s.supplier,
        server: &s.settings.server,
    }
}

pub(super) fn links(s: &Shared) -> Links<'_> {
    Links {
        signer: &s.signer,
        server: &s.settings.server,
        url_ttl_ms: s.settings.video.url_ttl_ms,
    }
}

pub(super) fn desk(s: &Shared) -> Desk<'_> {
    Desk {
        stores: s.stores(),
        queue: &s.queue,
        metrics: &s.metrics,
        server: &s.settings.server,
        hold_ttl_ms: s.settings.video.task_ttl_ms + s.settings.money.hold_ttl_ms,
    }
}

/// What a task's end needs from the gateway's state `s`, under the configuration `live` (the one
/// in force: a task outlives its request).
pub(crate) fn ledger<'a>(s: &'a Shared, live: &'a crate::live::Live) -> settle::Ledger<'a> {
    settle::Ledger {
        live,
        stores: s.stores(),
        metrics: &s.metrics,
        recent: &s.recent,
    }
}
