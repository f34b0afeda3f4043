//! admin-api's Prometheus figures: what the settler booked, how far behind it is, the holds open
//! and the mirrors not reconciled (the reconciler's pass), and what the balance rules did.
//!
//! Names follow the gateway's (`tollgate_` prefix, units in names, `_total` counters) and their
//! labels are bounded: measurement and action are fixed sets; the `organization` label exists
//! only when `[metrics] organization_labels` allows it, for that many organizations at most (the
//! first ones booked; every other one counts as `other`). An embedded admin-api's figures are
//! served on the proxy's `/metrics` ([`Meters::register_in`]); a separate one serves them at
//! `[metrics] admin_listen`.

use money::NanoUsd;
use opstate::{Measurement, UsageEvent};
use prometheus::core::Collector;
use prometheus::{
    Counter, CounterVec, Gauge, IntCounter, IntCounterVec, IntGauge, Opts, Registry, TextEncoder,
};
use std::collections::HashSet;
use std::sync::Mutex;

/// The label of every organization past the cap.
pub const OTHER: &str = "other";

/// The balance rules' actions (`balance_rule_actions_total{action}`).
pub const ACTIONS: [&str; 5] = [
    "alert_sent",
    "allocated",
    "allocation_refused",
    "recharged",
    "recharge_declined",
];

/// admin-api's collectors, in a registry of their own.
pub struct Meters {
    registry: Registry,
    /// Registers each collector in another registry (`register_in`), one per collector built.
    all: Vec<Registrar>,
    /// Usage records booked by the settler, by measurement (`exact`, `estimated`).
    pub usage_records: IntCounterVec,
    /// What the booked records charged, USD.
    pub spend: Counter,
    /// The same by organization (`[metrics] organization_labels`; absent when 0).
    pub organization_spend: Option<CounterVec>,
    /// Organizations with a label of their own.
    labelled: Mutex<HashSet<i64>>,
    cap: usize,
    /// From the newest call of the last batch ending to its booking, seconds.
    pub settlement_lag: Gauge,
    /// Usage events appended and not yet settled (the reconciler's pass).
    pub backlog: IntGauge,
    /// The usage streams this process's settler leases now (issue 48).
    pub settler_streams: IntGauge,
    /// Organizations holding money for calls in progress, and the sum they hold, USD.
    pub wallets_holding: IntGauge,
    pub holds_reserved: Gauge,
    /// Wallet mirrors that do not agree with the ledger (their balance answers 503 until
    /// reloaded): found by the reconciler's pass or waiting for the keeper's reload.
    pub wallets_unreconciled: IntGauge,
    /// Holds past their deadline settled at their estimate (their gateway died).
    pub holds_expired: IntCounter,
    /// What the balance rules did: `alert_sent`, `allocated`, `allocation_refused`, `recharged`,
    /// `recharge_declined`.
    pub rule_actions: IntCounterVec,
    /// The operator's side (issue 47), by supplier account and served model (labels the
    /// configuration bounds): the supplier's bill for booked calls whose cost is known, the calls
    /// without one, and the operator's revenue (wholesale for resold organizations, else retail).
    pub supplier: SupplierMeters,
}

/// The operator's margin as counters (`revenue − supplier cost`); operator-only, as every
/// figure on the metrics listener.
pub struct SupplierMeters {
    pub cost: CounterVec,
    pub unknown: IntCounterVec,
    pub revenue: CounterVec,
    /// Attempts by account and result (`answered`, `refused`, `unreachable`).
    pub attempts: IntCounterVec,
    /// Reconciliation against the suppliers' reports (last round): day × account × model rows
    /// beyond the tolerance, the token drift (theirs − ours, input and output) by account and
    /// model over the round's days, and reports that could not be read.
    pub flagged: IntGauge,
    pub drift_tokens: prometheus::GaugeVec,
    pub reconcile_errors: IntCounter,
}

/// Registers one collector in a registry.
type Registrar = Box<dyn Fn(&Registry) + Send + Sync>;

fn build<T: Collector + Clone + 'static>(
    registry: &Registry,
    all: &mut Vec<Registrar>,
    collector: Result<T, prometheus::Error>,
) -> Result<T, prometheus::Error> {
    let c = collector?;
    registry.register(Box::new(c.clone()))?;
    let shared = c.clone();
    all.push(Box::new(move |r: &Registry| {
        // Already there (registered twice): left as it is.
        let _ = r.register(Box::new(shared.clone()));
    }));
    Ok(c)
}

impl Meters {
    /// Every collector, with `organization_labels` organizations labelled at most (0: none).
    pub fn new(organization_labels: u32) -> Result<Meters, prometheus::Error> {
        let r = Registry::new_custom(Some("tollgate".into()), None)?;
        let mut all = Vec::new();
        let organization_spend = if organization_labels > 0 {
            Some(build(
                &r,
                &mut all,
                CounterVec::new(
                    Opts::new(
                        "organization_spend_usd_total",
                        "Amount charged on booked usage records by organization, USD (capped label set)",
                    ),
                    &["organization"],
                ),
            )?)
        } else {
            None
        };
        Ok(Meters {
            usage_records: build(
                &r,
                &mut all,
                IntCounterVec::new(
                    Opts::new(
                        "usage_records_total",
                        "Usage records booked by the settler, by measurement",
                    ),
                    &["measurement"],
                ),
            )?,
            spend: build(
                &r,
                &mut all,
                Counter::new(
                    "spend_usd_total",
                    "Amount charged on booked usage records, USD",
                ),
            )?,
            organization_spend,
            labelled: Mutex::new(HashSet::new()),
            cap: usize::try_from(organization_labels).unwrap_or(0),
            settlement_lag: build(
                &r,
                &mut all,
                Gauge::new(
                    "settlement_lag_seconds",
                    "From the end of the newest call of the settler's last batch to its booking",
                ),
            )?,
            backlog: build(
                &r,
                &mut all,
                IntGauge::new(
                    "settler_backlog_events",
                    "Usage events appended and not yet settled",
                ),
            )?,
            settler_streams: build(
                &r,
                &mut all,
                IntGauge::new(
                    "settler_streams",
                    "Usage streams this process's settler leases now",
                ),
            )?,
            wallets_holding: build(
                &r,
                &mut all,
                IntGauge::new(
                    "wallets_holding",
                    "Organizations holding money for calls in progress",
                ),
            )?,
            holds_reserved: build(
                &r,
                &mut all,
                Gauge::new(
                    "holds_reserved_usd",
                    "Money held for calls in progress, USD",
                ),
            )?,
            wallets_unreconciled: build(
                &r,
                &mut all,
                IntGauge::new(
                    "wallets_unreconciled",
                    "Wallet mirrors that disagree with the ledger, waiting for a reload",
                ),
            )?,
            holds_expired: build(
                &r,
                &mut all,
                IntCounter::new(
                    "holds_expired_total",
                    "Holds past their deadline settled at their estimate (their gateway died)",
                ),
            )?,
            rule_actions: build(
                &r,
                &mut all,
                IntCounterVec::new(
                    Opts::new(
                        "balance_rule_actions_total",
                        "What the balance rules did (alerts, automatic allocations and recharges)",
                    ),
                    &["action"],
                ),
            )?,
            supplier: supplier_meters(&r, &mut all)?,
            registry: r,
            all,
        })
        .inspect(|m| {
            // Every fixed label's series exists from the start (a rate over a series that
            // appears later misses its first increase, and an alert cannot tell "none" from
            // "not exported").
            for measurement in ["exact", "estimated"] {
                m.usage_records.with_label_values(&[measurement]);
            }
            for action in ACTIONS {
                m.rule_actions.with_label_values(&[action]);
            }
        })
    }

    /// Counts the supplier's side of a settler batch's new records: `(event, revenue)` each.
    pub fn supplier_booked<'a>(
        &self,
        records: impl IntoIterator<Item = (&'a UsageEvent, NanoUsd)>,
    ) {
        for (e, revenue) in records {
            let labels = [e.account_id.as_str(), e.model_served.as_str()];
            match e.supplier.cost_nanos {
                Some(cost) => self
                    .supplier
                    .cost
                    .with_label_values(&labels)
                    .inc_by(usd(cost)),
                None => self.supplier.unknown.with_label_values(&labels).inc(),
            }
            self.supplier
                .revenue
                .with_label_values(&labels)
                .inc_by(usd(revenue));
            self.supplier
                .attempts
                .with_label_values(&[e.account_id.as_str(), "answered"])
                .inc();
            for a in &e.supplier.earlier {
                self.supplier
                    .attempts
                    .with_label_values(&[a.account_id.as_str(), a.outcome.as_str()])
                    .inc();
                // An abandoned attempt: what the supplier may bill for it.
                let labels = [a.account_id.as_str(), e.model_served.as_str()];
                match a.served.map(|s| s.cost_nanos) {
                    Some(Some(cost)) => self
                        .supplier
                        .cost
                        .with_label_values(&labels)
                        .inc_by(usd(cost)),
                    Some(None) => self.supplier.unknown.with_label_values(&labels).inc(),
                    None => {}
                }
            }
        }
    }

    /// The settler now leases `n` usage streams.
    pub fn settler_streams(&self, n: usize) {
        self.settler_streams
            .set(i64::try_from(n).unwrap_or(i64::MAX));
    }

    /// Counts the usage records a settler batch booked: `(event, charged)` each.
    pub fn booked<'a>(&self, records: impl IntoIterator<Item = (&'a UsageEvent, NanoUsd)>) {
        let now_ms = u64::try_from(chrono::Utc::now().timestamp_millis()).unwrap_or(0);
        let mut newest_end = None;
        for (event, charged) in records {
            let measurement = match event.measurement {
                Measurement::Exact => "exact",
                Measurement::Estimated => "estimated",
            };
            self.usage_records.with_label_values(&[measurement]).inc();
            let usd = usd(charged);
            self.spend.inc_by(usd);
            if let Some(by_org) = &self.organization_spend {
                let label = self.label_of(event.org_id);
                by_org.with_label_values(&[label.as_str()]).inc_by(usd);
            }
            let end = event.started_at_ms.saturating_add(event.latency_ms);
            newest_end = newest_end.max(Some(end));
        }
        if let Some(end) = newest_end {
            self.settlement_lag
                .set(now_ms.saturating_sub(end) as f64 / 1000.0);
        }
    }

    /// Organization `org`'s label: its id while the cap has room or it already has one, else
    /// [`OTHER`].
    fn label_of(&self, org: i64) -> String {
        let Ok(mut labelled) = self.labelled.lock() else {
            return OTHER.into();
        };
        if labelled.contains(&org) || (labelled.len() < self.cap && labelled.insert(org)) {
            org.to_string()
        } else {
            OTHER.into()
        }
    }

    /// Registers every collector in `registry` too (an embedded admin-api's figures on the
    /// proxy's endpoint); a collector already there is left as it is.
    pub fn register_in(&self, registry: &Registry) {
        for register in &self.all {
            register(registry);
        }
    }

    /// The Prometheus text exposition of every collector.
    pub fn render(&self) -> String {
        let mut out = String::new();
        if TextEncoder::new()
            .encode_utf8(&self.registry.gather(), &mut out)
            .is_err()
        {
            return String::new();
        }
        out
    }
}

/// An amount in US dollars, for a metric (monitoring only: the ledger keeps the exact figure).
fn usd(amount: NanoUsd) -> f64 {
    amount.nanos() as f64 / 1e9
}

fn supplier_meters(
    r: &Registry,
    all: &mut Vec<Registrar>,
) -> Result<SupplierMeters, prometheus::Error> {
    let by = ["account", "model"];
    Ok(SupplierMeters {
        cost: build(
            r,
            all,
            CounterVec::new(
                Opts::new(
                    "supplier_cost_usd_total",
                    "The suppliers' bill for booked calls (answering and abandoned attempts) whose supplier cost is known, USD",
                ),
                &by,
            ),
        )?,
        unknown: build(
            r,
            all,
            IntCounterVec::new(
                Opts::new(
                    "supplier_cost_unknown_total",
                    "Booked answering and abandoned attempts whose supplier cost is unknown (a supplier price not configured)",
                ),
                &by,
            ),
        )?,
        revenue: build(
            r,
            all,
            CounterVec::new(
                Opts::new(
                    "operator_revenue_usd_total",
                    "The operator's revenue of booked calls (wholesale when a partner resells, else retail), USD",
                ),
                &by,
            ),
        )?,
        flagged: build(
            r,
            all,
            IntGauge::new(
                "supplier_reconciliation_flagged",
                "Days × accounts × models whose usage differs from the supplier's report beyond the tolerance (last round)",
            ),
        )?,
        drift_tokens: build(
            r,
            all,
            prometheus::GaugeVec::new(
                Opts::new(
                    "supplier_drift_tokens",
                    "Tokens the supplier's report counts beyond the ledger's (negative: fewer), over the last round's days",
                ),
                &by,
            ),
        )?,
        reconcile_errors: build(
            r,
            all,
            IntCounter::new(
                "supplier_reconciliation_errors_total",
                "Supplier usage reports that could not be read",
            ),
        )?,
        attempts: build(
            r,
            all,
            IntCounterVec::new(
                Opts::new(
                    "supplier_attempts_total",
                    "Supplier attempts of booked calls, by account and result (answered, refused, unreachable, abandoned)",
                ),
                &["account", "result"],
            ),
        )?,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]
    use super::*;

    #[test]
    fn the_organization_label_stops_at_its_cap() {
        let m = Meters::new(2).unwrap();
        assert_eq!(m.label_of(7), "7");
        assert_eq!(m.label_of(8), "8");
        assert_eq!(m.label_of(9), OTHER, "past the cap");
        assert_eq!(
            m.label_of(7),
            "7",
            "a labelled organization keeps its label"
        );
        let off = Meters::new(0).unwrap();
        assert!(off.organization_spend.is_none());
        assert!(!off.render().contains("organization"));
    }
}
