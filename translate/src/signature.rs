//! Gemini thought signatures carried through client formats that have no place for them.
//!
//! Gemini 3 returns an opaque `thoughtSignature` beside each turn's first `functionCall` part and
//! refuses (400) a later request whose model turn carries that call without it. A client of
//! another format (chat completions, responses, Messages) echoes back exactly one thing of a tool
//! call unchanged: its **id** (the assistant turn's tool call, and the tool result that answers
//! it). So the signature travels inside the id the client sees:
//! `{id}__ts_{signature in URL-safe base64, no padding}` (characters `[A-Za-z0-9_-]`, which
//! every format accepts in an id, Anthropic's `tool_use` pattern included). On the way back the
//! Gemini encoder splits it off and restores the part's `thoughtSignature` (standard base64);
//! every other encoder sends the bare id, so the same history also works against other suppliers.
//! An id without the marker is passed as it is.

/// Between a tool call's id and the signature it carries.
const MARKER: &str = "__ts_";

/// The id a client sees for a call `id` that carried `signature` (standard or URL-safe base64).
pub fn signed_id(id: &str, signature: &str) -> String {
    let url_safe: String = signature
        .chars()
        .filter(|c| *c != '=')
        .map(|c| match c {
            '+' => '-',
            '/' => '_',
            other => other,
        })
        .collect();
    format!("{id}{MARKER}{url_safe}")
}

/// The bare id of a client's tool-call id, and the signature it carries (standard base64, padded),
/// if any.
pub fn split_id(id: &str) -> (&str, Option<String>) {
    match id.split_once(MARKER) {
        Some((bare, sig)) if !bare.is_empty() && !sig.is_empty() => {
            let mut standard: String = sig
                .chars()
                .map(|c| match c {
                    '-' => '+',
                    '_' => '/',
                    other => other,
                })
                .collect();
            while !standard.len().is_multiple_of(4) {
                standard.push('=');
            }
            (bare, Some(standard))
        }
        _ => (id, None),
    }
}

/// The bare id (what suppliers other than Gemini get).
pub fn bare_id(id: &str) -> &str {
    split_id(id).0
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn round_trip() {
        let id = signed_id("call_abc_0", "Ck8+Lz9/aGVsbG8=");
        assert_eq!(id, "call_abc_0__ts_Ck8-Lz9_aGVsbG8");
        assert!(
            id.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        );
        assert_eq!(
            split_id(&id),
            ("call_abc_0", Some("Ck8+Lz9/aGVsbG8=".to_string()))
        );
        assert_eq!(split_id("toolu_01"), ("toolu_01", None));
        assert_eq!(bare_id(&id), "call_abc_0");
    }

    proptest! {
        /// Any base64 signature comes back as the same bytes' standard base64.
        #[test]
        fn any_signature_round_trips(bytes in proptest::collection::vec(any::<u8>(), 1..200), id in "[a-z0-9]{1,12}(_[a-z0-9]{1,8}){0,2}") {
            use base64::Engine;
            let std = base64::engine::general_purpose::STANDARD.encode(&bytes);
            let url = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(&bytes);
            for given in [&std, &url] {
                let signed = signed_id(&id, given);
                let (bare, sig) = split_id(&signed);
                prop_assert_eq!(bare, id.as_str());
                prop_assert_eq!(sig.as_deref(), Some(std.as_str()));
            }
        }
    }
}
