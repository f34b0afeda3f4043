//! A partner's customers in the dashboard: the searchable, paged list (`services::customer_list`)
//! and the create form, which follows `PUT /partner/v1/customers/by-external-id/…` exactly (the
//! same parsing, rules and reasons, through `services::customers`), showing a refusal's reason
//! next to its field. Every member reads; owners, admins and operators create (customer work).

use super::amount::{Amount, Figure, amount};
use super::form;
use super::gate::{self, Membership};
use super::render::{self, render};
use super::session::Viewer;
use crate::dto::CreateCustomerRequest;
use crate::error::ApiError;
use crate::http::params::Seg;
use crate::services::audit;
use crate::services::customer_list::{self, Available};
use crate::services::customers;
use crate::services::sessions;
use crate::state::AppState;
use askama::Template;
use axum::body::Bytes;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use serde_json::Value;
use std::collections::HashMap;

/// One row of the list.
struct Row {
    id: i64,
    name: String,
    external_id: String,
    status: String,
    available: Figure,
    spend_7d: Amount,
}

/// The create form's values (echoed back when refused) and its refusal.
#[derive(Default)]
struct Form {
    name: String,
    external_id: String,
    contact_email: String,
    billing_email: String,
    allocation: String,
    rate: String,
    /// (field, reason code, message)
    error: Option<(&'static str, &'static str, String)>,
    /// (external id, message) after a create.
    created: Option<(String, String)>,
}

#[derive(Template)]
#[template(path = "console/partner_customers.html")]
struct Page<'a> {
    signed_in: Option<&'a str>,
    csrf: &'a str,
    partner_id: i64,
    tab: &'a str,
    name: &'a str,
    role: &'a str,
    search: &'a str,
    rows: Vec<Row>,
    total: u64,
    page: u64,
    pages: u64,
    prev: Option<String>,
    next: Option<String>,
    can_create: bool,
    floor: String,
    form: Form,
}

/// The list page of `t`, with `form` in the create section.
async fn page(
    state: &AppState,
    viewer: &Viewer,
    t: Membership,
    search: &str,
    page_no: u64,
    status: StatusCode,
    form: Form,
) -> Response {
    let now = state.clock.now();
    let listing = match customer_list::list(state, t.id, search, page_no, now).await {
        Ok(l) => l,
        Err(e) => {
            tracing::error!(error = %e, "customer list not read");
            return render::unavailable();
        }
    };
    let floor = match gate::console_caller(state, &t).await {
        Ok(c) => customers::highest_floor(state, c.min_rate),
        Err(resp) => return resp,
    };
    let link = |p: u64| {
        let q: String = url::form_urlencoded::Serializer::new(String::new())
            .append_pair("q", search)
            .append_pair("page", &p.to_string())
            .finish();
        format!("/console/partners/{}/customers?{q}", t.id)
    };
    let rows = listing
        .rows
        .iter()
        .map(|r| Row {
            id: r.customer.id,
            name: r.customer.display_name.clone(),
            external_id: r.customer.external_id.clone(),
            status: sea_orm::ActiveEnum::to_value(&r.status).replace('_', " "),
            available: match r.available {
                Available::Known(n) => Figure::Usd(amount(n)),
                Available::Reconciling => Figure::Note("being reconciled"),
                Available::Pending => Figure::Note("not active yet"),
            },
            spend_7d: amount(r.spend_7d),
        })
        .collect();
    render(
        status,
        &Page {
            signed_in: Some(&viewer.user.email),
            csrf: &viewer.session.csrf,
            partner_id: t.id,
            tab: "customers",
            name: &t.name,
            role: &t.role,
            search,
            rows,
            total: listing.total,
            page: listing.page,
            pages: listing.pages,
            prev: (listing.page > 1).then(|| link(listing.page - 1)),
            next: (listing.page < listing.pages).then(|| link(listing.page + 1)),
            can_create: t.may(&gate::CUSTOMER_WORK),
            floor: floor.to_decimal().to_string(),
            form,
        },
    )
}

/// `GET /console/partners/{partner}/customers?q=…&page=…`.
pub(crate) async fn list(
    State(state): State<AppState>,
    viewer: Viewer,
    Seg(partner): Seg,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let t = match gate::team(&state, &viewer, &partner).await {
        Ok(t) => t,
        Err(resp) => return resp,
    };
    let search = q.get("q").map(|s| s.trim().to_string()).unwrap_or_default();
    let page_no = q.get("page").and_then(|p| p.parse().ok()).unwrap_or(1);
    page(
        &state,
        &viewer,
        t,
        &search,
        page_no,
        StatusCode::OK,
        Form::default(),
    )
    .await
}

/// The field a create refusal belongs to, its reason code and what to tell the person.
fn placed(e: &ApiError, form: &Form) -> (&'static str, &'static str, String) {
    let field = match e {
        ApiError::InvalidExternalCustomerId | ApiError::ExternalCustomerConflict => "external_id",
        ApiError::InvalidCustomerContact if crate::text::valid_email(form.contact_email.trim()) => {
            "billing_email"
        }
        ApiError::InvalidCustomerContact => "contact_email",
        ApiError::InvalidInitialAllocation | ApiError::FundingInsufficient { .. } => "allocation",
        ApiError::InvalidRetailRate | ApiError::RetailRateBelowFloor { .. } => "rate",
        _ => "name",
    };
    (field, e.parts().1.unwrap_or("REFUSED"), form::explain(e))
}

impl Form {
    /// The create form as posted.
    fn read(body: &[u8]) -> Form {
        let posted = form::Posted::read(body);
        let get = |k: &str| posted.text(k);
        Form {
            name: get("name"),
            external_id: get("external_id"),
            contact_email: get("contact_email"),
            billing_email: get("billing_email"),
            allocation: get("initial_allocation_usd"),
            rate: get("retail_rate_multiplier"),
            ..Form::default()
        }
    }

    /// The partner API's create request the form stands for (its parsing and rules decide).
    fn request(&self) -> CreateCustomerRequest {
        CreateCustomerRequest {
            name: Some(Value::String(self.name.clone())),
            slug: None,
            contact_email: Some(Value::String(self.contact_email.clone())),
            billing_email: (!self.billing_email.trim().is_empty())
                .then(|| Value::String(self.billing_email.clone())),
            initial_allocation_usd: form::number(&self.allocation),
            retail_rate_multiplier: form::number(&self.rate),
            unknown: Default::default(),
        }
    }
}

/// `POST /console/partners/{partner}/customers`: `name`, `external_id`, `contact_email`,
/// optional `billing_email`, `initial_allocation_usd`, `retail_rate_multiplier`.
pub(crate) async fn create(
    State(state): State<AppState>,
    viewer: Viewer,
    Seg(partner): Seg,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let t = match gate::team_change(
        &state,
        &viewer,
        &partner,
        &headers,
        &body,
        &gate::CUSTOMER_WORK,
    )
    .await
    {
        Ok(t) => t,
        Err(resp) => return resp,
    };
    let mut form = Form::read(&body);
    let request = form.request();
    let caller = match gate::console_caller(&state, &t).await {
        Ok(c) => c,
        Err(resp) => return resp,
    };
    let outcome = async {
        let external = customers::external_id(&form.external_id)?;
        let new = customers::NewCustomer::parse(request)?;
        let txn = crate::db::begin(&state.db).await?;
        let reference = format!("console:{}", sessions::secret());
        let done = customers::create(&txn, &state, &caller, &reference, &external, new).await?;
        let created = done.data.created == Some(true);
        if created {
            let audit = audit::Audit {
                organization: None,
                partner: Some(t.id),
                actor: Some(viewer.user.id),
                action: "customer_created",
                target: Some(external.clone()),
                detail: serde_json::json!({ "name": form.name }),
                ip: viewer.ip.clone(),
            };
            audit::audit(&txn, audit, state.clock.now()).await?;
        }
        txn.commit().await?;
        crate::services::effects::apply(&state, done.effects).await;
        Ok::<_, ApiError>((external, created))
    }
    .await;
    match outcome {
        Ok((external, created)) => {
            let notice = if created {
                format!("{} was created and invited.", form.name.trim())
            } else {
                let name = form.name.trim();
                format!("{name} already exists with this external id and contact email.")
            };
            let keep = Form {
                created: Some((external, notice)),
                ..Form::default()
            };
            page(&state, &viewer, t, "", 1, StatusCode::OK, keep).await
        }
        Err(ApiError::Unavailable | ApiError::Internal) => render::unavailable(),
        Err(e) => {
            let status = e.parts().0;
            form.error = Some(placed(&e, &form));
            page(&state, &viewer, t, "", 1, status, form).await
        }
    }
}
