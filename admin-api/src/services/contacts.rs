//! Who hears about a balance: an organization's or a partner's name and its owners' addresses,
//! and a mail to each of them (a failure logged, never returned: a mail is not money).

use super::fault::Fault;
use crate::state::AppState;
use entities::{org_members, organizations, partner_members, partners};
use sea_orm::{ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter};

/// The organization's name and who hears about its balance: its billing contact and its owners.
pub async fn org_contacts(
    db: &impl ConnectionTrait,
    org: i64,
) -> Result<(String, Vec<String>), Fault> {
    let o = organizations::Entity::find_by_id(org)
        .one(db)
        .await?
        .ok_or(Fault::Broken(
            "a partner or organization named by a rule has no row",
        ))?;
    let owners = org_members::Entity::find()
        .filter(org_members::Column::OrganizationId.eq(org))
        .filter(org_members::Column::Role.eq("owner"))
        .all(db)
        .await?;
    let emails =
        crate::services::memberships::emails_of(db, owners.iter().map(|m| m.user_id)).await?;
    let mut to: Vec<String> = o
        .billing_email
        .iter()
        .chain(o.owner_email.iter())
        .cloned()
        .collect();
    to.extend(emails.into_values());
    Ok((o.name, dedup(to)))
}

/// The partner's name and its team's owners.
pub async fn partner_contacts(
    db: &impl ConnectionTrait,
    partner: i64,
) -> Result<(String, Vec<String>), Fault> {
    let p = partners::Entity::find_by_id(partner)
        .one(db)
        .await?
        .ok_or(Fault::Broken(
            "a partner or organization named by a rule has no row",
        ))?;
    let owners = partner_members::Entity::find()
        .filter(partner_members::Column::PartnerId.eq(partner))
        .filter(partner_members::Column::Role.eq("owner"))
        .all(db)
        .await?;
    let emails =
        crate::services::memberships::emails_of(db, owners.iter().map(|m| m.user_id)).await?;
    Ok((p.name, dedup(emails.into_values().collect())))
}

fn dedup(mut to: Vec<String>) -> Vec<String> {
    for e in &mut to {
        *e = e.trim().to_ascii_lowercase();
    }
    to.retain(|e| !e.is_empty());
    to.sort();
    to.dedup();
    to
}

/// Mails `body` to each of `to`; a failure is logged (the alert's state stays claimed: one
/// attempt per crossing, never a storm of retries).
pub async fn mail_all(state: &AppState, to: &[String], subject: &str, body: &str) {
    for address in to {
        if let Err(e) = state.mailer.send(address, subject, body.to_string()).await {
            tracing::warn!(error = %e, subject, "an alert mail was not sent");
        }
    }
}
