//! Prices: what a call costs, in nano-USD, from token counts, the model's official prices and the
//! key's retail multiplier. Computed once per phase (the admission hold and the settlement), in
//! exact integers, rounded up to the nano-USD. An unknown price is an error, never a free call.

use crate::wire::Usage;
use settings::{ModelPrices, NanoUsd};

/// Why a call cannot be priced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PriceError {
    /// the model has no token prices configured
    #[error("the model has no token prices")]
    NoTokenPrices,
    /// the model has no per-minute audio price configured
    #[error("the model has no audio price")]
    NoAudioPrice,
    /// the key carries no retail multiplier
    #[error("the key has no retail price")]
    NoRate,
    /// the amount does not fit in 64-bit nano-USD
    #[error("price overflow")]
    Overflow,
}

/// The cost of `seconds` of audio at the model's per-minute price × `rate_ppm`, prorated per
/// second and rounded up to the nano-USD.
pub fn audio_cost(
    prices: &ModelPrices,
    seconds: u64,
    rate_ppm: i64,
) -> Result<NanoUsd, PriceError> {
    let per_minute = prices.per_minute_audio.ok_or(PriceError::NoAudioPrice)?;
    if rate_ppm <= 0 {
        return Err(PriceError::NoRate);
    }
    // seconds × nano-USD per minute × rate / 1e6, / 60 seconds.
    let weighted = i128::from(seconds) * i128::from(per_minute.0);
    priced(weighted, rate_ppm, 60 * 1_000_000)
}

/// The cost of `usage` at `prices` × `rate_ppm` (millionths). Cached input tokens are charged at
/// the cached price when one is configured, else at the input price.
pub fn cost(prices: &ModelPrices, usage: Usage, rate_ppm: i64) -> Result<NanoUsd, PriceError> {
    let input = prices.input_per_mtok.ok_or(PriceError::NoTokenPrices)?;
    let output = prices.output_per_mtok.ok_or(PriceError::NoTokenPrices)?;
    let cached = prices.cached_input_per_mtok.unwrap_or(input);
    if rate_ppm <= 0 {
        return Err(PriceError::NoRate);
    }
    let uncached = usage.input.saturating_sub(usage.cached);
    let cached_tokens = usage.input.min(usage.cached);
    // Σ tokens × nano-USD per million tokens, then × rate / 1e6, / 1e6 tokens.
    let weighted: i128 = i128::from(uncached) * i128::from(input.0)
        + i128::from(cached_tokens) * i128::from(cached.0)
        + i128::from(usage.output) * i128::from(output.0);
    priced(weighted, rate_ppm, 1_000_000 * 1_000_000)
}

/// ⌈weighted × rate_ppm / denominator⌉ nano-USD, exact in 128-bit integers.
fn priced(weighted: i128, rate_ppm: i64, denominator: i128) -> Result<NanoUsd, PriceError> {
    let numerator = weighted
        .checked_mul(i128::from(rate_ppm))
        .ok_or(PriceError::Overflow)?;
    let value = numerator / denominator + i128::from(numerator % denominator != 0);
    i64::try_from(value)
        .map(NanoUsd)
        .map_err(|_| PriceError::Overflow)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prices() -> ModelPrices {
        ModelPrices {
            input_per_mtok: Some(NanoUsd(150_000_000)),  // 0.15 USD
            output_per_mtok: Some(NanoUsd(600_000_000)), // 0.60 USD
            cached_input_per_mtok: Some(NanoUsd(75_000_000)), // 0.075 USD
            ..ModelPrices::default()
        }
    }

    #[test]
    fn exact_costs() {
        let u = Usage {
            input: 1_000_000,
            output: 1_000_000,
            cached: 0,
        };
        assert_eq!(cost(&prices(), u, 1_000_000), Ok(NanoUsd(750_000_000)));
        assert_eq!(cost(&prices(), u, 1_250_000), Ok(NanoUsd(937_500_000)));
        // 11 input (2 cached) and 5 output tokens at 1.0: 9×150 + 2×75 + 5×600 = 4500 nano-USD·Mtok/1e6.
        let u = Usage {
            input: 11,
            output: 5,
            cached: 2,
        };
        assert_eq!(cost(&prices(), u, 1_000_000), Ok(NanoUsd(4_500)));
        // Fractions of a nano-USD round up.
        let u = Usage {
            input: 1,
            output: 0,
            cached: 0,
        };
        assert_eq!(cost(&prices(), u, 1_000_001), Ok(NanoUsd(151)));
    }

    #[test]
    fn audio_costs() {
        let p = ModelPrices {
            per_minute_audio: Some(NanoUsd(6_000_000)), // 0.006 USD per minute
            ..ModelPrices::default()
        };
        assert_eq!(audio_cost(&p, 60, 1_000_000), Ok(NanoUsd(6_000_000)));
        assert_eq!(audio_cost(&p, 1, 1_000_000), Ok(NanoUsd(100_000)));
        assert_eq!(audio_cost(&p, 90, 1_500_000), Ok(NanoUsd(13_500_000)));
        assert_eq!(audio_cost(&p, 0, 1_000_000), Ok(NanoUsd(0)));
        // 7 seconds at 0.000007 USD per minute: 0.8166… nano-USD, rounded up.
        let tiny = ModelPrices {
            per_minute_audio: Some(NanoUsd(7)),
            ..ModelPrices::default()
        };
        assert_eq!(audio_cost(&tiny, 7, 1_000_000), Ok(NanoUsd(1)));
        assert_eq!(
            audio_cost(&prices(), 1, 1_000_000),
            Err(PriceError::NoAudioPrice)
        );
        assert_eq!(audio_cost(&p, 1, 0), Err(PriceError::NoRate));
    }

    #[test]
    fn unknown_prices_refuse() {
        let mut p = prices();
        p.output_per_mtok = None;
        assert_eq!(
            cost(&p, Usage::default(), 1_000_000),
            Err(PriceError::NoTokenPrices)
        );
        assert_eq!(
            cost(&prices(), Usage::default(), 0),
            Err(PriceError::NoRate)
        );
    }
}
