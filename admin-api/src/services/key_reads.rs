//! A customer key's reads of the ledger behind the gateway's base URL (issue 45): the key is
//! authenticated as the gateway authenticates it, and what it reads is its own organization's.
//! `GET {compat_base}/key` (its standing: `billing::key_standing`) and
//! `GET {compat_base}/generations/{request_id}` (one settled call's cost: [`generation`]).

use super::billing::{BillingError, StandingRefused};
use crate::dto::{Generation, Usd};
use crate::state::AppState;
use chrono::{DateTime, Duration, SecondsFormat, Utc};
use credentials::Kind;
use entities::status::{KeyStatus, OrganizationStatus};
use entities::{customer_api_keys, organizations, usage_records};
use money::NanoUsd;
use sea_orm::{ColumnTrait, EntityTrait, QueryFilter};

/// How far a record's `started_at` may lie from the time in its request id: the id and the
/// start are taken at the same moment (`proxy::ctx`), so this only widens the partitions read.
const ID_SLACK: Duration = Duration::minutes(10);

/// The active key `presented` and its active organization; the gateway's refusals otherwise.
pub async fn authenticate(
    state: &AppState,
    presented: Option<&str>,
) -> Result<(customer_api_keys::Model, organizations::Model), StandingRefused> {
    let presented = presented.ok_or(StandingRefused::MissingKey)?;
    credentials::check(presented, Kind::CustomerKey, state.env)
        .map_err(|_| StandingRefused::InvalidKey)?;
    let hash = state.hasher.hash(presented);
    let now = state.clock.now();
    let key = customer_api_keys::Entity::find()
        .filter(customer_api_keys::Column::KeyHash.eq(hash))
        .one(&state.db)
        .await
        .map_err(BillingError::from)?
        .filter(|k| k.status == KeyStatus::Active && k.expires_at.is_none_or(|t| t > now))
        .ok_or(StandingRefused::InvalidKey)?;
    let org = organizations::Entity::find_by_id(key.organization_id)
        .one(&state.db)
        .await
        .map_err(BillingError::from)?
        .filter(|o| o.status == OrganizationStatus::Active)
        .ok_or(StandingRefused::InvalidKey)?;
    Ok((key, org))
}

/// Why a call's cost was not answered.
#[derive(Debug)]
pub enum GenerationRefused {
    /// The key was refused (as [`StandingRefused`] says).
    Key(StandingRefused),
    /// No settled call of the key's organization has that id: not settled yet, another
    /// organization's, or none at all (the answer does not say which).
    NotFound,
}

impl From<StandingRefused> for GenerationRefused {
    fn from(e: StandingRefused) -> Self {
        GenerationRefused::Key(e)
    }
}

/// What one settled call of the key's organization cost: read from its usage record by the
/// request id the gateway answered with (`x-request-id`), within the partitions of the id's own
/// time (a UUIDv7: its first 48 bits are the call's start in Unix milliseconds).
pub async fn generation(
    state: &AppState,
    presented: Option<&str>,
    request_id: &str,
) -> Result<Generation, GenerationRefused> {
    let (_, org) = authenticate(state, presented).await?;
    let at = request_time(request_id).ok_or(GenerationRefused::NotFound)?;
    let record = usage_records::Entity::find()
        .filter(usage_records::Column::RequestId.eq(request_id))
        .filter(usage_records::Column::OrganizationId.eq(org.id))
        .filter(usage_records::Column::StartedAt.between(at - ID_SLACK, at + ID_SLACK))
        .one(&state.db)
        .await
        .map_err(|e| GenerationRefused::Key(BillingError::from(e).into()))?
        .ok_or(GenerationRefused::NotFound)?;
    Ok(view(&record))
}

/// The start time a gateway request id carries: 32 lowercase hex digits (a UUIDv7 without its
/// dashes, as the gateway writes it) whose first 12 are Unix milliseconds. `None`: not such an id.
pub fn request_time(request_id: &str) -> Option<DateTime<Utc>> {
    let hex = |b: u8| matches!(b, b'0'..=b'9' | b'a'..=b'f');
    if request_id.len() != 32 || !request_id.bytes().all(hex) {
        return None;
    }
    let ms = i64::from_str_radix(&request_id[..12], 16).ok()?;
    DateTime::from_timestamp_millis(ms)
}

/// The record as the caller sees it: the served model, the measurement, the counts that apply
/// to its route, and what the organization was charged.
fn view(r: &usage_records::Model) -> Generation {
    let rfc3339 = |t: &DateTime<Utc>| t.to_rfc3339_opts(SecondsFormat::Millis, true);
    let route = r.route.as_str();
    let applies = |yes: bool, n: i64| yes.then_some(n);
    Generation {
        id: r.request_id.clone(),
        model: r.model_served.clone(),
        status: r.status,
        measurement: r.measurement.clone(),
        input_tokens: r.input_tokens,
        output_tokens: r.output_tokens,
        cache_read_tokens: r.cached_tokens,
        cache_write_tokens: r.cache_write_tokens,
        images: applies(route.starts_with("image_") || r.images > 0, r.images),
        video_seconds: applies(
            route.starts_with("video_") || r.video_seconds > 0,
            r.video_seconds,
        ),
        audio_seconds: applies(
            route == "audio_transcriptions" || r.audio_seconds > 0,
            r.audio_seconds,
        ),
        cost_usd: Usd(NanoUsd::from_nanos(r.charged_nanos)),
        created_at: rfc3339(&r.started_at),
        settled_at: rfc3339(&r.settled_at),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_id_carries_its_time() {
        let at = request_time("01a225d33e0b75f287d89dc673838d57").unwrap();
        assert_eq!(at.timestamp_millis(), 0x01a2_25d3_3e0b);
        for not_an_id in [
            "",
            "01a225d33e0b75f287d89dc673838d5",
            "01a225d33e0b75f287d89dc673838d577",
            "01A225D33E0B75F287D89DC673838D57",
            "01a225d3-3e0b-75f2-87d8-9dc673838d57",
            "zza225d33e0b75f287d89dc673838d57",
        ] {
            assert_eq!(request_time(not_an_id), None, "{not_an_id}");
        }
    }
}
