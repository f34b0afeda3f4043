//! The table the console's and the invitation pages' routes are built from (issue 42): every
//! route that changes state is declared with the [`Gate`] that guards it, so the security suite
//! (`tests/api/security.rs`) enumerates them from the router itself; a page can only be added
//! as a `GET` ([`Table::page`]) or as a declared form ([`Table::form`]), never as an
//! undeclared `POST`.

use crate::state::AppState;
use axum::Router;
use axum::handler::Handler;
use axum::routing::{get, post};

/// Who may post to a route. The handlers check it on every request; the table says it so that
/// the security suite can try everyone else.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gate {
    /// A form shown before a session exists (sign-in, a reset, a join link, an invitation): this
    /// site's origin and the double-submit token, or the link's own secret.
    PreSession,
    /// Any signed-in person, about themselves (sign-out, their account page).
    Person,
    /// Members of the organization in the path with one of these roles.
    Org(&'static [&'static str]),
    /// Members of the partner team in the path acting with one of these roles (their team role
    /// capped by the partner's).
    Partner(&'static [&'static str]),
}

/// One state-changing route: `POST path`, guarded by `gate`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Route {
    pub path: &'static str,
    pub gate: Gate,
}

/// Routes and the record of the state-changing ones.
pub struct Table {
    router: Router<AppState>,
    forms: Vec<Route>,
}

impl Default for Table {
    fn default() -> Self {
        Table::new()
    }
}

impl Table {
    pub fn new() -> Table {
        Table {
            router: Router::new(),
            forms: Vec::new(),
        }
    }

    /// A page: `GET` only.
    pub fn page<H, T>(mut self, path: &'static str, page: H) -> Table
    where
        H: Handler<T, AppState>,
        T: 'static,
    {
        self.router = self.router.route(path, get(page));
        self
    }

    /// A form's target (`POST`), guarded by `gate`.
    pub fn form<H, T>(mut self, path: &'static str, gate: Gate, action: H) -> Table
    where
        H: Handler<T, AppState>,
        T: 'static,
    {
        self.router = self.router.route(path, post(action));
        self.forms.push(Route { path, gate });
        self
    }

    /// A page (`GET`) and its form's target (`POST`, guarded by `gate`) at one path.
    pub fn page_and_form<P, TP, A, TA>(
        mut self,
        path: &'static str,
        gate: Gate,
        page: P,
        action: A,
    ) -> Table
    where
        P: Handler<TP, AppState>,
        TP: 'static,
        A: Handler<TA, AppState>,
        TA: 'static,
    {
        self.router = self.router.route(path, get(page).post(action));
        self.forms.push(Route { path, gate });
        self
    }

    /// The router and the state-changing routes.
    pub fn finish(self) -> (Router<AppState>, Vec<Route>) {
        (self.router, self.forms)
    }
}
