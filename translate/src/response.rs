//! Responses: a supplier's body (JSON, or SSE fed chunk by chunk) into the client's format.
//!
//! Not yet written (issue 12, in progress).

use crate::Format;

/// Translates one response body from the supplier's format to the client's.
pub struct Translator {
    supplier: Format,
    client: Format,
    stream: bool,
    model: String,
}

impl Translator {
    /// A translator for a successful (2xx) response. `stream`: the body is SSE (the client asked
    /// for a stream, and the supplier was asked for one). `model`: the model id the client sees.
    pub fn new(supplier: Format, client: Format, stream: bool, model: &str) -> Translator {
        Translator {
            supplier,
            client,
            stream,
            model: model.to_string(),
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
        let _ = (chunk, self.supplier, self.client, &self.model);
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
