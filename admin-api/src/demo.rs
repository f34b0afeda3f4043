//! The quickstart's demo customer: one active organization with a one-time 100 USD credit in the
//! ledger, and a fresh key each time it is asked for (an earlier key's secret cannot be shown
//! again). The gateway loads the wallet mirror from the ledger when it starts.

use crate::keys::{self, KeyError};
use chrono::Utc;
use credentials::{Env, KeyHasher};
use entities::organizations;
use entities::status::OrganizationStatus;
use opstate::{KeyDirectory, KeyPermissions};
use sea_orm::{ActiveModelTrait, ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter, Set};
use serde::Serialize;

const DEMO_SLUG: &str = "demo";
/// The demo organization's one-time credit.
pub const DEMO_CREDIT_USD: i64 = 100;

/// What the `demo` command prints.
#[derive(Debug, Serialize)]
pub struct DemoKey {
    pub organization_id: i64,
    pub key_id: i64,
    pub group_id: i64,
    pub api_key: String,
    /// The demo organization's owner in the console, with a fresh password each time (a
    /// development convenience: it is printed once, like the key).
    pub console_email: String,
    pub console_password: String,
}

/// The console address of the demo organization's owner.
pub const DEMO_OWNER: &str = "owner@demo.example";

/// Ensures the demo organization exists and mints a key for `group_id`.
pub async fn demo_key(
    db: &impl ConnectionTrait,
    directory: &dyn KeyDirectory,
    hasher: &KeyHasher,
    env: Env,
    group_id: i64,
) -> Result<DemoKey, KeyError> {
    let org = match organizations::Entity::find()
        .filter(organizations::Column::Slug.eq(DEMO_SLUG))
        .one(db)
        .await?
    {
        Some(org) => org,
        None => {
            organizations::ActiveModel {
                name: Set("Demo organization".into()),
                slug: Set(DEMO_SLUG.into()),
                status: Set(OrganizationStatus::Active),
                created_at: Set(Utc::now()),
                ..Default::default()
            }
            .insert(db)
            .await?
        }
    };
    // A demo credit, once per organization, so the quickstart's key can spend.
    crate::ledger::transfer(
        db,
        &format!("demo:credit:{}", org.id),
        "demo_credit",
        &crate::ledger::AccountRef::external(),
        &crate::ledger::AccountRef::org_wallet(org.id),
        money::NanoUsd::from_nanos(DEMO_CREDIT_USD * money::NANOS_PER_USD),
    )
    .await
    .map_err(|e| KeyError::Database(sea_orm::DbErr::Custom(e.to_string())))?;
    let created = keys::create_key(
        db,
        directory,
        hasher,
        env,
        keys::NewKey {
            organization_id: org.id,
            group_id,
            name: "quickstart",
            permissions: KeyPermissions::default(),
            expires_at: None,
            limits: opstate::KeyLimits::default(),
        },
    )
    .await?;
    let now = Utc::now();
    let password = crate::services::people::secret()[..20].to_string();
    let owner = match crate::services::people::find_user(db, DEMO_OWNER).await? {
        Some(user) => crate::services::people::set_password(db, user, &password, now).await,
        None => crate::services::people::create_user(db, DEMO_OWNER, &password, now).await,
    }
    .map_err(|e| KeyError::Database(sea_orm::DbErr::Custom(e.to_string())))?;
    crate::services::people::join_org(db, org.id, owner.id, "owner", now).await?;
    Ok(DemoKey {
        organization_id: org.id,
        key_id: created.row.id,
        group_id,
        api_key: created.secret.expose().to_string(),
        console_email: DEMO_OWNER.to_string(),
        console_password: password,
    })
}
