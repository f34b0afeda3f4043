//! When a batch's lines go to a supplier's own batch API (`super::supplier` has the rules): the
//! batch's supplier work looked at every [`TICK`] from the runner's loop — the open chunk
//! followed, held lines sent as a chunk, or given back when the batch stopped.

use super::outcome::Outcome;
use super::supplier::{model_of, offloadable};
use super::{Runner, Stop};
use entities::{batch_lines, batches};
use sea_orm::{ColumnTrait, DbErr, EntityTrait, QueryFilter};
use settings::Capability;

/// How often a batch's supplier work is looked at (its counts read, a chunk made or followed).
const TICK: std::time::Duration = std::time::Duration::from_millis(200);

/// Where a batch's supplier work stands, read every [`TICK`].
#[derive(Default)]
pub(super) struct Offload {
    /// A chunk of it is at the supplier, not yet booked.
    pub open: bool,
    /// Lines held and not yet in a chunk.
    pub held: u64,
    /// Lines that may still be held now (none while a chunk is open).
    pub room: u64,
    endpoint: String,
    ticked: Option<std::time::Instant>,
    followed: Option<std::time::Instant>,
}

impl Runner<'_> {
    /// Whether `line` is sent to be held (see [`offloadable`]), its model not refused before.
    pub(super) fn holdable(&self, line: &batch_lines::Model, o: &Offload) -> bool {
        offloadable(self.state, &o.endpoint, line)
            && self
                .plain_models
                .lock()
                .map(|m| !m.contains(&model_of(line)))
                .unwrap_or(true)
    }

    /// Looks at the batch's supplier work (every [`TICK`]): follows the open chunk (every
    /// `[batches] supplier_poll_interval_ms`); with none open, sends the held lines as a chunk
    /// once `supplier_lines` are held or no line is left to hold (or the batch stopped for want
    /// of balance: what is held is paid for), or books them cancelled or expired when the batch
    /// was.
    pub(super) async fn offload(
        &self,
        batch: &batches::Model,
        stop: Option<&Stop>,
        o: &mut Offload,
    ) -> Result<(), DbErr> {
        let any = self
            .state
            .settings
            .accounts
            .iter()
            .any(|a| a.capabilities.contains(&Capability::Batch));
        if !any || o.ticked.is_some_and(|t| t.elapsed() < TICK) {
            return Ok(());
        }
        o.endpoint.clone_from(&batch.endpoint);
        o.ticked = Some(std::time::Instant::now());
        let b = &self.state.settings.batches;
        let every = std::time::Duration::from_millis(b.supplier_poll_interval_ms);
        let limit = u64::from(b.supplier_lines);
        let open = self.open_chunk(batch.id).await?.is_some();
        let held = self.count(batch.id, "held").await?;
        if open {
            if o.followed.is_none_or(|t| t.elapsed() >= every) {
                o.followed = Some(std::time::Instant::now());
                self.follow(batch, stop).await?;
            }
        } else if held > 0 {
            match stop {
                Some(Stop::Leaving) => {}
                Some(s @ (Stop::Cancelled | Stop::Expired)) => self.unhold(batch, s).await?,
                _ if held >= limit
                    || stop.is_some()
                    || self.remaining(batch.id, true).await? == 0 =>
                {
                    self.submit(batch).await?;
                }
                _ => {}
            }
        }
        o.open = self.open_chunk(batch.id).await?.is_some();
        o.held = self.count(batch.id, "held").await?;
        // Lines being sent count against the room too: a hold in flight is held once it
        // answers (counting every line being sent, calls too, only delays the next holds).
        let sending = self.count(batch.id, "running").await?;
        o.room = if o.open {
            0
        } else {
            limit.saturating_sub(o.held + sending)
        };
        Ok(())
    }

    /// Books the held lines of a batch that stopped before they were sent as cancelled or
    /// expired (their holds released, nothing charged).
    async fn unhold(&self, batch: &batches::Model, stop: &Stop) -> Result<(), DbErr> {
        let code = match stop {
            Stop::Expired => "batch_expired",
            _ => "batch_cancelled",
        };
        let held = batch_lines::Entity::find()
            .filter(batch_lines::Column::BatchId.eq(batch.id))
            .filter(batch_lines::Column::Status.eq("held"))
            .all(&self.state.db)
            .await?;
        for line in held {
            let result = Outcome::Error {
                code: code.to_string(),
                message: "The batch stopped before this line was sent.".into(),
            };
            self.book(batch, &line, result).await?;
        }
        Ok(())
    }
}
