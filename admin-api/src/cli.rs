//! Operator commands (the partner dashboard and organization console are outside this service).
//! Each prints one JSON document on stdout.

use crate::db::begin;
use crate::ledger;
use crate::services::memberships;
use crate::services::{billing, funding};
use crate::state::AppState;
use chrono::Utc;
use entities::status::TokenStatus;
use entities::{partner_tokens, partners};
use money::{NanoUsd, RateMultiplier};
use sea_orm::{ActiveModelTrait, ColumnTrait, EntityTrait, QueryFilter, Set};
use serde_json::{Value, json};
use std::str::FromStr;

fn decimal(s: &str, what: &str) -> Result<rust_decimal::Decimal, String> {
    rust_decimal::Decimal::from_str(s.trim())
        .map_err(|_| format!("{what}: {s:?} is not a decimal number"))
}

/// Validated `partner create` input.
pub struct NewPartner {
    pub name: String,
    pub min_rate: RateMultiplier,
    pub funding: NanoUsd,
    pub role: String,
    pub scopes: Vec<String>,
}

impl NewPartner {
    pub fn parse(
        name: &str,
        min_rate: &str,
        funding: &str,
        role: &str,
        scopes: &[String],
    ) -> Result<NewPartner, String> {
        if name.trim().is_empty() {
            return Err("--name must not be empty".into());
        }
        let min_rate = RateMultiplier::from_decimal(decimal(min_rate, "--min-rate-multiplier")?)
            .ok_or("--min-rate-multiplier must be positive with at most 6 decimals")?;
        let funding = NanoUsd::from_decimal_usd(decimal(funding, "--funding-usd")?)
            .filter(|n| !n.is_negative())
            .ok_or("--funding-usd must be a non-negative amount with at most 9 decimals")?;
        if !matches!(role, "owner" | "admin" | "operator" | "viewer") {
            return Err("--role must be owner, admin, operator or viewer".into());
        }
        let scopes = validate_scopes(scopes)?;
        Ok(NewPartner {
            name: name.trim().into(),
            min_rate,
            funding,
            role: role.into(),
            scopes,
        })
    }
}

fn validate_scopes(scopes: &[String]) -> Result<Vec<String>, String> {
    let scopes: Vec<String> = scopes
        .iter()
        .flat_map(|s| s.split(','))
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect();
    if scopes.is_empty() {
        return Err("--scope is required (partner:read or partner:write)".into());
    }
    if let Some(bad) = scopes
        .iter()
        .find(|s| !matches!(s.as_str(), "partner:read" | "partner:write"))
    {
        return Err(format!(
            "--scope {bad:?}: must be partner:read or partner:write"
        ));
    }
    Ok(scopes)
}

async fn mint_token(
    state: &AppState,
    txn: &impl sea_orm::ConnectionTrait,
    partner_id: i64,
    scopes: &[String],
) -> Result<(i64, String), String> {
    let (row, secret) = crate::services::partner_tokens::mint(
        state,
        txn,
        partner_id,
        scopes,
        None,
        None,
        Utc::now(),
    )
    .await
    .map_err(|e| e.to_string())?;
    Ok((row.id, secret.expose().to_string()))
}

/// `partner create`: the partner, its first token and its initial funding.
pub async fn partner_create(state: &AppState, new: NewPartner) -> Result<Value, String> {
    let txn = begin(&state.db).await.map_err(|e| e.to_string())?;
    let partner = partners::ActiveModel {
        name: Set(new.name),
        min_rate_multiplier_ppm: Set(new.min_rate.ppm()),
        role: Set(new.role),
        created_at: Set(Utc::now()),
        ..Default::default()
    }
    .insert(&txn)
    .await
    .map_err(|e| e.to_string())?;
    let (token_id, token) = mint_token(state, &txn, partner.id, &new.scopes).await?;
    ledger::account(&txn, &ledger::AccountRef::partner_available(partner.id))
        .await
        .map_err(|e| e.to_string())?;
    if new.funding.is_positive() {
        funding::fund(
            &txn,
            partner.id,
            new.funding,
            &format!("partner:{}:initial-funding", partner.id),
        )
        .await
        .map_err(|e| e.to_string())?;
    }
    txn.commit().await.map_err(|e| e.to_string())?;
    Ok(json!({
        "partner_id": partner.id,
        "name": partner.name,
        "role": partner.role,
        "token_id": token_id,
        "token": token,
        "scopes": new.scopes,
        "available_funding_usd": crate::dto::usd_json(new.funding),
    }))
}

/// `partner token`: a new token; every earlier token of the partner is revoked (rotation).
pub async fn partner_token(
    state: &AppState,
    partner_id: i64,
    scopes: &[String],
) -> Result<Value, String> {
    let scopes = validate_scopes(scopes)?;
    let txn = begin(&state.db).await.map_err(|e| e.to_string())?;
    partners::Entity::find_by_id(partner_id)
        .one(&txn)
        .await
        .map_err(|e| e.to_string())?
        .ok_or(format!("partner {partner_id} does not exist"))?;
    let old = partner_tokens::Entity::find()
        .filter(partner_tokens::Column::PartnerId.eq(partner_id))
        .filter(partner_tokens::Column::Status.eq(TokenStatus::Active))
        .all(&txn)
        .await
        .map_err(|e| e.to_string())?;
    let revoked = old.len();
    for t in old {
        let mut row: partner_tokens::ActiveModel = t.into();
        row.status = Set(TokenStatus::Revoked);
        row.revoked_at = Set(Some(Utc::now()));
        row.update(&txn).await.map_err(|e| e.to_string())?;
    }
    let (token_id, token) = mint_token(state, &txn, partner_id, &scopes).await?;
    txn.commit().await.map_err(|e| e.to_string())?;
    Ok(
        json!({"partner_id": partner_id, "token_id": token_id, "token": token, "scopes": scopes, "revoked_tokens": revoked}),
    )
}

/// `partner fund`: credits partner funding (what a paid top-up does). `reference` makes a retried
/// command a no-op instead of a second credit.
pub async fn partner_fund(
    state: &AppState,
    partner_id: i64,
    amount: &str,
    reference: Option<&str>,
) -> Result<Value, String> {
    let amount = NanoUsd::from_decimal_usd(decimal(amount, "--amount-usd")?)
        .filter(|n| n.is_positive())
        .ok_or("--amount-usd must be a positive amount with at most 9 decimals")?;
    let reference = match reference {
        Some(r) => format!("partner:{partner_id}:fund:{r}"),
        None => format!("partner:{partner_id}:fund:{}", uuid::Uuid::new_v4()),
    };
    let txn = begin(&state.db).await.map_err(|e| e.to_string())?;
    partners::Entity::find_by_id(partner_id)
        .one(&txn)
        .await
        .map_err(|e| e.to_string())?
        .ok_or(format!("partner {partner_id} does not exist"))?;
    let posted = funding::fund(&txn, partner_id, amount, &reference)
        .await
        .map_err(|e| e.to_string())?;
    txn.commit().await.map_err(|e| e.to_string())?;
    let available = ledger::balance(
        &state.db,
        &ledger::AccountRef::partner_available(partner_id).code,
    )
    .await
    .map_err(|e| e.to_string())?;
    Ok(json!({
        "partner_id": partner_id,
        "credited_usd": crate::dto::usd_json(amount),
        "already_posted": posted == ledger::Posted::AlreadyPosted,
        "available_funding_usd": crate::dto::usd_json(available),
    }))
}

/// `billing-token create|rotate|revoke`, recorded in the organization's audit log as the
/// operator's command (no console user).
pub async fn billing_token(state: &AppState, action: &str, org_id: i64) -> Result<Value, String> {
    let audit = |what: &'static str| crate::services::audit::Audit {
        organization: Some(org_id),
        partner: None,
        actor: None,
        action: what,
        target: None,
        detail: json!({ "by": "operator command" }),
        ip: None,
    };
    match action {
        "create" | "rotate" => {
            let what = if action == "rotate" {
                "billing_token_rotated"
            } else {
                "billing_token_created"
            };
            let secret =
                billing::issue_token(state, org_id, action == "rotate", Some(audit(what))).await?;
            Ok(
                json!({"organization_id": org_id, "token": secret.expose(), "preview": credentials::preview(secret.expose())}),
            )
        }
        "revoke" => {
            let n =
                billing::revoke_token(state, org_id, Some(audit("billing_token_revoked"))).await?;
            Ok(json!({"organization_id": org_id, "revoked_tokens": n}))
        }
        other => Err(format!("unknown billing-token action {other:?}")),
    }
}

/// `invitation revoke|reissue --customer ID` (see `services::invitations::revoke_or_reissue`).
pub async fn invitation(state: &AppState, action: &str, customer_id: i64) -> Result<Value, String> {
    let reissue = match action {
        "revoke" => false,
        "reissue" => true,
        other => return Err(format!("unknown invitation action {other:?}")),
    };
    let done =
        crate::services::invitations::revoke_or_reissue(state, customer_id, reissue, None).await?;
    serde_json::to_value(done).map_err(|e| e.to_string())
}

/// `user invite --email E (--org ID | --partner ID) --role ROLE`: a single-use sign-up link for
/// `email` to join the organization or partner team with `role` (organization roles `owner`,
/// `administrator`, `member`; partner roles `owner`, `admin`, `operator`, `viewer`), mailed
/// through `[mail]` and printed as JSON.
pub async fn user_invite(
    state: &AppState,
    email: &str,
    org: Option<i64>,
    partner: Option<i64>,
    role: &str,
) -> Result<Value, String> {
    use crate::services::people;
    let email = people::normal_email(email);
    if !crate::text::valid_email(&email) {
        return Err(format!("--email {email:?} is not a valid email address"));
    }
    let (purpose, name) = match (org, partner) {
        (Some(id), None) => {
            if !memberships::ORG_ROLES.contains(&role) {
                return Err(format!(
                    "--role must be one of {:?} for an organization",
                    memberships::ORG_ROLES
                ));
            }
            let org = crate::services::customers::organization(&state.db, id)
                .await
                .map_err(|e| e.to_string())?
                .ok_or_else(|| format!("organization {id} does not exist"))?;
            ("org_invite", org.name)
        }
        (None, Some(id)) => {
            if !memberships::PARTNER_ROLES.contains(&role) {
                return Err(format!(
                    "--role must be one of {:?} for a partner team",
                    memberships::PARTNER_ROLES
                ));
            }
            use sea_orm::EntityTrait;
            let partner = entities::partners::Entity::find_by_id(id)
                .one(&state.db)
                .await
                .map_err(|e| e.to_string())?
                .ok_or_else(|| format!("partner {id} does not exist"))?;
            ("partner_invite", partner.name)
        }
        _ => return Err("give exactly one of --org and --partner".into()),
    };
    let token = memberships::issue_token(
        &state.db,
        state,
        purpose,
        &email,
        org,
        partner,
        Some(role),
        None,
    )
    .await
    .map_err(|e| e.to_string())?;
    let url = state.public_url(&format!("/console/join/{token}"));
    memberships::mail_join_link(state, &email, &name, role, &url).await;
    Ok(serde_json::json!({
        "email": email,
        "organization_id": org,
        "partner_id": partner,
        "role": role,
        "sign_up_url": url,
        "expires_in_days": memberships::TOKEN_DAYS,
    }))
}

/// `margin --from --to`: the operator's margin report ([`crate::services::margin`]) as JSON,
/// amounts in USD as decimal strings, an unknown supplier cost or margin as `null`.
pub async fn margin(
    state: &AppState,
    from: Option<&str>,
    to: Option<&str>,
) -> Result<Value, String> {
    let today = Utc::now().date_naive();
    let day = |s: Option<&str>, flag: &str| match s {
        None => Ok(today),
        Some(s) => chrono::NaiveDate::parse_from_str(s.trim(), "%Y-%m-%d")
            .map_err(|_| format!("{flag} {s:?}: not a date (YYYY-MM-DD)")),
    };
    let (from, to) = (day(from, "--from")?, day(to, "--to")?);
    let days = (to - from).num_days() + 1;
    if !(1..=crate::services::margin::MAX_DAYS).contains(&days) {
        return Err(format!(
            "--from {from} --to {to}: the range must be 1 to {} days, --from first",
            crate::services::margin::MAX_DAYS
        ));
    }
    let report = crate::services::margin::report(&state.db, from, to)
        .await
        .map_err(|e| e.to_string())?;
    let rows: Vec<Value> = report.rows.iter().map(margin_row).collect();
    let mut totals = margin_row(&report.totals);
    if let Some(t) = totals.as_object_mut() {
        for k in ["day", "account", "model"] {
            t.remove(k);
        }
    }
    Ok(json!({"from": from.to_string(), "to": to.to_string(), "rows": rows, "totals": totals}))
}

fn margin_row(r: &crate::services::margin::MarginRow) -> Value {
    let usd = |n: NanoUsd| n.to_decimal_usd().to_string();
    json!({
        "day": r.day.to_string(),
        "account": r.account,
        "model": r.model,
        "calls": r.calls,
        "attempts": r.attempts,
        "input_tokens": r.input_tokens,
        "output_tokens": r.output_tokens,
        "cached_tokens": r.cached_tokens,
        "cache_write_tokens": r.cache_write_tokens,
        "images": r.images,
        "video_seconds": r.video_seconds,
        "supplier_cost_usd": (r.supplier_cost_unknown == 0).then(|| usd(r.supplier_cost)),
        "supplier_cost_known_usd": usd(r.supplier_cost),
        "calls_without_supplier_cost": r.supplier_cost_unknown,
        "wholesale_usd": usd(r.wholesale),
        "retail_usd": usd(r.retail),
        "revenue_usd": usd(r.revenue),
        "margin_usd": r.margin().map(usd),
    })
}

/// `reconcile-suppliers`: a reconciliation round now ([`crate::workers::supplier_usage`]), each
/// day × account × model as JSON (the drift's cost in USD, `null` when a price is unknown). An
/// error names every report that could not be read (the others are written all the same).
pub async fn reconcile_suppliers(state: &AppState) -> Result<Value, String> {
    use crate::workers::supplier_usage::{Check, report::Tokens};
    let checks = crate::workers::supplier_usage::round(state, Utc::now()).await?;
    let side = |t: &Tokens| {
        json!({"requests": t.requests, "input_tokens": t.input, "output_tokens": t.output,
               "cached_tokens": t.cached, "cache_write_tokens": t.cache_write,
               "cache_write_1h_tokens": t.cache_write_1h})
    };
    let row = |c: &Check| {
        json!({
            "day": c.day.to_string(),
            "account": c.account,
            "model": c.model,
            "ledger": side(&c.ours),
            "supplier": side(&c.theirs),
            "drift_input_tokens": c.theirs.input - c.ours.input,
            "drift_output_tokens": c.theirs.output - c.ours.output,
            "drift_cost_usd": c.drift_cost.map(|n| n.to_decimal_usd().to_string()),
            "over_tolerance": c.over_tolerance,
        })
    };
    let flagged = checks.iter().filter(|c| c.over_tolerance).count();
    Ok(json!({"checks": checks.iter().map(row).collect::<Vec<_>>(), "over_tolerance": flagged}))
}
