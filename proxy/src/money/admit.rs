//! Admission (phase 3b): before any supplier is contacted, reserve the call's worst-case cost from
//! the organization's wallet, in one atomic step of the wallet mirror.
//!
//! Worst case = input estimate + output cap, at the model's price × the key's retail multiplier:
//! - input estimate: ceil(request body bytes / 2) tokens (no tokenizer produces more than one
//!   token per two bytes of JSON in practice; a supplier reporting more is settled under the excess
//!   policy);
//! - output cap: the request's `max_tokens`, `max_completion_tokens` or `max_output_tokens`, else
//!   `money.default_output_tokens` (4096).
//!
//! Image calls (an image model serves them): the images asked for (`n`, else 1) at the model's
//! per-image price; all of it may be charged if the gateway dies before settling (the supplier
//! was asked for every one of them).
//!
//! Video tasks: `durationSeconds` (else the model's longest duration) at the per-second price of
//! the task's resolution; all of it may be charged if no proxy ever ends the task (the supplier
//! was asked for every second). The hold outlives the request (`video::serve`).
//!
//! Embeddings: the input estimate above at the model's input price (an embedding makes no
//! tokens).
//!
//! Audio transcriptions: the duration read from the file (exact for WAV, else a 16 kbit/s bound;
//! see `form`) at the model's per-minute price.
//!
//! Refusals happen here, never after a supplier was contacted: not enough available balance → 402
//! `insufficient_quota`; a wallet the store does not have (lost, not rebuilt) → 503, fail closed.

use crate::classify::Route;
use crate::errors::GatewayError;
use crate::inspect::{Kind, Work};
use crate::money::price;
use crate::wire::Usage;
use money::{NanoUsd, RateMultiplier};
use opstate::{HoldMeta, KeyRecord, Reservation, Wallets};
use settings::{Model, ModelPrices};

/// An open hold on an organization's wallet, to be settled exactly once.
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use = "a hold must be settled or released"]
pub(crate) struct Hold {
    pub org: i64,
    pub id: String,
    pub amount: NanoUsd,
    pub rate: RateMultiplier,
    /// The group's wholesale multiplier at admission (what the partner owes is priced from it).
    pub wholesale: Option<RateMultiplier>,
}

/// What admission reserves for one call: the worst-case amount at the caller's rate, and the
/// hold's description (what the reconciler charges when the gateway dies before settling).
#[derive(Debug, Clone)]
pub(crate) struct HoldPlan {
    pub amount: NanoUsd,
    pub rate: RateMultiplier,
    pub meta: HoldMeta,
}

/// The hold for `work` on `route`, served by `served`, for `caller` (see the module's rules).
/// Refuses (503 `price_unavailable`) when the caller's rate or the model's price is unknown.
pub(crate) fn hold_for(
    work: &Work<'_>,
    route: Route,
    served: &Model,
    caller: &KeyRecord,
    on: On<'_>,
) -> Result<HoldPlan, GatewayError> {
    let On {
        settings,
        started_at_ms,
        batch,
    } = on;
    let money = &settings.money;
    let (rate, wholesale) = rates(caller, settings, served, batch.is_some())?;
    let prices = &served.prices;
    let images = (served.kind == settings::ModelKind::Image).then(|| work.images_asked());
    let mut video_seconds = 0;
    let (amount, input_tokens, input_cost, audio_seconds) = match (&work.kind, images) {
        // The whole image hold is the supplier's cost once it was asked: charged in full too.
        (_, Some(asked)) => {
            let amount = priced(price::image_cost(prices, asked, rate))?;
            (amount, 0, amount, 0)
        }
        (Kind::Text { call, .. }, None) => {
            let input = input_tokens(work.body_bytes);
            let output = call.output_cap.unwrap_or(money.default_output_tokens);
            let amount = priced(price::cost(prices, usage(input, output), rate))?;
            let input_cost = priced(price::cost(prices, usage(input, 0), rate))?;
            (amount, input, input_cost, 0)
        }
        // All of an audio call's cost is its input: a dead gateway's hold is charged in full.
        (Kind::Audio { seconds, .. }, None) => {
            let amount = priced(price::audio_cost(prices, *seconds, rate))?;
            (amount, 0, amount, *seconds)
        }
        // All of an embedding's cost is its input (it makes no tokens): a dead gateway's hold
        // is charged in full, as the supplier was asked for all of it.
        (Kind::Embedding(_), None) => {
            let input = input_tokens(work.body_bytes);
            let amount = priced(price::cost(prices, usage(input, 0), rate))?;
            (amount, input, amount, 0)
        }
        // Routing gives an image call an image model only.
        (Kind::Image(_), None) => return Err(GatewayError::Internal),
        (Kind::Video(job), None) => {
            video_seconds = job.held_seconds(served);
            let per_second = served
                .per_second(job.resolution(served))
                .ok_or(GatewayError::PriceUnavailable)?;
            let amount = priced(price::video_cost(per_second, video_seconds, rate))?;
            (amount, 0, amount, 0)
        }
    };
    Ok(HoldPlan {
        amount,
        rate,
        meta: HoldMeta {
            key_id: caller.key_id,
            group_id: caller.group_id,
            route: route.label().to_string(),
            model_requested: work.model().to_string(),
            model_served: served.id.clone(),
            stream: work.stream(),
            started_at_ms,
            input_tokens,
            input_cost_nanos: input_cost,
            audio_seconds,
            images: images.unwrap_or(0),
            video_seconds,
            retail_rate: Some(rate),
            wholesale_rate: wholesale,
            batch: batch.cloned(),
        },
    })
}

/// The caller's retail rate and its group's wholesale rate for a call of `served`; batch work
/// (issue 46) is at the model's price × its batch discount, retail and wholesale alike.
fn rates(
    caller: &KeyRecord,
    settings: &settings::Settings,
    served: &Model,
    batch: bool,
) -> Result<(RateMultiplier, Option<RateMultiplier>), GatewayError> {
    let wholesale = settings
        .group(caller.group_id)
        .map(|g| g.wholesale_rate_multiplier);
    let rate = caller.rate.ok_or(GatewayError::PriceUnavailable)?;
    Ok(match batch {
        true => (
            rate.discounted(served.batch_discount),
            wholesale.map(|w| w.discounted(served.batch_discount)),
        ),
        false => (rate, wholesale),
    })
}

/// What a hold is planned on besides the call: the configuration, the call's arrival, and the
/// batch line it runs (issue 46: priced at the model's `batch_discount`).
#[derive(Clone, Copy)]
pub(crate) struct On<'a> {
    pub settings: &'a settings::Settings,
    pub started_at_ms: u64,
    pub batch: Option<&'a opstate::BatchRef>,
}

/// The input estimate of a JSON body: ceil(bytes / 2) tokens.
fn input_tokens(request_bytes: usize) -> u64 {
    (request_bytes as u64).div_ceil(2)
}

fn usage(input: u64, output: u64) -> Usage {
    Usage {
        cache_write: 0,
        cache_write_1h: 0,
        input,
        output,
        cached: 0,
        reasoning: 0,
    }
}

fn priced(cost: Result<NanoUsd, price::PriceError>) -> Result<NanoUsd, GatewayError> {
    cost.map_err(|e| {
        tracing::error!(error = %e, "cannot price the call");
        GatewayError::PriceUnavailable
    })
}

/// The worst-case cost of a JSON call of `request_bytes` with `output_cap` (the default output
/// when `None`) at `rate`: what admission (`hold_for`) reserves. Public for tests that predict holds.
pub fn worst_case(
    prices: &ModelPrices,
    rate: Option<RateMultiplier>,
    request_bytes: usize,
    output_cap: Option<u64>,
    default_output: u64,
) -> Result<(NanoUsd, RateMultiplier), GatewayError> {
    let rate = rate.ok_or(GatewayError::PriceUnavailable)?;
    let output = output_cap.unwrap_or(default_output);
    let amount = priced(price::cost(
        prices,
        usage(input_tokens(request_bytes), output),
        rate,
    ))?;
    Ok((amount, rate))
}

/// Reserves `plan` for the call `hold_id` of `org`, held for `ttl_ms` at most.
pub(crate) async fn reserve(
    wallets: &dyn Wallets,
    org: i64,
    hold_id: &str,
    plan: &HoldPlan,
    ttl_ms: u64,
) -> Result<Hold, GatewayError> {
    let meta = describe(plan)?;
    let reserved = wallets
        .reserve(org, hold_id, plan.amount, ttl_ms, &meta)
        .await;
    outcome(org, hold_id, plan, reserved)
}

/// The hold's description, as the wallet keeps it beside the hold.
pub(crate) fn describe(plan: &HoldPlan) -> Result<String, GatewayError> {
    serde_json::to_string(&plan.meta).map_err(|e| {
        tracing::error!(error = %e, "cannot describe the hold");
        GatewayError::Internal
    })
}

/// What the wallet's answer to reserving `plan` means: the hold, or the refusal.
pub(crate) fn outcome(
    org: i64,
    hold_id: &str,
    plan: &HoldPlan,
    reserved: opstate::StoreResult<Reservation>,
) -> Result<Hold, GatewayError> {
    let amount = plan.amount;
    match reserved {
        Ok(Reservation::Held { .. } | Reservation::AlreadyHeld) => Ok(Hold {
            org,
            id: hold_id.to_string(),
            amount,
            rate: plan.rate,
            wholesale: plan.meta.wholesale_rate,
        }),
        Ok(Reservation::Insufficient { available }) => Err(GatewayError::InsufficientBalance {
            needed: amount,
            available,
        }),
        Ok(Reservation::Missing) => Err(GatewayError::WalletUnavailable),
        Err(e) => {
            tracing::error!(error = %e, org, "wallet reservation failed");
            Err(GatewayError::WalletUnavailable)
        }
    }
}
