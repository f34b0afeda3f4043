//! The top-level scan of a JSON body, shared by every wire format: values are borrowed raw
//! slices, so a 3 MB conversation is scanned once and never re-encoded unless a field must
//! change; nesting deeper than serde_json's own limit is refused before anything reaches a
//! supplier.

use crate::errors::GatewayError;
use indexmap::IndexMap;
use serde_json::value::RawValue;

/// The top level of a JSON object body, values left raw.
pub(crate) type TopLevel<'a> = IndexMap<String, &'a RawValue>;

/// How deeply arrays and objects may nest in a JSON body (serde_json's own recursion limit). A
/// deeper body is refused before anything reaches a supplier: a supplier that fails on it with a
/// 5xx would cool its account for every tenant.
pub(crate) const MAX_JSON_DEPTH: usize = 128;

/// Parses the top level of a JSON object body, after checking its nesting depth.
pub(crate) fn top_level(body: &[u8]) -> Result<TopLevel<'_>, GatewayError> {
    if body.is_empty() {
        return Err(GatewayError::invalid("a JSON body is required", None));
    }
    if !nesting_within(body, MAX_JSON_DEPTH) {
        return Err(GatewayError::invalid(
            format!("the JSON body nests arrays and objects deeper than {MAX_JSON_DEPTH} levels"),
            None,
        ));
    }
    serde_json::from_slice::<TopLevel<'_>>(body)
        .map_err(|e| GatewayError::invalid(format!("the body is not a JSON object: {e}"), None))
}

/// Whether the arrays and objects of `body` nest at most `max` deep (brackets inside strings do not
/// count). One pass, no allocation; malformed JSON is left to the parser.
pub(crate) fn nesting_within(body: &[u8], max: usize) -> bool {
    let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
    for &b in body {
        if in_string {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                if depth > max {
                    return false;
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nesting_is_measured_outside_strings() {
        assert!(nesting_within(br#"{"a":[[1]]}"#, 3));
        assert!(!nesting_within(br#"{"a":[[1]]}"#, 2));
        assert!(nesting_within(br#"{"a":"[[[[[[[[\"[[["}"#, 1));
        assert!(!nesting_within(br#"{"a":"x\\"[[["}"#, 1));
        let deep = format!("{}{}", "[".repeat(129), "]".repeat(129));
        assert!(!nesting_within(deep.as_bytes(), MAX_JSON_DEPTH));
        let ok = format!("{}{}", "[".repeat(128), "]".repeat(128));
        assert!(nesting_within(ok.as_bytes(), MAX_JSON_DEPTH));
    }

    mod properties {
        use super::*;
        use proptest::prelude::*;

        proptest! {
            /// Arbitrary bytes never panic the top-level scan: a JSON object or a clear error.
            #[test]
            fn top_level_of_arbitrary_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..4000)) {
                let _ = top_level(&bytes);
            }

            /// Nesting is measured exactly for bracket-only documents.
            #[test]
            fn nesting_depth_is_exact(depth in 0usize..300) {
                let doc = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
                prop_assert_eq!(nesting_within(doc.as_bytes(), MAX_JSON_DEPTH), depth <= MAX_JSON_DEPTH);
            }

            /// Huge numbers and duplicate keys are the parser's business, never a panic.
            #[test]
            fn odd_but_valid_json(n in any::<u64>(), key in "[a-z]{1,8}") {
                let doc = format!(r#"{{"{key}":{n}e400,"{key}":1,"model":"m"}}"#);
                let _ = top_level(doc.as_bytes());
            }
        }
    }
}
