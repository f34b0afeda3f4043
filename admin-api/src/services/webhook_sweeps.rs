//! The partner webhook events no change writes (issue 45), found by a sweep that every
//! admin-api process runs once a minute (`workers::webhooks`): each carries a dedupe key, so it
//! is written once whoever finds it first.

use super::partner_webhooks::{WebhookError, emit, when};
use crate::state::AppState;
use chrono::Duration;
use sea_orm::{ColumnTrait, EntityTrait, QueryFilter, QueryOrder, QuerySelect};

/// Most swept events written per kind and pass.
const SWEEP_BATCH: u64 = 100;

/// The events no change writes, found by a sweep (any admin-api process; the dedupe key keeps
/// each once): `invitation.expired` for a customer's pending invitation whose time ran out (in
/// the last 30 days), `statement.ready` for each partner's statement of the month that just
/// ended. Returns how many were written.
pub async fn sweep(state: &AppState) -> Result<usize, WebhookError> {
    Ok(expired_invitations(state).await? + ready_statements(state).await?)
}

async fn expired_invitations(state: &AppState) -> Result<usize, WebhookError> {
    use entities::{customers, invitations, status::InvitationStatus};
    use sea_orm::TransactionTrait;
    use sea_orm::sea_query::Expr;
    let now = state.clock.now();
    let expired = invitations::Entity::find()
        .filter(invitations::Column::Status.eq(InvitationStatus::Pending))
        .filter(invitations::Column::ExpiresAt.lt(now))
        .filter(invitations::Column::ExpiresAt.gte(now - Duration::days(30)))
        .filter(Expr::cust(
            "NOT EXISTS (SELECT 1 FROM webhook_events e WHERE e.dedupe_key = \
             'invitation.expired:' || CAST(invitations.id AS TEXT))",
        ))
        .order_by_asc(invitations::Column::Id)
        .limit(SWEEP_BATCH)
        .all(&state.db)
        .await?;
    let mut written = 0;
    for inv in expired {
        let Some(c) = customers::Entity::find_by_id(inv.customer_id)
            .one(&state.db)
            .await?
        else {
            continue;
        };
        let txn = state.db.begin().await?;
        let data = serde_json::json!({
            "customer_id": c.id,
            "external_customer_id": c.external_id,
            "invitation_id": inv.id,
            "email": inv.email,
            "expired_at": when(inv.expires_at),
        });
        let dedupe = format!("invitation.expired:{}", inv.id);
        if emit(
            &txn,
            state,
            c.partner_id,
            "invitation.expired",
            data,
            Some(dedupe),
        )
        .await?
        .is_some()
        {
            written += 1;
        }
        txn.commit().await?;
    }
    Ok(written)
}

async fn ready_statements(state: &AppState) -> Result<usize, WebhookError> {
    use crate::services::statements::Month;
    use entities::partners;
    use sea_orm::TransactionTrait;
    use sea_orm::sea_query::Expr;
    let now = state.clock.now();
    let month = Month::of(now).previous();
    let ended = month.next().start();
    let waiting = partners::Entity::find()
        .filter(partners::Column::CreatedAt.lt(ended))
        .filter(Expr::cust(format!(
            "NOT EXISTS (SELECT 1 FROM webhook_events e WHERE e.dedupe_key = \
             'statement.ready:' || CAST(partners.id AS TEXT) || ':{month}')"
        )))
        .order_by_asc(partners::Column::Id)
        .limit(SWEEP_BATCH)
        .all(&state.db)
        .await?;
    let base = state
        .settings
        .server
        .public_base_url
        .as_str()
        .trim_end_matches('/');
    let mut written = 0;
    for p in waiting {
        let txn = state.db.begin().await?;
        let page = format!("{base}/console/partners/{}/statements/{month}", p.id);
        let data = serde_json::json!({
            "month": month.to_string(),
            "csv_url": format!("{page}.csv"),
            "pdf_url": format!("{page}.pdf"),
        });
        let dedupe = format!("statement.ready:{}:{month}", p.id);
        if emit(&txn, state, p.id, "statement.ready", data, Some(dedupe))
            .await?
            .is_some()
        {
            written += 1;
        }
        txn.commit().await?;
    }
    Ok(written)
}
