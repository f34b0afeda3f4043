//! Wire-format helpers shared by the handlers: money and multipliers as JSON numbers, and exact
//! reading of JSON numbers into decimals.
//!
//! Amounts leave as JSON numbers (the spec's type). They are produced from the exact decimal, so
//! any amount with at most 15 significant digits round-trips exactly; inside, money is always
//! integer nano-USD.

use money::{NanoUsd, RateMultiplier};
use rust_decimal::Decimal;
use serde_json::Value;
use std::str::FromStr;

/// A nano-USD amount as a JSON number of USD.
pub fn usd_json(n: NanoUsd) -> Value {
    decimal_json(n.to_decimal_usd())
}

/// A multiplier as a JSON number.
pub fn multiplier_json(m: RateMultiplier) -> Value {
    decimal_json(m.to_decimal())
}

fn decimal_json(d: Decimal) -> Value {
    let text = d.normalize().to_string();
    if let Ok(i) = i64::from_str(&text) {
        return Value::from(i);
    }
    f64::from_str(&text)
        .ok()
        .and_then(serde_json::Number::from_f64)
        .map(Value::Number)
        .unwrap_or(Value::Null)
}

/// The exact decimal of a JSON number (`None` for anything that is not a number).
pub fn decimal_of(v: &Value) -> Option<Decimal> {
    match v {
        Value::Number(n) => Decimal::from_str(&n.to_string())
            .or_else(|_| Decimal::from_scientific(&n.to_string()))
            .ok(),
        _ => None,
    }
}

/// A USD amount: a JSON number, at most 9 decimals; sign rules are the caller's.
pub fn usd_of(v: &Value) -> Option<NanoUsd> {
    decimal_of(v).and_then(NanoUsd::from_decimal_usd)
}

/// A rate multiplier: a positive JSON number with at most 6 decimals.
pub fn multiplier_of(v: &Value) -> Option<RateMultiplier> {
    decimal_of(v).and_then(RateMultiplier::from_decimal)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn amounts_round_trip() {
        assert_eq!(
            usd_of(&json!(10)),
            Some(NanoUsd::from_nanos(10_000_000_000))
        );
        assert_eq!(usd_of(&json!(0.1)), Some(NanoUsd::from_nanos(100_000_000)));
        assert_eq!(usd_of(&json!("1")), None);
        assert_eq!(usd_of(&json!(1e-10)), None);
        assert_eq!(usd_json(NanoUsd::from_nanos(100_000_000)), json!(0.1));
        assert_eq!(usd_json(NanoUsd::from_nanos(10_000_000_000)), json!(10));
        assert_eq!(
            multiplier_of(&json!(1.25)),
            RateMultiplier::from_ppm(1_250_000)
        );
        assert_eq!(multiplier_of(&json!(0)), None);
        assert_eq!(
            multiplier_json(RateMultiplier::from_ppm(1_250_000).unwrap()),
            json!(1.25)
        );
    }
}
