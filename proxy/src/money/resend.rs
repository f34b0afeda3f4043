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

use opstate::{Sessions, UsageEvent, UsageStream};
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

/// The events this proxy appended recently.
#[derive(Default)]
pub(crate) struct RecentEvents {
    events: Mutex<VecDeque<(Instant, UsageEvent)>>,
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

/// Watches the store until `shutdown` turns true; first re-sends what the spool kept from before
/// this gateway started.
pub(crate) async fn run(
    recent: &RecentEvents,
    stores: impl Fn() -> opstate::Stores,
    proxy: &str,
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
        if let Some(spool) = &recent.spool {
            spool.maintain();
        }
        tokio::select! {
            _ = shutdown.wait_for(|s| *s) => return,
            _ = tokio::time::sleep(CHECK) => {}
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
        run(&after, || stores.clone(), "p2", stop).await;
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
