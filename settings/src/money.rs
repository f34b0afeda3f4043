//! Money as named integers: nano-USD (1e-9 USD) everywhere inside the program.
//!
//! Decimal numbers exist only at the edges (the configuration file, JSON APIs, database
//! NUMERIC columns). A value that cannot be represented exactly in nano-USD is refused, never
//! rounded silently. Lua on Redis computes with doubles, which are exact up to 2^53 nano-USD
//! (about 9 million USD per wallet); see docs/ARCHITECTURE.md.

use rust_decimal::Decimal;
use std::fmt;

/// An amount of money in nano-USD. Arithmetic is checked: overflow is an error, not a wrap.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct NanoUsd(pub i64);

/// Nano-USD per USD.
pub const NANOS_PER_USD: i64 = 1_000_000_000;

impl NanoUsd {
    pub const ZERO: NanoUsd = NanoUsd(0);

    /// Converts a decimal USD amount; `None` when it has more than nine decimals or overflows.
    pub fn from_decimal_usd(usd: Decimal) -> Option<NanoUsd> {
        let scaled = usd.checked_mul(Decimal::from(NANOS_PER_USD))?;
        if scaled.fract() != Decimal::ZERO {
            return None;
        }
        i64::try_from(scaled).ok().map(NanoUsd)
    }

    /// The exact decimal USD value, normalized (no trailing zeros).
    pub fn to_decimal_usd(self) -> Decimal {
        Decimal::new(self.0, 9).normalize()
    }

    pub fn checked_add(self, other: NanoUsd) -> Option<NanoUsd> {
        self.0.checked_add(other.0).map(NanoUsd)
    }

    pub fn checked_sub(self, other: NanoUsd) -> Option<NanoUsd> {
        self.0.checked_sub(other.0).map(NanoUsd)
    }
}

impl fmt::Display for NanoUsd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} USD", self.to_decimal_usd())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::str::FromStr;

    #[test]
    fn exact_conversions() {
        let d = Decimal::from_str("0.15").unwrap();
        assert_eq!(NanoUsd::from_decimal_usd(d), Some(NanoUsd(150_000_000)));
        assert_eq!(NanoUsd(150_000_000).to_decimal_usd().to_string(), "0.15");
        assert_eq!(
            NanoUsd::from_decimal_usd(Decimal::from_str("0.000000001").unwrap()),
            Some(NanoUsd(1))
        );
    }

    #[test]
    fn too_precise_or_too_large_is_refused() {
        assert_eq!(
            NanoUsd::from_decimal_usd(Decimal::from_str("0.0000000001").unwrap()),
            None
        );
        assert_eq!(
            NanoUsd::from_decimal_usd(Decimal::from_str("99999999999999").unwrap()),
            None
        );
    }
}
