//! A person who signs in to the console: one email address (lowercase, unique) and the PHC string
//! of an argon2id hash of their password.

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "console_users")]
pub struct Model {
    #[sea_orm(primary_key)]
    pub id: i64,
    #[sea_orm(unique)]
    pub email: String,
    pub password_hash: String,
    pub created_at: DateTimeUtc,
    pub updated_at: DateTimeUtc,
    /// When the address was last proven (a mailed code or reset link, or the operator's demo
    /// command); `None`: never, and the account proves it at its next sign-in before it acts.
    pub email_verified_at: Option<DateTimeUtc>,
    /// The authenticator app's secret, sealed (AES-256-GCM); set while setting up or on.
    pub totp_secret: Option<String>,
    /// When two-factor sign-in was turned on (`None`: off).
    pub totp_enabled_at: Option<DateTimeUtc>,
    /// The RFC 6238 step of the last code accepted (a code is accepted once).
    pub totp_last_step: Option<i64>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
