//! The usage CSV (`…/usage.csv`): one row per period and line with usage, costs as exact
//! decimals, text fields quoted and defused against spreadsheet formulas; streamed in chunks.

use super::gate::{self, Membership};
use super::render::{self};
use super::session::Viewer;
use super::usage::*;
use super::usage_window::*;
use crate::error::ApiError;
use crate::http::params::Seg;
use crate::services::partner_usage;
use crate::services::usage::{Breakdown, Totals, UsageError, Window};
use crate::state::AppState;
use axum::body::Body;
use axum::extract::{Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, SecondsFormat, Utc};
use money::NanoUsd;
use std::collections::HashMap;

/// A CSV text field, always quoted (`text::csv_cell`'s rule: a formula defused).
pub(super) fn csv_text(s: &str) -> String {
    let cell = crate::text::csv_cell(s);
    if cell.starts_with('"') {
        cell
    } else {
        format!("\"{cell}\"")
    }
}

/// The CSV's header line; a partner's adds what was charged, the wholesale cost and the margin.
pub(super) fn csv_head(by: By, partner: bool) -> String {
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
pub(super) fn csv_row(
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
pub(super) fn csv(b: &Breakdown<Line>, w: &Window, by: By) -> String {
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
pub(super) const CSV_CHUNK: usize = 4 * 1024;

/// A partner's CSV, streamed: the lines' names are read first, then the cells come from the
/// rollups in period order and are written as they come, a chunk at a time, so that a partner
/// with ten thousand customers is never one string in memory. The reading is driven by the
/// answer's body (no task of its own: a client that goes away stops it). A failure before the
/// first cell is an error (the page's 503); one after it cuts the download (never a silently
/// short file).
pub(super) async fn partner_csv(
    state: &AppState,
    partner: i64,
    choice: &Choice,
) -> Result<Body, ApiError> {
    use futures_util::StreamExt;
    type Chunk = Result<bytes::Bytes, std::io::Error>;
    let window = choice.window()?;
    let by = choice.by;
    let label = labels(state, partner, by, None).await?;
    let (tx, rx) = tokio::sync::mpsc::channel::<Chunk>(4);
    let db = state.db.clone();
    let cut = move |e: UsageError| {
        tracing::error!(error = %e, partner, "usage CSV not read");
        std::io::Error::other("usage not read")
    };
    // Sends the header and the first row at once (the answer waits for them), then a chunk at a
    // time.
    let producer = async move {
        let cells = match partner_usage::partner_cells(&db, partner, &window, dim_of(by)).await {
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

pub(super) async fn csv_answer(
    state: &AppState,
    scope: Scope,
    q: &HashMap<String, String>,
) -> Response {
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
            (Err(e), _) => Err(e),
            (_, Err(e)) => Err(e.into()),
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
