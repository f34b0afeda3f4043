//! The task book: video task records, which outlive the request that created them, so any proxy
//! (after a restart too, with the ledger database's book) answers a task's polls and downloads.
//!
//! Writes are conditional: acceptance only moves a `submitting` task, an ending only moves a task
//! that has not ended, a sweeper's claim only moves the `checked_at` it read. Money is not gated
//! here but by the wallet hold, which resolves at most once.
//!
//! Two books pass one contract suite (admin-api's `task_book` tests): the ledger database's
//! (`admin_api::task_book::SqlTaskBook`, which the `tollgate` binaries inject wherever a database
//! is configured) and [`MemoryTaskBook`] (this process only: the gateway's own default on an
//! in-process store).

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use std::collections::HashMap;
use std::sync::Mutex;

/// Where a task is. `submitting`: the record exists, the supplier has not answered the create
/// yet (a poll answers `queued`). `completed` and `failed` are final.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TaskStatus {
    Submitting,
    Queued,
    InProgress,
    Completed,
    Failed,
}

impl TaskStatus {
    /// Whether the task is over (its hold is resolved).
    pub fn is_final(self) -> bool {
        matches!(self, TaskStatus::Completed | TaskStatus::Failed)
    }

    /// The statuses of a task still running.
    pub const RUNNING: [TaskStatus; 3] = [
        TaskStatus::Submitting,
        TaskStatus::Queued,
        TaskStatus::InProgress,
    ];
}

/// One video task: who created it, where it runs, what is held for it and how it ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Task {
    /// The gateway's opaque task id (`video_` + 32 hex), never the supplier's.
    pub id: String,
    pub organization_id: i64,
    pub api_key_id: i64,
    pub group_id: i64,
    pub model_requested: String,
    pub model_served: String,
    /// `720p`, `1080p` or `4k` (the per-second price depends on it).
    pub resolution: String,
    /// `durationSeconds` as asked (`None`: the supplier's default; the hold is the model's
    /// maximum).
    pub seconds_requested: Option<i64>,
    /// The supplier account the task runs on (`None` until the supplier accepted it).
    pub account_id: Option<String>,
    pub supplier_task_id: Option<String>,
    /// The wallet hold (the create request's id) and its amount, nano-USD.
    pub hold_id: String,
    pub hold_nanos: i64,
    pub retail_rate_ppm: i64,
    pub wholesale_rate_ppm: Option<i64>,
    pub status: TaskStatus,
    pub progress: i32,
    pub failure_code: Option<String>,
    pub failure_message: Option<String>,
    /// Seconds charged once the task ended (0 for a failed task).
    pub seconds_charged: Option<i64>,
    pub cost_nanos: Option<i64>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    /// When the supplier was last asked (the sweeper asks again after `video.sweep_interval_ms`).
    pub checked_at: DateTime<Utc>,
    pub completed_at: Option<DateTime<Utc>>,
}

/// How a task ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ending {
    pub status: TaskStatus,
    pub seconds: i64,
    pub cost_nanos: i64,
    /// `(code, message)` of a failed task.
    pub failure: Option<(String, String)>,
}

/// The book did not answer (its database is unreachable); the caller answers 503.
#[derive(Debug, Clone, thiserror::Error)]
#[error("task book unavailable: {0}")]
pub struct TaskBookError(pub String);

/// Video task records.
#[async_trait]
pub trait TaskBook: Send + Sync {
    /// Whether the book answers (readiness).
    async fn ping(&self) -> Result<(), TaskBookError>;

    /// Records a new task (its id is new).
    async fn insert(&self, task: Task) -> Result<(), TaskBookError>;

    async fn get(&self, id: &str) -> Result<Option<Task>, TaskBookError>;

    /// The supplier accepted the task: where it runs and under which id. `false` unless the task
    /// was `submitting`.
    async fn accepted(
        &self,
        id: &str,
        account: &str,
        supplier_id: &str,
        status: TaskStatus,
        progress: i32,
    ) -> Result<bool, TaskBookError>;

    /// A fresh status of a running task (never moves an ended one).
    async fn progressed(
        &self,
        id: &str,
        status: TaskStatus,
        progress: i32,
    ) -> Result<(), TaskBookError>;

    /// Records how the task ended; `false` when it had already ended.
    async fn ended(&self, id: &str, ending: &Ending) -> Result<bool, TaskBookError>;

    /// Unfinished tasks nobody asked the supplier about since `before`, oldest check first, at
    /// most `limit`.
    async fn due(&self, before: DateTime<Utc>, limit: u64) -> Result<Vec<Task>, TaskBookError>;

    /// Takes `task` for one check: only one claim moves the `checked_at` it read.
    async fn claim(&self, task: &Task) -> Result<bool, TaskBookError>;
}

/// Tasks a [`MemoryTaskBook`] keeps at most by default.
pub const MEMORY_TASK_CAP: usize = 10_000;

/// The tasks of this process only, lost with it (a gateway built without the binaries' database
/// book, e.g. the proxy's tests). Bounded: at its cap, recording a task first forgets the ended
/// task that ended earliest; with none ended, the new task is refused (the caller answers 503).
#[derive(Debug)]
pub struct MemoryTaskBook {
    tasks: Mutex<HashMap<String, Task>>,
    cap: usize,
}

impl Default for MemoryTaskBook {
    fn default() -> Self {
        MemoryTaskBook::with_cap(MEMORY_TASK_CAP)
    }
}

impl MemoryTaskBook {
    pub fn new() -> MemoryTaskBook {
        MemoryTaskBook::default()
    }

    /// A book keeping at most `cap` tasks (at least one).
    pub fn with_cap(cap: usize) -> MemoryTaskBook {
        MemoryTaskBook {
            tasks: Mutex::new(HashMap::new()),
            cap: cap.max(1),
        }
    }

    /// Runs `f` on the tasks (a poisoned lock is taken over: every write below is one assignment
    /// of whole fields, so no half-written task can be left).
    fn with<T>(&self, f: impl FnOnce(&mut HashMap<String, Task>) -> T) -> T {
        let mut tasks = self
            .tasks
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        f(&mut tasks)
    }
}

#[async_trait]
impl TaskBook for MemoryTaskBook {
    async fn ping(&self) -> Result<(), TaskBookError> {
        Ok(())
    }

    async fn insert(&self, task: Task) -> Result<(), TaskBookError> {
        self.with(|tasks| {
            if tasks.contains_key(&task.id) {
                return Err(TaskBookError(format!("task {} exists", task.id)));
            }
            if tasks.len() >= self.cap {
                let oldest_ended = tasks
                    .values()
                    .filter(|t| t.status.is_final())
                    .min_by_key(|t| (t.completed_at, t.id.clone()))
                    .map(|t| t.id.clone());
                match oldest_ended {
                    Some(id) => {
                        tasks.remove(&id);
                    }
                    None => {
                        return Err(TaskBookError(format!(
                            "{} tasks running, the most this process keeps",
                            self.cap
                        )));
                    }
                }
            }
            tasks.insert(task.id.clone(), task);
            Ok(())
        })
    }

    async fn get(&self, id: &str) -> Result<Option<Task>, TaskBookError> {
        Ok(self.with(|tasks| tasks.get(id).cloned()))
    }

    async fn accepted(
        &self,
        id: &str,
        account: &str,
        supplier_id: &str,
        status: TaskStatus,
        progress: i32,
    ) -> Result<bool, TaskBookError> {
        let now = Utc::now();
        Ok(self.with(|tasks| match tasks.get_mut(id) {
            Some(t) if t.status == TaskStatus::Submitting => {
                t.account_id = Some(account.to_string());
                t.supplier_task_id = Some(supplier_id.to_string());
                t.status = status;
                t.progress = progress;
                t.updated_at = now;
                t.checked_at = now;
                true
            }
            _ => false,
        }))
    }

    async fn progressed(
        &self,
        id: &str,
        status: TaskStatus,
        progress: i32,
    ) -> Result<(), TaskBookError> {
        let now = Utc::now();
        self.with(|tasks| {
            if let Some(t) = tasks.get_mut(id)
                && !t.status.is_final()
            {
                t.status = status;
                t.progress = progress;
                t.updated_at = now;
                t.checked_at = now;
            }
        });
        Ok(())
    }

    async fn ended(&self, id: &str, ending: &Ending) -> Result<bool, TaskBookError> {
        let now = Utc::now();
        Ok(self.with(|tasks| match tasks.get_mut(id) {
            Some(t) if !t.status.is_final() => {
                let (code, message) = ending.failure.clone().unzip();
                t.status = ending.status;
                t.progress = if ending.status == TaskStatus::Completed {
                    100
                } else {
                    0
                };
                t.seconds_charged = Some(ending.seconds);
                t.cost_nanos = Some(ending.cost_nanos);
                t.failure_code = code;
                t.failure_message = message;
                t.updated_at = now;
                t.checked_at = now;
                t.completed_at = Some(now);
                true
            }
            _ => false,
        }))
    }

    async fn due(&self, before: DateTime<Utc>, limit: u64) -> Result<Vec<Task>, TaskBookError> {
        let mut due: Vec<Task> = self.with(|tasks| {
            tasks
                .values()
                .filter(|t| !t.status.is_final() && t.checked_at < before)
                .cloned()
                .collect()
        });
        due.sort_by(|a, b| a.checked_at.cmp(&b.checked_at).then(a.id.cmp(&b.id)));
        due.truncate(usize::try_from(limit).unwrap_or(usize::MAX));
        Ok(due)
    }

    async fn claim(&self, task: &Task) -> Result<bool, TaskBookError> {
        let now = Utc::now();
        Ok(self.with(|tasks| match tasks.get_mut(&task.id) {
            Some(t) if t.checked_at == task.checked_at => {
                t.checked_at = now;
                true
            }
            _ => false,
        }))
    }
}
