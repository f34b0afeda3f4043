//! Rules that watch balances (issue 32): one pass of the watcher over them ([`watch_once`], run by
//! `workers::watch` every `money.watch_interval_ms` in every admin-api) — automatic allocations
//! (`allocations`), automatic recharges (`recharge`) and low-balance alerts (`alerts`).
//!
//! **Once per crossing across the fleet.** Each rule keeps the state of its last crossing in its
//! row (`balance_alerts.below`, `auto_allocation_rules.armed`) and a `generation` that every
//! change of that state counts up. A pass reads the row, then the balance; seeing it below the
//! threshold, it changes the state with an update conditional on the generation it read (`… SET
//! below = true, generation = g + 1 WHERE generation = g AND below = false`); only the instance
//! whose update took the row acts (sends the mail; allocates, in the same transaction as the
//! update), every other finds nothing to change. Seen back at or above the threshold, the state
//! is reset the same way, so the next crossing acts again. The generation is what makes a stale
//! reading harmless: a pass that read the balance before another pass's allocation and the reset
//! that followed it holds an old generation, and its claim takes nothing (a bare `WHERE armed`
//! was not enough — found by the concurrent-watchers test).
//!
//! **Never on an unknown balance.** An organization's balance is read only when reconciled
//! (`wallets::reconciled`); a mirror missing or disagreeing with the ledger skips the
//! organization this pass (it is neither above nor below).

use super::alerts::alert_if_below;
use super::allocations::allocate_if_below;
use super::fault::Fault;
use super::recharge::recharge_if_below;
use crate::state::AppState;
use entities::{auto_allocation_rules as rules, balance_alerts as alerts};
use sea_orm::EntityTrait;

/// What one pass did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Pass {
    pub alerts_sent: usize,
    pub allocated: usize,
    pub refused: usize,
    /// Automatic recharges charged (funding follows their webhooks) and declined.
    pub recharged: usize,
    pub declined: usize,
}

/// One pass over every rule: automatic allocations first (an allocation may lift a balance back
/// above its alert), automatic recharges (`services::recharge`), then alerts.
pub async fn watch_once(state: &AppState) -> Result<Pass, Fault> {
    let mut pass = Pass::default();
    for rule in rules::Entity::find().all(&state.db).await? {
        match allocate_if_below(state, &rule).await {
            Ok(Some(true)) => pass.allocated += 1,
            Ok(Some(false)) => pass.refused += 1,
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(error = %e, customer = rule.customer_id, "automatic allocation failed; retried next pass");
            }
        }
    }
    for rule in entities::recharge_rules::Entity::find()
        .all(&state.db)
        .await?
    {
        match recharge_if_below(state, &rule).await {
            Ok(Some(true)) => pass.recharged += 1,
            Ok(Some(false)) => pass.declined += 1,
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(error = %e, partner = rule.partner_id, "automatic recharge failed; retried next pass");
            }
        }
    }
    for alert in alerts::Entity::find().all(&state.db).await? {
        match alert_if_below(state, &alert).await {
            Ok(true) => pass.alerts_sent += 1,
            Ok(false) => {}
            Err(e) => {
                tracing::warn!(error = %e, alert = alert.id, "low-balance alert failed; retried next pass");
            }
        }
    }
    Ok(pass)
}
