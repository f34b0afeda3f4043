//! The usage stream: one event per metered gateway request, appended by the proxy when the request
//! ends and drained by the settler into the ledger of record.
//!
//! Delivery is at least once: an entry stays in the stream until it is acknowledged, and entries
//! claimed by a consumer that died are handed to another after `min_idle`. Consumers must therefore
//! be idempotent on [`UsageEvent::request_id`].

use crate::error::StoreResult;
use async_trait::async_trait;
use money::{NanoUsd, RateMultiplier};
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// How the token counts of an event were obtained.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Measurement {
    /// Reported by the supplier (JSON body or final SSE event).
    Exact,
    /// The supplier's usage never arrived (stream cut, malformed body): a documented estimate.
    Estimated,
}

/// One gateway request's usage. Token counts are what the supplier served, not what was asked.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UsageEvent {
    pub request_id: String,
    pub key_id: i64,
    pub org_id: i64,
    pub group_id: i64,
    /// Gateway route, e.g. `chat_completions`.
    pub route: String,
    pub model_requested: String,
    pub model_served: String,
    pub account_id: String,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cached_tokens: u64,
    /// Input tokens written to the supplier's prompt cache (part of `input_tokens`, priced at
    /// the model's cache-write price); 0 in events of gateways before it was metered.
    #[serde(default)]
    pub cache_write_tokens: u64,
    /// The part of `cache_write_tokens` written for an hour (priced apart; 0 in events of
    /// gateways before it was metered).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cache_write_1h_tokens: u64,
    pub measurement: Measurement,
    /// HTTP status the client received (0 when the connection ended before a status was sent).
    pub status: u16,
    pub stream: bool,
    /// Milliseconds since the Unix epoch when the request arrived.
    pub started_at_ms: u64,
    pub latency_ms: u64,
    /// Time until the first response body byte reached the client, when one did.
    pub ttfb_ms: Option<u64>,
    /// Upstream attempts made (more than one after a failover).
    pub attempts: u32,
    /// Price of the usage (official price × the key's retail multiplier), nano-USD.
    #[serde(default)]
    pub cost_nanos: NanoUsd,
    /// What the wallet was actually charged at settlement (≤ cost when the wallet ran short).
    #[serde(default)]
    pub charged_nanos: NanoUsd,
    /// Cost that could not be charged (the supplier exceeded the hold and the wallet ran out).
    #[serde(default)]
    pub excess_nanos: NanoUsd,
    /// The hold this request settled.
    #[serde(default)]
    pub hold_nanos: NanoUsd,
    /// Attribution sent by the client (`x-tollgate-project`), if any.
    #[serde(default)]
    pub project: Option<String>,
    /// Attribution sent by the client (`x-tollgate-workflow`), if any.
    #[serde(default)]
    pub workflow: Option<String>,
    /// Seconds of audio served (audio transcriptions, priced per minute; 0 for other calls).
    #[serde(default)]
    pub audio_seconds: u64,
    /// Images served (image generations and edits, priced per image; 0 for other calls).
    #[serde(default)]
    pub images: u64,
    /// Seconds of video charged (video tasks, priced per second; 0 for other calls).
    #[serde(default)]
    pub video_seconds: u64,
    /// The retail multiplier the call was priced at (absent in events of older gateways).
    #[serde(default)]
    pub retail_rate: Option<RateMultiplier>,
    /// The group's wholesale multiplier when the call was priced: what the partner owes is
    /// priced from these two, never from rates changed since.
    #[serde(default)]
    pub wholesale_rate: Option<RateMultiplier>,
    /// Appended again by its gateway after the store lost its data (see the proxy's `resend`):
    /// booked once like any event, but never confirmed to a wallet mirror if already booked.
    #[serde(default)]
    pub resent: bool,
    /// The batch line this call ran (issue 46); `None` for every other call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch: Option<BatchRef>,
    /// What the suppliers may bill the operator for the call (issue 47): empty in events of
    /// gateways before it was recorded (unknown, never zero).
    #[serde(default, skip_serializing_if = "Supplier::is_empty")]
    pub supplier: Supplier,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// The supplier's side of a call: its attempts and what the one that answered costs at the
/// supplier's prices (docs/ARCHITECTURE.md, "Supplier cost").
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Supplier {
    /// The last attempt's cost: the event's usage at the served model's supplier prices × the
    /// account's `supplier_price_multiplier`; `None` when a price it needs is unknown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_nanos: Option<NanoUsd>,
    /// The attempts before the last one (a failover), in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub earlier: Vec<EarlierAttempt>,
}

impl Supplier {
    pub fn is_empty(&self) -> bool {
        self.cost_nanos.is_none() && self.earlier.is_empty()
    }
}

/// An attempt the gateway moved on from: refused or unreachable (the supplier served nothing it
/// bills), or abandoned after its answer began to arrive (`served`: what it may bill).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EarlierAttempt {
    pub account_id: String,
    pub outcome: AttemptOutcome,
    /// The supplier's status (0: none, the connection failed).
    pub status: u16,
    /// An abandoned attempt: what its answer served before it broke.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub served: Option<Served>,
}

/// What an abandoned attempt served, measured as a call's usage is (reported, or estimated
/// under the same bounds), and its cost at the supplier's prices (`None`: a price it needs is
/// unknown).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Served {
    #[serde(default)]
    pub input_tokens: u64,
    #[serde(default)]
    pub output_tokens: u64,
    #[serde(default)]
    pub cached_tokens: u64,
    #[serde(default)]
    pub cache_write_tokens: u64,
    #[serde(default)]
    pub cache_write_1h_tokens: u64,
    #[serde(default)]
    pub images: u64,
    pub measurement: Measurement,
    #[serde(default)]
    pub cost_nanos: Option<NanoUsd>,
}

/// Why an attempt ended without the client's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AttemptOutcome {
    /// The supplier answered an error status (a rate limit, a server error): nothing billed.
    Refused,
    /// No connection: nothing reached the supplier.
    Unreachable,
    /// The answer began (a success status, maybe some of its body) and broke before anything
    /// reached the client: the gateway moved on, and the supplier may bill what it served.
    Abandoned,
}

impl AttemptOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            AttemptOutcome::Refused => "refused",
            AttemptOutcome::Unreachable => "unreachable",
            AttemptOutcome::Abandoned => "abandoned",
        }
    }
}

/// A batch line: its batch's public id and its line number (from 0) in the input file.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct BatchRef {
    pub id: String,
    pub line: u32,
}

/// How long stream `i`'s pending entries must have been idle to be claimed: not at all when it
/// was just `taken` (its former reader is gone), else `min_idle`.
pub(crate) fn idle_of(taken: &[usize], i: usize, min_idle: Duration) -> Duration {
    if taken.contains(&i) {
        Duration::ZERO
    } else {
        min_idle
    }
}

/// Compares which server keeps each usage stream (`now`, from [`UsageStream::homes`]) with
/// `last` (updated): the streams whose server changed. A server that did not answer (`None`)
/// keeps its last known identity; the first answer (or a new layout) changes nothing.
pub fn moved_homes(last: &mut Vec<Option<String>>, now: Vec<Option<String>>) -> Vec<usize> {
    if last.len() != now.len() {
        *last = now;
        return Vec::new();
    }
    let mut moved = Vec::new();
    for (i, (was, is)) in last.iter_mut().zip(now).enumerate() {
        let Some(is) = is else { continue };
        if was.as_ref().is_some_and(|was| *was != is) {
            moved.push(i);
        }
        *was = Some(is);
    }
    moved
}

/// A claimed stream entry: acknowledge `id` once the event is durably recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamEntry {
    pub id: String,
    pub event: UsageEvent,
}

/// A durable, at-least-once stream of usage events.
#[async_trait]
pub trait UsageStream: Send + Sync {
    /// Appends one event. When this returns `Ok`, the event survives the caller's death.
    async fn append(&self, event: &UsageEvent) -> StoreResult<()>;

    /// Claims up to `max` entries for `consumer`: first entries another consumer claimed more than
    /// `min_idle` ago without acknowledging, then entries never delivered.
    async fn claim(
        &self,
        consumer: &str,
        max: usize,
        min_idle: Duration,
    ) -> StoreResult<Vec<StreamEntry>>;

    /// Claims as [`UsageStream::claim`] does, from the streams `streams` only (indices below
    /// `crate::StreamLeases::stream_count`: those a settler leases). Of the streams in `taken`
    /// (just leased: their former reader is gone) every pending entry is claimed at once,
    /// whoever it was delivered to. One stream (this default): [`UsageStream::claim`].
    async fn claim_from(
        &self,
        consumer: &str,
        streams: &[usize],
        taken: &[usize],
        max: usize,
        min_idle: Duration,
    ) -> StoreResult<Vec<StreamEntry>> {
        if !streams.contains(&0) {
            return Ok(Vec::new());
        }
        self.claim(consumer, max, idle_of(taken, 0, min_idle)).await
    }

    /// Acknowledges entries: they are removed and never delivered again.
    async fn ack(&self, ids: &[String]) -> StoreResult<()>;

    /// Entries appended and not yet acknowledged.
    async fn backlog(&self) -> StoreResult<u64>;

    /// The events of stream `home` (an index of [`UsageStream::homes`]) delivered to a settler and
    /// not yet acknowledged, at most 10,000: the only ones a settler may have booked without
    /// telling the wallet mirror yet (it acknowledges after it told it). A wallet reload reads
    /// them (admin-api `services::wallets`). None for a store without consumer groups.
    async fn pending(&self, home: usize) -> StoreResult<Vec<UsageEvent>> {
        let _ = home;
        Ok(Vec::new())
    }

    /// Which server process keeps each usage stream with its organizations' wallets (its Redis
    /// `run_id`), one entry per stream in [`UsageStream::home_of`]'s order; `None` for a server that
    /// did not answer. A change means that writes the former process acknowledged may be lost: a
    /// replica promoted by a failover copies its master asynchronously, a restarted server keeps
    /// only what it persisted. Empty for a store that can lose nothing short of the whole process
    /// (memory).
    async fn homes(&self) -> StoreResult<Vec<Option<String>>> {
        Ok(Vec::new())
    }

    /// The index in [`UsageStream::homes`] of organization `org`'s stream and wallet.
    fn home_of(&self, org: i64) -> usize {
        let _ = org;
        0
    }
}
