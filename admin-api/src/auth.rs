//! Presented tokens: the one place where a partner token, an organization billing token or an
//! invitation token is read from a request and turned into the keyed hash its row is found by.
//!
//! Only hashes are stored (`KeyHasher`, peppered); a token is checked for its form first (kind
//! and environment for the prefixed credentials, length for invitation links), so a malformed
//! token never reaches the database. What a valid row then allows is the caller's decision.
//! Also the request's client address as admin-api's middleware set it, and constant-time token
//! comparison: facts of a request every layer may read.

use axum::http::{HeaderMap, header};
use credentials::{Env, KeyHasher, Kind};

/// The kinds of presented token admin-api accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenKind {
    /// `Authorization: Bearer tgp_…` on the partner API.
    Partner,
    /// `Authorization: Bearer` or `X-Organization-Billing-Token` on the billing API.
    Billing,
    /// The path segment of an invitation link (43 random characters; at most 100 accepted).
    Invitation,
}

/// The keyed hash to look `presented` up by, or `None` when it is not a well-formed token of
/// `kind` for this deployment's environment (a customer key on the partner API, a development
/// token on a production deployment, an over-long invitation link).
pub fn token_hash(
    hasher: &KeyHasher,
    env: Env,
    kind: TokenKind,
    presented: &str,
) -> Option<String> {
    let well_formed = match kind {
        TokenKind::Partner => credentials::check(presented, Kind::PartnerToken, env).is_ok(),
        TokenKind::Billing => credentials::check(presented, Kind::BillingToken, env).is_ok(),
        TokenKind::Invitation => !presented.is_empty() && presented.len() <= 100,
    };
    well_formed.then(|| hasher.hash(presented))
}

/// The bearer token of a request, if any.
pub fn bearer(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(header::AUTHORIZATION)?
        .to_str()
        .ok()?
        .trim()
        .split_once(' ')
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, token)| token.trim())
        .filter(|t| !t.is_empty())
}

/// The billing token of a request: `Authorization: Bearer` or `X-Organization-Billing-Token`.
pub fn billing_token(headers: &HeaderMap) -> Option<&str> {
    bearer(headers).or_else(|| {
        headers
            .get("x-organization-billing-token")
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
            .filter(|t| !t.is_empty())
    })
}

/// The header admin-api's middleware (`http::client_address`) sets to the client's address, as
/// the gateway does on the routes it forwards.
pub const CLIENT_ADDRESS: &str = "x-tollgate-client-ip";

/// The client's address, as `http::client_address` worked it out for this request (DESIGN §6c:
/// the TCP peer, or the right-most untrusted `X-Forwarded-For` entry behind `[server]
/// trusted_proxies`, or the gateway's header from loopback or a trusted proxy).
pub fn client_ip(headers: &HeaderMap) -> Option<String> {
    headers
        .get(CLIENT_ADDRESS)
        .and_then(|v| v.to_str().ok())
        .filter(|v| v.len() <= 64 && v.parse::<std::net::IpAddr>().is_ok())
        .map(str::to_string)
}

/// Constant-time equality of two tokens.
pub fn same_token(a: &str, b: &str) -> bool {
    use subtle::ConstantTimeEq;
    !a.is_empty() && a.len() == b.len() && bool::from(a.as_bytes().ct_eq(b.as_bytes()))
}
