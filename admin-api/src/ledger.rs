//! The double-entry ledger of record.
//!
//! Accounts are identified by a code; a transaction is a set of signed entries summing to zero,
//! identified by a unique `reference` derived from what caused it (an idempotency key and a leg, a
//! request id, ...), so posting the same thing twice is a no-op, never a second movement. Entries are
//! never updated or deleted; an account's balance is the sum of its entries.
//!
//! Two books share the ledger, each balanced on its own:
//! - partner funding, in wholesale USD: `external:payments` → `partner:P:available` (top-ups), and
//!   `partner:P:available` ↔ `partner:P:reserved:C` (funding reserved for customer C's allocation);
//! - organization money, in retail USD: `partner:P:allocations` ↔ `org:O:wallet` (allocations),
//!   `org:O:wallet` → `org:O:spend` (settled usage).

use chrono::Utc;
use entities::{ledger_accounts, ledger_entries, ledger_transactions};
use money::NanoUsd;
use sea_orm::ExprTrait;
use sea_orm::sea_query::{Expr, Func, OnConflict};
use sea_orm::{
    ColumnTrait, ConnectionTrait, DbErr, EntityTrait, FromQueryResult, QueryFilter, QuerySelect,
    Set,
};

/// What an account is, for queries by kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AccountKind {
    External,
    PartnerAvailable,
    PartnerReserved,
    PartnerAllocations,
    PartnerOutstandingUsage,
    PartnerUsagePayable,
    OrgWallet,
    OrgSpend,
    /// An organization's money moved to another region than its home (issue 48:
    /// `crate::regions`).
    OrgAllowance,
}

impl AccountKind {
    pub fn as_str(self) -> &'static str {
        match self {
            AccountKind::External => "external",
            AccountKind::PartnerAvailable => "partner_available",
            AccountKind::PartnerReserved => "partner_reserved",
            AccountKind::PartnerAllocations => "partner_allocations",
            AccountKind::PartnerOutstandingUsage => "partner_outstanding_usage",
            AccountKind::PartnerUsagePayable => "partner_usage_payable",
            AccountKind::OrgWallet => "org_wallet",
            AccountKind::OrgSpend => "org_spend",
            AccountKind::OrgAllowance => "org_allowance",
        }
    }
}

/// An account to find or open.
#[derive(Debug, Clone)]
pub struct AccountRef {
    pub code: String,
    pub kind: AccountKind,
    pub partner_id: Option<i64>,
    pub organization_id: Option<i64>,
}

impl AccountRef {
    pub fn external() -> AccountRef {
        AccountRef {
            code: "external:payments".into(),
            kind: AccountKind::External,
            partner_id: None,
            organization_id: None,
        }
    }
    pub fn partner_available(p: i64) -> AccountRef {
        AccountRef {
            code: format!("partner:{p}:available"),
            kind: AccountKind::PartnerAvailable,
            partner_id: Some(p),
            organization_id: None,
        }
    }
    pub fn partner_reserved(p: i64, customer: i64) -> AccountRef {
        AccountRef {
            code: format!("partner:{p}:reserved:{customer}"),
            kind: AccountKind::PartnerReserved,
            partner_id: Some(p),
            organization_id: None,
        }
    }
    pub fn partner_allocations(p: i64) -> AccountRef {
        AccountRef {
            code: format!("partner:{p}:allocations"),
            kind: AccountKind::PartnerAllocations,
            partner_id: Some(p),
            organization_id: None,
        }
    }
    pub fn partner_outstanding_usage(p: i64) -> AccountRef {
        AccountRef {
            code: format!("partner:{p}:outstanding_usage"),
            kind: AccountKind::PartnerOutstandingUsage,
            partner_id: Some(p),
            organization_id: None,
        }
    }
    pub fn org_wallet(o: i64) -> AccountRef {
        AccountRef {
            code: format!("org:{o}:wallet"),
            kind: AccountKind::OrgWallet,
            partner_id: None,
            organization_id: Some(o),
        }
    }
    /// `org:O:allowance:R`: what organization `o` may spend in region `region` (issue 48).
    pub fn org_allowance(o: i64, region: &str) -> AccountRef {
        AccountRef {
            code: format!("org:{o}:allowance:{region}"),
            kind: AccountKind::OrgAllowance,
            partner_id: None,
            organization_id: Some(o),
        }
    }
    pub fn org_spend(o: i64) -> AccountRef {
        AccountRef {
            code: format!("org:{o}:spend"),
            kind: AccountKind::OrgSpend,
            partner_id: None,
            organization_id: Some(o),
        }
    }
}

/// Why a posting failed.
#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    #[error("database: {0}")]
    Database(#[from] DbErr),
    #[error("unbalanced transaction {0}")]
    Unbalanced(String),
    /// An amount that does not fit in 64-bit nano-USD.
    #[error("amount overflow")]
    Overflow,
}

/// Finds an account by code, opening it when it does not exist yet.
pub async fn account(db: &impl ConnectionTrait, a: &AccountRef) -> Result<i64, DbErr> {
    if let Some(row) = ledger_accounts::Entity::find()
        .filter(ledger_accounts::Column::Code.eq(a.code.as_str()))
        .one(db)
        .await?
    {
        return Ok(row.id);
    }
    ledger_accounts::Entity::insert(ledger_accounts::ActiveModel {
        code: Set(a.code.clone()),
        kind: Set(a.kind.as_str().into()),
        partner_id: Set(a.partner_id),
        organization_id: Set(a.organization_id),
        created_at: Set(Utc::now()),
        ..Default::default()
    })
    .on_conflict(
        OnConflict::column(ledger_accounts::Column::Code)
            .do_nothing()
            .to_owned(),
    )
    .exec_without_returning(db)
    .await?;
    ledger_accounts::Entity::find()
        .filter(ledger_accounts::Column::Code.eq(a.code.as_str()))
        .one(db)
        .await?
        .map(|r| r.id)
        .ok_or_else(|| DbErr::RecordNotFound(a.code.clone()))
}

/// Whether a posting created a new transaction or found it already posted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Posted {
    New,
    AlreadyPosted,
}

/// Posts a transfer of `amount` from `from` to `to` under `reference`. A zero amount posts nothing.
pub async fn transfer(
    db: &impl ConnectionTrait,
    reference: &str,
    kind: &str,
    from: &AccountRef,
    to: &AccountRef,
    amount: NanoUsd,
) -> Result<Posted, LedgerError> {
    transfer_at(db, reference, kind, from, to, amount, Utc::now()).await
}

/// [`transfer`], dated `at` (the settler dates a batch's postings with its records' `settled_at`,
/// so a monthly statement's usage and the ledger's spend fall in the same month to the
/// microsecond).
pub async fn transfer_at(
    db: &impl ConnectionTrait,
    reference: &str,
    kind: &str,
    from: &AccountRef,
    to: &AccountRef,
    amount: NanoUsd,
    at: chrono::DateTime<Utc>,
) -> Result<Posted, LedgerError> {
    if amount.is_zero() {
        return Ok(Posted::AlreadyPosted);
    }
    let (from, to, amount) = if amount.is_negative() {
        let reversed = amount.checked_neg().ok_or(LedgerError::Overflow)?;
        (to, from, reversed)
    } else {
        (from, to, amount)
    };
    let from_id = account(db, from).await?;
    let to_id = account(db, to).await?;
    post_at(
        db,
        reference,
        kind,
        &[(from_id, reversed_of(amount)?), (to_id, amount)],
        at,
    )
    .await
}

fn reversed_of(amount: NanoUsd) -> Result<NanoUsd, LedgerError> {
    amount.checked_neg().ok_or(LedgerError::Overflow)
}

/// Posts a transaction whose legs (account id, amount) sum to zero, once per `reference`.
pub async fn post(
    db: &impl ConnectionTrait,
    reference: &str,
    kind: &str,
    legs: &[(i64, NanoUsd)],
) -> Result<Posted, LedgerError> {
    post_at(db, reference, kind, legs, Utc::now()).await
}

/// [`post`], dated `now`.
pub async fn post_at(
    db: &impl ConnectionTrait,
    reference: &str,
    kind: &str,
    legs: &[(i64, NanoUsd)],
    now: chrono::DateTime<Utc>,
) -> Result<Posted, LedgerError> {
    let sum = NanoUsd::checked_sum(legs.iter().map(|(_, a)| *a));
    if sum != Some(NanoUsd::ZERO) || legs.len() < 2 {
        return Err(LedgerError::Unbalanced(reference.into()));
    }
    let inserted = ledger_transactions::Entity::insert(ledger_transactions::ActiveModel {
        reference: Set(reference.into()),
        kind: Set(kind.into()),
        memo: Set(None),
        created_at: Set(now),
        ..Default::default()
    })
    .on_conflict(
        OnConflict::column(ledger_transactions::Column::Reference)
            .do_nothing()
            .to_owned(),
    )
    .exec_without_returning(db)
    .await?;
    if inserted == 0 {
        return Ok(Posted::AlreadyPosted);
    }
    let tx = ledger_transactions::Entity::find()
        .filter(ledger_transactions::Column::Reference.eq(reference))
        .one(db)
        .await?
        .ok_or_else(|| DbErr::RecordNotFound(reference.into()))?;
    ledger_entries::Entity::insert_many(legs.iter().map(|(account_id, amount)| {
        ledger_entries::ActiveModel {
            transaction_id: Set(tx.id),
            account_id: Set(*account_id),
            amount_nanos: Set(amount.nanos()),
            created_at: Set(now),
            ..Default::default()
        }
    }))
    .exec_without_returning(db)
    .await?;
    Ok(Posted::New)
}

#[derive(FromQueryResult)]
struct Sum {
    total: Option<i64>,
}

/// The balance of an account by code (zero when it does not exist).
pub async fn balance(db: &impl ConnectionTrait, code: &str) -> Result<NanoUsd, DbErr> {
    let Some(acc) = ledger_accounts::Entity::find()
        .filter(ledger_accounts::Column::Code.eq(code))
        .one(db)
        .await?
    else {
        return Ok(NanoUsd::ZERO);
    };
    sum_entries(db, ledger_entries::Column::AccountId.eq(acc.id)).await
}

/// The sum of what was posted to an account by code in `[from, to)` (zero when it does not exist).
pub async fn posted_between(
    db: &impl ConnectionTrait,
    code: &str,
    from: chrono::DateTime<Utc>,
    to: chrono::DateTime<Utc>,
) -> Result<NanoUsd, DbErr> {
    let Some(acc) = ledger_accounts::Entity::find()
        .filter(ledger_accounts::Column::Code.eq(code))
        .one(db)
        .await?
    else {
        return Ok(NanoUsd::ZERO);
    };
    let filter = ledger_entries::Column::AccountId
        .eq(acc.id)
        .and(ledger_entries::Column::CreatedAt.gte(from))
        .and(ledger_entries::Column::CreatedAt.lt(to));
    sum_entries(db, filter).await
}

/// Whether an account exists (a missing wallet is not a zero wallet).
pub async fn exists(db: &impl ConnectionTrait, code: &str) -> Result<bool, DbErr> {
    Ok(ledger_accounts::Entity::find()
        .filter(ledger_accounts::Column::Code.eq(code))
        .one(db)
        .await?
        .is_some())
}

/// The summed balance of a partner's accounts of one kind.
pub async fn partner_total(
    db: &impl ConnectionTrait,
    partner_id: i64,
    kind: AccountKind,
) -> Result<NanoUsd, DbErr> {
    let ids: Vec<i64> = ledger_accounts::Entity::find()
        .select_only()
        .column(ledger_accounts::Column::Id)
        .filter(ledger_accounts::Column::PartnerId.eq(partner_id))
        .filter(ledger_accounts::Column::Kind.eq(kind.as_str()))
        .into_tuple()
        .all(db)
        .await?;
    if ids.is_empty() {
        return Ok(NanoUsd::ZERO);
    }
    sum_entries(db, ledger_entries::Column::AccountId.is_in(ids)).await
}

pub(crate) async fn sum_entries(db: &impl ConnectionTrait, filter: Expr) -> Result<NanoUsd, DbErr> {
    // SUM(bigint) is NUMERIC on PostgreSQL: cast back to BIGINT.
    let row = ledger_entries::Entity::find()
        .select_only()
        .column_as(
            Func::sum(Expr::col(ledger_entries::Column::AmountNanos)).cast_as("BIGINT"),
            "total",
        )
        .filter(filter)
        .into_model::<Sum>()
        .one(db)
        .await?;
    Ok(NanoUsd::from_nanos(row.and_then(|r| r.total).unwrap_or(0)))
}

/// Σ of every entry of the ledger: zero when the ledger is balanced.
pub async fn imbalance(db: &impl ConnectionTrait) -> Result<NanoUsd, DbErr> {
    sum_entries(db, Expr::val(1).eq(Expr::val(1))).await
}
