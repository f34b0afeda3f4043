//! Teams: the people of an organization (roles `owner`, `administrator`, `member`) and of a
//! partner (SPEC's roles `owner`, `admin`, `operator`, `viewer`). One set of rules for both: a
//! member list with addresses, open sign-up links, role changes and removals that always leave
//! one owner (checked under a lock), and the team's audit log.

use super::memberships::{ORG_ROLES, PARTNER_ROLES, emails_of};
use chrono::{DateTime, Utc};
use entities::status::TokenStatus;
use entities::{
    audit_records, console_tokens, console_users, org_members, partner_members, partner_tokens,
};
use sea_orm::{
    ActiveModelTrait, ColumnTrait, ConnectionTrait, DbErr, EntityTrait, QueryFilter, QueryOrder,
    QuerySelect, Set,
};

/// An organization's or a partner's team.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Team {
    Org(i64),
    Partner(i64),
}

impl Team {
    /// The roles of this kind of team, most able first.
    pub fn roles(self) -> &'static [&'static str] {
        match self {
            Team::Org(_) => &ORG_ROLES,
            Team::Partner(_) => &PARTNER_ROLES,
        }
    }

    /// The roles that manage this team: they invite, change roles and read the audit log.
    pub fn managers(self) -> &'static [&'static str] {
        match self {
            Team::Org(_) => &["owner"],
            Team::Partner(_) => &["owner", "admin"],
        }
    }

    /// The purpose of this team's sign-up links (`console_tokens.purpose`).
    pub fn invite_purpose(self) -> &'static str {
        match self {
            Team::Org(_) => "org_invite",
            Team::Partner(_) => "partner_invite",
        }
    }

    /// The organization, for an organization's team.
    pub fn organization(self) -> Option<i64> {
        match self {
            Team::Org(id) => Some(id),
            Team::Partner(_) => None,
        }
    }

    /// The partner, for a partner's team.
    pub fn partner(self) -> Option<i64> {
        match self {
            Team::Org(_) => None,
            Team::Partner(id) => Some(id),
        }
    }
}

/// One member of a team.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Membership {
    pub id: i64,
    pub user_id: i64,
    pub role: String,
    pub created_at: DateTime<Utc>,
}

/// Why a membership change was refused.
#[derive(Debug, thiserror::Error)]
pub enum MemberError {
    /// no such member in this team
    #[error("No such member")]
    NotFound,
    /// not one of the team's roles
    #[error("Choose one of the roles shown")]
    BadRole,
    /// the one changing may not change this member (an admin and an owner)
    #[error("Only an owner may change an owner")]
    Forbidden,
    /// the change would leave the team without an owner
    #[error("There must always be at least one owner: make someone else owner first")]
    LastOwner,
    /// a database failure
    #[error("database error: {0}")]
    Db(#[from] DbErr),
}

/// The team's memberships, oldest first (`lock`: `FOR UPDATE`, in a transaction).
async fn memberships(
    db: &impl ConnectionTrait,
    team: Team,
    lock: bool,
) -> Result<Vec<Membership>, DbErr> {
    Ok(match team {
        Team::Org(id) => {
            let mut q = org_members::Entity::find()
                .filter(org_members::Column::OrganizationId.eq(id))
                .order_by_asc(org_members::Column::Id);
            if lock {
                q = q.lock_exclusive();
            }
            q.all(db)
                .await?
                .into_iter()
                .map(|m| Membership {
                    id: m.id,
                    user_id: m.user_id,
                    role: m.role,
                    created_at: m.created_at,
                })
                .collect()
        }
        Team::Partner(id) => {
            let mut q = partner_members::Entity::find()
                .filter(partner_members::Column::PartnerId.eq(id))
                .order_by_asc(partner_members::Column::Id);
            if lock {
                q = q.lock_exclusive();
            }
            q.all(db)
                .await?
                .into_iter()
                .map(|m| Membership {
                    id: m.id,
                    user_id: m.user_id,
                    role: m.role,
                    created_at: m.created_at,
                })
                .collect()
        }
    })
}

/// The members of `team` with their addresses, oldest first.
pub async fn members_of(
    db: &impl ConnectionTrait,
    team: Team,
) -> Result<Vec<(Membership, String)>, DbErr> {
    let rows = memberships(db, team, false).await?;
    let emails = emails_of(db, rows.iter().map(|m| m.user_id)).await?;
    Ok(rows
        .into_iter()
        .map(|m| {
            let email = emails.get(&m.user_id).cloned().unwrap_or_default();
            (m, email)
        })
        .collect())
}

/// Changes member `member_id`'s role in `team` to `role` (`None`: removes the member), in
/// `txn`, refusing a change that leaves no owner. The team's membership rows are locked first
/// (`FOR UPDATE`; SQLite's writers are serialised by its immediate transactions), so two owners
/// demoting each other at once cannot both succeed. `may_change` says whether the one changing
/// may change this member at all (checked first, on the locked row). Returns the member and its
/// address.
pub async fn change_member(
    txn: &impl ConnectionTrait,
    team: Team,
    member_id: i64,
    role: Option<&str>,
    may_change: impl Fn(&Membership) -> bool,
) -> Result<(Membership, String), MemberError> {
    if role.is_some_and(|r| !team.roles().contains(&r)) {
        return Err(MemberError::BadRole);
    }
    let all = memberships(txn, team, true).await?;
    let target = all
        .iter()
        .find(|m| m.id == member_id)
        .cloned()
        .ok_or(MemberError::NotFound)?;
    if !may_change(&target) {
        return Err(MemberError::Forbidden);
    }
    let owners_after = all
        .iter()
        .filter(|m| {
            if m.id == member_id {
                role == Some("owner")
            } else {
                m.role == "owner"
            }
        })
        .count();
    if owners_after == 0 {
        return Err(MemberError::LastOwner);
    }
    let email = console_users::Entity::find_by_id(target.user_id)
        .one(txn)
        .await?
        .map(|u| u.email)
        .unwrap_or_default();
    match (team, role) {
        (Team::Org(_), Some(r)) => {
            org_members::ActiveModel {
                id: Set(target.id),
                role: Set(r.to_string()),
                ..Default::default()
            }
            .update(txn)
            .await?;
        }
        (Team::Partner(_), Some(r)) => {
            partner_members::ActiveModel {
                id: Set(target.id),
                role: Set(r.to_string()),
                ..Default::default()
            }
            .update(txn)
            .await?;
        }
        (Team::Org(_), None) => {
            org_members::Entity::delete_by_id(target.id)
                .exec(txn)
                .await?;
        }
        (Team::Partner(_), None) => {
            partner_members::Entity::delete_by_id(target.id)
                .exec(txn)
                .await?;
        }
    }
    Ok((target, email))
}

/// The team's sign-up links not used yet and not expired, oldest first.
pub async fn pending_invites(
    db: &impl ConnectionTrait,
    team: Team,
    now: DateTime<Utc>,
) -> Result<Vec<console_tokens::Model>, DbErr> {
    let q = console_tokens::Entity::find()
        .filter(console_tokens::Column::Purpose.eq(team.invite_purpose()))
        .filter(console_tokens::Column::UsedAt.is_null())
        .filter(console_tokens::Column::ExpiresAt.gt(now));
    let q = match team {
        Team::Org(id) => q.filter(console_tokens::Column::OrganizationId.eq(id)),
        Team::Partner(id) => q.filter(console_tokens::Column::PartnerId.eq(id)),
    };
    q.order_by_asc(console_tokens::Column::Id).all(db).await
}

/// What follows a member's removal or role change in the same transaction: the team's open
/// sign-up links they sent end when they can no longer invite, and a partner member's dashboard
/// tokens are revoked (removal) or capped at the new role. Returns (links ended, tokens
/// changed).
pub async fn follow_change(
    txn: &impl ConnectionTrait,
    team: Team,
    member: &Membership,
    role: Option<&str>,
    now: DateTime<Utc>,
) -> Result<(u64, u64), DbErr> {
    use sea_orm::sea_query::Expr;
    let may_invite = role.is_some_and(|r| team.managers().contains(&r));
    let ended = if may_invite {
        0
    } else {
        let q = console_tokens::Entity::update_many()
            .col_expr(console_tokens::Column::ExpiresAt, Expr::value(now))
            .filter(console_tokens::Column::Purpose.eq(team.invite_purpose()))
            .filter(console_tokens::Column::InvitedBy.eq(member.user_id))
            .filter(console_tokens::Column::UsedAt.is_null())
            .filter(console_tokens::Column::ExpiresAt.gt(now));
        let q = match team {
            Team::Org(id) => q.filter(console_tokens::Column::OrganizationId.eq(id)),
            Team::Partner(id) => q.filter(console_tokens::Column::PartnerId.eq(id)),
        };
        q.exec(txn).await?.rows_affected
    };
    let Team::Partner(partner) = team else {
        return Ok((ended, 0));
    };
    let mine = || {
        partner_tokens::Entity::update_many()
            .filter(partner_tokens::Column::PartnerId.eq(partner))
            .filter(partner_tokens::Column::CreatedBy.eq(member.user_id))
            .filter(partner_tokens::Column::Status.eq(TokenStatus::Active))
    };
    let changed = match role {
        None => {
            mine()
                .col_expr(
                    partner_tokens::Column::Status,
                    Expr::value(TokenStatus::Revoked),
                )
                .col_expr(partner_tokens::Column::RevokedAt, Expr::value(Some(now)))
                .exec(txn)
                .await?
                .rows_affected
        }
        Some(r) => {
            // A token never acts above its maker's role: those made with a stronger role than
            // the new one take the new one.
            let rank = |x: &str| PARTNER_ROLES.iter().position(|p| *p == x);
            let stronger: Vec<&str> = PARTNER_ROLES
                .iter()
                .copied()
                .filter(|x| rank(x) < rank(r))
                .collect();
            if stronger.is_empty() {
                0
            } else {
                mine()
                    .col_expr(partner_tokens::Column::Role, Expr::value(r))
                    .filter(partner_tokens::Column::Role.is_in(stronger))
                    .exec(txn)
                    .await?
                    .rows_affected
            }
        }
    };
    Ok((ended, changed))
}

/// Revokes one of the team's open sign-up links (it stops working at once): the link, or
/// `None` when there is no such open link of this team.
pub async fn revoke_invite(
    txn: &impl ConnectionTrait,
    team: Team,
    token_id: i64,
    now: DateTime<Utc>,
) -> Result<Option<console_tokens::Model>, DbErr> {
    use sea_orm::sea_query::Expr;
    let open = pending_invites(txn, team, now)
        .await?
        .into_iter()
        .find(|t| t.id == token_id);
    let Some(link) = open else {
        return Ok(None);
    };
    let done = console_tokens::Entity::update_many()
        .col_expr(console_tokens::Column::ExpiresAt, Expr::value(now))
        .filter(console_tokens::Column::Id.eq(link.id))
        .filter(console_tokens::Column::UsedAt.is_null())
        .exec(txn)
        .await?;
    Ok((done.rows_affected == 1).then_some(link))
}

/// The latest `limit` audit records of `team`, newest first, with the actor's address.
pub async fn audit_of(
    db: &impl ConnectionTrait,
    team: Team,
    limit: u64,
) -> Result<Vec<(audit_records::Model, Option<String>)>, DbErr> {
    let q = match team {
        Team::Org(id) => {
            audit_records::Entity::find().filter(audit_records::Column::OrganizationId.eq(id))
        }
        Team::Partner(id) => {
            audit_records::Entity::find().filter(audit_records::Column::PartnerId.eq(id))
        }
    };
    let records = q
        .order_by_desc(audit_records::Column::Id)
        .limit(limit)
        .all(db)
        .await?;
    let emails = emails_of(db, records.iter().filter_map(|r| r.actor_user_id)).await?;
    Ok(records
        .into_iter()
        .map(|r| {
            let actor = r.actor_user_id.and_then(|id| emails.get(&id).cloned());
            (r, actor)
        })
        .collect())
}
