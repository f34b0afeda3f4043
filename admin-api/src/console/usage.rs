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

use super::chart::{self, Chart};
use super::gate::{self, Membership};
use super::render::{self, render};
use super::session::Viewer;
use crate::error::ApiError;
use crate::http::params::Seg;
use crate::services::usage::{self, Breakdown, Granularity, Totals, Window};
use crate::services::{customers, keys};
use crate::state::AppState;
use askama::Template;
use axum::body::Body;
use axum::extract::{Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, NaiveDate, SecondsFormat, TimeDelta, Utc};
use money::NanoUsd;
use std::collections::HashMap;

/// What the usage is broken down by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum By {
    Model,
    Key,
    Group,
    Customer,
}

impl By {
    fn name(self) -> &'static str {
        match self {
            By::Model => "model",
            By::Key => "key",
            By::Group => "group",
            By::Customer => "customer",
        }
    }
}

/// Whose usage a page shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scope {
    Org(i64),
    Partner(i64),
}

impl Scope {
    /// The pages' path of this scope.
    fn base(self) -> String {
        match self {
            Scope::Org(id) => format!("/console/orgs/{id}"),
            Scope::Partner(id) => format!("/console/partners/{id}"),
        }
    }

    fn is_partner(self) -> bool {
        matches!(self, Scope::Partner(_))
    }

    fn id(self) -> i64 {
        match self {
            Scope::Org(id) | Scope::Partner(id) => id,
        }
    }

    /// The breakdown shown when none is asked for.
    fn default_by(self) -> By {
        match self {
            Scope::Org(_) => By::Model,
            Scope::Partner(_) => By::Customer,
        }
    }
}

/// The page's query, checked. Each refusal names its field.
#[derive(Debug, Clone)]
struct Choice {
    granularity: Granularity,
    from: NaiveDate,
    to: NaiveDate,
    by: By,
}

/// A refused query: the field and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Refusal {
    field: &'static str,
    message: String,
}

/// The raw values of the form, echoed back when refused.
#[derive(Debug, Clone, Default)]
struct Raw {
    granularity: String,
    from: String,
    to: String,
    by: String,
}

fn parse_day(value: &str, label: &str) -> Result<NaiveDate, String> {
    NaiveDate::parse_from_str(value.trim(), "%Y-%m-%d")
        .map_err(|_| format!("{label} must be a date such as 2026-01-31."))
}

/// Checks the query at date `today` (UTC).
fn choose(q: &HashMap<String, String>, today: NaiveDate, scope: Scope) -> Result<Choice, Refusal> {
    let get = |k: &str| q.get(k).map(|v| v.trim()).filter(|v| !v.is_empty());
    let granularity = match get("granularity") {
        None | Some("day") => Granularity::Day,
        Some("hour") => Granularity::Hour,
        Some(_) => {
            return Err(Refusal {
                field: "granularity",
                message: "Choose by day or by hour.".into(),
            });
        }
    };
    let by = match get("by") {
        None => scope.default_by(),
        Some("model") => By::Model,
        Some("key") => By::Key,
        Some("group") => By::Group,
        Some("customer") if scope.is_partner() => By::Customer,
        Some(_) => {
            return Err(Refusal {
                field: "by",
                message: if scope.is_partner() {
                    "Choose customer, model, key or group.".into()
                } else {
                    "Choose model, key or group.".into()
                },
            });
        }
    };
    let to = match get("to") {
        None => today,
        Some(v) => parse_day(v, "To").map_err(|message| Refusal {
            field: "to",
            message,
        })?,
    };
    let from = match get("from") {
        None => match granularity {
            Granularity::Day => to - TimeDelta::days(29),
            Granularity::Hour => to - TimeDelta::days(1),
        },
        Some(v) => parse_day(v, "From").map_err(|message| Refusal {
            field: "from",
            message,
        })?,
    };
    let choice = Choice {
        granularity,
        from,
        to,
        by,
    };
    choice.window().map_err(|e| Refusal {
        field: if to < from { "to" } else { "from" },
        message: match e {
            ApiError::InvalidUsageWindow(_) if to < from => {
                "To must not be before From.".to_string()
            }
            _ => match granularity {
                Granularity::Day => "By day, the window may span at most 366 days.".to_string(),
                Granularity::Hour => "By hour, the window may span at most 7 days.".to_string(),
            },
        },
    })?;
    Ok(choice)
}

impl Choice {
    fn window(&self) -> Result<Window, ApiError> {
        Window::days(self.granularity, self.from, self.to)
    }

    /// The query string of this choice (for the CSV link).
    fn query(&self) -> String {
        format!(
            "granularity={}&from={}&to={}&by={}",
            granularity_name(self.granularity),
            self.from,
            self.to,
            self.by.name()
        )
    }

    fn raw(&self) -> Raw {
        Raw {
            granularity: granularity_name(self.granularity).into(),
            from: self.from.to_string(),
            to: self.to.to_string(),
            by: self.by.name().into(),
        }
    }
}

fn granularity_name(g: Granularity) -> &'static str {
    match g {
        Granularity::Day => "day",
        Granularity::Hour => "hour",
    }
}

/// A line of the breakdown: an optional id (key, group) and its label.
type Line = (Option<i64>, String);

/// The line of a key's usage: the key itself (its name and preview), or its group.
struct KeyLines {
    keys: HashMap<i64, entities::customer_api_keys::Model>,
    groups: Vec<settings::Group>,
    by_group: bool,
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
async fn read(state: &AppState, org: i64, choice: &Choice) -> Result<Breakdown<Line>, ApiError> {
    let window = choice.window()?;
    let rows = usage::hourly_rows(&state.db, org, None, &window).await?;
    let of: Box<dyn Fn(&entities::usage_hourly::Model) -> Line> = match choice.by {
        By::Model => Box::new(|r| (None, r.model.clone())),
        By::Customer => Box::new(|r| (None, format!("organization {}", r.organization_id))),
        By::Key | By::Group => {
            let rows = keys::org_key_rows(&state.db, org).await?;
            let lines = KeyLines::new(state, rows, choice.by == By::Group);
            Box::new(move |r| lines.line(r.api_key_id))
        }
    };
    Ok(usage::breakdown(&rows, &window, of))
}

/// The rollups' dimension of a partner's breakdown.
fn dim_of(by: By) -> usage::Dim {
    match by {
        By::Customer => usage::Dim::Organization,
        By::Model => usage::Dim::Model,
        By::Key => usage::Dim::Key,
        By::Group => usage::Dim::Group,
    }
}

/// Each value's line in a partner's breakdown, `(id, label)`: the names of the values `ids`
/// (customers' organizations or keys) only, or of every one with `None`.
type Labels = Box<dyn Fn(&str) -> Line + Send + Sync>;

async fn labels(
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
            let rows = keys::partner_key_rows(&state.db, partner, ids).await?;
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
async fn summarized(
    state: &AppState,
    partner: i64,
    choice: &Choice,
) -> Result<Breakdown<Line>, ApiError> {
    let window = choice.window()?;
    let dim = dim_of(choice.by);
    let largest = u64::try_from(TABLE_LINES).unwrap_or(u64::MAX);
    let summary = usage::partner_summary(&state.db, partner, &window, dim, largest).await?;
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
    let periods = usage::partner_periods_of(&state.db, partner, &window, dim, &values).await?;
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
struct Row {
    label: String,
    /// Legend swatch class (`s0`…), when the line is drawn apart in the chart.
    swatch: Option<String>,
    requests: i64,
    input: i64,
    output: i64,
    cached: i64,
    images: i64,
    video_seconds: i64,
    spend: String,
    /// Charged, wholesale cost and margin (a partner's figures).
    charged: String,
    wholesale: String,
    margin: String,
}

fn row(label: String, swatch: Option<String>, t: &Totals) -> Row {
    Row {
        label,
        swatch,
        requests: t.requests,
        input: t.input_tokens,
        output: t.output_tokens,
        cached: t.cached_tokens,
        images: t.images,
        video_seconds: t.video_seconds,
        spend: t.cost_usd().to_decimal_usd().to_string(),
        charged: NanoUsd::from_nanos(t.charged).to_decimal_usd().to_string(),
        wholesale: NanoUsd::from_nanos(t.wholesale)
            .to_decimal_usd()
            .to_string(),
        margin: t.margin().to_decimal_usd().to_string(),
    }
}

#[derive(Template)]
#[template(path = "console/usage.html")]
struct Page<'a> {
    signed_in: Option<&'a str>,
    csrf: &'a str,
    org_id: i64,
    partner_id: i64,
    is_partner: bool,
    base: String,
    role: &'a str,
    tab: &'a str,
    name: &'a str,
    raw: Raw,
    error: Option<Refusal>,
    by_label: &'a str,
    period_label: &'a str,
    csv: String,
    total: Option<Row>,
    lines: Vec<Row>,
    legend: Vec<(String, String)>,
    periods: Vec<Row>,
    chart: Chart,
    chart_title: String,
    /// Ready-made windows: (label, link, whether it is the one shown).
    presets: Vec<(&'static str, String, bool)>,
    /// Monthly statements: (month, CSV link, PDF link, provisional), newest first.
    statements: Vec<(String, String, String, bool)>,
}

/// The ready-made windows offered above the form (with the current breakdown).
fn presets(
    scope: Scope,
    today: NaiveDate,
    shown: Option<&Choice>,
) -> Vec<(&'static str, String, bool)> {
    let by = shown.map_or(scope.default_by(), |c| c.by);
    [
        ("Today, by hour", Granularity::Hour, 0),
        ("Last 7 days, by hour", Granularity::Hour, 6),
        ("Last 30 days", Granularity::Day, 29),
        ("Last 12 months", Granularity::Day, 365),
    ]
    .into_iter()
    .map(|(label, granularity, back)| {
        let c = Choice {
            granularity,
            from: today - TimeDelta::days(back),
            to: today,
            by,
        };
        let current = shown
            .is_some_and(|s| s.granularity == c.granularity && s.from == c.from && s.to == c.to);
        (
            label,
            format!("{}/usage?{}", scope.base(), c.query()),
            current,
        )
    })
    .collect()
}

/// Lines the table lists before folding the rest into one "Other" line.
const TABLE_LINES: usize = 100;

/// A line of the breakdown with its sums and its series in the chart.
type Ordered<'b> = Vec<(&'b Line, &'b (Vec<Totals>, Totals), usize)>;

/// The lines in chart order, largest spend first, each with its series: past
/// [`chart::SERIES`] lines, the smallest are drawn together as the last series ("Other").
fn ordered(b: &Breakdown<Line>, value: fn(&Totals) -> NanoUsd) -> Ordered<'_> {
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
fn columns(
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
                "{}: {} USD, {} requests",
                period_label(t, g),
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

/// A period's name: the day, or the day and hour.
fn period_label(t: &chrono::DateTime<chrono::Utc>, g: Granularity) -> String {
    match g {
        Granularity::Day => t.format("%Y-%m-%d").to_string(),
        Granularity::Hour => t.format("%Y-%m-%d %H:00").to_string(),
    }
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
fn measure(scope: Scope) -> fn(&Totals) -> NanoUsd {
    match scope {
        Scope::Org(_) => Totals::cost_usd,
        Scope::Partner(_) => |t| NanoUsd::from_nanos(t.charged),
    }
}

async fn show(
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
    let g = choice.granularity;
    let value = measure(scope);
    let lines = ordered(&b, value);
    let others = lines.len() > chart::SERIES;
    page.legend = lines
        .iter()
        .filter(|(_, _, s)| !others || *s < chart::SERIES - 1)
        .map(|(line, _, s)| (format!("s{s}"), line.1.clone()))
        .chain(others.then(|| (format!("s{}", chart::SERIES - 1), "Other".to_string())))
        .collect();
    page.chart = chart::stacked(&columns(&b, &lines, g, value));
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
    page.csv = format!("{}/usage.csv?{}", scope.base(), choice.query());
    page.raw = choice.raw();
    page.presets = presets(scope, today, Some(&choice));
    render(StatusCode::OK, &page)
}

/// A CSV text field, always quoted (`text::csv_cell`'s rule: a formula defused).
fn csv_text(s: &str) -> String {
    let cell = crate::text::csv_cell(s);
    if cell.starts_with('"') {
        cell
    } else {
        format!("\"{cell}\"")
    }
}

/// The CSV's header line; a partner's adds what was charged, the wholesale cost and the margin.
fn csv_head(by: By, partner: bool) -> String {
    let head = match by {
        By::Model => "model",
        By::Key => "api_key_id,api_key",
        By::Group => "group_id,group",
        By::Customer => "customer_id,customer",
    };
    let money = if partner {
        ",charged_usd,wholesale_usd,margin_usd"
    } else {
        ""
    };
    format!(
        "period_start,period_end,{head},requests,input_tokens,output_tokens,cached_tokens,cache_write_tokens,images,video_seconds,cost_usd{money}\r\n"
    )
}

/// Appends the CSV row of line `line` in the period starting at `start` of window `w`, unless
/// the line had no usage in it.
fn csv_row(
    out: &mut String,
    (start, w): (DateTime<Utc>, &Window),
    by: By,
    line: &Line,
    t: &Totals,
    partner: bool,
) {
    use std::fmt::Write;
    if t.requests == 0 && t.cost == 0 && t.charged == 0 {
        return;
    }
    let ts = |t: DateTime<Utc>| t.to_rfc3339_opts(SecondsFormat::Secs, true);
    let (id, label) = line;
    let who = match by {
        By::Model => csv_text(label),
        By::Key | By::Group | By::Customer => format!(
            "{},{}",
            id.map(|v| v.to_string()).unwrap_or_default(),
            csv_text(label)
        ),
    };
    let money = if partner {
        format!(
            ",{},{},{}",
            NanoUsd::from_nanos(t.charged).to_decimal_usd(),
            NanoUsd::from_nanos(t.wholesale).to_decimal_usd(),
            t.margin().to_decimal_usd()
        )
    } else {
        String::new()
    };
    let _ = write!(
        out,
        "{},{},{who},{},{},{},{},{},{},{},{}{money}\r\n",
        ts(start),
        ts((start + w.step()).min(w.end)),
        t.requests,
        t.input_tokens,
        t.output_tokens,
        t.cached_tokens,
        t.cache_write_tokens,
        t.images,
        t.video_seconds,
        t.cost_usd().to_decimal_usd()
    );
}

/// An organization's CSV: one row per period and line with any usage, oldest first.
fn csv(b: &Breakdown<Line>, w: &Window, by: By) -> String {
    let mut out = csv_head(by, false);
    for (i, start) in b.periods.iter().enumerate() {
        for (line, (per, _)) in &b.lines {
            if let Some(t) = per.get(i) {
                csv_row(&mut out, (*start, w), by, line, t, false);
            }
        }
    }
    out
}

/// Bytes a partner's CSV sends at a time.
const CSV_CHUNK: usize = 4 * 1024;

/// A partner's CSV, streamed: the lines' names are read first, then the cells come from the
/// rollups in period order and are written as they come, a chunk at a time, so that a partner
/// with ten thousand customers is never one string in memory. The reading is driven by the
/// answer's body (no task of its own: a client that goes away stops it). A failure before the
/// first cell is an error (the page's 503); one after it cuts the download (never a silently
/// short file).
async fn partner_csv(state: &AppState, partner: i64, choice: &Choice) -> Result<Body, ApiError> {
    use futures_util::StreamExt;
    type Chunk = Result<bytes::Bytes, std::io::Error>;
    let window = choice.window()?;
    let by = choice.by;
    let label = labels(state, partner, by, None).await?;
    let (tx, rx) = tokio::sync::mpsc::channel::<Chunk>(4);
    let db = state.db.clone();
    let cut = move |e: ApiError| {
        tracing::error!(error = %e, partner, "usage CSV not read");
        std::io::Error::other("usage not read")
    };
    // Sends the header and the first row at once (the answer waits for them), then a chunk at a
    // time.
    let producer = async move {
        let cells = match usage::partner_cells(&db, partner, &window, dim_of(by)).await {
            Ok(cells) => cells,
            Err(e) => {
                let _ = tx.send(Err(cut(e))).await;
                return;
            }
        };
        let mut cells = std::pin::pin!(cells);
        let mut out = csv_head(by, true);
        let mut first = true;
        loop {
            let cell = cells.next().await;
            match cell {
                Some(Ok(c)) => {
                    csv_row(
                        &mut out,
                        (c.period, &window),
                        by,
                        &label(&c.value),
                        &c.totals,
                        true,
                    );
                }
                Some(Err(e)) => {
                    let _ = tx.send(Err(cut(e))).await;
                    return;
                }
                None => break,
            }
            if (first || out.len() >= CSV_CHUNK)
                && tx.send(Ok(std::mem::take(&mut out).into())).await.is_err()
            {
                return;
            }
            first = false;
        }
        if !out.is_empty() {
            let _ = tx.send(Ok(out.into())).await;
        }
    };
    let driven = futures_util::stream::once(producer).filter_map(|()| async { None::<Chunk> });
    let received = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|chunk| (chunk, rx))
    });
    let mut chunks = Box::pin(futures_util::stream::select(driven, received));
    match chunks.next().await {
        Some(Ok(first)) => Ok(Body::from_stream(
            futures_util::stream::once(async { Ok::<_, std::io::Error>(first) }).chain(chunks),
        )),
        Some(Err(_)) | None => Err(ApiError::Internal),
    }
}

/// `GET /console/orgs/{org}/usage.csv`: the page's figures as CSV (members only; a refused
/// query is a 400 page, as on the page).
pub(crate) async fn download(
    State(state): State<AppState>,
    viewer: Viewer,
    Seg(org): Seg,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    match gate::organization(&state, &viewer, &org).await {
        Ok(Membership { id, .. }) => csv_answer(&state, Scope::Org(id), &q).await,
        Err(resp) => resp,
    }
}

/// `GET /console/partners/{partner}/usage.csv`: as [`download`], for a partner.
pub(crate) async fn partner_download(
    State(state): State<AppState>,
    viewer: Viewer,
    Seg(partner): Seg,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    match gate::team(&state, &viewer, &partner).await {
        Ok(Membership { id, .. }) => csv_answer(&state, Scope::Partner(id), &q).await,
        Err(resp) => resp,
    }
}

async fn csv_answer(state: &AppState, scope: Scope, q: &HashMap<String, String>) -> Response {
    let today = state.clock.now().date_naive();
    let choice = match choose(q, today, scope) {
        Ok(c) => c,
        Err(refusal) => {
            return render::message(StatusCode::BAD_REQUEST, "Cannot download", &refusal.message);
        }
    };
    let body = match scope {
        Scope::Partner(p) => partner_csv(state, p, &choice).await,
        Scope::Org(org) => match (read(state, org, &choice).await, choice.window()) {
            (Ok(b), Ok(w)) => Ok(Body::from(csv(&b, &w, choice.by))),
            (Err(e), _) | (_, Err(e)) => Err(e),
        },
    };
    let body = match body {
        Ok(body) => body,
        Err(e) => {
            tracing::error!(error = %e, "usage CSV not read");
            return render::unavailable();
        }
    };
    let name = format!(
        "usage-{}-{}-{}-{}-by-{}-{}.csv",
        if scope.is_partner() { "partner" } else { "org" },
        scope.id(),
        choice.from,
        choice.to,
        granularity_name(choice.granularity),
        choice.by.name()
    );
    (
        [
            (header::CONTENT_TYPE, "text/csv; charset=utf-8".to_string()),
            (
                header::CONTENT_DISPOSITION,
                format!("attachment; filename=\"{name}\""),
            ),
        ],
        body,
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

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
