//! The top-level scan of a JSON request body, shared by every format: values are borrowed raw
//! slices, so a 3 MB conversation is scanned once and never re-encoded unless a field must
//! change; nesting deeper than serde_json's own limit is refused before anything reaches a
//! supplier. Knows no format: the readers and the rewrite here are what each format's
//! module (`chat`, `messages`, …) builds its [`super::Head`] and its same-format body from.

use bytes::Bytes;
use indexmap::IndexMap;
use serde_json::value::RawValue;

/// The top level of a JSON object body, values left raw.
pub type TopLevel<'a> = IndexMap<String, &'a RawValue>;

/// How deeply arrays and objects may nest in a JSON body (serde_json's own recursion limit). A
/// deeper body is refused before anything reaches a supplier: a supplier that fails on it with a
/// 5xx would cool its account for every tenant.
pub const MAX_JSON_DEPTH: usize = 128;

/// A body the gateway cannot read: not a JSON object, nested too deeply, or a field every call of
/// its format needs is missing or of the wrong type. Answered 400 (`invalid_body`), `param` naming
/// the field when there is one. Unlike a [`crate::Refusal`] (a valid body another format cannot
/// carry), this body is wrong whoever serves it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Malformed {
    pub message: String,
    pub param: Option<&'static str>,
}

impl Malformed {
    pub(super) fn new(message: impl Into<String>, param: Option<&'static str>) -> Malformed {
        Malformed {
            message: message.into(),
            param,
        }
    }
}

/// Parses the top level of a JSON object body, after checking its nesting depth.
pub fn top_level(body: &[u8]) -> Result<TopLevel<'_>, Malformed> {
    if body.is_empty() {
        return Err(Malformed::new("a JSON body is required", None));
    }
    if !nesting_within(body, MAX_JSON_DEPTH) {
        return Err(Malformed::new(
            format!("the JSON body nests arrays and objects deeper than {MAX_JSON_DEPTH} levels"),
            None,
        ));
    }
    serde_json::from_slice::<TopLevel<'_>>(body)
        .map_err(|e| Malformed::new(format!("the body is not a JSON object: {e}"), None))
}

/// Whether the arrays and objects of `body` nest at most `max` deep (brackets inside strings do not
/// count). One pass, no allocation; malformed JSON is left to the parser.
pub(super) fn nesting_within(body: &[u8], max: usize) -> bool {
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

/// The required, non-empty string field `name`.
pub(super) fn string_field(fields: &TopLevel<'_>, name: &'static str) -> Result<String, Malformed> {
    let value = match fields.get(name) {
        None => return Err(Malformed::new(format!("'{name}' is required"), Some(name))),
        Some(raw) => serde_json::from_str::<String>(raw.get())
            .map_err(|_| Malformed::new(format!("'{name}' must be a string"), Some(name)))?,
    };
    if value.is_empty() {
        return Err(Malformed::new(
            format!("'{name}' must not be empty"),
            Some(name),
        ));
    }
    Ok(value)
}

/// An optional boolean field (absent or `null`: false).
pub(super) fn bool_field(fields: &TopLevel<'_>, name: &'static str) -> Result<bool, Malformed> {
    match fields.get(name).map(|raw| raw.get()) {
        None | Some("false" | "null") => Ok(false),
        Some("true") => Ok(true),
        Some(_) => Err(Malformed::new(
            format!("'{name}' must be a boolean"),
            Some(name),
        )),
    }
}

/// A required array field (`messages`, `contents`): refused naming it when absent or not an array.
pub(super) fn require_array(fields: &TopLevel<'_>, name: &'static str) -> Result<(), Malformed> {
    match fields.get(name).map(|r| r.get().trim_start()) {
        Some(v) if v.starts_with('[') => Ok(()),
        Some(_) => Err(Malformed::new(
            format!("'{name}' must be an array"),
            Some(name),
        )),
        None => Err(Malformed::new(format!("'{name}' is required"), Some(name))),
    }
}

/// `value` as a JSON string literal.
pub(super) fn json_string(value: &str) -> Result<String, Malformed> {
    serde_json::to_string(value).map_err(unwritable)
}

/// The error of a rewrite that could not be serialised (not expected: every value written is a
/// string or a map read from the body itself).
pub(super) fn unwritable(error: serde_json::Error) -> Malformed {
    Malformed::new(format!("the body could not be rewritten: {error}"), None)
}

/// A copy of a JSON object with each `(key, JSON value)` of `replaced` written in place of the
/// original's field of that name (or appended when it had none); every other field's bytes are
/// kept as received, in order.
pub(super) fn rewrite_fields(
    size_hint: usize,
    fields: &TopLevel<'_>,
    replaced: &[(&str, String)],
) -> Result<Bytes, Malformed> {
    let mut out = Vec::with_capacity(size_hint + 64);
    out.push(b'{');
    let mut first = true;
    let mut push = |out: &mut Vec<u8>, key: &str, value: &str| -> Result<(), Malformed> {
        if !first {
            out.push(b',');
        }
        first = false;
        serde_json::to_writer(&mut *out, key).map_err(unwritable)?;
        out.push(b':');
        out.extend_from_slice(value.as_bytes());
        Ok(())
    };
    for (key, value) in fields {
        match replaced.iter().find(|(k, _)| k == key) {
            Some((_, new)) => push(&mut out, key, new)?,
            None => push(&mut out, key, value.get())?,
        }
    }
    for (key, new) in replaced {
        if !fields.contains_key(*key) {
            push(&mut out, key, new)?;
        }
    }
    out.push(b'}');
    Ok(Bytes::from(out))
}

/// The body with `model` (sent as `sent`) replaced by `upstream_model`: the original buffer when
/// they are the same id.
pub(super) fn with_model(
    original: &Bytes,
    fields: &TopLevel<'_>,
    sent: &str,
    upstream_model: &str,
) -> Result<Bytes, Malformed> {
    if sent == upstream_model {
        return Ok(original.clone());
    }
    rewrite_fields(
        original.len(),
        fields,
        &[("model", json_string(upstream_model)?)],
    )
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

    #[test]
    fn a_rewrite_keeps_other_bytes_and_appends_missing_fields() {
        let body = Bytes::from_static(br#"{"a" : 1,"model":"x","b":[ 2 ]}"#);
        let fields = top_level(&body).unwrap();
        let out = rewrite_fields(
            body.len(),
            &fields,
            &[("model", "\"y\"".into()), ("c", "true".into())],
        )
        .unwrap();
        assert_eq!(&out[..], br#"{"a":1,"model":"y","b":[ 2 ],"c":true}"#);
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
