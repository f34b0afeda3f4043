//! Money as named integers: nano-USD (1e-9 USD) and rate multipliers in millionths, used by every
//! crate of the workspace (configuration, operational store, gateway, admin-api).
//!
//! Decimal numbers exist only at the edges (the configuration file, JSON APIs, database NUMERIC
//! columns); a value that cannot be represented exactly is refused, never rounded silently. The
//! fields are private: an amount is made by a conversion that says its unit
//! ([`NanoUsd::from_nanos`], [`NanoUsd::from_decimal_usd`]) and changed only by checked
//! arithmetic (overflow is `None`, never a wrap). Prices round up, once, in [`NanoUsd::ceil_div`].
//!
//! On the wire (usage events, hold descriptions, key records) both types serialize as the plain
//! integer, so stored data is unchanged by the type. Lua on Redis computes with doubles, which are
//! exact up to 2^53 nano-USD (about 9 million USD per wallet); see docs/ARCHITECTURE.md.
//!
//! This crate does no I/O and knows nothing of prices per model or of wallets.

use rust_decimal::Decimal;
use std::fmt;

/// Nano-USD per USD.
pub const NANOS_PER_USD: i64 = 1_000_000_000;

/// Millionths per unit multiplier.
pub const PPM: i64 = 1_000_000;

/// An amount of money in nano-USD (may be negative: a debit, a difference).
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Default,
    serde::Serialize,
    serde::Deserialize,
)]
#[serde(transparent)]
pub struct NanoUsd(i64);

impl NanoUsd {
    pub const ZERO: NanoUsd = NanoUsd(0);
    /// The largest amount (used as "no limit" only where a limit is an upper bound).
    pub const MAX: NanoUsd = NanoUsd(i64::MAX);

    /// An amount given in nano-USD (a database column, a store value).
    pub const fn from_nanos(nanos: i64) -> NanoUsd {
        NanoUsd(nanos)
    }

    /// Whole USD; `None` on overflow.
    pub const fn from_usd(usd: i64) -> Option<NanoUsd> {
        match usd.checked_mul(NANOS_PER_USD) {
            Some(n) => Some(NanoUsd(n)),
            None => None,
        }
    }

    /// The amount in nano-USD (for a database column or a store script).
    pub const fn nanos(self) -> i64 {
        self.0
    }

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

    /// ⌈numerator / denominator⌉ nano-USD, for a price computed exactly in 128-bit integers:
    /// the one rounding step of every price (fractions of a nano-USD are charged). `None` when
    /// the denominator is not positive or the result does not fit.
    pub fn ceil_div(numerator: i128, denominator: i128) -> Option<NanoUsd> {
        if denominator <= 0 {
            return None;
        }
        let value =
            numerator.div_euclid(denominator) + i128::from(numerator.rem_euclid(denominator) != 0);
        i64::try_from(value).ok().map(NanoUsd)
    }

    pub const fn checked_add(self, other: NanoUsd) -> Option<NanoUsd> {
        match self.0.checked_add(other.0) {
            Some(n) => Some(NanoUsd(n)),
            None => None,
        }
    }

    pub const fn checked_sub(self, other: NanoUsd) -> Option<NanoUsd> {
        match self.0.checked_sub(other.0) {
            Some(n) => Some(NanoUsd(n)),
            None => None,
        }
    }

    pub const fn checked_neg(self) -> Option<NanoUsd> {
        match self.0.checked_neg() {
            Some(n) => Some(NanoUsd(n)),
            None => None,
        }
    }

    /// `self − other`, at least zero (what remains of a limit).
    pub fn remaining_after(self, other: NanoUsd) -> NanoUsd {
        NanoUsd(self.0.saturating_sub(other.0).max(0))
    }

    /// The sum, `None` on overflow.
    pub fn checked_sum(amounts: impl IntoIterator<Item = NanoUsd>) -> Option<NanoUsd> {
        amounts
            .into_iter()
            .try_fold(NanoUsd::ZERO, NanoUsd::checked_add)
    }

    pub const fn is_positive(self) -> bool {
        self.0 > 0
    }

    pub const fn is_negative(self) -> bool {
        self.0 < 0
    }

    pub const fn is_zero(self) -> bool {
        self.0 == 0
    }
}

impl fmt::Display for NanoUsd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} USD", self.to_decimal_usd())
    }
}

/// A rate multiplier (a price relative to the official price) in millionths: 1.25 is 1 250 000
/// ppm. Always positive; more than six decimals are refused.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(try_from = "i64", into = "i64")]
pub struct RateMultiplier(i64);

impl RateMultiplier {
    /// The official price.
    pub const ONE: RateMultiplier = RateMultiplier(PPM);

    /// A multiplier given in millionths (a database column, a key record); `None` unless
    /// positive.
    pub const fn from_ppm(ppm: i64) -> Option<RateMultiplier> {
        if ppm > 0 {
            Some(RateMultiplier(ppm))
        } else {
            None
        }
    }

    /// The multiplier in millionths.
    pub const fn ppm(self) -> i64 {
        self.0
    }

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

    /// This multiplier × `fraction` (a batch discount, at most one), rounded down to the
    /// millionth (in the payer's favour) and at least one millionth.
    pub fn discounted(self, fraction: RateMultiplier) -> RateMultiplier {
        let product = i128::from(self.0) * i128::from(fraction.0) / i128::from(PPM);
        RateMultiplier(i64::try_from(product).unwrap_or(self.0).clamp(1, self.0))
    }

    /// The exact decimal value, normalized.
    pub fn to_decimal(self) -> Decimal {
        Decimal::new(self.0, 6).normalize()
    }
}

impl TryFrom<i64> for RateMultiplier {
    type Error = String;

    fn try_from(ppm: i64) -> Result<RateMultiplier, String> {
        RateMultiplier::from_ppm(ppm)
            .ok_or_else(|| format!("rate multiplier {ppm} ppm is not positive"))
    }
}

impl From<RateMultiplier> for i64 {
    fn from(m: RateMultiplier) -> i64 {
        m.0
    }
}

impl fmt::Display for RateMultiplier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.to_decimal())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]
    use super::*;
    use std::str::FromStr;

    /// A discount multiplies exactly when it can, else rounds down, never below one millionth
    /// nor above the undiscounted rate.
    #[test]
    fn discounts() {
        let r = |ppm| RateMultiplier::from_ppm(ppm).unwrap();
        assert_eq!(r(1_250_000).discounted(r(500_000)), r(625_000));
        assert_eq!(r(1_000_001).discounted(r(500_000)), r(500_000));
        assert_eq!(r(3).discounted(r(1)), r(1));
        assert_eq!(r(2_000_000).discounted(RateMultiplier::ONE), r(2_000_000));
        assert_eq!(
            r(1_000_000_000_000).discounted(r(999_999)),
            r(999_999_000_000)
        );
    }

    proptest::proptest! {
        /// A batch discount never charges more than the price × the discount (nor more than the
        /// undiscounted rate), and less by under one millionth of the price at most, unless the
        /// floor of one millionth applies.
        #[test]
        fn a_discount_is_bounded(rate in 1i64..=1_000_000_000_000, fraction in 1i64..=1_000_000) {
            let d = RateMultiplier(rate).discounted(RateMultiplier(fraction));
            let exact = i128::from(rate) * i128::from(fraction);
            let got = i128::from(d.ppm()) * i128::from(PPM);
            proptest::prop_assert!(d.ppm() <= rate);
            proptest::prop_assert!(d.ppm() >= 1);
            proptest::prop_assert!(got <= exact || d.ppm() == 1);
            proptest::prop_assert!(exact - got < i128::from(PPM));
        }
    }

    #[test]
    fn exact_conversions() {
        let d = Decimal::from_str("0.15").unwrap();
        assert_eq!(NanoUsd::from_decimal_usd(d), Some(NanoUsd(150_000_000)));
        assert_eq!(NanoUsd(150_000_000).to_decimal_usd().to_string(), "0.15");
        assert_eq!(
            NanoUsd::from_decimal_usd(Decimal::from_str("0.000000001").unwrap()),
            Some(NanoUsd(1))
        );
        assert_eq!(NanoUsd::from_usd(3), Some(NanoUsd(3 * NANOS_PER_USD)));
        assert_eq!(NanoUsd::from_usd(i64::MAX), None);
    }

    #[test]
    fn multipliers_are_exact_positive_millionths() {
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
        assert_eq!(RateMultiplier::from_ppm(0), None);
        assert_eq!(RateMultiplier::from_ppm(-5), None);
        assert_eq!(RateMultiplier::from_ppm(PPM), Some(RateMultiplier::ONE));
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

    #[test]
    fn arithmetic_is_checked() {
        assert_eq!(NanoUsd::MAX.checked_add(NanoUsd(1)), None);
        assert_eq!(NanoUsd(i64::MIN).checked_sub(NanoUsd(1)), None);
        assert_eq!(NanoUsd(i64::MIN).checked_neg(), None);
        assert_eq!(NanoUsd(5).checked_sub(NanoUsd(7)), Some(NanoUsd(-2)));
        assert_eq!(NanoUsd(5).remaining_after(NanoUsd(7)), NanoUsd::ZERO);
        assert_eq!(
            NanoUsd::checked_sum([NanoUsd(1), NanoUsd(2)]),
            Some(NanoUsd(3))
        );
        assert_eq!(NanoUsd::checked_sum([NanoUsd::MAX, NanoUsd(1)]), None);
    }

    #[test]
    fn one_rounding_step_up() {
        assert_eq!(NanoUsd::ceil_div(10, 5), Some(NanoUsd(2)));
        assert_eq!(NanoUsd::ceil_div(11, 5), Some(NanoUsd(3)));
        assert_eq!(NanoUsd::ceil_div(0, 5), Some(NanoUsd::ZERO));
        assert_eq!(NanoUsd::ceil_div(1, 0), None);
        assert_eq!(NanoUsd::ceil_div(i128::MAX, 1), None);
    }

    #[test]
    fn wire_form_is_the_plain_integer() {
        assert_eq!(serde_json::to_string(&NanoUsd(42)).unwrap(), "42");
        assert_eq!(serde_json::from_str::<NanoUsd>("-7").unwrap(), NanoUsd(-7));
        assert_eq!(
            serde_json::to_string(&RateMultiplier(1_500_000)).unwrap(),
            "1500000"
        );
        assert!(serde_json::from_str::<RateMultiplier>("0").is_err());
    }
}
