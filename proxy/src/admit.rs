//! Phase 3b, admission: before any supplier is contacted, reserve the call's worst-case cost from
//! the organization's wallet, in one atomic step of the wallet mirror.
//!
//! Worst case = input estimate + output cap, at the model's price × the key's retail multiplier:
//! - input estimate: ceil(request body bytes / 2) tokens (no tokenizer produces more than one
//!   token per two bytes of JSON in practice; a supplier reporting more is settled under the excess
//!   policy);
//! - output cap: the request's `max_tokens`, `max_completion_tokens` or `max_output_tokens`, else
//!   `money.default_output_tokens` (4096).
//!
//! Audio transcriptions: the duration read from the file (exact for WAV, else a 16 kbit/s bound;
//! see `form`) at the model's per-minute price.
//!
//! Refusals happen here, never after a supplier was contacted: not enough available balance → 402
//! `insufficient_quota`; a wallet the store does not have (lost, not rebuilt) → 503, fail closed.

use crate::errors::GatewayError;
use crate::meter::Usage;
use crate::price;
pub use opstate::HoldMeta;
use opstate::{Reservation, Wallets};
use settings::{ModelPrices, NanoUsd};

/// An open hold on an organization's wallet, to be settled exactly once.
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use = "a hold must be settled or released"]
pub struct Hold {
    pub org: i64,
    pub id: String,
    pub amount: NanoUsd,
    pub rate_ppm: i64,
}

/// The input part of the worst case: the estimate the reconciler charges for a dead gateway.
pub fn input_estimate(prices: &ModelPrices, rate_ppm: i64, request_bytes: usize) -> (u64, NanoUsd) {
    let tokens = (request_bytes as u64).div_ceil(2);
    let cost = price::cost(
        prices,
        Usage {
            input: tokens,
            output: 0,
            cached: 0,
        },
        rate_ppm,
    )
    .unwrap_or(NanoUsd::ZERO);
    (tokens, cost)
}

/// The worst-case cost of a call.
pub fn worst_case(
    prices: &ModelPrices,
    rate_ppm: Option<i64>,
    request_bytes: usize,
    output_cap: Option<u64>,
    default_output: u64,
) -> Result<(NanoUsd, i64), GatewayError> {
    let rate = rate_ppm.ok_or(GatewayError::PriceUnavailable)?;
    let usage = Usage {
        input: (request_bytes as u64).div_ceil(2),
        output: output_cap.unwrap_or(default_output),
        cached: 0,
    };
    let amount = price::cost(prices, usage, rate).map_err(|e| {
        tracing::error!(error = %e, "cannot price the call");
        GatewayError::PriceUnavailable
    })?;
    Ok((amount, rate))
}

/// The worst-case cost of an audio call of `seconds` (see `form::audio_seconds`).
pub fn audio_worst_case(
    prices: &ModelPrices,
    rate_ppm: Option<i64>,
    seconds: u64,
) -> Result<(NanoUsd, i64), GatewayError> {
    let rate = rate_ppm.ok_or(GatewayError::PriceUnavailable)?;
    let amount = price::audio_cost(prices, seconds, rate).map_err(|e| {
        tracing::error!(error = %e, "cannot price the audio call");
        GatewayError::PriceUnavailable
    })?;
    Ok((amount, rate))
}

/// Reserves `amount` for the call `hold_id`.
pub async fn reserve(
    wallets: &dyn Wallets,
    org: i64,
    hold_id: &str,
    amount: NanoUsd,
    rate_ppm: i64,
    ttl_ms: u64,
    meta: &HoldMeta,
) -> Result<Hold, GatewayError> {
    let meta = serde_json::to_string(meta).unwrap_or_default();
    match wallets.reserve(org, hold_id, amount.0, ttl_ms, &meta).await {
        Ok(Reservation::Held { .. } | Reservation::AlreadyHeld) => Ok(Hold {
            org,
            id: hold_id.to_string(),
            amount,
            rate_ppm,
        }),
        Ok(Reservation::Insufficient { available }) => Err(GatewayError::InsufficientBalance {
            needed: amount,
            available: NanoUsd(available),
        }),
        Ok(Reservation::Missing) => Err(GatewayError::WalletUnavailable),
        Err(e) => {
            tracing::error!(error = %e, org, "wallet reservation failed");
            Err(GatewayError::WalletUnavailable)
        }
    }
}
