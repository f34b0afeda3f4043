//! The ledger database's task book (`video_tasks`): the [`TaskBook`] the `tollgate` binaries give
//! every proxy that has a database, so any proxy, after a restart too, answers a task's polls and
//! downloads. The gateway itself links no database code: it holds the book as a trait object.
//!
//! Writes are conditional updates (one statement each): acceptance only moves a `submitting`
//! task, an ending only moves a running one, a claim only moves the `checked_at` it read.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use entities::status::VideoTaskStatus;
use entities::video_tasks::{ActiveModel, Column, Entity, Model};
use opstate::{Ending, Task, TaskBook, TaskBookError, TaskStatus};
use sea_orm::sea_query::Expr;
use sea_orm::{
    ActiveModelTrait, ColumnTrait, ConnectOptions, Database, DatabaseConnection, DbErr,
    EntityTrait, IntoActiveModel, QueryFilter, QueryOrder, QuerySelect,
};
use std::time::Duration;

/// Video task records in the ledger database (cheap to clone).
#[derive(Clone)]
pub struct SqlTaskBook {
    db: DatabaseConnection,
}

impl SqlTaskBook {
    /// The book over an open connection (an embedded proxy shares admin-api's).
    pub fn new(db: DatabaseConnection) -> SqlTaskBook {
        SqlTaskBook { db }
    }

    /// Connects to the ledger database at `url` (a proxy of a fleet; admin-api migrates it).
    pub async fn connect(url: &str) -> Result<SqlTaskBook, DbErr> {
        let mut options = ConnectOptions::new(url.to_string());
        options
            .sqlx_logging(false)
            .connect_timeout(Duration::from_secs(5))
            .acquire_timeout(Duration::from_secs(5))
            .max_connections(if url.starts_with("sqlite:") { 2 } else { 8 })
            .min_connections(1);
        Ok(SqlTaskBook {
            db: Database::connect(options).await?,
        })
    }
}

fn unavailable(e: DbErr) -> TaskBookError {
    TaskBookError(e.to_string())
}

fn to_row(s: TaskStatus) -> VideoTaskStatus {
    match s {
        TaskStatus::Submitting => VideoTaskStatus::Submitting,
        TaskStatus::Queued => VideoTaskStatus::Queued,
        TaskStatus::InProgress => VideoTaskStatus::InProgress,
        TaskStatus::Completed => VideoTaskStatus::Completed,
        TaskStatus::Failed => VideoTaskStatus::Failed,
    }
}

fn of_row(s: VideoTaskStatus) -> TaskStatus {
    match s {
        VideoTaskStatus::Submitting => TaskStatus::Submitting,
        VideoTaskStatus::Queued => TaskStatus::Queued,
        VideoTaskStatus::InProgress => TaskStatus::InProgress,
        VideoTaskStatus::Completed => TaskStatus::Completed,
        VideoTaskStatus::Failed => TaskStatus::Failed,
    }
}

fn running() -> Vec<VideoTaskStatus> {
    TaskStatus::RUNNING.into_iter().map(to_row).collect()
}

fn task_of(m: Model) -> Task {
    Task {
        id: m.id,
        organization_id: m.organization_id,
        api_key_id: m.api_key_id,
        group_id: m.group_id,
        model_requested: m.model_requested,
        model_served: m.model_served,
        resolution: m.resolution,
        seconds_requested: m.seconds_requested,
        account_id: m.account_id,
        supplier_task_id: m.supplier_task_id,
        hold_id: m.hold_id,
        hold_nanos: m.hold_nanos,
        retail_rate_ppm: m.retail_rate_ppm,
        wholesale_rate_ppm: m.wholesale_rate_ppm,
        status: of_row(m.status),
        progress: m.progress,
        failure_code: m.failure_code,
        failure_message: m.failure_message,
        seconds_charged: m.seconds_charged,
        cost_nanos: m.cost_nanos,
        created_at: m.created_at,
        updated_at: m.updated_at,
        checked_at: m.checked_at,
        completed_at: m.completed_at,
    }
}

fn row_of(t: Task) -> Model {
    Model {
        id: t.id,
        organization_id: t.organization_id,
        api_key_id: t.api_key_id,
        group_id: t.group_id,
        model_requested: t.model_requested,
        model_served: t.model_served,
        resolution: t.resolution,
        seconds_requested: t.seconds_requested,
        account_id: t.account_id,
        supplier_task_id: t.supplier_task_id,
        hold_id: t.hold_id,
        hold_nanos: t.hold_nanos,
        retail_rate_ppm: t.retail_rate_ppm,
        wholesale_rate_ppm: t.wholesale_rate_ppm,
        status: to_row(t.status),
        progress: t.progress,
        failure_code: t.failure_code,
        failure_message: t.failure_message,
        seconds_charged: t.seconds_charged,
        cost_nanos: t.cost_nanos,
        created_at: t.created_at,
        updated_at: t.updated_at,
        checked_at: t.checked_at,
        completed_at: t.completed_at,
    }
}

#[async_trait]
impl TaskBook for SqlTaskBook {
    async fn ping(&self) -> Result<(), TaskBookError> {
        self.db.ping().await.map_err(unavailable)
    }

    async fn insert(&self, task: Task) -> Result<(), TaskBookError> {
        let active: ActiveModel = row_of(task).into_active_model().reset_all();
        Entity::insert(active)
            .exec(&self.db)
            .await
            .map(|_| ())
            .map_err(unavailable)
    }

    async fn get(&self, id: &str) -> Result<Option<Task>, TaskBookError> {
        Entity::find_by_id(id.to_string())
            .one(&self.db)
            .await
            .map(|m| m.map(task_of))
            .map_err(unavailable)
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
        let done = Entity::update_many()
            .col_expr(Column::AccountId, Expr::value(account))
            .col_expr(Column::SupplierTaskId, Expr::value(supplier_id))
            .col_expr(Column::Status, Expr::value(to_row(status)))
            .col_expr(Column::Progress, Expr::value(progress))
            .col_expr(Column::UpdatedAt, Expr::value(now))
            .col_expr(Column::CheckedAt, Expr::value(now))
            .filter(Column::Id.eq(id))
            .filter(Column::Status.eq(VideoTaskStatus::Submitting))
            .exec(&self.db)
            .await
            .map_err(unavailable)?;
        Ok(done.rows_affected == 1)
    }

    async fn progressed(
        &self,
        id: &str,
        status: TaskStatus,
        progress: i32,
    ) -> Result<(), TaskBookError> {
        let now = Utc::now();
        Entity::update_many()
            .col_expr(Column::Status, Expr::value(to_row(status)))
            .col_expr(Column::Progress, Expr::value(progress))
            .col_expr(Column::UpdatedAt, Expr::value(now))
            .col_expr(Column::CheckedAt, Expr::value(now))
            .filter(Column::Id.eq(id))
            .filter(Column::Status.is_in(running()))
            .exec(&self.db)
            .await
            .map(|_| ())
            .map_err(unavailable)
    }

    async fn ended(&self, id: &str, ending: &Ending) -> Result<bool, TaskBookError> {
        let now = Utc::now();
        let (code, message) = ending.failure.clone().unzip();
        let progress = if ending.status == TaskStatus::Completed {
            100
        } else {
            0
        };
        let done = Entity::update_many()
            .col_expr(Column::Status, Expr::value(to_row(ending.status)))
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
            .await
            .map_err(unavailable)?;
        Ok(done.rows_affected == 1)
    }

    async fn due(&self, before: DateTime<Utc>, limit: u64) -> Result<Vec<Task>, TaskBookError> {
        Entity::find()
            .filter(Column::Status.is_in(running()))
            .filter(Column::CheckedAt.lt(before))
            .order_by_asc(Column::CheckedAt)
            .order_by_asc(Column::Id)
            .limit(limit)
            .all(&self.db)
            .await
            .map(|rows| rows.into_iter().map(task_of).collect())
            .map_err(unavailable)
    }

    async fn claim(&self, task: &Task) -> Result<bool, TaskBookError> {
        let done = Entity::update_many()
            .col_expr(Column::CheckedAt, Expr::value(Utc::now()))
            .filter(Column::Id.eq(task.id.as_str()))
            .filter(Column::CheckedAt.eq(task.checked_at))
            .exec(&self.db)
            .await
            .map_err(unavailable)?;
        Ok(done.rows_affected == 1)
    }
}
