//! `[admin]`: where a separate admin-api listens, or that it runs inside the proxy.

use crate::error::{ConfigError, err};
use crate::values::socket_addr;
use serde::Deserialize;
use std::net::SocketAddr;

/// The section as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawAdmin {
    pub listen: Option<String>,
    pub embedded: Option<bool>,
}

#[derive(Debug, Clone)]
pub struct Admin {
    /// Where a separate admin-api listens; `None` only when embedded.
    pub listen: Option<SocketAddr>,
    /// Host admin-api (and the settler) inside the proxy process.
    pub embedded: bool,
}

/// Validates `[admin]`: a separate admin-api needs an address.
pub(crate) fn validate(raw: &RawAdmin) -> Result<Admin, ConfigError> {
    let admin = Admin {
        listen: raw
            .listen
            .as_deref()
            .map(|l| socket_addr(l, "admin.listen"))
            .transpose()?,
        embedded: raw.embedded.unwrap_or(false),
    };
    if !admin.embedded && admin.listen.is_none() {
        return Err(err("admin.listen", "required unless admin.embedded = true"));
    }
    Ok(admin)
}
