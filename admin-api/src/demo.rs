//! The quickstart's demo. [`quickstart`] (the `demo` command) makes the demo partner and the demo
//! organization as its funded, active customer through the partner API's own services, and a
//! fresh key each time it is asked for (an earlier key's secret cannot be shown again).
//! [`demo_key`] is the tests' smaller fixture: an organization of no partner, with a one-time
//! 100 USD credit in the ledger, priced at the official rate. The gateway loads the wallet mirror
//! from the ledger when it starts.

use crate::keys::{self, KeyError};
use crate::services::memberships;
use crate::services::sessions;
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

/// Ensures the fixture's organization (no partner, a one-time 100 USD credit) exists and mints a
/// key for `group_id`.
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
    let created =
        keys::create_key(db, directory, hasher, env, quickstart_key(org.id, group_id)).await?;
    let now = Utc::now();
    let password = crate::services::sessions::secret()[..20].to_string();
    let owner = fresh_password(db, DEMO_OWNER, &password, now)
        .await
        .map_err(|e| KeyError::Database(sea_orm::DbErr::Custom(e)))?;
    crate::services::memberships::join_org(db, org.id, owner.id, "owner", now).await?;
    Ok(DemoKey {
        organization_id: org.id,
        key_id: created.row.id,
        group_id,
        api_key: created.secret.expose().to_string(),
        console_email: DEMO_OWNER.to_string(),
        console_password: password,
    })
}

/// The quickstart's reseller: one partner, funded once with [`DEMO_PARTNER_FUNDING_USD`], whose
/// customer the demo organization is.
pub const DEMO_PARTNER: &str = "Demo partner";
/// The demo partner's owner in the console.
pub const DEMO_PARTNER_OWNER: &str = "partner@demo.example";
/// The demo partner's one-time funding.
pub const DEMO_PARTNER_FUNDING_USD: i64 = 1_000;
/// The demo customer's external id at the demo partner.
pub const DEMO_EXTERNAL_ID: &str = "demo";

/// What the `demo` command prints: the demo organization's key and owner (as [`DemoKey`]) and the
/// demo partner's owner.
#[derive(Debug, Serialize)]
pub struct Demo {
    #[serde(flatten)]
    pub key: DemoKey,
    pub partner_id: i64,
    pub customer_id: i64,
    pub partner_email: String,
    pub partner_password: String,
}

/// The quickstart's world, made through the partner API's own services so that every figure of
/// both console halves is a real one: the demo partner (funded once), the demo organization as its
/// customer (created with a 100 USD allocation at a retail rate 25 % above the highest floor,
/// its invitation accepted by `owner@demo.example`), and a fresh key of `group_id` priced at that
/// rate. Both owners get a fresh password each time (printed once, like the key). Safe to run
/// again: the partner and the customer are found, not made twice; nothing is funded twice.
pub async fn quickstart(state: &crate::state::AppState, group_id: i64) -> Result<Demo, String> {
    use entities::customers as customer_rows;
    let db_err = |e: sea_orm::DbErr| format!("database: {e}");
    let now = Utc::now();

    // The partner, funded once (the reference makes a second run a no-op).
    let partner = demo_partner(state, now).await?;

    // Both owners, with fresh passwords.
    let owner_password = sessions::secret()[..20].to_string();
    let owner = fresh_password(&state.db, DEMO_OWNER, &owner_password, now).await?;
    let partner_password = sessions::secret()[..20].to_string();
    let partner_owner =
        fresh_password(&state.db, DEMO_PARTNER_OWNER, &partner_password, now).await?;
    memberships::join_partner(&state.db, partner.id, partner_owner.id, "owner", now)
        .await
        .map_err(db_err)?;

    // The customer, created by the partner's own rules, then activated by its owner.
    let existing = customer_rows::Entity::find()
        .filter(customer_rows::Column::PartnerId.eq(partner.id))
        .filter(customer_rows::Column::ExternalId.eq(DEMO_EXTERNAL_ID))
        .one(&state.db)
        .await
        .map_err(db_err)?;
    let (customer_id, invite_url) = match existing {
        Some(c) => (c.id, None),
        None => create_customer(state, &partner).await?,
    };
    let customer = customer_rows::Entity::find_by_id(customer_id)
        .one(&state.db)
        .await
        .map_err(db_err)?
        .ok_or("the demo customer vanished")?;
    let org = organizations::Entity::find_by_id(customer.organization_id)
        .one(&state.db)
        .await
        .map_err(db_err)?
        .ok_or("the demo organization vanished")?;
    if org.status != OrganizationStatus::Active {
        activate(state, customer_id, invite_url, owner.id).await?;
    }
    memberships::join_org(&state.db, org.id, owner.id, "owner", now)
        .await
        .map_err(db_err)?;

    let created = keys::create_key(
        &state.db,
        state.stores.keys.as_ref(),
        &state.hasher,
        state.env,
        quickstart_key(org.id, group_id),
    )
    .await
    .map_err(|e| e.to_string())?;
    Ok(Demo {
        key: DemoKey {
            organization_id: org.id,
            key_id: created.row.id,
            group_id,
            api_key: created.secret.expose().to_string(),
            console_email: DEMO_OWNER.to_string(),
            console_password: owner_password,
        },
        partner_id: partner.id,
        customer_id,
        partner_email: DEMO_PARTNER_OWNER.to_string(),
        partner_password,
    })
}

/// The demo partner (made on the first run), funded once: the reference makes a second run a
/// no-op.
async fn demo_partner(
    state: &crate::state::AppState,
    now: chrono::DateTime<Utc>,
) -> Result<entities::partners::Model, String> {
    use crate::services::funding;
    use entities::partners;
    let db_err = |e: sea_orm::DbErr| format!("database: {e}");
    let txn = crate::db::begin(&state.db).await.map_err(db_err)?;
    let partner = match partners::Entity::find()
        .filter(partners::Column::Name.eq(DEMO_PARTNER))
        .one(&txn)
        .await
        .map_err(db_err)?
    {
        Some(p) => p,
        None => partners::ActiveModel {
            name: Set(DEMO_PARTNER.into()),
            min_rate_multiplier_ppm: Set(money::RateMultiplier::ONE.ppm()),
            role: Set("owner".into()),
            created_at: Set(now),
            ..Default::default()
        }
        .insert(&txn)
        .await
        .map_err(db_err)?,
    };
    funding::fund(
        &txn,
        partner.id,
        money::NanoUsd::from_nanos(DEMO_PARTNER_FUNDING_USD * money::NANOS_PER_USD),
        &format!("demo:partner-funding:{}", partner.id),
    )
    .await
    .map_err(|e| format!("funding the demo partner: {e:?}"))?;
    txn.commit().await.map_err(db_err)?;
    Ok(partner)
}

/// The demo customer, created by the partner's own rules (its invitation is not mailed: the
/// quickstart accepts it at once): its id and invitation link.
async fn create_customer(
    state: &crate::state::AppState,
    partner: &entities::partners::Model,
) -> Result<(i64, Option<String>), String> {
    use crate::services::customers;
    let db_err = |e: sea_orm::DbErr| format!("database: {e}");
    let taken = organizations::Entity::find()
        .filter(organizations::Column::Slug.eq(DEMO_SLUG))
        .one(&state.db)
        .await
        .map_err(db_err)?;
    if taken.is_some() {
        return Err(format!(
            "an organization with the slug {DEMO_SLUG:?} exists that is not the demo \
             partner's customer (made by an earlier quickstart): remove the database \
             (data/quickstart.db for the quickstart) and run again"
        ));
    }
    let min_rate = money::RateMultiplier::from_ppm(partner.min_rate_multiplier_ppm)
        .ok_or("the demo partner's minimum rate is not a positive multiplier")?;
    let floor = customers::highest_floor(state, min_rate);
    let retail = money::RateMultiplier::from_ppm(floor.ppm().saturating_mul(5) / 4)
        .ok_or("no retail rate above the floor")?;
    let caller = crate::caller::Caller {
        partner_id: partner.id,
        partner_name: partner.name.clone(),
        token_id: 0,
        token_preview: "demo".into(),
        scopes: vec!["partner:write".into()],
        role: "owner".into(),
        min_rate,
    };
    let new = customers::NewCustomer {
        name: "Demo organization".into(),
        slug: DEMO_SLUG.into(),
        contact_email: DEMO_OWNER.into(),
        billing_email: None,
        initial_allocation: money::NanoUsd::from_nanos(DEMO_CREDIT_USD * money::NANOS_PER_USD),
        retail_rate: retail,
    };
    let txn = crate::db::begin(&state.db).await.map_err(db_err)?;
    // The invitation mail is not sent: the demo accepts it at once below.
    let done = customers::create(&txn, state, &caller, "demo:customer", DEMO_EXTERNAL_ID, new)
        .await
        .map_err(|e| format!("creating the demo customer: {e:?}"))?;
    txn.commit().await.map_err(db_err)?;
    Ok((done.data.customer.id, done.data.activation.invite_url))
}

/// Activates the demo customer whose organization is not active: a new customer (its
/// invitation), or one whose earlier activation did not finish (a fresh invitation), accepted by
/// the owner's address with the password just set.
async fn activate(
    state: &crate::state::AppState,
    customer_id: i64,
    invite_url: Option<String>,
    owner_id: i64,
) -> Result<(), String> {
    use crate::services::invitations;
    let url = match invite_url {
        Some(url) => url,
        None => invitations::revoke_or_reissue(state, customer_id, true, None)
            .await?
            .invite_url
            .ok_or("no invitation was issued")?,
    };
    // The operator's command vouches for the demo owner's address.
    let token = url.rsplit('/').next().unwrap_or_default();
    invitations::accept_vouched(state, token, owner_id)
        .await
        .map_err(|e| format!("activating the demo customer: {e:?}"))?;
    Ok(())
}

/// A demo key: named "quickstart", every surface, no expiry, the group's limits.
fn quickstart_key(organization_id: i64, group_id: i64) -> keys::NewKey<'static> {
    keys::NewKey {
        organization_id,
        group_id,
        name: "quickstart",
        permissions: KeyPermissions::default(),
        expires_at: None,
        limits: opstate::KeyLimits::default(),
        budget: None,
    }
}

/// The console user of `email` with `password` (made, or its password replaced), its address
/// vouched for by the operator who runs the demo command.
async fn fresh_password(
    db: &impl ConnectionTrait,
    email: &str,
    password: &str,
    now: chrono::DateTime<Utc>,
) -> Result<entities::console_users::Model, String> {
    use crate::services::people;
    match people::find_user(db, email)
        .await
        .map_err(|e| format!("database: {e}"))?
    {
        Some(user) => match people::set_password(db, user, password, now).await {
            Ok(user) => people::mark_proven(db, user, now).await.map_err(Into::into),
            Err(e) => Err(e),
        },
        None => people::create_user(db, email, password, Some(now), now).await,
    }
    .map_err(|e| format!("console user {email}: {e}"))
}
