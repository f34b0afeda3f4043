//! Every partner route passes this gate: token → partner, rate limit, scope and role.
//!
//! Order and decisions (docs/ARCHITECTURE.md, partner API):
//! 1. `Authorization: Bearer` partner token: missing → 401 `PARTNER_API_AUTHENTICATION_REQUIRED`;
//!    malformed, of another kind (a customer key, a billing token), of another environment,
//!    unknown or revoked → 401 `PARTNER_API_TOKEN_INVALID`.
//! 2. Fixed one-minute windows per token in the operational store, 60 reads (GET) and 30 writes
//!    (PUT, POST, DELETE): the next one gets 429 `PARTNER_RATE_LIMITED` with `Retry-After`. Every
//!    request with a valid token counts, whatever its outcome (replays and refusals included);
//!    requests without a valid token do not. A store outage fails closed (503).
//! 3. Scope: reads need `partner:read` or `partner:write`; writes need `partner:write` → else 403
//!    `PARTNER_API_SCOPE_REQUIRED`. Writes also need a role other than `viewer` → else 403
//!    `PARTNER_ACCESS_REQUIRED`. The role is `services::memberships::effective_role`: a dashboard
//!    token's own (its maker's team role at creation) capped by the partner's, else the
//!    partner's.

use crate::auth::{TokenKind, bearer, token_hash};
use crate::caller::Caller;
use crate::error::ApiError;
use crate::services::memberships;
use crate::state::AppState;
use axum::extract::{Request, State};
use axum::http::Method;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use entities::status::TokenStatus;
use entities::{partner_tokens, partners};
use money::RateMultiplier;
use sea_orm::{ColumnTrait, EntityTrait, QueryFilter};
use std::time::Duration;

/// Reads per token per window.
pub const READ_LIMIT: u64 = 60;
/// Writes per token per window.
pub const WRITE_LIMIT: u64 = 30;
/// The fixed window.
pub const WINDOW: Duration = Duration::from_secs(60);

/// The middleware: authorizes, then hands the request on with its [`Caller`].
pub async fn gate(State(state): State<AppState>, mut req: Request, next: Next) -> Response {
    let (headers, method) = (req.headers().clone(), req.method().clone());
    match authorize(&state, &headers, &method).await {
        Ok(caller) => {
            req.extensions_mut().insert(caller);
            next.run(req).await
        }
        Err(e) => e.into_response(),
    }
}

async fn authorize(
    state: &AppState,
    headers: &axum::http::HeaderMap,
    method: &Method,
) -> Result<Caller, ApiError> {
    let token = bearer(headers).ok_or(ApiError::AuthenticationRequired)?;
    let hash = token_hash(&state.hasher, state.env, TokenKind::Partner, token)
        .ok_or(ApiError::TokenInvalid)?;
    let row = partner_tokens::Entity::find()
        .filter(partner_tokens::Column::TokenHash.eq(hash))
        .filter(partner_tokens::Column::Status.eq(TokenStatus::Active))
        .one(&state.db)
        .await?
        .ok_or(ApiError::TokenInvalid)?;
    let partner = partners::Entity::find_by_id(row.partner_id)
        .one(&state.db)
        .await?
        .ok_or(ApiError::TokenInvalid)?;

    let write = !matches!(*method, Method::GET | Method::HEAD);
    let (kind, limit) = if write {
        ("write", WRITE_LIMIT)
    } else {
        ("read", READ_LIMIT)
    };
    let hit = state
        .stores
        .counters
        .hit(&format!("partner-token:{}:{kind}", row.id), WINDOW)
        .await?;
    if hit.count > limit {
        let secs = hit.resets_in.as_millis().div_ceil(1000);
        return Err(ApiError::RateLimited {
            retry_after_secs: u64::try_from(secs).unwrap_or(60).clamp(1, 60),
        });
    }

    let role = memberships::effective_role(&partner.role, row.role.as_deref()).to_string();
    // Last use, written at most once a minute (the row read above says whether it is due).
    let now = state.clock.now();
    let every = crate::services::partner_tokens::TOUCH_EVERY;
    if row.last_used_at.is_none_or(|t| t <= now - every)
        && let Err(e) = crate::services::partner_tokens::touch(&state.db, row.id, now).await
    {
        tracing::warn!(error = %e, "token use not recorded");
    }
    let scopes: Vec<String> = row.scopes.split_whitespace().map(str::to_string).collect();
    let has = |s: &str| scopes.iter().any(|x| x == s);
    if write {
        if !has("partner:write") {
            return Err(ApiError::ScopeRequired {
                needed: "partner:write",
            });
        }
        if role == "viewer" {
            return Err(ApiError::AccessRequired);
        }
    } else if !has("partner:read") && !has("partner:write") {
        return Err(ApiError::ScopeRequired {
            needed: "partner:read",
        });
    }
    Ok(Caller {
        partner_id: partner.id,
        partner_name: partner.name,
        token_id: row.id,
        token_preview: row.preview,
        scopes,
        role,
        min_rate: RateMultiplier::from_ppm(partner.min_rate_multiplier_ppm)
            .ok_or(ApiError::Internal)?,
    })
}
