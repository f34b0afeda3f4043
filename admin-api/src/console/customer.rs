//! One customer in the partner dashboard (`/console/partners/{id}/customers/{customer}`): status
//! and activation (re-issue or revoke a pending invitation — SPEC: "re-issue is done outside the
//! API"), balance, allocation increase and decrease, group rates with their floors, keys (create,
//! shown once; disable) and the daily spend chart. Every change goes through the partner API's
//! own services (`funding::allocate`, `funding::set_rate`, `keys::create`, `keys::disable`,
//! `invitations::revoke_or_reissue`) with the same rules and reasons, shown next to the form;
//! their effects (wallet credits, key publication, mails) are applied after the commit as the API
//! does. Every member reads; owners, admins and operators act. Another partner's customer: 404.

use super::form;
use super::gate::{self, Membership};
use super::render::{self, render};
use super::session::Viewer;
use crate::caller::Caller;
use crate::dto::{AllocationRequest, CreateKeyRequest, GroupRateRequest};
use crate::error::ApiError;
use crate::http::form::field;
use crate::http::params::Segs;
use crate::partner::idempotency::{Effect, Success, apply};
use crate::services::alerts;
use crate::services::allocations;
use crate::services::audit;
use crate::services::sessions;
use crate::services::{billing, customers, funding, invitations, keys, wallets};
use crate::state::AppState;
use askama::Template;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use entities::status::OrganizationStatus;
use sea_orm::EntityTrait;
use serde_json::Value;

/// A refusal shown on the page: (form, reason code, message).
type Refusal = (&'static str, &'static str, String);

struct GroupRow {
    id: i64,
    name: String,
    wholesale: String,
    floor: String,
    rate: String,
}

struct KeyRow {
    id: i64,
    name: String,
    preview: String,
    group: String,
    created: String,
    budget: String,
    status: String,
    active: bool,
}

#[derive(Template)]
#[template(path = "console/partner_customer.html")]
struct Page<'a> {
    signed_in: Option<&'a str>,
    csrf: &'a str,
    partner_id: i64,
    tab: &'a str,
    name: &'a str,
    role: &'a str,
    customer_id: i64,
    customer_name: String,
    external_id: String,
    contact: String,
    status: String,
    active: bool,
    invitation: Option<(String, String)>,
    balance: Option<(String, String, String)>,
    allocation: String,
    groups: Vec<GroupRow>,
    keys: Vec<KeyRow>,
    can_act: bool,
    chart: super::chart::Chart,
    chart_title: &'a str,
    days: Vec<(String, i64, String)>,
    notice: Option<String>,
    secret: Option<String>,
    error: Option<Refusal>,
    /// The low-balance alert's threshold (USD) and whether the balance is below it.
    alert: Option<(String, bool)>,
    /// The automatic allocation rule: below, amount, monthly cap, allocated this month (USD),
    /// armed.
    rule: Option<(String, String, String, String, bool)>,
    /// Its last runs: when, amount (USD), outcome.
    runs: Vec<(String, String, String)>,
}

/// What the page shows after an action.
#[derive(Default)]
struct Outcome {
    status: Option<StatusCode>,
    notice: Option<String>,
    secret: Option<String>,
    error: Option<Refusal>,
}

async fn page(
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
        Err(ApiError::CustomerNotFound) => return render::not_found(viewer),
        Err(_) => return render::unavailable(),
    };
    let read = async {
        let org = entities::organizations::Entity::find_by_id(customer.organization_id)
            .one(&state.db)
            .await?
            .ok_or(ApiError::Internal)?;
        let invitation = customers::invitation(&state.db, customer.id, state.clock.now()).await?;
        let groups = customers::groups(&state.db, state, &caller, &customer).await?;
        let keys = keys::org_key_rows(&state.db, org.id).await?;
        let balance = wallets::reconciled(state, org.id).await?;
        let today = state.clock.now().date_naive();
        let days = billing::daily_spend(&state.db, org.id, today, 30).await?;
        let alert = alerts::alert_of(&state.db, alerts::Subject::Org(org.id)).await?;
        let rule = allocations::rule_view(&state.db, customer.id, state.clock.now()).await?;
        Ok::<_, ApiError>((org, invitation, groups, keys, balance, days, alert, rule))
    }
    .await;
    let Ok((org, invitation, groups, keys, balance, days, alert, rule)) = read else {
        return render::unavailable();
    };
    let active = org.status == OrganizationStatus::Active;
    let mut budgets = keys::budget_texts(state, org.id, &keys).await;
    let when = |t: chrono::DateTime<chrono::Utc>| t.format("%Y-%m-%d %H:%M UTC").to_string();
    let group_name = |id: i64| {
        state
            .group(id)
            .map_or_else(|| format!("group {id}"), |g| g.name)
    };
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
                    form::usd(book.remaining_after(reserved)),
                    form::usd(book),
                    form::usd(reserved),
                )
            }),
            allocation: form::usd(money::NanoUsd::from_nanos(customer.allocation_cap_nanos)),
            groups: groups
                .iter()
                .map(|g| GroupRow {
                    id: g.id,
                    name: g.name.clone(),
                    wholesale: g.wholesale_rate_multiplier.0.to_decimal().to_string(),
                    floor: g.retail_floor_rate_multiplier.0.to_decimal().to_string(),
                    rate: g.rate_multiplier.0.to_decimal().to_string(),
                })
                .collect(),
            keys: keys
                .iter()
                .map(|k| {
                    let status = sea_orm::ActiveEnum::to_value(&k.status);
                    KeyRow {
                        id: k.id,
                        name: k.name.clone(),
                        preview: k.preview.clone(),
                        group: group_name(k.group_id),
                        created: k.created_at.format("%Y-%m-%d").to_string(),
                        budget: budgets.remove(&k.id).unwrap_or_default(),
                        active: status == "active",
                        status,
                    }
                })
                .collect(),
            can_act: t.may(&gate::CUSTOMER_WORK),
            chart: super::chart::daily(&days),
            chart_title: "Daily spend, last 30 days, oldest on the left (UTC)",
            days: days
                .iter()
                .rev()
                .filter(|(_, cost, requests)| *requests != 0 || !cost.is_zero())
                .map(|(d, cost, requests)| (d.to_string(), *requests, form::usd(*cost)))
                .collect(),
            notice: out.notice,
            secret: out.secret,
            error: out.error,
            alert: alert.map(|a| {
                (
                    form::usd(money::NanoUsd::from_nanos(a.threshold_nanos)),
                    a.below,
                )
            }),
            rule: rule.rule.map(|r| {
                (
                    form::usd(r.below_usd.0),
                    form::usd(r.amount_usd.0),
                    form::usd(r.monthly_cap_usd.0),
                    form::usd(r.allocated_this_month_usd.0),
                    r.armed,
                )
            }),
            runs: rule
                .runs
                .into_iter()
                .map(|r| {
                    let outcome = match r.outcome.as_str() {
                        "allocated" => "allocated",
                        "refused_funding" => "refused: partner funding short",
                        "refused_cap" => "refused: monthly cap reached",
                        _ => "refused",
                    };
                    (r.created_at, form::usd(r.amount_usd.0), outcome.to_string())
                })
                .collect(),
        },
    )
}

/// `POST …/customers/{customer}/alert`: `threshold_usd` (empty: remove the alert).
pub(crate) async fn alert(
    State(state): State<AppState>,
    viewer: Viewer,
    Segs(partner, customer): Segs,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let (t, caller) = match acting(&state, &viewer, &partner, &customer, &headers, &body).await {
        Ok(x) => x,
        Err(resp) => return resp,
    };
    let raw = field(&body, "threshold_usd").unwrap_or_default();
    let request = crate::dto::AlertRequest {
        threshold_usd: Some(number(Some(raw.clone())).unwrap_or(Value::Null)),
        unknown: Default::default(),
    };
    let threshold = match alerts::parse_alert(request) {
        Ok(t) => t,
        Err(e) => return refused(&state, &viewer, &t, &customer, "alert", &e).await,
    };
    let detail = serde_json::json!({ "threshold_usd": raw });
    let (state2, viewer2, t2, customer2) = (&state, &viewer, &t, customer.clone());
    write(
        &state,
        &viewer,
        &t,
        &customer,
        "alert",
        |v: &crate::dto::AlertView| {
            let text = match v.threshold_usd {
                Some(t) => format!("The low-balance alert is set at {} USD.", form::usd(t.0)),
                None => "The low-balance alert was removed.".to_string(),
            };
            (text, None)
        },
        async move |txn| {
            audited(
                txn,
                state2,
                viewer2,
                t2,
                "alert_changed",
                &customer2,
                detail,
            )
            .await?;
            let view =
                alerts::set_customer_alert(txn, state2, &caller, &customer2, threshold).await?;
            Ok(Success::plain(view))
        },
    )
    .await
}

/// `POST …/customers/{customer}/automatic-allocation`: `action` = `set` (with `below_usd`,
/// `amount_usd`, `monthly_cap_usd`) or `remove`.
pub(crate) async fn automatic(
    State(state): State<AppState>,
    viewer: Viewer,
    Segs(partner, customer): Segs,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let (t, caller) = match acting(&state, &viewer, &partner, &customer, &headers, &body).await {
        Ok(x) => x,
        Err(resp) => return resp,
    };
    let rule = if field(&body, "action").as_deref() == Some("remove") {
        None
    } else {
        let request = crate::dto::AutoAllocationRequest {
            below_usd: number(field(&body, "below_usd")),
            amount_usd: number(field(&body, "amount_usd")),
            monthly_cap_usd: number(field(&body, "monthly_cap_usd")),
            unknown: Default::default(),
        };
        match allocations::parse_rule(request) {
            Ok(r) => Some(r),
            Err(e) => return refused(&state, &viewer, &t, &customer, "automatic", &e).await,
        }
    };
    let detail = serde_json::json!({
        "below_usd": field(&body, "below_usd"),
        "amount_usd": field(&body, "amount_usd"),
        "monthly_cap_usd": field(&body, "monthly_cap_usd"),
        "removed": rule.is_none(),
    });
    let (state2, viewer2, t2, customer2) = (&state, &viewer, &t, customer.clone());
    write(
        &state,
        &viewer,
        &t,
        &customer,
        "automatic",
        |v: &crate::dto::AutoAllocationView| {
            let text = if v.rule.is_some() {
                "The automatic allocation is set."
            } else {
                "The automatic allocation was removed."
            };
            (text.to_string(), None)
        },
        async move |txn| {
            audited(
                txn,
                state2,
                viewer2,
                t2,
                "automatic_allocation_changed",
                &customer2,
                detail,
            )
            .await?;
            let view =
                allocations::set_customer_rule(txn, state2, &caller, &customer2, rule).await?;
            Ok(Success::plain(view))
        },
    )
    .await
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

/// A post's checks: origin, CSRF, membership, a role that does customer work, and a customer of
/// this partner. Returns the team and the caller.
async fn acting(
    state: &AppState,
    viewer: &Viewer,
    partner: &str,
    customer: &str,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<(Membership, Caller), Response> {
    let t = gate::team_change(state, viewer, partner, headers, body, &gate::CUSTOMER_WORK).await?;
    let c = gate::console_caller(state, &t).await?;
    match customers::find(&state.db, &c, customer).await {
        Ok(_) => Ok((t, c)),
        Err(ApiError::CustomerNotFound) => Err(render::not_found(viewer)),
        Err(_) => Err(render::unavailable()),
    }
}

/// A form field as the API's JSON (see [`super::customers::number`]).
fn number(s: Option<String>) -> Option<Value> {
    form::number(&s?)
}

/// The refusal of `e` on form `form`: its reason code and a sentence.
fn refusal(form: &'static str, e: &ApiError) -> Refusal {
    (form, e.parts().1.unwrap_or("REFUSED"), form::explain(e))
}

/// Runs a partner API write in one transaction, applies its effects after the commit, and
/// answers the page with `notice` (or the refusal on `form`).
async fn write<T>(
    state: &AppState,
    viewer: &Viewer,
    t: &Membership,
    customer: &str,
    form: &'static str,
    notice: impl FnOnce(&T) -> (String, Option<String>),
    run: impl AsyncFnOnce(&sea_orm::DatabaseTransaction) -> Result<Success<T>, ApiError>,
) -> Response {
    let done = async {
        let txn = crate::db::begin(&state.db).await?;
        let success = run(&txn).await?;
        if let Err(e) = txn.commit().await {
            // A decrease took the money out of the mirror just before: reload it from the
            // ledger, which kept it.
            for effect in &success.effects {
                if let Effect::ReloadWalletIfAborted { org } = effect {
                    state.wallet_stale(*org);
                }
            }
            return Err(e.into());
        }
        Ok::<_, ApiError>(success)
    }
    .await;
    match done {
        Ok(success) => {
            let (notice, secret) = notice(&success.data);
            apply(state, success.effects).await;
            let out = Outcome {
                notice: Some(notice),
                secret,
                ..Outcome::default()
            };
            page(state, viewer, t, customer, out).await
        }
        Err(ApiError::Unavailable | ApiError::Internal) => render::unavailable(),
        Err(ApiError::CustomerNotFound | ApiError::ApiKeyNotFound) => render::not_found(viewer),
        Err(e) => refused(state, viewer, t, customer, form, &e).await,
    }
}

/// The page with the refusal `e` shown on form `form`.
async fn refused(
    state: &AppState,
    viewer: &Viewer,
    t: &Membership,
    customer: &str,
    form: &'static str,
    e: &ApiError,
) -> Response {
    let out = Outcome {
        status: Some(e.parts().0),
        error: Some(refusal(form, e)),
        ..Outcome::default()
    };
    page(state, viewer, t, customer, out).await
}

/// The audit record of a customer change, written in its transaction.
async fn audited(
    txn: &impl sea_orm::ConnectionTrait,
    state: &AppState,
    viewer: &Viewer,
    t: &Membership,
    action: &str,
    customer: &str,
    detail: Value,
) -> Result<(), ApiError> {
    audit::audit(
        txn,
        audit::Audit {
            organization: None,
            partner: Some(t.id),
            actor: Some(viewer.user.id),
            action,
            target: Some(format!("customer {customer}")),
            detail,
            ip: viewer.ip.clone(),
        },
        state.clock.now(),
    )
    .await?;
    Ok(())
}

/// `POST …/customers/{customer}/allocations`: `direction` increase or decrease, `amount_usd`.
pub(crate) async fn allocate(
    State(state): State<AppState>,
    viewer: Viewer,
    Segs(partner, customer): Segs,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let (t, caller) = match acting(&state, &viewer, &partner, &customer, &headers, &body).await {
        Ok(x) => x,
        Err(resp) => return resp,
    };
    let direction = field(&body, "direction").unwrap_or_default();
    let request = AllocationRequest {
        action: Some(Value::String(direction.clone())),
        amount_usd: number(field(&body, "amount_usd")),
        limit_usd: None,
    };
    let change = match funding::Allocation::parse(request) {
        Ok(c @ (funding::Allocation::Increase(_) | funding::Allocation::Decrease(_))) => c,
        Ok(funding::Allocation::SetLimit(_)) | Err(_) => {
            let e = ApiError::InvalidAllocationAmount;
            return refused(&state, &viewer, &t, &customer, "allocation", &e).await;
        }
    };
    let reference = format!("console:{}", sessions::secret());
    let detail =
        serde_json::json!({ "direction": direction, "amount_usd": field(&body, "amount_usd") });
    let (state2, viewer2, t2, customer2) = (&state, &viewer, &t, customer.clone());
    write(
        &state,
        &viewer,
        &t,
        &customer,
        "allocation",
        |_| ("The allocation was changed.".to_string(), None),
        async move |txn| {
            // The audit record first: nothing may fail between the mirror's change (the last
            // step of `allocate`) and the commit.
            audited(
                txn,
                state2,
                viewer2,
                t2,
                "allocation_changed",
                &customer2,
                detail,
            )
            .await?;
            funding::allocate(txn, state2, &caller, &reference, &customer2, change).await
        },
    )
    .await
}

/// `POST …/customers/{customer}/rates`: `group_id`, `retail_rate_multiplier`.
pub(crate) async fn rate(
    State(state): State<AppState>,
    viewer: Viewer,
    Segs(partner, customer): Segs,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let (t, caller) = match acting(&state, &viewer, &partner, &customer, &headers, &body).await {
        Ok(x) => x,
        Err(resp) => return resp,
    };
    let group = field(&body, "group_id").unwrap_or_default();
    let request = GroupRateRequest {
        retail_rate_multiplier: number(field(&body, "retail_rate_multiplier")),
        unknown: Default::default(),
    };
    let rate = match funding::group_rate(request) {
        Ok(r) => r,
        Err(e) => return refused(&state, &viewer, &t, &customer, "rate", &e).await,
    };
    let detail = serde_json::json!({ "group_id": group, "rate": rate.to_decimal().to_string() });
    let (state2, viewer2, t2, customer2) = (&state, &viewer, &t, customer.clone());
    let reference = format!("console:{}", sessions::secret());
    write(
        &state,
        &viewer,
        &t,
        &customer,
        "rate",
        |_| ("The rate was changed.".to_string(), None),
        async move |txn| {
            audited(txn, state2, viewer2, t2, "rate_changed", &customer2, detail).await?;
            funding::set_rate(txn, state2, &caller, &reference, &customer2, &group, rate).await
        },
    )
    .await
}

/// `POST …/customers/{customer}/keys`: `name`, `group_id`, optional `budget_usd` and
/// `budget_period`.
pub(crate) async fn create_key(
    State(state): State<AppState>,
    viewer: Viewer,
    Segs(partner, customer): Segs,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let (t, caller) = match acting(&state, &viewer, &partner, &customer, &headers, &body).await {
        Ok(x) => x,
        Err(resp) => return resp,
    };
    let request = CreateKeyRequest {
        name: field(&body, "name").map(Value::String),
        group_id: number(field(&body, "group_id")),
        expires_at: None,
        max_concurrency: None,
        requests_per_minute: None,
        budget_usd: number(field(&body, "budget_usd")),
        // The period's select always sends a value: it counts only with an amount.
        budget_period: field(&body, "budget_period")
            .filter(|p| !p.trim().is_empty())
            .filter(|_| field(&body, "budget_usd").is_some_and(|a| !a.trim().is_empty()))
            .map(Value::String),
        unknown: Default::default(),
    };
    let new = match keys::NewKey::parse(request) {
        Ok(n) => n,
        Err(e) => return refused(&state, &viewer, &t, &customer, "key", &e).await,
    };
    let detail = serde_json::json!({ "name": new.name, "group_id": new.group_id });
    let (state2, viewer2, t2, customer2) = (&state, &viewer, &t, customer.clone());
    write(
        &state,
        &viewer,
        &t,
        &customer,
        "key",
        |k: &crate::dto::KeyPreview| (format!("The key {} was created.", k.name), k.key.clone()),
        async move |txn| {
            audited(txn, state2, viewer2, t2, "key_created", &customer2, detail).await?;
            keys::create(txn, state2, &caller, &customer2, new).await
        },
    )
    .await
}

/// `POST …/customers/{customer}/keys/disable`: `key_id` (SPEC's DELETE semantics).
pub(crate) async fn disable_key(
    State(state): State<AppState>,
    viewer: Viewer,
    Segs(partner, customer): Segs,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let (t, caller) = match acting(&state, &viewer, &partner, &customer, &headers, &body).await {
        Ok(x) => x,
        Err(resp) => return resp,
    };
    let key = field(&body, "key_id").unwrap_or_default();
    let detail = serde_json::json!({ "key_id": key });
    let (state2, viewer2, t2, customer2) = (&state, &viewer, &t, customer.clone());
    write(
        &state,
        &viewer,
        &t,
        &customer,
        "key",
        |_| ("The key was disabled.".to_string(), None),
        async move |txn| {
            audited(txn, state2, viewer2, t2, "key_disabled", &customer2, detail).await?;
            keys::disable(txn, state2, &caller, &customer2, &key).await
        },
    )
    .await
}

/// `POST …/customers/{customer}/invitation`: `action` reissue or revoke (a pending customer
/// only).
pub(crate) async fn invitation(
    State(state): State<AppState>,
    viewer: Viewer,
    Segs(partner, customer): Segs,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let (t, caller) = match acting(&state, &viewer, &partner, &customer, &headers, &body).await {
        Ok(x) => x,
        Err(resp) => return resp,
    };
    let Ok(row) = customers::find(&state.db, &caller, &customer).await else {
        return render::not_found(&viewer);
    };
    let reissue = match field(&body, "action").as_deref() {
        Some("reissue") => true,
        Some("revoke") => false,
        _ => return render::not_found(&viewer),
    };
    let by = Some((viewer.user.id, viewer.ip.clone()));
    let out = match invitations::revoke_or_reissue(&state, row.id, reissue, by).await {
        Ok(_) => Outcome {
            notice: Some(if reissue {
                format!("A new invitation was mailed to {}.", row.contact_email)
            } else {
                "The invitation was revoked; its link no longer works.".into()
            }),
            ..Outcome::default()
        },
        Err(message) => Outcome {
            status: Some(StatusCode::CONFLICT),
            error: Some(("invitation", "REFUSED", message)),
            ..Outcome::default()
        },
    };
    page(&state, &viewer, &t, &customer, out).await
}
