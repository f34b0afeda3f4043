//! One off-session charge of a partner's saved card.

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "recharge_attempts")]
pub struct Model {
    #[sea_orm(primary_key)]
    pub id: i64,
    pub partner_id: i64,
    pub amount_nanos: i64,
    /// The `Idempotency-Key` sent to Stripe: one per crossing, unique.
    pub idempotency_key: String,
    /// Stripe's PaymentIntent (`pi_…`), unique.
    pub payment_intent: Option<String>,
    /// `pending`, `succeeded`, `declined` or `failed`.
    pub status: String,
    pub failure: Option<String>,
    /// A pass is asking Stripe for this charge since then (`None`: no one is).
    pub in_flight_since: Option<DateTimeUtc>,
    pub created_at: DateTimeUtc,
    pub credited_at: Option<DateTimeUtc>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
