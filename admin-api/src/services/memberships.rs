//! Memberships of organizations and partner teams, and the single-use mailed links that create
//! them (sign-up, membership, reset; only a keyed hash of a link's token is stored).
//!
//! Organization roles are `owner`, `administrator`, `member`; partner roles `owner`, `admin`,
//! `operator`, `viewer`; an organization always keeps at least one owner.

use super::people::normal_email;
use super::sessions::secret;
use crate::state::AppState;
use chrono::{DateTime, Duration, Utc};
use entities::{
    console_tokens, console_users, org_members, organizations, partner_members, partners,
};
use sea_orm::{
    ActiveModelTrait, ColumnTrait, ConnectionTrait, DbErr, EntityTrait, QueryFilter, QueryOrder,
    Set,
};

/// How long a mailed sign-up or membership link is valid.
pub const TOKEN_DAYS: i64 = 7;

/// Organization roles, strongest first.
pub const ORG_ROLES: [&str; 3] = ["owner", "administrator", "member"];

/// Partner team roles, strongest first.
pub const PARTNER_ROLES: [&str; 4] = ["owner", "admin", "operator", "viewer"];

/// A membership link or sign-up link to mail: `purpose` `org_invite` (with `organization` and
/// `role`), `partner_invite` (with `partner` and `role`), `signup` or `reset`. Returns the token.
#[allow(clippy::too_many_arguments, reason = "one row's fields")]
pub async fn issue_token(
    db: &impl ConnectionTrait,
    state: &AppState,
    purpose: &str,
    email: &str,
    organization: Option<i64>,
    partner: Option<i64>,
    role: Option<&str>,
    invited_by: Option<i64>,
) -> Result<String, DbErr> {
    let token = secret();
    let now = state.clock.now();
    console_tokens::ActiveModel {
        token_hash: Set(state.hasher.hash(&token)),
        purpose: Set(purpose.to_string()),
        email: Set(normal_email(email)),
        organization_id: Set(organization),
        partner_id: Set(partner),
        role: Set(role.map(str::to_string)),
        invited_by: Set(invited_by),
        created_at: Set(now),
        expires_at: Set(now + Duration::days(TOKEN_DAYS)),
        used_at: Set(None),
        ..Default::default()
    }
    .insert(db)
    .await?;
    Ok(token)
}

/// The unused, unexpired token row of `token`.
pub async fn live_token(
    db: &impl ConnectionTrait,
    state: &AppState,
    token: &str,
) -> Result<Option<console_tokens::Model>, DbErr> {
    let now = state.clock.now();
    Ok(console_tokens::Entity::find()
        .filter(console_tokens::Column::TokenHash.eq(state.hasher.hash(token)))
        .one(db)
        .await?
        .filter(|t| t.used_at.is_none() && t.expires_at > now))
}

/// Makes `user_id` a member of `organization` with `role` (a membership already there keeps the
/// stronger role).
pub async fn join_org(
    db: &impl ConnectionTrait,
    organization: i64,
    user_id: i64,
    role: &str,
    now: DateTime<Utc>,
) -> Result<(), DbErr> {
    let existing = org_members::Entity::find()
        .filter(org_members::Column::OrganizationId.eq(organization))
        .filter(org_members::Column::UserId.eq(user_id))
        .one(db)
        .await?;
    let rank = |r: &str| ORG_ROLES.iter().position(|x| *x == r).unwrap_or(usize::MAX);
    match existing {
        Some(m) if rank(&m.role) <= rank(role) => Ok(()),
        Some(m) => {
            let mut m: org_members::ActiveModel = m.into();
            m.role = Set(role.to_string());
            m.update(db).await?;
            Ok(())
        }
        None => {
            org_members::ActiveModel {
                organization_id: Set(organization),
                user_id: Set(user_id),
                role: Set(role.to_string()),
                created_at: Set(now),
                ..Default::default()
            }
            .insert(db)
            .await?;
            Ok(())
        }
    }
}

/// Makes `user_id` a member of partner team `partner` with `role` (an existing membership is
/// left as it is).
pub async fn join_partner(
    db: &impl ConnectionTrait,
    partner: i64,
    user_id: i64,
    role: &str,
    now: DateTime<Utc>,
) -> Result<(), DbErr> {
    let existing = partner_members::Entity::find()
        .filter(partner_members::Column::PartnerId.eq(partner))
        .filter(partner_members::Column::UserId.eq(user_id))
        .one(db)
        .await?;
    if existing.is_none() {
        partner_members::ActiveModel {
            partner_id: Set(partner),
            user_id: Set(user_id),
            role: Set(role.to_string()),
            created_at: Set(now),
            ..Default::default()
        }
        .insert(db)
        .await?;
    }
    Ok(())
}

/// The organizations `user_id` belongs to, with its role, oldest membership first.
pub async fn org_memberships(
    db: &impl ConnectionTrait,
    user_id: i64,
) -> Result<Vec<(organizations::Model, String)>, DbErr> {
    let members = org_members::Entity::find()
        .filter(org_members::Column::UserId.eq(user_id))
        .order_by_asc(org_members::Column::Id)
        .all(db)
        .await?;
    let mut out = Vec::with_capacity(members.len());
    for m in members {
        if let Some(org) = organizations::Entity::find_by_id(m.organization_id)
            .one(db)
            .await?
        {
            out.push((org, m.role));
        }
    }
    Ok(out)
}

/// The partner teams `user_id` belongs to, with its role, oldest membership first.
pub async fn partner_memberships(
    db: &impl ConnectionTrait,
    user_id: i64,
) -> Result<Vec<(partners::Model, String)>, DbErr> {
    let members = partner_members::Entity::find()
        .filter(partner_members::Column::UserId.eq(user_id))
        .order_by_asc(partner_members::Column::Id)
        .all(db)
        .await?;
    let ids: Vec<i64> = members.iter().map(|m| m.partner_id).collect();
    let partners: std::collections::HashMap<i64, partners::Model> = if ids.is_empty() {
        Default::default()
    } else {
        partners::Entity::find()
            .filter(partners::Column::Id.is_in(ids))
            .all(db)
            .await?
            .into_iter()
            .map(|p| (p.id, p))
            .collect()
    };
    Ok(members
        .into_iter()
        .filter_map(|m| partners.get(&m.partner_id).cloned().map(|p| (p, m.role)))
        .collect())
}

/// `user_id`'s membership of partner team `partner`: the partner and the role (`None`: not a
/// member, which every dashboard page answers like a missing partner).
pub async fn partner_membership(
    db: &impl ConnectionTrait,
    partner: i64,
    user_id: i64,
) -> Result<Option<(partners::Model, String)>, DbErr> {
    let Some(m) = partner_members::Entity::find()
        .filter(partner_members::Column::PartnerId.eq(partner))
        .filter(partner_members::Column::UserId.eq(user_id))
        .one(db)
        .await?
    else {
        return Ok(None);
    };
    Ok(partners::Entity::find_by_id(partner)
        .one(db)
        .await?
        .map(|p| (p, m.role)))
}

/// `user_id`'s role in `organization` (`None`: not a member, which every console page answers
/// like a missing organization).
pub async fn org_role(
    db: &impl ConnectionTrait,
    organization: i64,
    user_id: i64,
) -> Result<Option<String>, DbErr> {
    Ok(org_members::Entity::find()
        .filter(org_members::Column::OrganizationId.eq(organization))
        .filter(org_members::Column::UserId.eq(user_id))
        .one(db)
        .await?
        .map(|m| m.role))
}

/// The addresses of users `ids`, in one query.
pub async fn emails_of(
    db: &impl ConnectionTrait,
    ids: impl Iterator<Item = i64>,
) -> Result<std::collections::HashMap<i64, String>, DbErr> {
    let ids: Vec<i64> = ids.collect();
    if ids.is_empty() {
        return Ok(Default::default());
    }
    Ok(console_users::Entity::find()
        .filter(console_users::Column::Id.is_in(ids))
        .all(db)
        .await?
        .into_iter()
        .map(|u| (u.id, u.email))
        .collect())
}

/// Mails a join link (`url`) for `name` with `role` to `email`; a mail failure is logged, not
/// returned (the caller shows or prints the link as well).
pub async fn mail_join_link(state: &AppState, email: &str, name: &str, role: &str, url: &str) {
    let body = format!(
        "Hello,\n\nYou are invited to join {name} on Tollgate as {role}.\n\nSign up (or sign in) with this address ({email}) within {TOKEN_DAYS} days; we then mail you a code to confirm the address is yours:\n\n{url}\n"
    );
    if let Err(e) = state
        .mailer
        .send(email, &format!("Join {name} on Tollgate"), body)
        .await
    {
        tracing::warn!(error = %e, "the sign-up link was not mailed; it is shown to the sender");
    }
}

/// The role a token acts with: a dashboard token's own (its maker's team role at creation),
/// capped by the partner's role the operator set (a `viewer` partner's tokens never write);
/// an operator-made token (no role of its own) acts with the partner's role.
pub fn effective_role(partner: &str, token: Option<&str>) -> &'static str {
    // An unknown role ranks as a viewer: it never writes.
    let rank = |r: &str| {
        PARTNER_ROLES
            .iter()
            .position(|x| *x == r)
            .unwrap_or(PARTNER_ROLES.len() - 1)
    };
    let r = match token {
        Some(t) => rank(t).max(rank(partner)),
        None => rank(partner),
    };
    PARTNER_ROLES[r]
}

/// Spends mailed link `token_id` at `now` if it is still unused (and, with `expiring`, not
/// expired): `true` when this call spent it (of two posts of one link, one wins).
pub async fn spend_token(
    db: &impl ConnectionTrait,
    token_id: i64,
    now: DateTime<Utc>,
    expiring: bool,
) -> Result<bool, DbErr> {
    use sea_orm::sea_query::Expr;
    let mut update = console_tokens::Entity::update_many()
        .col_expr(console_tokens::Column::UsedAt, Expr::value(now))
        .filter(console_tokens::Column::Id.eq(token_id))
        .filter(console_tokens::Column::UsedAt.is_null());
    if expiring {
        update = update.filter(console_tokens::Column::ExpiresAt.gt(now));
    }
    Ok(update.exec(db).await?.rows_affected == 1)
}

#[cfg(test)]
mod tests {
    use super::effective_role;

    #[test]
    fn a_token_acts_with_the_lesser_of_its_role_and_its_partners() {
        assert_eq!(effective_role("owner", None), "owner");
        assert_eq!(effective_role("viewer", None), "viewer");
        assert_eq!(effective_role("owner", Some("admin")), "admin");
        assert_eq!(effective_role("owner", Some("viewer")), "viewer");
        assert_eq!(effective_role("viewer", Some("owner")), "viewer");
        assert_eq!(effective_role("operator", Some("admin")), "operator");
        assert_eq!(
            effective_role("admin", Some("bogus")),
            "viewer",
            "unknown: a viewer"
        );
        assert_eq!(effective_role("bogus", None), "viewer");
    }
}
