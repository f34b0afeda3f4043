//! Partner webhooks' delivery side (issue 45): where a delivery may go (`address`), how it is
//! signed (`signature`) and how it is sent (`send`). The outbox and the endpoints are
//! `services::partner_webhooks`; the delivering worker is `workers::webhooks`.

pub mod address;
pub mod send;
pub mod signature;
