//! The request log (issue 45): a usage record's latency (milliseconds from the request's arrival
//! to its last byte; absent on records settled before this migration), and each hourly bucket's
//! failed calls (status 400 or above), which guide the console's Requests page past the hours
//! without a match. The failed calls already in the ledger are counted into their buckets here.

use sea_orm_migration::prelude::*;
use sea_orm_migration::schema::*;
use sea_orm_migration::sea_orm::{ConnectionTrait, DbBackend};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden)]
enum UsageRecords {
    Table,
    LatencyMs,
}

#[derive(DeriveIden)]
enum UsageHourly {
    Table,
    FailedRequests,
}

/// The failed calls already settled, counted into their hourly buckets (a record's bucket: its
/// organization, key, served model and the UTC hour of its start).
fn backfill(backend: DbBackend) -> &'static str {
    match backend {
        DbBackend::Postgres => {
            "UPDATE usage_hourly SET failed_requests = f.n FROM ( \
               SELECT organization_id AS o, api_key_id AS k, model_served AS m, \
                      date_trunc('hour', started_at) AS h, count(*) AS n \
               FROM usage_records WHERE status >= 400 GROUP BY 1, 2, 3, 4) f \
             WHERE usage_hourly.organization_id = f.o AND usage_hourly.api_key_id = f.k \
               AND usage_hourly.model = f.m AND usage_hourly.hour_start = f.h"
        }
        // SQLite keeps times as text: compare whole hours since the epoch.
        _ => {
            "UPDATE usage_hourly SET failed_requests = f.n FROM ( \
               SELECT organization_id AS o, api_key_id AS k, model_served AS m, \
                      CAST(strftime('%s', started_at) AS INTEGER) / 3600 AS h, count(*) AS n \
               FROM usage_records WHERE status >= 400 GROUP BY 1, 2, 3, 4) f \
             WHERE usage_hourly.organization_id = f.o AND usage_hourly.api_key_id = f.k \
               AND usage_hourly.model = f.m \
               AND CAST(strftime('%s', usage_hourly.hour_start) AS INTEGER) / 3600 = f.h"
        }
    }
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        // Nullable: instant on PostgreSQL's partitioned table (no row is rewritten).
        manager
            .alter_table(
                Table::alter()
                    .table(UsageRecords::Table)
                    .add_column(big_integer_null(UsageRecords::LatencyMs))
                    .to_owned(),
            )
            .await?;
        manager
            .alter_table(
                Table::alter()
                    .table(UsageHourly::Table)
                    .add_column(big_integer(UsageHourly::FailedRequests).default(0))
                    .to_owned(),
            )
            .await?;
        let db = manager.get_connection();
        db.execute_unprepared(backfill(manager.get_database_backend()))
            .await?;
        Ok(())
    }

    async fn down(&self, _manager: &SchemaManager) -> Result<(), DbErr> {
        Err(DbErr::Migration("the request log is not removed".into()))
    }
}
