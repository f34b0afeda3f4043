//! The one path of every partner write: the `Idempotency-Key` first (a missing key is reported
//! before body errors), then the JSON body into the route's request DTO (`invalid` when it is not
//! JSON or not of that shape), then the service's validation; only then is the key claimed and the
//! work run once in its transaction ([`idempotency::execute`]). Nothing is stored when validation
//! fails, so the key can be retried with a corrected body. Every write that runs is recorded in the
//! partner's audit log with the token that made it, in the write's own transaction.

use crate::caller::Caller;
use crate::error::ApiError;
use crate::partner::idempotency::{self, Request as Identity, Work};
use crate::services::effects::Written;
use crate::state::AppState;
use axum::body::Bytes;
use axum::extract::{FromRequest, OriginalUri, Request};
use axum::http::{HeaderMap, Method};
use axum::response::{IntoResponse, Response};
use futures_util::future::BoxFuture;
use sea_orm::DatabaseTransaction;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

/// A partner write as it arrived: who, what, and the raw body.
pub(crate) struct Write {
    caller: Caller,
    method: Method,
    path: String,
    headers: HeaderMap,
    body: Bytes,
}

/// What a write's work runs with, besides its transaction and its validated input.
pub(crate) struct Op {
    pub state: AppState,
    pub caller: Caller,
    /// Unique per claimed execution: ledger references derive from it (see [`Work`]).
    pub reference: String,
}

impl FromRequest<AppState> for Write {
    type Rejection = Response;

    async fn from_request(req: Request, state: &AppState) -> Result<Write, Response> {
        let caller = req
            .extensions()
            .get::<Caller>()
            .cloned()
            .ok_or_else(|| ApiError::Internal.into_response())?;
        let path = req
            .extensions()
            .get::<OriginalUri>()
            .map_or_else(|| req.uri().path().to_string(), |u| u.0.path().to_string());
        let (method, headers) = (req.method().clone(), req.headers().clone());
        let body = Bytes::from_request(req, state)
            .await
            .map_err(IntoResponse::into_response)?;
        Ok(Write {
            caller,
            method,
            path,
            headers,
            body,
        })
    }
}

/// The parse of a write that takes no body ([`Write::without_body`]).
pub(crate) fn no_body((): ()) -> Result<(), ApiError> {
    Ok(())
}

impl Write {
    /// A write whose identity has no body (`DELETE`): whatever was sent is ignored.
    pub(crate) fn without_body(mut self) -> Write {
        self.body = Bytes::new();
        self
    }

    /// [`Write::run`] for a write whose answer has nothing secret in it and that leaves nothing to
    /// do after its commit: `work` returns the answer itself.
    pub(crate) async fn run_plain<Req, T, D, PE, WE>(
        self,
        state: &AppState,
        invalid: ApiError,
        parse: impl FnOnce(Req) -> Result<T, PE>,
        work: impl for<'t> FnOnce(&'t DatabaseTransaction, Op, T) -> BoxFuture<'t, Result<D, WE>>
        + Send
        + 'static,
    ) -> Response
    where
        Req: DeserializeOwned,
        T: Send + 'static,
        D: Serialize + Clone + Send + 'static,
        WE: 'static,
        ApiError: From<PE> + From<WE>,
    {
        self.run(state, invalid, parse, |txn, op, input| {
            Box::pin(async move { Ok::<_, WE>(Written::plain(work(txn, op, input).await?)) })
        })
        .await
    }

    /// Validates (see the module's order), then runs `work` at most once per key with the
    /// validated input, answering its stored outcome to replays.
    pub(crate) async fn run<Req, T, D, PE, WE>(
        self,
        state: &AppState,
        invalid: ApiError,
        parse: impl FnOnce(Req) -> Result<T, PE>,
        work: impl for<'t> FnOnce(
            &'t DatabaseTransaction,
            Op,
            T,
        ) -> BoxFuture<'t, Result<Written<D>, WE>>
        + Send
        + 'static,
    ) -> Response
    where
        Req: DeserializeOwned,
        T: Send + 'static,
        D: Serialize + Send,
        ApiError: From<PE> + From<WE>,
    {
        let (identity, input) = match self.prepare(invalid, parse) {
            Ok(p) => p,
            Err(e) => return e.into_response(),
        };
        let (s, c) = (state.clone(), self.caller.clone());
        let (method, path) = (self.method.to_string(), self.path.clone());
        let ip = crate::auth::client_ip(&self.headers);
        let run: Work<'_, D> = Box::new(move |txn, reference| {
            let now = s.clock.now();
            let record = crate::services::audit::Audit {
                organization: None,
                partner: Some(c.partner_id),
                actor: None,
                action: "partner_api_write",
                target: Some(format!("{method} {path}")),
                detail: serde_json::json!({
                    "token_id": c.token_id,
                    "token": c.token_preview,
                    "role": c.role,
                }),
                ip,
            };
            let op = Op {
                state: s,
                caller: c,
                reference,
            };
            Box::pin(async move {
                let done = work(txn, op, input).await?;
                // The write and its record, with the token that made it, commit together.
                crate::services::audit::audit(txn, record, now).await?;
                Ok(done)
            })
        });
        idempotency::execute(state, &self.caller, identity, run).await
    }

    fn prepare<Req: DeserializeOwned, T, PE>(
        &self,
        invalid: ApiError,
        parse: impl FnOnce(Req) -> Result<T, PE>,
    ) -> Result<(Identity, T), ApiError>
    where
        ApiError: From<PE>,
    {
        // The key first: a missing key is reported before any body error.
        Identity::new(&self.headers, "", "", &Value::Null)?;
        let body: Value = if self.body.iter().all(u8::is_ascii_whitespace) {
            Value::Null
        } else {
            serde_json::from_slice(&self.body).map_err(|_| invalid.clone())?
        };
        // Only an object (or nothing) is a body: serde would read a JSON array into a struct
        // positionally.
        if !(body.is_object() || body.is_null()) {
            return Err(invalid);
        }
        let request: Req = serde_json::from_value(body.clone()).map_err(|_| invalid)?;
        let input = parse(request)?;
        let identity = Identity::new(&self.headers, self.method.as_str(), &self.path, &body)?;
        Ok((identity, input))
    }
}
