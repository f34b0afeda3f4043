//! admin-api: the partner API, the organization billing API, invitations, the settler and the
//! operator CLI, over the ledger of record (sea-orm on PostgreSQL or SQLite).
//!
//! Layers (handler → service → entity):
//! - [`http`]: one file per resource; handlers extract and map, partner writes go through one
//!   idempotent-write path;
//! - [`services`]: the rules; they take a connection or transaction and return [`dto`] types;
//! - [`dto`]: the wire types (also the OpenAPI schemas), never entity models;
//! - [`workers`]: the settler, the reconciler and the key-directory keeper;
//! - neutral pieces every layer shares: [`caller`] (who calls), [`auth`] (presented tokens),
//!   [`db`] (connections and write transactions), [`ledger`], [`keys`], [`pricing`], [`error`],
//!   [`text`] (cutting by characters, CSV cells);
//! - [`payments`]: Stripe Checkout (partner top-ups) and its webhook signatures.

pub mod auth;
pub mod caller;
pub mod cli;
pub(crate) mod console;
pub mod db;
pub mod demo;
pub mod dto;
pub mod error;
pub mod http;
pub mod keys;
pub mod ledger;
pub mod mail;
pub mod meters;
pub mod openapi;
pub mod partner;
pub mod payments;
pub mod pricing;
pub mod refusal;
pub mod regions;
pub mod services;
pub mod state;
pub mod task_book;
pub mod text;
pub mod webhooks;
pub mod workers;

pub use http::{router, serve};
pub use state::AppState;
