//! Prometheus metrics of the gateway, in one registry per process, served as text at
//! `[metrics] listen` `/metrics`.
//!
//! Every label is bounded: routes come from a fixed table, models are configured ids (or
//! `unknown`), statuses are numbers, reasons are error labels.

use prometheus::{
    Encoder, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGaugeVec, Opts, Registry,
    TextEncoder,
};

/// Latency buckets in seconds: from 1 ms to 5 minutes (long generations).
const BUCKETS: [f64; 16] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 120.0,
    300.0,
];

/// A finished request as its metrics see it: bounded labels only.
pub(crate) struct Outcome<'a> {
    /// The route's label (`None`: never classified, so never counted in flight).
    pub route: Option<&'static str>,
    /// The model served (`-` when none was chosen).
    pub model: &'a str,
    /// What the client received (0: nothing was sent).
    pub status: u16,
    /// The bounded label of the error the gateway answered with, if it answered itself.
    pub refusal: Option<&'static str>,
    pub ttfb: Option<std::time::Duration>,
    /// The gateway's own time before the answer's header (`Server-Timing`'s `gateway`).
    pub gateway_time: Option<std::time::Duration>,
}

/// The gateway's collectors.
pub struct Metrics {
    registry: Registry,
    /// Requests finished, by route, model and status.
    pub requests: IntCounterVec,
    /// Requests the gateway answered itself, by reason.
    pub refused: IntCounterVec,
    /// From the first upstream attempt to the supplier's response header.
    pub upstream_latency: HistogramVec,
    /// From arrival to the first response body byte sent to the client.
    pub ttfb: HistogramVec,
    /// The gateway's own time before an answer's header (arrival to header, less the supplier's
    /// wait): what the gateway adds (`Server-Timing`'s `gateway`).
    pub gateway_time: HistogramVec,
    /// Tokens metered, by model and kind (input, output, cached, cache_write) and measurement.
    pub tokens: IntCounterVec,
    /// Requests in progress, by route.
    pub in_flight: IntGaugeVec,
    /// Usage events that could not be appended to the usage stream.
    pub usage_events_lost: IntCounter,
    /// Settlements whose hold was already gone (reconciled or lost) or that failed.
    pub settlements_unresolved: IntCounter,
    /// Settlements that found the wallet mirror below its open holds (charged nothing; the
    /// mirror is reported unreconciled until reloaded from the ledger).
    pub wallets_below_holds: IntCounter,
    /// Accounts configured for each model, and those of them cooling down now (read from the
    /// store at each scrape).
    pub model_accounts: IntGaugeVec,
    pub model_accounts_cooling: IntGaugeVec,
    /// Calls that reached a supplier account, by account and the status class of the answer
    /// (`2xx`, `4xx`, `5xx`, `other`).
    pub account_calls: IntCounterVec,
    /// 1 when the operational store answered the scrape's read, else 0.
    pub store_up: prometheus::IntGauge,
    /// Calls' ends the store did not take, waiting in this proxy to be stored again.
    pub call_ends_waiting: prometheus::IntGauge,
    /// Calls' ends stored again because the server keeping their money changed (a failover or a
    /// restart that may have lost its last writes), or because the store did not take them.
    pub call_ends_redone: IntCounterVec,
    /// Requests moved to another account, by reason.
    pub failovers: IntCounterVec,
    /// Accounts put into cooldown, by reason.
    pub cooldowns: IntCounterVec,
    /// Calls served by a cheaper model under pressure, by requested and served model.
    pub downgrades: IntCounterVec,
    /// Time spent waiting for capacity (zero when a slot was free).
    pub queue_wait: prometheus::Histogram,
    /// Requests waiting for capacity in this proxy.
    pub queue_depth: prometheus::IntGauge,
    /// Calls kept out by a capacity layer (`global`, `pool`, `key_concurrency`, `key_rate`) at
    /// their first attempt, and calls refused after waiting (`queue_full`).
    pub limits_hit: IntCounterVec,
    /// Each account's estimated capacity in this proxy (its `max_concurrency` when healthy).
    pub account_capacity: IntGaugeVec,
    /// Configuration reloads, by result (`ok`, `failed`: the file was refused, nothing changed).
    pub reloads: IntCounterVec,
}

fn build<T: prometheus::core::Collector + Clone + 'static>(
    registry: &Registry,
    collector: Result<T, prometheus::Error>,
) -> Result<T, prometheus::Error> {
    let c = collector?;
    registry.register(Box::new(c.clone()))?;
    Ok(c)
}

impl Metrics {
    pub fn new() -> Result<Metrics, prometheus::Error> {
        let r = Registry::new_custom(Some("tollgate".into()), None)?;
        let hist = |name: &str, help: &str| {
            HistogramVec::new(
                HistogramOpts::new(name, help).buckets(BUCKETS.to_vec()),
                &["route"],
            )
        };
        Ok(Metrics {
            requests: build(
                &r,
                IntCounterVec::new(
                    Opts::new("requests_total", "Gateway requests finished"),
                    &["route", "model", "status"],
                ),
            )?,
            refused: build(
                &r,
                IntCounterVec::new(
                    Opts::new(
                        "refused_total",
                        "Requests the gateway answered itself, by reason",
                    ),
                    &["reason"],
                ),
            )?,
            upstream_latency: build(
                &r,
                hist(
                    "upstream_latency_seconds",
                    "Time from the first upstream attempt to the supplier's response header",
                ),
            )?,
            gateway_time: build(
                &r,
                hist(
                    "gateway_time_seconds",
                    "The gateway's own time before an answer's header (arrival to header, less the supplier's wait)",
                ),
            )?,
            ttfb: build(
                &r,
                hist(
                    "time_to_first_byte_seconds",
                    "Time from arrival to the first response body byte sent to the client",
                ),
            )?,
            tokens: build(
                &r,
                IntCounterVec::new(
                    Opts::new("tokens_total", "Tokens metered"),
                    &["model", "kind", "measurement"],
                ),
            )?,
            in_flight: build(
                &r,
                IntGaugeVec::new(Opts::new("in_flight", "Requests in progress"), &["route"]),
            )?,
            usage_events_lost: build(
                &r,
                IntCounter::new(
                    "usage_events_lost_total",
                    "Usage events that could not be appended to the usage stream",
                ),
            )?,
            settlements_unresolved: build(
                &r,
                IntCounter::new(
                    "settlements_unresolved_total",
                    "Settlements whose hold was already resolved, lost, or that failed",
                ),
            )?,
            wallets_below_holds: build(
                &r,
                IntCounter::new(
                    "wallets_below_holds_total",
                    "Settlements that found the wallet mirror below its open holds (charged nothing)",
                ),
            )?,
            model_accounts: build(
                &r,
                IntGaugeVec::new(
                    Opts::new("model_accounts", "Accounts configured for a model"),
                    &["model"],
                ),
            )?,
            model_accounts_cooling: build(
                &r,
                IntGaugeVec::new(
                    Opts::new(
                        "model_accounts_cooling",
                        "Accounts of a model cooling down now",
                    ),
                    &["model"],
                ),
            )?,
            account_calls: build(
                &r,
                IntCounterVec::new(
                    Opts::new(
                        "account_calls_total",
                        "Calls that reached a supplier account, by account and status class",
                    ),
                    &["account", "status_class"],
                ),
            )?,
            store_up: build(
                &r,
                prometheus::IntGauge::new(
                    "store_up",
                    "1 when the operational store answered the last scrape's read",
                ),
            )?,
            call_ends_waiting: build(
                &r,
                prometheus::IntGauge::new(
                    "call_ends_waiting",
                    "Calls' ends the store did not take, waiting in this proxy to be stored",
                ),
            )?,
            call_ends_redone: build(
                &r,
                IntCounterVec::new(
                    Opts::new(
                        "call_ends_redone_total",
                        "Calls' ends stored again, by reason (unstored, failover)",
                    ),
                    &["reason"],
                ),
            )?,
            failovers: build(
                &r,
                IntCounterVec::new(
                    Opts::new("failovers_total", "Requests moved to another account"),
                    &["reason"],
                ),
            )?,
            cooldowns: build(
                &r,
                IntCounterVec::new(
                    Opts::new("cooldowns_total", "Accounts put into cooldown"),
                    &["reason"],
                ),
            )?,
            downgrades: build(
                &r,
                IntCounterVec::new(
                    Opts::new("downgrades_total", "Calls downgraded under pressure"),
                    &["from", "to"],
                ),
            )?,
            queue_wait: build(
                &r,
                prometheus::Histogram::with_opts(
                    HistogramOpts::new("queue_wait_seconds", "Time spent waiting for capacity")
                        .buckets(BUCKETS.to_vec()),
                ),
            )?,
            queue_depth: build(
                &r,
                prometheus::IntGauge::new("queue_depth", "Requests waiting for capacity"),
            )?,
            limits_hit: build(
                &r,
                IntCounterVec::new(
                    Opts::new(
                        "limits_hit_total",
                        "Calls kept out by a capacity layer, and calls refused after waiting",
                    ),
                    &["layer"],
                ),
            )?,
            account_capacity: build(
                &r,
                IntGaugeVec::new(
                    Opts::new(
                        "account_capacity",
                        "Estimated capacity of each account (max_concurrency when healthy)",
                    ),
                    &["account"],
                ),
            )?,
            reloads: build(
                &r,
                IntCounterVec::new(
                    Opts::new("config_reloads_total", "Configuration reloads, by result"),
                    &["result"],
                ),
            )?,
            registry: r,
        })
        .inspect(|m| {
            // Fixed label sets exist from the start: an alert or a rate over a series that
            // appears later cannot tell "none yet" from "not exported".
            for result in ["ok", "failed"] {
                m.reloads.with_label_values(&[result]);
            }
            for reason in ["unstored", "failover"] {
                m.call_ends_redone.with_label_values(&[reason]);
            }
            for reason in ["rate_limited", "server_error", "unreachable"] {
                m.failovers.with_label_values(&[reason]);
                m.cooldowns.with_label_values(&[reason]);
            }
            m.failovers.with_label_values(&["abandoned"]);
            for layer in ["global", "pool", "key_concurrency", "key_rate", "queue_full"] {
                m.limits_hit.with_label_values(&[layer]);
            }
        })
    }

    /// Counts a call that reached supplier account `account` and was answered `status`.
    pub(crate) fn account_call(&self, account: &str, status: u16) {
        let class = match status {
            200..=299 => "2xx",
            400..=499 => "4xx",
            500..=599 => "5xx",
            _ => "other",
        };
        self.account_calls
            .with_label_values(&[account, class])
            .inc();
    }

    /// Counts a classified request in flight (until [`Metrics::finished`]).
    pub(crate) fn started(&self, route: &'static str) {
        self.in_flight.with_label_values(&[route]).inc();
    }

    /// Records the time from the first upstream attempt to the supplier's response header.
    pub(crate) fn upstream_answered(&self, route: &'static str, latency: std::time::Duration) {
        self.upstream_latency
            .with_label_values(&[route])
            .observe(latency.as_secs_f64());
    }

    /// Records a finished request: counted by route, model and status; its refusal reason and time
    /// to first byte if any; no longer in flight (when it was classified).
    pub(crate) fn finished(&self, f: &Outcome<'_>) {
        let label = f.route.unwrap_or("unknown");
        if f.route.is_some() {
            self.in_flight.with_label_values(&[label]).dec();
        }
        self.requests
            .with_label_values(&[label, f.model, f.status.to_string().as_str()])
            .inc();
        if let Some(reason) = f.refusal {
            self.refused.with_label_values(&[reason]).inc();
        }
        if let Some(ttfb) = f.ttfb {
            self.ttfb
                .with_label_values(&[label])
                .observe(ttfb.as_secs_f64());
        }
        if let Some(own) = f.gateway_time {
            self.gateway_time
                .with_label_values(&[label])
                .observe(own.as_secs_f64());
        }
    }

    /// Counts the tokens of a settled call by model, kind and measurement.
    pub(crate) fn record_tokens(&self, e: &opstate::UsageEvent) {
        let measurement = match e.measurement {
            opstate::Measurement::Exact => "exact",
            opstate::Measurement::Estimated => "estimated",
        };
        for (kind, n) in [
            ("input", e.input_tokens),
            ("output", e.output_tokens),
            ("cached", e.cached_tokens),
            ("cache_write", e.cache_write_tokens),
        ] {
            self.tokens
                .with_label_values(&[e.model_served.as_str(), kind, measurement])
                .inc_by(n);
        }
    }

    /// The registry every collector is in (an embedded admin-api adds its own there).
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// The Prometheus text exposition of every collector.
    pub fn render(&self) -> String {
        let mut out = Vec::new();
        if TextEncoder::new()
            .encode(&self.registry.gather(), &mut out)
            .is_err()
        {
            return String::new();
        }
        String::from_utf8(out).unwrap_or_default()
    }
}
