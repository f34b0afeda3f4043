//! The Requests pages (issue 45): an organization's settled calls, newest first
//! (`/console/orgs/{org}/requests`, every member), and the same for one customer of a partner
//! (`/console/partners/{partner}/customers/{customer}/requests`, every team member; another
//! partner's customer is a 404). Filters: key, served model, outcome and UTC day; pages by
//! keyset (`before`, the last row's start and id), 10, 50 or 100 rows. A bad filter is a 400
//! naming its field and showing nothing else. Each row is what the ledger holds of the call
//! (`services::request_log`): no prompt, no answer, no secret. Amounts are rounded for reading
//! with the exact figure on hover (`amount`).

use super::amount::{Amount, amount};
use super::gate::{self, Membership};
use super::render::{self, render};
use super::session::Viewer;
use super::usage_window::Refusal;
use crate::http::params::{Seg, Segs};
use crate::services::customers::{self, CustomerError};
use crate::services::org_keys;
use crate::services::request_log::{self, Cursor, DEFAULT_PAGE_SIZE, Filter, Outcome, PAGE_SIZES};
use crate::state::AppState;
use askama::Template;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use chrono::NaiveDate;
use money::NanoUsd;
use std::collections::HashMap;

/// One call as a row.
pub(super) struct Row {
    pub(super) when: String,
    pub(super) request_id: String,
    pub(super) key: String,
    pub(super) model: String,
    /// The model asked for, when another one served.
    pub(super) asked: Option<String>,
    pub(super) route: String,
    pub(super) status: i32,
    pub(super) failed: bool,
    pub(super) stream: bool,
    pub(super) measurement: String,
    pub(super) input: i64,
    pub(super) output: i64,
    pub(super) cached: i64,
    /// Images or video seconds, where they apply.
    pub(super) media: Option<String>,
    pub(super) latency: String,
    pub(super) cost: Amount,
    pub(super) wholesale: Amount,
    /// A batch line's call (issue 46): its batch and line.
    pub(super) batch: Option<(String, i32)>,
}

/// The filters as asked (the form shows them back).
#[derive(Default)]
pub(super) struct Raw {
    pub(super) key: String,
    pub(super) model: String,
    pub(super) status: String,
    pub(super) day: String,
    pub(super) size: String,
}

#[derive(Template)]
#[template(path = "console/requests.html")]
pub(super) struct Page<'a> {
    pub(super) signed_in: Option<&'a str>,
    pub(super) csrf: &'a str,
    pub(super) org_id: i64,
    pub(super) partner_id: i64,
    pub(super) is_partner: bool,
    pub(super) role: &'a str,
    pub(super) tab: &'a str,
    pub(super) name: &'a str,
    /// A partner's customer: its name and page.
    pub(super) customer: Option<(String, String)>,
    /// This page's path (without the query).
    pub(super) path: String,
    pub(super) raw: Raw,
    pub(super) error: Option<Refusal>,
    /// The key choices: (id, label).
    pub(super) keys: Vec<(String, String)>,
    pub(super) models: Vec<String>,
    pub(super) sizes: Vec<String>,
    pub(super) rows: Vec<Row>,
    /// The newest page's link, when this is not it; the next (older) page's.
    pub(super) newest: Option<String>,
    pub(super) older: Option<String>,
    /// "Calls of … on …" for the table's caption.
    pub(super) caption: String,
}

/// Whose calls: an organization's own console, or a partner's customer.
#[derive(Clone, Copy)]
enum Whose {
    Org,
    Customer { partner: i64, customer: i64 },
}

/// `GET /console/orgs/{org}/requests`: every member.
pub(crate) async fn org_page(
    State(state): State<AppState>,
    viewer: Viewer,
    Seg(org): Seg,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    match gate::organization(&state, &viewer, &org).await {
        Ok(m) => show(&state, &viewer, &m, m.id, Whose::Org, &q).await,
        Err(resp) => resp,
    }
}

/// `GET /console/partners/{partner}/customers/{customer}/requests`: every team member.
pub(crate) async fn customer_page(
    State(state): State<AppState>,
    viewer: Viewer,
    Segs(partner, customer): Segs,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let t = match gate::team(&state, &viewer, &partner).await {
        Ok(t) => t,
        Err(resp) => return resp,
    };
    let caller = match gate::console_caller(&state, &t).await {
        Ok(c) => c,
        Err(resp) => return resp,
    };
    let c = match customers::find(&state.db, &caller, &customer).await {
        Ok(c) => c,
        Err(CustomerError::NotFound) => return render::not_found(&viewer),
        Err(_) => return render::unavailable(),
    };
    let whose = Whose::Customer {
        partner: t.id,
        customer: c.id,
    };
    show(&state, &viewer, &t, c.organization_id, whose, &q).await
}

/// The filters of the query `q`, or the refusal naming the first bad one. `keys`: the
/// organization's key ids.
fn choose(
    q: &HashMap<String, String>,
    keys: &[i64],
) -> Result<(Filter, Option<Cursor>, u64), Refusal> {
    let get = |name: &str| q.get(name).map(|v| v.trim()).filter(|v| !v.is_empty());
    let refuse = |field: &'static str, message: &str| Refusal {
        field,
        message: message.to_string(),
    };
    let key = match get("key") {
        None => None,
        Some(v) => Some(
            v.parse::<i64>()
                .ok()
                .filter(|k| keys.contains(k))
                .ok_or_else(|| refuse("key", "There is no such key in this organization."))?,
        ),
    };
    let model = match get("model") {
        Some(m) if m.len() > 200 || m.chars().any(char::is_control) => {
            return Err(refuse("model", "That is not a model name."));
        }
        m => m.map(str::to_string),
    };
    let outcome = Outcome::parse(get("status").unwrap_or("")).ok_or_else(|| {
        refuse(
            "status",
            "Choose any outcome, succeeded calls or failed calls.",
        )
    })?;
    let day = match get("day") {
        None => None,
        Some(v) => Some(
            NaiveDate::parse_from_str(v, "%Y-%m-%d")
                .map_err(|_| refuse("day", "Give the day as a date (YYYY-MM-DD, UTC)."))?,
        ),
    };
    let size = match get("size") {
        None => DEFAULT_PAGE_SIZE,
        Some(v) => v
            .parse::<u64>()
            .ok()
            .filter(|n| PAGE_SIZES.contains(n))
            .ok_or_else(|| refuse("size", "Show 10, 50 or 100 calls per page."))?,
    };
    let before = match get("before") {
        None => None,
        Some(v) => Some(Cursor::decode(v).ok_or_else(|| {
            refuse(
                "before",
                "That page link is not valid; start again from the newest calls.",
            )
        })?),
    };
    Ok((
        Filter {
            key,
            model,
            outcome,
            day,
        },
        before,
        size,
    ))
}

/// The query string of `filter` with `size` (and the page's start), empty values left out.
fn query(filter: &Filter, size: u64, before: Option<Cursor>) -> String {
    let mut pairs: Vec<(&str, String)> = Vec::new();
    if let Some(k) = filter.key {
        pairs.push(("key", k.to_string()));
    }
    if let Some(m) = &filter.model {
        pairs.push(("model", m.clone()));
    }
    if filter.outcome != Outcome::Any {
        pairs.push(("status", filter.outcome.as_str().to_string()));
    }
    if let Some(d) = filter.day {
        pairs.push(("day", d.to_string()));
    }
    if size != DEFAULT_PAGE_SIZE {
        pairs.push(("size", size.to_string()));
    }
    if let Some(c) = before {
        pairs.push(("before", c.encode()));
    }
    let mut out = String::new();
    for (k, v) in pairs {
        out.push(if out.is_empty() { '?' } else { '&' });
        out.push_str(k);
        out.push('=');
        out.push_str(&url_escape(&v));
    }
    out
}

/// A query value, percent-encoded (every byte but unreserved ones).
fn url_escape(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for b in v.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn row(r: &entities::usage_records::Model, keys: &HashMap<i64, String>) -> Row {
    let media = match (r.images, r.video_seconds, r.audio_seconds) {
        (n, _, _) if n > 0 => Some(format!("{n} image{}", if n == 1 { "" } else { "s" })),
        (_, s, _) if s > 0 => Some(format!("{s} s of video")),
        (_, _, s) if s > 0 => Some(format!("{s} s of audio")),
        _ => None,
    };
    Row {
        when: r.started_at.format("%Y-%m-%d %H:%M:%S%.3f").to_string(),
        request_id: r.request_id.clone(),
        key: keys
            .get(&r.api_key_id)
            .cloned()
            .unwrap_or_else(|| format!("key {}", r.api_key_id)),
        model: r.model_served.clone(),
        asked: (r.model_requested != r.model_served).then(|| r.model_requested.clone()),
        route: r.route.replace('_', " "),
        status: r.status,
        failed: r.status >= 400,
        stream: r.stream,
        measurement: r.measurement.clone(),
        input: r.input_tokens,
        output: r.output_tokens,
        cached: r.cached_tokens,
        media,
        latency: r
            .latency_ms
            .map_or_else(|| "—".to_string(), |ms| format!("{ms} ms")),
        cost: amount(NanoUsd::from_nanos(r.charged_nanos)),
        wholesale: amount(NanoUsd::from_nanos(r.wholesale_nanos)),
        batch: r.batch_id.clone().zip(r.batch_line),
    }
}

/// The page's partner (0 for an organization's own), path and, for a partner's customer, its
/// name and page.
async fn place(
    state: &AppState,
    org: i64,
    whose: Whose,
) -> (i64, String, Option<(String, String)>) {
    match whose {
        Whose::Org => (0, format!("/console/orgs/{org}/requests"), None),
        Whose::Customer { partner, customer } => {
            let page = format!("/console/partners/{partner}/customers/{customer}");
            let name = customers::organization(&state.db, org)
                .await
                .ok()
                .flatten()
                .map_or_else(|| format!("customer {customer}"), |o| o.name);
            (partner, format!("{page}/requests"), Some((name, page)))
        }
    }
}

/// "Latest calls, newest first, on 2026-03-04 (UTC)".
fn caption(filter: &Filter, older: bool) -> String {
    format!(
        "{}, newest first{}",
        if older { "Older calls" } else { "Latest calls" },
        filter
            .day
            .map(|d| format!(", on {d} (UTC)"))
            .unwrap_or_default()
    )
}

async fn show(
    state: &AppState,
    viewer: &Viewer,
    m: &Membership,
    org: i64,
    whose: Whose,
    q: &HashMap<String, String>,
) -> Response {
    let keys = org_keys::org_key_rows(&state.db, org).await;
    let models = request_log::models(&state.db, org).await;
    let (Ok(keys), Ok(models)) = (keys, models) else {
        tracing::error!("request log: keys or models not read");
        return render::unavailable();
    };
    let (partner_id, path, customer) = place(state, org, whose).await;
    let is_partner = customer.is_some();
    let mut page = Page {
        signed_in: Some(&viewer.user.email),
        csrf: &viewer.session.csrf,
        org_id: org,
        partner_id,
        is_partner,
        role: &m.role,
        tab: if is_partner { "customers" } else { "requests" },
        name: &m.name,
        customer,
        path,
        raw: Raw {
            key: q.get("key").cloned().unwrap_or_default(),
            model: q.get("model").cloned().unwrap_or_default(),
            status: q.get("status").cloned().unwrap_or_default(),
            day: q.get("day").cloned().unwrap_or_default(),
            size: q.get("size").cloned().unwrap_or_default(),
        },
        error: None,
        keys: keys
            .iter()
            .map(|k| (k.id.to_string(), format!("{} ({})", k.name, k.preview)))
            .collect(),
        models,
        sizes: PAGE_SIZES.iter().map(u64::to_string).collect(),
        rows: Vec::new(),
        newest: None,
        older: None,
        caption: String::new(),
    };
    let ids: Vec<i64> = keys.iter().map(|k| k.id).collect();
    let (filter, before, size) = match choose(q, &ids) {
        Ok(c) => c,
        Err(refusal) => {
            page.error = Some(refusal);
            return render(StatusCode::BAD_REQUEST, &page);
        }
    };
    let read = request_log::page(&state.db, org, &filter, before, size).await;
    let log = match read {
        Ok(l) => l,
        Err(e) => {
            tracing::error!(error = %e, "request log not read");
            return render::unavailable();
        }
    };
    let names: HashMap<i64, String> = keys
        .iter()
        .map(|k| (k.id, format!("{} ({})", k.name, k.preview)))
        .collect();
    page.rows = log.rows.iter().map(|r| row(r, &names)).collect();
    page.newest = before.map(|_| format!("{}{}", page.path, query(&filter, size, None)));
    page.older = log
        .next
        .map(|c| format!("{}{}", page.path, query(&filter, size, Some(c))));
    page.caption = caption(&filter, before.is_some());
    page.raw.size = size.to_string();
    render(StatusCode::OK, &page)
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

    #[test]
    fn filters_are_read_or_refused_by_field() {
        let (f, before, size) = choose(&q(&[]), &[7]).unwrap();
        assert_eq!(
            (f, before, size),
            (Filter::default(), None, DEFAULT_PAGE_SIZE)
        );
        let (f, _, size) = choose(
            &q(&[
                ("key", "7"),
                ("model", "gpt-4o"),
                ("status", "failed"),
                ("day", "2026-03-04"),
                ("size", "10"),
            ]),
            &[7],
        )
        .unwrap();
        assert_eq!(f.key, Some(7));
        assert_eq!(f.model.as_deref(), Some("gpt-4o"));
        assert_eq!(f.outcome, Outcome::Failed);
        assert_eq!(f.day, NaiveDate::from_ymd_opt(2026, 3, 4));
        assert_eq!(size, 10);
        assert_eq!(
            query(&f, size, None),
            "?key=7&model=gpt-4o&status=failed&day=2026-03-04&size=10"
        );
        for (pairs, field) in [
            (vec![("key", "8")], "key"),
            (vec![("key", "x")], "key"),
            (vec![("status", "ok")], "status"),
            (vec![("day", "2026-02-30")], "day"),
            (vec![("size", "20")], "size"),
            (vec![("before", "nonsense")], "before"),
            (vec![("model", "a\u{7}b")], "model"),
        ] {
            assert_eq!(
                choose(&q(&pairs), &[7]).map(|_| ()).map_err(|r| r.field),
                Err(field),
                "{pairs:?}"
            );
        }
    }

    #[test]
    fn query_values_are_escaped() {
        let f = Filter {
            model: Some("a&b=c d/é".into()),
            ..Filter::default()
        };
        assert_eq!(query(&f, 50, None), "?model=a%26b%3Dc%20d%2F%C3%A9");
    }
}
