//! The wire types of the partner and billing APIs: what services return (`Serialize`, and
//! `ToSchema`, so these types *are* the OpenAPI schemas), what write bodies deserialize into, the
//! two envelopes, and money and multipliers as JSON numbers.
//!
//! Amounts leave as JSON numbers (the spec's type) through [`Usd`] and [`Multiplier`]. They are
//! produced from the exact decimal, so any amount with at most 15 significant digits round-trips
//! exactly; inside, money is always integer nano-USD. Request bodies keep their raw JSON values
//! (`Option<Value>` fields): each service validates them into its own types in the order of the
//! spec's error table, so a wrong type gets the route's own reason, not a serde message.
//!
//! DTOs are never entity models; nothing here touches the database.

mod billing;
mod partner;
mod requests;
mod webhooks;

pub use billing::*;
pub use partner::*;
pub use requests::*;
pub use webhooks::*;

use money::{NanoUsd, RateMultiplier};
use rust_decimal::Decimal;
use serde::{Serialize, Serializer};
use serde_json::Value;
use std::str::FromStr;
use utoipa::ToSchema;

/// An amount of money on the wire: a JSON number of USD (document it with
/// `#[schema(value_type = f64)]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Usd(pub NanoUsd);

impl Serialize for Usd {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        usd_json(self.0).serialize(s)
    }
}

/// A rate multiplier on the wire: a JSON number (document it with `#[schema(value_type = f64)]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Multiplier(pub RateMultiplier);

impl Serialize for Multiplier {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        multiplier_json(self.0).serialize(s)
    }
}

/// The success envelope: `{code: 0, message: "ok", data}`.
#[derive(Debug, Serialize)]
pub struct Envelope<T> {
    pub code: u16,
    pub message: &'static str,
    pub data: T,
}

impl<T> Envelope<T> {
    pub fn ok(data: T) -> Envelope<T> {
        Envelope {
            code: 0,
            message: "ok",
            data,
        }
    }
}

/// The error envelope: clients branch on `reason`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ErrorEnvelope {
    /// The HTTP status.
    pub code: u16,
    /// Stable error code (absent only for a bad `date` on the billing usage route).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<&'static str>,
    pub message: String,
    #[schema(value_type = Object)]
    pub metadata: Value,
}

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
