//! A partner's funding history for the dashboard: every posting on its available-funding account
//! (`partner:P:available`) from the ledger, newest first, with the balance after each — credits
//! (top-ups, the operator's `partner fund`), allocations to customers and releases from them —
//! and the customer an allocation or release concerns.

use crate::ledger::AccountRef;
use chrono::{DateTime, Utc};
use entities::{customers, ledger_accounts, ledger_entries, ledger_transactions};
use money::NanoUsd;
use sea_orm::ExprTrait;
use sea_orm::sea_query::{Expr, Func};
use sea_orm::{
    ColumnTrait, ConnectionTrait, DbErr, EntityTrait, PaginatorTrait, QueryFilter, QueryOrder,
    QuerySelect,
};
use std::collections::HashMap;

/// Lines per page.
pub const PAGE: u64 = 50;

/// What a posting was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Money added to the funding (a paid top-up, the operator's credit).
    Credit,
    /// Funding moved to a customer's allocation.
    Allocation,
    /// Funding given back by a customer's allocation.
    Release,
    /// Anything else the ledger posted there.
    Other,
}

impl Kind {
    pub fn label(self) -> &'static str {
        match self {
            Kind::Credit => "funding added",
            Kind::Allocation => "allocated to a customer",
            Kind::Release => "released by a customer",
            Kind::Other => "adjustment",
        }
    }
}

/// One posting.
#[derive(Debug, Clone)]
pub struct Line {
    pub at: DateTime<Utc>,
    pub kind: Kind,
    /// Signed: positive adds to the available funding.
    pub amount: NanoUsd,
    /// The available funding right after this posting.
    pub balance_after: NanoUsd,
    /// The customer of an allocation or release: (id, name).
    pub customer: Option<(i64, String)>,
}

/// One page of the history.
#[derive(Debug, Clone)]
pub struct History {
    pub lines: Vec<Line>,
    pub page: u64,
    pub pages: u64,
}

/// Page `page` (1-based; clamped) of partner `partner_id`'s funding history, newest first.
pub async fn history(
    db: &impl ConnectionTrait,
    partner_id: i64,
    page: u64,
) -> Result<History, DbErr> {
    let code = AccountRef::partner_available(partner_id).code;
    let Some(account) = ledger_accounts::Entity::find()
        .filter(ledger_accounts::Column::Code.eq(code))
        .one(db)
        .await?
    else {
        return Ok(History {
            lines: Vec::new(),
            page: 1,
            pages: 1,
        });
    };
    let mine =
        ledger_entries::Entity::find().filter(ledger_entries::Column::AccountId.eq(account.id));
    let total = mine.clone().count(db).await?;
    let pages = Ord::max(total.div_ceil(PAGE), 1);
    let page = page.clamp(1, pages);
    let entries = mine
        .clone()
        .order_by_desc(ledger_entries::Column::Id)
        .offset((page - 1) * PAGE)
        .limit(PAGE)
        .all(db)
        .await?;
    let Some(newest) = entries.first() else {
        return Ok(History {
            lines: Vec::new(),
            page,
            pages,
        });
    };
    // The balance after the page's newest posting: every posting up to it.
    let upto = balance_upto(db, account.id, newest.id).await?;
    let tx_ids: Vec<i64> = entries.iter().map(|e| e.transaction_id).collect();
    let kinds: HashMap<i64, String> = ledger_transactions::Entity::find()
        .filter(ledger_transactions::Column::Id.is_in(tx_ids.clone()))
        .all(db)
        .await?
        .into_iter()
        .map(|t| (t.id, t.kind))
        .collect();
    let (customer_of_tx, names) = customers_of(db, partner_id, account.id, tx_ids).await?;
    let mut balance = upto.unwrap_or(0);
    let mut lines = Vec::with_capacity(entries.len());
    for e in &entries {
        let kind = match kinds.get(&e.transaction_id).map(String::as_str) {
            Some("partner_top_up") => Kind::Credit,
            Some("partner_reservation") if e.amount_nanos < 0 => Kind::Allocation,
            Some("partner_reservation") => Kind::Release,
            _ => Kind::Other,
        };
        let customer = customer_of_tx
            .get(&e.transaction_id)
            .map(|id| (*id, names.get(id).cloned().unwrap_or_default()));
        lines.push(Line {
            at: e.created_at,
            kind,
            amount: NanoUsd::from_nanos(e.amount_nanos),
            balance_after: NanoUsd::from_nanos(balance),
            customer,
        });
        balance = balance.saturating_sub(e.amount_nanos);
    }
    Ok(History { lines, page, pages })
}

/// The sum of account `account_id`'s postings up to posting `last` (`None`: none).
async fn balance_upto(
    db: &impl ConnectionTrait,
    account_id: i64,
    last: i64,
) -> Result<Option<i64>, DbErr> {
    let (upto,): (Option<i64>,) = ledger_entries::Entity::find()
        .select_only()
        .column_as(
            Func::sum(Expr::col(ledger_entries::Column::AmountNanos)).cast_as("BIGINT"),
            "total",
        )
        .filter(ledger_entries::Column::AccountId.eq(account_id))
        .filter(ledger_entries::Column::Id.lte(last))
        .into_tuple()
        .one(db)
        .await?
        .unwrap_or((None,));
    Ok(upto)
}

/// The customer each of these postings moved funding for (the other side of a posting: a
/// customer's reserved-funding account names the customer), and the customers' names.
async fn customers_of(
    db: &impl ConnectionTrait,
    partner_id: i64,
    account_id: i64,
    tx_ids: Vec<i64>,
) -> Result<(HashMap<i64, i64>, HashMap<i64, String>), DbErr> {
    let others = ledger_entries::Entity::find()
        .filter(ledger_entries::Column::TransactionId.is_in(tx_ids))
        .filter(ledger_entries::Column::AccountId.ne(account_id))
        .all(db)
        .await?;
    let other_accounts: HashMap<i64, String> = ledger_accounts::Entity::find()
        .filter(ledger_accounts::Column::Id.is_in(others.iter().map(|e| e.account_id)))
        .all(db)
        .await?
        .into_iter()
        .map(|a| (a.id, a.code))
        .collect();
    let prefix = format!("partner:{partner_id}:reserved:");
    let customer_of_tx: HashMap<i64, i64> = others
        .iter()
        .filter_map(|e| {
            let code = other_accounts.get(&e.account_id)?;
            let id = code.strip_prefix(&prefix)?.parse().ok()?;
            Some((e.transaction_id, id))
        })
        .collect();
    let names: HashMap<i64, String> = customers::Entity::find()
        .filter(customers::Column::Id.is_in(customer_of_tx.values().copied()))
        .filter(customers::Column::PartnerId.eq(partner_id))
        .all(db)
        .await?
        .into_iter()
        .map(|c| (c.id, c.display_name))
        .collect();
    Ok((customer_of_tx, names))
}
