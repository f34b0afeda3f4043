//! Per-request state, grouped by the phase that fills it. Created empty by `new_ctx`, filled in
//! request order, read by `logging` to settle.

use crate::meter::Meter;
use crate::route::ModelRoute;
use crate::surface::Route;
use bytes::Bytes;
use opstate::KeyRecord;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Everything the gateway knows about one request.
pub struct RequestCtx {
    pub request_id: String,
    pub started: Instant,
    pub started_at_ms: u64,
    /// Classification: the route, once known.
    pub route: Option<Route>,
    /// Authentication: the caller's key record.
    pub caller: Option<KeyRecord>,
    /// Inspection and routing: the call, once its body was read and its model resolved.
    pub call: Option<Call>,
    /// Admission: the hold on the organization's wallet, settled exactly once in `logging`.
    pub hold: Option<crate::admit::Hold>,
    /// Selection: accounts in the order to try, and those tried so far.
    pub order: Vec<usize>,
    pub tried: Vec<usize>,
    pub first_attempt_at: Option<Instant>,
    /// The model the call asked for when it was downgraded to another.
    pub downgraded_from: Option<String>,
    /// The capacity slot held: the account index (into the upstream list) it is on.
    pub slot: Option<usize>,
    /// The session (a hash of its signal), when the call carries one.
    pub session: Option<String>,
    /// Set by `upstream_response_filter` when a supplier status moves the request to another
    /// account; read once by `error_while_proxy`.
    pub status_failover: bool,
    /// A rate-limited answer without a reset header that reaches the client: the account and the
    /// default cooldown, cooled at the end by the reset hint its body names, if any.
    pub rate_limited_answer: Option<(usize, std::time::Duration)>,
    /// Accounts to cool (a connection failure is noticed in a synchronous hook).
    pub to_cool: Vec<(usize, crate::cooldown::Reason, std::time::Duration)>,
    /// Metering.
    pub meter: Option<Meter>,
    pub ttfb: Option<Duration>,
    /// The bounded label of the error the gateway answered with, if it answered itself.
    pub refusal: Option<&'static str>,
}

/// A generation call after inspection and routing.
pub struct Call {
    /// The model id as the client sent it.
    pub requested_model: String,
    pub model: Arc<ModelRoute>,
    pub stream: bool,
    /// The body forwarded upstream (the original, or a rewritten copy).
    pub body: Bytes,
    /// Size of the client's original body (feeds the usage estimate).
    pub request_bytes: usize,
    /// Audio calls: the duration read from the file at admission, in seconds (the charge when the
    /// supplier reports none).
    pub audio_seconds: Option<u64>,
    /// Attribution headers (`x-tollgate-project`, `x-tollgate-workflow`).
    pub project: Option<String>,
    pub workflow: Option<String>,
}

impl RequestCtx {
    pub fn new() -> RequestCtx {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
            .unwrap_or(0);
        RequestCtx {
            request_id: uuid::Uuid::now_v7().simple().to_string(),
            started: Instant::now(),
            started_at_ms: now,
            route: None,
            caller: None,
            call: None,
            hold: None,
            order: Vec::new(),
            tried: Vec::new(),
            first_attempt_at: None,
            slot: None,
            downgraded_from: None,
            session: None,
            status_failover: false,
            rate_limited_answer: None,
            to_cool: Vec::new(),
            meter: None,
            ttfb: None,
            refusal: None,
        }
    }

    /// The account currently being tried.
    pub fn current(&self) -> Option<usize> {
        self.tried.last().copied()
    }
}

impl Default for RequestCtx {
    fn default() -> Self {
        RequestCtx::new()
    }
}
