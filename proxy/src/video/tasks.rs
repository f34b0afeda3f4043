//! The task book: video task records in the ledger database (`video_tasks`), so any proxy, after
//! a restart too, answers a task's polls and downloads.
//!
//! Writes are conditional: acceptance only moves a `submitting` task, an ending only moves a task
//! that has not ended, a sweeper's claim only moves the `checked_at` it read. Money is not gated
//! here but by the wallet hold, which resolves at most once (`finish` in `serve.rs`).

use chrono::{DateTime, Utc};
use entities::status::VideoTaskStatus;
use entities::video_tasks::{self, ActiveModel, Column, Entity, Model};
use sea_orm::sea_query::Expr;
use sea_orm::{
    ActiveModelTrait, ColumnTrait, ConnectOptions, Database, DatabaseConnection, DbErr,
    EntityTrait, IntoActiveModel, QueryFilter, QueryOrder, QuerySelect,
};
use std::time::Duration;

/// Video task records (cheap to clone).
#[derive(Clone)]
pub struct TaskBook {
    db: DatabaseConnection,
}

/// How a task ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Ending {
    pub status: VideoTaskStatus,
    pub seconds: i64,
    pub cost_nanos: i64,
    pub failure: Option<(String, String)>,
}

impl TaskBook {
    /// The book over an open connection (an embedded proxy shares admin-api's).
    pub fn new(db: DatabaseConnection) -> TaskBook {
        TaskBook { db }
    }

    /// Whether the ledger database answers (readiness).
    pub async fn ping(&self) -> Result<(), DbErr> {
        self.db.ping().await
    }

    /// Connects to the ledger database at `url` (a proxy of a fleet; admin-api migrates it).
    pub async fn connect(url: &str) -> Result<TaskBook, DbErr> {
        let mut options = ConnectOptions::new(url.to_string());
        options
            .sqlx_logging(false)
            .connect_timeout(Duration::from_secs(5))
            .acquire_timeout(Duration::from_secs(5))
            .max_connections(if url.starts_with("sqlite:") { 2 } else { 8 })
            .min_connections(1);
        Ok(TaskBook {
            db: Database::connect(options).await?,
        })
    }

    pub(crate) async fn insert(&self, task: Model) -> Result<(), DbErr> {
        let active: ActiveModel = task.into_active_model().reset_all();
        Entity::insert(active).exec(&self.db).await.map(|_| ())
    }

    pub(crate) async fn get(&self, id: &str) -> Result<Option<Model>, DbErr> {
        Entity::find_by_id(id.to_string()).one(&self.db).await
    }

    /// The supplier accepted the task: where it runs and under which id.
    pub(crate) async fn accepted(
        &self,
        id: &str,
        account: &str,
        supplier_id: &str,
        status: VideoTaskStatus,
        progress: i32,
    ) -> Result<bool, DbErr> {
        let now = Utc::now();
        let done = Entity::update_many()
            .col_expr(Column::AccountId, Expr::value(account))
            .col_expr(Column::SupplierTaskId, Expr::value(supplier_id))
            .col_expr(Column::Status, Expr::value(status))
            .col_expr(Column::Progress, Expr::value(progress))
            .col_expr(Column::UpdatedAt, Expr::value(now))
            .col_expr(Column::CheckedAt, Expr::value(now))
            .filter(Column::Id.eq(id))
            .filter(Column::Status.eq(VideoTaskStatus::Submitting))
            .exec(&self.db)
            .await?;
        Ok(done.rows_affected == 1)
    }

    /// A fresh status of a running task (never moves an ended one).
    pub(crate) async fn progressed(
        &self,
        id: &str,
        status: VideoTaskStatus,
        progress: i32,
    ) -> Result<(), DbErr> {
        let now = Utc::now();
        Entity::update_many()
            .col_expr(Column::Status, Expr::value(status))
            .col_expr(Column::Progress, Expr::value(progress))
            .col_expr(Column::UpdatedAt, Expr::value(now))
            .col_expr(Column::CheckedAt, Expr::value(now))
            .filter(Column::Id.eq(id))
            .filter(Column::Status.is_in(running()))
            .exec(&self.db)
            .await
            .map(|_| ())
    }

    /// Records how the task ended; `false` when it had already ended.
    pub(crate) async fn ended(&self, id: &str, ending: &Ending) -> Result<bool, DbErr> {
        let now = Utc::now();
        let (code, message) = ending.failure.clone().unzip();
        let progress = if ending.status == VideoTaskStatus::Completed {
            100
        } else {
            0
        };
        let done = Entity::update_many()
            .col_expr(Column::Status, Expr::value(ending.status))
            .col_expr(Column::Progress, Expr::value(progress))
            .col_expr(Column::SecondsCharged, Expr::value(ending.seconds))
            .col_expr(Column::CostNanos, Expr::value(ending.cost_nanos))
            .col_expr(Column::FailureCode, Expr::value(code))
            .col_expr(Column::FailureMessage, Expr::value(message))
            .col_expr(Column::UpdatedAt, Expr::value(now))
            .col_expr(Column::CheckedAt, Expr::value(now))
            .col_expr(Column::CompletedAt, Expr::value(Some(now)))
            .filter(Column::Id.eq(id))
            .filter(Column::Status.is_in(running()))
            .exec(&self.db)
            .await?;
        Ok(done.rows_affected == 1)
    }

    /// Unfinished tasks nobody asked the supplier about since `before`, oldest check first.
    pub(crate) async fn due(&self, before: DateTime<Utc>, limit: u64) -> Result<Vec<Model>, DbErr> {
        Entity::find()
            .filter(Column::Status.is_in(running()))
            .filter(Column::CheckedAt.lt(before))
            .order_by_asc(Column::CheckedAt)
            .limit(limit)
            .all(&self.db)
            .await
    }

    /// Takes `task` for one check: only one proxy's claim moves the `checked_at` it read.
    pub(crate) async fn claim(&self, task: &Model) -> Result<bool, DbErr> {
        let done = Entity::update_many()
            .col_expr(Column::CheckedAt, Expr::value(Utc::now()))
            .filter(Column::Id.eq(task.id.as_str()))
            .filter(Column::CheckedAt.eq(task.checked_at))
            .exec(&self.db)
            .await?;
        Ok(done.rows_affected == 1)
    }
}

fn running() -> [VideoTaskStatus; 3] {
    [
        VideoTaskStatus::Submitting,
        VideoTaskStatus::Queued,
        VideoTaskStatus::InProgress,
    ]
}

/// One task record.
pub(crate) type Task = video_tasks::Model;
