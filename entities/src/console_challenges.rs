//! A console step waiting for the code mailed to an address (issue 42): an invitation's
//! acceptance, a join link, or a sign-in of an account whose address is not proven yet. Only the
//! code's keyed hash and the SHA-256 of the browser flow's secret are stored; at most one live
//! challenge per address and subject.

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "console_challenges")]
pub struct Model {
    #[sea_orm(primary_key)]
    pub id: i64,
    /// Hex SHA-256 of the flow secret kept in the browser's `tg_flow` cookie.
    #[sea_orm(unique)]
    pub flow_hash: String,
    /// `invitation`, `join` or `sign_in`.
    pub purpose: String,
    /// What completes: `invitation:{id}`, `join:{console token id}` or `user:{id}`.
    pub subject: String,
    pub email: String,
    /// Keyed hash of the 8-digit code.
    pub code_hash: String,
    /// argon2id of the password chosen at the first step (a new address).
    pub password_hash: Option<String>,
    /// The account whose password the first step checked (an existing address).
    pub user_id: Option<i64>,
    /// Codes tried so far (at most 5).
    pub tries: i32,
    pub created_at: DateTimeUtc,
    pub expires_at: DateTimeUtc,
    pub used_at: Option<DateTimeUtc>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
