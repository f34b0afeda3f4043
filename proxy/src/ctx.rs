//! Per-request state, grouped by the phase that fills it. Created empty by `new_ctx`, filled in
//! request order, read by `logging` to settle.

use crate::call::Call;
use crate::classify::Route;
use crate::errors::Surface;
use crate::meter::Meter;
use crate::money::admit::Hold;
use crate::money::settle::Finished;
use crate::route::Decision;
use crate::route::cooldown::{Cooling, UsageLimit};
use crate::upstream::Accounts;
use crate::wire::cells::Reshape;
use bytes::Bytes;
use opstate::KeyRecord;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Everything the gateway knows about one request (opaque outside the crate).
pub struct RequestCtx {
    /// Counts this request in the gateway's requests in flight until it is dropped.
    _in_flight: InFlight,
    /// The configuration this request runs on from start to settlement (a reload swaps the
    /// gateway's, never a request's).
    pub(crate) live: Arc<crate::live::Live>,
    pub(crate) request_id: String,
    pub(crate) started: Instant,
    pub(crate) started_at_ms: u64,
    /// Classification: the route, once known.
    pub(crate) route: Option<Route>,
    /// Authentication: the caller's key record, and its key's keyed hash.
    pub(crate) caller: Option<KeyRecord>,
    pub(crate) key_hash: Option<String>,
    /// Inspection and routing: the call, once its body was read and its model resolved.
    pub(crate) call: Option<Call>,
    /// Admission: the hold on the organization's wallet, settled exactly once in `logging`.
    pub(crate) hold: Option<Hold>,
    /// Selection: accounts in the order to try, and those tried so far.
    pub(crate) order: Vec<usize>,
    pub(crate) tried: Vec<usize>,
    pub(crate) first_attempt_at: Option<Instant>,
    /// The model the call asked for when it was downgraded to another.
    pub(crate) downgraded_from: Option<String>,
    /// The capacity slot held: the account index (into the upstream list) it is on.
    pub(crate) slot: Option<usize>,
    /// The gates (capacity layers) the call holds a slot in besides its account's.
    pub(crate) gates: Vec<String>,
    /// The session (a hash of its signal), when the call carries one.
    pub(crate) session: Option<String>,
    /// Set by `upstream_response_filter` when a supplier status moves the request to another
    /// account; read once by `error_while_proxy`.
    pub(crate) status_failover: bool,
    /// The last account answered 429: answered in SPEC's shape, cooled at the end.
    pub(crate) usage_limit: Option<UsageLimit>,
    /// Accounts to cool (a connection failure is noticed in a synchronous hook).
    pub(crate) to_cool: Vec<Cooling>,
    /// The body sent to the account being tried (in its format).
    pub(crate) sending: Bytes,
    /// A translated cell: the supplier's answer on its way to the client's format.
    pub(crate) reshape: Option<Reshape>,
    /// The surface whose error shape the request answers in (known from the path, before the
    /// route is).
    pub(crate) surface: Surface,
    /// Metering.
    pub(crate) meter: Option<Meter>,
    pub(crate) ttfb: Option<Duration>,
    /// The bounded label of the error the gateway answered with, if it answered itself.
    pub(crate) refusal: Option<&'static str>,
}

impl RequestCtx {
    /// The surface whose error shape this request answers in.
    pub(crate) fn surface(&self) -> Surface {
        self.route.map(Route::surface).unwrap_or(self.surface)
    }

    /// Follows a routing decision: its order, its slot, its session and downgrade.
    pub(crate) fn follow(&mut self, decision: Decision) {
        self.slot = decision.order.first().copied();
        self.gates = decision.gates;
        self.order = decision.order;
        self.session = decision.session;
        self.downgraded_from = decision.downgraded_from;
    }

    pub(crate) fn new(
        live: Arc<crate::live::Live>,
        in_flight: &Arc<std::sync::atomic::AtomicUsize>,
    ) -> RequestCtx {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
            .unwrap_or(0);
        RequestCtx {
            _in_flight: InFlight::count(in_flight),
            live,
            request_id: uuid::Uuid::now_v7().simple().to_string(),
            started: Instant::now(),
            started_at_ms: now,
            route: None,
            caller: None,
            key_hash: None,
            call: None,
            hold: None,
            order: Vec::new(),
            tried: Vec::new(),
            first_attempt_at: None,
            slot: None,
            gates: Vec::new(),
            downgraded_from: None,
            session: None,
            status_failover: false,
            usage_limit: None,
            to_cool: Vec::new(),
            sending: Bytes::new(),
            reshape: None,
            surface: Surface::OpenAi,
            meter: None,
            ttfb: None,
            refusal: None,
        }
    }

    /// Whether another account may still be tried: one of the order is untried, and fewer than
    /// `max_attempts` were made.
    pub(crate) fn may_retry(&self, max_attempts: u32) -> bool {
        let attempts = u32::try_from(self.tried.len()).unwrap_or(u32::MAX);
        attempts < max_attempts && crate::route::select::next(&self.order, &self.tried).is_some()
    }

    /// The account currently being tried.
    pub(crate) fn current(&self) -> Option<usize> {
        self.tried.last().copied()
    }

    /// The request as settlement sees it, once it ended with `status` (0: nothing was sent).
    pub(crate) fn finished<'a>(&'a self, status: u16, accounts: &'a Accounts) -> Finished<'a> {
        Finished {
            request_id: &self.request_id,
            route: self.route,
            status,
            caller: self.caller.as_ref(),
            call: self.call.as_ref(),
            account: self.current().and_then(|i| accounts.id(i)),
            meter: self.meter.as_ref(),
            images: self
                .reshape
                .as_ref()
                .and_then(Reshape::images)
                .or_else(|| self.meter.as_ref().and_then(Meter::images)),
            started_at_ms: self.started_at_ms,
            latency: self.started.elapsed(),
            ttfb: self.ttfb,
            attempts: u32::try_from(self.tried.len()).unwrap_or(u32::MAX),
            refusal: self.refusal,
        }
    }
}

/// One request counted in flight, from its context's creation to its drop (whatever path ends
/// it): what a graceful stop waits for.
struct InFlight(Arc<std::sync::atomic::AtomicUsize>);

impl InFlight {
    fn count(counter: &Arc<std::sync::atomic::AtomicUsize>) -> InFlight {
        counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        InFlight(counter.clone())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}
