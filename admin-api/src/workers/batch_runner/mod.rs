//! The batch runner (issue 46): every admin-api process runs one; each batch is run by one
//! process at a time, which holds a lease on it (`claimed_by`, `claimed_until`, taken and renewed
//! by conditional updates, as webhook deliveries are claimed). A process that dies lets its
//! lease lapse within [`LEASE`] and another takes the batch on where it stood.
//!
//! Each line is sent **through a gateway** (`[batches] gateway_url`) signed as the key that
//! created the batch (`credentials::batch_line`), so admission, routing, failover, capacity and
//! money are a call's own; the gateway prices it at the model's `batch_discount`, never queues
//! it, and keeps its answer (`proxy::batch`). A line gets its request id before it is first
//! sent and keeps it: sent again (after a restart, a lost answer), the gateway answers it from
//! its store, with no second charge.
//!
//! At most `[batches] concurrency` lines of a batch are in flight, so at most that many holds.
//! Outcomes: 2xx → `succeeded`; 429 (capacity yielded, limits) and 409 (still being served) →
//! sent again after a pause; a 5xx the gateway answered → sent again up to [`SERVER_ATTEMPTS`]
//! times, then `failed`; 402 (out of balance) or 401 (the key no longer works) → that line
//! `failed` and the batch stops: the lines in flight finish, every line not started is `failed`
//! with that code, and the batch ends `failed` with the reason in `errors`; another 4xx →
//! `failed` with the gateway's answer. Cancel: no line starts after it, the lines in flight
//! finish, the rest are `cancelled`. Past the completion window the rest are `expired`.

use crate::state::AppState;
use chrono::{DateTime, Utc};
use entities::{batch_lines, batches, customer_api_keys};
use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use sea_orm::sea_query::{Expr, ExprTrait};
use sea_orm::{
    ColumnTrait, Condition, DbErr, EntityTrait, PaginatorTrait, QueryFilter, QueryOrder,
    QuerySelect,
};
use std::collections::HashMap;
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// How long a claim on a batch lasts unless renewed.
pub const LEASE: Duration = Duration::from_secs(15);
/// How often the holder renews it (and reads the batch's status).
const RENEW: Duration = Duration::from_secs(5);
/// A line's whole time at the gateway.
const LINE_TIMEOUT: Duration = Duration::from_secs(15 * 60);
/// Times a line the gateway answered with a 5xx is sent.
pub const SERVER_ATTEMPTS: i32 = 3;
/// Times a line is sent while the gateway cannot be reached, before it fails.
const TRANSPORT_ATTEMPTS: i32 = 30;
/// How often the retention sweep runs.
const SWEEP: Duration = Duration::from_secs(60);

/// Runs until `shutdown` turns true.
pub async fn run(state: AppState, worker: String, mut shutdown: watch::Receiver<bool>) {
    let client = match reqwest::Client::builder().timeout(LINE_TIMEOUT).build() {
        Ok(c) => c,
        Err(e) => {
            tracing::error!(error = %e, "batch runner: no HTTP client; batches do not run");
            return;
        }
    };
    let poll = Duration::from_millis(state.settings.batches.poll_interval_ms);
    let mut swept: Option<Instant> = None;
    loop {
        if swept.is_none_or(|t| t.elapsed() >= SWEEP) {
            if let Err(e) = lines::sweep(&state).await {
                tracing::warn!(error = %e, "batch retention sweep failed; retried in a minute");
            }
            swept = Some(Instant::now());
        }
        match claim(&state, &worker).await {
            Ok(Some(batch)) => {
                let key_hash = match customer_api_keys::Entity::find_by_id(batch.api_key_id)
                    .one(&state.db)
                    .await
                {
                    Ok(key) => key.map(|k| k.key_hash).unwrap_or_default(),
                    Err(e) => {
                        tracing::warn!(error = %e, "batch runner: the batch's key not read");
                        continue;
                    }
                };
                let runner = Runner {
                    state: &state,
                    client: &client,
                    worker: &worker,
                    key_hash,
                    plain_models: Default::default(),
                };
                if let Err(e) = runner.run_batch(batch, &mut shutdown).await {
                    tracing::error!(error = %e, "batch runner: a batch stopped on a database error; taken on again");
                }
                if *shutdown.borrow() {
                    return;
                }
                continue;
            }
            Ok(None) => {}
            Err(e) => tracing::warn!(error = %e, "batch runner: claim failed"),
        }
        tokio::select! {
            _ = shutdown.wait_for(|s| *s) => return,
            _ = tokio::time::sleep(poll) => {}
        }
    }
}

/// Claims the oldest batch that is not ended and not held by a live lease (`validating`
/// becomes `in_progress`).
pub async fn claim(state: &AppState, worker: &str) -> Result<Option<batches::Model>, DbErr> {
    let now = state.clock.now();
    let free = || {
        Condition::any()
            .add(batches::Column::ClaimedUntil.is_null())
            .add(batches::Column::ClaimedUntil.lt(now))
    };
    let open = ["validating", "in_progress", "cancelling"];
    let candidates = batches::Entity::find()
        .filter(batches::Column::Status.is_in(open))
        .filter(free())
        .order_by_asc(batches::Column::CreatedAt)
        .limit(4)
        .all(&state.db)
        .await?;
    for b in candidates {
        let won = batches::Entity::update_many()
            .col_expr(batches::Column::ClaimedBy, Expr::value(worker))
            .col_expr(batches::Column::ClaimedUntil, Expr::value(now + lease()))
            .filter(batches::Column::Id.eq(b.id))
            .filter(batches::Column::Status.is_in(open))
            .filter(free())
            .exec(&state.db)
            .await?
            .rows_affected
            == 1;
        if !won {
            continue;
        }
        if b.status == "validating" {
            batches::Entity::update_many()
                .col_expr(batches::Column::Status, Expr::value("in_progress"))
                .col_expr(batches::Column::InProgressAt, Expr::value(now))
                .col_expr(batches::Column::UpdatedAt, Expr::value(now))
                .filter(batches::Column::Id.eq(b.id))
                .filter(batches::Column::Status.eq("validating"))
                .exec(&state.db)
                .await?;
        }
        return batches::Entity::find_by_id(b.id).one(&state.db).await;
    }
    Ok(None)
}

fn lease() -> chrono::Duration {
    chrono::Duration::from_std(LEASE).unwrap_or(chrono::Duration::seconds(15))
}

/// Why a batch stops taking lines.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Stop {
    Cancelled,
    Expired,
    /// The gateway refused the batch's key or balance: the code and message for the rest.
    Refused {
        code: String,
        message: String,
    },
    /// This process is stopping (or lost its lease): the batch is left to be taken on.
    Leaving,
}

/// A line's sending: the gateway's status and answer (`held`: the line is held for a
/// supplier's batch; `booked`: a booking's answer, or a kept one), or why none came.
enum Sent {
    Answered {
        status: u16,
        body: String,
        held: bool,
        booked: bool,
    },
    Transport(String),
}

mod lines;
mod offload;
mod outcome;
mod supplier;

use offload::Offload;

pub use lines::sweep;

struct Runner<'a> {
    state: &'a AppState,
    client: &'a reqwest::Client,
    worker: &'a str,
    /// The keyed hash of the key the batch runs as.
    key_hash: String,
    /// Models whose lines the gateway would not hold for a supplier's batch (409
    /// `batch_offload_unavailable`): sent as calls.
    plain_models: std::sync::Mutex<std::collections::HashSet<String>>,
}

impl Runner<'_> {
    /// Runs `batch` until it ends, or this process leaves it.
    async fn run_batch(
        &self,
        batch: batches::Model,
        shutdown: &mut watch::Receiver<bool>,
    ) -> Result<(), DbErr> {
        // Lines a process that died left in flight are sent again (under their request ids).
        batch_lines::Entity::update_many()
            .col_expr(batch_lines::Column::Status, Expr::value("pending"))
            .filter(batch_lines::Column::BatchId.eq(batch.id))
            .filter(batch_lines::Column::Status.eq("running"))
            .exec(&self.state.db)
            .await?;
        let concurrency = self.state.settings.batches.concurrency as usize;
        let mut inflight = FuturesUnordered::new();
        let mut stop: Option<Stop> = None;
        let mut later: HashMap<i32, Instant> = HashMap::new();
        let mut renewed = Instant::now();
        let mut offload = Offload::default();
        loop {
            if stop.is_none() && *shutdown.borrow() {
                stop = Some(Stop::Leaving);
            }
            if renewed.elapsed() >= RENEW {
                renewed = Instant::now();
                match self.renew(batch.id).await? {
                    Some(status) if stop.is_none() && status == "cancelling" => {
                        stop = Some(Stop::Cancelled)
                    }
                    Some(_) => {}
                    None => stop = Some(Stop::Leaving),
                }
            }
            if stop.is_none() && self.state.clock.now() >= batch.expires_at {
                stop = Some(Stop::Expired);
            }
            self.offload(&batch, stop.as_ref(), &mut offload).await?;
            if stop.is_none() && inflight.len() < concurrency {
                let room = concurrency - inflight.len();
                for (line, hold) in self.pick(batch.id, room, &later, &mut offload).await? {
                    inflight.push(self.send(&batch, line, hold));
                }
            }
            if inflight.is_empty() {
                // Held for or in a supplier's batch (read now: the offload's counts lag).
                let all = self.remaining(batch.id, false).await?;
                let supplier_waits = all > self.remaining(batch.id, true).await?;
                match &stop {
                    Some(Stop::Leaving) => return self.release(batch.id).await,
                    Some(_) if supplier_waits => {}
                    Some(_) => return self.finish(&batch, stop).await,
                    None if all == 0 => {
                        return self.finish(&batch, None).await;
                    }
                    None => {
                        // Every line left waits for its pause.
                        tokio::time::sleep(Duration::from_millis(200)).await;
                        continue;
                    }
                }
            }
            tokio::select! {
                Some((line, sent)) = inflight.next() => {
                    if let Some(s) = self.record(&line, sent, &mut later).await? {
                        stop.get_or_insert(s);
                    }
                }
                _ = tokio::time::sleep(Duration::from_millis(500)) => {}
            }
        }
    }

    /// Renews the lease; the batch's status, or `None` when the lease was lost.
    async fn renew(&self, batch: i64) -> Result<Option<String>, DbErr> {
        let now = self.state.clock.now();
        let kept = batches::Entity::update_many()
            .col_expr(batches::Column::ClaimedUntil, Expr::value(now + lease()))
            .filter(batches::Column::Id.eq(batch))
            .filter(batches::Column::ClaimedBy.eq(self.worker))
            .exec(&self.state.db)
            .await?
            .rows_affected
            == 1;
        if !kept {
            return Ok(None);
        }
        Ok(batches::Entity::find_by_id(batch)
            .one(&self.state.db)
            .await?
            .map(|b| b.status))
    }

    /// Lets the batch go (this process is stopping): another takes it on at once.
    async fn release(&self, batch: i64) -> Result<(), DbErr> {
        batches::Entity::update_many()
            .col_expr(
                batches::Column::ClaimedUntil,
                Expr::value(Option::<DateTime<Utc>>::None),
            )
            .filter(batches::Column::Id.eq(batch))
            .filter(batches::Column::ClaimedBy.eq(self.worker))
            .exec(&self.state.db)
            .await?;
        Ok(())
    }

    /// Up to `room` pending lines to send now, in order, past their pause; each marked
    /// `running` with its request id (kept from an earlier sending, else new).
    async fn pick(
        &self,
        batch: i64,
        room: usize,
        later: &HashMap<i32, Instant>,
        offload: &mut Offload,
    ) -> Result<Vec<(batch_lines::Model, bool)>, DbErr> {
        let now = Instant::now();
        let waiting = later.values().filter(|t| **t > now).count();
        let rows = batch_lines::Entity::find()
            .filter(batch_lines::Column::BatchId.eq(batch))
            .filter(batch_lines::Column::Status.eq("pending"))
            .order_by_asc(batch_lines::Column::Line)
            .limit((room + waiting) as u64)
            .all(&self.state.db)
            .await?;
        let mut picked = Vec::new();
        for mut line in rows {
            if picked.len() == room || later.get(&line.line).is_some_and(|t| *t > now) {
                continue;
            }
            let hold = self.holdable(&line, offload);
            if hold && offload.room == 0 {
                // Waits for the next chunk.
                continue;
            }
            let id = line
                .request_id
                .clone()
                .unwrap_or_else(|| uuid::Uuid::now_v7().simple().to_string());
            let at = self.state.clock.now();
            let won = batch_lines::Entity::update_many()
                .col_expr(batch_lines::Column::Status, Expr::value("running"))
                .col_expr(batch_lines::Column::RequestId, Expr::value(id.clone()))
                .col_expr(
                    batch_lines::Column::Attempts,
                    Expr::col(batch_lines::Column::Attempts).add(1),
                )
                .col_expr(batch_lines::Column::UpdatedAt, Expr::value(at))
                .filter(batch_lines::Column::BatchId.eq(batch))
                .filter(batch_lines::Column::Line.eq(line.line))
                .filter(batch_lines::Column::Status.eq("pending"))
                .exec(&self.state.db)
                .await?
                .rows_affected
                == 1;
            if won {
                line.request_id = Some(id);
                line.attempts += 1;
                if hold {
                    offload.room -= 1;
                }
                picked.push((line, hold));
            }
        }
        Ok(picked)
    }

    /// Lines not ended yet (`unsent`: only those not yet sent or being sent; else also those
    /// held for or in a supplier's batch).
    async fn remaining(&self, batch: i64, unsent: bool) -> Result<u64, DbErr> {
        let open: &[&str] = match unsent {
            true => &["pending", "running"],
            false => &["pending", "running", "held", "submitted"],
        };
        batch_lines::Entity::find()
            .filter(batch_lines::Column::BatchId.eq(batch))
            .filter(batch_lines::Column::Status.is_in(open.iter().copied()))
            .count(&self.state.db)
            .await
    }
}
