//! `[batches]`: batch work run by admin-api item by item through a gateway (issue 46; DESIGN
//! §6e).

use crate::error::{ConfigError, err};
use serde::Deserialize;

/// The section as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawBatches {
    pub gateway_url: Option<String>,
    pub concurrency: Option<u32>,
    pub yield_above: Option<f64>,
    pub max_file_bytes: Option<u64>,
    pub max_lines: Option<u32>,
    pub retention_days: Option<u32>,
    pub poll_interval_ms: Option<u64>,
    pub supplier_lines: Option<u32>,
    pub supplier_poll_interval_ms: Option<u64>,
}

/// The most lines a batch file may have (OpenAI's own limit).
pub const MAX_LINES: u32 = 50_000;
/// The largest batch file accepted (OpenAI's own limit is 200 MB).
pub const MAX_FILE_BYTES: u64 = 200 * 1024 * 1024;

/// Batch work (`[batches]`).
#[derive(Debug, Clone)]
pub struct Batches {
    /// Where the runner sends each line: a gateway's base URL (`http://host:port`, plain HTTP on
    /// the deployment's own network). `None`: the
    /// gateway of this deployment (`http://{server.listen}`, a wildcard address read as
    /// loopback).
    pub gateway_url: Option<String>,
    /// Lines in flight at once, per batch being run. Default 8.
    pub concurrency: u32,
    /// A batch line takes a capacity slot only while its account has fewer than this fraction
    /// of its `max_concurrency` in flight (at least one slot), and never waits in the queue: the
    /// rest is left to interactive calls. Default 0.5.
    pub yield_above: f64,
    /// The largest input file accepted, in bytes. Default 100 MiB (at most 200 MiB).
    pub max_file_bytes: u64,
    /// The most lines an input file may have. Default and maximum 50,000.
    pub max_lines: u32,
    /// Days a batch and its files are kept after the batch ended (or after an unused file was
    /// uploaded). Default 30.
    pub retention_days: u32,
    /// How often each admin-api process looks for a batch to run when it had none. Default 1 s.
    pub poll_interval_ms: u64,
    /// Lines held and sent at once to a supplier's own batch API (accounts with the `batch`
    /// capability): one such chunk of a batch runs at a time, so a batch holds at most this
    /// many lines' worst cases. Default 5000, at most 50,000 (OpenAI's limit).
    pub supplier_lines: u32,
    /// How often a supplier's batch is asked whether it ended. Default 30 s.
    pub supplier_poll_interval_ms: u64,
}

/// Validates `[batches]`.
pub(crate) fn validate(raw: &RawBatches) -> Result<Batches, ConfigError> {
    let b = Batches {
        gateway_url: raw.gateway_url.clone(),
        concurrency: raw.concurrency.unwrap_or(8),
        yield_above: raw.yield_above.unwrap_or(0.5),
        max_file_bytes: raw.max_file_bytes.unwrap_or(100 * 1024 * 1024),
        max_lines: raw.max_lines.unwrap_or(MAX_LINES),
        retention_days: raw.retention_days.unwrap_or(30),
        poll_interval_ms: raw.poll_interval_ms.unwrap_or(1_000),
        supplier_lines: raw.supplier_lines.unwrap_or(5_000),
        supplier_poll_interval_ms: raw.supplier_poll_interval_ms.unwrap_or(30_000),
    };
    // The runner reaches a gateway of the deployment over its private network: plain HTTP.
    if let Some(url) = &b.gateway_url
        && !url.starts_with("http://")
    {
        return Err(err(
            "batches.gateway_url",
            "must be an http:// base URL of a gateway of this deployment",
        ));
    }
    if !(1..=256).contains(&b.concurrency) {
        return Err(err("batches.concurrency", "must be between 1 and 256"));
    }
    if !(b.yield_above > 0.0 && b.yield_above <= 1.0) {
        return Err(err(
            "batches.yield_above",
            "must be a fraction above 0 and at most 1",
        ));
    }
    if !(1024..=MAX_FILE_BYTES).contains(&b.max_file_bytes) {
        return Err(err(
            "batches.max_file_bytes",
            format!("must be between 1024 and {MAX_FILE_BYTES}"),
        ));
    }
    if !(1..=MAX_LINES).contains(&b.max_lines) {
        return Err(err(
            "batches.max_lines",
            format!("must be between 1 and {MAX_LINES}"),
        ));
    }
    if !(1..=365).contains(&b.retention_days) {
        return Err(err("batches.retention_days", "must be between 1 and 365"));
    }
    if !(50..=60_000).contains(&b.poll_interval_ms) {
        return Err(err(
            "batches.poll_interval_ms",
            "must be between 50 and 60000",
        ));
    }
    if !(1..=MAX_LINES).contains(&b.supplier_lines) {
        return Err(err(
            "batches.supplier_lines",
            format!("must be between 1 and {MAX_LINES}"),
        ));
    }
    if !(50..=3_600_000).contains(&b.supplier_poll_interval_ms) {
        return Err(err(
            "batches.supplier_poll_interval_ms",
            "must be between 50 and 3600000",
        ));
    }
    Ok(b)
}

impl Batches {
    /// The slots a batch line may take on an account of `max_concurrency`: `yield_above` of
    /// them, rounded down, at least one.
    pub fn slots_of(&self, max_concurrency: u32) -> u32 {
        let share = (f64::from(max_concurrency) * self.yield_above).floor();
        // In range: a fraction of a u32.
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let share = share as u32;
        share.clamp(1, max_concurrency.max(1))
    }
}
