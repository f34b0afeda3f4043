//! Requests: decode a client body into [`ir::Request`], encode it for a supplier.
//!
//! Not yet written (issue 12, in progress).

use crate::ir;
use crate::{Format, Refusal};

/// What an encoder needs besides the request.
#[derive(Debug, Clone)]
pub struct Options {
    /// The output cap to send when the client set none and the target requires one (Anthropic's
    /// `max_tokens` is mandatory).
    pub default_max_tokens: u64,
}

/// Translates a client body in `client` format into a supplier body in `supplier` format, for the
/// upstream model `model`. Refuses what the target cannot express, naming the field.
pub fn translate(
    client: Format,
    supplier: Format,
    body: &[u8],
    model: &str,
    options: &Options,
) -> Result<Vec<u8>, Refusal> {
    let request = decode(client, body)?;
    encode(
        supplier,
        &ir::Request {
            model: model.to_string(),
            ..request
        },
        options,
    )
}

/// Decodes a client body.
pub fn decode(client: Format, body: &[u8]) -> Result<ir::Request, Refusal> {
    let _ = (client, body);
    Err(Refusal::new("translation is not available yet", "model"))
}

/// Encodes a request for a supplier.
pub fn encode(
    supplier: Format,
    request: &ir::Request,
    options: &Options,
) -> Result<Vec<u8>, Refusal> {
    let _ = (supplier, request, options);
    Err(Refusal::new("translation is not available yet", "model"))
}
