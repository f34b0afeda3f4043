//! What the gateway does with bodies of a format beyond reading and forwarding them.
//!
//! What the gateway reads of a text call's body and the body it forwards to an account of the
//! client's format are the format's own, in `translate::request` (one module per format: the
//! [`Head`], the same-format rewrite, the decoder), beside the format's answer reading in
//! `translate::response`. Here:
//! - [`cells`]: which body each account of a call gets (its format's own, or a translation);
//! - [`images`] and [`image_call`]: image calls (both image profiles, and image models on the
//!   native surface);
//! - [`embeddings`] and [`embedding_call`]: embedding calls (every surface to both supplier
//!   formats);
//! - [`hints`]: reset times named by suppliers' rate-limit answers;
//! - [`segment`]: an id as one path segment of a supplier's URL.
//!
//! The rest of the request path never looks inside a body: it asks the format.

pub(crate) mod cells;
pub(crate) mod embedding_call;
pub(crate) mod embeddings;
pub(crate) mod hints;
pub(crate) mod image_call;
pub(crate) mod images;

/// An id (a model's, a supplier task's) as one path segment: ids are opaque, so anything outside
/// `[A-Za-z0-9._~-]` is percent-encoded and an id can never change the path.
pub(crate) fn segment(id: &str) -> String {
    let mut out = String::with_capacity(id.len());
    for b in id.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Largest supplier answer kept whole to be rewritten at its end ([`Whole`]); beyond it the client
/// gets an error body (the status was already sent).
const WHOLE_CAP: usize = 64 * 1024 * 1024;

/// A supplier's answer kept whole (up to [`WHOLE_CAP`]) to be rewritten at its end (image and
/// embedding answers in another shape): nothing reaches the client before the rewrite; past the
/// cap nothing more is kept, only that it was too large.
#[derive(Debug, Default)]
pub(crate) struct Whole {
    bytes: Vec<u8>,
    overflow: bool,
}

impl Whole {
    /// Keeps the chunk in `body` and leaves an empty one in its place.
    pub fn take(&mut self, body: &mut Option<bytes::Bytes>) {
        if let Some(chunk) = body.as_ref() {
            if self.bytes.len() + chunk.len() > WHOLE_CAP {
                self.overflow = true;
                self.bytes = Vec::new();
            } else if !self.overflow {
                self.bytes.extend_from_slice(chunk);
            }
        }
        *body = Some(bytes::Bytes::new());
    }

    /// The answer kept; `None` when it passed the cap.
    pub fn kept(&self) -> Option<&[u8]> {
        (!self.overflow).then_some(self.bytes.as_slice())
    }
}

/// Token counts of one call: the one usage type, the `translate` crate's (whose format decoders
/// read it, for the client and for the bill alike).
pub use translate::Usage;

/// What a generation call asks for, read from its body by its format (`translate::request`).
pub(crate) use translate::request::Head;

/// The top level of a JSON body, values borrowed raw (`translate::request::top_level`).
pub(crate) use translate::request::TopLevel;
