//! `[reconciliation]`: checking the ledger against the suppliers' own usage reports (issue 47).

use crate::error::{ConfigError, err};
use serde::Deserialize;

/// The section as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawReconciliation {
    pub supplier_interval_ms: Option<u64>,
    pub supplier_days: Option<u32>,
    pub drift_tolerance: Option<f64>,
}

/// Supplier reconciliation (`[reconciliation]`).
#[derive(Debug, Clone)]
pub struct Reconciliation {
    /// How often admin-api reads the usage report of every account with a `usage_report_key`
    /// and compares it with the ledger. Default one hour; 0 turns the job off (the operator
    /// command still runs it).
    pub supplier_interval_ms: u64,
    /// The UTC days each round checks, today included (a supplier's report of a day settles
    /// after the day ends). Default 2, at most 31.
    pub supplier_days: u32,
    /// The drift beyond which a day × account × model is flagged (the alert rule
    /// `SupplierUsageDrift` fires on the flag): a fraction of the larger side's tokens. Default
    /// 0.01, 0 to 1.
    pub drift_tolerance: f64,
}

/// Validates `[reconciliation]`.
pub(crate) fn validate(raw: &RawReconciliation) -> Result<Reconciliation, ConfigError> {
    let r = Reconciliation {
        supplier_interval_ms: raw.supplier_interval_ms.unwrap_or(3_600_000),
        supplier_days: raw.supplier_days.unwrap_or(2),
        drift_tolerance: raw.drift_tolerance.unwrap_or(0.01),
    };
    if r.supplier_interval_ms != 0 && r.supplier_interval_ms < 1_000 {
        return Err(err(
            "reconciliation.supplier_interval_ms",
            "must be 0 (off) or at least 1000",
        ));
    }
    if !(1..=31).contains(&r.supplier_days) {
        return Err(err("reconciliation.supplier_days", "must be 1 to 31"));
    }
    if !(0.0..=1.0).contains(&r.drift_tolerance) {
        return Err(err("reconciliation.drift_tolerance", "must be 0 to 1"));
    }
    Ok(r)
}
