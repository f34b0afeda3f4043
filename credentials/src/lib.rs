//! Credential formats: customer keys, partner tokens and organization billing tokens.
//!
//! Every credential reads `{kind}_{env}_{random}{checksum}`:
//! - `kind` is `tgk` (customer routing key), `tgp` (partner automation token) or `tgb`
//!   (organization billing token), so a credential sent to the wrong surface is refused before any
//!   lookup and a leak scanner can tell them apart;
//! - `env` is `live` (production) or `dev` (development); a gateway only accepts keys minted for its
//!   own environment;
//! - `random` is 32 base62 characters (about 190 bits) and `checksum` 6 base62 characters of a CRC-32
//!   over everything before it, so typos and truncations are caught offline.
//!
//! Only a keyed hash ([`KeyHasher`], HMAC-SHA256 with a server-side pepper) is ever stored or used as
//! a lookup index; the clear value exists once, in the response that created it. [`Secret`] has no
//! `PartialEq` and a redacted `Debug`, so secrets are not compared with `==` or logged by accident.

pub mod batch_line;

use hmac::{Hmac, Mac};
use rand::Rng;
use sha2::Sha256;
use std::fmt;

const ALPHABET: &[u8; 62] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
const RANDOM_LEN: usize = 32;
const CHECKSUM_LEN: usize = 6;

/// What a credential is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    CustomerKey,
    PartnerToken,
    BillingToken,
}

impl Kind {
    pub fn prefix(self) -> &'static str {
        match self {
            Kind::CustomerKey => "tgk",
            Kind::PartnerToken => "tgp",
            Kind::BillingToken => "tgb",
        }
    }

    fn from_prefix(p: &str) -> Option<Kind> {
        match p {
            "tgk" => Some(Kind::CustomerKey),
            "tgp" => Some(Kind::PartnerToken),
            "tgb" => Some(Kind::BillingToken),
            _ => None,
        }
    }
}

/// The environment a credential was minted for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Env {
    Live,
    Dev,
}

impl Env {
    pub fn tag(self) -> &'static str {
        match self {
            Env::Live => "live",
            Env::Dev => "dev",
        }
    }

    fn from_tag(t: &str) -> Option<Env> {
        match t {
            "live" => Some(Env::Live),
            "dev" => Some(Env::Dev),
            _ => None,
        }
    }
}

/// Why a presented string is not a usable credential. Callers answer every variant with the same
/// "invalid credential" error; the variants exist for logs and metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum FormatError {
    /// not a Tollgate credential (unknown prefix or shape)
    #[error("not a Tollgate credential")]
    Malformed,
    /// checksum does not match (typo or truncation)
    #[error("credential checksum mismatch")]
    Checksum,
    /// a credential of another kind (e.g. a partner token sent to the gateway)
    #[error("credential of another kind")]
    WrongKind,
    /// minted for another environment
    #[error("credential of another environment")]
    WrongEnv,
}

/// A clear-text credential. Shown once to its owner, never stored, never logged.
pub struct Secret(String);

impl Secret {
    /// The clear value, for the one response that hands it out.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Secret({})", preview(&self.0))
    }
}

/// Mints a new credential of `kind` for `env`.
pub fn generate(kind: Kind, env: Env) -> Secret {
    let mut rng = rand::rng();
    let mut s = String::with_capacity(4 + 5 + RANDOM_LEN + CHECKSUM_LEN);
    s.push_str(kind.prefix());
    s.push('_');
    s.push_str(env.tag());
    s.push('_');
    for _ in 0..RANDOM_LEN {
        s.push(char::from(ALPHABET[rng.random_range(0..ALPHABET.len())]));
    }
    let sum = checksum(s.as_bytes());
    s.push_str(&sum);
    Secret(s)
}

/// Checks that `presented` is a well-formed credential of `kind` for `env`, without any lookup.
pub fn check(presented: &str, kind: Kind, env: Env) -> Result<(), FormatError> {
    let (k, e) = parse(presented)?;
    if k != kind {
        return Err(FormatError::WrongKind);
    }
    if e != env {
        return Err(FormatError::WrongEnv);
    }
    Ok(())
}

/// Reads kind and environment from a well-formed credential.
pub fn parse(presented: &str) -> Result<(Kind, Env), FormatError> {
    let mut parts = presented.splitn(3, '_');
    let (Some(prefix), Some(env), Some(body)) = (parts.next(), parts.next(), parts.next()) else {
        return Err(FormatError::Malformed);
    };
    let kind = Kind::from_prefix(prefix).ok_or(FormatError::Malformed)?;
    let env = Env::from_tag(env).ok_or(FormatError::Malformed)?;
    if body.len() != RANDOM_LEN + CHECKSUM_LEN || !body.bytes().all(|b| b.is_ascii_alphanumeric()) {
        return Err(FormatError::Malformed);
    }
    let (head, sum) = presented.split_at(presented.len() - CHECKSUM_LEN);
    if checksum_chars(head.as_bytes()) != sum.as_bytes() {
        return Err(FormatError::Checksum);
    }
    Ok((kind, env))
}

/// A display-safe preview: the prefix and environment plus the last four characters.
pub fn preview(presented: &str) -> String {
    match parse(presented) {
        Ok((kind, env)) => {
            let tail = &presented[presented.len() - 4..];
            format!("{}_{}_...{tail}", kind.prefix(), env.tag())
        }
        Err(_) => "<unrecognised>".to_string(),
    }
}

/// Computes the lookup index of credentials: HMAC-SHA256 under the server's pepper, hex encoded.
/// An attacker cannot steer the index without the pepper, so looking it up in a map or a database
/// leaks nothing through timing about stored values.
#[derive(Clone)]
pub struct KeyHasher {
    mac: Hmac<Sha256>,
}

impl fmt::Debug for KeyHasher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("KeyHasher(<pepper redacted>)")
    }
}

impl KeyHasher {
    pub fn new(pepper: &[u8]) -> KeyHasher {
        // HMAC accepts keys of any length; new_from_slice only fails for fixed-size MACs.
        let mac = match Hmac::<Sha256>::new_from_slice(pepper) {
            Ok(mac) => mac,
            Err(_) => unreachable_hmac(),
        };
        KeyHasher { mac }
    }

    /// The hex HMAC of a presented credential (64 lowercase hex characters).
    pub fn hash(&self, presented: &str) -> String {
        let mut mac = self.mac.clone();
        mac.update(presented.as_bytes());
        let digest = mac.finalize().into_bytes();
        // Lowercase hex, written directly (`hex::encode` collects `char`s one by one).
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let mut out = Vec::with_capacity(digest.len() * 2);
        for b in digest {
            out.push(HEX[usize::from(b >> 4)]);
            out.push(HEX[usize::from(b & 0x0F)]);
        }
        // Hex digits are ASCII.
        String::from_utf8(out).unwrap_or_default()
    }
}

#[cold]
fn unreachable_hmac() -> Hmac<Sha256> {
    // Hmac<Sha256>::new_from_slice never fails; keep a defined value rather than a panic.
    <Hmac<Sha256> as hmac::digest::KeyInit>::new(&Default::default())
}

/// Compares two hashes in constant time (for callers that hold an expected hash).
pub fn hashes_equal(a: &str, b: &str) -> bool {
    use subtle::ConstantTimeEq;
    a.len() == b.len() && bool::from(a.as_bytes().ct_eq(b.as_bytes()))
}

fn checksum(bytes: &[u8]) -> String {
    let sum = checksum_chars(bytes);
    // The alphabet is ASCII.
    String::from_utf8(sum.to_vec()).unwrap_or_default()
}

/// The checksum's characters: CRC-32 (IEEE, reflected) of `bytes` in base 62. Table-driven: a
/// key is checked on every call (issue 44: the bitwise loop cost 1.9 k instructions a call).
fn checksum_chars(bytes: &[u8]) -> [u8; CHECKSUM_LEN] {
    let mut crc: u32 = 0xFFFF_FFFF;
    for &b in bytes {
        crc = (crc >> 8) ^ CRC_TABLE[((crc ^ u32::from(b)) & 0xFF) as usize];
    }
    let mut n = u64::from(!crc);
    let mut out = [b'0'; CHECKSUM_LEN];
    for slot in out.iter_mut().rev() {
        *slot = ALPHABET[(n % 62) as usize];
        n /= 62;
    }
    out
}

/// CRC-32's byte table (polynomial 0xEDB88320), computed at compile time.
const CRC_TABLE: [u32; 256] = {
    let mut table = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let mut crc = i as u32;
        let mut bit = 0;
        while bit < 8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
            bit += 1;
        }
        table[i] = crc;
        i += 1;
    }
    table
};

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn generated_credentials_round_trip() {
        for kind in [Kind::CustomerKey, Kind::PartnerToken, Kind::BillingToken] {
            for env in [Env::Live, Env::Dev] {
                let s = generate(kind, env);
                assert_eq!(parse(s.expose()), Ok((kind, env)));
                assert!(check(s.expose(), kind, env).is_ok());
            }
        }
    }

    #[test]
    fn kind_and_environment_are_enforced() {
        let partner = generate(Kind::PartnerToken, Env::Dev);
        assert_eq!(
            check(partner.expose(), Kind::CustomerKey, Env::Dev),
            Err(FormatError::WrongKind)
        );
        let dev = generate(Kind::CustomerKey, Env::Dev);
        assert_eq!(
            check(dev.expose(), Kind::CustomerKey, Env::Live),
            Err(FormatError::WrongEnv)
        );
    }

    /// The table gives the bitwise CRC-32's values (the checksums of every key already minted).
    #[test]
    fn the_table_checksum_is_the_bitwise_one() {
        fn bitwise(bytes: &[u8]) -> u32 {
            let mut crc: u32 = 0xFFFF_FFFF;
            for &b in bytes {
                crc ^= u32::from(b);
                for _ in 0..8 {
                    let mask = (crc & 1).wrapping_neg();
                    crc = (crc >> 1) ^ (0xEDB8_8320 & mask);
                }
            }
            !crc
        }
        // CRC-32 of "123456789" is 0xCBF43926 (the algorithm's check value).
        assert_eq!(bitwise(b"123456789"), 0xCBF4_3926);
        for text in [
            "",
            "123456789",
            "tg_live_0123456789abcdefghijABCDEFGHIJklmnopqrst",
        ] {
            let mut n = u64::from(bitwise(text.as_bytes()));
            let mut want = [b'0'; CHECKSUM_LEN];
            for slot in want.iter_mut().rev() {
                *slot = ALPHABET[(n % 62) as usize];
                n /= 62;
            }
            assert_eq!(checksum_chars(text.as_bytes()), want, "{text}");
        }
        let hasher = KeyHasher::new(b"pepper");
        let mut mac = hasher.mac.clone();
        mac.update(b"key");
        assert_eq!(hasher.hash("key"), hex::encode(mac.finalize().into_bytes()));
    }

    #[test]
    fn typos_fail_the_checksum() {
        let s = generate(Kind::CustomerKey, Env::Live);
        let mut chars: Vec<char> = s.expose().chars().collect();
        chars[12] = if chars[12] == 'a' { 'b' } else { 'a' };
        let typo: String = chars.into_iter().collect();
        assert_eq!(parse(&typo), Err(FormatError::Checksum));
        assert_eq!(
            parse(&s.expose()[..s.expose().len() - 1]),
            Err(FormatError::Malformed)
        );
        assert_eq!(parse("sk-abc"), Err(FormatError::Malformed));
        assert_eq!(parse(""), Err(FormatError::Malformed));
    }

    #[test]
    fn previews_and_debug_never_show_the_secret() {
        let s = generate(Kind::CustomerKey, Env::Live);
        let p = preview(s.expose());
        assert!(p.starts_with("tgk_live_..."));
        assert_eq!(p.len(), "tgk_live_...".len() + 4);
        assert!(!format!("{s:?}").contains(&s.expose()[9..30]));
    }

    #[test]
    fn hashing_is_keyed() {
        let s = generate(Kind::CustomerKey, Env::Live);
        let a = KeyHasher::new(b"pepper-one-0123456");
        let b = KeyHasher::new(b"pepper-two-0123456");
        assert_eq!(a.hash(s.expose()), a.hash(s.expose()));
        assert_ne!(a.hash(s.expose()), b.hash(s.expose()));
        assert_eq!(a.hash(s.expose()).len(), 64);
        assert!(hashes_equal(&a.hash("x"), &a.hash("x")));
        assert!(!hashes_equal(&a.hash("x"), &a.hash("y")));
    }

    proptest! {
        #[test]
        fn parse_never_panics(s in ".{0,80}") {
            let _ = parse(&s);
            let _ = preview(&s);
        }
    }
}
