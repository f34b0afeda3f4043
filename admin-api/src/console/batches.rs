//! The Batches page (issue 46): an organization's batches, newest first
//! (`/console/orgs/{org}/batches`, every member), from both surfaces (OpenAI's `/batches` and
//! Anthropic's message batches), twenty to a page (`after`, the last batch shown). Each row: the
//! batch, the API and key it runs on, its status, its lines by state, and its spend — what the
//! ledger booked for its lines, apart from the rest of the bill. A bad page link is a 400 that
//! says so.

use super::amount::{Amount, amount};
use super::gate::{self, Membership};
use super::render::{self, render};
use super::session::Viewer;
use crate::http::params::Seg;
use crate::services::batch_files::Refused;
use crate::services::batch_log::{self, BatchEntry};
use crate::services::message_batches;
use crate::state::AppState;
use askama::Template;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use money::NanoUsd;
use std::collections::HashMap;

/// One batch as a row.
pub(super) struct Row {
    pub(super) id: String,
    pub(super) created: String,
    /// "OpenAI batch · chat completions", "Anthropic message batch".
    pub(super) api: String,
    pub(super) key: String,
    pub(super) status: String,
    pub(super) failed: bool,
    pub(super) total: i64,
    /// "3 succeeded", "1 failed", … (states with no line left out).
    pub(super) states: Vec<String>,
    pub(super) calls: i64,
    pub(super) spend: Amount,
}

#[derive(Template)]
#[template(path = "console/batches.html")]
pub(super) struct Page<'a> {
    pub(super) signed_in: Option<&'a str>,
    pub(super) csrf: &'a str,
    pub(super) org_id: i64,
    pub(super) tab: &'a str,
    pub(super) name: &'a str,
    pub(super) rows: Vec<Row>,
    /// The page's spend, summed.
    pub(super) spend: Amount,
    pub(super) newest: Option<String>,
    pub(super) older: Option<String>,
    pub(super) error: Option<String>,
}

/// `GET /console/orgs/{org}/batches`: every member.
pub(crate) async fn page(
    State(state): State<AppState>,
    viewer: Viewer,
    Seg(org): Seg,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    match gate::organization(&state, &viewer, &org).await {
        Ok(m) => show(&state, &viewer, &m, &q).await,
        Err(resp) => resp,
    }
}

fn api(endpoint: &str) -> String {
    match endpoint {
        message_batches::ENDPOINT => "Anthropic message batch".into(),
        other => format!(
            "OpenAI batch · {}",
            other.trim_start_matches("/v1/").replace(['/', '_'], " ")
        ),
    }
}

fn row(e: BatchEntry) -> Row {
    let b = &e.batch;
    let states = [
        ("succeeded", "succeeded"),
        ("failed", "failed"),
        ("cancelled", "cancelled"),
        ("expired", "expired"),
        ("running", "running"),
        ("pending", "waiting"),
    ]
    .iter()
    .filter_map(|(state, said)| {
        e.lines
            .get(*state)
            .filter(|n| **n > 0)
            .map(|n| format!("{n} {said}"))
    })
    .collect();
    Row {
        id: b.public_id.clone(),
        created: b.created_at.format("%Y-%m-%d %H:%M:%S").to_string(),
        api: api(&b.endpoint),
        key: e.key.map_or_else(
            || format!("key {}", b.api_key_id),
            |(n, p)| format!("{n} ({p})"),
        ),
        status: b.status.replace('_', " "),
        failed: matches!(b.status.as_str(), "failed" | "expired"),
        total: e.lines.values().sum(),
        states,
        calls: e.calls,
        spend: amount(NanoUsd::from_nanos(e.charged_nanos)),
    }
}

async fn show(
    state: &AppState,
    viewer: &Viewer,
    m: &Membership,
    q: &HashMap<String, String>,
) -> Response {
    let path = format!("/console/orgs/{}/batches", m.id);
    let after = q.get("after").map(|v| v.trim()).filter(|v| !v.is_empty());
    let mut page = Page {
        signed_in: Some(&viewer.user.email),
        csrf: &viewer.session.csrf,
        org_id: m.id,
        tab: "batches",
        name: &m.name,
        rows: Vec::new(),
        spend: amount(NanoUsd::ZERO),
        newest: after.map(|_| path.clone()),
        older: None,
        error: None,
    };
    let (entries, more) = match batch_log::page(state, m.id, after.map(str::to_string)).await {
        Ok(p) => p,
        Err(Refused::Invalid { .. }) => {
            page.error =
                Some("That page link is not valid; start again from the newest batches.".into());
            return render(StatusCode::BAD_REQUEST, &page);
        }
        Err(e) => {
            tracing::error!(error = ?e, "batches page: not read");
            return render::unavailable();
        }
    };
    let total = entries
        .iter()
        .fold(0i64, |sum, e| sum.saturating_add(e.charged_nanos));
    page.spend = amount(NanoUsd::from_nanos(total));
    page.older = entries
        .last()
        .filter(|_| more)
        .map(|e| format!("{path}?after={}", e.batch.public_id));
    page.rows = entries.into_iter().map(row).collect();
    render(StatusCode::OK, &page)
}
