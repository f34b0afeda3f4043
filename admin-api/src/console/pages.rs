//! The console's shared page helpers (rendering, messages, refusals, the pre-session forms and
//! the code page of a proof of address), the organization list and an organization's overview
//! (signing in and out: `sign_in`). Handlers read the request, call the services (`services::people`,
//! `services::wallets`, `services::billing`) and render a template; permissions are checked on
//! the server for every request (a page of an organization the viewer is not a member of answers
//! 404, exactly like one that does not exist).

use super::session::{self, Viewer};
use crate::http::form::field;
use crate::services::{billing, people, wallets};
use crate::state::AppState;
use askama::Template;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use money::NanoUsd;

/// Renders `t` with `status`; a template that fails to render is a 500 page.
pub(crate) fn render(status: StatusCode, t: &impl Template) -> Response {
    match t.render() {
        Ok(html) => (status, Html(html)).into_response(),
        Err(e) => {
            tracing::error!(error = %e, "console template failed");
            (StatusCode::INTERNAL_SERVER_ERROR, "internal error").into_response()
        }
    }
}

/// A form shown before a session exists: `page`, rendered with the fresh double-submit token
/// `csrf` (from [`people::secret`]), which is set as the `tg_csrf` cookie with it, and, when a
/// proof-of-address step just started, its flow cookie.
pub(crate) fn pre_session_form(
    state: &AppState,
    status: StatusCode,
    csrf: &str,
    page: &impl Template,
    flow: Option<&str>,
) -> Response {
    let mut resp = render(status, page);
    let headers = resp.headers_mut();
    headers.append(
        header::SET_COOKIE,
        session::set_cookie(state, session::PRE_CSRF, csrf, 3600),
    );
    if let Some(flow) = flow {
        headers.append(header::SET_COOKIE, session::flow_cookie(state, flow));
    }
    resp
}

/// A page with a heading, a message and maybe a link.
#[derive(Template)]
#[template(path = "console/message.html")]
pub(crate) struct Message<'a> {
    pub signed_in: Option<&'a str>,
    pub csrf: &'a str,
    pub heading: &'a str,
    pub message: &'a str,
    pub link: Option<(&'a str, &'a str)>,
}

/// A message page without a session.
pub(crate) fn message(status: StatusCode, heading: &str, text: &str) -> Response {
    render(
        status,
        &Message {
            signed_in: None,
            csrf: "",
            heading,
            message: text,
            link: None,
        },
    )
}

/// The store or the database cannot answer: 503, try again.
pub(crate) fn unavailable() -> Response {
    message(
        StatusCode::SERVICE_UNAVAILABLE,
        "Try again shortly",
        "The console cannot answer right now. Nothing was changed; please try again in a moment.",
    )
}

/// A refused state-changing request (CSRF token or origin): nothing changed.
pub(crate) fn forbidden() -> Response {
    render(
        StatusCode::FORBIDDEN,
        &Message {
            signed_in: None,
            csrf: "",
            heading: "Request refused",
            message: "This form has expired or was not sent from this site. Nothing was changed; reload the page and try again.",
            link: Some(("/console/", "Back to the console")),
        },
    )
}

/// The 404 of a page that does not exist or is not the viewer's.
pub(crate) fn not_found(viewer: &Viewer) -> Response {
    render(
        StatusCode::NOT_FOUND,
        &Message {
            signed_in: Some(&viewer.user.email),
            csrf: &viewer.session.csrf,
            heading: "Not found",
            message: "There is no such page in your console.",
            link: Some(("/console/", "Your console")),
        },
    )
}

#[derive(Template)]
#[template(path = "console/home.html")]
struct Home<'a> {
    signed_in: Option<&'a str>,
    csrf: &'a str,
    orgs: Vec<(i64, String, String)>,
    partners: Vec<(i64, String, String)>,
}

/// `GET /console/`: the organizations the viewer belongs to.
pub(crate) async fn home(State(state): State<AppState>, viewer: Viewer) -> Response {
    let (orgs, partners) = match (
        people::org_memberships(&state.db, viewer.user.id).await,
        people::partner_memberships(&state.db, viewer.user.id).await,
    ) {
        (Ok(orgs), Ok(partners)) => (orgs, partners),
        (Err(e), _) | (_, Err(e)) => {
            tracing::error!(error = %e, "memberships not read");
            return unavailable();
        }
    };
    render(
        StatusCode::OK,
        &Home {
            signed_in: Some(&viewer.user.email),
            csrf: &viewer.session.csrf,
            orgs: orgs
                .into_iter()
                .map(|(org, role)| (org.id, org.name, role))
                .collect(),
            partners: partners
                .into_iter()
                .map(|(p, role)| (p.id, p.name, role))
                .collect(),
        },
    )
}

/// Figures of a reconciled wallet, in USD.
struct Balance {
    available: String,
    book: String,
    reserved: String,
}

#[derive(Template)]
#[template(path = "console/org.html")]
struct Org<'a> {
    signed_in: Option<&'a str>,
    csrf: &'a str,
    org_id: i64,
    tab: &'a str,
    name: &'a str,
    role: &'a str,
    balance: Option<Balance>,
    today: String,
    week: String,
    days: Vec<(String, i64, String)>,
    chart: super::chart::Chart,
    chart_title: &'a str,
    /// The low-balance alert: threshold (USD), below it now.
    alert: Option<(String, bool)>,
    /// Owners set the alert.
    can_alert: bool,
    /// The partner's automatic allocation: below, amount, monthly cap (USD).
    rule: Option<(String, String, String)>,
    /// Automatic allocations: when, amount (USD), outcome.
    runs: Vec<(String, String, String)>,
    error: Option<String>,
    notice: Option<String>,
}

/// `GET /console/orgs/{org}`: balance (or "being reconciled", never zero), spend today and over 7
/// days, and the daily spend of the last 14 days. Members only.
pub(crate) async fn org_overview(
    State(state): State<AppState>,
    viewer: Viewer,
    crate::http::params::Seg(org): crate::http::params::Seg,
) -> Response {
    overview_page(&state, &viewer, &org, StatusCode::OK, None, None).await
}

/// `POST /console/orgs/{org}/alert`: `threshold_usd` (empty: remove). Owners only; audited.
pub(crate) async fn org_alert(
    State(state): State<AppState>,
    viewer: Viewer,
    crate::http::params::Seg(org): crate::http::params::Seg,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    use crate::services::watch;
    let (org_id, _, _) =
        match super::keys::allowed(&state, &viewer, &org, &headers, &body, &["owner"], "owners")
            .await
        {
            Ok(m) => m,
            Err(resp) => return resp,
        };
    let raw = field(&body, "threshold_usd").unwrap_or_default();
    let request = crate::dto::AlertRequest {
        threshold_usd: Some(super::customers::number(&raw).unwrap_or(serde_json::Value::Null)),
        unknown: Default::default(),
    };
    let threshold = match watch::parse_alert(request) {
        Ok(t) => t,
        Err(e) => {
            let message = super::customers::explain(&e);
            return overview_page(
                &state,
                &viewer,
                &org,
                StatusCode::BAD_REQUEST,
                Some(message),
                None,
            )
            .await;
        }
    };
    let done = async {
        let txn = crate::db::begin(&state.db).await?;
        watch::set_alert(
            &txn,
            watch::Subject::Org(org_id),
            threshold,
            state.clock.now(),
        )
        .await?;
        people::audit(
            &txn,
            people::Audit {
                organization: Some(org_id),
                partner: None,
                actor: Some(viewer.user.id),
                action: "alert_changed",
                target: Some(format!("org:{org_id}")),
                detail: serde_json::json!({ "threshold_usd": raw }),
                ip: viewer.ip.clone(),
            },
            state.clock.now(),
        )
        .await?;
        txn.commit().await?;
        Ok::<_, crate::error::ApiError>(())
    }
    .await;
    match done {
        Ok(()) => {
            let notice = match threshold {
                Some(t) => format!(
                    "The low-balance alert is set at {} USD.",
                    t.to_decimal_usd()
                ),
                None => "The low-balance alert was removed.".into(),
            };
            overview_page(&state, &viewer, &org, StatusCode::OK, None, Some(notice)).await
        }
        Err(e) => {
            tracing::error!(error = %e, "alert not saved");
            unavailable()
        }
    }
}

async fn overview_page(
    state: &AppState,
    viewer: &Viewer,
    org: &str,
    status: StatusCode,
    error: Option<String>,
    notice: Option<String>,
) -> Response {
    use crate::services::watch;
    use sea_orm::{ColumnTrait, EntityTrait, QueryFilter};
    let state = state.clone();
    let Ok(org_id) = org.parse::<i64>() else {
        return not_found(viewer);
    };
    let role = match people::org_role(&state.db, org_id, viewer.user.id).await {
        Ok(Some(role)) => role,
        Ok(None) => return not_found(viewer),
        Err(e) => {
            tracing::error!(error = %e, "membership not read");
            return unavailable();
        }
    };
    let org = match crate::services::customers::organization(&state.db, org_id).await {
        Ok(Some(org)) => org,
        Ok(None) => return not_found(viewer),
        Err(_) => return unavailable(),
    };
    let balance = match wallets::reconciled(&state, org_id).await {
        Ok(Some((book, reserved))) => Some(Balance {
            available: book.remaining_after(reserved).to_decimal_usd().to_string(),
            book: book.to_decimal_usd().to_string(),
            reserved: reserved.to_decimal_usd().to_string(),
        }),
        Ok(None) => None,
        Err(_) => None,
    };
    let today = state.clock.now().date_naive();
    let days = match billing::daily_spend(&state.db, org_id, today, 14).await {
        Ok(days) => days,
        Err(_) => return unavailable(),
    };
    let rules = async {
        let alert = watch::alert_of(&state.db, watch::Subject::Org(org_id)).await?;
        let customer = entities::customers::Entity::find()
            .filter(entities::customers::Column::OrganizationId.eq(org_id))
            .one(&state.db)
            .await?;
        let view = match customer {
            Some(c) => Some(watch::rule_view(&state.db, c.id, state.clock.now()).await?),
            None => None,
        };
        Ok::<_, crate::error::ApiError>((alert, view))
    }
    .await;
    let Ok((alert, view)) = rules else {
        return unavailable();
    };
    let dec = |n: NanoUsd| n.to_decimal_usd().to_string();
    let (rule, runs) = match view {
        Some(v) => (
            v.rule.map(|r| {
                (
                    dec(r.below_usd.0),
                    dec(r.amount_usd.0),
                    dec(r.monthly_cap_usd.0),
                )
            }),
            v.runs
                .into_iter()
                .map(|r| {
                    let outcome = if r.outcome == "allocated" {
                        "allocated"
                    } else {
                        "refused"
                    };
                    (r.created_at, dec(r.amount_usd.0), outcome.to_string())
                })
                .collect(),
        ),
        None => (None, Vec::new()),
    };
    let sum = |n: usize| {
        days.iter()
            .rev()
            .take(n)
            .fold(NanoUsd::ZERO, |a, (_, cost, _)| {
                a.checked_add(*cost).unwrap_or(a)
            })
            .to_decimal_usd()
            .to_string()
    };
    render(
        status,
        &Org {
            signed_in: Some(&viewer.user.email),
            csrf: &viewer.session.csrf,
            org_id,
            tab: "overview",
            name: &org.name,
            role: &role,
            balance,
            today: sum(1),
            week: sum(7),
            chart: super::chart::daily(&days),
            chart_title: "Daily spend, last 14 days, oldest on the left (UTC)",
            days: days
                .iter()
                .rev()
                .map(|(d, cost, requests)| {
                    (d.to_string(), *requests, cost.to_decimal_usd().to_string())
                })
                .collect(),
            alert: alert.map(|a| (dec(NanoUsd::from_nanos(a.threshold_nanos)), a.below)),
            can_alert: role == "owner",
            rule,
            runs,
            error,
            notice,
        },
    )
}

/// The form of a link that adds a person (an organization's invitation, a sign-up link).
#[derive(Template)]
#[template(path = "console/join.html")]
pub(crate) struct Join<'a> {
    pub signed_in: Option<&'a str>,
    pub csrf: &'a str,
    pub heading: &'a str,
    pub intro: &'a str,
    pub action: &'a str,
    pub email: &'a str,
    pub button: &'a str,
    pub error: Option<&'a str>,
}

/// A join form with a fresh double-submit token (set as a cookie with the page).
pub(crate) fn join_page(state: &AppState, status: StatusCode, join: Join<'_>) -> Response {
    let csrf = people::secret();
    let page = Join {
        csrf: &csrf,
        ..join
    };
    pre_session_form(state, status, &csrf, &page, None)
}

/// The second step of a proof of address: the code form.
#[derive(Template)]
#[template(path = "console/code.html")]
pub(crate) struct Code<'a> {
    pub signed_in: Option<&'a str>,
    pub csrf: &'a str,
    pub heading: &'a str,
    /// The address the code went to.
    pub email: &'a str,
    pub action: &'a str,
    pub button: &'a str,
    /// Where "Start again" leads (the first step's page).
    pub restart: &'a str,
    pub error: Option<&'a str>,
}

/// A code form with a fresh double-submit token; `flow`: the flow secret of a challenge just
/// started, kept in the browser's `tg_flow` cookie for the second step.
pub(crate) fn code_page(
    state: &AppState,
    status: StatusCode,
    code: Code<'_>,
    flow: Option<&str>,
) -> Response {
    let csrf = people::secret();
    let page = Code {
        csrf: &csrf,
        ..code
    };
    pre_session_form(state, status, &csrf, &page, flow)
}

/// `resp` with `Retry-After: secs`.
pub(crate) fn retry_after(mut resp: Response, secs: u64) -> Response {
    if let Ok(v) = HeaderValue::from_str(&secs.max(1).to_string()) {
        resp.headers_mut().insert(header::RETRY_AFTER, v);
    }
    resp
}

/// "3 minutes", "40 seconds".
pub(crate) fn wait_text(secs: u64) -> String {
    match secs {
        0..=1 => "a second".into(),
        2..=90 => format!("{secs} seconds"),
        _ => format!("{} minutes", secs.div_ceil(60)),
    }
}
