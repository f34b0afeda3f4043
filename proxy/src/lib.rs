//! Tollgate's gateway: a Pingora reverse proxy in front of model suppliers.
//!
//! Read the modules in request order: [`surface`] (which route) → [`auth`] (who) → [`inspect`]
//! (what the body asks) → [`route`] (which model, which accounts) → [`admit`] (reserve the worst
//! case) → [`select`] (which account
//! first) → [`rewrite`] (the supplier's request) → [`meter`] (usage while streaming) → [`settle`]
//! (once, at the end). [`gateway`] is the `ProxyHttp` table of contents tying them together;
//! [`server`] runs it.

pub mod admit;
pub mod auth;
pub mod capacity;
pub mod cooldown;
pub mod ctx;
pub mod downgrade;
pub mod errors;
pub mod form;
pub mod gateway;
pub mod inspect;
pub mod local;
pub mod meter;
pub mod metrics;
pub mod price;
pub mod respond;
pub mod rewrite;
pub mod route;
pub mod select;
pub mod server;
pub mod settle;
pub mod surface;
pub mod upstreams;

pub use gateway::Gateway;
pub use metrics::Metrics;
pub use server::{build_server, serve_listener, serve_metrics};
