//! People: console users, their passwords, memberships of organizations and partner teams,
//! single-use mailed tokens, server-side sessions and the audit log (issue 28, DESIGN §6c).
//!
//! Rules kept here, whatever page or command calls them:
//! - an address is stored lowercase and trimmed; one user per address;
//! - passwords are hashed with argon2id (the `argon2` crate's defaults, PHC string stored) on the
//!   bounded pool of [`hashing`], 12 to 128 characters; a longer one is refused before any
//!   hashing; a wrong password and an unknown address are indistinguishable to the caller
//!   ([`authenticate`] answers `None` for both, after the same work);
//! - an address counts as proven only by a mailed code or reset link (or the operator's demo
//!   command): an account whose address is not proven has no session until it proves it;
//! - session ids and mailed tokens are 256-bit random values; only their SHA-256 (sessions) or
//!   keyed hash (tokens) is stored;
//! - organization roles are `owner`, `administrator`, `member`; partner roles `owner`, `admin`,
//!   `operator`, `viewer`; an organization always keeps at least one owner.

use super::hashing::{self, HashError};
use crate::state::AppState;
use chrono::{DateTime, Duration, Utc};
use entities::{
    audit_records, console_sessions, console_tokens, console_users, org_members, organizations,
    partner_members, partners,
};
use sea_orm::{
    ActiveModelTrait, ColumnTrait, ConnectionTrait, DbErr, EntityTrait, QueryFilter, QueryOrder,
    Set,
};
use sha2::{Digest, Sha256};

/// Shortest password accepted.
pub const MIN_PASSWORD: usize = 12;
/// Longest password accepted (argon2 hashes any length; this bounds the work per attempt).
pub const MAX_PASSWORD: usize = 128;
/// How long a mailed sign-up or membership link is valid.
pub const TOKEN_DAYS: i64 = 7;

/// Organization roles, strongest first.
pub const ORG_ROLES: [&str; 3] = ["owner", "administrator", "member"];
/// Partner team roles, strongest first.
pub const PARTNER_ROLES: [&str; 4] = ["owner", "admin", "operator", "viewer"];

/// Why a people operation was refused.
#[derive(Debug, thiserror::Error)]
pub enum PeopleError {
    /// the password must be 12 to 128 characters
    #[error("the password must be {MIN_PASSWORD} to {MAX_PASSWORD} characters")]
    WeakPassword,
    /// the address is not a valid email address
    #[error("the email address is not valid")]
    InvalidEmail,
    /// a database failure
    #[error("database error: {0}")]
    Db(#[from] DbErr),
    /// the password could not be hashed
    #[error("password hashing failed")]
    Hash,
    /// too many password checks at once (answered 503)
    #[error("too many password checks at once; try again shortly")]
    Busy,
}

impl From<HashError> for PeopleError {
    fn from(e: HashError) -> Self {
        match e {
            HashError::Busy => PeopleError::Busy,
            HashError::Failed => PeopleError::Hash,
        }
    }
}

/// An address as stored: trimmed, lowercase.
pub fn normal_email(email: &str) -> String {
    email.trim().to_ascii_lowercase()
}

/// A checked password (12 to 128 characters, not only white space).
pub fn check_password(password: &str) -> Result<(), PeopleError> {
    let n = password.chars().count();
    if (MIN_PASSWORD..=MAX_PASSWORD).contains(&n) && !password.trim().is_empty() {
        Ok(())
    } else {
        Err(PeopleError::WeakPassword)
    }
}

/// Whether `password` is too long to check (refused before any hashing).
pub fn too_long(password: &str) -> bool {
    password.chars().count() > MAX_PASSWORD
}

/// The argon2id hash of a new password (checked first).
pub async fn new_password_hash(password: &str) -> Result<String, PeopleError> {
    check_password(password)?;
    Ok(hashing::hash(password).await?)
}

/// The user of `email`, if any.
pub async fn find_user(
    db: &impl ConnectionTrait,
    email: &str,
) -> Result<Option<console_users::Model>, DbErr> {
    console_users::Entity::find()
        .filter(console_users::Column::Email.eq(normal_email(email)))
        .one(db)
        .await
}

/// Creates the user of `email` with `password`, its address proven at `verified` (`None`: not
/// proven yet).
pub async fn create_user(
    db: &impl ConnectionTrait,
    email: &str,
    password: &str,
    verified: Option<DateTime<Utc>>,
    now: DateTime<Utc>,
) -> Result<console_users::Model, PeopleError> {
    let hash = new_password_hash(password).await?;
    insert_user(db, email, hash, verified, now).await
}

/// Creates the user of `email` with an already hashed password.
pub async fn insert_user(
    db: &impl ConnectionTrait,
    email: &str,
    password_hash: String,
    verified: Option<DateTime<Utc>>,
    now: DateTime<Utc>,
) -> Result<console_users::Model, PeopleError> {
    let email = normal_email(email);
    if !crate::services::customers::valid_email(&email) {
        return Err(PeopleError::InvalidEmail);
    }
    Ok(console_users::ActiveModel {
        email: Set(email),
        password_hash: Set(password_hash),
        created_at: Set(now),
        updated_at: Set(now),
        email_verified_at: Set(verified),
        totp_secret: Set(None),
        totp_enabled_at: Set(None),
        totp_last_step: Set(None),
        ..Default::default()
    }
    .insert(db)
    .await?)
}

/// Records that `user` proved its address at `now` (kept as is when already proven).
pub async fn mark_proven(
    db: &impl ConnectionTrait,
    user: console_users::Model,
    now: DateTime<Utc>,
) -> Result<console_users::Model, DbErr> {
    if user.email_verified_at.is_some() {
        return Ok(user);
    }
    let mut u: console_users::ActiveModel = user.into();
    u.email_verified_at = Set(Some(now));
    u.update(db).await
}

/// The user whose address and password these are; `None` for an unknown address and for a
/// wrong password alike (the same argon2 work is done for both), and for a password longer than
/// [`MAX_PASSWORD`] (no work at all).
pub async fn authenticate(
    db: &impl ConnectionTrait,
    email: &str,
    password: &str,
) -> Result<Option<console_users::Model>, PeopleError> {
    if too_long(password) {
        return Ok(None);
    }
    let user = find_user(db, email).await?;
    let hash = match &user {
        Some(u) => u.password_hash.clone(),
        None => hashing::decoy().await?,
    };
    let valid = hashing::verify(&hash, password).await?;
    Ok(user.filter(|_| valid))
}

/// Whether `password` is `user`'s (no work for one that is too long).
pub async fn password_matches(
    user: &console_users::Model,
    password: &str,
) -> Result<bool, PeopleError> {
    if too_long(password) {
        return Ok(false);
    }
    Ok(hashing::verify(&user.password_hash, password).await?)
}

/// Sets a new password for `user` and ends all of its sessions.
pub async fn set_password(
    db: &impl ConnectionTrait,
    user: console_users::Model,
    password: &str,
    now: DateTime<Utc>,
) -> Result<console_users::Model, PeopleError> {
    let hash = new_password_hash(password).await?;
    let id = user.id;
    let mut u: console_users::ActiveModel = user.into();
    u.password_hash = Set(hash);
    u.updated_at = Set(now);
    let user = u.update(db).await?;
    end_sessions_of(db, id).await?;
    Ok(user)
}

/// A fresh random secret: 43 characters of base62 (about 256 bits).
pub fn secret() -> String {
    use rand::Rng;
    const ALPHABET: &[u8] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    let mut rng = rand::rng();
    (0..43)
        .map(|_| char::from(ALPHABET[rng.random_range(0..ALPHABET.len())]))
        .collect()
}

fn sha256_hex(s: &str) -> String {
    hex::encode(Sha256::digest(s.as_bytes()))
}

/// How long sessions last: unused (`idle`) and at most (`absolute`), from `[console]`.
#[derive(Debug, Clone, Copy)]
pub struct Lifetimes {
    pub idle: Duration,
    pub absolute: Duration,
}

impl Lifetimes {
    pub fn of(console: &settings::Console) -> Lifetimes {
        Lifetimes {
            idle: Duration::minutes(i64::try_from(console.session_idle_minutes).unwrap_or(30)),
            absolute: Duration::hours(i64::try_from(console.session_absolute_hours).unwrap_or(12)),
        }
    }
}

/// A new session for `user_id`: returns (cookie value, the stored session).
pub async fn open_session(
    db: &impl ConnectionTrait,
    user_id: i64,
    ip: Option<String>,
    now: DateTime<Utc>,
    lifetimes: Lifetimes,
) -> Result<(String, console_sessions::Model), DbErr> {
    let cookie = secret();
    let session = console_sessions::ActiveModel {
        id: Set(sha256_hex(&cookie)),
        user_id: Set(user_id),
        csrf: Set(secret()),
        ip: Set(ip),
        created_at: Set(now),
        last_seen_at: Set(now),
        expires_at: Set(now + lifetimes.absolute),
    }
    .insert(db)
    .await?;
    Ok((cookie, session))
}

/// The live session of a cookie value and its user; an expired or idle one, or one whose user
/// has not proven its address, is ended. A session seen again has its idle clock moved (at most
/// once a minute).
pub async fn session(
    db: &impl ConnectionTrait,
    cookie: &str,
    now: DateTime<Utc>,
    lifetimes: Lifetimes,
) -> Result<Option<(console_sessions::Model, console_users::Model)>, DbErr> {
    let Some(session) = console_sessions::Entity::find_by_id(sha256_hex(cookie))
        .one(db)
        .await?
    else {
        return Ok(None);
    };
    let user = console_users::Entity::find_by_id(session.user_id)
        .one(db)
        .await?
        .filter(|u| u.email_verified_at.is_some());
    let alive = session.expires_at > now && session.last_seen_at + lifetimes.idle > now;
    let Some(user) = user.filter(|_| alive) else {
        console_sessions::Entity::delete_by_id(session.id)
            .exec(db)
            .await?;
        return Ok(None);
    };
    let session = if now - session.last_seen_at > Duration::minutes(1) {
        let mut s: console_sessions::ActiveModel = session.into();
        s.last_seen_at = Set(now);
        s.update(db).await?
    } else {
        session
    };
    Ok(Some((session, user)))
}

/// Ends the session of a cookie value (sign-out).
pub async fn end_session(db: &impl ConnectionTrait, cookie: &str) -> Result<(), DbErr> {
    console_sessions::Entity::delete_by_id(sha256_hex(cookie))
        .exec(db)
        .await?;
    Ok(())
}

/// Ends every session of a user (password change or reset).
pub async fn end_sessions_of(db: &impl ConnectionTrait, user_id: i64) -> Result<(), DbErr> {
    console_sessions::Entity::delete_many()
        .filter(console_sessions::Column::UserId.eq(user_id))
        .exec(db)
        .await?;
    Ok(())
}

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

/// Marks a token used (single use).
pub async fn use_token(
    db: &impl ConnectionTrait,
    token: console_tokens::Model,
    now: DateTime<Utc>,
) -> Result<(), DbErr> {
    let mut t: console_tokens::ActiveModel = token.into();
    t.used_at = Set(Some(now));
    t.update(db).await?;
    Ok(())
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

/// What an audit record says.
pub struct Audit<'a> {
    pub organization: Option<i64>,
    pub partner: Option<i64>,
    pub actor: Option<i64>,
    pub action: &'a str,
    pub target: Option<String>,
    pub detail: serde_json::Value,
    pub ip: Option<String>,
}

/// Writes an audit record (in the caller's transaction, so the change and its record commit
/// together).
pub async fn audit(
    db: &impl ConnectionTrait,
    a: Audit<'_>,
    now: DateTime<Utc>,
) -> Result<(), DbErr> {
    audit_records::ActiveModel {
        organization_id: Set(a.organization),
        partner_id: Set(a.partner),
        actor_user_id: Set(a.actor),
        action: Set(a.action.to_string()),
        target: Set(a.target),
        detail: Set(a.detail.to_string()),
        ip: Set(a.ip),
        created_at: Set(now),
        ..Default::default()
    }
    .insert(db)
    .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords() {
        assert!(check_password("short").is_err());
        assert!(check_password(&" ".repeat(20)).is_err());
        assert!(check_password(&"x".repeat(129)).is_err());
        assert!(check_password("correct horse battery").is_ok());
        assert!(too_long(&"é".repeat(129)));
        assert!(!too_long(&"é".repeat(128)));
        assert_eq!(normal_email("  Ann@Example.COM "), "ann@example.com");
        assert_eq!(secret().len(), 43);
    }
}
