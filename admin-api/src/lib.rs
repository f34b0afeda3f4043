//! admin-api: the partner API, the organization billing API, invitations, the settler and the
//! operator CLI, over the ledger of record (sea-orm on PostgreSQL or SQLite).
//!
//! Layers: `http` handlers extract and map → services (`keys`, `demo`) hold the rules and take a
//! connection → `entities`. DTOs are never entity models.

pub mod cli;
pub mod db;
pub mod demo;
pub mod dto;
pub mod error;
pub mod http;
pub mod keys;
pub mod ledger;
pub mod mail;
pub mod openapi;
pub mod partner;
pub mod pricing;
pub mod reconciler;
pub mod runtime;
pub mod services;
pub mod settler;
pub mod state;

pub use http::{router, serve};
pub use state::AppState;
