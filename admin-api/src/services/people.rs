//! People: console users and their passwords (issue 28, DESIGN §6c). Their sessions are in
//! `sessions`, their memberships and mailed links in `memberships`, the audit log in `audit`.
//!
//! Rules kept here, whatever page or command calls them:
//! - an address is stored lowercase and trimmed; one user per address;
//! - passwords are hashed with argon2id (the `argon2` crate's defaults, PHC string stored) on the
//!   bounded pool of [`hashing`], 12 to 128 characters; a longer one is refused before any
//!   hashing; a wrong password and an unknown address are indistinguishable to the caller
//!   ([`authenticate`] answers `None` for both, after the same work);
//! - an address counts as proven only by a mailed code or reset link (or the operator's demo
//!   command): an account whose address is not proven has no session until it proves it.

use super::hashing::{self, HashError};
use super::sessions::end_sessions_of;
use chrono::{DateTime, Utc};
use entities::console_users;
use sea_orm::{
    ActiveModelTrait, ColumnTrait, ConnectionTrait, DbErr, EntityTrait, QueryFilter, Set,
};

/// Shortest password accepted.
pub const MIN_PASSWORD: usize = 12;
/// Longest password accepted (argon2 hashes any length; this bounds the work per attempt).
pub const MAX_PASSWORD: usize = 128;

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
    if !crate::text::valid_email(&email) {
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

/// The user `id`, if there is one.
pub async fn by_id(
    db: &impl ConnectionTrait,
    id: i64,
) -> Result<Option<console_users::Model>, DbErr> {
    console_users::Entity::find_by_id(id).one(db).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::services::sessions::secret;

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
