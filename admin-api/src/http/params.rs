//! Path parameters, read from the raw request path and percent-decoded leniently: bytes that are
//! not UTF-8 become U+FFFD, so such a parameter reaches the route's own validation (an invalid
//! external id, an unknown customer) instead of axum's plain-text "Invalid URL" rejection.

use axum::extract::{FromRequestParts, MatchedPath, OriginalUri};
use axum::http::request::Parts;
use std::convert::Infallible;

/// The one parameter of a route.
pub(crate) struct Seg(pub String);

/// The two parameters of a route, in path order.
pub(crate) struct Segs(pub String, pub String);

impl<S: Send + Sync> FromRequestParts<S> for Seg {
    type Rejection = Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Seg, Infallible> {
        let mut params = params(parts).into_iter();
        Ok(Seg(params.next().unwrap_or_default()))
    }
}

impl<S: Send + Sync> FromRequestParts<S> for Segs {
    type Rejection = Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Segs, Infallible> {
        let mut params = params(parts).into_iter();
        let first = params.next().unwrap_or_default();
        Ok(Segs(first, params.next().unwrap_or_default()))
    }
}

/// The values of the matched route's `{name}` segments.
fn params(parts: &Parts) -> Vec<String> {
    let template = parts
        .extensions
        .get::<MatchedPath>()
        .map(|m| m.as_str().to_string())
        .unwrap_or_default();
    let path = parts
        .extensions
        .get::<OriginalUri>()
        .map_or_else(|| parts.uri.path().to_string(), |u| u.0.path().to_string());
    template
        .split('/')
        .zip(path.split('/'))
        .filter(|(t, _)| t.starts_with('{'))
        .map(|(_, v)| lossy_decode(v))
        .collect()
}

/// Percent-decodes `s`; a malformed escape stays as written, bytes that are not UTF-8 become
/// U+FFFD.
fn lossy_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = (bytes[i] == b'%')
            .then(|| s.get(i + 1..i + 3))
            .flatten()
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match hex {
            Some(b) => {
                out.push(b);
                i += 3;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decoding_is_lenient() {
        assert_eq!(lossy_decode("acme%3A42"), "acme:42");
        assert_eq!(lossy_decode("%ff%fe"), "\u{fffd}\u{fffd}");
        assert_eq!(lossy_decode("50%"), "50%");
        assert_eq!(lossy_decode("%zz"), "%zz");
    }
}
