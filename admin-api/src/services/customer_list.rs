//! The partner dashboard's customer list: searchable by name or external id, paged, with each
//! customer's status, available balance (as the billing API reports it: the wallet mirror when it
//! agrees with the ledger, else "being reconciled", never zero) and spend over the last 7 days.
//!
//! Cost per page, whatever the number of customers: one count and one page query on
//! `customers` (search is a case-insensitive substring match), one query for the page's
//! organizations, one grouped sum of the page's wallet entries, one grouped sum of the page's
//! hourly buckets over 7 days, and one wallet-mirror read per row of the page.

use crate::ledger::AccountRef;
use crate::state::AppState;
use chrono::{DateTime, Duration, Utc};
use entities::status::OrganizationStatus;
use entities::{customers, ledger_accounts, ledger_entries, organizations, usage_hourly};
use money::NanoUsd;
use sea_orm::ExprTrait;
use sea_orm::sea_query::{Expr, Func, LikeExpr};
use sea_orm::{
    ColumnTrait, Condition, ConnectionTrait, DbErr, EntityTrait, PaginatorTrait, QueryFilter,
    QueryOrder, QuerySelect,
};
use std::collections::HashMap;

/// Customers per page.
pub const PAGE: u64 = 50;

/// A customer's money as the list shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Available {
    /// Book balance minus open holds: the mirror agrees with the ledger.
    Known(NanoUsd),
    /// The mirror is missing or disagrees with the ledger: shown as "being reconciled".
    Reconciling,
    /// Not activated yet: no wallet to spend from.
    Pending,
}

/// One row of the list.
#[derive(Debug, Clone)]
pub struct Row {
    pub customer: customers::Model,
    pub status: OrganizationStatus,
    pub available: Available,
    pub spend_7d: NanoUsd,
}

/// One page of the list.
#[derive(Debug, Clone)]
pub struct Listing {
    pub rows: Vec<Row>,
    /// Customers matching the search.
    pub total: u64,
    /// 1-based.
    pub page: u64,
    pub pages: u64,
}

/// Page `page` (1-based; clamped) of partner `partner_id`'s customers matching `search` (by name
/// or external id, case-insensitive; empty: all), newest first.
pub async fn list(
    state: &AppState,
    partner_id: i64,
    search: &str,
    page: u64,
    now: DateTime<Utc>,
) -> Result<Listing, DbErr> {
    let db = &state.db;
    let mut q = customers::Entity::find().filter(customers::Column::PartnerId.eq(partner_id));
    let search = search.trim();
    if !search.is_empty() {
        let pattern = format!("%{}%", like_escape(&search.to_lowercase()));
        let lower = |c: customers::Column| Expr::expr(Func::lower(Expr::col(c)));
        q = q.filter(
            Condition::any()
                .add(lower(customers::Column::DisplayName).like(like(&pattern)))
                .add(lower(customers::Column::ExternalId).like(like(&pattern))),
        );
    }
    let total = q.clone().count(db).await?;
    let pages = Ord::max(total.div_ceil(PAGE), 1);
    let page = page.clamp(1, pages);
    let found = q
        .order_by_desc(customers::Column::Id)
        .offset((page - 1) * PAGE)
        .limit(PAGE)
        .all(db)
        .await?;
    let org_ids: Vec<i64> = found.iter().map(|c| c.organization_id).collect();
    let statuses: HashMap<i64, OrganizationStatus> = if org_ids.is_empty() {
        HashMap::new()
    } else {
        organizations::Entity::find()
            .filter(organizations::Column::Id.is_in(org_ids.clone()))
            .all(db)
            .await?
            .into_iter()
            .map(|o| (o.id, o.status))
            .collect()
    };
    let books = wallet_books(db, &org_ids).await?;
    let spend = spend_since(db, &org_ids, now - Duration::days(7)).await?;
    let mut rows = Vec::with_capacity(found.len());
    for customer in found {
        let org = customer.organization_id;
        let status = statuses
            .get(&org)
            .cloned()
            .unwrap_or(OrganizationStatus::PendingActivation);
        let available = if status == OrganizationStatus::PendingActivation {
            Available::Pending
        } else {
            available(state, org, books.get(&org).copied()).await
        };
        rows.push(Row {
            spend_7d: spend.get(&org).copied().unwrap_or(NanoUsd::ZERO),
            customer,
            status,
            available,
        });
    }
    Ok(Listing {
        rows,
        total,
        page,
        pages,
    })
}

/// A LIKE pattern with `\` as its escape character (SQLite has no default one).
fn like(pattern: &str) -> LikeExpr {
    LikeExpr::new(pattern).escape('\\')
}

/// `%`, `_` and `\` matched literally in a LIKE pattern.
fn like_escape(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('%', "\\%")
        .replace('_', "\\_")
}

/// The ledger balance of each organization's wallet, in one grouped query.
async fn wallet_books(
    db: &impl ConnectionTrait,
    orgs: &[i64],
) -> Result<HashMap<i64, NanoUsd>, DbErr> {
    if orgs.is_empty() {
        return Ok(HashMap::new());
    }
    let codes: Vec<String> = orgs
        .iter()
        .map(|o| AccountRef::org_wallet(*o).code)
        .collect();
    let accounts: HashMap<i64, i64> = ledger_accounts::Entity::find()
        .filter(ledger_accounts::Column::Code.is_in(codes))
        .all(db)
        .await?
        .into_iter()
        .filter_map(|a| a.organization_id.map(|o| (a.id, o)))
        .collect();
    if accounts.is_empty() {
        return Ok(HashMap::new());
    }
    // SUM(bigint) is NUMERIC on PostgreSQL: cast back to BIGINT.
    let sums: Vec<(i64, Option<i64>)> = ledger_entries::Entity::find()
        .select_only()
        .column(ledger_entries::Column::AccountId)
        .column_as(
            Func::sum(Expr::col(ledger_entries::Column::AmountNanos)).cast_as("BIGINT"),
            "total",
        )
        .filter(ledger_entries::Column::AccountId.is_in(accounts.keys().copied()))
        .group_by(ledger_entries::Column::AccountId)
        .into_tuple()
        .all(db)
        .await?;
    let mut out: HashMap<i64, NanoUsd> = accounts.values().map(|o| (*o, NanoUsd::ZERO)).collect();
    for (account, total) in sums {
        if let Some(org) = accounts.get(&account) {
            out.insert(*org, NanoUsd::from_nanos(total.unwrap_or(0)));
        }
    }
    Ok(out)
}

/// Each organization's usage cost since `from`, from the hourly buckets, in one grouped query.
async fn spend_since(
    db: &impl ConnectionTrait,
    orgs: &[i64],
    from: DateTime<Utc>,
) -> Result<HashMap<i64, NanoUsd>, DbErr> {
    if orgs.is_empty() {
        return Ok(HashMap::new());
    }
    let sums: Vec<(i64, Option<i64>)> = usage_hourly::Entity::find()
        .select_only()
        .column(usage_hourly::Column::OrganizationId)
        .column_as(
            Func::sum(Expr::col(usage_hourly::Column::CostNanos)).cast_as("BIGINT"),
            "total",
        )
        .filter(usage_hourly::Column::OrganizationId.is_in(orgs.iter().copied()))
        .filter(usage_hourly::Column::HourStart.gte(from))
        .group_by(usage_hourly::Column::OrganizationId)
        .into_tuple()
        .all(db)
        .await?;
    Ok(sums
        .into_iter()
        .map(|(o, t)| (o, NanoUsd::from_nanos(t.unwrap_or(0))))
        .collect())
}

/// The available balance of `org` when its mirror agrees with the ledger's `book`.
async fn available(state: &AppState, org: i64, book: Option<NanoUsd>) -> Available {
    let Some(book) = book else {
        return Available::Reconciling;
    };
    match state.stores.wallets.snapshot(org).await {
        Ok(Some(s)) if !s.unreconciled && s.balance.checked_add(s.pending) == Some(book) => {
            Available::Known(s.balance.remaining_after(s.reserved))
        }
        _ => Available::Reconciling,
    }
}

#[cfg(test)]
mod tests {
    use super::like_escape;

    #[test]
    fn search_text_is_matched_literally() {
        assert_eq!(like_escape("50%_off\\"), "50\\%\\_off\\\\");
        assert_eq!(like_escape("acme"), "acme");
    }
}
