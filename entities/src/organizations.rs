//! A customer organization: the holder of one balance, whose keys call the gateway.

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "organizations")]
pub struct Model {
    #[sea_orm(primary_key)]
    pub id: i64,
    pub name: String,
    #[sea_orm(unique)]
    pub slug: String,
    /// `pending_activation` or `active`.
    pub status: crate::status::OrganizationStatus,
    pub created_at: DateTimeUtc,
    /// The person who accepted the invitation (the owner).
    pub owner_email: Option<String>,
    pub billing_email: Option<String>,
    pub activated_at: Option<DateTimeUtc>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {
    #[sea_orm(has_many = "super::customer_api_keys::Entity")]
    CustomerApiKeys,
}

impl Related<super::customer_api_keys::Entity> for Entity {
    fn to() -> RelationDef {
        Relation::CustomerApiKeys.def()
    }
}

impl ActiveModelBehavior for ActiveModel {}
