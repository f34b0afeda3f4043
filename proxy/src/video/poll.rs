//! `GET /compat/v1/videos/{id}`: the supplier's state of a task (OpenAI video object or Veo
//! operation, read into one `SupplierState`), refreshed into the task book; an ending settles.

use super::settle::{Ledger, finish};
use super::supplier_state::{SupplierState, operation_path};
use super::wire::OBJECT_LIMIT;
use crate::upstream::direct::Call;
use crate::wire::segment;
use opstate::{Task, TaskBook};
use settings::Provider;

/// Asks the supplier about a running task and records what it says; ends the task (and settles
/// its hold) when the supplier ended it. A supplier that cannot be asked changes nothing: the
/// recorded state is answered and the next poll or sweep asks again.
pub(crate) async fn refresh(
    supplier: super::Supplier<'_>,
    ledger: &Ledger<'_>,
    book: &dyn TaskBook,
    task: Task,
) -> Task {
    let (Some(account), Some(sid)) = (&task.account_id, &task.supplier_task_id) else {
        return task;
    };
    if task.status.is_final() {
        return task;
    }
    // A task outlives its request: the account is looked up in the configuration in force.
    let Some(upstream) = ledger
        .live
        .accounts
        .all()
        .iter()
        .find(|u| &u.account.id == account)
    else {
        tracing::warn!(task = %task.id, account = %account, "video task's account is no longer configured");
        return task;
    };
    let provider = upstream.account.provider;
    let Some(suffix) = task_path(provider, sid) else {
        tracing::warn!(task = %task.id, "video task's operation name is not a path");
        return task;
    };
    let call = Call {
        method: "GET",
        suffix: &suffix,
        body: None,
        headers: Vec::new(),
    };
    let mut answer = match supplier.client.send(upstream, supplier.server, call).await {
        Ok(a) => a,
        Err(e) => {
            tracing::warn!(task = %task.id, error = %e.message(), "video task not polled");
            return task;
        }
    };
    let status = answer.status();
    let read = answer.body(OBJECT_LIMIT).await;
    supplier.client.release(answer).await;
    let asked = task.seconds_requested.and_then(|s| u64::try_from(s).ok());
    let state = match (status, read) {
        (200..=299, Ok(bytes)) if provider == Provider::Gemini => {
            SupplierState::operation(&bytes, asked)
        }
        (200..=299, Ok(bytes)) => SupplierState::parse(&bytes),
        (404, _) => Some(SupplierState::failed(
            "not_found",
            "the supplier no longer knows this task",
        )),
        _ => None,
    };
    let Some(state) = state else {
        tracing::warn!(task = %task.id, status, "video task poll answered without a task object");
        return task;
    };
    if state.status.is_final() {
        return finish(ledger, book, task, &state).await;
    }
    if let Err(e) = book
        .progressed(&task.id, state.status, state.progress)
        .await
    {
        tracing::warn!(task = %task.id, error = %e, "video task progress not recorded");
    }
    Task {
        status: state.status,
        progress: state.progress,
        ..task
    }
}

/// Where `provider` answers for its task `sid`: Veo's operation, or OpenAI's `/videos/{id}`
/// (`None`: an operation name that is not a path).
fn task_path(provider: Provider, sid: &str) -> Option<String> {
    match provider {
        Provider::Gemini => operation_path(sid),
        Provider::OpenAi | Provider::Anthropic => Some(format!("/videos/{}", segment(sid))),
    }
}
