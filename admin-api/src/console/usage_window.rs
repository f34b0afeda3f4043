//! The usage pages' question: whose usage (`Scope`), which window of whole UTC days, by day or
//! by hour, broken down by what (`By`), read from the query string with a refusal naming the
//! field (`choose`), and the ready-made windows the page offers.

use crate::services::usage::{Granularity, UsageError, Window};
use chrono::{NaiveDate, TimeDelta};
use std::collections::HashMap;

/// What the usage is broken down by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum By {
    Model,
    Key,
    Group,
    Customer,
}

impl By {
    pub(super) fn name(self) -> &'static str {
        match self {
            By::Model => "model",
            By::Key => "key",
            By::Group => "group",
            By::Customer => "customer",
        }
    }
}

/// Whose usage a page shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scope {
    Org(i64),
    Partner(i64),
}

impl Scope {
    /// The pages' path of this scope.
    pub(super) fn base(self) -> String {
        match self {
            Scope::Org(id) => format!("/console/orgs/{id}"),
            Scope::Partner(id) => format!("/console/partners/{id}"),
        }
    }

    pub(super) fn is_partner(self) -> bool {
        matches!(self, Scope::Partner(_))
    }

    pub(super) fn id(self) -> i64 {
        match self {
            Scope::Org(id) | Scope::Partner(id) => id,
        }
    }

    /// The breakdown shown when none is asked for.
    pub(super) fn default_by(self) -> By {
        match self {
            Scope::Org(_) => By::Model,
            Scope::Partner(_) => By::Customer,
        }
    }
}

/// The page's query, checked. Each refusal names its field.
#[derive(Debug, Clone)]
pub(super) struct Choice {
    pub(super) granularity: Granularity,
    pub(super) from: NaiveDate,
    pub(super) to: NaiveDate,
    pub(super) by: By,
}

/// A refused query: the field and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Refusal {
    pub(super) field: &'static str,
    pub(super) message: String,
}

/// The raw values of the form, echoed back when refused.
#[derive(Debug, Clone, Default)]
pub(super) struct Raw {
    pub(super) granularity: String,
    pub(super) from: String,
    pub(super) to: String,
    pub(super) by: String,
}

pub(super) fn parse_day(value: &str, label: &str) -> Result<NaiveDate, String> {
    NaiveDate::parse_from_str(value.trim(), "%Y-%m-%d")
        .map_err(|_| format!("{label} must be a date such as 2026-01-31."))
}

/// Checks the query at date `today` (UTC).
pub(super) fn choose(
    q: &HashMap<String, String>,
    today: NaiveDate,
    scope: Scope,
) -> Result<Choice, Refusal> {
    let get = |k: &str| q.get(k).map(|v| v.trim()).filter(|v| !v.is_empty());
    let granularity = match get("granularity") {
        None | Some("day") => Granularity::Day,
        Some("hour") => Granularity::Hour,
        Some(_) => {
            return Err(Refusal {
                field: "granularity",
                message: "Choose by day or by hour.".into(),
            });
        }
    };
    let by = match get("by") {
        None => scope.default_by(),
        Some("model") => By::Model,
        Some("key") => By::Key,
        Some("group") => By::Group,
        Some("customer") if scope.is_partner() => By::Customer,
        Some(_) => {
            return Err(Refusal {
                field: "by",
                message: if scope.is_partner() {
                    "Choose customer, model, key or group.".into()
                } else {
                    "Choose model, key or group.".into()
                },
            });
        }
    };
    let to = match get("to") {
        None => today,
        Some(v) => parse_day(v, "To").map_err(|message| Refusal {
            field: "to",
            message,
        })?,
    };
    let from = match get("from") {
        None => match granularity {
            Granularity::Day => to - TimeDelta::days(29),
            Granularity::Hour => to - TimeDelta::days(1),
        },
        Some(v) => parse_day(v, "From").map_err(|message| Refusal {
            field: "from",
            message,
        })?,
    };
    let choice = Choice {
        granularity,
        from,
        to,
        by,
    };
    choice.window().map_err(|e| Refusal {
        field: if to < from { "to" } else { "from" },
        message: match e {
            UsageError::Window(_) if to < from => "To must not be before From.".to_string(),
            _ => match granularity {
                Granularity::Day => "By day, the window may span at most 366 days.".to_string(),
                Granularity::Hour => "By hour, the window may span at most 7 days.".to_string(),
            },
        },
    })?;
    Ok(choice)
}

impl Choice {
    pub(super) fn window(&self) -> Result<Window, UsageError> {
        Window::days(self.granularity, self.from, self.to)
    }

    /// The query string of this choice (for the CSV link).
    pub(super) fn query(&self) -> String {
        format!(
            "granularity={}&from={}&to={}&by={}",
            granularity_name(self.granularity),
            self.from,
            self.to,
            self.by.name()
        )
    }

    pub(super) fn raw(&self) -> Raw {
        Raw {
            granularity: granularity_name(self.granularity).into(),
            from: self.from.to_string(),
            to: self.to.to_string(),
            by: self.by.name().into(),
        }
    }
}

pub(super) fn granularity_name(g: Granularity) -> &'static str {
    match g {
        Granularity::Day => "day",
        Granularity::Hour => "hour",
    }
}

/// The ready-made windows offered above the form (with the current breakdown).
pub(super) fn presets(
    scope: Scope,
    today: NaiveDate,
    shown: Option<&Choice>,
) -> Vec<(&'static str, String, bool)> {
    let by = shown.map_or(scope.default_by(), |c| c.by);
    [
        ("Today, by hour", Granularity::Hour, 0),
        ("Last 7 days, by hour", Granularity::Hour, 6),
        ("Last 30 days", Granularity::Day, 29),
        ("Last 12 months", Granularity::Day, 365),
    ]
    .into_iter()
    .map(|(label, granularity, back)| {
        let c = Choice {
            granularity,
            from: today - TimeDelta::days(back),
            to: today,
            by,
        };
        let current = shown
            .is_some_and(|s| s.granularity == c.granularity && s.from == c.from && s.to == c.to);
        (
            label,
            format!("{}/usage?{}", scope.base(), c.query()),
            current,
        )
    })
    .collect()
}

/// A period's name: the day, or the day and hour.
pub(super) fn period_label(t: &chrono::DateTime<chrono::Utc>, g: Granularity) -> String {
    match g {
        Granularity::Day => t.format("%Y-%m-%d").to_string(),
        Granularity::Hour => t.format("%Y-%m-%d %H:00").to_string(),
    }
}
