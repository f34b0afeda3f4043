//! A customer routing key. Only its keyed hash and a preview are stored.

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "customer_api_keys")]
pub struct Model {
    #[sea_orm(primary_key)]
    pub id: i64,
    pub organization_id: i64,
    pub group_id: i64,
    pub name: String,
    /// HMAC-SHA256 of the secret under the server's pepper (hex).
    #[sea_orm(unique)]
    pub key_hash: String,
    pub preview: String,
    /// `active` or `disabled` (permanent).
    pub status: crate::status::KeyStatus,
    pub allow_openai: bool,
    pub allow_gemini: bool,
    pub allow_anthropic: bool,
    pub created_at: DateTimeUtc,
    pub disabled_at: Option<DateTimeUtc>,
    /// After this instant the key no longer authenticates (`None`: never expires).
    pub expires_at: Option<DateTimeUtc>,
    /// Calls of this key in flight at most (`None`: its group's default).
    pub max_concurrency: Option<i32>,
    /// Calls of this key admitted per minute at most (`None`: its group's default).
    pub requests_per_minute: Option<i32>,
    /// The key's spend budget per period, nano-USD (`None`: no budget).
    pub budget_nanos: Option<i64>,
    /// `day` or `month` (UTC) with a budget.
    pub budget_period: Option<String>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {
    #[sea_orm(
        belongs_to = "super::organizations::Entity",
        from = "Column::OrganizationId",
        to = "super::organizations::Column::Id"
    )]
    Organization,
}

impl Related<super::organizations::Entity> for Entity {
    fn to() -> RelationDef {
        Relation::Organization.def()
    }
}

impl ActiveModelBehavior for ActiveModel {}
