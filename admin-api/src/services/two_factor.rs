//! Two-factor sign-in with an authenticator app (issue 42, DESIGN §6e): RFC 6238 codes (6
//! digits, 30-second steps, SHA-1 as every app supports, one step of clock skew either way),
//! through the `totp-rs` crate.
//!
//! - The shared secret (20 random bytes) is sealed at rest with AES-256-GCM under a key derived
//!   from `[security] key_pepper`; a database read alone does not give it away.
//! - A code is accepted once: the step of the last accepted code is kept and an older or equal
//!   step is refused (RFC 6238 §5.2).
//! - Ten recovery codes are shown once when two-factor is turned on (or renewed); only their
//!   keyed hashes are stored, and each works once.
//! - Setting up: a secret is kept pending until a code from the app proves the app has it; only
//!   then is two-factor on.

use crate::state::AppState;
use chrono::{DateTime, Utc};
use entities::{console_recovery_codes, console_users};
use sea_orm::sea_query::{Expr, ExprTrait};
use sea_orm::{
    ActiveModelTrait, ColumnTrait, ConnectionTrait, DbErr, EntityTrait, QueryFilter, Set,
};
use totp_rs::{Builder, Totp};

/// The issuer an authenticator app shows.
pub const ISSUER: &str = "Tollgate";
/// How many recovery codes are made at once.
pub const RECOVERY_CODES: usize = 10;

fn seal(state: &AppState, secret: &[u8]) -> Option<String> {
    super::sealing::seal(state, super::sealing::Purpose::TwoFactor, secret)
}

fn open(state: &AppState, sealed: &str) -> Option<Vec<u8>> {
    super::sealing::open(state, super::sealing::Purpose::TwoFactor, sealed)
}

fn totp(secret: &[u8], email: &str) -> Option<Totp> {
    Builder::new()
        .with_secret(secret.to_vec())
        .with_account_name(email)
        .with_issuer(Some(ISSUER))
        .build()
        .ok()
}

/// What the setup page shows: the app's `otpauth://` URL as an SVG QR code, and the secret in
/// base32 (grouped by four) for typing.
pub struct Setup {
    pub qr_svg: String,
    pub secret_text: String,
}

fn setup_of(secret: &[u8], email: &str) -> Option<Setup> {
    let t = totp(secret, email)?;
    let url = t.to_url().ok()?;
    let qr = qrcode::QrCode::new(url.as_bytes()).ok()?;
    let qr_svg = qr
        .render::<qrcode::render::svg::Color<'_>>()
        .min_dimensions(200, 200)
        .quiet_zone(true)
        .build();
    // The SVG is drawn inline: drop its XML prolog.
    let qr_svg = match qr_svg.find("<svg") {
        Some(at) => qr_svg[at..].to_string(),
        None => qr_svg,
    };
    let base32 = t.secret().to_base32();
    let secret_text = base32
        .as_bytes()
        .chunks(4)
        .map(|c| String::from_utf8_lossy(c).into_owned())
        .collect::<Vec<_>>()
        .join(" ");
    Some(Setup {
        qr_svg,
        secret_text,
    })
}

/// Starts (or restarts) setting up two-factor for `user`: a new secret, kept pending. Refused
/// (`None`) when two-factor is already on.
pub async fn start(
    db: &impl ConnectionTrait,
    state: &AppState,
    user: &console_users::Model,
) -> Result<Option<Setup>, DbErr> {
    use rand::Rng;
    if user.totp_enabled_at.is_some() {
        return Ok(None);
    }
    let mut secret = [0u8; 20];
    rand::rng().fill(&mut secret);
    let Some(sealed) = seal(state, &secret) else {
        return Err(DbErr::Custom("two-factor secret not sealed".into()));
    };
    console_users::Entity::update_many()
        .col_expr(console_users::Column::TotpSecret, Expr::value(Some(sealed)))
        .col_expr(
            console_users::Column::TotpLastStep,
            Expr::value(None::<i64>),
        )
        .filter(console_users::Column::Id.eq(user.id))
        .filter(console_users::Column::TotpEnabledAt.is_null())
        .exec(db)
        .await?;
    Ok(setup_of(&secret, &user.email))
}

/// The pending setup of `user` (its QR code and text again), if one was started.
pub fn pending(state: &AppState, user: &console_users::Model) -> Option<Setup> {
    if user.totp_enabled_at.is_some() {
        return None;
    }
    let secret = open(state, user.totp_secret.as_deref()?)?;
    setup_of(&secret, &user.email)
}

/// The step of `code` if it is `user`'s current code (or one step either side) and newer than
/// the last one accepted.
fn valid_step(
    state: &AppState,
    user: &console_users::Model,
    code: &str,
    now: DateTime<Utc>,
) -> Option<u64> {
    let secret = open(state, user.totp_secret.as_deref()?)?;
    let code: String = code.chars().filter(|c| !c.is_whitespace()).collect();
    if code.len() != 6 || !code.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let t = totp(&secret, &user.email)?;
    let step = t.check(&code, u64::try_from(now.timestamp()).ok()?)?;
    let last = user.totp_last_step.and_then(|s| u64::try_from(s).ok());
    (last.is_none_or(|l| step > l)).then_some(step)
}

/// Takes `step` as used (once: a concurrent use of the same or a later step wins).
async fn use_step(db: &impl ConnectionTrait, user_id: i64, step: u64) -> Result<bool, DbErr> {
    let step = i64::try_from(step).unwrap_or(i64::MAX);
    let done = console_users::Entity::update_many()
        .col_expr(console_users::Column::TotpLastStep, Expr::value(Some(step)))
        .filter(console_users::Column::Id.eq(user_id))
        .filter(
            console_users::Column::TotpLastStep
                .is_null()
                .or(console_users::Column::TotpLastStep.lt(step)),
        )
        .exec(db)
        .await?;
    Ok(done.rows_affected == 1)
}

/// Turns two-factor on for `user` when `code` proves the app holds the pending secret; the new
/// recovery codes (shown once), or `None` for a wrong code.
pub async fn enable(
    db: &impl ConnectionTrait,
    state: &AppState,
    user: &console_users::Model,
    code: &str,
    now: DateTime<Utc>,
) -> Result<Option<Vec<String>>, DbErr> {
    if user.totp_enabled_at.is_some() {
        return Ok(None);
    }
    let Some(step) = valid_step(state, user, code, now) else {
        return Ok(None);
    };
    if !use_step(db, user.id, step).await? {
        return Ok(None);
    }
    console_users::Entity::update_many()
        .col_expr(console_users::Column::TotpEnabledAt, Expr::value(Some(now)))
        .filter(console_users::Column::Id.eq(user.id))
        .exec(db)
        .await?;
    Ok(Some(renew_recovery_codes(db, state, user.id, now).await?))
}

/// Turns two-factor off: the secret and the recovery codes are gone.
pub async fn disable(db: &impl ConnectionTrait, user_id: i64) -> Result<(), DbErr> {
    console_users::Entity::update_many()
        .col_expr(
            console_users::Column::TotpSecret,
            Expr::value(None::<String>),
        )
        .col_expr(
            console_users::Column::TotpEnabledAt,
            Expr::value(None::<DateTime<Utc>>),
        )
        .col_expr(
            console_users::Column::TotpLastStep,
            Expr::value(None::<i64>),
        )
        .filter(console_users::Column::Id.eq(user_id))
        .exec(db)
        .await?;
    console_recovery_codes::Entity::delete_many()
        .filter(console_recovery_codes::Column::UserId.eq(user_id))
        .exec(db)
        .await?;
    Ok(())
}

fn recovery_hash(state: &AppState, user_id: i64, code: &str) -> String {
    let normal: String = code
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .map(|c| c.to_ascii_lowercase())
        .collect();
    state.hasher.hash(&format!("recovery|{user_id}|{normal}"))
}

/// New recovery codes for `user_id` (the old ones stop working): ten of `xxxxx-xxxxx`, from an
/// alphabet without look-alikes (50 bits each).
pub async fn renew_recovery_codes(
    db: &impl ConnectionTrait,
    state: &AppState,
    user_id: i64,
    now: DateTime<Utc>,
) -> Result<Vec<String>, DbErr> {
    use rand::Rng;
    const ALPHABET: &[u8] = b"abcdefghjkmnpqrstuvwxyz23456789";
    console_recovery_codes::Entity::delete_many()
        .filter(console_recovery_codes::Column::UserId.eq(user_id))
        .exec(db)
        .await?;
    let codes: Vec<String> = {
        let mut rng = rand::rng();
        (0..RECOVERY_CODES)
            .map(|_| {
                let raw: String = (0..10)
                    .map(|_| char::from(ALPHABET[rng.random_range(0..ALPHABET.len())]))
                    .collect();
                format!("{}-{}", &raw[..5], &raw[5..])
            })
            .collect()
    };
    for code in &codes {
        console_recovery_codes::ActiveModel {
            user_id: Set(user_id),
            code_hash: Set(recovery_hash(state, user_id, code)),
            created_at: Set(now),
            used_at: Set(None),
            ..Default::default()
        }
        .insert(db)
        .await?;
    }
    Ok(codes)
}

/// How many of `user_id`'s recovery codes are left.
pub async fn recovery_codes_left(db: &impl ConnectionTrait, user_id: i64) -> Result<u64, DbErr> {
    use sea_orm::PaginatorTrait;
    console_recovery_codes::Entity::find()
        .filter(console_recovery_codes::Column::UserId.eq(user_id))
        .filter(console_recovery_codes::Column::UsedAt.is_null())
        .count(db)
        .await
}

/// How a second factor was given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Given {
    App,
    RecoveryCode,
}

/// Checks the second factor of `user` at sign-in: a code from the app (once per step) or one
/// of the recovery codes (each once). `None`: neither.
pub async fn verify(
    db: &impl ConnectionTrait,
    state: &AppState,
    user: &console_users::Model,
    code: &str,
    now: DateTime<Utc>,
) -> Result<Option<Given>, DbErr> {
    if user.totp_enabled_at.is_none() {
        return Ok(None);
    }
    if let Some(step) = valid_step(state, user, code, now) {
        return Ok(use_step(db, user.id, step).await?.then_some(Given::App));
    }
    let used = console_recovery_codes::Entity::update_many()
        .col_expr(
            console_recovery_codes::Column::UsedAt,
            Expr::value(Some(now)),
        )
        .filter(console_recovery_codes::Column::UserId.eq(user.id))
        .filter(console_recovery_codes::Column::CodeHash.eq(recovery_hash(state, user.id, code)))
        .filter(console_recovery_codes::Column::UsedAt.is_null())
        .exec(db)
        .await?;
    Ok((used.rows_affected == 1).then_some(Given::RecoveryCode))
}

/// The app's code at `now` for a secret shown on the setup page (`secret_text`): what a
/// person's authenticator app would show (tests, and people checking their app's clock).
pub fn code_at(secret_text: &str, email: &str, now: DateTime<Utc>) -> Option<String> {
    let base32: String = secret_text.chars().filter(|c| !c.is_whitespace()).collect();
    let secret = totp_rs::Secret::try_from_base32(base32).ok()?;
    let t = Builder::new()
        .with_secret(secret)
        .with_account_name(email)
        .with_issuer(Some(ISSUER))
        .build()
        .ok()?;
    Some(t.generate(u64::try_from(now.timestamp()).ok()?).to_string())
}

/// Whether the operator requires two-factor of this person (`[console] require_two_factor`: a
/// partner's owners and admins, by the role they act with) and they have not turned it on.
pub async fn must_set_up(
    state: &AppState,
    user: &entities::console_users::Model,
) -> Result<bool, sea_orm::DbErr> {
    if !state.settings.console.require_two_factor || user.totp_enabled_at.is_some() {
        return Ok(false);
    }
    let teams = super::memberships::partner_memberships(&state.db, user.id).await?;
    Ok(teams.iter().any(|(p, role)| {
        matches!(
            super::memberships::effective_role(&p.role, Some(role)),
            "owner" | "admin"
        )
    }))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]
    use super::*;

    #[test]
    fn the_setup_shows_a_qr_code_and_the_secret_that_makes_the_apps_codes() {
        let secret = [7u8; 20];
        let setup = setup_of(&secret, "ann@example.com").unwrap();
        assert!(setup.qr_svg.starts_with("<svg"));
        let at = DateTime::from_timestamp(1_800_000_000, 0).unwrap();
        let code = code_at(&setup.secret_text, "ann@example.com", at).unwrap();
        let t = totp(&secret, "ann@example.com").unwrap();
        assert_eq!(t.check(&code, 1_800_000_000), Some(1_800_000_000 / 30));
        assert_eq!(code.len(), 6);
    }
}
