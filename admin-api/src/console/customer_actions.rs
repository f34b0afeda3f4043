//! What a partner does to one customer from its page in the dashboard: the low-balance alert,
//! the automatic allocation, allocations, the retail rate, keys and the invitation. Each post
//! passes the gate (`gate::team_change`, customer work), runs the partner API's service with the
//! API's rules and idempotency, writes its audit record in the same transaction, and shows the
//! customer's page again with what happened.

use super::customer::*;
use super::form;
use super::gate::{self, Membership};
use super::render::{self};
use super::session::Viewer;
use crate::caller::Caller;
use crate::error::ApiError;
use crate::http::form::field;
use crate::http::params::Segs;
use crate::services::alerts;
use crate::services::allocations;
use crate::services::audit;
use crate::services::customers::CustomerError;
use crate::services::effects::{Effect, Written, apply};
use crate::services::sessions;
use crate::services::{customers, funding, invitations, keys};
use crate::state::AppState;
use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::Value;

/// `POST …/customers/{customer}/alert`: `threshold_usd` (empty: remove the alert).
pub(crate) async fn alert(post: Acting) -> Response {
    let (state, caller, customer, body) = (&post.state, &post.caller, &post.customer, &post.body);
    let form = form::AlertForm::read(body);
    let request = form.request();
    let raw = form.threshold_usd;
    let threshold = match alerts::parse_alert(request) {
        Ok(t) => t,
        Err(e) => return post.refused("alert", e.into()).await,
    };
    let change = Change {
        form: "alert",
        action: "alert_changed",
        detail: serde_json::json!({ "threshold_usd": raw }),
    };
    post.write(
        change,
        |v: &crate::dto::AlertView| {
            let text = match v.threshold_usd {
                Some(t) => format!("The low-balance alert is set at {} USD.", form::usd(t.0)),
                None => "The low-balance alert was removed.".to_string(),
            };
            (text, None)
        },
        async |txn| {
            let view = alerts::set_customer_alert(txn, state, caller, customer, threshold).await?;
            Ok::<_, ApiError>(Written::plain(view))
        },
    )
    .await
}

/// `POST …/customers/{customer}/automatic-allocation`: `action` = `set` (with `below_usd`,
/// `amount_usd`, `monthly_cap_usd`) or `remove`.
pub(crate) async fn automatic(post: Acting) -> Response {
    let (state, caller, customer, body) = (&post.state, &post.caller, &post.customer, &post.body);
    let posted = form::AutoAllocationForm::read(body);
    let rule = if let Some(request) = posted.request() {
        match allocations::parse_rule(request) {
            Ok(r) => Some(r),
            Err(e) => return post.refused("automatic", e.into()).await,
        }
    } else {
        None
    };
    let change = Change {
        form: "automatic",
        action: "automatic_allocation_changed",
        detail: serde_json::json!({
            "below_usd": posted.posted.get("below_usd"),
            "amount_usd": posted.posted.get("amount_usd"),
            "monthly_cap_usd": posted.posted.get("monthly_cap_usd"),
            "removed": rule.is_none(),
        }),
    };
    post.write(
        change,
        |v: &crate::dto::AutoAllocationView| {
            let text = if v.rule.is_some() {
                "The automatic allocation is set."
            } else {
                "The automatic allocation was removed."
            };
            (text.to_string(), None)
        },
        async |txn| {
            let view = allocations::set_customer_rule(txn, state, caller, customer, rule).await?;
            Ok::<_, ApiError>(Written::plain(view))
        },
    )
    .await
}

/// A post to one customer's page past its checks (origin, CSRF, membership, a role that does
/// customer work, a customer of this partner): what every handler here starts from.
pub(crate) struct Acting {
    state: AppState,
    viewer: Viewer,
    t: Membership,
    caller: Caller,
    customer: String,
    body: Bytes,
}

impl FromRequest<AppState> for Acting {
    type Rejection = Response;

    async fn from_request(req: Request, state: &AppState) -> Result<Acting, Response> {
        let (mut parts, body) = req.into_parts();
        let viewer = Viewer::from_request_parts(&mut parts, state).await?;
        let Ok(Segs(partner, customer)) = Segs::from_request_parts(&mut parts, state).await;
        let headers = parts.headers.clone();
        let body = Bytes::from_request(Request::from_parts(parts, body), state)
            .await
            .map_err(IntoResponse::into_response)?;
        let (t, caller) = acting(state, &viewer, &partner, &customer, &headers, &body).await?;
        Ok(Acting {
            state: state.clone(),
            viewer,
            t,
            caller,
            customer,
            body,
        })
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
        Err(CustomerError::NotFound) => Err(render::not_found(viewer)),
        Err(_) => Err(render::unavailable()),
    }
}

/// The refusal of `e` on form `form`: its reason code and a sentence.
pub(super) fn refusal(form: &'static str, e: &ApiError) -> Refusal {
    (form, e.parts().1.unwrap_or("REFUSED"), form::explain(e))
}

/// What a post changes: the form it came from (where a refusal shows), the audit record's
/// action and detail.
pub(super) struct Change {
    pub form: &'static str,
    pub action: &'static str,
    pub detail: Value,
}

impl Acting {
    /// Runs a partner API write in one transaction, its audit record first (nothing may fail between
    /// a wallet mirror's change, the last step of an allocation, and the commit), applies its effects
    /// after the commit, and answers the page with `notice` (or the refusal on the change's form).
    async fn write<T, E>(
        &self,
        change: Change,
        notice: impl FnOnce(&T) -> (String, Option<String>),
        run: impl AsyncFnOnce(&sea_orm::DatabaseTransaction) -> Result<Written<T>, E>,
    ) -> Response
    where
        ApiError: From<E>,
    {
        let (state, viewer, t, customer) =
            (&self.state, &self.viewer, &self.t, self.customer.as_str());
        let form = change.form;
        let done = async {
            let txn = crate::db::begin(&state.db).await?;
            audited(
                &txn,
                state,
                viewer,
                t,
                change.action,
                customer,
                change.detail,
            )
            .await?;
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
            Err(e) => self.refused(form, e).await,
        }
    }

    /// The page with the refusal `e` shown on form `form`.
    async fn refused(&self, form: &'static str, e: ApiError) -> Response {
        let out = Outcome {
            status: Some(e.parts().0),
            error: Some(refusal(form, &e)),
            ..Outcome::default()
        };
        page(&self.state, &self.viewer, &self.t, &self.customer, out).await
    }
}

/// The audit record of a customer change, written in its transaction.
pub(super) async fn audited(
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
pub(crate) async fn allocate(post: Acting) -> Response {
    let (state, caller, customer, body) = (&post.state, &post.caller, &post.customer, &post.body);
    let posted = form::AllocationForm::read(body);
    let change = match funding::Allocation::parse(posted.request()) {
        Ok(c @ (funding::Allocation::Increase(_) | funding::Allocation::Decrease(_))) => c,
        Ok(funding::Allocation::SetLimit(_)) | Err(_) => {
            let e = ApiError::InvalidAllocationAmount;
            return post.refused("allocation", e).await;
        }
    };
    let reference = format!("console:{}", sessions::secret());
    let detail =
        serde_json::json!({ "direction": posted.direction, "amount_usd": posted.amount_usd });
    let what = Change {
        form: "allocation",
        action: "allocation_changed",
        detail,
    };
    post.write(
        what,
        |_| ("The allocation was changed.".to_string(), None),
        async |txn| funding::allocate(txn, state, caller, &reference, customer, change).await,
    )
    .await
}

/// `POST …/customers/{customer}/rates`: `group_id`, `retail_rate_multiplier`.
pub(crate) async fn rate(post: Acting) -> Response {
    let (state, caller, customer, body) = (&post.state, &post.caller, &post.customer, &post.body);
    let posted = form::RateForm::read(body);
    let group = posted.group_id.clone();
    let rate = match funding::group_rate(posted.request()) {
        Ok(r) => r,
        Err(e) => return post.refused("rate", e.into()).await,
    };
    let change = Change {
        form: "rate",
        action: "rate_changed",
        detail: serde_json::json!({ "group_id": group, "rate": rate.to_decimal().to_string() }),
    };
    let reference = format!("console:{}", sessions::secret());
    post.write(
        change,
        |_| ("The rate was changed.".to_string(), None),
        async |txn| funding::set_rate(txn, state, caller, &reference, customer, &group, rate).await,
    )
    .await
}

/// `POST …/customers/{customer}/keys`: `name`, `group_id`, optional `budget_usd` and
/// `budget_period`.
pub(crate) async fn create_key(post: Acting) -> Response {
    let (state, caller, customer, body) = (&post.state, &post.caller, &post.customer, &post.body);
    let new = match keys::NewKey::parse(form::KeyForm::read(body).request()) {
        Ok(n) => n,
        Err(e) => return post.refused("key", e.into()).await,
    };
    let change = Change {
        form: "key",
        action: "key_created",
        detail: serde_json::json!({ "name": new.name, "group_id": new.group_id }),
    };
    post.write(
        change,
        |k: &crate::dto::KeyPreview| (format!("The key {} was created.", k.name), k.key.clone()),
        async |txn| keys::create(txn, state, caller, customer, new).await,
    )
    .await
}

/// `POST …/customers/{customer}/keys/disable`: `key_id` (SPEC's DELETE semantics).
pub(crate) async fn disable_key(post: Acting) -> Response {
    let (state, caller, customer, body) = (&post.state, &post.caller, &post.customer, &post.body);
    let key = field(body, "key_id").unwrap_or_default();
    let change = Change {
        form: "key",
        action: "key_disabled",
        detail: serde_json::json!({ "key_id": key }),
    };
    post.write(
        change,
        |_| ("The key was disabled.".to_string(), None),
        async |txn| keys::disable(txn, state, caller, customer, &key).await,
    )
    .await
}

/// `POST …/customers/{customer}/invitation`: `action` reissue or revoke (a pending customer
/// only).
pub(crate) async fn invitation(post: Acting) -> Response {
    let (state, viewer, t, caller, customer, body) = (
        &post.state,
        &post.viewer,
        &post.t,
        &post.caller,
        &post.customer,
        &post.body,
    );
    let Ok(row) = customers::find(&state.db, caller, customer).await else {
        return render::not_found(viewer);
    };
    let reissue = match field(body, "action").as_deref() {
        Some("reissue") => true,
        Some("revoke") => false,
        _ => return render::not_found(viewer),
    };
    let by = Some((viewer.user.id, viewer.ip.clone()));
    let out = match invitations::revoke_or_reissue(state, row.id, reissue, by).await {
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
    page(state, viewer, t, customer, out).await
}
