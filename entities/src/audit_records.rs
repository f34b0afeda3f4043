//! One change made through the console (or a security event such as a sign-in): who, what,
//! which organization or partner team it concerns, from where, when. Never updated.

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "audit_records")]
pub struct Model {
    #[sea_orm(primary_key)]
    pub id: i64,
    pub organization_id: Option<i64>,
    pub partner_id: Option<i64>,
    pub actor_user_id: Option<i64>,
    pub action: String,
    pub target: Option<String>,
    /// A short JSON object.
    pub detail: String,
    pub ip: Option<String>,
    pub created_at: DateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
