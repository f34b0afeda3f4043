//! Fault specifications: the [`Fault`] type, its `x-mock-fault` header syntax
//! (parsed by [`FromStr`], printed back by [`Display`]) and the OpenAI error
//! `type` a status fault answers with (the Anthropic and Google shapes live in
//! their format modules).
//!
//! # Syntax
//!
//! A spec is a list of `;`-separated items (whitespace around items is ignored):
//!
//! | item              | meaning                                                                   |
//! |-------------------|---------------------------------------------------------------------------|
//! | `status=CODE`     | answer `CODE` (400..=599) with a JSON error body in the route's shape (OpenAI, Anthropic or Google) |
//! | `retry_after=S`   | with `status`: add `Retry-After: S`                                       |
//! | `reset_header=S`  | with `status`: OpenAI `x-ratelimit-reset-requests: Ss`; Anthropic `anthropic-ratelimit-{requests,tokens}-reset: <RFC 3339 now + S>`; Gemini none |
//! | `reset_body=S`    | with `status`: OpenAI/Anthropic message `Rate limit reached. Please try again in Ss.`; Gemini `RetryInfo` detail `retryDelay: "Ss"` |
//! | `stall_ms=N`      | sleep `N` ms before sending response headers (combinable)                 |
//! | `cut_after=N`     | streaming: send `N` events then abort; non-streaming: half the body, abort |
//! | `error_after=N`   | streaming: send `N` events, then the format's error event (Anthropic `event: error`, `overloaded_error`; OpenAI `data: {"error": …}`), and end the stream; no effect on non-streaming requests |
//! | `malformed_sse`   | streaming: start event, `data: {not json`, `garbage line`, one content event |
//! | `close`           | drop the connection without any response                                  |
//!
//! At most one of `status`, `cut_after`, `error_after`, `malformed_sse`, `close` and at most one
//! `stall_ms` may appear; the modifiers require `status`. A spec holding a single
//! primary item parses to that variant (`status=429;retry_after=7` is one
//! [`Fault::Status`]); a stall combined with another item parses to
//! [`Fault::Combined`] in the order written.

use std::fmt;
use std::str::FromStr;

/// A fault the mock injects into a request, selected per request by the
/// `x-mock-fault` header or for the whole instance by
/// [`MockHandle::set_fault`](crate::MockHandle::set_fault).
#[derive(Clone, Debug, PartialEq)]
pub enum Fault {
    /// Answer with `code` and a JSON error body (in the shape of the route's
    /// wire format) instead of the normal response.
    Status {
        /// HTTP status, 400..=599.
        code: u16,
        /// Adds `Retry-After: <secs>`.
        retry_after: Option<u64>,
        /// OpenAI: adds `x-ratelimit-reset-requests: <secs>s`; Anthropic: adds
        /// `anthropic-ratelimit-requests-reset` and
        /// `anthropic-ratelimit-tokens-reset` set to the RFC 3339 UTC time
        /// `<secs>` from now; Gemini: nothing.
        reset_header: Option<u64>,
        /// OpenAI and Anthropic: makes the message `Rate limit reached. Please
        /// try again in <secs>s.`; Gemini: adds a `google.rpc.RetryInfo`
        /// detail with `retryDelay: "<secs>s"`.
        reset_body: Option<u64>,
    },
    /// Sleep this many milliseconds before sending the response headers, then
    /// answer normally (or apply the other faults of a [`Fault::Combined`]).
    Stall {
        /// Milliseconds to sleep.
        ms: u64,
    },
    /// Streaming: send this many events (the role chunk / `response.created`
    /// / `message_start` / Gemini chunk 1 is event 1), then abort the
    /// connection. Non-streaming (Gemini's JSON-array stream included): send
    /// the full `content-length` but only the first half of the body, then
    /// abort.
    CutAfter {
        /// Number of events sent before the abort.
        events: usize,
    },
    /// Streaming: send this many events, then the format's error event (an
    /// overloaded supplier mid-stream), then end the stream. No effect on
    /// non-streaming requests.
    ErrorAfter {
        /// Number of events sent before the error event.
        events: usize,
    },
    /// Streaming: emit the start event (chat role chunk, `response.created`,
    /// Anthropic `message_start`, Gemini chunk 1), a `data: {not json` event,
    /// a `garbage line` without a `data:` prefix, one content event, then end
    /// normally without usage and without `[DONE]` / `message_stop` / `STOP`.
    /// No effect on non-streaming requests (nor on Gemini's JSON-array
    /// stream).
    MalformedSse,
    /// Drop the connection without sending any response.
    Close,
    /// Several faults applied together (a stall plus one other fault).
    Combined(Vec<Fault>),
}

impl Fault {
    /// `cut_after=N`: N.
    pub(crate) fn cut_after(&self) -> Option<usize> {
        match self {
            Fault::CutAfter { events } => Some(*events),
            _ => None,
        }
    }

    /// `error_after=N`: N.
    pub(crate) fn error_after(&self) -> Option<usize> {
        match self {
            Fault::ErrorAfter { events } => Some(*events),
            _ => None,
        }
    }

    /// A plain status fault without modifiers.
    pub fn status(code: u16) -> Fault {
        Fault::Status {
            code,
            retry_after: None,
            reset_header: None,
            reset_body: None,
        }
    }

    /// The faults this one consists of (itself, or the parts of a
    /// [`Fault::Combined`], flattened).
    pub fn parts(&self) -> Vec<&Fault> {
        match self {
            Fault::Combined(parts) => parts.iter().flat_map(Fault::parts).collect(),
            other => vec![other],
        }
    }

    /// Total stall in milliseconds before the response headers.
    pub fn stall_ms(&self) -> u64 {
        self.parts()
            .iter()
            .map(|f| match f {
                Fault::Stall { ms } => *ms,
                _ => 0,
            })
            .fold(0u64, u64::saturating_add)
    }

    /// The first part that is not a stall, if any.
    pub fn primary(&self) -> Option<&Fault> {
        self.parts()
            .into_iter()
            .find(|f| !matches!(f, Fault::Stall { .. }))
    }
}

/// The OpenAI error `type` the mock uses for a status fault (Anthropic's and
/// Google's live with their formats).
pub(crate) fn error_type_for(code: u16) -> &'static str {
    match code {
        429 => "rate_limit_exceeded",
        500..=599 => "server_error",
        _ => "invalid_request_error",
    }
}

/// Why a fault spec did not parse.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParseFaultError(String);

impl fmt::Display for ParseFaultError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid fault spec: {}", self.0)
    }
}

impl std::error::Error for ParseFaultError {}

fn err(msg: impl Into<String>) -> ParseFaultError {
    ParseFaultError(msg.into())
}

fn number<T: FromStr>(key: &str, value: Option<&str>) -> Result<T, ParseFaultError> {
    let value = value.ok_or_else(|| err(format!("`{key}` needs a value")))?;
    value
        .parse()
        .map_err(|_| err(format!("`{key}={value}` is not a non-negative integer")))
}

fn set_once<T>(slot: &mut Option<T>, key: &str, value: T) -> Result<(), ParseFaultError> {
    if slot.is_some() {
        return Err(err(format!("`{key}` given twice")));
    }
    *slot = Some(value);
    Ok(())
}

impl FromStr for Fault {
    type Err = ParseFaultError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        // Items in written order; the status item's position is remembered so
        // its modifiers can be attached wherever they appear.
        let mut items: Vec<Fault> = Vec::new();
        let mut status_at: Option<usize> = None;
        let mut stall_seen = false;
        let mut retry_after = None;
        let mut reset_header = None;
        let mut reset_body = None;

        for raw in s.split(';') {
            let item = raw.trim();
            if item.is_empty() {
                continue;
            }
            let (key, value) = match item.split_once('=') {
                Some((k, v)) => (k.trim(), Some(v.trim())),
                None => (item, None),
            };
            let primary = match key {
                "status" => {
                    let code: u16 = number(key, value)?;
                    if !(400..=599).contains(&code) {
                        return Err(err(format!("status {code} is not a 4xx/5xx code")));
                    }
                    status_at = Some(items.len());
                    Some(Fault::status(code))
                }
                "retry_after" => {
                    set_once(&mut retry_after, key, number(key, value)?)?;
                    None
                }
                "reset_header" => {
                    set_once(&mut reset_header, key, number(key, value)?)?;
                    None
                }
                "reset_body" => {
                    set_once(&mut reset_body, key, number(key, value)?)?;
                    None
                }
                "stall_ms" => {
                    if stall_seen {
                        return Err(err("`stall_ms` given twice"));
                    }
                    stall_seen = true;
                    items.push(Fault::Stall {
                        ms: number(key, value)?,
                    });
                    None
                }
                "cut_after" => Some(Fault::CutAfter {
                    events: number(key, value)?,
                }),
                "error_after" => Some(Fault::ErrorAfter {
                    events: number(key, value)?,
                }),
                "malformed_sse" | "close" => {
                    if value.is_some() {
                        return Err(err(format!("`{key}` takes no value")));
                    }
                    Some(if key == "close" {
                        Fault::Close
                    } else {
                        Fault::MalformedSse
                    })
                }
                other => return Err(err(format!("unknown item `{other}`"))),
            };
            if let Some(primary) = primary {
                if items.iter().any(|f| !matches!(f, Fault::Stall { .. })) {
                    return Err(err(
                        "at most one of status, cut_after, error_after, malformed_sse, close may be given",
                    ));
                }
                items.push(primary);
            }
        }

        let has_modifier = retry_after.is_some() || reset_header.is_some() || reset_body.is_some();
        match status_at.and_then(|i| items.get_mut(i)) {
            Some(Fault::Status {
                retry_after: ra,
                reset_header: rh,
                reset_body: rb,
                ..
            }) => {
                *ra = retry_after;
                *rh = reset_header;
                *rb = reset_body;
            }
            _ if has_modifier => {
                return Err(err(
                    "retry_after, reset_header and reset_body need a status item",
                ));
            }
            _ => {}
        }

        match items.len() {
            0 => Err(err("empty spec")),
            1 => items.pop().ok_or_else(|| err("empty spec")),
            _ => Ok(Fault::Combined(items)),
        }
    }
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Fault::Status {
                code,
                retry_after,
                reset_header,
                reset_body,
            } => {
                write!(f, "status={code}")?;
                if let Some(s) = retry_after {
                    write!(f, ";retry_after={s}")?;
                }
                if let Some(s) = reset_header {
                    write!(f, ";reset_header={s}")?;
                }
                if let Some(s) = reset_body {
                    write!(f, ";reset_body={s}")?;
                }
                Ok(())
            }
            Fault::Stall { ms } => write!(f, "stall_ms={ms}"),
            Fault::CutAfter { events } => write!(f, "cut_after={events}"),
            Fault::ErrorAfter { events } => write!(f, "error_after={events}"),
            Fault::MalformedSse => f.write_str("malformed_sse"),
            Fault::Close => f.write_str("close"),
            Fault::Combined(parts) => {
                for (i, part) in parts.iter().enumerate() {
                    if i > 0 {
                        f.write_str(";")?;
                    }
                    write!(f, "{part}")?;
                }
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_status_with_modifiers_in_any_order() {
        let f: Fault = "reset_body=12; status=429 ;retry_after=7;reset_header=3"
            .parse()
            .unwrap();
        assert_eq!(
            f,
            Fault::Status {
                code: 429,
                retry_after: Some(7),
                reset_header: Some(3),
                reset_body: Some(12)
            }
        );
        assert_eq!(
            f.to_string(),
            "status=429;retry_after=7;reset_header=3;reset_body=12"
        );
    }

    #[test]
    fn parses_simple_variants() {
        assert_eq!("status=500".parse::<Fault>().unwrap(), Fault::status(500));
        assert_eq!(
            "stall_ms=250".parse::<Fault>().unwrap(),
            Fault::Stall { ms: 250 }
        );
        assert_eq!(
            "cut_after=3".parse::<Fault>().unwrap(),
            Fault::CutAfter { events: 3 }
        );
        assert_eq!(
            "malformed_sse".parse::<Fault>().unwrap(),
            Fault::MalformedSse
        );
        assert_eq!("close".parse::<Fault>().unwrap(), Fault::Close);
    }

    #[test]
    fn stall_combines_in_written_order() {
        let f: Fault = "status=503;stall_ms=100;retry_after=1".parse().unwrap();
        assert_eq!(
            f,
            Fault::Combined(vec![
                Fault::Status {
                    code: 503,
                    retry_after: Some(1),
                    reset_header: None,
                    reset_body: None
                },
                Fault::Stall { ms: 100 }
            ])
        );
        assert_eq!(f.stall_ms(), 100);
        assert!(matches!(f.primary(), Some(Fault::Status { code: 503, .. })));
        assert_eq!(f.to_string(), "status=503;retry_after=1;stall_ms=100");
        assert_eq!(f.to_string().parse::<Fault>().unwrap(), f);
    }

    #[test]
    fn display_round_trips() {
        for spec in [
            "status=429;retry_after=7",
            "status=429;reset_header=12",
            "status=429;reset_body=12",
            "stall_ms=5;close",
            "cut_after=0",
            "malformed_sse;stall_ms=1",
        ] {
            let f: Fault = spec.parse().unwrap();
            assert_eq!(f.to_string(), spec);
            assert_eq!(f.to_string().parse::<Fault>().unwrap(), f);
        }
    }

    #[test]
    fn rejects_bad_specs() {
        for spec in [
            "",
            " ; ",
            "status=200",
            "status=abc",
            "status",
            "retry_after=3",
            "status=429;close",
            "cut_after=1;malformed_sse",
            "stall_ms=1;stall_ms=2",
            "status=429;retry_after=1;retry_after=2",
            "close=1",
            "explode",
        ] {
            assert!(spec.parse::<Fault>().is_err(), "{spec:?} should not parse");
        }
    }

    #[test]
    fn error_types() {
        assert_eq!(error_type_for(429), "rate_limit_exceeded");
        assert_eq!(error_type_for(500), "server_error");
        assert_eq!(error_type_for(503), "server_error");
        assert_eq!(error_type_for(400), "invalid_request_error");
        assert_eq!(error_type_for(404), "invalid_request_error");
    }
}
