//! Monthly statements (issue 32), per organization and per partner, as CSV and PDF: the opening
//! balance, every movement of the month that is not usage (allocations, credits, releases), the
//! month's usage per model and group, and the closing balance — all read from the ledger of
//! record, so `opening + Σ movements − usage = closing` holds to the nano-dollar.
//!
//! **Which usage belongs to a month.** A call is in the month its usage record was *settled*
//! (`usage_records.settled_at`): the settler dates the batch's spend posting (and the partner's
//! wholesale accrual) with the same instant (`ledger::transfer_at`), so the usage table's totals
//! equal the ledger's postings of the month exactly; a call started before midnight and settled
//! after it is in the new month, on both sides. (The query also bounds `started_at` — a week
//! before the month — so PostgreSQL reads only the partitions that can hold it.)
//!
//! **Provisional.** The current month (UTC) is not closed: its statement says `provisional` and
//! its closing balance is the balance so far. A month after the current one is refused.

use super::fault::Fault;
use crate::ledger::AccountRef;
use chrono::{DateTime, Datelike, TimeZone, Utc};
use entities::{
    customers, ledger_accounts, ledger_entries, ledger_transactions, organizations, partners,
    usage_records,
};
use money::NanoUsd;
use sea_orm::{ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter, QueryOrder};
use std::collections::HashMap;

/// Why a statement is not served.
#[derive(Debug, thiserror::Error)]
pub enum StatementError {
    /// The month is after the current one (UTC).
    #[error("the month must be YYYY-MM, not after the current month (UTC)")]
    Month,
    /// The PDF could not be made (its font could not be read).
    #[error("the statement PDF could not be made: {0}")]
    Render(&'static str),
    #[error(transparent)]
    Fault(Fault),
}
super::fault::faults!(StatementError);

/// A month (UTC): year and month 1–12.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Month {
    pub year: i32,
    pub month: u32,
}

impl Month {
    /// Parses `YYYY-MM` strictly (four digits, a dash, two digits, month 01–12).
    pub fn parse(s: &str) -> Option<Month> {
        let b = s.as_bytes();
        if b.len() != 7
            || b[4] != b'-'
            || !b
                .iter()
                .enumerate()
                .all(|(i, c)| i == 4 || c.is_ascii_digit())
        {
            return None;
        }
        let year: i32 = s[..4].parse().ok()?;
        let month: u32 = s[5..].parse().ok()?;
        ((1..=12).contains(&month) && year >= 1970).then_some(Month { year, month })
    }

    /// The month containing `t`.
    pub fn of(t: DateTime<Utc>) -> Month {
        Month {
            year: t.year(),
            month: t.month(),
        }
    }

    /// Its first instant.
    pub fn start(self) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(self.year, self.month, 1, 0, 0, 0)
            .single()
            .unwrap_or(DateTime::<Utc>::MIN_UTC)
    }

    /// The next month.
    pub fn next(self) -> Month {
        if self.month == 12 {
            Month {
                year: self.year + 1,
                month: 1,
            }
        } else {
            Month {
                year: self.year,
                month: self.month + 1,
            }
        }
    }

    /// The month before.
    pub fn previous(self) -> Month {
        if self.month == 1 {
            Month {
                year: self.year - 1,
                month: 12,
            }
        } else {
            Month {
                year: self.year,
                month: self.month - 1,
            }
        }
    }
}

impl std::fmt::Display for Month {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:04}-{:02}", self.year, self.month)
    }
}

/// One movement of the month.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Movement {
    pub at: DateTime<Utc>,
    /// What it was: `allocation`, `funding added`, `allocated to customer 7`, ….
    pub description: String,
    /// The ledger's reference of the posting.
    pub reference: String,
    /// Signed: positive adds to the balance.
    pub amount: NanoUsd,
}

/// The month's usage of one model in one group.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UsageLine {
    pub model: String,
    pub group: String,
    pub requests: i64,
    pub input_tokens: i64,
    pub output_tokens: i64,
    pub cached_tokens: i64,
    pub images: i64,
    /// Audio and video seconds.
    pub seconds: i64,
    /// What the organizations were charged (retail).
    pub charged: NanoUsd,
    /// The partner's wholesale cost of it (partner statements).
    pub wholesale: NanoUsd,
}

/// A statement.
#[derive(Debug, Clone)]
pub struct Statement {
    /// `organization` or `partner`.
    pub kind: &'static str,
    pub subject_id: i64,
    pub subject_name: String,
    pub month: Month,
    pub provisional: bool,
    pub generated_at: DateTime<Utc>,
    /// What the balance is: `organization balance` or `partner available funding`.
    pub balance_of: &'static str,
    pub opening: NanoUsd,
    pub movements: Vec<Movement>,
    pub usage: Vec<UsageLine>,
    /// The usage as the ledger posted it in the month: the organization's spend (taken off its
    /// balance), or the partner's wholesale accrual (owed, not taken off its funding).
    pub usage_posted: NanoUsd,
    pub closing: NanoUsd,
}

impl Statement {
    /// Σ movements.
    pub fn movements_total(&self) -> NanoUsd {
        NanoUsd::checked_sum(self.movements.iter().map(|m| m.amount)).unwrap_or(NanoUsd::MAX)
    }

    /// Σ usage charged.
    pub fn usage_charged(&self) -> NanoUsd {
        NanoUsd::checked_sum(self.usage.iter().map(|u| u.charged)).unwrap_or(NanoUsd::MAX)
    }

    /// Σ usage at wholesale.
    pub fn usage_wholesale(&self) -> NanoUsd {
        NanoUsd::checked_sum(self.usage.iter().map(|u| u.wholesale)).unwrap_or(NanoUsd::MAX)
    }
}

/// Refuses a month after the current one; says whether `month` is still open.
fn check_month(month: Month, now: DateTime<Utc>) -> Result<bool, StatementError> {
    let current = Month::of(now);
    if month > current {
        return Err(StatementError::Month);
    }
    Ok(month == current)
}

/// One posting of an account window: time, transaction kind, reference, amount, and the
/// transaction's other accounts' codes.
type Posting = (DateTime<Utc>, String, String, NanoUsd, Vec<String>);

/// The ledger of account `code` over `[from, to)`: the balance at `from`, each posting in the
/// window (time, transaction kind, reference, amount, the transaction's other accounts' codes),
/// and the balance at `to`. An account that does not exist yet reads as all zero.
async fn account_window(
    db: &impl ConnectionTrait,
    code: &str,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> Result<(NanoUsd, Vec<Posting>, NanoUsd), StatementError> {
    let Some(account) = ledger_accounts::Entity::find()
        .filter(ledger_accounts::Column::Code.eq(code))
        .one(db)
        .await?
    else {
        return Ok((NanoUsd::ZERO, Vec::new(), NanoUsd::ZERO));
    };
    // Summed by the database: an account's history before the month is never loaded.
    use sea_orm::sea_query::ExprTrait;
    let opening = crate::ledger::sum_entries(
        db,
        ledger_entries::Column::AccountId
            .eq(account.id)
            .and(ledger_entries::Column::CreatedAt.lt(from)),
    )
    .await?;
    let entries = ledger_entries::Entity::find()
        .filter(ledger_entries::Column::AccountId.eq(account.id))
        .filter(ledger_entries::Column::CreatedAt.gte(from))
        .filter(ledger_entries::Column::CreatedAt.lt(to))
        .order_by_asc(ledger_entries::Column::Id)
        .all(db)
        .await?;
    let tx_ids: Vec<i64> = entries.iter().map(|e| e.transaction_id).collect();
    let txs: HashMap<i64, ledger_transactions::Model> = ledger_transactions::Entity::find()
        .filter(ledger_transactions::Column::Id.is_in(tx_ids.clone()))
        .all(db)
        .await?
        .into_iter()
        .map(|t| (t.id, t))
        .collect();
    let legs = ledger_entries::Entity::find()
        .filter(ledger_entries::Column::TransactionId.is_in(tx_ids))
        .filter(ledger_entries::Column::AccountId.ne(account.id))
        .all(db)
        .await?;
    let account_ids: Vec<i64> = legs.iter().map(|l| l.account_id).collect();
    let codes: HashMap<i64, String> = ledger_accounts::Entity::find()
        .filter(ledger_accounts::Column::Id.is_in(account_ids))
        .all(db)
        .await?
        .into_iter()
        .map(|a| (a.id, a.code))
        .collect();
    let mut closing = opening;
    let mut out = Vec::with_capacity(entries.len());
    for e in entries {
        let amount = NanoUsd::from_nanos(e.amount_nanos);
        closing = closing
            .checked_add(amount)
            .ok_or(Fault::Broken("an organization with a statement has no row"))?;
        let (kind, reference) = txs
            .get(&e.transaction_id)
            .map(|t| (t.kind.clone(), t.reference.clone()))
            .unwrap_or_default();
        let others = legs
            .iter()
            .filter(|l| l.transaction_id == e.transaction_id)
            .filter_map(|l| codes.get(&l.account_id).cloned())
            .collect();
        out.push((e.created_at, kind, reference, amount, others));
    }
    Ok((opening, out, closing))
}

/// The usage settled in `[from, to)` of the organizations `orgs`, per model and group.
async fn usage_lines(
    db: &impl ConnectionTrait,
    groups: &HashMap<i64, String>,
    orgs: &[i64],
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> Result<Vec<UsageLine>, StatementError> {
    use sea_orm::QuerySelect;
    use usage_records::Column as C;
    if orgs.is_empty() {
        return Ok(Vec::new());
    }
    let summed = [
        C::InputTokens,
        C::OutputTokens,
        C::CachedTokens,
        C::Images,
        C::AudioSeconds,
        C::VideoSeconds,
        C::ChargedNanos,
        C::WholesaleNanos,
    ];
    // Batch work (issue 46) apart: 1 for a batch line's record, 0 for any other call.
    // Written out: bound literals would make the SELECT's and the GROUP BY's expressions differ.
    let batch = || sea_orm::sea_query::Expr::cust("CASE WHEN batch_id IS NULL THEN 0 ELSE 1 END");
    let query = usage_records::Entity::find()
        .select_only()
        .column(C::ModelServed)
        .column(C::GroupId)
        .expr(batch());
    let rows: Vec<LineRow> = super::usage_sums::counted_sums(query, &summed)
        .filter(C::OrganizationId.is_in(orgs.iter().copied()))
        .filter(C::SettledAt.gte(from))
        .filter(C::SettledAt.lt(to))
        // Partition pruning (PostgreSQL): a call settled in the window started at most a week
        // before it (holds live 15 minutes, video tasks two hours).
        .filter(C::StartedAt.gte(from - chrono::Duration::days(7)))
        .filter(C::StartedAt.lt(to))
        .group_by(C::ModelServed)
        .group_by(C::GroupId)
        .group_by(batch())
        .into_tuple()
        .all(db)
        .await?;
    let mut lines: Vec<UsageLine> = rows.into_iter().map(|r| line(r, groups)).collect();
    lines.sort_by(|a, b| (&a.model, &a.group).cmp(&(&b.model, &b.group)));
    Ok(lines)
}

/// One (model, group, batch) row of [`usage_lines`]' query: the model, the group, whether it is
/// batch work (1), the count, then the
/// sums of input, output and cached tokens, images, audio and video seconds, charged and
/// wholesale nano-USD (`None`: no record had a value).
type LineRow = (
    String,
    i64,
    i32,
    i64,
    Option<i64>,
    Option<i64>,
    Option<i64>,
    Option<i64>,
    Option<i64>,
    Option<i64>,
    Option<i64>,
    Option<i64>,
);

/// A statement's usage line from its row, the group named from `groups`; batch work's line is
/// the model's name followed by ` (batch)` (*decision*: apart from its calls, in the same columns,
/// so the CSV and the PDF keep their shape).
fn line(row: LineRow, groups: &HashMap<i64, String>) -> UsageLine {
    let (
        model,
        group,
        batch,
        requests,
        input,
        output,
        cached,
        images,
        audio,
        video,
        charged,
        wholesale,
    ) = row;
    UsageLine {
        model: match batch {
            0 => model,
            _ => format!("{model} (batch)"),
        },
        group: groups
            .get(&group)
            .cloned()
            .unwrap_or_else(|| format!("group {group}")),
        requests,
        input_tokens: input.unwrap_or(0),
        output_tokens: output.unwrap_or(0),
        cached_tokens: cached.unwrap_or(0),
        images: images.unwrap_or(0),
        seconds: audio.unwrap_or(0) + video.unwrap_or(0),
        charged: NanoUsd::from_nanos(charged.unwrap_or(0)),
        wholesale: NanoUsd::from_nanos(wholesale.unwrap_or(0)),
    }
}

/// The configured groups' names.
fn group_names(state: &crate::state::AppState) -> HashMap<i64, String> {
    state
        .groups()
        .iter()
        .map(|g| (g.id, g.name.clone()))
        .collect()
}

/// Organization `org_id`'s statement of `month`.
pub async fn for_org(
    state: &crate::state::AppState,
    org_id: i64,
    month: Month,
) -> Result<Statement, StatementError> {
    let db = &state.db;
    let now = state.clock.now();
    let provisional = check_month(month, now)?;
    let org = organizations::Entity::find_by_id(org_id)
        .one(db)
        .await?
        .ok_or(Fault::Broken("an organization with a statement has no row"))?;
    let (from, to) = (month.start(), month.next().start());
    let (opening, postings, closing) =
        account_window(db, &AccountRef::org_wallet(org_id).code, from, to).await?;
    let mut movements = Vec::new();
    let mut spend = NanoUsd::ZERO;
    for (at, kind, reference, amount, _) in postings {
        if kind == "spend" {
            spend = spend
                .checked_sub(amount)
                .ok_or(Fault::Broken("a month of spend overflows"))?;
            continue;
        }
        let description = match kind.as_str() {
            "allocation" if amount.is_negative() => "allocation decreased".to_string(),
            "allocation" if reference.starts_with("auto-allocation:") => {
                "automatic allocation".to_string()
            }
            "allocation" => "allocation".to_string(),
            other => other.replace('_', " "),
        };
        movements.push(Movement {
            at,
            description,
            reference,
            amount,
        });
    }
    let usage = usage_lines(db, &group_names(state), &[org_id], from, to).await?;
    Ok(Statement {
        kind: "organization",
        subject_id: org.id,
        subject_name: org.name,
        month,
        provisional,
        generated_at: now,
        balance_of: "organization balance",
        opening,
        movements,
        usage,
        usage_posted: spend,
        closing,
    })
}

/// Partner `partner_id`'s statement of `month`: its available funding, and its customers' usage.
pub async fn for_partner(
    state: &crate::state::AppState,
    partner_id: i64,
    month: Month,
) -> Result<Statement, StatementError> {
    let db = &state.db;
    let now = state.clock.now();
    let provisional = check_month(month, now)?;
    let partner = partners::Entity::find_by_id(partner_id)
        .one(db)
        .await?
        .ok_or(Fault::Broken("a partner with a statement has no row"))?;
    let (from, to) = (month.start(), month.next().start());
    let (opening, postings, closing) = account_window(
        db,
        &AccountRef::partner_available(partner_id).code,
        from,
        to,
    )
    .await?;
    let customers = customers::Entity::find()
        .filter(customers::Column::PartnerId.eq(partner_id))
        .all(db)
        .await?;
    let movements = partner_movements(partner_id, postings, &customers);
    let (_, accrued, _) = account_window(
        db,
        &AccountRef::partner_outstanding_usage(partner_id).code,
        from,
        to,
    )
    .await?;
    let usage_posted = NanoUsd::checked_sum(
        accrued
            .iter()
            .filter(|(_, kind, ..)| kind == "wholesale_usage")
            .map(|(_, _, _, amount, _)| *amount),
    )
    .ok_or(Fault::Broken("a month of wholesale usage overflows"))?;
    let orgs: Vec<i64> = customers.iter().map(|c| c.organization_id).collect();
    let usage = usage_lines(db, &group_names(state), &orgs, from, to).await?;
    Ok(Statement {
        kind: "partner",
        subject_id: partner.id,
        subject_name: partner.name,
        month,
        provisional,
        generated_at: now,
        balance_of: "partner available funding",
        opening,
        movements,
        usage,
        usage_posted,
        closing,
    })
}

/// A partner's funding postings as statement lines: a reservation's move named by its customer,
/// funding added, or the posting's kind.
fn partner_movements(
    partner_id: i64,
    postings: Vec<Posting>,
    customers: &[customers::Model],
) -> Vec<Movement> {
    let names: HashMap<i64, &str> = customers
        .iter()
        .map(|c| (c.id, c.display_name.as_str()))
        .collect();
    let reserved_prefix = format!("partner:{partner_id}:reserved:");
    postings
        .into_iter()
        .map(|(at, kind, reference, amount, others)| {
            let customer = others.iter().find_map(|code| {
                code.strip_prefix(&reserved_prefix)
                    .and_then(|id| id.parse::<i64>().ok())
            });
            let description = match (customer, amount.is_negative()) {
                (Some(c), true) => format!(
                    "allocated to customer {c} ({})",
                    names.get(&c).copied().unwrap_or("?")
                ),
                (Some(c), false) => format!(
                    "released by customer {c} ({})",
                    names.get(&c).copied().unwrap_or("?")
                ),
                (None, false) => "funding added".to_string(),
                (None, true) => kind.replace('_', " "),
            };
            Movement {
                at,
                description,
                reference,
                amount,
            }
        })
        .collect()
}

/// The months a subject's statements can be downloaded for: from `first` (its creation) to the
/// current month, newest first, at most `most`.
pub fn months_since(first: DateTime<Utc>, now: DateTime<Utc>, most: usize) -> Vec<Month> {
    let mut out = Vec::new();
    let mut m = Month::of(now);
    let first = Month::of(first);
    while m >= first && out.len() < most {
        out.push(m);
        m = m.previous();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::services::statement_files::*;

    #[test]
    fn months_parse_strictly_and_step() {
        assert_eq!(
            Month::parse("2026-11"),
            Some(Month {
                year: 2026,
                month: 11
            })
        );
        for bad in [
            "2026-13",
            "2026-00",
            "2026-1",
            "26-11",
            "2026/11",
            "2026-11-01",
            "abcd-ef",
            "",
        ] {
            assert_eq!(Month::parse(bad), None, "{bad}");
        }
        let dec = Month {
            year: 2026,
            month: 12,
        };
        assert_eq!(
            dec.next(),
            Month {
                year: 2027,
                month: 1
            }
        );
        assert_eq!(dec.next().previous(), dec);
        assert_eq!(dec.to_string(), "2026-12");
    }

    #[test]
    fn amounts_keep_every_nano() {
        assert_eq!(exact(NanoUsd::from_nanos(1)), "0.000000001");
        assert_eq!(exact(NanoUsd::from_nanos(-1_500_000_000)), "-1.500000000");
        assert_eq!(exact(NanoUsd::from_nanos(12_000_000_007)), "12.000000007");
    }

    #[test]
    fn csv_fields_are_quoted_and_formulas_defused() {
        assert_eq!(field("a,b"), "\"a,b\"");
        assert_eq!(field("say \"hi\""), "\"say \"\"hi\"\"\"");
        assert_eq!(field("=SUM(A1)"), "'=SUM(A1)");
        assert_eq!(field("\t=1"), "'\t=1");
        assert_eq!(field("-1.500000000"), "-1.500000000");
    }

    fn statement(name: &str, text: &str) -> Statement {
        let at = DateTime::from_timestamp(1_800_000_000, 0).unwrap_or_default();
        Statement {
            kind: "partner",
            subject_id: 7,
            subject_name: name.to_string(),
            month: Month::of(at),
            provisional: true,
            generated_at: at,
            balance_of: "partner available funding",
            opening: NanoUsd::from_nanos(1),
            movements: vec![Movement {
                at,
                description: format!("allocated to {text}"),
                reference: text.to_string(),
                amount: NanoUsd::from_nanos(-5),
            }],
            usage: vec![UsageLine {
                model: text.to_string(),
                group: name.to_string(),
                requests: 1,
                charged: NanoUsd::from_nanos(3),
                ..Default::default()
            }],
            usage_posted: NanoUsd::from_nanos(3),
            closing: NanoUsd::from_nanos(-4),
        }
    }

    /// The cells of a CSV text (RFC 4180: quoted cells may hold commas, quotes and line breaks).
    fn cells(text: &str) -> Vec<String> {
        let mut out = Vec::new();
        let mut cell = String::new();
        let (mut quoted, mut chars) = (false, text.chars().peekable());
        while let Some(c) = chars.next() {
            match (quoted, c) {
                (true, '"') if chars.peek() == Some(&'"') => {
                    chars.next();
                    cell.push('"');
                }
                (true, '"') => quoted = false,
                (true, c) => cell.push(c),
                (false, '"') if cell.is_empty() => quoted = true,
                (false, ',' | '\n') => out.push(std::mem::take(&mut cell)),
                (false, c) => cell.push(c),
            }
        }
        out.push(cell);
        out
    }

    /// The name of issue 42's report: accented letters where a byte cut would split one.
    #[test]
    fn accented_names_make_a_statement() {
        let name = "Société Générale à Zürich — Ünïcödé façade".repeat(3);
        let s = statement(&name, "modèle-éèà");
        assert!(pdf(&s).is_ok());
        let lines = text_lines(&s);
        assert!(lines.iter().any(|l| l.contains("Société Générale")));
        assert!(csv(&s).contains("Société Générale"));
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(48))]
        /// Any Unicode in a customer's, a model's or a group's name: the PDF and the CSV are
        /// made, and no CSV cell starts a formula.
        #[test]
        fn any_unicode_name_makes_a_statement(
            name in proptest::prelude::any::<String>(),
            text in "\\PC{0,80}",
        ) {
            let s = statement(&name, &text);
            proptest::prop_assert!(pdf(&s).is_ok());
            let lines = text_lines(&s);
            proptest::prop_assert!(!lines.is_empty());
            for cell in cells(&csv(&s)) {
                proptest::prop_assert!(
                    !cell.starts_with(['=', '@', '\t', '\r']),
                    "{cell:?}"
                );
            }
        }
    }
}
