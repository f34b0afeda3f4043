//! A partner's automatic recharge: when its available funding falls below `below_nanos`, charge
//! its saved card `amount_nanos` off-session; funding is credited by the payment's webhook.

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "recharge_rules")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub partner_id: i64,
    pub below_nanos: i64,
    pub amount_nanos: i64,
    /// `needs_card` (no card saved yet), `active`, or `stopped` (a declined card; saving a card
    /// or setting the rule again restarts it).
    pub status: String,
    pub stop_reason: Option<String>,
    /// The Stripe Customer (`cus_…`) owning the saved card.
    pub stripe_customer: Option<String>,
    /// The saved card (`pm_…`).
    pub payment_method: Option<String>,
    pub card_saved_at: Option<DateTimeUtc>,
    /// Ready to act at the next crossing.
    pub armed: bool,
    /// Counted up by every change of the crossing state (claims are conditional on it).
    pub generation: i64,
    pub updated_at: DateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
