//! Server-side console sessions (DESIGN §6c): a 256-bit random cookie value, of which only the
//! SHA-256 is stored; a session ends when unused for `[console] session_idle_minutes` or after
//! `session_absolute_hours`, at sign-out, and when its user's password changes.

use chrono::{DateTime, Duration, Utc};
use entities::{console_sessions, console_users};
use sea_orm::{
    ActiveModelTrait, ColumnTrait, ConnectionTrait, DbErr, EntityTrait, QueryFilter, Set,
};
use sha2::{Digest, Sha256};

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

/// The live sessions of `user_id` at `now`, the latest seen first (the account page's list).
pub async fn live_of(
    db: &impl ConnectionTrait,
    user_id: i64,
    now: DateTime<Utc>,
) -> Result<Vec<console_sessions::Model>, DbErr> {
    use sea_orm::QueryOrder;
    console_sessions::Entity::find()
        .filter(console_sessions::Column::UserId.eq(user_id))
        .filter(console_sessions::Column::ExpiresAt.gt(now))
        .order_by_desc(console_sessions::Column::LastSeenAt)
        .all(db)
        .await
}
