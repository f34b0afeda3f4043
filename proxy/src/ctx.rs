//! Per-request state, grouped by the phase that fills it. Created empty by `new_ctx`, filled in
//! request order, read by `logging` to settle.

use crate::call::{Call, Finished};
use crate::classify::Route;
use crate::errors::{Family, Surface};
use crate::meter::Meter;
use crate::money::admit::Hold;
use crate::route::Decision;
use crate::route::cooldown::{Cooling, UsageLimit};
use crate::upstream::Accounts;
use crate::wire::cells::Reshape;
use bytes::Bytes;
use opstate::KeyRecord;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Everything the gateway knows about one request (opaque outside the crate): who it is, then one
/// group per phase that fills it — admission, attempts, answer.
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
    /// The surface whose error shape the request answers in (known from the path, before the
    /// route is).
    pub(crate) surface: Surface,
    /// Phases 1–3b (`admission.rs`).
    pub(crate) admission: Admission,
    /// Phases 4–5 (`attempt.rs`, `upstream/`).
    pub(crate) attempts: Attempts,
    /// Phase 6 (`answer.rs`).
    pub(crate) answer: Answer,
    /// The call's trace marks, written as spans in `logging` (`telemetry.rs`).
    pub(crate) trace: crate::telemetry::CallTrace,
}

/// What admission learned: the caller, the call, its hold.
#[derive(Default)]
pub(crate) struct Admission {
    /// Authentication: the caller's key record, and its key's keyed hash.
    pub caller: Option<KeyRecord>,
    pub key_hash: Option<String>,
    /// Inspection and routing: the call, once its body was read and its model resolved.
    pub call: Option<Call>,
    /// The hold on the organization's wallet, settled exactly once in `logging` (a video
    /// create's, once its supplier accepted the task, belongs to the task: `video::create`).
    pub hold: Option<Hold>,
    /// A video create: its task's record, `submitting` until the supplier's answer (then as the
    /// answer left it, recorded in the task book at the end: `video::create`).
    pub task: Option<Box<opstate::Task>>,
    /// The bounded label of the error the gateway answered with, if it answered itself.
    pub refusal: Option<&'static str>,
    /// A batch line's signature, verified (`crate::batch`; issue 46). Boxed: rare.
    pub batch: Option<Box<crate::batch_line::Line>>,
}

/// The attempts on accounts: the decision's order and what each attempt left.
#[derive(Default)]
pub(crate) struct Attempts {
    /// Accounts in the order to try, and those tried so far.
    pub order: Vec<usize>,
    pub tried: Vec<usize>,
    pub first_attempt_at: Option<Instant>,
    /// From the first attempt to the supplier's response header (every attempt included): the
    /// `upstream` of `Server-Timing`.
    pub upstream_wait: Option<Duration>,
    /// The model the call asked for when it was downgraded to another.
    pub downgraded_from: Option<String>,
    /// The capacity slot held: the account index (into the upstream list) it is on.
    pub slot: Option<usize>,
    /// The gates (capacity layers) the call holds a slot in besides its account's.
    pub gates: Vec<String>,
    /// The session (a hash of its signal), when the call carries one.
    pub session: Option<String>,
    /// Set by `attempt::judge` when a supplier status moves the request to another account; read
    /// once by `error_while_proxy`.
    pub status_failover: bool,
    /// The last account answered 429: answered in SPEC's shape, cooled at the end.
    pub usage_limit: Option<UsageLimit>,
    /// Accounts to cool (a connection failure is noticed in a synchronous hook).
    pub to_cool: Vec<Cooling>,
    /// The format spoken to the account being tried (`None`: a call without one, audio), and
    /// the body sent to it in that format.
    pub format: Option<translate::Format>,
    pub sending: Bytes,
    /// The attempts the request moved on from (issue 47: the supplier's side of the call).
    pub earlier: Vec<opstate::EarlierAttempt>,
}

impl Attempts {
    /// The next account to try: the first of the order not yet tried.
    pub fn next(&self) -> Option<usize> {
        self.order.iter().copied().find(|i| !self.tried.contains(i))
    }
}

/// The answer on its way to the client.
#[derive(Default)]
pub(crate) struct Answer {
    /// The meter (which also translates a translated cell's answer). Boxed: the context lives
    /// inside Pingora's request future, which is moved by value (a smaller context is a smaller
    /// copy on every move: docs/PERF.md).
    pub meter: Option<Box<Meter>>,
    /// An image answer, or a translated supplier error, rewritten.
    pub reshape: Option<Reshape>,
    /// A video create's accepting answer (2xx), collected whole: the client gets the task's
    /// object instead (`video::create::answered`).
    pub task: Option<Vec<u8>>,
    /// A batch line's answer, collected as the client is sent it (`crate::batch`).
    pub batch: Option<Box<crate::batch_line::Capture>>,
    pub ttfb: Option<Duration>,
    /// Held back from the client since this instant (`answer::hold`): until its content begins,
    /// a supplier whose answer breaks can still be failed over from.
    pub held_since: Option<Instant>,
    /// The status of the answer being read.
    pub status: u16,
    /// The gateway's own time before the answer's header: from arrival to the header, less the
    /// supplier's wait (`Server-Timing`'s `gateway`).
    pub gateway_time: Option<Duration>,
}

impl RequestCtx {
    /// The `Server-Timing` value of an answer whose header is written now: the gateway's time
    /// (remembered for the log and the metric) and the supplier's, in milliseconds.
    pub(crate) fn server_timing(&mut self) -> String {
        let total = self.started.elapsed();
        let upstream = self.attempts.upstream_wait;
        let gateway = total.saturating_sub(upstream.unwrap_or_default());
        self.answer.gateway_time = Some(gateway);
        let mut out = String::with_capacity(48);
        out.push_str("gateway;dur=");
        push_ms(&mut out, gateway);
        if let Some(u) = upstream {
            out.push_str(", upstream;dur=");
            push_ms(&mut out, u);
        }
        out
    }

    /// The surface whose error shape this request answers in.
    pub(crate) fn surface(&self) -> Surface {
        self.route.map(Route::surface).unwrap_or(self.surface)
    }

    /// Follows a routing decision: its order, its slot, its session and downgrade.
    pub(crate) fn follow(&mut self, decision: Decision) {
        self.attempts.slot = decision.order.first().copied();
        self.attempts.gates = decision.gates;
        self.attempts.order = decision.order;
        self.attempts.session = decision.session;
        self.attempts.downgraded_from = decision.downgraded_from;
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
            surface: Surface::Client(Family::OpenAi),
            admission: Admission::default(),
            attempts: Attempts::default(),
            answer: Answer::default(),
            trace: crate::telemetry::CallTrace::default(),
        }
    }

    /// Whether another account may still be tried: one of the order is untried, and fewer than
    /// `max_attempts` were made.
    pub(crate) fn may_retry(&self, max_attempts: u32) -> bool {
        let attempts = u32::try_from(self.attempts.tried.len()).unwrap_or(u32::MAX);
        attempts < max_attempts && self.attempts.next().is_some()
    }

    /// The account currently being tried.
    pub(crate) fn current(&self) -> Option<usize> {
        self.attempts.tried.last().copied()
    }

    /// The request as settlement sees it, once it ended with `status` (0: nothing was sent).
    pub(crate) fn finished<'a>(&'a self, status: u16, accounts: &'a Accounts) -> Finished<'a> {
        Finished {
            request_id: &self.request_id,
            route: self.route,
            status,
            caller: self.admission.caller.as_ref(),
            call: self.admission.call.as_ref(),
            account: self.current().and_then(|i| accounts.id(i)),
            supplier_rate: self
                .current()
                .and_then(|i| accounts.get(i))
                .map(|u| u.account.supplier_price_multiplier),
            earlier: &self.attempts.earlier,
            meter: self.answer.meter.as_deref(),
            images: self
                .answer
                .reshape
                .as_ref()
                .and_then(Reshape::images)
                .or_else(|| self.answer.meter.as_deref().and_then(Meter::images)),
            started_at_ms: self.started_at_ms,
            latency: self.started.elapsed(),
            ttfb: self.answer.ttfb,
            gateway_time: self.answer.gateway_time,
            upstream_wait: self.attempts.upstream_wait,
            attempts: u32::try_from(self.attempts.tried.len()).unwrap_or(u32::MAX),
            refusal: self.admission.refusal,
            batch: self.admission.batch.as_ref().map(|l| &l.batch),
        }
    }
}

/// Appends `d` in milliseconds with three decimals (rounded to the microsecond), in integer
/// arithmetic: a float's formatting cost several times more on every answer.
fn push_ms(out: &mut String, d: Duration) {
    use std::fmt::Write;
    let micros = (d.as_nanos() + 500) / 1000;
    let _ = write!(out, "{}.{:03}", micros / 1000, micros % 1000);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn milliseconds_with_three_decimals() {
        let ms = |d: Duration| {
            let mut s = String::new();
            push_ms(&mut s, d);
            s
        };
        assert_eq!(ms(Duration::ZERO), "0.000");
        assert_eq!(ms(Duration::from_nanos(1_499)), "0.001");
        assert_eq!(ms(Duration::from_nanos(1_500)), "0.002");
        assert_eq!(ms(Duration::from_micros(12_345)), "12.345");
        assert_eq!(ms(Duration::from_secs(61)), "61000.000");
    }

    /// Moved from `route/select.rs` with the function.
    #[test]
    fn never_twice() {
        let mut attempts = Attempts {
            order: vec![2, 0, 1],
            ..Attempts::default()
        };
        assert_eq!(attempts.next(), Some(2));
        attempts.tried = vec![2];
        assert_eq!(attempts.next(), Some(0));
        attempts.tried = vec![2, 0, 1];
        assert_eq!(attempts.next(), None);
    }
}
