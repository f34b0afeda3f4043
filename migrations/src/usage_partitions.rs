//! The usage ledger's monthly partitions on PostgreSQL (issue 31): the statements that make a
//! month's partition and drop an old one, shared by migration 000017 (which partitions the table)
//! and admin-api's partition worker (which keeps months made ahead and applies the retention).
//!
//! `usage_records` is partitioned by `RANGE (started_at)`, one partition per UTC calendar month
//! named `usage_records_yYYYYmMM`, plus `usage_records_default` for a row of a month with no
//! partition (a record dated in a month never made, or far in the past): nothing the settler
//! writes is ever refused for want of a partition. Making a month whose rows already sit in the
//! default partition moves them in the same transaction. SQLite keeps one table.
//!
//! Uniqueness: a partitioned table's unique index must hold the partition key, so the ledger's
//! "once per request" is `UNIQUE (request_id, started_at)`; the settler writes `started_at` as a
//! function of the request id (the time a UUIDv7 id carries), so every copy of a request's event
//! (its gateway's, a re-sent one, the reconciler's) has the same pair (docs/ARCHITECTURE.md §10).

/// The partitioned table.
pub const PARENT: &str = "usage_records";
/// The partition that takes rows of months without their own.
pub const DEFAULT_PARTITION: &str = "usage_records_default";
/// Months made ahead of the current one (by the migration and by the worker).
pub const AHEAD: u32 = 3;

/// The names of `usage_records`' partitions (one text column, `relname`).
pub const LIST_SQL: &str = "SELECT c.relname::text AS relname FROM pg_inherits i \
     JOIN pg_class c ON c.oid = i.inhrelid JOIN pg_class p ON p.oid = i.inhparent \
     WHERE p.relname = 'usage_records' AND p.relnamespace = current_schema()::regnamespace";

/// Serializes partition work between admin-api processes (a transaction-scoped advisory lock).
pub const LOCK_SQL: &str = "SELECT pg_advisory_xact_lock(7301831)";

/// A UTC calendar month.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Month {
    year: i32,
    /// 1..=12.
    month: u32,
}

impl Month {
    /// `None` unless `month` is 1..=12 and the year has four digits.
    pub fn new(year: i32, month: u32) -> Option<Month> {
        ((1..=12).contains(&month) && (1000..=9999).contains(&year))
            .then_some(Month { year, month })
    }

    /// The month itself, or the nearest one [`Month::new`] accepts.
    pub fn clamped(year: i32, month: u32) -> Month {
        Month {
            year: year.clamp(1000, 9999),
            month: month.clamp(1, 12),
        }
    }

    pub fn year(self) -> i32 {
        self.year
    }

    pub fn month(self) -> u32 {
        self.month
    }

    /// The month after this one (December 9999 stays itself).
    pub fn next(self) -> Month {
        match self.month {
            12 => Month::new(self.year + 1, 1).unwrap_or(self),
            m => Month {
                year: self.year,
                month: m + 1,
            },
        }
    }

    /// `n` months later.
    pub fn plus(self, n: u32) -> Month {
        (0..n).fold(self, |m, _| m.next())
    }

    /// The partition's table name: `usage_records_y2026m11`.
    pub fn name(self) -> String {
        format!("{PARENT}_y{:04}m{:02}", self.year, self.month)
    }

    /// The month a partition name stands for (`None` for the default partition or another table).
    pub fn parse(name: &str) -> Option<Month> {
        let rest = name.strip_prefix(PARENT)?.strip_prefix("_y")?;
        let (year, month) = rest.split_once('m')?;
        if year.len() != 4 || month.len() != 2 {
            return None;
        }
        Month::new(year.parse().ok()?, month.parse().ok()?)
    }

    /// Its first instant, as a PostgreSQL `timestamptz` literal.
    pub fn start(self) -> String {
        format!("'{:04}-{:02}-01 00:00:00+00'", self.year, self.month)
    }

    /// The first instant after it.
    pub fn end(self) -> String {
        self.next().start()
    }

    /// Makes this month's partition, moving in the rows of the month the default partition holds
    /// (one transaction; [`LOCK_SQL`] first). Only for a month that has no partition yet. The
    /// default partition is locked for the few statements (inserts of any month wait): the
    /// keeper makes months ahead, when the default partition holds nothing of them.
    pub fn make(self) -> Vec<String> {
        let (name, from, to) = (self.name(), self.start(), self.end());
        let rows = format!("started_at >= {from} AND started_at < {to}");
        vec![
            // No row of the month may reach the default partition between the move and the
            // attach (which would then refuse): writers wait the few statements out.
            format!("LOCK TABLE {DEFAULT_PARTITION} IN ACCESS EXCLUSIVE MODE"),
            format!("CREATE TABLE {name} (LIKE {PARENT} INCLUDING DEFAULTS)"),
            format!("INSERT INTO {name} SELECT * FROM {DEFAULT_PARTITION} WHERE {rows}"),
            format!("DELETE FROM {DEFAULT_PARTITION} WHERE {rows}"),
            format!(
                "ALTER TABLE {PARENT} ATTACH PARTITION {name} FOR VALUES FROM ({from}) TO ({to})"
            ),
        ]
    }

    /// Drops this month's partition (its records; the rollups are other tables).
    pub fn drop_partition(self) -> String {
        format!("DROP TABLE IF EXISTS {}", self.name())
    }
}

/// Deletes the default partition's rows older than `cutoff` (a `timestamptz` literal): the
/// retention of rows that never had a month of their own.
pub fn expire_default(cutoff: &str) -> String {
    format!("DELETE FROM {DEFAULT_PARTITION} WHERE started_at < {cutoff}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn months_name_parse_and_roll_over() {
        let nov = Month::new(2026, 11).unwrap();
        assert_eq!(nov.name(), "usage_records_y2026m11");
        assert_eq!(Month::parse(&nov.name()), Some(nov));
        assert_eq!(nov.plus(2), Month::new(2027, 1).unwrap());
        assert_eq!(nov.end(), "'2026-12-01 00:00:00+00'");
        assert_eq!(Month::parse(DEFAULT_PARTITION), None);
        assert_eq!(Month::parse("usage_records_y2026m13"), None);
        assert_eq!(Month::parse("usage_records_y26m1"), None);
        assert_eq!(Month::new(2026, 0), None);
    }
}
