//! A customer key's spend: what it was charged today and this calendar month (UTC), what its open
//! holds reserve, and the budget a call's hold is checked against in the same step as the wallet.
//!
//! **Where it lives.** Beside the organization's wallet (the `spend` hash, one slot with it on a
//! Redis Cluster), so the budget check is part of the hold's own atomic step: no extra round trip,
//! and exact across every proxy. Per key `K` the hash holds `K:d` (the day index of `K:ds`),
//! `K:ds` (charged that day), `K:m` / `K:ms` (the same for the month) and `K:h` (Σ the key's open
//! holds).
//!
//! **The rules** (the same in Lua, `hold.lua`, and in the memory backend):
//! - Every hold of a known key is tagged with the key and the day and month of its admission
//!   (`amount:deadline:K:DAY:MONTH`); `K:h` grows by its amount.
//! - A hold with a budget is refused (nothing taken) when `spent in the period + K:h + amount >
//!   budget`; before refusing, `K:h` is recomputed from the open holds (it heals any drift, e.g. a
//!   hold settled by an older gateway that did not know the tag).
//! - Closing a tagged hold (settled, released or expired and settled by the reconciler) takes its
//!   amount off `K:h`; what was charged counts in the day and month **of admission**: added when
//!   that is the window stored, starting it when the stored one is older, dropped when the stored
//!   one is newer (the charge belongs to a closed window). The ledger's own sums use the call's
//!   start (`usage_records.started_at`, the request id's time), so both agree.
//! - So in every window `spent + open holds ≤ budget` holds at each admission: a hold is the call's
//!   worst case, so what it charges fits in what it reserved, and holds from the previous window
//!   still count against the new one until they close.
//!
//! A charge above its hold (a supplier ignoring the output cap) is counted as charged; the budget
//! can then be passed by that excess, the only way it can.
//!
//! **Windows** are counted on the store's clock (Redis `TIME`, or the memory store's clock):
//! day = Unix milliseconds / 86,400,000; month = year × 12 + month − 1 of the UTC calendar.

use money::NanoUsd;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// The period a key's budget covers (UTC).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BudgetPeriod {
    Day,
    Month,
}

impl BudgetPeriod {
    /// The wire name (`day` | `month`).
    pub fn as_str(self) -> &'static str {
        match self {
            BudgetPeriod::Day => "day",
            BudgetPeriod::Month => "month",
        }
    }

    /// Parses the wire name.
    pub fn parse(s: &str) -> Option<BudgetPeriod> {
        match s {
            "day" => Some(BudgetPeriod::Day),
            "month" => Some(BudgetPeriod::Month),
            _ => None,
        }
    }

    /// The one-letter code the Lua scripts read.
    pub(crate) fn code(self) -> &'static str {
        match self {
            BudgetPeriod::Day => "d",
            BudgetPeriod::Month => "m",
        }
    }
}

/// A key's spend budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyBudget {
    /// At most this much charged in one period, nano-USD (positive).
    #[serde(rename = "nanos")]
    pub limit: NanoUsd,
    pub period: BudgetPeriod,
}

/// The key a hold is for: its spend is counted, and its budget (if any) checked, in the hold's
/// step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpendAsk {
    pub key_id: i64,
    pub budget: Option<KeyBudget>,
}

impl SpendAsk {
    /// The form the scripts read: `K` (counted only) or `K:LIMIT:d|m`.
    pub(crate) fn wire(&self) -> String {
        match self.budget {
            None => self.key_id.to_string(),
            Some(b) => format!("{}:{}:{}", self.key_id, b.limit.nanos(), b.period.code()),
        }
    }
}

/// A hold refused by its key's budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OverBudget {
    /// When the period ends (the budget is whole again, less what open holds still reserve).
    pub resets_in: Duration,
    /// What the budget has left now (limit − spent − open holds, at least zero).
    pub remaining: NanoUsd,
}

/// One key's spend at the store's present moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct KeySpend {
    /// Charged in the current UTC day.
    pub day: NanoUsd,
    /// Charged in the current UTC calendar month.
    pub month: NanoUsd,
    /// Reserved by the key's open holds.
    pub held: NanoUsd,
}

impl KeySpend {
    /// Charged in the current `period`.
    pub fn spent(&self, period: BudgetPeriod) -> NanoUsd {
        match period {
            BudgetPeriod::Day => self.day,
            BudgetPeriod::Month => self.month,
        }
    }

    /// What a budget has left: limit − spent − held, at least zero.
    pub fn remaining(&self, budget: KeyBudget) -> NanoUsd {
        budget
            .limit
            .checked_sub(self.spent(budget.period))
            .and_then(|r| r.checked_sub(self.held))
            .filter(|r| !r.is_negative())
            .unwrap_or(NanoUsd::ZERO)
    }
}

/// The spend of some keys of one organization, with when the windows end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpendReport {
    /// In the order asked.
    pub keys: Vec<KeySpend>,
    pub day_resets_in: Duration,
    pub month_resets_in: Duration,
}

impl SpendReport {
    /// When `period` ends.
    pub fn resets_in(&self, period: BudgetPeriod) -> Duration {
        match period {
            BudgetPeriod::Day => self.day_resets_in,
            BudgetPeriod::Month => self.month_resets_in,
        }
    }
}

/// The budget windows at one instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Windows {
    /// Days since 1970-01-01 (UTC).
    pub day: i64,
    /// Year × 12 + month − 1 (UTC).
    pub month: i64,
    /// Unix milliseconds at which the day ends.
    pub day_end_ms: i64,
    /// Unix milliseconds at which the month ends.
    pub month_end_ms: i64,
}

const DAY_MS: i64 = 86_400_000;

impl Windows {
    /// The windows containing `unix_ms`.
    pub fn at(unix_ms: i64) -> Windows {
        let day = unix_ms.div_euclid(DAY_MS);
        let (y, m) = civil_from_days(day);
        let month = y * 12 + (m - 1);
        let next = month + 1;
        let month_end_ms = days_from_civil(next.div_euclid(12), next.rem_euclid(12) + 1) * DAY_MS;
        Windows {
            day,
            month,
            day_end_ms: (day + 1) * DAY_MS,
            month_end_ms,
        }
    }

    /// Milliseconds until `period` ends, from `unix_ms`.
    pub fn resets_in(&self, period: BudgetPeriod, unix_ms: i64) -> Duration {
        let end = match period {
            BudgetPeriod::Day => self.day_end_ms,
            BudgetPeriod::Month => self.month_end_ms,
        };
        Duration::from_millis(u64::try_from(end - unix_ms).unwrap_or(0))
    }

    /// The first day (days since 1970-01-01) of month index `month`.
    pub fn month_start_day(month: i64) -> i64 {
        days_from_civil(month.div_euclid(12), month.rem_euclid(12) + 1)
    }
}

/// (year, month 1–12) of a day counted from 1970-01-01 (H. Hinnant's `civil_from_days`; the Lua
/// copy in `hold.lua` is the same arithmetic with floor divisions).
fn civil_from_days(days: i64) -> (i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m)
}

/// Days from 1970-01-01 to the first of month `m` (1–12) of year `y`.
fn days_from_civil(y: i64, m: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// A hold's tag: the key and the windows of its admission.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct HoldTag {
    pub key_id: i64,
    pub day: i64,
    pub month: i64,
}

/// One key's counters in the memory backend (the Redis hash's fields).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct SpendCounters {
    pub day: Option<(i64, NanoUsd)>,
    pub month: Option<(i64, NanoUsd)>,
    pub held: NanoUsd,
}

impl SpendCounters {
    /// The spend at `w`.
    pub fn at(&self, w: &Windows) -> KeySpend {
        let pick = |c: Option<(i64, NanoUsd)>, now: i64| match c {
            Some((idx, v)) if idx == now => v,
            _ => NanoUsd::ZERO,
        };
        KeySpend {
            day: pick(self.day, w.day),
            month: pick(self.month, w.month),
            held: self.held,
        }
    }

    /// Counts `charged` in the windows of `tag` (see the module's rules).
    pub fn count(&mut self, tag: HoldTag, charged: NanoUsd) {
        fn add(c: &mut Option<(i64, NanoUsd)>, idx: i64, v: NanoUsd) {
            match c {
                Some((stored, sum)) if *stored == idx => {
                    *sum = sum.checked_add(v).unwrap_or(NanoUsd::MAX);
                }
                Some((stored, _)) if *stored > idx => {}
                _ => *c = Some((idx, v)),
            }
        }
        if charged > NanoUsd::ZERO {
            add(&mut self.day, tag.day, charged);
            add(&mut self.month, tag.month, charged);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{Datelike, TimeZone, Utc};
    use proptest::prelude::*;

    proptest! {
        /// The window arithmetic is the calendar's, across four centuries either side of 1970.
        #[test]
        fn windows_match_the_utc_calendar(ms in -12_000_000_000_000i64..12_000_000_000_000i64) {
            let w = Windows::at(ms);
            let t = Utc.timestamp_millis_opt(ms).single().unwrap();
            prop_assert_eq!(w.day, t.timestamp().div_euclid(86_400));
            prop_assert_eq!(w.month, i64::from(t.year()) * 12 + i64::from(t.month0()));
            let day_end = t.date_naive().succ_opt().unwrap().and_hms_opt(0, 0, 0).unwrap().and_utc();
            prop_assert_eq!(w.day_end_ms, day_end.timestamp_millis());
            let (ny, nm) = if t.month() == 12 { (t.year() + 1, 1) } else { (t.year(), t.month() + 1) };
            let month_end = Utc.with_ymd_and_hms(ny, nm, 1, 0, 0, 0).single().unwrap();
            prop_assert_eq!(w.month_end_ms, month_end.timestamp_millis());
            prop_assert!(w.day_end_ms > ms && w.month_end_ms > ms);
            prop_assert!(w.day_end_ms <= w.month_end_ms);
            let start = Utc.with_ymd_and_hms(t.year(), t.month(), 1, 0, 0, 0).single().unwrap();
            prop_assert_eq!(Windows::month_start_day(w.month) * 86_400_000, start.timestamp_millis());
        }

        /// Charges land in their admission's window; a closed window never takes a charge back
        /// into the current one.
        #[test]
        fn counting_keeps_each_window_apart(
            steps in proptest::collection::vec((0i64..4, 1i64..1_000), 1..40),
        ) {
            let mut c = SpendCounters::default();
            let mut truth = std::collections::BTreeMap::<i64, i64>::new();
            let mut newest = i64::MIN;
            for (day, amount) in steps {
                let tag = HoldTag { key_id: 1, day, month: 0 };
                c.count(tag, NanoUsd::from_nanos(amount));
                if day >= newest {
                    *truth.entry(day).or_default() += amount;
                    newest = newest.max(day);
                }
            }
            let (stored, sum) = c.day.unwrap();
            prop_assert_eq!(stored, newest);
            prop_assert_eq!(sum.nanos(), truth[&newest]);
        }
    }

    #[test]
    fn known_edges() {
        // 2024-02-29T23:59:59.999Z: a leap day's last millisecond.
        let w = Windows::at(1_709_251_199_999);
        assert_eq!(w.month, 2024 * 12 + 1);
        assert_eq!(w.month_end_ms, 1_709_251_200_000);
        assert_eq!(w.day_end_ms, 1_709_251_200_000);
        assert_eq!(
            w.resets_in(BudgetPeriod::Day, 1_709_251_199_999),
            Duration::from_millis(1)
        );
        let spend = KeySpend {
            day: NanoUsd::from_nanos(70),
            month: NanoUsd::from_nanos(90),
            held: NanoUsd::from_nanos(20),
        };
        let budget = KeyBudget {
            limit: NanoUsd::from_nanos(100),
            period: BudgetPeriod::Day,
        };
        assert_eq!(spend.remaining(budget), NanoUsd::from_nanos(10));
        let month = KeyBudget {
            period: BudgetPeriod::Month,
            ..budget
        };
        assert_eq!(spend.remaining(month), NanoUsd::ZERO);
    }
}
