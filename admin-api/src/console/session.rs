//! The signed-in person of a console request (`gate` extracts it from the session cookie; the
//! cookies and CSRF checks themselves are in `cookies`).

use crate::auth::same_token;
use entities::{console_sessions, console_users};

/// The signed-in person of a console request.
pub(crate) struct Viewer {
    pub user: console_users::Model,
    pub session: console_sessions::Model,
    pub ip: Option<String>,
}

impl Viewer {
    /// Whether a form's `csrf` field is this session's token.
    pub fn csrf_ok(&self, field: Option<&str>) -> bool {
        field.is_some_and(|f| same_token(f, &self.session.csrf))
    }
}
