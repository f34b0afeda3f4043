//! The usage ledger partitioned by month on PostgreSQL (issue 31; see [`crate::usage_partitions`]).
//!
//! The table is rebuilt as `PARTITION BY RANGE (started_at)` with the same columns, its rows copied
//! (ids kept, the identity sequence continued): one partition per month from the oldest record's
//! to [`AHEAD`] months past the current one, and a default partition. The unique request id
//! becomes `UNIQUE (request_id, started_at)` (the partition key must be in it), the primary key
//! `(id, started_at)`; the organization-and-time index stays. On a large table this copies every
//! row once, in the migration's transaction: run it in a quiet hour (README "Upgrading").
//! SQLite: nothing changes.

use crate::usage_partitions::{AHEAD, DEFAULT_PARTITION, Month, PARENT};
use sea_orm_migration::prelude::*;
use sea_orm_migration::sea_orm::{ConnectionTrait, DbBackend, Statement};

#[derive(DeriveMigrationName)]
pub struct Migration;

/// The indexes of the partitioned table (made after the copy: faster than row by row).
const INDEXES: [&str; 3] = [
    "ALTER TABLE usage_records ADD CONSTRAINT usage_records_pkey PRIMARY KEY (id, started_at)",
    "CREATE UNIQUE INDEX usage_records_request_once ON usage_records (request_id, started_at)",
    "CREATE INDEX idx_usage_records_org_started ON usage_records (organization_id, started_at)",
];

/// A record's start as the settler writes it: the millisecond of a UUIDv7 request id (32 hex
/// digits, version 7, variant 10), else the start it was written with.
const GATEWAY_ID_TIME: &str = "CASE WHEN request_id ~ '^[0-9a-f]{12}7[0-9a-f]{3}[89ab][0-9a-f]{15}$' \
     THEN timestamptz 'epoch' + ('x' || substr(request_id, 1, 12))::bit(48)::bigint \
     * interval '1 millisecond' ELSE started_at END";

/// `(year, month)` of a query's first row, as two integer columns `y` and `m`.
async fn month_of(db: &impl ConnectionTrait, sql: &str) -> Result<Option<Month>, DbErr> {
    let row = db
        .query_one_raw(Statement::from_string(DbBackend::Postgres, sql.to_string()))
        .await?;
    let Some(row) = row else {
        return Ok(None);
    };
    let y: Option<i32> = row.try_get("", "y")?;
    let m: Option<i32> = row.try_get("", "m")?;
    Ok(match (y, m) {
        (Some(y), Some(m)) => <u32 as TryFrom<i32>>::try_from(m)
            .ok()
            .and_then(|m| Month::new(y, m)),
        _ => None,
    })
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        if manager.get_database_backend() != DbBackend::Postgres {
            return Ok(());
        }
        let db = manager.get_connection();
        let now = month_of(
            db,
            "SELECT extract(year FROM now() AT TIME ZONE 'UTC')::int AS y, \
             extract(month FROM now() AT TIME ZONE 'UTC')::int AS m",
        )
        .await?
        .ok_or_else(|| DbErr::Migration("the database's clock has no month".into()))?;
        let oldest = month_of(
            db,
            "SELECT extract(year FROM min(started_at) AT TIME ZONE 'UTC')::int AS y, \
             extract(month FROM min(started_at) AT TIME ZONE 'UTC')::int AS m FROM usage_records",
        )
        .await?
        .unwrap_or(now)
        .min(now);
        let last = now.plus(AHEAD);
        let mut sql = vec![
            format!("ALTER TABLE {PARENT} RENAME TO usage_records_unpartitioned"),
            format!(
                "CREATE TABLE {PARENT} (LIKE usage_records_unpartitioned INCLUDING DEFAULTS \
                 INCLUDING IDENTITY) PARTITION BY RANGE (started_at)"
            ),
            format!("CREATE TABLE {DEFAULT_PARTITION} PARTITION OF {PARENT} DEFAULT"),
        ];
        let mut month = oldest;
        while month <= last {
            sql.push(format!(
                "CREATE TABLE {} PARTITION OF {PARENT} FOR VALUES FROM ({}) TO ({})",
                month.name(),
                month.start(),
                month.end()
            ));
            if month.next() == month {
                break;
            }
            month = month.next();
        }
        // Every column as it was, but a gateway's request id (UUIDv7) dates its record by the
        // id's own millisecond, as the settler now writes it (see usage_partitions), so a late
        // copy of a request booked before this migration finds its record by the pair.
        let columns: Vec<String> = db
            .query_all_raw(Statement::from_string(
                DbBackend::Postgres,
                "SELECT column_name::text AS name FROM information_schema.columns \
                 WHERE table_name = 'usage_records' \
                 AND table_schema = current_schema() ORDER BY ordinal_position",
            ))
            .await?
            .iter()
            .map(|row| row.try_get::<String>("", "name"))
            .collect::<Result<_, _>>()?;
        if !columns.iter().any(|c| c == "started_at") {
            return Err(DbErr::Migration(
                "usage_records has no started_at column".into(),
            ));
        }
        let select: Vec<String> = columns
            .iter()
            .map(|c| match c.as_str() {
                "started_at" => format!("{GATEWAY_ID_TIME} AS started_at"),
                other => format!("\"{other}\""),
            })
            .collect();
        sql.push(format!(
            "INSERT INTO {PARENT} OVERRIDING SYSTEM VALUE SELECT {} FROM usage_records_unpartitioned",
            select.join(", ")
        ));
        sql.push(format!(
            "SELECT setval(pg_get_serial_sequence('{PARENT}', 'id'), \
             (SELECT coalesce(max(id), 0) + 1 FROM {PARENT}), false)"
        ));
        sql.push("DROP TABLE usage_records_unpartitioned".into());
        sql.extend(INDEXES.iter().map(|s| String::from(*s)));
        for s in sql {
            db.execute_unprepared(&s).await?;
        }
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        if manager.get_database_backend() != DbBackend::Postgres {
            return Ok(());
        }
        let db = manager.get_connection();
        for s in [
            format!("ALTER TABLE {PARENT} RENAME TO usage_records_partitioned"),
            format!(
                "CREATE TABLE {PARENT} (LIKE usage_records_partitioned INCLUDING DEFAULTS \
                 INCLUDING IDENTITY)"
            ),
            format!(
                "INSERT INTO {PARENT} OVERRIDING SYSTEM VALUE SELECT * FROM usage_records_partitioned"
            ),
            format!(
                "SELECT setval(pg_get_serial_sequence('{PARENT}', 'id'), \
                 (SELECT coalesce(max(id), 0) + 1 FROM {PARENT}), false)"
            ),
            "DROP TABLE usage_records_partitioned".into(),
            "ALTER TABLE usage_records ADD CONSTRAINT usage_records_pkey PRIMARY KEY (id)".into(),
            "ALTER TABLE usage_records ADD CONSTRAINT usage_records_request_id_key UNIQUE (request_id)"
                .into(),
            "CREATE INDEX idx_usage_records_org_started ON usage_records (organization_id, started_at)"
                .into(),
        ] {
            db.execute_unprepared(&s).await?;
        }
        Ok(())
    }
}
