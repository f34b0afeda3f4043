//! Who calls the partner API: the principal every partner handler and service works for. Made by
//! the partner gate from a valid token; services take it to scope every read and write to the
//! caller's partner.

use money::RateMultiplier;

/// The authenticated partner of a request.
#[derive(Debug, Clone)]
pub struct Caller {
    pub partner_id: i64,
    pub partner_name: String,
    pub token_id: i64,
    pub token_preview: String,
    pub scopes: Vec<String>,
    pub role: String,
    pub min_rate: RateMultiplier,
}
