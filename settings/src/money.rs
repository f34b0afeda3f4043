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

/// A rate multiplier (a price relative to the official price) in millionths: 1.25 is
/// `RateMultiplier(1_250_000)`. Multipliers with more than six decimals are refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RateMultiplier(pub i64);

/// Millionths per unit multiplier.
pub const PPM: i64 = 1_000_000;

impl RateMultiplier {
    /// Converts a decimal multiplier; `None` when it is not positive, has more than six decimals
    /// or is absurdly large (above one million).
    pub fn from_decimal(d: Decimal) -> Option<RateMultiplier> {
        if d <= Decimal::ZERO || d > Decimal::from(PPM) {
            return None;
        }
        let scaled = d.checked_mul(Decimal::from(PPM))?;
        if scaled.fract() != Decimal::ZERO {
            return None;
        }
        i64::try_from(scaled).ok().map(RateMultiplier)
    }

    /// The exact decimal value, normalized.
    pub fn to_decimal(self) -> Decimal {
        Decimal::new(self.0, 6).normalize()
    }
}

impl fmt::Display for RateMultiplier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.to_decimal())
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
    fn multipliers_are_exact_millionths() {
        let m = RateMultiplier::from_decimal(Decimal::from_str("1.25").unwrap()).unwrap();
        assert_eq!(m, RateMultiplier(1_250_000));
        assert_eq!(m.to_string(), "1.25");
        assert_eq!(
            RateMultiplier::from_decimal(Decimal::from_str("0.0000001").unwrap()),
            None
        );
        assert_eq!(RateMultiplier::from_decimal(Decimal::ZERO), None);
        assert_eq!(
            RateMultiplier::from_decimal(Decimal::from_str("-1").unwrap()),
            None
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
