//! The runner's signature on a batch line (issue 46): admin-api sends each line of a batch to a
//! gateway as the key that created the batch, which it knows only by its keyed hash. The header
//! `x-tollgate-batch: {batch id}:{line}:{request id}:{key hash}:{unix ms}:{signature}` says so
//! (the request id is the line's own, fixed before it is first sent); the signature is an
//! HMAC-SHA256 of the first five fields under a secret derived from the key pepper, which
//! both processes have. A gateway serves a line as that key only when the signature holds and
//! the time is within [`MAX_AGE_MS`] of its own clock.

use crate::KeyHasher;

/// The header that carries a signed batch line.
pub const HEADER: &str = "x-tollgate-batch";
/// How far a signed time may be from the gateway's clock (either way).
pub const MAX_AGE_MS: u64 = 5 * 60 * 1000;

/// A verified batch line: which batch and line it is, and whose key pays for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchLine {
    pub batch_id: String,
    pub line: u32,
    /// The line's request id: 32 lowercase hex digits (a UUID's simple form).
    pub request_id: String,
    pub key_hash: String,
}

/// The signing key: a secret derived from the pepper (never the pepper itself, never a key's
/// hash: the derivation's input is no credential).
fn signer(hasher: &KeyHasher) -> KeyHasher {
    KeyHasher::new(hasher.hash("\0tollgate batch line signer v1").as_bytes())
}

/// The header value for `line` at `now_ms`.
pub fn sign(hasher: &KeyHasher, line: &BatchLine, now_ms: u64) -> String {
    let fields = format!(
        "{}:{}:{}:{}:{now_ms}",
        line.batch_id, line.line, line.request_id, line.key_hash
    );
    let signature = signer(hasher).hash(&fields);
    format!("{fields}:{signature}")
}

/// The line a header value signs, when its signature holds and its time is within
/// [`MAX_AGE_MS`] of `now_ms`; `None` otherwise (a forged, altered or stale header).
pub fn verify(hasher: &KeyHasher, value: &str, now_ms: u64) -> Option<BatchLine> {
    let (fields, signature) = value.rsplit_once(':')?;
    let mut parts = fields.split(':');
    let batch_id = parts.next()?;
    let (line, request_id, key_hash, at) =
        (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    let hex = |v: &str, n: usize| {
        v.len() == n && v.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    };
    if parts.next().is_some() || batch_id.is_empty() || !hex(key_hash, 64) || !hex(request_id, 32) {
        return None;
    }
    let expected = signer(hasher).hash(fields);
    if !constant_time_eq(expected.as_bytes(), signature.as_bytes()) {
        return None;
    }
    let at: u64 = at.parse().ok()?;
    if at.abs_diff(now_ms) > MAX_AGE_MS {
        return None;
    }
    Some(BatchLine {
        batch_id: batch_id.to_string(),
        line: line.parse().ok()?,
        request_id: request_id.to_string(),
        key_hash: key_hash.to_string(),
    })
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]
    use super::*;

    fn line() -> BatchLine {
        BatchLine {
            batch_id: "batch_0193".into(),
            line: 7,
            request_id: "0".repeat(32),
            key_hash: "a".repeat(64),
        }
    }

    /// A signed line verifies; any change, another pepper or a stale time does not.
    #[test]
    fn verifies_only_what_was_signed() {
        let hasher = KeyHasher::new(b"pepper");
        let now = 1_800_000_000_000;
        let value = sign(&hasher, &line(), now);
        assert_eq!(verify(&hasher, &value, now + 1_000), Some(line()));
        assert_eq!(verify(&hasher, &value, now - MAX_AGE_MS), Some(line()));
        assert_eq!(verify(&hasher, &value, now + MAX_AGE_MS + 1), None);
        assert_eq!(verify(&KeyHasher::new(b"other"), &value, now), None);
        let altered = value.replacen(":7:", ":8:", 1);
        assert_eq!(verify(&hasher, &altered, now), None);
        let other_key = value.replacen(&"a".repeat(64), &"b".repeat(64), 1);
        assert_eq!(verify(&hasher, &other_key, now), None);
        assert_eq!(verify(&hasher, "", now), None);
        assert_eq!(verify(&hasher, "a:b:c:d:e:f", now), None);
        let other_id = value.replacen(&"0".repeat(32), &"1".repeat(32), 1);
        assert_eq!(verify(&hasher, &other_id, now), None);
    }
}
