//! Invitation acceptance: the person who controls the contact email activates the customer.
//! Holding the link proves nothing (the partner holds `invite_url`): the acceptance completes
//! only with the code mailed to the invited address (`services::proof`), and whoever completes
//! it is that address's user, proven at that moment.
//!
//! One transaction: the code's challenge ends (once), the user is made or marked proven, the
//! invitation becomes `accepted`, the organization `active` with the accepter as owner, the
//! organization balance opens with the allocation set so far (a ledger transfer from the
//! partner's allocations; zero for an unfunded customer, which still opens the wallet), and the
//! audit record (with the client's address) is written.

use super::audit;
use super::memberships;
use crate::auth::{TokenKind, token_hash};
use crate::db::begin;
use crate::dto::InvitationAccepted;
use crate::ledger::{self, AccountRef};
use crate::services::customers;
use crate::services::people;
pub use crate::services::proof::Accepter;
use crate::state::AppState;
use chrono::{DateTime, Utc};
use entities::status::{InvitationStatus, OrganizationStatus};
use entities::{customers as customer_rows, invitations, organizations};
use money::NanoUsd;
use sea_orm::{
    ActiveEnum, ActiveModelTrait, ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter, Set,
};

/// Why an acceptance was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvitationError {
    #[error("this invitation does not exist")]
    NotFound,
    #[error("this invitation has expired; ask your provider for a new one")]
    Expired,
    #[error("this invitation was already accepted")]
    AlreadyAccepted,
    #[error("this invitation was revoked")]
    Revoked,
    #[error("this invitation was sent to another email address")]
    EmailMismatch,
    #[error("please try again later")]
    Unavailable,
    /// One message for a wrong password and a wrong, spent or expired code (nothing tells
    /// whether the address has an account).
    #[error("the password or the verification code is not correct, or the code has expired")]
    VerificationFailed,
    #[error("the password must be 12 to 128 characters")]
    WeakPassword,
    #[error("too many attempts; try again in {0} s")]
    Throttled(u64),
}

impl From<sea_orm::DbErr> for InvitationError {
    fn from(e: sea_orm::DbErr) -> Self {
        tracing::error!(error = %e, "database error during invitation acceptance");
        InvitationError::Unavailable
    }
}

/// What the page shows about an invitation.
pub struct InvitationView {
    pub organization_name: String,
    pub email_hint: String,
    pub status: InvitationStatus,
}

async fn find(
    state: &AppState,
    db: &impl sea_orm::ConnectionTrait,
    token: &str,
) -> Result<invitations::Model, InvitationError> {
    let hash = token_hash(&state.hasher, state.env, TokenKind::Invitation, token)
        .ok_or(InvitationError::NotFound)?;
    invitations::Entity::find()
        .filter(invitations::Column::TokenHash.eq(hash))
        .one(db)
        .await?
        .ok_or(InvitationError::NotFound)
}

/// The status an invitation has at `now`: a pending one past its expiry is expired.
fn effective_status(inv: &invitations::Model, now: chrono::DateTime<Utc>) -> InvitationStatus {
    if inv.status == InvitationStatus::Pending && inv.expires_at <= now {
        InvitationStatus::Expired
    } else {
        inv.status
    }
}

/// `Ok` when the invitation can still be accepted at `now`, else why not.
fn still_pending(
    inv: &invitations::Model,
    now: chrono::DateTime<Utc>,
) -> Result<(), InvitationError> {
    match effective_status(inv, now) {
        InvitationStatus::Pending => Ok(()),
        InvitationStatus::Accepted => Err(InvitationError::AlreadyAccepted),
        InvitationStatus::Expired => Err(InvitationError::Expired),
        InvitationStatus::Revoked => Err(InvitationError::Revoked),
    }
}

/// The proof-of-address subject of an invitation.
pub fn subject(inv: &invitations::Model) -> String {
    format!("invitation:{}", inv.id)
}

/// A pending invitation behind `token` and its organization's name; any other status is the
/// refusal to answer.
pub async fn pending(
    state: &AppState,
    token: &str,
) -> Result<(invitations::Model, String), InvitationError> {
    let inv = find(state, &state.db, token).await?;
    still_pending(&inv, state.clock.now())?;
    let customer = customer_rows::Entity::find_by_id(inv.customer_id)
        .one(&state.db)
        .await?
        .ok_or(InvitationError::NotFound)?;
    let org = organizations::Entity::find_by_id(customer.organization_id)
        .one(&state.db)
        .await?
        .ok_or(InvitationError::NotFound)?;
    Ok((inv, org.name))
}

/// The invitation behind a token, for the acceptance page.
pub async fn view(state: &AppState, token: &str) -> Result<InvitationView, InvitationError> {
    let inv = find(state, &state.db, token).await?;
    let customer = customer_rows::Entity::find_by_id(inv.customer_id)
        .one(&state.db)
        .await?
        .ok_or(InvitationError::NotFound)?;
    let org = organizations::Entity::find_by_id(customer.organization_id)
        .one(&state.db)
        .await?
        .ok_or(InvitationError::NotFound)?;
    let (local, domain) = inv.email.split_once('@').unwrap_or(("", ""));
    let hint = format!("{}…@{domain}", local.chars().next().unwrap_or('?'));
    Ok(InvitationView {
        organization_name: org.name,
        email_hint: hint,
        status: effective_status(&inv, state.clock.now()),
    })
}

/// Accepts the invitation whose code challenge `proof` was just answered, for `accepter`: the
/// organization is active from now on and the accepter, proven now, is its owner.
pub async fn accept(
    state: &AppState,
    token: &str,
    proof: &entities::console_challenges::Model,
    accepter: Accepter,
    ip: Option<String>,
) -> Result<(InvitationAccepted, entities::console_users::Model), InvitationError> {
    let txn = begin(&state.db).await?;
    let inv = find(state, &txn, token).await?;
    still_pending(&inv, state.clock.now())?;
    let now = state.clock.now();
    let email = inv.email.trim().to_ascii_lowercase();
    if proof.subject != subject(&inv) || proof.email != email {
        return Err(InvitationError::VerificationFailed);
    }
    if !crate::services::proof::finish(&txn, proof, now).await? {
        return Err(InvitationError::VerificationFailed);
    }
    let user = owner(&txn, accepter, &email, now).await?;
    let customer = customer_rows::Entity::find_by_id(inv.customer_id)
        .one(&txn)
        .await?
        .ok_or(InvitationError::NotFound)?;
    customers::lock_partner(&txn, customer.partner_id)
        .await
        .map_err(|_| InvitationError::Unavailable)?;
    let org = organizations::Entity::find_by_id(customer.organization_id)
        .one(&txn)
        .await?
        .ok_or(InvitationError::NotFound)?;
    let mut i: invitations::ActiveModel = inv.into();
    i.status = Set(InvitationStatus::Accepted);
    i.accepted_at = Set(Some(now));
    i.update(&txn).await?;
    let org_id = activate(&txn, &customer, org, &email, now).await?;
    memberships::join_org(&txn, org_id, user.id, "owner", now).await?;
    audit::audit(
        &txn,
        audit::Audit {
            organization: Some(org_id),
            partner: None,
            actor: Some(user.id),
            action: "organization_activated",
            target: Some(format!("customer:{}", customer.id)),
            detail: serde_json::json!({"email": email, "address_proven": "mailed code"}),
            ip,
        },
        now,
    )
    .await?;
    activated_event(&txn, state, &customer, org_id, now).await?;
    txn.commit().await?;
    // The wallet mirror opens from the ledger; if that fails it is reloaded at the next tick, and
    // until then admission and the billing balance fail closed.
    if let Err(e) = crate::services::wallets::reload(state, org_id).await {
        tracing::warn!(error = %e, organization_id = org_id, "wallet mirror not loaded yet");
        state.wallet_stale(org_id);
    }
    tracing::info!(
        organization_id = org_id,
        customer_id = customer.id,
        "customer activated"
    );
    Ok((
        InvitationAccepted {
            organization_id: org_id,
            status: "active",
        },
        user,
    ))
}

/// The partner's `customer.activated`, in the activation's transaction.
async fn activated_event(
    txn: &impl ConnectionTrait,
    state: &AppState,
    customer: &customer_rows::Model,
    org_id: i64,
    now: DateTime<Utc>,
) -> Result<(), sea_orm::DbErr> {
    crate::services::partner_webhooks::emit(
        txn,
        state,
        customer.partner_id,
        "customer.activated",
        serde_json::json!({
            "customer_id": customer.id,
            "external_customer_id": customer.external_id,
            "organization_id": org_id,
            "activated_at": now.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        }),
        None,
    )
    .await
    .map(|_| ())
}

/// The organization's first owner: the accepting account (its address now proven), or a new
/// one with the password of the first step (refused if an account of the address appeared since:
/// its password was never checked).
async fn owner(
    txn: &impl ConnectionTrait,
    accepter: Accepter,
    email: &str,
    now: DateTime<Utc>,
) -> Result<entities::console_users::Model, InvitationError> {
    match accepter {
        Accepter::Existing(id) => {
            let user = entities::console_users::Entity::find_by_id(id)
                .one(txn)
                .await?
                .filter(|u| u.email == email)
                .ok_or(InvitationError::VerificationFailed)?;
            Ok(people::mark_proven(txn, user, now).await?)
        }
        Accepter::New(hash) => {
            if people::find_user(txn, email).await?.is_some() {
                return Err(InvitationError::VerificationFailed);
            }
            people::insert_user(txn, email, hash, Some(now), now)
                .await
                .map_err(|e| match e {
                    people::PeopleError::InvalidEmail => InvitationError::EmailMismatch,
                    _ => InvitationError::Unavailable,
                })
        }
    }
}

/// The organization made active with its owner's address, its wallet opened and credited with
/// the customer's allocation from the partner's allocations; returns its id.
async fn activate(
    txn: &impl ConnectionTrait,
    customer: &customer_rows::Model,
    org: organizations::Model,
    email: &str,
    now: DateTime<Utc>,
) -> Result<i64, InvitationError> {
    let org_id = org.id;
    let mut o: organizations::ActiveModel = org.into();
    o.status = Set(OrganizationStatus::Active);
    o.owner_email = Set(Some(email.to_string()));
    o.activated_at = Set(Some(now));
    o.update(txn).await?;
    ledger::account(txn, &AccountRef::org_wallet(org_id)).await?;
    ledger::transfer(
        txn,
        &format!("activation:{}", customer.id),
        "allocation",
        &AccountRef::partner_allocations(customer.partner_id),
        &AccountRef::org_wallet(org_id),
        NanoUsd::from_nanos(customer.allocation_cap_nanos),
    )
    .await
    .map_err(|e| {
        tracing::error!(error = %e, "activation posting failed");
        InvitationError::Unavailable
    })?;
    Ok(org_id)
}

/// Revokes every pending invitation of the customer; returns how many.
async fn revoke_open(txn: &impl ConnectionTrait, customer_id: i64) -> Result<u64, sea_orm::DbErr> {
    let open = invitations::Entity::find()
        .filter(invitations::Column::CustomerId.eq(customer_id))
        .filter(invitations::Column::Status.eq(InvitationStatus::Pending))
        .all(txn)
        .await?;
    let revoked = open.len() as u64;
    for inv in open {
        let mut row: invitations::ActiveModel = inv.into();
        row.status = Set(InvitationStatus::Revoked);
        row.update(txn).await?;
    }
    Ok(revoked)
}

/// Mails a re-issued invitation to the customer's contact; says whether it was sent.
async fn mail_reissued(
    state: &AppState,
    customer: &customer_rows::Model,
    org: &str,
    invite_url: &str,
) -> String {
    let body = format!(
        "Hello,\n\nA new invitation to activate the organization \"{org}\" was issued for you; earlier links no longer work.\n\nAccept it (the link is valid for {days} days):\n\n{invite_url}\n\nUse this email address ({email}) when you accept.\n",
        days = customers::INVITATION_DAYS,
        email = customer.contact_email,
    );
    let subject = format!("Your new invitation to activate {org}");
    match state
        .mailer
        .send(&customer.contact_email, &subject, body)
        .await
    {
        Ok(()) => "sent".to_string(),
        Err(e) => {
            tracing::warn!(customer_id = customer.id, error = %e, "re-issued invitation not emailed");
            format!("not sent: {e}")
        }
    }
}

/// Accepts the invitation of `token` for the proven console user `user_id`, whose address the
/// operator vouches for (the demo command, tests of the money paths): the same acceptance as a
/// person's, with a challenge that is never mailed.
pub async fn accept_vouched(
    state: &AppState,
    token: &str,
    user_id: i64,
) -> Result<(InvitationAccepted, entities::console_users::Model), InvitationError> {
    let (inv, _) = pending(state, token).await?;
    let vouched = crate::services::proof::FirstStep {
        password_hash: None,
        user_id: Some(user_id),
    };
    let started = crate::services::proof::start(
        &state.db,
        state,
        crate::services::proof::Purpose::Invitation,
        &subject(&inv),
        &inv.email,
        vouched,
    )
    .await?;
    accept(
        state,
        token,
        &started.challenge,
        Accepter::Existing(user_id),
        None,
    )
    .await
}

/// What an operator's revocation or re-issue did.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Reissued {
    pub customer_id: i64,
    /// Invitations revoked by this command (pending or expired ones; accepted ones stay).
    pub revoked_invitations: u64,
    /// The new invitation (re-issue only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub invite_url: Option<String>,
    pub invitation_status: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub invitation_expires_at: Option<String>,
    /// Whether the new invitation's email was sent (re-issue only): `sent`, or why not (the
    /// link above can then be delivered by hand).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub email: Option<String>,
}

/// `admin-api invitation revoke --customer ID`: every open invitation of a customer that has not
/// activated becomes `revoked`; its link stops working at once. `reissue`: the same, then a new
/// pending invitation valid 14 days, emailed to the contact address (SPEC: re-issue is done outside
/// the partner API). An active customer has nothing to revoke or re-issue.
///
/// `by`: the console user (and their address) who asked, `None` for the operator's command; the
/// audit record commits with the change.
pub async fn revoke_or_reissue(
    state: &AppState,
    customer_id: i64,
    reissue: bool,
    by: Option<(i64, Option<String>)>,
) -> Result<Reissued, String> {
    use chrono::SecondsFormat;
    let db_err = |e: sea_orm::DbErr| format!("database: {e}");
    let txn = begin(&state.db).await.map_err(db_err)?;
    let customer = customer_rows::Entity::find_by_id(customer_id)
        .one(&txn)
        .await
        .map_err(db_err)?
        .ok_or_else(|| format!("--customer {customer_id}: no such customer"))?;
    let org = organizations::Entity::find_by_id(customer.organization_id)
        .one(&txn)
        .await
        .map_err(db_err)?
        .ok_or_else(|| format!("--customer {customer_id}: its organization is missing"))?;
    if org.status == OrganizationStatus::Active {
        return Err(format!(
            "--customer {customer_id}: the customer is active (its invitation was accepted); nothing to revoke or re-issue"
        ));
    }
    let revoked = revoke_open(&txn, customer_id).await.map_err(db_err)?;
    audit::audit(
        &txn,
        audit::Audit {
            organization: Some(org.id),
            partner: Some(customer.partner_id),
            actor: by.as_ref().map(|(user, _)| *user),
            action: if reissue {
                "invitation_reissued"
            } else {
                "invitation_revoked"
            },
            target: Some(format!("customer:{customer_id}")),
            detail: serde_json::json!({
                "by": if by.is_some() { "console" } else { "operator command" },
                "revoked_invitations": revoked,
            }),
            ip: by.and_then(|(_, ip)| ip),
        },
        state.clock.now(),
    )
    .await
    .map_err(db_err)?;
    if !reissue {
        txn.commit().await.map_err(db_err)?;
        tracing::info!(customer_id, revoked, "invitation revoked by the operator");
        return Ok(Reissued {
            customer_id,
            revoked_invitations: revoked,
            invite_url: None,
            invitation_status: InvitationStatus::Revoked.to_value(),
            invitation_expires_at: None,
            email: None,
        });
    }
    let now = state.clock.now();
    let expires_at = now + chrono::Duration::days(customers::INVITATION_DAYS);
    let invite_url =
        customers::new_invitation(&txn, state, customer_id, &customer.contact_email, now)
            .await
            .map_err(db_err)?;
    txn.commit().await.map_err(db_err)?;
    let email = mail_reissued(state, &customer, &org.name, &invite_url).await;
    tracing::info!(customer_id, revoked, "invitation re-issued by the operator");
    Ok(Reissued {
        customer_id,
        revoked_invitations: revoked,
        invite_url: Some(invite_url),
        invitation_status: InvitationStatus::Pending.to_value(),
        invitation_expires_at: Some(expires_at.to_rfc3339_opts(SecondsFormat::Secs, true)),
        email: Some(email),
    })
}
