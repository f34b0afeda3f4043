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
//! With `server.usage_spool_dir` the events are also appended to files there ([`Spool`], one file
//! per minute and process, flushed every [`CHECK`], files older than [`RETENTION`] deleted), and a
//! starting gateway re-sends what the files still hold: a gateway that died and a store that lost
//! its data together lose nothing older than the last flush. Re-sending is always safe: the settler
//! books an event once and skips a re-sent copy of a booked one.
//!
//! Bound (documented in docs/ARCHITECTURE.md): an event still undrained [`RETENTION`] after it was
//! appended (the settler down that long) when the store loses its data is lost; so is one kept
//! only in the memory of a gateway that died (no spool, or the last second before the crash).
//!
//! Two losses are smaller than a whole store, and both are mended by running a call's money step
//! (`Calls::finish`: settle the hold, append the event) again, which is safe to repeat: a hold
//! already settled is not charged twice, and the settler books a request id once.
//! - **An end the store did not take** (its shard failing over, a timeout): settlement hands it
//!   back ([`Unfinished`]); its hold stays listed for renewal, and the watcher runs the step again
//!   every [`CHECK`] until the store answers, in order (at most [`CAPACITY`] wait; past that the
//!   oldest is logged in full as lost and its hold left to the reconciler).
//! - **A failover that lost the last writes.** Redis replicates asynchronously: a replica promoted
//!   after its master died may lack the master's last acknowledged writes, among them a call's
//!   end (its hold settled, its event appended, in one script) and even its hold. The watcher
//!   asks every [`CHECK`] which server process keeps each usage stream (`UsageStream::homes`, the
//!   Redis `run_id`); when one changed, the retained events of the organizations kept there have
//!   their step run again, flagged `resent`. A hold the new master still has is settled at the
//!   call's price (as the lost end would have); a hold it never had charges nothing in the store,
//!   and the settler charges the event from the ledger wallet (at most its balance) and debits
//!   the mirror; an end that did survive finds its hold settled and its copy is skipped.

use crate::metrics::Metrics;
use crate::money::renew::LiveHolds;
use money::NanoUsd;
use opstate::{Calls, Finish, Sessions, UsageEvent, UsageStream};
use std::collections::VecDeque;
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::sync::watch;

/// How long an appended event is kept for a re-send.
pub(crate) const RETENTION: Duration = Duration::from_secs(120);
/// At most this many events are kept (the oldest go first).
pub(crate) const CAPACITY: usize = 50_000;
/// How often the store's marker is checked.
pub(crate) const CHECK: Duration = Duration::from_secs(1);

/// A call's end (its money step) the store did not take: run again until it does.
pub(crate) struct Unfinished {
    /// The hold to settle: (organization, hold id).
    hold: Option<(i64, String)>,
    /// What the call cost.
    cost: NanoUsd,
    /// The usage event to append.
    event: Option<UsageEvent>,
}

impl Unfinished {
    pub fn new(hold: Option<(i64, String)>, cost: NanoUsd, event: Option<UsageEvent>) -> Self {
        Unfinished { hold, cost, event }
    }

    /// Its usage event.
    pub fn event(&self) -> Option<&UsageEvent> {
        self.event.as_ref()
    }

    /// The hold it settles: (organization, hold id).
    pub fn hold(&self) -> Option<(i64, &str)> {
        self.hold.as_ref().map(|(org, id)| (*org, id.as_str()))
    }

    /// The end of a retained event, to run again after a failover (flagged `resent`).
    fn again(mut event: UsageEvent) -> Self {
        event.resent = true;
        let hold = event
            .hold_nanos
            .is_positive()
            .then(|| (event.org_id, event.request_id.clone()));
        Unfinished {
            hold,
            cost: event.cost_nanos,
            event: Some(event),
        }
    }
}

/// The events this proxy appended recently, and the ends the store has still to take.
#[derive(Default)]
pub(crate) struct RecentEvents {
    events: Mutex<VecDeque<(Instant, UsageEvent)>>,
    /// Ends to store again, oldest first.
    unfinished: Mutex<VecDeque<Unfinished>>,
    spool: Option<Spool>,
    /// Nothing kept in memory: the store is this process's own memory, which cannot lose its
    /// data while the process lives (the spool, if any, still covers a restart).
    memory_off: bool,
}

impl RecentEvents {
    /// Recent events kept in memory and, with a spool, on disk.
    pub fn with_spool(spool: Option<Spool>) -> RecentEvents {
        RecentEvents {
            events: Mutex::default(),
            unfinished: Mutex::default(),
            spool,
            memory_off: false,
        }
    }

    /// The same, keeping nothing in memory (an in-memory store: see `memory_off`).
    pub fn without_memory(mut self) -> RecentEvents {
        self.memory_off = true;
        self
    }

    /// Keeps `event` (an event just appended) for a possible re-send.
    pub fn keep(&self, event: Option<UsageEvent>) {
        let Some(event) = event else {
            return;
        };
        if let Some(spool) = &self.spool {
            spool.write(&event);
        }
        if self.memory_off {
            return;
        }
        let Ok(mut q) = self.events.lock() else {
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

    /// Keeps an end the store did not take, for the watcher to store (see [`store_unfinished`]).
    pub fn unfinished(&self, end: Unfinished, metrics: &Metrics) {
        if end.hold.is_none() && end.event.is_none() {
            return;
        }
        self.wait(vec![end], metrics);
    }

    /// Queues `ends` behind the ends already waiting; past [`CAPACITY`] the oldest are lost.
    fn wait(&self, ends: Vec<Unfinished>, metrics: &Metrics) {
        let Ok(mut q) = self.unfinished.lock() else {
            return;
        };
        q.extend(ends);
        while q.len() > CAPACITY {
            if let Some(end) = q.pop_front()
                && let Some(event) = &end.event
            {
                lost(metrics, event, "too many call ends waiting for the store");
            }
        }
        metrics
            .call_ends_waiting
            .set(i64::try_from(q.len()).unwrap_or(i64::MAX));
    }

    fn retained(&self) -> Vec<UsageEvent> {
        let now = Instant::now();
        self.events
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
        resent = resend(recent.retained(), usage).await;
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

/// Appends `events` again, flagged `resent`; stops at the first store error. Returns how many.
async fn resend(events: Vec<UsageEvent>, usage: &dyn UsageStream) -> usize {
    let mut sent = 0;
    for mut event in events {
        event.resent = true;
        if let Err(e) = usage.append(&event).await {
            tracing::error!(error = %e, request_id = %event.request_id, "usage event not re-sent");
            break;
        }
        sent += 1;
    }
    sent
}

/// Runs the waiting ends' money step again, oldest first, until the store refuses one (it and
/// those behind it wait for the next round). Returns how many were stored.
pub(crate) async fn store_unfinished(
    recent: &RecentEvents,
    calls: &dyn Calls,
    live: &LiveHolds,
    metrics: &Metrics,
) -> usize {
    let ends: Vec<Unfinished> = match recent.unfinished.lock() {
        Ok(mut q) => q.drain(..).collect(),
        Err(_) => return 0,
    };
    let mut stored = 0;
    let mut ends = ends.into_iter();
    while let Some(mut end) = ends.next() {
        let step = Finish {
            slot: None,
            gates: &[],
            hold: end.hold(),
            cost: end.cost,
            event: end.event.as_ref(),
        };
        match calls.finish(step).await {
            Ok(settlement) => {
                stored += 1;
                if let Some((_, id)) = end.hold() {
                    live.remove(id);
                }
                if let Some(e) = end.event.as_mut() {
                    (e.charged_nanos, e.excess_nanos) = opstate::charged(settlement, end.cost);
                    let reason = if e.resent { "failover" } else { "unstored" };
                    metrics.call_ends_redone.with_label_values(&[reason]).inc();
                    if e.resent {
                        tracing::debug!(request_id = %e.request_id, org = e.org_id, charged = e.charged_nanos.nanos(), "call end stored again after a failover");
                    } else {
                        tracing::info!(request_id = %e.request_id, org = e.org_id, charged = e.charged_nanos.nanos(), "call end stored after the store answered again");
                    }
                }
                recent.keep(end.event.take());
            }
            Err(e) => {
                tracing::warn!(error = %e, "call ends still not stored; retrying");
                let mut back = vec![end];
                back.extend(ends);
                // In front of any end queued meanwhile.
                if let Ok(mut q) = recent.unfinished.lock() {
                    let later: Vec<Unfinished> = q.drain(..).collect();
                    q.extend(back);
                    q.extend(later);
                }
                break;
            }
        }
    }
    let waiting = recent.unfinished.lock().map_or(0, |q| q.len());
    metrics
        .call_ends_waiting
        .set(i64::try_from(waiting).unwrap_or(i64::MAX));
    stored
}

/// Compares which server keeps each usage stream with `last` (updated): where it changed, the
/// retained events of the organizations kept there have their end run again (queued behind the
/// waiting ends). Returns how many were queued.
pub(crate) async fn check_homes(
    recent: &RecentEvents,
    usage: &dyn UsageStream,
    last: &mut Vec<Option<String>>,
    metrics: &Metrics,
) -> usize {
    let Ok(now) = usage.homes().await else {
        return 0;
    };
    let moved = opstate::moved_homes(last, now);
    if moved.is_empty() {
        return 0;
    }
    let again: Vec<Unfinished> = recent
        .retained()
        .into_iter()
        .filter(|e| moved.contains(&usage.home_of(e.org_id)))
        .map(Unfinished::again)
        .collect();
    let n = again.len();
    tracing::warn!(
        streams = ?moved,
        events = n,
        "the server keeping usage streams changed (a failover or a restart): the recent calls' ends are stored again"
    );
    recent.wait(again, metrics);
    n
}

/// Watches the store until `shutdown` turns true; first re-sends what the spool kept from before
/// this gateway started. Each round: the marker (a store that lost everything), the homes of the
/// usage streams (a failover), then the ends waiting to be stored.
pub(crate) async fn run(
    recent: &RecentEvents,
    stores: impl Fn() -> opstate::Stores,
    proxy: &str,
    live: &LiveHolds,
    metrics: &Metrics,
    mut shutdown: watch::Receiver<bool>,
) {
    if let Some(spool) = &recent.spool {
        let kept = spool.load();
        if !kept.is_empty() {
            let sent = resend(kept, stores().usage.as_ref()).await;
            tracing::warn!(
                events = sent,
                "usage events spooled before this start re-sent"
            );
        }
    }
    let mut marked = false;
    let mut homes = Vec::new();
    loop {
        let s = stores();
        let resent = check_once(
            recent,
            s.sessions.as_ref(),
            s.usage.as_ref(),
            proxy,
            &mut marked,
        )
        .await;
        if resent > 0 {
            // Everything retained was just re-sent: only note where the streams live now.
            homes.clear();
        }
        check_homes(recent, s.usage.as_ref(), &mut homes, metrics).await;
        store_unfinished(recent, s.calls.as_ref(), live, metrics).await;
        if let Some(spool) = &recent.spool {
            spool.maintain();
        }
        tokio::select! {
            _ = shutdown.wait_for(|s| *s) => break,
            _ = tokio::time::sleep(CHECK) => {}
        }
    }
    // Stopping: a last try, then what the store never took is logged in full (to be replayed)
    // and its hold left to the reconciler.
    store_unfinished(recent, stores().calls.as_ref(), live, metrics).await;
    let left: Vec<Unfinished> = recent
        .unfinished
        .lock()
        .map(|mut q| q.drain(..).collect())
        .unwrap_or_default();
    for end in left {
        if let Some(event) = &end.event {
            lost(
                metrics,
                event,
                "the proxy stopped before the store took the call's end",
            );
        }
    }
}

/// Recent usage events on disk: append-only JSON lines, one file per minute and process
/// (`usage-{minute}-{pid}.jsonl`), written through a buffer flushed every [`CHECK`].
pub(crate) struct Spool {
    dir: PathBuf,
    current: Mutex<Option<(u64, std::io::BufWriter<std::fs::File>)>>,
}

fn minute_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() / 60)
        .unwrap_or(0)
}

/// The minute a spool file was written in, from its name.
fn minute_of(path: &Path) -> Option<u64> {
    let name = path.file_name()?.to_str()?;
    name.strip_prefix("usage-")?.split('-').next()?.parse().ok()
}

impl Spool {
    /// A spool in `dir` (created when missing).
    pub fn open(dir: &Path) -> std::io::Result<Spool> {
        std::fs::create_dir_all(dir)?;
        Ok(Spool {
            dir: dir.to_path_buf(),
            current: Mutex::new(None),
        })
    }

    fn write(&self, event: &UsageEvent) {
        let Ok(line) = serde_json::to_string(event) else {
            return;
        };
        let Ok(mut current) = self.current.lock() else {
            return;
        };
        let minute = minute_now();
        if current.as_ref().is_none_or(|(m, _)| *m != minute) {
            if let Some((_, w)) = current.as_mut() {
                let _ = w.flush();
            }
            let path = self
                .dir
                .join(format!("usage-{minute}-{}.jsonl", std::process::id()));
            match std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&path)
            {
                Ok(f) => *current = Some((minute, std::io::BufWriter::new(f))),
                Err(e) => {
                    tracing::error!(error = %e, path = %path.display(), "usage spool not writable");
                    return;
                }
            }
        }
        if let Some((_, w)) = current.as_mut()
            && let Err(e) = writeln!(w, "{line}")
        {
            tracing::error!(error = %e, "usage spool write failed");
        }
    }

    /// Flushes the current file and deletes files older than [`RETENTION`] (plus a minute).
    fn maintain(&self) {
        if let Ok(mut current) = self.current.lock()
            && let Some((_, w)) = current.as_mut()
        {
            let _ = w.flush();
        }
        let oldest = minute_now().saturating_sub(RETENTION.as_secs() / 60 + 1);
        for path in self.files() {
            if minute_of(&path).is_some_and(|m| m < oldest) {
                let _ = std::fs::remove_file(path);
            }
        }
    }

    fn files(&self) -> Vec<PathBuf> {
        std::fs::read_dir(&self.dir)
            .map(|entries| {
                entries
                    .filter_map(|e| e.ok().map(|e| e.path()))
                    .filter(|p| minute_of(p).is_some())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The events of the files still within [`RETENTION`] (a torn last line is skipped).
    fn load(&self) -> Vec<UsageEvent> {
        let oldest = minute_now().saturating_sub(RETENTION.as_secs() / 60 + 1);
        let mut out = Vec::new();
        for path in self.files() {
            if minute_of(&path).is_some_and(|m| m < oldest) {
                continue;
            }
            let Ok(f) = std::fs::File::open(&path) else {
                continue;
            };
            for line in std::io::BufReader::new(f).lines().map_while(Result::ok) {
                if let Ok(e) = serde_json::from_str::<UsageEvent>(&line) {
                    out.push(e);
                }
            }
        }
        out
    }
}

/// An event the store never took: logged in full (to be replayed) and counted.
pub(crate) fn lost(metrics: &Metrics, event: &UsageEvent, error: &str) {
    metrics.usage_events_lost.inc();
    let json = serde_json::to_string(event).unwrap_or_default();
    tracing::error!(
        request_id = %event.request_id,
        error,
        usage_event = %json,
        "usage event could not be appended to the usage stream"
    );
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
            cache_write_tokens: 0,
            cache_write_1h_tokens: 0,
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
            images: 0,
            video_seconds: 0,
            retail_rate: None,
            wholesale_rate: None,
            resent: false,
            supplier: Default::default(),
            batch: None,
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

    /// Calls over a memory store whose end step fails while `down` is set.
    struct Flaky {
        inner: Stores,
        down: std::sync::atomic::AtomicBool,
    }

    #[async_trait::async_trait]
    impl Calls for Flaky {
        async fn admit(
            &self,
            accounts: &[opstate::SlotAsk<'_>],
            slot_id: &str,
            slot_ttl: Duration,
            limits: opstate::Limits<'_>,
            hold: Option<opstate::HoldAsk<'_>>,
        ) -> opstate::StoreResult<opstate::Admitted> {
            self.inner
                .calls
                .admit(accounts, slot_id, slot_ttl, limits, hold)
                .await
        }

        async fn finish(&self, f: Finish<'_>) -> opstate::StoreResult<Option<opstate::Settlement>> {
            if self.down.load(std::sync::atomic::Ordering::SeqCst) {
                return Err(opstate::StoreError::Unavailable(
                    "shard failing over".into(),
                ));
            }
            self.inner.calls.finish(f).await
        }

        async fn resolve(
            &self,
            org: i64,
            hold_id: &str,
            cost: NanoUsd,
            event: &UsageEvent,
        ) -> opstate::StoreResult<opstate::Settlement> {
            self.inner.calls.resolve(org, hold_id, cost, event).await
        }
    }

    /// A usage stream over a memory store whose servers are named by the test; organization N
    /// lives on server N mod 2.
    struct Homes {
        inner: Stores,
        homes: Mutex<Vec<Option<String>>>,
    }

    #[async_trait::async_trait]
    impl UsageStream for Homes {
        async fn append(&self, event: &UsageEvent) -> opstate::StoreResult<()> {
            self.inner.usage.append(event).await
        }
        async fn claim(
            &self,
            consumer: &str,
            max: usize,
            min_idle: Duration,
        ) -> opstate::StoreResult<Vec<opstate::StreamEntry>> {
            self.inner.usage.claim(consumer, max, min_idle).await
        }
        async fn ack(&self, ids: &[String]) -> opstate::StoreResult<()> {
            self.inner.usage.ack(ids).await
        }
        async fn backlog(&self) -> opstate::StoreResult<u64> {
            self.inner.usage.backlog().await
        }
        async fn homes(&self) -> opstate::StoreResult<Vec<Option<String>>> {
            Ok(self.homes.lock().unwrap().clone())
        }
        fn home_of(&self, org: i64) -> usize {
            usize::try_from(org.rem_euclid(2)).unwrap()
        }
    }

    fn nanos(n: i64) -> money::NanoUsd {
        money::NanoUsd::from_nanos(n)
    }

    async fn wallet_with_hold(stores: &Stores, org: i64, hold: &str) {
        stores.wallets.load(org, nanos(1_000)).await.unwrap();
        stores
            .wallets
            .reserve(org, hold, nanos(10), 60_000, "{}")
            .await
            .unwrap();
    }

    #[tokio::test]
    async fn an_end_the_store_did_not_take_is_stored_once_it_answers() {
        let stores = Stores::memory();
        wallet_with_hold(&stores, 2, "r1").await;
        let flaky = Flaky {
            inner: stores.clone(),
            down: std::sync::atomic::AtomicBool::new(true),
        };
        let metrics = Metrics::new().unwrap();
        let live = LiveHolds::default();
        live.insert("r1", 2);
        let recent = RecentEvents::default();
        let mut e = event("r1");
        (e.charged_nanos, e.excess_nanos) = (money::NanoUsd::ZERO, nanos(7));
        recent.unfinished(
            Unfinished::new(Some((2, "r1".into())), nanos(7), Some(e)),
            &metrics,
        );
        recent.unfinished(Unfinished::new(None, money::NanoUsd::ZERO, None), &metrics);
        assert_eq!(
            metrics.call_ends_waiting.get(),
            1,
            "an empty end is not kept"
        );

        // The store is still down: nothing stored, the end waits, its hold stays open.
        assert_eq!(store_unfinished(&recent, &flaky, &live, &metrics).await, 0);
        assert_eq!(metrics.call_ends_waiting.get(), 1);
        let w = stores.wallets.snapshot(2).await.unwrap().unwrap();
        assert_eq!((w.balance, w.reserved), (nanos(1_000), nanos(10)));
        assert!(
            stores
                .usage
                .claim("t", 10, Duration::from_secs(60))
                .await
                .unwrap()
                .is_empty()
        );

        // It answers: the hold is settled at the call's price and the event appended, once.
        flaky.down.store(false, std::sync::atomic::Ordering::SeqCst);
        assert_eq!(store_unfinished(&recent, &flaky, &live, &metrics).await, 1);
        assert_eq!(store_unfinished(&recent, &flaky, &live, &metrics).await, 0);
        assert_eq!(metrics.call_ends_waiting.get(), 0);
        let w = stores.wallets.snapshot(2).await.unwrap().unwrap();
        assert_eq!((w.balance, w.reserved), (nanos(993), money::NanoUsd::ZERO));
        let got = stores
            .usage
            .claim("t", 10, Duration::from_secs(60))
            .await
            .unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].event.charged_nanos, nanos(7));
        assert!(!got[0].event.resent);
        assert!(live.is_empty(), "its hold is no longer renewed");
        // Kept for a re-send with what it was charged.
        let kept = recent.retained();
        assert_eq!(kept.len(), 1);
        assert_eq!(kept[0].charged_nanos, nanos(7));
        assert_eq!(
            metrics
                .call_ends_redone
                .with_label_values(&["unstored"])
                .get(),
            1
        );
    }

    #[test]
    fn past_its_capacity_the_oldest_waiting_end_is_logged_as_lost() {
        let metrics = Metrics::new().unwrap();
        let recent = RecentEvents::default();
        let ends = (0..=CAPACITY)
            .map(|n| Unfinished::new(None, money::NanoUsd::ZERO, Some(event(&format!("e{n}")))))
            .collect();
        recent.wait(ends, &metrics);
        assert_eq!(
            metrics.call_ends_waiting.get(),
            i64::try_from(CAPACITY).unwrap()
        );
        assert_eq!(metrics.usage_events_lost.get(), 1, "one end past the bound");
        let q = recent.unfinished.lock().unwrap();
        assert_eq!(
            q.front().and_then(|u| u.event()).unwrap().request_id,
            "e1",
            "the oldest went"
        );
    }

    #[tokio::test]
    async fn a_failover_stores_the_recent_ends_of_the_moved_streams_again() {
        let stores = Stores::memory();
        // Organization 2's end was lost with the old master: the new one still has its hold.
        wallet_with_hold(&stores, 2, "lost-end").await;
        // Organization 4's hold and end were both lost: the new master never saw the call.
        stores.wallets.load(4, nanos(1_000)).await.unwrap();
        // Organization 3 lives on the other server, which did not change.
        let usage = Homes {
            inner: stores.clone(),
            homes: Mutex::new(vec![Some("a".into()), Some("b".into())]),
        };
        let metrics = Metrics::new().unwrap();
        let live = LiveHolds::default();
        let recent = RecentEvents::default();
        for (id, org) in [("lost-end", 2), ("lost-all", 4), ("other", 3)] {
            let mut e = event(id);
            e.org_id = org;
            (e.cost_nanos, e.charged_nanos, e.hold_nanos) = (nanos(7), nanos(7), nanos(10));
            recent.keep(Some(e));
        }
        let mut last = Vec::new();
        assert_eq!(check_homes(&recent, &usage, &mut last, &metrics).await, 0);
        // Server 1 does not answer for a round: nothing moves.
        *usage.homes.lock().unwrap() = vec![Some("a".into()), None];
        assert_eq!(check_homes(&recent, &usage, &mut last, &metrics).await, 0);
        assert_eq!(last, vec![Some("a".into()), Some("b".into())]);
        // Server 0's replica took over.
        *usage.homes.lock().unwrap() = vec![Some("a2".into()), Some("b".into())];
        assert_eq!(check_homes(&recent, &usage, &mut last, &metrics).await, 2);
        assert_eq!(check_homes(&recent, &usage, &mut last, &metrics).await, 0);
        assert_eq!(
            store_unfinished(&recent, stores.calls.as_ref(), &live, &metrics).await,
            2
        );

        // The hold the new master had is settled at the call's price.
        let w = stores.wallets.snapshot(2).await.unwrap().unwrap();
        assert_eq!((w.balance, w.reserved), (nanos(993), money::NanoUsd::ZERO));
        // The call it never saw is charged nothing here: its event carries the cost for the
        // settler, which charges it from the ledger.
        let w = stores.wallets.snapshot(4).await.unwrap().unwrap();
        assert_eq!(w.balance, nanos(1_000));
        let got = stores
            .usage
            .claim("t", 10, Duration::from_secs(60))
            .await
            .unwrap();
        let by_id: std::collections::HashMap<&str, &UsageEvent> = got
            .iter()
            .map(|g| (g.event.request_id.as_str(), &g.event))
            .collect();
        assert_eq!(
            by_id.len(),
            2,
            "the other server's events are not sent again"
        );
        assert!(by_id.values().all(|e| e.resent));
        assert_eq!(by_id["lost-end"].charged_nanos, nanos(7));
        assert_eq!(
            (
                by_id["lost-all"].charged_nanos,
                by_id["lost-all"].excess_nanos,
                by_id["lost-all"].cost_nanos
            ),
            (money::NanoUsd::ZERO, nanos(7), nanos(7))
        );
        assert_eq!(
            metrics
                .call_ends_redone
                .with_label_values(&["failover"])
                .get(),
            2
        );
    }

    #[tokio::test]
    async fn a_restarted_gateway_re_sends_what_its_spool_kept() {
        let dir =
            std::env::temp_dir().join(format!("tollgate-spool-{}", uuid::Uuid::new_v4().simple()));
        let before = RecentEvents::with_spool(Some(Spool::open(&dir).unwrap()));
        before.keep(Some(event("spooled")));
        before.spool.as_ref().unwrap().maintain();
        drop(before); // the gateway dies
        // A new gateway on the same spool, over a store that lost everything.
        let after = RecentEvents::with_spool(Some(Spool::open(&dir).unwrap()));
        let stores = Stores::memory();
        let (_stop, stop) = watch::channel(true);
        let metrics = Metrics::new().unwrap();
        run(
            &after,
            || stores.clone(),
            "p2",
            &LiveHolds::default(),
            &metrics,
            stop,
        )
        .await;
        let got = stores
            .usage
            .claim("t", 10, Duration::from_secs(60))
            .await
            .unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].event.request_id, "spooled");
        assert!(got[0].event.resent);
        let _ = std::fs::remove_dir_all(dir);
    }
}
