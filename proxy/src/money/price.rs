//! Prices: what a call costs, in nano-USD, from token counts, the model's official prices and the
//! key's retail multiplier. Computed once per phase (the admission hold and the settlement), in
//! exact integers, rounded up to the nano-USD. An unknown price is an error, never a free call.

use crate::wire::Usage;
use money::{NanoUsd, RateMultiplier};
use settings::ModelPrices;

/// Why a call cannot be priced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PriceError {
    /// the model has no token prices configured
    #[error("the model has no token prices")]
    NoTokenPrices,
    /// the model has no per-minute audio price configured
    #[error("the model has no audio price")]
    NoAudioPrice,
    /// the model has no per-image price configured
    #[error("the model has no image price")]
    NoImagePrice,
    /// the amount does not fit in 64-bit nano-USD
    #[error("price overflow")]
    Overflow,
}

/// The cost of `seconds` of audio at the model's per-minute price × `rate`, prorated per second
/// and rounded up to the nano-USD.
pub fn audio_cost(
    prices: &ModelPrices,
    seconds: u64,
    rate: RateMultiplier,
) -> Result<NanoUsd, PriceError> {
    let per_minute = prices.per_minute_audio.ok_or(PriceError::NoAudioPrice)?;
    // seconds × nano-USD per minute × rate / 1e6, / 60 seconds.
    let weighted = i128::from(seconds) * i128::from(per_minute.nanos());
    priced(weighted, rate, 60 * 1_000_000)
}

/// The cost of `images` images at the model's per-image price × `rate`, rounded up to the
/// nano-USD.
pub fn image_cost(
    prices: &ModelPrices,
    images: u64,
    rate: RateMultiplier,
) -> Result<NanoUsd, PriceError> {
    let per_image = prices.per_image.ok_or(PriceError::NoImagePrice)?;
    let weighted = i128::from(images) * i128::from(per_image.nanos());
    priced(weighted, rate, 1_000_000)
}

/// The cost of `seconds` of video at `per_second` (the model's price for the task's resolution)
/// × `rate`, rounded up to the nano-USD.
pub fn video_cost(
    per_second: NanoUsd,
    seconds: u64,
    rate: RateMultiplier,
) -> Result<NanoUsd, PriceError> {
    let weighted = i128::from(seconds) * i128::from(per_second.nanos());
    priced(weighted, rate, 1_000_000)
}

/// The cost of `usage` at `prices` × `rate`. Cached input tokens (cache reads) are charged at the
/// cached price when one is configured, cache writes at the cache-write price (the hour-long ones
/// at `cache_write_1h_per_mtok`, else the cache-write price), each else at the input price; all
/// are part of `usage.input`.
pub fn cost(
    prices: &ModelPrices,
    usage: Usage,
    rate: RateMultiplier,
) -> Result<NanoUsd, PriceError> {
    let input = prices.input_per_mtok.ok_or(PriceError::NoTokenPrices)?;
    // An embedding model has no output price: it makes no tokens.
    let output = match (prices.output_per_mtok, usage.output) {
        (Some(p), _) => p,
        (None, 0) => NanoUsd::ZERO,
        (None, _) => return Err(PriceError::NoTokenPrices),
    };
    let cached = prices.cached_input_per_mtok.unwrap_or(input);
    let cache_write = prices.cache_write_per_mtok.unwrap_or(input);
    let cache_write_1h = prices.cache_write_1h_per_mtok.unwrap_or(cache_write);
    let cached_tokens = usage.input.min(usage.cached);
    let written_tokens = usage
        .input
        .saturating_sub(cached_tokens)
        .min(usage.cache_write);
    let hour_tokens = written_tokens.min(usage.cache_write_1h);
    let uncached = usage.input - cached_tokens - written_tokens;
    // Σ tokens × nano-USD per million tokens, then × rate / 1e6, / 1e6 tokens.
    let weighted: i128 = i128::from(uncached) * i128::from(input.nanos())
        + i128::from(cached_tokens) * i128::from(cached.nanos())
        + i128::from(written_tokens - hour_tokens) * i128::from(cache_write.nanos())
        + i128::from(hour_tokens) * i128::from(cache_write_1h.nanos())
        + i128::from(usage.output) * i128::from(output.nanos());
    priced(weighted, rate, 1_000_000 * 1_000_000)
}

/// What the supplier bills the operator for what it served (issue 47): `usage`, `images` and
/// `seconds` of video at the model's supplier prices × `rate` (the account's
/// `supplier_price_multiplier`, times the supplier's batch discount for a line of its batch).
/// `None` when a price it needs is unknown: no input or output price for tokens served, no
/// cache-write price for cache writes (a supplier may bill them above the input price), no
/// per-image or per-second price. A cache read without its own price is priced at the input
/// price (no supplier bills reads above it). Nothing served costs nothing, priced or not.
pub fn supplier_cost(
    prices: &ModelPrices,
    usage: Usage,
    images: u64,
    video_seconds: u64,
    rate: RateMultiplier,
) -> Option<NanoUsd> {
    let tokens = usage.input > 0 || usage.output > 0;
    let mut total = NanoUsd::ZERO;
    if tokens {
        let hour = usage.cache_write_1h > 0 && prices.cache_write_1h_per_mtok.is_none();
        if (usage.cache_write > usage.cache_write_1h && prices.cache_write_per_mtok.is_none())
            || hour
        {
            return None;
        }
        total = total.checked_add(cost(prices, usage, rate).ok()?)?;
    }
    if images > 0 {
        total = total.checked_add(image_cost(prices, images, rate).ok()?)?;
    }
    if video_seconds > 0 {
        total = total.checked_add(video_cost(prices.per_second?, video_seconds, rate).ok()?)?;
    }
    Some(total)
}

/// ⌈weighted × rate (ppm) / denominator⌉ nano-USD, exact in 128-bit integers.
fn priced(weighted: i128, rate: RateMultiplier, denominator: i128) -> Result<NanoUsd, PriceError> {
    let numerator = weighted
        .checked_mul(i128::from(rate.ppm()))
        .ok_or(PriceError::Overflow)?;
    NanoUsd::ceil_div(numerator, denominator).ok_or(PriceError::Overflow)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(ppm: i64) -> RateMultiplier {
        RateMultiplier::from_ppm(ppm).unwrap()
    }

    /// The supplier's side: unknown prices stay unknown (never zero), nothing served is free,
    /// and tokens, images and seconds add up.
    #[test]
    fn supplier_cost_is_unknown_without_the_prices_it_needs() {
        let one = r(1_000_000);
        let u = |input, output, cached, cache_write| Usage {
            input,
            output,
            cached,
            cache_write,
            cache_write_1h: 0,
            reasoning: 0,
        };
        let none = ModelPrices::default();
        assert_eq!(
            supplier_cost(&none, Usage::default(), 0, 0, one),
            Some(NanoUsd::ZERO)
        );
        assert_eq!(supplier_cost(&none, u(10, 0, 0, 0), 0, 0, one), None);
        assert_eq!(supplier_cost(&none, Usage::default(), 1, 0, one), None);
        assert_eq!(supplier_cost(&none, Usage::default(), 0, 4, one), None);
        let p = prices();
        // 1,000 in × 0.15 + 500 out × 0.60 USD per Mtok = 450 µUSD.
        assert_eq!(
            supplier_cost(&p, u(1_000, 500, 0, 0), 0, 0, one),
            Some(NanoUsd::from_nanos(450_000))
        );
        // At a negotiated 0.8: 360 µUSD; at the batch half of it: 180.
        assert_eq!(
            supplier_cost(&p, u(1_000, 500, 0, 0), 0, 0, r(800_000)),
            Some(NanoUsd::from_nanos(360_000))
        );
        assert_eq!(
            supplier_cost(&p, u(1_000, 500, 0, 0), 0, 0, r(400_000)),
            Some(NanoUsd::from_nanos(180_000))
        );
        // Cache writes need their own price; reads fall back to the input price.
        assert_eq!(supplier_cost(&p, u(1_000, 0, 0, 100), 0, 0, one), None);
        let no_read = ModelPrices {
            cached_input_per_mtok: None,
            ..prices()
        };
        assert_eq!(
            supplier_cost(&no_read, u(1_000, 0, 400, 0), 0, 0, one),
            Some(NanoUsd::from_nanos(150_000))
        );
        let media = ModelPrices {
            per_image: Some(NanoUsd::from_nanos(40_000_000)),
            per_second: Some(NanoUsd::from_nanos(100_000_000)),
            ..ModelPrices::default()
        };
        assert_eq!(
            supplier_cost(&media, Usage::default(), 2, 3, one),
            Some(NanoUsd::from_nanos(380_000_000))
        );
    }

    /// Anthropic's two cache lifetimes: the hour-long writes at `cache_write_1h_per_mtok`
    /// (customer: else the cache-write price; supplier: else unknown), the 5-minute ones at
    /// `cache_write_per_mtok`.
    #[test]
    fn hour_long_cache_writes_have_their_own_price() {
        let u = Usage {
            input: 1_000,
            output: 0,
            cached: 0,
            cache_write: 300,
            cache_write_1h: 100,
            reasoning: 0,
        };
        let p = ModelPrices {
            cache_write_per_mtok: Some(NanoUsd::from_nanos(187_500_000)), // 1.25 × 0.15
            ..prices()
        };
        // Without an hour price: 700 × 0.15 + 300 × 0.1875 USD per Mtok.
        assert_eq!(cost(&p, u, r(1_000_000)), Ok(NanoUsd::from_nanos(161_250)));
        let hour = ModelPrices {
            cache_write_1h_per_mtok: Some(NanoUsd::from_nanos(300_000_000)), // 2 × 0.15
            ..p.clone()
        };
        // 700 × 0.15 + 200 × 0.1875 + 100 × 0.30.
        assert_eq!(
            cost(&hour, u, r(1_000_000)),
            Ok(NanoUsd::from_nanos(172_500))
        );
        // The 1-hour count is part of the writes: never more of it than there are writes.
        let odd = Usage {
            cache_write_1h: 900,
            ..u
        };
        assert_eq!(
            cost(&hour, odd, r(1_000_000)),
            Ok(NanoUsd::from_nanos(195_000))
        );
        // The supplier's side: an hour price is needed once hour-long writes were made.
        assert_eq!(supplier_cost(&p, u, 0, 0, r(1_000_000)), None);
        assert_eq!(
            supplier_cost(&hour, u, 0, 0, r(1_000_000)),
            Some(NanoUsd::from_nanos(172_500))
        );
        let five = Usage {
            cache_write_1h: 0,
            ..u
        };
        assert_eq!(
            supplier_cost(&p, five, 0, 0, r(1_000_000)),
            Some(NanoUsd::from_nanos(161_250))
        );
    }

    fn prices() -> ModelPrices {
        ModelPrices {
            input_per_mtok: Some(NanoUsd::from_nanos(150_000_000)), // 0.15 USD
            output_per_mtok: Some(NanoUsd::from_nanos(600_000_000)), // 0.60 USD
            cached_input_per_mtok: Some(NanoUsd::from_nanos(75_000_000)), // 0.075 USD
            ..ModelPrices::default()
        }
    }

    /// Cache writes are priced at `cache_write_per_mtok`, else at the input price; reads and
    /// writes together never exceed the input (a supplier's inconsistent counts are clamped).
    #[test]
    fn cache_writes_have_their_own_price() {
        let u = Usage {
            input: 1_000,
            output: 0,
            cached: 300,
            cache_write: 100,
            cache_write_1h: 0,
            reasoning: 0,
        };
        // Without a cache-write price: 600 × 0.15 + 300 × 0.075 + 100 × 0.15 USD per Mtok.
        assert_eq!(
            cost(&prices(), u, r(1_000_000)),
            Ok(NanoUsd::from_nanos(127_500))
        );
        let p = ModelPrices {
            cache_write_per_mtok: Some(NanoUsd::from_nanos(187_500_000)), // 0.1875 USD
            ..prices()
        };
        // 600 × 0.15 + 300 × 0.075 + 100 × 0.1875 USD per Mtok.
        assert_eq!(cost(&p, u, r(1_000_000)), Ok(NanoUsd::from_nanos(131_250)));
        let odd = Usage {
            input: 10,
            output: 0,
            cached: 8,
            cache_write: 8,
            cache_write_1h: 0,
            reasoning: 0,
        };
        // 8 read + 2 written (what is left of the input), none uncached.
        assert_eq!(cost(&p, odd, r(1_000_000)), Ok(NanoUsd::from_nanos(975)));
    }

    #[test]
    fn exact_costs() {
        let u = Usage {
            cache_write: 0,
            cache_write_1h: 0,
            input: 1_000_000,
            output: 1_000_000,
            cached: 0,
            reasoning: 0,
        };
        assert_eq!(
            cost(&prices(), u, r(1_000_000)),
            Ok(NanoUsd::from_nanos(750_000_000))
        );
        assert_eq!(
            cost(&prices(), u, r(1_250_000)),
            Ok(NanoUsd::from_nanos(937_500_000))
        );
        // 11 input (2 cached) and 5 output tokens at 1.0: 9×150 + 2×75 + 5×600 = 4500 nano-USD·Mtok/1e6.
        let u = Usage {
            cache_write: 0,
            cache_write_1h: 0,
            input: 11,
            output: 5,
            cached: 2,
            reasoning: 0,
        };
        assert_eq!(
            cost(&prices(), u, r(1_000_000)),
            Ok(NanoUsd::from_nanos(4_500))
        );
        // Fractions of a nano-USD round up.
        let u = Usage {
            cache_write: 0,
            cache_write_1h: 0,
            input: 1,
            output: 0,
            cached: 0,
            reasoning: 0,
        };
        assert_eq!(
            cost(&prices(), u, r(1_000_001)),
            Ok(NanoUsd::from_nanos(151))
        );
    }

    #[test]
    fn audio_costs() {
        let p = ModelPrices {
            per_minute_audio: Some(NanoUsd::from_nanos(6_000_000)), // 0.006 USD per minute
            ..ModelPrices::default()
        };
        assert_eq!(
            audio_cost(&p, 60, r(1_000_000)),
            Ok(NanoUsd::from_nanos(6_000_000))
        );
        assert_eq!(
            audio_cost(&p, 1, r(1_000_000)),
            Ok(NanoUsd::from_nanos(100_000))
        );
        assert_eq!(
            audio_cost(&p, 90, r(1_500_000)),
            Ok(NanoUsd::from_nanos(13_500_000))
        );
        assert_eq!(audio_cost(&p, 0, r(1_000_000)), Ok(NanoUsd::from_nanos(0)));
        // 7 seconds at 0.000007 USD per minute: 0.8166… nano-USD, rounded up.
        let tiny = ModelPrices {
            per_minute_audio: Some(NanoUsd::from_nanos(7)),
            ..ModelPrices::default()
        };
        assert_eq!(
            audio_cost(&tiny, 7, r(1_000_000)),
            Ok(NanoUsd::from_nanos(1))
        );
        assert_eq!(
            audio_cost(&prices(), 1, r(1_000_000)),
            Err(PriceError::NoAudioPrice)
        );
    }

    #[test]
    fn image_costs() {
        let p = ModelPrices {
            per_image: Some(NanoUsd::from_nanos(40_000_000)), // 0.04 USD
            ..ModelPrices::default()
        };
        assert_eq!(
            image_cost(&p, 1, r(1_000_000)),
            Ok(NanoUsd::from_nanos(40_000_000))
        );
        assert_eq!(
            image_cost(&p, 3, r(1_250_000)),
            Ok(NanoUsd::from_nanos(150_000_000))
        );
        assert_eq!(image_cost(&p, 0, r(1_000_000)), Ok(NanoUsd::ZERO));
        let odd = ModelPrices {
            per_image: Some(NanoUsd::from_nanos(3)),
            ..ModelPrices::default()
        };
        assert_eq!(
            image_cost(&odd, 1, r(1_000_001)),
            Ok(NanoUsd::from_nanos(4))
        );
        assert_eq!(
            image_cost(&prices(), 1, r(1_000_000)),
            Err(PriceError::NoImagePrice)
        );
    }

    #[test]
    fn unknown_prices_refuse() {
        let mut p = prices();
        p.output_per_mtok = None;
        let output = Usage {
            output: 1,
            ..Usage::default()
        };
        assert_eq!(
            cost(&p, output, r(1_000_000)),
            Err(PriceError::NoTokenPrices)
        );
        // No output price, no output (an embedding model): the input alone.
        assert!(cost(&p, Usage::default(), r(1_000_000)).is_ok());
        p.input_per_mtok = None;
        assert_eq!(
            cost(&p, Usage::default(), r(1_000_000)),
            Err(PriceError::NoTokenPrices)
        );
        // A key without a positive multiplier cannot reach pricing: `RateMultiplier` has no
        // such value (the key record reads it as unknown, and admission refuses).
        assert_eq!(RateMultiplier::from_ppm(0), None);
    }
}
