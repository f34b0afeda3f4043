//! The settler's loop over its share of the usage streams (issue 48). Every admin-api process
//! runs one; the streams are shared out among the live settlers by leases in the store
//! (`opstate::leases`: a heartbeat, a fair share, a lease per stream renewed every second), and
//! a settler reads only the streams it leases. A stream it has just taken (its former reader
//! died, or gave it back) has its pending entries claimed at once instead of after the claim
//! timeout. Each batch is booked as `settler` says, once per request whoever reads it.
//!
//! **A stream whose server changed** (`UsageStream::homes`: a failover, a restart) may have
//! lost the last writes that server acknowledged, among them this settler's confirmations (a
//! mirror's pending charge then stays too high). The settler leasing the stream reloads the
//! mirrors of the organizations kept there from the ledger (`services::wallets::reload_home`),
//! between two of its batches: no confirmation of its own is in flight then, and a charge the
//! ledger does not have yet is taken by the mirror when it is confirmed (`wallet.v5`'s
//! `confirm`). The gateways store their recent calls' ends again for the same change
//! (`proxy::money::resend`).

use super::batch::SettleError;
use super::settler::{BATCH, CLAIM_TIMEOUT, FINAL_DRAIN, settle_entries};
use crate::state::AppState;
use opstate::StreamEntry;
use opstate::leases::{LEASE_ROUND, LEASE_TTL};
use std::collections::{BTreeSet, HashSet};
use std::sync::Mutex;
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// Settles the streams this settler leases until `shutdown` turns true, pausing `idle` whenever
/// a round found less than a full batch (so a settled charge is at most about `idle` old when
/// it reaches the ledger). On shutdown it settles what is left of its streams (for at most
/// 10 s, `settler::FINAL_DRAIN`), then gives its leases back, so another settler takes its streams at once.
pub async fn run(
    state: AppState,
    consumer: String,
    idle: Duration,
    shutdown: watch::Receiver<bool>,
) {
    let (held_tx, held_rx) = watch::channel(Vec::<usize>::new());
    let (done_tx, done_rx) = watch::channel(false);
    let moved = Mutex::new(BTreeSet::new());
    tokio::join!(
        keep_leases(&state, &consumer, held_tx, &moved, done_rx),
        async {
            let mut reader = Reader::new(&state, &consumer, held_rx, &moved);
            reader.until(idle, shutdown).await;
            reader.final_drain().await;
            let _ = done_tx.send(true);
        }
    );
}

/// Renews this settler's leases every [`LEASE_ROUND`] (`opstate::leases::round`) and publishes
/// the streams it holds, until `done`; then gives them back. After rounds failing for
/// [`LEASE_TTL`], it holds nothing (its leases have lapsed in the store). Each round also asks
/// which server keeps each stream: those that changed go to `moved` (whoever leases them then
/// reloads their mirrors).
async fn keep_leases(
    state: &AppState,
    me: &str,
    held: watch::Sender<Vec<usize>>,
    moved: &Mutex<BTreeSet<usize>>,
    mut done: watch::Receiver<bool>,
) {
    let leases = state.stores.leases.clone();
    let mut last_ok = Instant::now();
    let mut homes = Vec::new();
    // Announced a round before taking anything: settlers started together (a fleet's rollout)
    // each count the others before their first share, instead of the first taking every stream
    // and giving most of them back a round later.
    if let Err(e) = leases.heartbeat(me, LEASE_TTL).await {
        tracing::warn!(error = %e, "settler: heartbeat not written; retrying");
    }
    tokio::select! {
        _ = done.wait_for(|d| *d) => {}
        _ = tokio::time::sleep(LEASE_ROUND) => {}
    }
    loop {
        if let Ok(now) = state.stores.usage.homes().await {
            let changed = opstate::moved_homes(&mut homes, now);
            if !changed.is_empty() {
                tracing::warn!(streams = ?changed, "settler: the server keeping usage streams changed; their mirrors are reloaded by the settler leasing them");
                if let Ok(mut m) = moved.lock() {
                    m.extend(changed);
                }
            }
        }
        let before = held.borrow().clone();
        match opstate::leases::round(leases.as_ref(), me, &before).await {
            Ok(now) => {
                last_ok = Instant::now();
                if now != before {
                    tracing::info!(settler = me, streams = ?now, "settler: usage streams leased");
                    state.meters.settler_streams(now.len());
                    held.send_replace(now);
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "settler: leases not renewed; retrying");
                if last_ok.elapsed() >= LEASE_TTL && !before.is_empty() {
                    state.meters.settler_streams(0);
                    held.send_replace(Vec::new());
                }
            }
        }
        tokio::select! {
            _ = done.wait_for(|d| *d) => break,
            _ = tokio::time::sleep(LEASE_ROUND) => {}
        }
    }
    let mine = held.send_replace(Vec::new());
    state.meters.settler_streams(0);
    if let Err(e) = opstate::leases::leave(leases.as_ref(), me, &mine).await {
        tracing::warn!(error = %e, "settler: leases not given back; they lapse by themselves");
    }
}

/// The settling side: claims from the leased streams and books.
struct Reader<'a> {
    state: &'a AppState,
    consumer: &'a str,
    held: watch::Receiver<Vec<usize>>,
    /// Leased streams whose pending entries were all claimed since they were taken.
    caught_up: HashSet<usize>,
    /// Streams whose server changed, their mirrors to reload by whoever leases them.
    moved: &'a Mutex<BTreeSet<usize>>,
    /// Entries this settler claimed in a round that failed (the database was down): still its
    /// own, so they are retried at once instead of waiting out the claim timeout.
    retry: Vec<StreamEntry>,
}

impl<'a> Reader<'a> {
    fn new(
        state: &'a AppState,
        consumer: &'a str,
        held: watch::Receiver<Vec<usize>>,
        moved: &'a Mutex<BTreeSet<usize>>,
    ) -> Reader<'a> {
        Reader {
            state,
            consumer,
            held,
            moved,
            caught_up: HashSet::new(),
            retry: Vec::new(),
        }
    }

    async fn until(&mut self, idle: Duration, mut shutdown: watch::Receiver<bool>) {
        loop {
            let drained = match self.once().await {
                Ok(n) => n,
                Err(e) => {
                    tracing::error!(error = %e, "settler round failed; retrying");
                    if let SettleError::Held(_, entries) = e {
                        self.retry = entries;
                    }
                    0
                }
            };
            // A partial batch means the streams are drained: wait for the next batch to gather
            // rather than settling events one transaction each as they trickle in.
            if drained < BATCH {
                tokio::select! {
                    _ = shutdown.wait_for(|s| *s) => return,
                    _ = tokio::time::sleep(idle) => {}
                }
            } else if *shutdown.borrow() {
                return;
            }
        }
    }

    /// One batch from the leased streams (or the entries of a failed round again); how many
    /// entries it acknowledged.
    async fn once(&mut self) -> Result<usize, SettleError> {
        if !self.retry.is_empty() {
            return settle_entries(self.state, std::mem::take(&mut self.retry)).await;
        }
        let streams = self.held.borrow().clone();
        if streams.is_empty() {
            return Ok(0);
        }
        self.reload_moved(&streams).await;
        self.caught_up.retain(|i| streams.contains(i));
        let taken: Vec<usize> = streams
            .iter()
            .copied()
            .filter(|i| !self.caught_up.contains(i))
            .collect();
        let entries = self
            .state
            .stores
            .usage
            .claim_from(self.consumer, &streams, &taken, BATCH, CLAIM_TIMEOUT)
            .await?;
        if entries.len() < BATCH {
            // Every stream was read to its end: what was pending when it was taken is claimed.
            self.caught_up.extend(taken);
        }
        settle_entries(self.state, entries).await
    }

    /// Reloads the mirrors of the moved streams among `streams` (this settler's); one that fails
    /// stays moved, tried again before the next batch.
    async fn reload_moved(&self, streams: &[usize]) {
        let mine: Vec<usize> = match self.moved.lock() {
            Ok(m) => m.iter().copied().filter(|i| streams.contains(i)).collect(),
            Err(_) => return,
        };
        for i in mine {
            match crate::services::wallets::reload_home(self.state, i).await {
                Ok(n) => {
                    tracing::warn!(
                        stream = i,
                        mirrors = n,
                        "settler: mirrors reloaded from the ledger after their server changed"
                    );
                    if let Ok(mut m) = self.moved.lock() {
                        m.remove(&i);
                    }
                }
                Err(e) => {
                    tracing::error!(stream = i, error = %e, "settler: mirrors not reloaded; retried before the next batch")
                }
            }
        }
    }

    /// After shutdown: what is left in the leased streams, for at most [`FINAL_DRAIN`].
    async fn final_drain(&mut self) {
        let deadline = tokio::time::Instant::now() + FINAL_DRAIN;
        while tokio::time::Instant::now() < deadline {
            match self.once().await {
                Ok(0) if self.retry.is_empty() => return,
                Ok(_) => {}
                Err(e) => {
                    tracing::error!(error = %e, "settler: final drain failed");
                    if let SettleError::Held(_, entries) = e {
                        self.retry = entries;
                    }
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            }
        }
        tracing::warn!("settler: stopped with usage events still in its streams");
    }
}
