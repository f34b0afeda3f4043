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

/// No relation declared here: a key names its organization (`customer_api_keys`' `belongs_to`,
/// the database's foreign key), and declaring the way back too made the two files import each
/// other (issue 43).
#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
