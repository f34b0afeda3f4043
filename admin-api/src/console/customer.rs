//! One customer in the partner dashboard (`/console/partners/{id}/customers/{customer}`): status
//! and activation (re-issue or revoke a pending invitation — SPEC: "re-issue is done outside the
//! API"), balance, allocation increase and decrease, group rates with their floors, keys (create,
//! shown once; disable) and the daily spend chart. Every change goes through the partner API's
//! own services (`funding::allocate`, `funding::set_rate`, `keys::create`, `keys::disable`,
//! `invitations::revoke_or_reissue`) with the same rules and reasons, shown next to the form;
//! their effects (wallet credits, key publication, mails) are applied after the commit as the API
//! does. Every member reads; owners, admins and operators act. Another partner's customer: 404.

use super::amount::{Amount, amount};
use super::gate::{self, Membership};
use super::render::{self, render};
use super::session::Viewer;
use crate::error::ApiError;
use crate::http::params::Segs;
use crate::services::alerts;
use crate::services::allocations;
use crate::services::customers::CustomerError;
use crate::services::group_prices;
use crate::services::{billing, customers, org_keys, wallets};
use crate::state::AppState;
use askama::Template;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use entities::status::OrganizationStatus;

/// A refusal shown on the page: (form, reason code, message).
pub(super) type Refusal = (&'static str, &'static str, String);

pub(super) struct GroupRow {
    pub(super) id: i64,
    pub(super) name: String,
    pub(super) wholesale: String,
    pub(super) floor: String,
    pub(super) rate: String,
}

pub(super) struct KeyRow {
    pub(super) id: i64,
    pub(super) name: String,
    pub(super) preview: String,
    pub(super) group: String,
    pub(super) created: String,
    pub(super) budget: String,
    pub(super) status: String,
    pub(super) active: bool,
}

#[derive(Template)]
#[template(path = "console/partner_customer.html")]
pub(super) struct Page<'a> {
    pub(super) signed_in: Option<&'a str>,
    pub(super) csrf: &'a str,
    pub(super) partner_id: i64,
    pub(super) tab: &'a str,
    pub(super) name: &'a str,
    pub(super) role: &'a str,
    pub(super) customer_id: i64,
    pub(super) customer_name: String,
    pub(super) external_id: String,
    pub(super) contact: String,
    pub(super) status: String,
    pub(super) active: bool,
    pub(super) invitation: Option<(String, String)>,
    pub(super) balance: Option<(Amount, Amount, Amount)>,
    pub(super) allocation: Amount,
    pub(super) groups: Vec<GroupRow>,
    pub(super) keys: Vec<KeyRow>,
    pub(super) can_act: bool,
    pub(super) chart: super::chart::Chart,
    pub(super) chart_title: &'a str,
    pub(super) days: Vec<(String, i64, Amount)>,
    pub(super) notice: Option<String>,
    pub(super) secret: Option<String>,
    pub(super) error: Option<Refusal>,
    /// The low-balance alert's threshold (USD) and whether the balance is below it.
    pub(super) alert: Option<(Amount, bool)>,
    /// The automatic allocation rule: below, amount, monthly cap, allocated this month (USD),
    /// armed.
    pub(super) rule: Option<(Amount, Amount, Amount, Amount, bool)>,
    /// Its last runs: when, amount (USD), outcome.
    pub(super) runs: Vec<(String, Amount, String)>,
}

/// What the page shows after an action.
#[derive(Default)]
pub(super) struct Outcome {
    pub(super) status: Option<StatusCode>,
    pub(super) notice: Option<String>,
    pub(super) secret: Option<String>,
    pub(super) error: Option<Refusal>,
}

pub(super) async fn page(
    state: &AppState,
    viewer: &Viewer,
    t: &Membership,
    customer_id: &str,
    out: Outcome,
) -> Response {
    let caller = match gate::console_caller(state, t).await {
        Ok(c) => c,
        Err(resp) => return resp,
    };
    let customer = match customers::find(&state.db, &caller, customer_id).await {
        Ok(c) => c,
        Err(CustomerError::NotFound) => return render::not_found(viewer),
        Err(_) => return render::unavailable(),
    };
    let read = figures(state, &caller, &customer).await;
    let Ok((org, invitation, groups, keys, balance, days, alert, rule)) = read else {
        return render::unavailable();
    };
    let active = org.status == OrganizationStatus::Active;
    let mut budgets = org_keys::budget_texts(state, org.id, &keys).await;
    let when = |t: chrono::DateTime<chrono::Utc>| t.format("%Y-%m-%d %H:%M UTC").to_string();
    render(
        out.status.unwrap_or(StatusCode::OK),
        &Page {
            signed_in: Some(&viewer.user.email),
            csrf: &viewer.session.csrf,
            partner_id: t.id,
            tab: "customers",
            name: &t.name,
            role: &t.role,
            customer_id: customer.id,
            customer_name: customer.display_name.clone(),
            external_id: customer.external_id.clone(),
            contact: customer.contact_email.clone(),
            status: sea_orm::ActiveEnum::to_value(&org.status).replace('_', " "),
            active,
            invitation: invitation
                .filter(|_| !active)
                .map(|(i, status)| (status, when(i.expires_at))),
            balance: balance.map(|(book, reserved)| {
                (
                    amount(book.remaining_after(reserved)),
                    amount(book),
                    amount(reserved),
                )
            }),
            allocation: amount(money::NanoUsd::from_nanos(customer.allocation_cap_nanos)),
            groups: groups.iter().map(GroupRow::of).collect(),
            keys: keys
                .iter()
                .map(|k| KeyRow::of(state, k, budgets.remove(&k.id)))
                .collect(),
            can_act: t.may(&gate::CUSTOMER_WORK),
            chart: super::chart::daily(&days),
            chart_title: "Daily spend, last 30 days, oldest on the left (UTC)",
            days: days
                .iter()
                .rev()
                .filter(|(_, cost, requests)| *requests != 0 || !cost.is_zero())
                .map(|(d, cost, requests)| (d.to_string(), *requests, amount(*cost)))
                .collect(),
            notice: out.notice,
            secret: out.secret,
            error: out.error,
            alert: alert.map(|a| {
                (
                    amount(money::NanoUsd::from_nanos(a.threshold_nanos)),
                    a.below,
                )
            }),
            rule: rule.rule.map(rule_row),
            runs: rule.runs.into_iter().map(run_row).collect(),
        },
    )
}

/// What a customer's page shows, read together: its organization, invitation, groups, keys,
/// reconciled balance, last 30 days, alert and automatic allocation.
type Figures = (
    entities::organizations::Model,
    Option<(entities::invitations::Model, String)>,
    Vec<crate::dto::Group>,
    Vec<entities::customer_api_keys::Model>,
    Option<(money::NanoUsd, money::NanoUsd)>,
    Vec<(chrono::NaiveDate, money::NanoUsd, i64)>,
    Option<entities::balance_alerts::Model>,
    crate::dto::AutoAllocationView,
);

async fn figures(
    state: &AppState,
    caller: &crate::caller::Caller,
    customer: &entities::customers::Model,
) -> Result<Figures, ApiError> {
    let org = customers::organization(&state.db, customer.organization_id)
        .await?
        .ok_or(ApiError::Internal)?;
    let invitation = customers::invitation(&state.db, customer.id, state.clock.now()).await?;
    let groups = group_prices::groups(&state.db, state, caller, customer).await?;
    let keys = org_keys::org_key_rows(&state.db, org.id).await?;
    let balance = wallets::reconciled(state, org.id).await?;
    let today = state.clock.now().date_naive();
    let days = billing::daily_spend(&state.db, org.id, today, 30).await?;
    let alert = alerts::alert_of(&state.db, alerts::Subject::Org(org.id)).await?;
    let rule = allocations::rule_view(&state.db, customer.id, state.clock.now()).await?;
    Ok((org, invitation, groups, keys, balance, days, alert, rule))
}

impl GroupRow {
    fn of(g: &crate::dto::Group) -> GroupRow {
        GroupRow {
            id: g.id,
            name: g.name.clone(),
            wholesale: g.wholesale_rate_multiplier.0.to_decimal().to_string(),
            floor: g.retail_floor_rate_multiplier.0.to_decimal().to_string(),
            rate: g.rate_multiplier.0.to_decimal().to_string(),
        }
    }
}

impl KeyRow {
    /// The row of key `k`, with its budget's text (`None`: no budget).
    fn of(
        state: &AppState,
        k: &entities::customer_api_keys::Model,
        budget: Option<String>,
    ) -> KeyRow {
        let status = sea_orm::ActiveEnum::to_value(&k.status);
        KeyRow {
            id: k.id,
            name: k.name.clone(),
            preview: k.preview.clone(),
            group: state
                .group(k.group_id)
                .map_or_else(|| format!("group {}", k.group_id), |g| g.name),
            created: k.created_at.format("%Y-%m-%d").to_string(),
            budget: budget.unwrap_or_default(),
            active: status == "active",
            status,
        }
    }
}

/// An automatic allocation's rule as the page shows it: below, amount, monthly cap, allocated
/// this month (USD) and whether it is armed.
fn rule_row(r: crate::dto::AutoRuleView) -> (Amount, Amount, Amount, Amount, bool) {
    (
        amount(r.below_usd.0),
        amount(r.amount_usd.0),
        amount(r.monthly_cap_usd.0),
        amount(r.allocated_this_month_usd.0),
        r.armed,
    )
}

/// An automatic allocation's run as the page lists it: when, how much, what came of it.
fn run_row(r: crate::dto::AutoRunView) -> (String, Amount, String) {
    let outcome = match r.outcome.as_str() {
        "allocated" => "allocated",
        "refused_funding" => "refused: partner funding short",
        "refused_cap" => "refused: monthly cap reached",
        _ => "refused",
    };
    (r.created_at, amount(r.amount_usd.0), outcome.to_string())
}

/// `GET /console/partners/{partner}/customers/{customer}`.
pub(crate) async fn show(
    State(state): State<AppState>,
    viewer: Viewer,
    Segs(partner, customer): Segs,
) -> Response {
    match gate::team(&state, &viewer, &partner).await {
        Ok(t) => page(&state, &viewer, &t, &customer, Outcome::default()).await,
        Err(resp) => resp,
    }
}
