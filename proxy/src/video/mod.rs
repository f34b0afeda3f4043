//! Video tasks (SPEC "Video tasks"): create, poll, download, priced per second of video.
//!
//! A task outlives the request that created it, so it is a record in the ledger database
//! ([`TaskBook`]) that any proxy reads; its hold outlives the text hold deadline
//! (`video.task_ttl_ms` + `money.hold_ttl_ms`) and is settled when the task ends, by whichever
//! proxy learns it first: a poll, or the sweeper (`sweep.rs`) that asks suppliers about tasks
//! nobody polled. The three routes are answered in the request filter (`serve.rs`), which makes
//! the supplier calls itself (`supplier.rs`). The create body is checked in `job.rs`.

pub(crate) mod job;
pub(crate) mod serve;
pub(crate) mod supplier;
pub(crate) mod sweep;
pub mod tasks;

pub use tasks::TaskBook;

impl crate::Gateway {
    /// Gives the gateway its video task book (the ledger database). Without one the video routes
    /// answer 503. Set once; a second call changes nothing.
    pub fn set_video_tasks(&self, book: TaskBook) {
        if self.shared.tasks.set(book).is_err() {
            tracing::warn!("the video task book was already set");
        }
    }
}
