//! The limiter's state of one key (issue 42): an address (`addr:` and the SHA-256 of the
//! address) or a client network (`net:` and an IPv4 address or an IPv6 /64).

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "console_throttles")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub key: String,
    /// Attempts since the last success (or since a quiet hour).
    pub failures: i32,
    pub locked_until: Option<DateTimeUtc>,
    pub last_at: DateTimeUtc,
    /// Bumped by every write (optimistic concurrency).
    pub version: i64,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
