//! Usage events outlive a store that loses its data: every event this proxy appended is kept for
//! [`RETENTION`] (at most [`CAPACITY`] events), and when the operational store lost its contents
//! (a `FLUSHDB`, a Redis failover without persistence) they are appended again, flagged `resent`,
//! so no served call becomes free because its event vanished before the settler drained it.
//!
//! Loss is noticed through a marker this proxy keeps in the store (a session record of its own,
//! refreshed every [`CHECK`]): when the marker is gone, the store lost its data. The settler books
//! a re-sent event once (usage records are unique per request id) and never confirms a re-sent
//! event it had already booked (the wallet mirror, reloaded from the ledger, already has it).
//!
//! Bound (documented in docs/ARCHITECTURE.md): an event still undrained [`RETENTION`] after it was
//! appended (the settler down that long) when the store loses its data, or kept only by a proxy
//! that died, is lost.

use opstate::{Sessions, UsageEvent, UsageStream};
use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// How long an appended event is kept for a re-send.
pub(crate) const RETENTION: Duration = Duration::from_secs(120);
/// At most this many events are kept (the oldest go first).
pub(crate) const CAPACITY: usize = 50_000;
/// How often the store's marker is checked.
pub(crate) const CHECK: Duration = Duration::from_secs(1);

/// The events this proxy appended recently.
#[derive(Default)]
pub(crate) struct RecentEvents(Mutex<VecDeque<(Instant, UsageEvent)>>);

impl RecentEvents {
    /// Keeps `event` (an event just appended) for a possible re-send.
    pub fn keep(&self, event: Option<UsageEvent>) {
        let (Some(event), Ok(mut q)) = (event, self.0.lock()) else {
            return;
        };
        let now = Instant::now();
        while q
            .front()
            .is_some_and(|(at, _)| now.duration_since(*at) > RETENTION)
            || q.len() >= CAPACITY
        {
            q.pop_front();
        }
        q.push_back((now, event));
    }

    fn retained(&self) -> Vec<UsageEvent> {
        let now = Instant::now();
        self.0
            .lock()
            .map(|q| {
                q.iter()
                    .filter(|(at, _)| now.duration_since(*at) <= RETENTION)
                    .map(|(_, e)| e.clone())
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// The marker's session key; organization 0 owns no real session.
fn marker(proxy: &str) -> String {
    format!("usage-marker:{proxy}")
}

/// Checks the marker once: sets it when absent, and re-sends the retained events when it was
/// set before and is gone now. Returns how many events were re-sent.
pub(crate) async fn check_once(
    recent: &RecentEvents,
    sessions: &dyn Sessions,
    usage: &dyn UsageStream,
    proxy: &str,
    marked: &mut bool,
) -> usize {
    let key = marker(proxy);
    let present = match sessions.account_of(0, &key).await {
        Ok(v) => v.is_some(),
        Err(_) => return 0,
    };
    let mut resent = 0;
    if *marked && !present {
        for mut event in recent.retained() {
            event.resent = true;
            match usage.append(&event).await {
                Ok(()) => resent += 1,
                Err(e) => {
                    tracing::error!(error = %e, request_id = %event.request_id, "usage event not re-sent");
                    return resent;
                }
            }
        }
        tracing::warn!(
            events = resent,
            "the operational store lost its data: recent usage events re-sent"
        );
    }
    if sessions
        .remember(0, &key, "alive", Duration::from_secs(86_400))
        .await
        .is_ok()
    {
        *marked = true;
    }
    resent
}

/// Watches the store until `shutdown` turns true.
pub(crate) async fn run(
    recent: &RecentEvents,
    stores: impl Fn() -> opstate::Stores,
    proxy: &str,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut marked = false;
    loop {
        let s = stores();
        check_once(
            recent,
            s.sessions.as_ref(),
            s.usage.as_ref(),
            proxy,
            &mut marked,
        )
        .await;
        tokio::select! {
            _ = shutdown.wait_for(|s| *s) => return,
            _ = tokio::time::sleep(CHECK) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]
    use super::*;
    use opstate::{Measurement, Stores};

    fn event(id: &str) -> UsageEvent {
        UsageEvent {
            request_id: id.into(),
            key_id: 1,
            org_id: 2,
            group_id: 1,
            route: "chat_completions".into(),
            model_requested: "m".into(),
            model_served: "m".into(),
            account_id: "a".into(),
            input_tokens: 1,
            output_tokens: 1,
            cached_tokens: 0,
            measurement: Measurement::Exact,
            status: 200,
            stream: false,
            started_at_ms: 0,
            latency_ms: 1,
            ttfb_ms: None,
            attempts: 1,
            cost_nanos: money::NanoUsd::from_nanos(10),
            charged_nanos: money::NanoUsd::from_nanos(10),
            excess_nanos: money::NanoUsd::ZERO,
            hold_nanos: money::NanoUsd::from_nanos(10),
            project: None,
            workflow: None,
            audio_seconds: 0,
            retail_rate: None,
            wholesale_rate: None,
            resent: false,
        }
    }

    #[tokio::test]
    async fn a_lost_store_gets_the_recent_events_again() {
        let recent = RecentEvents::default();
        recent.keep(Some(event("r1")));
        recent.keep(None);
        let before = Stores::memory();
        let mut marked = false;
        let n = check_once(
            &recent,
            before.sessions.as_ref(),
            before.usage.as_ref(),
            "p",
            &mut marked,
        )
        .await;
        assert_eq!(
            (n, marked),
            (0, true),
            "the first check only sets the marker"
        );
        let n = check_once(
            &recent,
            before.sessions.as_ref(),
            before.usage.as_ref(),
            "p",
            &mut marked,
        )
        .await;
        assert_eq!(n, 0, "marker present: nothing lost");
        // The store lost everything (a fresh one stands for a flushed Redis).
        let after = Stores::memory();
        let n = check_once(
            &recent,
            after.sessions.as_ref(),
            after.usage.as_ref(),
            "p",
            &mut marked,
        )
        .await;
        assert_eq!(n, 1);
        let got = after
            .usage
            .claim("t", 10, Duration::from_secs(60))
            .await
            .unwrap();
        assert_eq!(got.len(), 1);
        assert!(got[0].event.resent);
        assert_eq!(got[0].event.request_id, "r1");
        let n = check_once(
            &recent,
            after.sessions.as_ref(),
            after.usage.as_ref(),
            "p",
            &mut marked,
        )
        .await;
        assert_eq!(n, 0, "the marker is back: no second re-send");
    }
}
