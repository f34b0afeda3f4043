//! Responses: a supplier's body (JSON, or SSE fed chunk by chunk) into the client's format.
//!
//! Not yet written (issue 12, in progress).

use crate::Format;

/// What the client-side encoder needs besides the supplier's events.
#[derive(Debug, Clone)]
pub struct Context {
    /// The model id the client sees in the response.
    pub model: String,
    /// The gateway's request id: the response ids the encoder writes derive from it
    /// (`chatcmpl-…`, `resp_…`, `msg_…`), so they are unique per call.
    pub request_id: String,
    /// Unix seconds for `created` / `created_at`.
    pub created: u64,
}

/// Translates one response body from the supplier's format to the client's.
pub struct Translator {
    supplier: Format,
    client: Format,
    stream: bool,
    context: Context,
}

impl Translator {
    /// A translator for a successful (2xx) response. `stream`: the body is SSE (the client asked
    /// for a stream, and the supplier was asked for one).
    pub fn new(supplier: Format, client: Format, stream: bool, context: Context) -> Translator {
        Translator {
            supplier,
            client,
            stream,
            context,
        }
    }

    /// The `Content-Type` of the translated body.
    pub fn content_type(&self) -> &'static str {
        if self.stream {
            "text/event-stream"
        } else {
            "application/json"
        }
    }

    /// Feeds the next chunk of the supplier's body; returns the client bytes ready to send now
    /// (possibly empty).
    pub fn feed(&mut self, chunk: &[u8]) -> Vec<u8> {
        let _ = (chunk, self.supplier, self.client, &self.context);
        Vec::new()
    }

    /// The supplier's body ended (complete, or cut): returns the remaining client bytes.
    pub fn finish(&mut self) -> Vec<u8> {
        Vec::new()
    }
}

/// A supplier's error body (status ≥ 400) in the client's error shape.
pub fn error_body(supplier: Format, client: Format, status: u16, body: &[u8]) -> Vec<u8> {
    let _ = (supplier, client, status);
    body.to_vec()
}
