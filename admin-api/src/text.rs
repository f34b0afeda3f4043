//! Text rules that know nothing of the stores: what a plausible address and a display text are,
//! and text the product writes into files people download (issue 42): cut by characters, never by
//! bytes (a name beyond ASCII never breaks a statement), and CSV cells a spreadsheet cannot run.

/// A plausible email address: one `@`, a non-empty local part, a dotted domain, no spaces.
pub fn valid_email(s: &str) -> bool {
    let Some((local, domain)) = s.split_once('@') else {
        return false;
    };
    !local.is_empty()
        && s.len() <= 254
        && !domain.contains('@')
        && domain.contains('.')
        && !domain.starts_with('.')
        && !domain.ends_with('.')
        && s.chars().all(|c| c.is_ascii_graphic())
}

/// A display text: 1 to `max` characters (not bytes) once trimmed, no control characters (a NUL is refused the
/// same way on every database; PostgreSQL cannot store it in text).
pub fn plain_text(s: &str, max: usize) -> bool {
    !s.trim().is_empty() && s.chars().count() <= max && !s.chars().any(char::is_control)
}

/// The first `n` characters of `s` (all of it when shorter); never splits a character.
pub fn cut_chars(s: &str, n: usize) -> &str {
    match s.char_indices().nth(n) {
        Some((at, _)) => &s[..at],
        None => s,
    }
}

/// Whether `s` is a plain decimal number (`-1.5`, `+3`, `12.000000007`): a spreadsheet reads it
/// as a number, never as a formula.
fn plain_number(s: &str) -> bool {
    let digits = s.strip_prefix(['-', '+']).unwrap_or(s);
    let (whole, frac) = digits.split_once('.').unwrap_or((digits, "0"));
    !whole.is_empty()
        && !frac.is_empty()
        && whole.bytes().all(|b| b.is_ascii_digit())
        && frac.bytes().all(|b| b.is_ascii_digit())
}

/// A CSV cell (RFC 4180): a cell a spreadsheet would read as a formula (one starting with `=`,
/// `+`, `-`, `@`, a tab or a carriage return, unless it is a plain number) gets a leading
/// apostrophe; a cell with a comma, a quote or a line break is quoted, its quotes doubled.
pub fn csv_cell(s: &str) -> String {
    let risky = s.starts_with(['=', '+', '-', '@', '\t', '\r']) && !plain_number(s);
    let s = if risky {
        format!("'{s}")
    } else {
        s.to_string()
    };
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn formulas_are_defused_and_numbers_kept() {
        assert_eq!(csv_cell("a,b"), "\"a,b\"");
        assert_eq!(csv_cell("say \"hi\""), "\"say \"\"hi\"\"\"");
        assert_eq!(csv_cell("=SUM(A1)"), "'=SUM(A1)");
        assert_eq!(csv_cell("+cmd|' /C calc'!A0"), "'+cmd|' /C calc'!A0");
        assert_eq!(csv_cell("-2+3"), "'-2+3");
        assert_eq!(csv_cell("@SUM(1)"), "'@SUM(1)");
        assert_eq!(csv_cell("\t=1"), "'\t=1");
        assert_eq!(csv_cell("\r=1"), "\"'\r=1\"");
        assert_eq!(csv_cell("-1.500000000"), "-1.500000000");
        assert_eq!(csv_cell("+3"), "+3");
        assert_eq!(csv_cell("Zoë Café"), "Zoë Café");
        assert_eq!(cut_chars("Zoë Café", 3), "Zoë");
        assert_eq!(cut_chars("ab", 5), "ab");
    }

    proptest! {
        /// Any text cut at any count keeps whole characters and at most that many.
        #[test]
        fn cuts_never_split_a_character(s in any::<String>(), n in 0usize..64) {
            let cut = cut_chars(&s, n);
            prop_assert!(s.starts_with(cut));
            prop_assert_eq!(cut.chars().count(), s.chars().count().min(n));
        }

        /// A cell reads back (RFC 4180) as the text, or the text behind one apostrophe, and
        /// what it reads as never starts with a formula character unless it is a plain number.
        #[test]
        fn no_cell_starts_a_formula(s in any::<String>()) {
            let cell = csv_cell(&s);
            let value = match cell.strip_prefix('"').and_then(|c| c.strip_suffix('"')) {
                Some(inner) => inner.replace("\"\"", "\""),
                None => cell.clone(),
            };
            prop_assert!(value == s || value == format!("'{s}"), "{cell:?}");
            let first = value.chars().next();
            prop_assert!(
                !matches!(first, Some('=' | '+' | '-' | '@' | '\t' | '\r')) || plain_number(&s),
                "{cell:?}"
            );
        }
    }
}
