//! Proof of address (issue 42, DESIGN §6c "A link is never proof of an address"): a step that
//! needs the person who reads a mailbox (accepting an invitation, joining through a link, the
//! first sign-in of an account whose address was never proven) completes only with a one-time
//! code mailed to that exact address at that moment.
//!
//! - A code is 8 decimal digits, alone on one line of the mail's text, valid [`CODE_VALID`],
//!   tried at most [`CODE_TRIES`] times; only its keyed hash is stored.
//! - One live code per address and subject (an invitation, a join link, an account): starting
//!   again ends the previous one.
//! - The browser that started a step keeps a random flow secret in the `tg_flow` cookie (only its
//!   SHA-256 is stored): a person's second page finds its own challenge with it, so a code mailed
//!   because of somebody else's first step never completes with that somebody's password in a
//!   person's browser.

use crate::state::AppState;
use chrono::{DateTime, Duration, Utc};
use entities::console_challenges;
use sea_orm::sea_query::{Expr, ExprTrait};
use sea_orm::{
    ActiveModelTrait, ColumnTrait, ConnectionTrait, DbErr, EntityTrait, QueryFilter, QueryOrder,
    Set,
};
use sha2::{Digest, Sha256};

/// How long a mailed code works.
pub const CODE_VALID: Duration = Duration::minutes(15);
/// How many codes may be tried against one challenge.
pub const CODE_TRIES: i32 = 5;
/// The browser flow's cookie.
pub const FLOW_COOKIE: &str = "tg_flow";

/// What a challenge completes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purpose {
    /// An organization's invitation (SPEC's activation).
    Invitation,
    /// A team's join link.
    Join,
    /// The sign-in of an account whose address is not proven yet.
    SignIn,
    /// A sign-in waiting for its second factor (an authenticator app's code; nothing mailed).
    TwoFactor,
}

impl Purpose {
    pub fn name(self) -> &'static str {
        match self {
            Purpose::Invitation => "invitation",
            Purpose::Join => "join",
            Purpose::SignIn => "sign_in",
            Purpose::TwoFactor => "two_factor",
        }
    }
}

/// A started challenge: the flow secret for the browser's cookie and the code to mail.
pub struct Started {
    pub flow: String,
    pub code: String,
    pub challenge: console_challenges::Model,
}

/// The first step's outcome for the address, kept for the second page.
#[derive(Debug, Clone, Default)]
pub struct FirstStep {
    /// argon2id of the password chosen for a new address.
    pub password_hash: Option<String>,
    /// The existing account whose password the first step checked.
    pub user_id: Option<i64>,
}

fn sha256_hex(s: &str) -> String {
    hex::encode(Sha256::digest(s.as_bytes()))
}

fn code_hash(state: &AppState, subject: &str, email: &str, code: &str) -> String {
    state.hasher.hash(&format!("code|{subject}|{email}|{code}"))
}

/// A fresh 8-digit code, uniform over 00000000–99999999.
pub fn new_code() -> String {
    use rand::Rng;
    format!("{:08}", rand::rng().random_range(0..100_000_000u32))
}

/// Starts a challenge for `email` on `subject`, ending any live one of the same address and
/// subject (one live code per address and link).
pub async fn start(
    db: &impl ConnectionTrait,
    state: &AppState,
    purpose: Purpose,
    subject: &str,
    email: &str,
    first: FirstStep,
) -> Result<Started, DbErr> {
    let now = state.clock.now();
    let email = super::people::normal_email(email);
    console_challenges::Entity::update_many()
        .col_expr(console_challenges::Column::UsedAt, Expr::value(now))
        .filter(console_challenges::Column::Subject.eq(subject))
        .filter(console_challenges::Column::Email.eq(email.clone()))
        .filter(console_challenges::Column::UsedAt.is_null())
        .exec(db)
        .await?;
    let flow = super::sessions::secret();
    let code = new_code();
    let challenge = console_challenges::ActiveModel {
        flow_hash: Set(sha256_hex(&flow)),
        purpose: Set(purpose.name().to_string()),
        subject: Set(subject.to_string()),
        email: Set(email.clone()),
        code_hash: Set(code_hash(state, subject, &email, &code)),
        password_hash: Set(first.password_hash),
        user_id: Set(first.user_id),
        tries: Set(0),
        created_at: Set(now),
        expires_at: Set(now + CODE_VALID),
        used_at: Set(None),
        ..Default::default()
    }
    .insert(db)
    .await?;
    Ok(Started {
        flow,
        code,
        challenge,
    })
}

fn live(c: &console_challenges::Model, now: DateTime<Utc>) -> bool {
    c.used_at.is_none() && c.expires_at > now && c.tries < CODE_TRIES
}

/// The live challenge of a browser's flow secret.
pub async fn by_flow(
    db: &impl ConnectionTrait,
    flow: &str,
    now: DateTime<Utc>,
) -> Result<Option<console_challenges::Model>, DbErr> {
    Ok(console_challenges::Entity::find()
        .filter(console_challenges::Column::FlowHash.eq(sha256_hex(flow)))
        .one(db)
        .await?
        .filter(|c| live(c, now)))
}

/// The live challenge of `email` on `subject` (a program's second step).
pub async fn for_address(
    db: &impl ConnectionTrait,
    subject: &str,
    email: &str,
    now: DateTime<Utc>,
) -> Result<Option<console_challenges::Model>, DbErr> {
    Ok(console_challenges::Entity::find()
        .filter(console_challenges::Column::Subject.eq(subject))
        .filter(console_challenges::Column::Email.eq(super::people::normal_email(email)))
        .filter(console_challenges::Column::UsedAt.is_null())
        .order_by_desc(console_challenges::Column::Id)
        .one(db)
        .await?
        .filter(|c| live(c, now)))
}

/// Spends one of challenge `c`'s tries (conditionally, so concurrent tries cannot exceed
/// [`CODE_TRIES`]); `false` when none is left or the challenge ended.
pub async fn spend_try(
    db: &impl ConnectionTrait,
    state: &AppState,
    c: &console_challenges::Model,
) -> Result<bool, DbErr> {
    let now = state.clock.now();
    let spent = console_challenges::Entity::update_many()
        .col_expr(
            console_challenges::Column::Tries,
            Expr::col(console_challenges::Column::Tries).add(1),
        )
        .filter(console_challenges::Column::Id.eq(c.id))
        .filter(console_challenges::Column::UsedAt.is_null())
        .filter(console_challenges::Column::Tries.lt(CODE_TRIES))
        .filter(console_challenges::Column::ExpiresAt.gt(now))
        .exec(db)
        .await?;
    Ok(spent.rows_affected == 1)
}

/// Tries `code` against challenge `c`: one of its tries is spent first ([`spend_try`]); `true`
/// when the code is right.
pub async fn try_code(
    db: &impl ConnectionTrait,
    state: &AppState,
    c: &console_challenges::Model,
    code: &str,
) -> Result<bool, DbErr> {
    if !spend_try(db, state, c).await? {
        return Ok(false);
    }
    let code = code.trim();
    if code.len() != 8 || !code.bytes().all(|b| b.is_ascii_digit()) {
        return Ok(false);
    }
    let presented = code_hash(state, &c.subject, &c.email, code);
    Ok(crate::auth::same_token(&presented, &c.code_hash))
}

/// Ends challenge `c` once (in the completing transaction): `false` when it was already ended
/// (two concurrent completions: one wins).
pub async fn finish(
    db: &impl ConnectionTrait,
    c: &console_challenges::Model,
    now: DateTime<Utc>,
) -> Result<bool, DbErr> {
    let done = console_challenges::Entity::update_many()
        .col_expr(console_challenges::Column::UsedAt, Expr::value(now))
        .filter(console_challenges::Column::Id.eq(c.id))
        .filter(console_challenges::Column::UsedAt.is_null())
        .exec(db)
        .await?;
    Ok(done.rows_affected == 1)
}

/// Mails `code` to `email` (after the answer, so its time tells nothing): `what` says what it
/// confirms, in a sentence's middle ("activate Acme").
pub fn mail_code(state: &AppState, email: &str, code: &str, what: &str) {
    let minutes = CODE_VALID.num_minutes();
    let body = format!(
        "Hello,\n\nSomeone (we hope you) asked to {what} on Tollgate with this address ({email}). Enter this code to confirm it is you:\n\n{code}\n\nThe code works for {minutes} minutes. If it was not you, ignore this mail: nothing happens without the code, and nobody from Tollgate will ever ask you for it.\n"
    );
    let (mailer, to) = (state.mailer.clone(), email.to_string());
    let send = async move {
        if let Err(e) = mailer
            .send(&to, "Your Tollgate verification code", body)
            .await
        {
            tracing::warn!(error = %e, "the verification code was not mailed");
        }
    };
    if let Ok(mut tasks) = state.mail_tasks.lock() {
        while tasks.try_join_next().is_some() {}
        tasks.spawn(send);
    }
}

/// Who completes a proven step, after the code: the account whose password was checked, or a
/// new account with this password hash.
#[derive(Debug, Clone)]
pub enum Accepter {
    Existing(i64),
    New(String),
}

/// Why a step did not go on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum StepError {
    /// the password is not 12 to 128 characters (nothing counted, nothing changed)
    #[error("the password must be 12 to 128 characters")]
    WeakPassword,
    /// the password or the code is not correct, or the code is spent or expired (one answer)
    #[error("the password or the verification code is not correct, or the code has expired")]
    Failed,
    /// too many attempts: wait this many seconds
    #[error("too many attempts; try again in {0} s")]
    Throttled(u64),
    /// the database, the limiter or the password pool cannot answer
    #[error("try again shortly")]
    Unavailable,
}

impl From<DbErr> for StepError {
    fn from(e: DbErr) -> Self {
        tracing::error!(error = %e, "proof of address: database error");
        StepError::Unavailable
    }
}

impl From<super::people::PeopleError> for StepError {
    fn from(e: super::people::PeopleError) -> Self {
        use super::people::PeopleError;
        match e {
            PeopleError::WeakPassword => StepError::WeakPassword,
            PeopleError::InvalidEmail => StepError::Failed,
            PeopleError::Db(e) => e.into(),
            PeopleError::Hash | PeopleError::Busy => StepError::Unavailable,
        }
    }
}

impl From<super::limiter::Refused> for StepError {
    fn from(r: super::limiter::Refused) -> Self {
        match r {
            super::limiter::Refused::Throttled(s) => StepError::Throttled(s),
            super::limiter::Refused::Unavailable => StepError::Unavailable,
        }
    }
}

/// Where a check's audit records go (the team or organization a step concerns, if any) and what
/// it was.
#[derive(Debug, Clone, Copy)]
pub struct Scope {
    pub check: super::limiter::Check,
    pub organization: Option<i64>,
    pub partner: Option<i64>,
}

/// Records a failed check (never the password or the code) and, when this attempt locked the
/// address or the network, the throttle. A failure to write is logged.
pub async fn audit_failure(
    state: &AppState,
    scope: Scope,
    email: &str,
    ip: Option<&str>,
    attempt: Option<&super::limiter::Attempt>,
) {
    use super::audit::{Audit, audit};
    let now = state.clock.now();
    let mut records = vec!["check_failed"];
    if attempt.is_some_and(|a| a.locked) {
        records.push("attempts_throttled");
    }
    for action in records {
        let written = audit(
            &state.db,
            Audit {
                organization: scope.organization,
                partner: scope.partner,
                actor: None,
                action,
                target: Some(super::people::normal_email(email)),
                detail: serde_json::json!({ "check": scope.check.name() }),
                ip: ip.map(str::to_string),
            },
            now,
        )
        .await;
        if let Err(e) = written {
            tracing::warn!(error = %e, "a failed check was not audited");
        }
    }
}

/// What a first step is about: its purpose and subject, the address the code goes to, where its
/// failures are audited and what the mail says it confirms ("activate Acme").
#[derive(Debug, Clone, Copy)]
pub struct Begin<'a> {
    pub purpose: Purpose,
    pub subject: &'a str,
    pub email: &'a str,
    pub scope: Scope,
    pub what: &'a str,
}

/// The first step of an acceptance or a join: counts an attempt, checks `password` against the
/// address's account (an existing one) or hashes it (a new address), starts a challenge and
/// mails its code. It answers the same whatever the outcome (nothing tells whether the address
/// has an account); a wrong password shows only at the second step.
pub async fn begin(
    state: &AppState,
    step: Begin<'_>,
    password: &str,
    ip: Option<&str>,
) -> Result<Started, StepError> {
    let Begin {
        purpose,
        subject,
        email,
        scope,
        what,
    } = step;
    super::people::check_password(password)?;
    let now = state.clock.now();
    let attempt = super::limiter::attempt(&state.db, email, ip, now).await?;
    let first = match super::people::find_user(&state.db, email).await? {
        Some(user) => {
            if super::people::password_matches(&user, password).await? {
                FirstStep {
                    password_hash: None,
                    user_id: Some(user.id),
                }
            } else {
                audit_failure(state, scope, email, ip, Some(&attempt)).await;
                FirstStep::default()
            }
        }
        None => FirstStep {
            password_hash: Some(
                super::hashing::hash(password)
                    .await
                    .map_err(|_| StepError::Unavailable)?,
            ),
            user_id: None,
        },
    };
    let started = start(&state.db, state, purpose, subject, email, first).await?;
    mail_code(state, &started.challenge.email, &started.code, what);
    Ok(started)
}

/// The second step: counts an attempt on `email`, tries `code` against `challenge` (as the
/// caller found it: by the browser's flow, or by address), then works out who completes: with a
/// `password` (a program's second post) the address's account must have it, or a new address
/// gets it; without one (a person's second page) the first step's outcome decides.
pub async fn complete(
    state: &AppState,
    challenge: Option<console_challenges::Model>,
    email: &str,
    code: &str,
    password: Option<&str>,
    ip: Option<&str>,
    scope: Scope,
) -> Result<(console_challenges::Model, Accepter, super::limiter::Attempt), StepError> {
    if let Some(p) = password {
        super::people::check_password(p)?;
    }
    let now = state.clock.now();
    let attempt = super::limiter::attempt(&state.db, email, ip, now).await?;
    let fail = |attempt: super::limiter::Attempt| async move {
        audit_failure(state, scope, email, ip, Some(&attempt)).await;
        StepError::Failed
    };
    let Some(challenge) = challenge.filter(|c| c.email == super::people::normal_email(email))
    else {
        return Err(fail(attempt).await);
    };
    if !try_code(&state.db, state, &challenge, code).await? {
        return Err(fail(attempt).await);
    }
    let accepter = match password {
        Some(password) => match super::people::find_user(&state.db, &challenge.email).await? {
            Some(user) => {
                if super::people::password_matches(&user, password).await? {
                    Some(Accepter::Existing(user.id))
                } else {
                    None
                }
            }
            None => Some(Accepter::New(
                super::hashing::hash(password)
                    .await
                    .map_err(|_| StepError::Unavailable)?,
            )),
        },
        None => match (challenge.user_id, challenge.password_hash.clone()) {
            (Some(id), _) => Some(Accepter::Existing(id)),
            (None, Some(hash)) => Some(Accepter::New(hash)),
            (None, None) => None,
        },
    };
    match accepter {
        Some(a) => Ok((challenge, a, attempt)),
        None => Err(fail(attempt).await),
    }
}

/// Forgets challenges ended or expired a day ago.
pub async fn forget_old(db: &impl ConnectionTrait, now: DateTime<Utc>) -> Result<u64, DbErr> {
    Ok(console_challenges::Entity::delete_many()
        .filter(console_challenges::Column::ExpiresAt.lt(now - Duration::days(1)))
        .exec(db)
        .await?
        .rows_affected)
}

#[cfg(test)]
mod tests {
    #[test]
    fn codes_are_eight_digits() {
        for _ in 0..1000 {
            let c = super::new_code();
            assert_eq!(c.len(), 8);
            assert!(c.bytes().all(|b| b.is_ascii_digit()));
        }
    }
}
