//! Phase 1, authentication: who is calling.
//!
//! Reads the customer key from `Authorization: Bearer`, `x-api-key` or `x-alt-api-key` (and on the
//! Gemini-style native surface also `x-goog-api-key` and the `key` query parameter, which the
//! `google-genai` SDK and Google's REST clients use), checks its
//! format, kind and environment offline (see the `credentials` crate), and looks up its keyed hash
//! in the key directory. Never logs or stores the presented value. Fails closed: a store error is
//! an error, never an anonymous pass.

use crate::classify::{Route, query_key};
use crate::errors::{Family, GatewayError, Surface};
use credentials::{Env, KeyHasher, Kind};
use opstate::{KeyDirectory, KeyRecord};
use pingora::http::RequestHeader;
use tracing::debug;

use crate::shared::Shared;

/// The headers a customer key may arrive in.
const KEY_HEADERS: [&str; 2] = ["x-api-key", "x-alt-api-key"];
/// The native surface's header.
const GOOGLE_KEY_HEADER: &str = "x-goog-api-key";

/// The credential presented on the OpenAI-style surface (see [`presented_key_on`]).
/// The caller of `header` on `surface`, by its key ([`authenticate`]), and its key's hash.
/// `admitted`: the call goes through admission, which checks the key against the directory again
/// in its own store step, so this proxy's key cache may answer; other calls (model lists, video
/// polls and downloads) read the directory itself, so a key disabled on any proxy is refused at
/// once everywhere.
pub(crate) async fn caller(
    shared: &Shared,
    header: &RequestHeader,
    surface: Surface,
    admitted: bool,
) -> Result<(KeyRecord, String), GatewayError> {
    let keys = shared.stores().keys.as_ref();
    let (env, hasher) = (shared.env, &shared.hasher);
    match &shared.key_cache {
        Some(cache) if admitted => {
            let cached = cache.through(keys);
            authenticate(header, surface, env, hasher, &cached).await
        }
        _ => authenticate(header, surface, env, hasher, keys).await,
    }
}

/// Listens to the key directory's changes for the key cache until `shutdown` (nothing to do
/// without a cache; see `opstate::RedisStore::watch_keys`).
pub(crate) async fn watch_keys(shared: &Shared, mut shutdown: tokio::sync::watch::Receiver<bool>) {
    let (Some(cache), Some(redis)) = (&shared.key_cache, &shared.settings.redis) else {
        return;
    };
    tokio::select! {
        _ = opstate::RedisStore::watch_keys(redis.urls(), &redis.key_prefix, cache) => {}
        _ = shutdown.wait_for(|stop| *stop) => {}
    }
}

#[cfg(test)]
fn presented_key(req: &RequestHeader) -> Result<Option<&str>, GatewayError> {
    presented_key_on(req, Surface::Client(Family::OpenAi))
}

/// The credential presented on `surface`, if any. Several headers carrying *different* values are
/// refused: the gateway never picks one silently.
pub fn presented_key_on(
    req: &RequestHeader,
    surface: Surface,
) -> Result<Option<&str>, GatewayError> {
    let mut found: Option<&str> = None;
    let bearer = req
        .headers
        .get_all(http::header::AUTHORIZATION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .filter_map(|v| {
            let (scheme, rest) = v.trim().split_once(' ')?;
            scheme.eq_ignore_ascii_case("bearer").then(|| rest.trim())
        });
    let native = surface == Surface::Client(Family::Gemini);
    let google = native
        .then(|| req.headers.get_all(GOOGLE_KEY_HEADER).iter())
        .into_iter()
        .flatten();
    let others = KEY_HEADERS
        .iter()
        .flat_map(|h| req.headers.get_all(*h).iter())
        .chain(google)
        .filter_map(|v| v.to_str().ok())
        .map(str::trim)
        .chain(native.then(|| query_key(req)).flatten());
    for value in bearer.chain(others).filter(|v| !v.is_empty()) {
        match found {
            None => found = Some(value),
            Some(existing) if existing == value => {}
            Some(_) => return Err(GatewayError::InvalidKey),
        }
    }
    Ok(found)
}

/// Authenticates a request: the key record of its customer key, and the key's keyed hash (what
/// admission checks against the directory again, see `opstate::Limits::key`).
pub async fn authenticate(
    req: &RequestHeader,
    surface: Surface,
    env: Env,
    hasher: &KeyHasher,
    directory: &dyn KeyDirectory,
) -> Result<(KeyRecord, String), GatewayError> {
    let presented = presented_key_on(req, surface)?.ok_or(GatewayError::MissingKey)?;
    if let Err(reason) = credentials::check(presented, Kind::CustomerKey, env) {
        debug!(%reason, "refused credential before lookup");
        return Err(GatewayError::InvalidKey);
    }
    let hash = hasher.hash(presented);
    let record = record_of(&hash, directory).await?;
    Ok((record, hash))
}

/// The live record of the key whose keyed hash is `hash`: unknown, revoked or expired is 401; a
/// directory that lost its contents (not rebuilt yet) is 503, never 401. Also how a signed batch
/// line's key is found (`crate::batch`).
pub(crate) async fn record_of(
    hash: &str,
    directory: &dyn KeyDirectory,
) -> Result<KeyRecord, GatewayError> {
    let unavailable = |what: &str, e: opstate::StoreError| {
        tracing::error!(error = %e, "key directory {what} failed");
        GatewayError::StoreUnavailable
    };
    let record = match directory.lookup(hash).await {
        Ok(Some(record)) => record,
        // A miss only means "invalid" when the directory is complete; a store that lost its
        // contents (Redis flushed, restarted empty) answers 503 until admin-api rebuilt it.
        Ok(None) => match directory.is_loaded().await {
            // The rebuild writes every key before its marker, so a look-up made after the
            // marker was seen is the answer: the first one may have run before the rebuild
            // wrote this key (a 401 for a valid key while the store recovers).
            Ok(true) => directory
                .lookup(hash)
                .await
                .map_err(|e| unavailable("lookup", e))?
                .ok_or(GatewayError::InvalidKey)?,
            Ok(false) => return Err(GatewayError::StoreUnavailable),
            Err(e) => return Err(unavailable("check", e)),
        },
        Err(e) => return Err(unavailable("lookup", e)),
    };
    // An expired key is refused like an unknown one (its record stays in the directory: the
    // expiry is part of the record, so every proxy and every cached copy agree).
    if record.expired(i64::try_from(crate::media::unix_now()).unwrap_or(i64::MAX)) {
        debug!(key_id = record.key_id, "refused expired key");
        return Err(GatewayError::InvalidKey);
    }
    Ok(record)
}

/// Whether `caller`'s key may use `route`'s surface (403 `permission_denied` when not): the key
/// record's `openai` flag for `/compat/v1`, `anthropic` for the Messages surface, `gemini` for the
/// native surface.
pub fn permit(caller: &KeyRecord, route: Route) -> Result<(), GatewayError> {
    let allowed = match route.surface() {
        Surface::Client(Family::OpenAi) => caller.permissions.openai,
        Surface::Client(Family::Anthropic) => caller.permissions.anthropic,
        Surface::Client(Family::Gemini) => caller.permissions.gemini,
        // Admin routes are authenticated by admin-api, never with a customer key.
        Surface::Admin => false,
    };
    allowed.then_some(()).ok_or(GatewayError::PermissionDenied)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(headers: &[(&str, &str)]) -> RequestHeader {
        let mut r = RequestHeader::build("POST", b"/compat/v1/chat/completions", None).unwrap();
        for (k, v) in headers {
            r.append_header(k.to_string(), *v).unwrap();
        }
        r
    }

    #[test]
    fn reads_each_header_form() {
        assert_eq!(
            presented_key(&req(&[("authorization", "Bearer abc")])),
            Ok(Some("abc"))
        );
        assert_eq!(
            presented_key(&req(&[("authorization", "bearer  abc ")])),
            Ok(Some("abc"))
        );
        assert_eq!(
            presented_key(&req(&[("x-api-key", "abc")])),
            Ok(Some("abc"))
        );
        assert_eq!(
            presented_key(&req(&[("x-alt-api-key", "abc")])),
            Ok(Some("abc"))
        );
        assert_eq!(
            presented_key(&req(&[("authorization", "Basic abc")])),
            Ok(None)
        );
        assert_eq!(presented_key(&req(&[])), Ok(None));
        assert_eq!(
            presented_key(&req(&[
                ("authorization", "Bearer abc"),
                ("x-api-key", "abc")
            ])),
            Ok(Some("abc"))
        );
        assert_eq!(
            presented_key(&req(&[
                ("authorization", "Bearer abc"),
                ("x-api-key", "def")
            ])),
            Err(GatewayError::InvalidKey)
        );
    }

    #[test]
    fn native_surface_also_reads_google_forms() {
        let goog = req(&[("x-goog-api-key", "abc")]);
        assert_eq!(
            presented_key_on(&goog, Surface::Client(Family::Gemini)),
            Ok(Some("abc"))
        );
        assert_eq!(
            presented_key_on(&goog, Surface::Client(Family::OpenAi)),
            Ok(None)
        );
        let q = RequestHeader::build(
            "POST",
            b"/v1beta/models/g:generateContent?alt=sse&key=abc",
            None,
        )
        .unwrap();
        assert_eq!(
            presented_key_on(&q, Surface::Client(Family::Gemini)),
            Ok(Some("abc"))
        );
        assert_eq!(
            presented_key_on(&q, Surface::Client(Family::Anthropic)),
            Ok(None)
        );
        let mut both =
            RequestHeader::build("POST", b"/v1beta/models/g:countTokens?key=abc", None).unwrap();
        both.append_header("x-goog-api-key", "def").unwrap();
        assert_eq!(
            presented_key_on(&both, Surface::Client(Family::Gemini)),
            Err(GatewayError::InvalidKey)
        );
    }
}
