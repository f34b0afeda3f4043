//! A delivery's signature (DESIGN §6e): `Tollgate-Signature: t=<unix seconds>,v1=<hex>` where the
//! hex is HMAC-SHA256, keyed by the endpoint's signing secret, of `"<t>.<body>"`. A receiver
//! recomputes it over the raw body, compares in constant time, and refuses a `t` further than its
//! tolerance from its own clock ([`TOLERANCE_SECS`] is the one the README's verifiers use), which
//! stops a captured delivery from being replayed later.

use hmac::{Hmac, Mac};
use sha2::Sha256;
use subtle::ConstantTimeEq;

/// The header's name.
pub const HEADER: &str = "tollgate-signature";
/// How far a receiver should accept `t` from its clock, in seconds.
pub const TOLERANCE_SECS: i64 = 300;

/// HMAC-SHA256 of `"<t>.<body>"` under `secret` (HMAC takes a key of any length, so this never
/// fails; an impossible failure gives no bytes, which no signature matches).
fn digest(secret: &str, t: i64, body: &[u8]) -> Vec<u8> {
    let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(secret.as_bytes()) else {
        return Vec::new();
    };
    mac.update(t.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    mac.finalize().into_bytes().to_vec()
}

/// The header value for `body` sent at `t`.
pub fn sign(secret: &str, t: i64, body: &[u8]) -> String {
    format!("t={t},v1={}", hex::encode(digest(secret, t, body)))
}

/// Whether `header` signs `body` with `secret` at a time within [`TOLERANCE_SECS`] of `now`
/// (several `v1` values are allowed, as during a secret's rotation).
pub fn verify(secret: &str, header: &str, body: &[u8], now: i64) -> bool {
    let mut t = None;
    let mut sigs = Vec::new();
    for part in header.split(',') {
        match part.trim().split_once('=') {
            Some(("t", v)) => t = v.parse::<i64>().ok(),
            Some(("v1", v)) => sigs.extend(hex::decode(v).ok()),
            _ => {}
        }
    }
    let Some(t) = t else { return false };
    if (now - t).abs() > TOLERANCE_SECS {
        return false;
    }
    let expected = digest(secret, t, body);
    !expected.is_empty()
        && sigs
            .iter()
            .any(|s| s.len() == expected.len() && bool::from(s.as_slice().ct_eq(&expected)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signature_verifies_and_a_changed_byte_or_an_old_time_does_not() {
        let body = br#"{"id":"evt_1","type":"customer.activated"}"#;
        let header = sign("whsec_test", 1_764_400_000, body);
        assert!(header.starts_with("t=1764400000,v1="));
        assert_eq!(header.len(), "t=1764400000,v1=".len() + 64);
        assert!(verify("whsec_test", &header, body, 1_764_400_000));
        assert!(verify("whsec_test", &header, body, 1_764_400_300));
        assert!(
            !verify("whsec_test", &header, body, 1_764_400_301),
            "too old"
        );
        assert!(!verify("whsec_other", &header, body, 1_764_400_000));
        let mut changed = body.to_vec();
        changed[3] ^= 1;
        assert!(!verify("whsec_test", &header, &changed, 1_764_400_000));
        assert!(
            !verify("whsec_test", "v1=00", body, 1_764_400_000),
            "no time"
        );
        assert!(
            !verify("whsec_test", "t=1764400000", body, 1_764_400_000),
            "no signature"
        );
    }

    /// The scheme's published example: HMAC-SHA256("key", "1.{}") — checked against Python's
    /// `hmac.new(b"key", b"1.{}", hashlib.sha256).hexdigest()`.
    #[test]
    fn the_scheme_is_plain_hmac_sha256_over_t_dot_body() {
        assert_eq!(
            sign("key", 1, b"{}"),
            "t=1,v1=1ba6b8171186efc613e8bcc0cbdab2748f24984d7c5a84faa2637afa0e40d224"
        );
    }
}
