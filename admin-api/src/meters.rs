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
