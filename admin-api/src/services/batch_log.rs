//! An organization's batches as its console lists them (issue 46): newest first, a page at a
//! time, each with its lines by state and what its lines were charged (summed from the usage
//! records that name the batch, so the figure is the ledger's own).

use super::batch_files::{ENDPOINTS, Refused};
use super::batches::{self, Page};
use super::message_batches;
use crate::state::AppState;
use entities::{batch_lines, batches as rows, customer_api_keys, usage_records};
use sea_orm::sea_query::{Expr, Func};
use sea_orm::{ColumnTrait, EntityTrait, ExprTrait, QueryFilter, QuerySelect};
use std::collections::HashMap;

/// How many batches a console page shows.
pub const PAGE_SIZE: u64 = 20;

/// One batch with its lines' states and its spend.
pub struct BatchEntry {
    pub batch: rows::Model,
    /// Lines by state (`pending`, `running`, `succeeded`, `failed`, `cancelled`, `expired`).
    pub lines: HashMap<String, i64>,
    /// Calls booked for its lines, and what they were charged (nano-USD).
    pub calls: i64,
    pub charged_nanos: i64,
    /// The key it runs as: its name and preview.
    pub key: Option<(String, String)>,
}

/// A page of `org`'s batches (both surfaces), newest first, older than the batch `after`; and
/// whether older ones remain.
pub async fn page(
    state: &AppState,
    org: i64,
    after: Option<String>,
) -> Result<(Vec<BatchEntry>, bool), Refused> {
    let mut endpoints: Vec<&str> = ENDPOINTS.to_vec();
    endpoints.push(message_batches::ENDPOINT);
    let ask = Page {
        after,
        before: None,
        limit: PAGE_SIZE,
    };
    let (found, more) = batches::list(state, org, &endpoints, &ask).await?;
    let ids: Vec<i64> = found.iter().map(|b| b.id).collect();
    let public: Vec<String> = found.iter().map(|b| b.public_id.clone()).collect();
    let counted: Vec<(i64, String, i64)> = batch_lines::Entity::find()
        .select_only()
        .column(batch_lines::Column::BatchId)
        .column(batch_lines::Column::Status)
        .column_as(batch_lines::Column::Line.count(), "n")
        .filter(batch_lines::Column::BatchId.is_in(ids))
        .group_by(batch_lines::Column::BatchId)
        .group_by(batch_lines::Column::Status)
        .into_tuple()
        .all(&state.db)
        .await?;
    let spent: Vec<(Option<String>, i64, Option<i64>)> = usage_records::Entity::find()
        .select_only()
        .column(usage_records::Column::BatchId)
        .column_as(usage_records::Column::Id.count(), "calls")
        .column_as(
            Func::sum(Expr::col(usage_records::Column::ChargedNanos)).cast_as("BIGINT"),
            "charged",
        )
        .filter(usage_records::Column::OrganizationId.eq(org))
        .filter(usage_records::Column::BatchId.is_in(public))
        .group_by(usage_records::Column::BatchId)
        .into_tuple()
        .all(&state.db)
        .await?;
    let keys: HashMap<i64, (String, String)> = customer_api_keys::Entity::find()
        .filter(customer_api_keys::Column::OrganizationId.eq(org))
        .filter(customer_api_keys::Column::Id.is_in(found.iter().map(|b| b.api_key_id)))
        .all(&state.db)
        .await?
        .into_iter()
        .map(|k| (k.id, (k.name, k.preview)))
        .collect();
    let mut lines: HashMap<i64, HashMap<String, i64>> = HashMap::new();
    for (batch, status, n) in counted {
        lines.entry(batch).or_default().insert(status, n);
    }
    let spend: HashMap<String, (i64, i64)> = spent
        .into_iter()
        .filter_map(|(b, calls, sum)| b.map(|b| (b, (calls, sum.unwrap_or(0)))))
        .collect();
    let entries = found
        .into_iter()
        .map(|b| {
            let (calls, charged_nanos) = spend.get(&b.public_id).copied().unwrap_or((0, 0));
            BatchEntry {
                lines: lines.remove(&b.id).unwrap_or_default(),
                calls,
                charged_nanos,
                key: keys.get(&b.api_key_id).cloned(),
                batch: b,
            }
        })
        .collect();
    Ok((entries, more))
}
