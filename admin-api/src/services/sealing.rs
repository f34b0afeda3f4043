//! Secrets kept so the server can use them again (an authenticator's seed, a webhook's signing
//! secret), sealed at rest with AES-256-GCM under a key derived from the server's hashing secret
//! and the secret's purpose (so one purpose's sealed value never opens as another's).

use crate::state::AppState;
use ring::aead::{AES_256_GCM, Aad, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};

/// What a sealed secret is for: its key's derivation label.
#[derive(Clone, Copy)]
pub enum Purpose {
    TwoFactor,
    Webhook,
}

impl Purpose {
    fn label(self) -> &'static str {
        match self {
            Purpose::TwoFactor => "tollgate two-factor secret sealing key v1",
            Purpose::Webhook => "tollgate webhook signing secret sealing key v1",
        }
    }
}

fn sealing_key(state: &AppState, purpose: Purpose) -> Option<LessSafeKey> {
    let key = hex::decode(state.hasher.hash(purpose.label())).ok()?;
    UnboundKey::new(&AES_256_GCM, &key)
        .ok()
        .map(LessSafeKey::new)
}

/// `secret` sealed: hex of a random nonce followed by the ciphertext and its tag.
pub fn seal(state: &AppState, purpose: Purpose, secret: &[u8]) -> Option<String> {
    use rand::Rng;
    let key = sealing_key(state, purpose)?;
    let mut nonce = [0u8; NONCE_LEN];
    rand::rng().fill(&mut nonce);
    let mut data = secret.to_vec();
    key.seal_in_place_append_tag(Nonce::assume_unique_for_key(nonce), Aad::empty(), &mut data)
        .ok()?;
    let mut out = nonce.to_vec();
    out.extend_from_slice(&data);
    Some(hex::encode(out))
}

/// The secret behind a sealed value (`None`: not ours, of another purpose, or altered).
pub fn open(state: &AppState, purpose: Purpose, sealed: &str) -> Option<Vec<u8>> {
    let key = sealing_key(state, purpose)?;
    let bytes = hex::decode(sealed).ok()?;
    if bytes.len() <= NONCE_LEN {
        return None;
    }
    let (nonce, data) = bytes.split_at(NONCE_LEN);
    let nonce = Nonce::try_assume_unique_for_key(nonce).ok()?;
    let mut data = data.to_vec();
    let plain = key.open_in_place(nonce, Aad::empty(), &mut data).ok()?;
    Some(plain.to_vec())
}
