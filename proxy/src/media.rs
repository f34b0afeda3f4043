//! Hosted media: images the gateway serves itself when a client asked for `response_format=url`
//! and the supplier returned only base64.
//!
//! The image is kept in the operational store's `Media` (shared by every proxy of a deployment)
//! for [`IMAGE_URL_TTL`] and answered at `{public_base_url}/media/{id}?expires=UNIX&signature=HEX`,
//! where the signature is an HMAC-SHA256 (keyed from `security.key_pepper`) of the id and the
//! expiry. The URL needs no credentials: whoever holds it may fetch the image until it expires
//! (SPEC promises no lifetime; ours is one hour). A bad signature or a past expiry is 404
//! `media_not_found`, like an unknown id: nothing tells a guesser which part was wrong.
//!
//! The response body filter must not do I/O: it queues the image ([`Pending`]) and the gateway's
//! background work writes it to the store ([`Pending::run`]); a fetch that arrives before the
//! write landed waits for it briefly ([`FETCH_WAIT`]). At most [`PENDING_CAP`] bytes wait at once;
//! beyond that an image is dropped (logged), and its URL answers 404.

use crate::classify::{MEDIA_PREFIX as PREFIX, media_id as id_of};
use crate::errors::GatewayError;
use crate::wire::images::Host;
use hmac::{Hmac, Mac};
use opstate::{Media, MediaFile};
use sha2::Sha256;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// How long a hosted image stays fetchable.
pub const IMAGE_URL_TTL: Duration = Duration::from_secs(3600);
/// How long a fetch waits for an image whose store write has not landed yet.
pub const FETCH_WAIT: Duration = Duration::from_secs(3);
/// Most image bytes waiting for their store write at once.
pub const PENDING_CAP: usize = 256 * 1024 * 1024;

/// Signs and checks media URLs.
#[derive(Clone)]
pub struct Signer {
    mac: Hmac<Sha256>,
}

impl Signer {
    /// A signer keyed from the deployment's pepper (domain-separated from key hashing).
    pub fn new(pepper: &[u8]) -> Signer {
        let mut mac = Hmac::<Sha256>::new_from_slice(b"tollgate media url v1")
            .unwrap_or_else(|_| unreachable_key());
        mac.update(pepper);
        let key = mac.finalize().into_bytes();
        Signer {
            mac: Hmac::<Sha256>::new_from_slice(&key).unwrap_or_else(|_| unreachable_key()),
        }
    }

    pub(crate) fn signature(&self, id: &str, expires: u64) -> String {
        let mut mac = self.mac.clone();
        mac.update(id.as_bytes());
        mac.update(b":");
        mac.update(expires.to_string().as_bytes());
        hex::encode(mac.finalize().into_bytes())
    }

    /// Whether `signature` is this deployment's for `id` until `expires`, and `expires` is still
    /// ahead of `now` (Unix seconds).
    pub fn verify(&self, id: &str, expires: u64, signature: &str, now: u64) -> bool {
        let Ok(given) = hex::decode(signature) else {
            return false;
        };
        let mut mac = self.mac.clone();
        mac.update(id.as_bytes());
        mac.update(b":");
        mac.update(expires.to_string().as_bytes());
        now < expires && mac.verify_slice(&given).is_ok()
    }
}

#[allow(clippy::panic, reason = "HMAC takes keys of any length")]
fn unreachable_key() -> Hmac<Sha256> {
    panic!("HMAC-SHA256 accepts keys of any length")
}

/// Seconds since the Unix epoch (the clock of signed URLs).
pub(crate) fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Images waiting for their store write, queued by body filters.
#[derive(Default)]
pub struct Pending {
    items: std::sync::Mutex<(std::collections::VecDeque<(String, MediaFile)>, usize)>,
    ready: tokio::sync::Notify,
}

impl Pending {
    /// Queues `file` for the store under `id` (never waits).
    pub fn push(&self, id: String, file: MediaFile) {
        let Ok(mut items) = self.items.lock() else {
            return;
        };
        if items.1 + file.bytes.len() > PENDING_CAP {
            tracing::error!(media = %id, "too many images waiting for the store; this one is dropped");
            return;
        }
        items.1 += file.bytes.len();
        items.0.push_back((id, file));
        drop(items);
        self.ready.notify_one();
    }

    fn pop(&self) -> Option<(String, MediaFile)> {
        let mut items = self.items.lock().ok()?;
        let item = items.0.pop_front()?;
        items.1 = items.1.saturating_sub(item.1.bytes.len());
        Some(item)
    }

    /// Writes queued images to the store (`media()`, the gateway's current one) until `shutdown`
    /// turns true, then writes what is left.
    pub async fn run(
        &self,
        media: impl Fn() -> Arc<dyn Media>,
        mut shutdown: tokio::sync::watch::Receiver<bool>,
    ) {
        loop {
            while let Some((id, file)) = self.pop() {
                if let Err(e) = media().put(&id, &file, IMAGE_URL_TTL).await {
                    tracing::error!(media = %id, error = %e, "hosting an image failed; its URL will not resolve");
                }
            }
            if *shutdown.borrow() {
                return;
            }
            tokio::select! {
                () = self.ready.notified() => {}
                _ = shutdown.changed() => {}
            }
        }
    }
}

/// Hosts images for one answer: queues them for the store and signs their URLs.
pub struct Hosting {
    pub pending: Arc<Pending>,
    pub signer: Signer,
    /// `server.public_base_url`, ending in `/`.
    pub base: String,
}

impl Host for Hosting {
    fn host(&self, mime: &str, bytes: Vec<u8>) -> String {
        let id = uuid::Uuid::new_v4().simple().to_string();
        let expires = unix_now() + IMAGE_URL_TTL.as_secs();
        let signature = self.signer.signature(&id, expires);
        let file = MediaFile {
            content_type: mime.to_string(),
            bytes: bytes.into(),
        };
        self.pending.push(id.clone(), file);
        let base = self.base.trim_end_matches('/');
        format!("{base}{PREFIX}{id}?expires={expires}&signature={signature}")
    }
}

/// The file a signed media URL names; [`GatewayError::MediaNotFound`] for anything else.
pub async fn fetch(
    media: &dyn Media,
    signer: &Signer,
    header: &pingora::http::RequestHeader,
) -> Result<MediaFile, GatewayError> {
    let id = id_of(header.uri.path()).ok_or(GatewayError::MediaNotFound)?;
    let query = header.uri.query().unwrap_or_default();
    let param = |name: &str| {
        query
            .split('&')
            .filter_map(|p| p.split_once('='))
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v)
    };
    let expires = param("expires").and_then(|e| e.parse::<u64>().ok());
    let signature = param("signature").unwrap_or_default();
    let valid = expires.is_some_and(|e| signer.verify(id, e, signature, unix_now()));
    if !valid {
        return Err(GatewayError::MediaNotFound);
    }
    let waited = std::time::Instant::now();
    loop {
        match media.get(id).await {
            Ok(Some(file)) => return Ok(file),
            Ok(None) if waited.elapsed() < FETCH_WAIT => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Ok(None) => return Err(GatewayError::MediaNotFound),
            Err(e) => {
                tracing::error!(error = %e, "media store unavailable");
                return Err(GatewayError::StoreUnavailable);
            }
        }
    }
}

/// The base of the URLs of hosted media: `server.public_base_url` when configured, else the
/// request's own `Host` (what the client reached the gateway as).
pub(crate) fn base(server: &settings::Server, host: Option<&str>) -> String {
    match host {
        Some(host) if !server.public_base_url_configured => format!("http://{host}/"),
        _ => server.public_base_url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signatures() {
        let s = Signer::new(b"0123456789abcdef");
        let id = "0123456789abcdef0123456789abcdef";
        let sig = s.signature(id, 1_000);
        assert!(s.verify(id, 1_000, &sig, 999));
        assert!(!s.verify(id, 1_000, &sig, 1_000), "expired");
        assert!(!s.verify(id, 1_001, &sig, 999), "another expiry");
        assert!(!s.verify("1123456789abcdef0123456789abcdef", 1_000, &sig, 999));
        assert!(!s.verify(id, 1_000, "zz", 999));
        let other = Signer::new(b"another pepper!!");
        assert!(!other.verify(id, 1_000, &sig, 999), "another deployment");
        assert_eq!(id_of("/media/0123456789abcdef0123456789abcdef"), Some(id));
        assert_eq!(id_of("/media/../x"), None);
        assert_eq!(id_of("/media/"), None);
    }
}
