//! Amounts people can read (issue 45): money rounded for reading — to the cent, or to four
//! significant digits below a cent — with the exact figure to the nano-dollar beside it for the
//! page's hover title and its `<data value>`. Totals are summed from exact figures before they
//! are rounded here; downloads carry the exact figures.

use money::NanoUsd;

/// An amount as a page shows it. In a template, `{{ amount }}` writes
/// `<data value="exact" title="exact USD">shown</data>` (both parts are digits, `.`, `,` and `-`
/// only, so the markup needs no escaping).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Amount {
    /// Rounded for reading: `12,345.68`, `0.0001235`, `0.00`.
    pub(crate) shown: String,
    /// Exact, in USD: `12345.678901234`.
    pub(crate) exact: String,
}

impl std::fmt::Display for Amount {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "<data value=\"{e}\" title=\"{e} USD\">{s}</data>",
            e = self.exact,
            s = self.shown
        )
    }
}

impl askama::filters::HtmlSafe for Amount {}

/// A figure that is an amount in USD or, when there is none to show, a fixed note ("being
/// reconciled", "not active yet").
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Figure {
    Usd(Amount),
    Note(&'static str),
}

impl std::fmt::Display for Figure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Figure::Usd(a) => write!(f, "{a} USD"),
            // The notes are this crate's own constants, written without markup characters.
            Figure::Note(text) => f.write_str(text),
        }
    }
}

impl askama::filters::HtmlSafe for Figure {}

/// Nano-dollars in a cent.
const CENT: u64 = 10_000_000;

pub(crate) fn amount(n: NanoUsd) -> Amount {
    Amount {
        shown: readable(n.nanos()),
        exact: n.to_decimal_usd().to_string(),
    }
}

/// `nanos` rounded half up (away from zero) to the cent when it is a cent or more, else to four
/// significant digits (a rounding that reaches a cent shows `0.01`).
pub(crate) fn readable(nanos: i64) -> String {
    let sign = if nanos < 0 { "-" } else { "" };
    let a = nanos.unsigned_abs();
    if a == 0 {
        return "0.00".into();
    }
    let below_cent = if a < CENT {
        let digits = a.ilog10() + 1;
        let step = 10u64.pow(digits.saturating_sub(4));
        let rounded = (a + step / 2) / step * step;
        (rounded < CENT).then_some(rounded)
    } else {
        None
    };
    match below_cent {
        Some(r) => {
            let text = format!("{r:09}");
            format!("{sign}0.{}", text.trim_end_matches('0'))
        }
        None => {
            let cents = a / CENT + u64::from(a % CENT >= CENT / 2);
            format!("{sign}{}.{:02}", grouped(cents / 100), cents % 100)
        }
    }
}

/// `1234567` → `1,234,567`.
fn grouped(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounded_for_reading() {
        for (nanos, shown) in [
            (0, "0.00"),
            (1, "0.000000001"),
            (123_456, "0.0001235"),
            (123_449, "0.0001234"),
            (1_000, "0.000001"),
            (9_999_499, "0.009999"),
            (9_999_500, "0.01"),
            (10_000_000, "0.01"),
            (14_999_999, "0.01"),
            (15_000_000, "0.02"),
            (123_456_789_012, "123.46"),
            (1_234_567_890_000_000, "1,234,567.89"),
            (-123_456, "-0.0001235"),
            (-2_345_000_000, "-2.35"),
            (i64::MIN, "-9,223,372,036.85"),
        ] {
            assert_eq!(readable(nanos), shown, "{nanos}");
        }
    }

    #[test]
    fn the_exact_figure_stays_beside_it() {
        let a = amount(NanoUsd::from_nanos(123_456_789));
        assert_eq!(
            (a.shown.as_str(), a.exact.as_str()),
            ("0.12", "0.123456789")
        );
    }
}
