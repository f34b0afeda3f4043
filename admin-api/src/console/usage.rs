//! Usage in the console, for an organization (`/console/orgs/{id}/usage`) and for a partner
//! (`/console/partners/{id}/usage`, its customers together): by day (up to 366 days) or by hour
//! (up to 7 days), broken down by model, key or group (and, for a partner, by customer), as a
//! stacked chart, tables and a CSV download. A partner's figures add what was charged, its
//! wholesale cost and the margin (charged − wholesale), read from the hourly buckets the settler
//! writes with the very amounts it posts to the ledger. Every member may read it. The figures come from the same hourly buckets and the same sums
//! (`services::usage`) as the billing API's daily usage, so a day here equals that day there.
//!
//! The window is chosen with whole UTC days (`from` and `to`, inclusive) so the form is two date
//! fields; defaults: the last 30 days by day, yesterday and today by hour.

use super::amount::{Amount, amount};
use super::chart::{self, Chart};
use super::gate::{self, Membership};
use super::render::{self, render};
use super::session::Viewer;
use super::usage_window::*;
use crate::error::ApiError;
use crate::http::params::Seg;
use crate::services::partner_usage;
use crate::services::usage::{self, Breakdown, Granularity, Totals};
use crate::services::usage_sums;
use crate::services::{customers, org_keys};
use crate::state::AppState;
use askama::Template;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use money::NanoUsd;
use std::collections::HashMap;

/// A line of the breakdown: an optional id (key, group) and its label.
pub(super) type Line = (Option<i64>, String);

/// The line of a key's usage: the key itself (its name and preview), or its group.
pub(super) struct KeyLines {
    pub(super) keys: HashMap<i64, entities::customer_api_keys::Model>,
    pub(super) groups: Vec<settings::Group>,
    pub(super) by_group: bool,
}

impl KeyLines {
    fn new(
        state: &AppState,
        rows: Vec<entities::customer_api_keys::Model>,
        by_group: bool,
    ) -> Self {
        KeyLines {
            keys: rows.into_iter().map(|k| (k.id, k)).collect(),
            groups: state.groups().to_vec(),
            by_group,
        }
    }

    /// A group's line label: its configured name.
    fn group_name(groups: &[settings::Group], id: i64) -> String {
        groups
            .iter()
            .find(|g| g.id == id)
            .map_or_else(|| format!("group {id}"), |g| g.name.clone())
    }

    fn line(&self, key: i64) -> Line {
        match (self.keys.get(&key), self.by_group) {
            (Some(k), false) => (Some(key), format!("{} ({})", k.name, k.preview)),
            (None, false) => (Some(key), format!("key {key}")),
            (Some(k), true) => (Some(k.group_id), Self::group_name(&self.groups, k.group_id)),
            (None, true) => (None, "unknown group".to_string()),
        }
    }
}

/// An organization's usage of the chosen window, broken down as chosen (its own buckets, read
/// and grouped here).
pub(super) async fn read(
    state: &AppState,
    org: i64,
    choice: &Choice,
) -> Result<Breakdown<Line>, ApiError> {
    let window = choice.window()?;
    let rows = usage::hourly_rows(&state.db, org, None, &window).await?;
    let of: Box<dyn Fn(&entities::usage_hourly::Model) -> Line> = match choice.by {
        By::Model => Box::new(|r| (None, r.model.clone())),
        By::Customer => Box::new(|r| (None, format!("organization {}", r.organization_id))),
        By::Key | By::Group => {
            let rows = org_keys::org_key_rows(&state.db, org).await?;
            let lines = KeyLines::new(state, rows, choice.by == By::Group);
            Box::new(move |r| lines.line(r.api_key_id))
        }
    };
    Ok(usage::breakdown(&rows, &window, of))
}

/// The rollups' dimension of a partner's breakdown.
pub(super) fn dim_of(by: By) -> usage_sums::Dim {
    match by {
        By::Customer => usage_sums::Dim::Organization,
        By::Model => usage_sums::Dim::Model,
        By::Key => usage_sums::Dim::Key,
        By::Group => usage_sums::Dim::Group,
    }
}

/// Each value's line in a partner's breakdown, `(id, label)`: the names of the values `ids`
/// (customers' organizations or keys) only, or of every one with `None`.
pub(super) type Labels = Box<dyn Fn(&str) -> Line + Send + Sync>;

pub(super) async fn labels(
    state: &AppState,
    partner: i64,
    by: By,
    ids: Option<&[i64]>,
) -> Result<Labels, ApiError> {
    Ok(match by {
        By::Model => Box::new(|v| (None, v.to_string())),
        By::Customer => {
            let names: HashMap<i64, (i64, String)> = customers::of_partner(&state.db, partner, ids)
                .await?
                .into_iter()
                .map(|c| (c.organization_id, (c.id, c.display_name)))
                .collect();
            Box::new(move |v| {
                let org: i64 = v.parse().unwrap_or(0);
                match names.get(&org) {
                    Some((id, name)) => (Some(*id), name.clone()),
                    None => (None, format!("organization {v}")),
                }
            })
        }
        By::Key => {
            let rows = org_keys::partner_key_rows(&state.db, partner, ids).await?;
            let lines = KeyLines::new(state, rows, false);
            Box::new(move |v| lines.line(v.parse().unwrap_or(0)))
        }
        By::Group => {
            let groups = state.groups().to_vec();
            Box::new(move |v| {
                let id: i64 = v.parse().unwrap_or(0);
                (Some(id), KeyLines::group_name(&groups, id))
            })
        }
    })
}

/// A partner's usage grouped by the database: the largest [`TABLE_LINES`] lines' totals (the
/// rest folded into one sum: the window's total less theirs), the periods' totals, and the
/// periods of the lines the chart draws apart (the others have none: the chart's "Other" is the
/// rest of each period). Only the listed lines' names are read.
pub(super) async fn summarized(
    state: &AppState,
    partner: i64,
    choice: &Choice,
) -> Result<Breakdown<Line>, ApiError> {
    let window = choice.window()?;
    let dim = dim_of(choice.by);
    let largest = u64::try_from(TABLE_LINES).unwrap_or(u64::MAX);
    let summary = partner_usage::partner_summary(&state.db, partner, &window, dim, largest).await?;
    let ids: Vec<i64> = summary
        .lines
        .iter()
        .filter_map(|(v, _)| v.parse().ok())
        .collect();
    let label = labels(state, partner, choice.by, Some(&ids)).await?;
    let mut lines: std::collections::BTreeMap<Line, (Vec<Totals>, Totals, Vec<String>)> =
        std::collections::BTreeMap::new();
    let mut listed = Totals::default();
    for (value, totals) in &summary.lines {
        let e = lines.entry(label(value)).or_default();
        e.1.merge(totals);
        e.2.push(value.clone());
        listed.merge(totals);
    }
    // The lines the chart draws apart: the largest by charge, in the order the page draws them.
    let mut order: Vec<(&Line, i64)> = lines.iter().map(|(l, v)| (l, v.1.charged)).collect();
    order.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(b.0)));
    let apart = if summary.values > chart::SERIES {
        chart::SERIES - 1
    } else {
        order.len()
    };
    let apart: Vec<Line> = order
        .iter()
        .take(apart)
        .map(|(l, _)| (*l).clone())
        .collect();
    let values: Vec<String> = apart
        .iter()
        .filter_map(|l| lines.get(l))
        .flat_map(|v| v.2.iter().cloned())
        .collect();
    let periods =
        partner_usage::partner_periods_of(&state.db, partner, &window, dim, &values).await?;
    let n = summary.periods.len();
    for line in &apart {
        if let Some(entry) = lines.get_mut(line) {
            let mut per = vec![Totals::default(); n];
            for value in &entry.2 {
                if let Some(p) = periods.get(value) {
                    for (a, b) in per.iter_mut().zip(p) {
                        a.merge(b);
                    }
                }
            }
            entry.0 = per;
        }
    }
    let unlisted = summary.values.saturating_sub(summary.lines.len());
    Ok(Breakdown {
        periods: summary.periods,
        per_period: summary.per_period,
        folded: (unlisted > 0).then(|| (unlisted, summary.total.without(&listed))),
        total: summary.total,
        lines: lines
            .into_iter()
            .map(|(l, (per, totals, _))| (l, (per, totals)))
            .collect(),
    })
}

/// One line of a figures table.
pub(super) struct Row {
    pub(super) label: String,
    /// Legend swatch class (`s0`…), when the line is drawn apart in the chart.
    pub(super) swatch: Option<String>,
    pub(super) requests: i64,
    pub(super) input: i64,
    pub(super) output: i64,
    pub(super) cached: i64,
    pub(super) images: i64,
    pub(super) video_seconds: i64,
    pub(super) spend: Amount,
    /// Charged, wholesale cost and margin (a partner's figures).
    pub(super) charged: Amount,
    pub(super) wholesale: Amount,
    pub(super) margin: Amount,
}

pub(super) fn row(label: String, swatch: Option<String>, t: &Totals) -> Row {
    Row {
        label,
        swatch,
        requests: t.requests,
        input: t.input_tokens,
        output: t.output_tokens,
        cached: t.cached_tokens,
        images: t.images,
        video_seconds: t.video_seconds,
        spend: amount(t.cost_usd()),
        charged: amount(NanoUsd::from_nanos(t.charged)),
        wholesale: amount(NanoUsd::from_nanos(t.wholesale)),
        margin: amount(t.margin()),
    }
}

#[derive(Template)]
#[template(path = "console/usage.html")]
pub(super) struct Page<'a> {
    pub(super) signed_in: Option<&'a str>,
    pub(super) csrf: &'a str,
    pub(super) org_id: i64,
    pub(super) partner_id: i64,
    pub(super) is_partner: bool,
    pub(super) base: String,
    pub(super) role: &'a str,
    pub(super) tab: &'a str,
    pub(super) name: &'a str,
    pub(super) raw: Raw,
    pub(super) error: Option<Refusal>,
    pub(super) by_label: &'a str,
    pub(super) period_label: &'a str,
    pub(super) csv: String,
    pub(super) total: Option<Row>,
    pub(super) lines: Vec<Row>,
    pub(super) legend: Vec<(String, String)>,
    pub(super) periods: Vec<Row>,
    pub(super) chart: Chart,
    pub(super) chart_title: String,
    /// Ready-made windows: (label, link, whether it is the one shown).
    pub(super) presets: Vec<(&'static str, String, bool)>,
    /// Monthly statements: (month, CSV link, PDF link, provisional), newest first.
    pub(super) statements: Vec<(String, String, String, bool)>,
}

/// Lines the table lists before folding the rest into one "Other" line.
pub(super) const TABLE_LINES: usize = 100;

/// A line of the breakdown with its sums and its series in the chart.
pub(super) type Ordered<'b> = Vec<(&'b Line, &'b (Vec<Totals>, Totals), usize)>;

/// The lines in chart order, largest spend first, each with its series: past
/// [`chart::SERIES`] lines, the smallest are drawn together as the last series ("Other").
pub(super) fn ordered(b: &Breakdown<Line>, value: fn(&Totals) -> NanoUsd) -> Ordered<'_> {
    let mut lines: Vec<_> = b.lines.iter().collect();
    lines.sort_by(|a, b| value(&b.1.1).cmp(&value(&a.1.1)).then_with(|| a.0.cmp(b.0)));
    let apart = if lines.len() > chart::SERIES {
        chart::SERIES - 1
    } else {
        lines.len()
    };
    lines
        .into_iter()
        .enumerate()
        .map(|(i, (line, sums))| (line, sums, i.min(apart)))
        .collect()
}

/// The chart's columns: per period, the spend of each series.
pub(super) fn columns(
    b: &Breakdown<Line>,
    lines: &Ordered<'_>,
    g: Granularity,
    value: fn(&Totals) -> NanoUsd,
) -> Vec<(String, Vec<NanoUsd>)> {
    let n_series = lines.iter().map(|l| l.2 + 1).max().unwrap_or(0);
    let mut columns: Vec<(String, Vec<NanoUsd>)> = b
        .periods
        .iter()
        .zip(&b.per_period)
        .map(|(t, sums)| {
            let label = format!(
                "{}: {} USD (exactly {}), {} requests",
                period_label(t, g),
                super::amount::readable(value(sums).nanos()),
                value(sums).to_decimal_usd(),
                sums.requests
            );
            (label, vec![NanoUsd::ZERO; n_series])
        })
        .collect();
    // The lines drawn apart; past them, "Other" is the period's total less those lines (the
    // lines folded into it need no periods of their own).
    let others = lines.len() > chart::SERIES;
    for (_, (per, _), s) in lines {
        if others && *s == chart::SERIES - 1 {
            continue;
        }
        for (col, t) in columns.iter_mut().zip(per) {
            if let Some(v) = col.1.get_mut(*s) {
                *v = v.checked_add(value(t)).unwrap_or(*v);
            }
        }
    }
    if others {
        for (col, total) in columns.iter_mut().zip(&b.per_period) {
            let apart = col.1[..chart::SERIES - 1]
                .iter()
                .fold(NanoUsd::ZERO, |a, v| a.checked_add(*v).unwrap_or(a));
            if let Some(v) = col.1.get_mut(chart::SERIES - 1) {
                *v = value(total).remaining_after(apart);
            }
        }
    }
    columns
}

/// `GET /console/orgs/{org}/usage`: members only.
pub(crate) async fn page(
    State(state): State<AppState>,
    viewer: Viewer,
    Seg(org): Seg,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    match gate::organization(&state, &viewer, &org).await {
        Ok(Membership { id, name, role }) => {
            show(&state, &viewer, Scope::Org(id), &name, &role, &q).await
        }
        Err(resp) => resp,
    }
}

/// `GET /console/partners/{partner}/usage`: every team member.
pub(crate) async fn partner_page(
    State(state): State<AppState>,
    viewer: Viewer,
    Seg(partner): Seg,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    match gate::team(&state, &viewer, &partner).await {
        Ok(Membership { id, name, role }) => {
            show(&state, &viewer, Scope::Partner(id), &name, &role, &q).await
        }
        Err(resp) => resp,
    }
}

/// What the chart and the line order measure: an organization's usage cost; a partner's
/// charges (its retail revenue).
pub(super) fn measure(scope: Scope) -> fn(&Totals) -> NanoUsd {
    match scope {
        Scope::Org(_) => Totals::cost_usd,
        Scope::Partner(_) => |t| NanoUsd::from_nanos(t.charged),
    }
}

pub(super) async fn show(
    state: &AppState,
    viewer: &Viewer,
    scope: Scope,
    name: &str,
    role: &str,
    q: &HashMap<String, String>,
) -> Response {
    let today = state.clock.now().date_naive();
    let mut page = Page {
        signed_in: Some(&viewer.user.email),
        csrf: &viewer.session.csrf,
        org_id: scope.id(),
        partner_id: scope.id(),
        is_partner: scope.is_partner(),
        base: scope.base(),
        role,
        tab: "usage",
        name,
        raw: Raw::default(),
        error: None,
        by_label: "Model",
        period_label: "Day",
        csv: String::new(),
        total: None,
        lines: Vec::new(),
        legend: Vec::new(),
        periods: Vec::new(),
        chart: Chart {
            columns: Vec::new(),
            ticks: None,
        },
        chart_title: String::new(),
        presets: presets(scope, today, None),
        statements: super::statements::months(state, scope.base(), scope.is_partner(), scope.id())
            .await,
    };
    let choice = match choose(q, today, scope) {
        Ok(c) => c,
        Err(refusal) => {
            page.raw = Raw {
                granularity: q.get("granularity").cloned().unwrap_or_default(),
                from: q.get("from").cloned().unwrap_or_default(),
                to: q.get("to").cloned().unwrap_or_default(),
                by: q.get("by").cloned().unwrap_or_default(),
            };
            page.error = Some(refusal);
            return render(StatusCode::BAD_REQUEST, &page);
        }
    };
    // A partner's book is grouped by the database (its customers' buckets are too many to read);
    // an organization's buckets are read and grouped here.
    let read = match scope {
        Scope::Partner(p) => summarized(state, p, &choice).await,
        Scope::Org(org) => read(state, org, &choice).await,
    };
    let b = match read {
        Ok(b) => b,
        Err(e) => {
            tracing::error!(error = %e, "usage not read");
            return render::unavailable();
        }
    };
    fill(&mut page, &b, &choice, scope);
    page.csv = format!("{}/usage.csv?{}", scope.base(), choice.query());
    page.raw = choice.raw();
    page.presets = presets(scope, today, Some(&choice));
    render(StatusCode::OK, &page)
}

/// The page's figures from the breakdown `b` of `choice`: legend and chart (the largest lines
/// apart, the rest as "Other"), the table of lines, the table of periods, the total and the
/// labels.
fn fill(page: &mut Page<'_>, b: &Breakdown<Line>, choice: &Choice, scope: Scope) {
    let g = choice.granularity;
    let value = measure(scope);
    let lines = ordered(b, value);
    let others = lines.len() > chart::SERIES;
    page.legend = lines
        .iter()
        .filter(|(_, _, s)| !others || *s < chart::SERIES - 1)
        .map(|(line, _, s)| (format!("s{s}"), line.1.clone()))
        .chain(others.then(|| (format!("s{}", chart::SERIES - 1), "Other".to_string())))
        .collect();
    page.chart = chart::stacked(&columns(b, &lines, g, value));
    if let (Some(first), Some(last)) = (b.periods.first(), b.periods.last()) {
        page.chart.ticks = Some((period_label(first, g), period_label(last, g)));
    }
    // The table lists the largest lines; the rest are one "Other" line (the CSV has them all).
    page.lines = lines
        .iter()
        .take(TABLE_LINES)
        .map(|(line, (_, t), s)| row(line.1.clone(), Some(format!("s{s}")), t))
        .collect();
    // The lines past the listed: folded by the database (a partner's), or here.
    let folded = b.folded.or_else(|| {
        (lines.len() > TABLE_LINES).then(|| {
            let mut rest = Totals::default();
            for (_, (_, t), _) in lines.iter().skip(TABLE_LINES) {
                rest.merge(t);
            }
            (lines.len() - TABLE_LINES, rest)
        })
    });
    if let Some((more, rest)) = folded {
        let label = format!("Other ({more} more; all in the CSV)");
        page.lines.push(row(label, None, &rest));
    }
    page.periods = b
        .periods
        .iter()
        .zip(&b.per_period)
        .rev()
        .filter(|(_, t)| t.requests != 0 || t.cost != 0)
        .map(|(p, t)| row(period_label(p, g), None, t))
        .collect();
    page.total = Some(row("Total".into(), None, &b.total));
    page.by_label = match choice.by {
        By::Model => "Model",
        By::Key => "Key",
        By::Group => "Group",
        By::Customer => "Customer",
    };
    page.period_label = match choice.granularity {
        Granularity::Day => "Day",
        Granularity::Hour => "Hour (UTC)",
    };
    page.chart_title = format!(
        "{} {} from {} to {} (UTC), by {}, oldest on the left",
        if scope.is_partner() {
            "Charged"
        } else {
            "Spend"
        },
        match choice.granularity {
            Granularity::Day => "per day",
            Granularity::Hour => "per hour",
        },
        choice.from,
        choice.to,
        choice.by.name()
    );
}

#[cfg(test)]
mod tests {
    use super::super::usage_csv::csv_text;
    use super::*;
    use chrono::{NaiveDate, TimeDelta};

    fn q(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn day(s: &str) -> NaiveDate {
        NaiveDate::parse_from_str(s, "%Y-%m-%d").unwrap()
    }

    #[test]
    fn defaults_and_limits() {
        let today = day("2026-11-26");
        let org = Scope::Org(1);
        let c = choose(&q(&[]), today, org).unwrap();
        assert_eq!((c.from, c.to, c.by), (day("2026-10-28"), today, By::Model));
        let c = choose(&q(&[("granularity", "hour"), ("by", "group")]), today, org).unwrap();
        assert_eq!((c.from, c.to, c.by), (day("2026-11-25"), today, By::Group));
        let w = c.window().unwrap();
        assert_eq!(w.end - w.start, TimeDelta::days(2));
        assert!(
            choose(
                &q(&[("from", "2025-11-26"), ("to", "2026-11-26")]),
                today,
                org
            )
            .is_ok()
        );
        assert_eq!(
            choose(&q(&[]), today, Scope::Partner(1)).unwrap().by,
            By::Customer,
            "a partner's default"
        );
        assert!(
            choose(&q(&[("by", "customer")]), today, org).is_err(),
            "not for an organization"
        );
        for (pairs, field) in [
            (vec![("granularity", "minute")], "granularity"),
            (vec![("by", "account")], "by"),
            (vec![("from", "yesterday")], "from"),
            (vec![("to", "2026-02-30")], "to"),
            (vec![("from", "2026-11-20"), ("to", "2026-11-19")], "to"),
            (vec![("from", "2025-11-25"), ("to", "2026-11-26")], "from"),
            (
                vec![("granularity", "hour"), ("from", "2026-11-19")],
                "from",
            ),
        ] {
            assert_eq!(
                choose(&q(&pairs), today, org).map_err(|r| r.field).err(),
                Some(field),
                "{pairs:?}"
            );
        }
    }

    #[test]
    fn csv_fields_cannot_become_formulas() {
        assert_eq!(csv_text("gpt-4o"), "\"gpt-4o\"");
        assert_eq!(csv_text("=HYPERLINK(\"x\")"), "\"'=HYPERLINK(\"\"x\"\")\"");
        assert_eq!(csv_text("-1"), "\"-1\"", "a plain number is no formula");
        assert_eq!(csv_text("-1+2"), "\"'-1+2\"");
        assert_eq!(csv_text("\tx"), "\"'\tx\"");
        assert_eq!(csv_text("a,b"), "\"a,b\"");
    }
}
