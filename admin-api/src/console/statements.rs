//! Monthly statements in the consoles (issue 32): listed on the usage pages (the last twelve
//! months since the organization or partner began), downloaded as CSV or PDF from
//! `/console/orgs/{org}/statements/{YYYY-MM}.csv|.pdf` (every member of the organization) and
//! `/console/partners/{partner}/statements/{YYYY-MM}.csv|.pdf` (every member of the team). The
//! same statements as the billing API's (`services::statements`).

use super::gate::{self, Membership};
use super::render;
use super::session::Viewer;
use crate::http::params::Segs;
use crate::services::statements::{self, Month};
use crate::state::AppState;
use axum::extract::State;
use axum::response::{IntoResponse, Response};

/// The statements a usage page lists: (month, CSV link, PDF link, provisional), newest first.
pub(crate) async fn months(
    state: &AppState,
    base: String,
    partner: bool,
    id: i64,
) -> Vec<(String, String, String, bool)> {
    let began = if partner {
        crate::services::partners::find(&state.db, id)
            .await
            .ok()
            .flatten()
            .map(|p| p.created_at)
    } else {
        crate::services::customers::organization(&state.db, id)
            .await
            .ok()
            .flatten()
            .map(|o| o.created_at)
    };
    let Some(began) = began else {
        return Vec::new();
    };
    let now = state.clock.now();
    let current = Month::of(now);
    statements::months_since(began, now, 12)
        .into_iter()
        .map(|m| {
            (
                m.to_string(),
                format!("{base}/statements/{m}.csv"),
                format!("{base}/statements/{m}.pdf"),
                m == current,
            )
        })
        .collect()
}

/// `2026-11.csv` → (month, format).
fn file(name: &str) -> Option<(Month, &'static str)> {
    let (month, ext) = name.rsplit_once('.')?;
    let format = match ext {
        "csv" => "csv",
        "pdf" => "pdf",
        _ => return None,
    };
    Some((Month::parse(month)?, format))
}

fn answer(
    result: Result<statements::Statement, statements::StatementError>,
    format: &str,
    viewer: &Viewer,
) -> Response {
    match result {
        Ok(s) => crate::http::billing::statement_download(&s, format),
        Err(statements::StatementError::Month) => render::not_found(viewer),
        Err(e) => {
            tracing::error!(error = %e, "statement not made");
            render::unavailable()
        }
    }
}

/// `GET /console/orgs/{org}/statements/{YYYY-MM}.{csv|pdf}`.
pub(crate) async fn org(
    State(state): State<AppState>,
    viewer: Viewer,
    Segs(org, name): Segs,
) -> Response {
    let Membership {
        id: org_id,
        name: _,
        role: _,
    } = match gate::organization(&state, &viewer, &org).await {
        Ok(m) => m,
        Err(resp) => return resp,
    };
    let Some((month, format)) = file(&name) else {
        return render::not_found(&viewer);
    };
    answer(
        statements::for_org(&state, org_id, month).await,
        format,
        &viewer,
    )
}

/// `GET /console/partners/{partner}/statements/{YYYY-MM}.{csv|pdf}`.
pub(crate) async fn partner(
    State(state): State<AppState>,
    viewer: Viewer,
    Segs(partner, name): Segs,
) -> Response {
    let t = match gate::team(&state, &viewer, &partner).await {
        Ok(t) => t,
        Err(resp) => return resp,
    };
    let Some((month, format)) = file(&name) else {
        return render::not_found(&viewer);
    };
    answer(
        statements::for_partner(&state, t.id, month).await,
        format,
        &viewer,
    )
    .into_response()
}
