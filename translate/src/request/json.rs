//! Reading a client's JSON body field by field, each read naming the field's path so that a
//! wrong type or a missing required field becomes a [`Refusal`] with `param` set. Decoders only;
//! nothing here knows any format.
//!
//! `null` counts as absent everywhere: clients that serialise unset options as `null` mean "not
//! set".

use serde_json::{Map, Value};

use crate::Refusal;

pub(super) type Object = Map<String, Value>;

/// The path of `key` inside the object at `path` (`""` is the body).
pub(super) fn at(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

/// The path of element `i` of the array at `path`.
pub(super) fn index(path: &str, i: usize) -> String {
    format!("{path}[{i}]")
}

/// A refusal for a field of the wrong shape: "`path` must be `what`".
pub(super) fn malformed(path: &str, what: &str) -> Refusal {
    Refusal::new(format!("`{path}` must be {what}"), path)
}

/// A refusal for a field the target format cannot carry.
pub(super) fn unsupported(path: &str, why: &str) -> Refusal {
    Refusal::new(format!("`{path}` is not supported: {why}"), path)
}

/// The body as a JSON object.
pub(super) fn body(bytes: &[u8]) -> Result<Object, Refusal> {
    match serde_json::from_slice::<Value>(bytes) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(_) => Err(Refusal {
            message: "the request body must be a JSON object".to_string(),
            param: None,
        }),
        Err(error) => Err(Refusal {
            message: format!("the request body is not valid JSON: {error}"),
            param: None,
        }),
    }
}

/// The value at `key`, `None` when absent or `null`.
pub(super) fn field<'a>(object: &'a Object, key: &str) -> Option<&'a Value> {
    object.get(key).filter(|value| !value.is_null())
}

/// `value` (found at `path`) as an object.
pub(super) fn as_object<'a>(value: &'a Value, path: &str) -> Result<&'a Object, Refusal> {
    value
        .as_object()
        .ok_or_else(|| malformed(path, "an object"))
}

/// `value` (found at `path`) as an array.
pub(super) fn as_array<'a>(value: &'a Value, path: &str) -> Result<&'a Vec<Value>, Refusal> {
    value.as_array().ok_or_else(|| malformed(path, "an array"))
}

/// `value` (found at `path`) as a string.
pub(super) fn as_str<'a>(value: &'a Value, path: &str) -> Result<&'a str, Refusal> {
    value.as_str().ok_or_else(|| malformed(path, "a string"))
}

/// The field `key` of `object` (at `path`), refused when absent.
pub(super) fn required<'a>(
    object: &'a Object,
    key: &str,
    path: &str,
) -> Result<&'a Value, Refusal> {
    field(object, key).ok_or_else(|| {
        let param = at(path, key);
        Refusal::new(format!("`{param}` is required"), param)
    })
}

pub(super) fn opt_str<'a>(
    object: &'a Object,
    key: &str,
    path: &str,
) -> Result<Option<&'a str>, Refusal> {
    field(object, key)
        .map(|value| as_str(value, &at(path, key)))
        .transpose()
}

pub(super) fn req_str<'a>(object: &'a Object, key: &str, path: &str) -> Result<&'a str, Refusal> {
    as_str(required(object, key, path)?, &at(path, key))
}

pub(super) fn opt_object<'a>(
    object: &'a Object,
    key: &str,
    path: &str,
) -> Result<Option<&'a Object>, Refusal> {
    field(object, key)
        .map(|value| as_object(value, &at(path, key)))
        .transpose()
}

pub(super) fn req_object<'a>(
    object: &'a Object,
    key: &str,
    path: &str,
) -> Result<&'a Object, Refusal> {
    as_object(required(object, key, path)?, &at(path, key))
}

pub(super) fn opt_array<'a>(
    object: &'a Object,
    key: &str,
    path: &str,
) -> Result<&'a [Value], Refusal> {
    match field(object, key) {
        Some(value) => Ok(as_array(value, &at(path, key))?.as_slice()),
        None => Ok(&[]),
    }
}

pub(super) fn req_array<'a>(
    object: &'a Object,
    key: &str,
    path: &str,
) -> Result<&'a [Value], Refusal> {
    Ok(as_array(required(object, key, path)?, &at(path, key))?.as_slice())
}

pub(super) fn opt_bool(object: &Object, key: &str, path: &str) -> Result<Option<bool>, Refusal> {
    field(object, key)
        .map(|value| {
            value
                .as_bool()
                .ok_or_else(|| malformed(&at(path, key), "a boolean"))
        })
        .transpose()
}

pub(super) fn opt_f64(object: &Object, key: &str, path: &str) -> Result<Option<f64>, Refusal> {
    field(object, key)
        .map(|value| {
            value
                .as_f64()
                .ok_or_else(|| malformed(&at(path, key), "a number"))
        })
        .transpose()
}

/// A non-negative integer (`4096`, also `4096.0` as some clients serialise it).
pub(super) fn opt_u64(object: &Object, key: &str, path: &str) -> Result<Option<u64>, Refusal> {
    field(object, key)
        .map(|value| {
            as_u64(value).ok_or_else(|| malformed(&at(path, key), "a non-negative integer"))
        })
        .transpose()
}

pub(super) fn req_u64(object: &Object, key: &str, path: &str) -> Result<u64, Refusal> {
    required(object, key, path)?;
    opt_u64(object, key, path)?.ok_or_else(|| malformed(&at(path, key), "a non-negative integer"))
}

fn as_u64(value: &Value) -> Option<u64> {
    if let Some(n) = value.as_u64() {
        return Some(n);
    }
    let float = value.as_f64()?;
    // Exactly representable integers only; `as` saturates, so the range check keeps it exact.
    if float >= 0.0 && float.fract() == 0.0 && float < 18_446_744_073_709_551_616.0 {
        Some(float as u64)
    } else {
        None
    }
}
