//! Customers: creation (with its invitation and funding reservation), reads, activation state.

use super::fault::{Fault, Shortfall};
use crate::caller::Caller;
use crate::dto::{
    Activation, CreateCustomerRequest, Customer, CustomerBalance, CustomerData, Usd, multiplier_of,
    usd_of,
};
use crate::ledger::{self, AccountRef};
use crate::pricing;
use crate::services::effects::{Effect, Written};
use crate::state::AppState;
use crate::text;
use chrono::{DateTime, Duration, SecondsFormat, Utc};
use entities::status::{GroupStatus, InvitationStatus, OrganizationStatus};
use entities::{customer_groups, customers, invitations, organizations, partners};
use money::{NanoUsd, RateMultiplier};
use rand::Rng;
use sea_orm::ActiveEnum;
use sea_orm::{
    ActiveModelTrait, ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter, QueryOrder,
    QuerySelect, Set,
};
use serde_json::Value;

/// Why a customer is refused or not found.
#[derive(Debug, thiserror::Error)]
pub enum CustomerError {
    /// The external id is not 1 to 128 letters, digits, `.`, `_`, `:` or `-` (or is `.`/`..`).
    #[error("external_customer_id must be 1 to 128 letters, digits, '.', '_', ':' or '-'")]
    InvalidExternalId,
    /// The body is malformed (name, slug, an unknown field); the text says which.
    #[error("invalid customer: {0}")]
    Invalid(String),
    /// `contact_email` or `billing_email` is not an address.
    #[error("contact_email must be a valid email address")]
    InvalidContact,
    /// The initial allocation is not a non-negative amount with at most 9 decimals.
    #[error("initial_allocation_usd must be a non-negative amount with at most 9 decimals")]
    InvalidInitialAllocation,
    /// The retail multiplier is missing or malformed.
    #[error(
        "retail_rate_multiplier is required and must be a positive number with at most 6 decimals"
    )]
    InvalidRetailRate,
    /// The retail multiplier is below the partner's floor.
    #[error("the retail rate multiplier is below the retail floor {floor}")]
    RateBelowFloor { floor: RateMultiplier },
    /// Partner funding does not cover the initial allocation's reservation.
    #[error("available partner funding does not cover the reservation")]
    Short(Shortfall),
    /// The external id names a customer with another contact.
    #[error("this external_customer_id is already used by another customer")]
    ExternalIdConflict,
    /// The organization slug belongs to another organization.
    #[error("this organization slug is taken")]
    SlugTaken,
    /// No customer of this partner has this id.
    #[error("customer not found")]
    NotFound,
    /// The customer has not accepted its invitation: allocations and keys wait.
    #[error("the customer has not accepted the invitation yet")]
    PendingActivation {
        invited_email: String,
        invitation_status: String,
        invitation_expires_at: String,
    },
    #[error(transparent)]
    Fault(Fault),
}
super::fault::faults!(CustomerError);

/// Invitations are valid this long.
pub const INVITATION_DAYS: i64 = 14;

/// A validated create-customer request.
#[derive(Debug, Clone)]
pub struct NewCustomer {
    pub name: String,
    pub slug: String,
    pub contact_email: String,
    pub billing_email: Option<String>,
    pub initial_allocation: NanoUsd,
    pub retail_rate: RateMultiplier,
}

/// Validates an external customer id (path parameter). `.` and `..` are refused: HTTP clients
/// remove such path segments, so a customer created with one could never be addressed.
pub fn external_id(raw: &str) -> Result<String, CustomerError> {
    let ok = !raw.is_empty()
        && raw != "."
        && raw != ".."
        && raw.len() <= 128
        && raw
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-'));
    if ok {
        Ok(raw.to_string())
    } else {
        Err(CustomerError::InvalidExternalId)
    }
}

/// Derives an organization slug: lowercase ASCII letters and digits, runs of anything else as
/// one `-`, at most 64 characters. `None` when nothing usable remains.
pub fn slugify(name: &str) -> Option<String> {
    let mut out = String::new();
    for c in name.chars() {
        if c.is_ascii_alphanumeric() {
            out.push(c.to_ascii_lowercase());
        } else if !out.ends_with('-') && !out.is_empty() {
            out.push('-');
        }
    }
    let out: String = out.trim_end_matches('-').chars().take(64).collect();
    let out = out.trim_end_matches('-').to_string();
    (!out.is_empty()).then_some(out)
}

impl NewCustomer {
    /// Validates a create body, in the order of the spec's error table.
    pub fn parse(body: CreateCustomerRequest) -> Result<NewCustomer, CustomerError> {
        if let Some(unknown) = body.unknown.keys().next() {
            return Err(CustomerError::Invalid(format!("unknown field {unknown:?}")));
        }
        let name = match &body.name {
            Some(Value::String(s)) if text::plain_text(s, 200) => s.trim().to_string(),
            _ => {
                return Err(CustomerError::Invalid(
                    "name is required (1 to 200 characters, no control characters)".into(),
                ));
            }
        };
        let slug = match &body.slug {
            None | Some(Value::Null) => slugify(&name).ok_or_else(|| {
                CustomerError::Invalid("no slug can be derived from name; send slug".into())
            })?,
            Some(Value::String(s)) if slugify(s).as_deref() == Some(s.as_str()) => s.clone(),
            Some(_) => {
                return Err(CustomerError::Invalid(
                    "slug must be 1 to 64 lowercase letters, digits and single dashes".into(),
                ));
            }
        };
        let contact_email = match &body.contact_email {
            Some(Value::String(s)) if text::valid_email(s.trim()) => s.trim().to_ascii_lowercase(),
            _ => return Err(CustomerError::InvalidContact),
        };
        let billing_email = match &body.billing_email {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) if text::valid_email(s.trim()) => {
                Some(s.trim().to_ascii_lowercase())
            }
            Some(_) => return Err(CustomerError::InvalidContact),
        };
        let initial_allocation = body
            .initial_allocation_usd
            .as_ref()
            .and_then(usd_of)
            .filter(|n| !n.is_negative())
            .ok_or(CustomerError::InvalidInitialAllocation)?;
        let retail_rate = body
            .retail_rate_multiplier
            .as_ref()
            .and_then(multiplier_of)
            .ok_or(CustomerError::InvalidRetailRate)?;
        Ok(NewCustomer {
            name,
            slug,
            contact_email,
            billing_email,
            initial_allocation,
            retail_rate,
        })
    }
}

/// The configured groups every customer gets, as (id, wholesale).
pub(super) fn catalogue(state: &AppState) -> Vec<(i64, RateMultiplier)> {
    state
        .groups()
        .iter()
        .map(|g| (g.id, g.wholesale_rate_multiplier))
        .collect()
}

/// The highest retail floor across the catalogue for this partner.
pub fn highest_floor(state: &AppState, min_rate: RateMultiplier) -> RateMultiplier {
    catalogue(state)
        .into_iter()
        .map(|(_, w)| pricing::retail_floor(min_rate, w))
        .max()
        .unwrap_or(min_rate)
}

/// Locks the partner row for the rest of the transaction (PostgreSQL), so concurrent funding moves
/// of one partner serialize. SQLite write transactions are serialized already.
pub async fn lock_partner(txn: &impl ConnectionTrait, partner_id: i64) -> Result<(), Fault> {
    partners::Entity::find_by_id(partner_id)
        .lock_exclusive()
        .one(txn)
        .await?
        .ok_or(Fault::Broken("a caller's partner has no row"))?;
    Ok(())
}

/// Creates the customer, or returns the existing one for the same external id.
pub async fn create(
    txn: &impl ConnectionTrait,
    state: &AppState,
    caller: &Caller,
    op: &str,
    external: &str,
    new: NewCustomer,
) -> Result<Written<CustomerData>, CustomerError> {
    let floor = highest_floor(state, caller.min_rate);
    if new.retail_rate < floor {
        return Err(CustomerError::RateBelowFloor { floor });
    }
    lock_partner(txn, caller.partner_id).await?;
    if let Some(existing) = customers::Entity::find()
        .filter(customers::Column::PartnerId.eq(caller.partner_id))
        .filter(customers::Column::ExternalId.eq(external))
        .one(txn)
        .await?
    {
        if existing.contact_email != new.contact_email {
            return Err(CustomerError::ExternalIdConflict);
        }
        let data = view(txn, state, &existing, Some(false), None).await?;
        return Ok(Written::plain(data));
    }
    if organizations::Entity::find()
        .filter(organizations::Column::Slug.eq(new.slug.as_str()))
        .one(txn)
        .await?
        .is_some()
    {
        return Err(CustomerError::SlugTaken);
    }
    let required = reservation(txn, state, caller.partner_id, &new).await?;
    let now = state.clock.now();
    let customer = insert(txn, state, caller.partner_id, external, &new, now).await?;
    ledger::transfer(
        txn,
        &format!("{op}:reserve"),
        "partner_reservation",
        &AccountRef::partner_available(caller.partner_id),
        &AccountRef::partner_reserved(caller.partner_id, customer.id),
        required,
    )
    .await?;
    let invite_url = new_invitation(txn, state, customer.id, &new.contact_email, now).await?;
    let data = view(txn, state, &customer, Some(true), Some(&invite_url)).await?;
    Ok(Written {
        stored: data.without_secrets(),
        data,
        effects: vec![invitation_mail(caller, &new, &invite_url)],
    })
}

/// What a new customer's initial allocation reserves of partner funding at its retail rate in
/// every configured group; refused when available funding does not cover it.
async fn reservation(
    txn: &impl ConnectionTrait,
    state: &AppState,
    partner_id: i64,
    new: &NewCustomer,
) -> Result<NanoUsd, CustomerError> {
    let groups: Vec<(RateMultiplier, RateMultiplier)> = catalogue(state)
        .into_iter()
        .map(|(_, w)| (w, new.retail_rate))
        .collect();
    let required = pricing::reservation(new.initial_allocation, &groups)
        .ok_or(CustomerError::InvalidInitialAllocation)?;
    let available = ledger::balance(txn, &AccountRef::partner_available(partner_id).code).await?;
    if required > available {
        return Err(CustomerError::Short(Shortfall {
            available,
            required,
        }));
    }
    Ok(required)
}

/// The new customer's rows: its organization (pending activation), the customer, and every
/// configured group at its retail rate.
async fn insert(
    txn: &impl ConnectionTrait,
    state: &AppState,
    partner_id: i64,
    external: &str,
    new: &NewCustomer,
    now: DateTime<Utc>,
) -> Result<customers::Model, CustomerError> {
    let org = organizations::ActiveModel {
        name: Set(new.name.clone()),
        slug: Set(new.slug.clone()),
        status: Set(OrganizationStatus::PendingActivation),
        created_at: Set(now),
        billing_email: Set(new.billing_email.clone()),
        ..Default::default()
    }
    .insert(txn)
    .await?;
    let customer = customers::ActiveModel {
        partner_id: Set(partner_id),
        external_id: Set(external.to_string()),
        organization_id: Set(org.id),
        display_name: Set(new.name.clone()),
        contact_email: Set(new.contact_email.clone()),
        billing_mode: Set("prepaid".into()),
        billing_allocation_mode: Set("partner_funded".into()),
        allocation_cap_nanos: Set(new.initial_allocation.nanos()),
        created_at: Set(now),
        ..Default::default()
    }
    .insert(txn)
    .await?;
    for (group_id, _) in catalogue(state) {
        customer_groups::ActiveModel {
            customer_id: Set(customer.id),
            group_id: Set(group_id),
            retail_rate_multiplier_ppm: Set(new.retail_rate.ppm()),
            status: Set(GroupStatus::Active),
            created_at: Set(now),
            updated_at: Set(now),
            ..Default::default()
        }
        .insert(txn)
        .await?;
    }
    Ok(customer)
}

/// The invitation mailed to a new customer's contact after the commit.
fn invitation_mail(caller: &Caller, new: &NewCustomer, invite_url: &str) -> Effect {
    Effect::Email {
        to: new.contact_email.clone(),
        subject: format!(
            "{} invites you to activate {}",
            caller.partner_name, new.name
        ),
        body: format!(
            "Hello,\n\n{partner} created the organization \"{org}\" for you.\n\nAccept the invitation to activate it (the link is valid for {INVITATION_DAYS} days):\n\n{invite_url}\n\nUse this email address ({email}) when you accept.\n",
            partner = caller.partner_name,
            org = new.name,
            email = new.contact_email,
        ),
    }
}

/// A new pending invitation of `customer_id` for `email`, valid [`INVITATION_DAYS`] from `now`:
/// only its token's keyed hash is stored; returns its link (the token is in no other place).
pub(crate) async fn new_invitation(
    txn: &impl ConnectionTrait,
    state: &AppState,
    customer_id: i64,
    email: &str,
    now: DateTime<Utc>,
) -> Result<String, sea_orm::DbErr> {
    let token = invitation_token();
    invitations::ActiveModel {
        customer_id: Set(customer_id),
        token_hash: Set(state.hasher.hash(&token)),
        email: Set(email.to_string()),
        status: Set(InvitationStatus::Pending),
        expires_at: Set(now + Duration::days(INVITATION_DAYS)),
        accepted_at: Set(None),
        created_at: Set(now),
        ..Default::default()
    }
    .insert(txn)
    .await?;
    Ok(state.public_url(&format!("/invitations/{token}")))
}

/// A fresh invitation token (URL-safe, 43 characters, about 256 bits).
pub(super) fn invitation_token() -> String {
    const ALPHABET: &[u8] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    let mut rng = rand::rng();
    (0..43)
        .map(|_| char::from(ALPHABET[rng.random_range(0..ALPHABET.len())]))
        .collect()
}

pub(super) fn ts(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Secs, true)
}

/// The latest invitation of a customer and its effective status (`pending` past its expiry reads
/// `expired`).
pub async fn invitation(
    db: &impl ConnectionTrait,
    customer_id: i64,
    now: DateTime<Utc>,
) -> Result<Option<(invitations::Model, String)>, CustomerError> {
    let inv = invitations::Entity::find()
        .filter(invitations::Column::CustomerId.eq(customer_id))
        .order_by_desc(invitations::Column::Id)
        .one(db)
        .await?;
    Ok(inv.map(|i| {
        let status = if i.status == InvitationStatus::Pending && i.expires_at <= now {
            InvitationStatus::Expired.to_value()
        } else {
            i.status.to_value()
        };
        (i, status)
    }))
}

/// The org spend so far (retail USD debited from the wallet).
pub async fn used(
    db: &impl ConnectionTrait,
    organization_id: i64,
) -> Result<NanoUsd, CustomerError> {
    let spend = ledger::balance(db, &AccountRef::org_spend(organization_id).code).await?;
    Ok(spend)
}

/// Customer response data (`created` only on the create route; `invite_url` only on the response
/// that created the customer).
pub async fn view(
    db: &impl ConnectionTrait,
    state: &AppState,
    customer: &customers::Model,
    created: Option<bool>,
    invite_url: Option<&str>,
) -> Result<CustomerData, CustomerError> {
    let org = organizations::Entity::find_by_id(customer.organization_id)
        .one(db)
        .await?
        .ok_or(Fault::Broken("a customer's organization has no row"))?;
    let cap = NanoUsd::from_nanos(customer.allocation_cap_nanos);
    let used = used(db, org.id).await?;
    let balance = ledger::balance(db, &AccountRef::org_wallet(org.id).code).await?;
    // Money held by requests in flight is not available; without a mirror nothing is.
    let available = match state.stores.wallets.snapshot(org.id).await? {
        Some(w) => balance.remaining_after(w.reserved),
        None => NanoUsd::ZERO,
    };
    let inv = invitation(db, customer.id, state.clock.now()).await?;
    let activation = Activation {
        method: "email_invitation",
        invited_email: customer.contact_email.clone(),
        invitation_status: inv.as_ref().map(|(_, status)| status.clone()),
        invitation_expires_at: inv.as_ref().map(|(i, _)| ts(i.expires_at)),
        invite_url: invite_url.map(str::to_string),
    };
    let hint = match (org.status, inv.as_ref().map(|(_, s)| s.as_str())) {
        (OrganizationStatus::Active, _) => "The customer is active: fund it with allocations and create API keys for its model groups.".to_string(),
        (_, Some("expired")) => "The invitation expired; the customer cannot activate until a new invitation is issued outside the API.".to_string(),
        (_, Some("revoked")) => "The invitation was revoked; the customer cannot activate until a new invitation is issued outside the API.".to_string(),
        _ => format!("Waiting for {} to accept the invitation sent by email; until then the customer cannot be funded, keyed or used.", customer.contact_email),
    };
    Ok(CustomerData {
        external_customer_id: customer.external_id.clone(),
        created,
        status: org.status.to_value(),
        customer: Customer {
            id: customer.id,
            organization_name: org.name,
            organization_slug: org.slug,
            display_name: customer.display_name.clone(),
            email: customer.contact_email.clone(),
            billing_email: org.billing_email.clone(),
            billing_mode: customer.billing_mode.clone(),
            billing_allocation_mode: customer.billing_allocation_mode.clone(),
            partner_allocation_cap_usd: Usd(cap),
            partner_allocation_used_usd: Usd(used),
            partner_allocation_remaining_usd: Usd(cap.remaining_after(used)),
            organization_balance_usd: Usd(balance),
            organization_available_usd: Usd(available),
            status: org.status.to_value(),
        },
        activation,
        activation_hint: hint,
    })
}

/// `GET /customers/{id}/balance`: the organization's balance and the allocation, for an active
/// customer.
pub async fn balance(
    db: &impl ConnectionTrait,
    state: &AppState,
    customer: &customers::Model,
) -> Result<CustomerBalance, CustomerError> {
    require_active(db, customer, state.clock.now()).await?;
    let c = view(db, state, customer, None, None).await?.customer;
    Ok(CustomerBalance {
        customer_id: customer.id,
        organization_id: customer.organization_id,
        organization_balance_usd: c.organization_balance_usd,
        organization_available_usd: c.organization_available_usd,
        partner_allocation_cap_usd: c.partner_allocation_cap_usd,
        partner_allocation_used_usd: c.partner_allocation_used_usd,
        partner_allocation_remaining_usd: c.partner_allocation_remaining_usd,
    })
}

/// A customer of the caller's partner by its external id (validated here); another partner's
/// customer reads as not found.
pub async fn find_by_external_id(
    db: &impl ConnectionTrait,
    caller: &Caller,
    external: &str,
) -> Result<customers::Model, CustomerError> {
    let external = external_id(external)?;
    customers::Entity::find()
        .filter(customers::Column::PartnerId.eq(caller.partner_id))
        .filter(customers::Column::ExternalId.eq(external))
        .one(db)
        .await?
        .ok_or(CustomerError::NotFound)
}

/// A customer of the caller's partner; another partner's customer reads as not found.
pub async fn find(
    db: &impl ConnectionTrait,
    caller: &Caller,
    customer_id: &str,
) -> Result<customers::Model, CustomerError> {
    let id: i64 = customer_id.parse().map_err(|_| CustomerError::NotFound)?;
    customers::Entity::find_by_id(id)
        .filter(customers::Column::PartnerId.eq(caller.partner_id))
        .one(db)
        .await?
        .ok_or(CustomerError::NotFound)
}

/// The customers of partner `partner_id`: every one, or those of the organizations `organizations`.
pub async fn of_partner(
    db: &impl ConnectionTrait,
    partner_id: i64,
    organizations: Option<&[i64]>,
) -> Result<Vec<customers::Model>, CustomerError> {
    let mut q = customers::Entity::find().filter(customers::Column::PartnerId.eq(partner_id));
    if let Some(ids) = organizations {
        q = q.filter(customers::Column::OrganizationId.is_in(ids.iter().copied()));
    }
    Ok(q.all(db).await?)
}

/// Refuses routes that need an active customer with the spec's pending metadata (the
/// invitation's status as of `now`).
pub async fn require_active(
    db: &impl ConnectionTrait,
    customer: &customers::Model,
    now: DateTime<Utc>,
) -> Result<organizations::Model, CustomerError> {
    let org = organizations::Entity::find_by_id(customer.organization_id)
        .one(db)
        .await?
        .ok_or(Fault::Broken("a customer's organization has no row"))?;
    if org.status == OrganizationStatus::Active {
        return Ok(org);
    }
    let (expires_at, status) = match invitation(db, customer.id, now).await? {
        Some((i, s)) => (ts(i.expires_at), s),
        None => (String::new(), "revoked".to_string()),
    };
    Err(CustomerError::PendingActivation {
        invited_email: customer.contact_email.clone(),
        invitation_status: status,
        invitation_expires_at: expires_at,
    })
}

/// The organization `id`, if it exists.
pub async fn organization(
    db: &impl ConnectionTrait,
    id: i64,
) -> Result<Option<organizations::Model>, CustomerError> {
    Ok(organizations::Entity::find_by_id(id).one(db).await?)
}

/// The customer whose organization is `org`, if a partner made it (a partnerless organization
/// has none).
pub async fn of_organization(
    db: &impl ConnectionTrait,
    org: i64,
) -> Result<Option<customers::Model>, CustomerError> {
    Ok(customers::Entity::find()
        .filter(customers::Column::OrganizationId.eq(org))
        .one(db)
        .await?)
}
