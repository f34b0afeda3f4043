//! The partner API (`/partner/v1`): gate (auth, rate limits, scopes), idempotency, handlers.

pub mod gate;
pub mod idempotency;
