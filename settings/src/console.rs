//! `[console]`: the web console's sessions and sign-in rules (issue 42). Every key is optional.

use crate::error::{ConfigError, err};
use serde::Deserialize;

/// The section as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawConsole {
    pub session_idle_minutes: Option<u64>,
    pub session_absolute_hours: Option<u64>,
    pub require_two_factor: Option<bool>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Console {
    /// A session unused this long ends (default 30 minutes; 1 to 1440).
    pub session_idle_minutes: u64,
    /// A session ends this long after its sign-in however it is used (default 12 hours; 1 to
    /// 720, and not shorter than the idle timeout).
    pub session_absolute_hours: u64,
    /// Partner owners and admins must sign in with two-factor authentication: until they set it
    /// up, their console shows only their account page (default false).
    pub require_two_factor: bool,
}

impl Default for Console {
    fn default() -> Self {
        Console {
            session_idle_minutes: 30,
            session_absolute_hours: 12,
            require_two_factor: false,
        }
    }
}

/// Validates `[console]`.
pub(crate) fn validate(raw: &RawConsole) -> Result<Console, ConfigError> {
    let idle = raw.session_idle_minutes.unwrap_or(30);
    if !(1..=1440).contains(&idle) {
        return Err(err(
            "console.session_idle_minutes",
            "must be between 1 and 1440 (a day)",
        ));
    }
    let absolute = raw.session_absolute_hours.unwrap_or(12);
    if !(1..=720).contains(&absolute) {
        return Err(err(
            "console.session_absolute_hours",
            "must be between 1 and 720 (30 days)",
        ));
    }
    if absolute * 60 < idle {
        return Err(err(
            "console.session_absolute_hours",
            "must not be shorter than console.session_idle_minutes",
        ));
    }
    Ok(Console {
        session_idle_minutes: idle,
        session_absolute_hours: absolute,
        require_two_factor: raw.require_two_factor.unwrap_or(false),
    })
}
