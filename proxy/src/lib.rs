//! Tollgate's gateway: a Pingora reverse proxy in front of model suppliers.
//!
//! Read the modules in request order: [`classify`] (which route) → `auth` (who) → `inspect` (what
//! the body asks, in the client's wire format) → `route` (which model, which accounts, in which
//! order, with a capacity slot) → `money::admit` (reserve the worst case) → `upstream` (the
//! supplier's request) → `meter` (usage while streaming, asking `wire` where it sits) →
//! `money::settle` (once, at the end). `gateway` is the `ProxyHttp` table of contents tying them
//! together; [`server`] runs it.
//!
//! Public: what the binaries and the tests need ([`Gateway`], [`Metrics`], the servers, the route
//! table, the rendezvous order and the worst-case price tests predict holds with).

mod admission;
mod answer;
mod attempt;
mod auth;
mod batch;
mod batch_line;
mod batch_offload;
mod bodies;
mod call;
pub mod classify;
mod control;
mod ctx;
mod ending;
mod errors;
mod gateway;
pub mod health;
mod inspect;
mod live;
mod local;
mod media;
mod meter;
pub mod metrics;
mod models;
mod money;
mod respond;
mod route;
pub mod server;
mod shared;
mod telemetry;
mod upstream;
pub mod video;
mod wire;

pub use gateway::Gateway;
pub use metrics::Metrics;
pub use money::admit::worst_case;
pub use route::select::order as rendezvous_order;
pub use server::{build_server, listener, run_server, serve_listener, serve_metrics};
