//! The status columns, read and written through enums (stored as their lowercase text, so the
//! schema and the stored rows are unchanged by the type). A stored value outside an enum fails the
//! read instead of passing as some other state.

use sea_orm::entity::prelude::*;

/// `organizations.status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, EnumIter, DeriveActiveEnum)]
#[sea_orm(rs_type = "String", db_type = "String(StringLen::None)")]
pub enum OrganizationStatus {
    /// Created by a partner; waits for its invitation to be accepted.
    #[sea_orm(string_value = "pending_activation")]
    PendingActivation,
    #[sea_orm(string_value = "active")]
    Active,
}

/// `customer_api_keys.status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, EnumIter, DeriveActiveEnum)]
#[sea_orm(rs_type = "String", db_type = "String(StringLen::None)")]
pub enum KeyStatus {
    #[sea_orm(string_value = "active")]
    Active,
    /// Permanent.
    #[sea_orm(string_value = "disabled")]
    Disabled,
}

/// `partner_tokens.status` and `org_billing_tokens.status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, EnumIter, DeriveActiveEnum)]
#[sea_orm(rs_type = "String", db_type = "String(StringLen::None)")]
pub enum TokenStatus {
    #[sea_orm(string_value = "active")]
    Active,
    /// Replaced by a newer token.
    #[sea_orm(string_value = "rotated")]
    Rotated,
    #[sea_orm(string_value = "revoked")]
    Revoked,
}

/// `invitations.status` as stored (a pending invitation past its expiry reads as expired).
#[derive(Debug, Clone, Copy, PartialEq, Eq, EnumIter, DeriveActiveEnum)]
#[sea_orm(rs_type = "String", db_type = "String(StringLen::None)")]
pub enum InvitationStatus {
    #[sea_orm(string_value = "pending")]
    Pending,
    #[sea_orm(string_value = "accepted")]
    Accepted,
    #[sea_orm(string_value = "expired")]
    Expired,
    #[sea_orm(string_value = "revoked")]
    Revoked,
}

/// `idempotency_records.state`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, EnumIter, DeriveActiveEnum)]
#[sea_orm(rs_type = "String", db_type = "String(StringLen::None)")]
pub enum RecordState {
    /// Claimed; the write runs (or its process died).
    #[sea_orm(string_value = "in_progress")]
    InProgress,
    /// The outcome is stored and replayed.
    #[sea_orm(string_value = "completed")]
    Completed,
}

/// `top_up_sessions.status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, EnumIter, DeriveActiveEnum)]
#[sea_orm(rs_type = "String", db_type = "String(StringLen::None)")]
pub enum TopUpStatus {
    #[sea_orm(string_value = "open")]
    Open,
    #[sea_orm(string_value = "paid")]
    Paid,
    /// The provider's session expired unpaid.
    #[sea_orm(string_value = "expired")]
    Expired,
    /// The provider reported the (delayed) payment failed.
    #[sea_orm(string_value = "failed")]
    Failed,
}

/// `customer_groups.status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, EnumIter, DeriveActiveEnum)]
#[sea_orm(rs_type = "String", db_type = "String(StringLen::None)")]
pub enum GroupStatus {
    #[sea_orm(string_value = "active")]
    Active,
}

/// `video_tasks.status`. `submitting`: the record exists, the supplier has not answered the
/// create yet (a poll answers `queued`). `completed` and `failed` are final.
#[derive(Debug, Clone, Copy, PartialEq, Eq, EnumIter, DeriveActiveEnum)]
#[sea_orm(rs_type = "String", db_type = "String(StringLen::None)")]
pub enum VideoTaskStatus {
    #[sea_orm(string_value = "submitting")]
    Submitting,
    #[sea_orm(string_value = "queued")]
    Queued,
    #[sea_orm(string_value = "in_progress")]
    InProgress,
    #[sea_orm(string_value = "completed")]
    Completed,
    #[sea_orm(string_value = "failed")]
    Failed,
}

impl VideoTaskStatus {
    /// Whether the task is over (its hold is resolved).
    pub fn is_final(self) -> bool {
        matches!(self, VideoTaskStatus::Completed | VideoTaskStatus::Failed)
    }
}
