//! Downgrade under pressure: simple or standard work may be served by the model's cheaper
//! `downgrade_to` (same family and kind, checked at configuration) when the model's pool is busy.
//!
//! All of these must hold, else the call keeps its model:
//! - the route policy: the model names a `downgrade_to`, and the client did not send
//!   `x-tollgate-downgrade: never`;
//! - the key: its group exposes the target model;
//! - the work ([`is_simple`]): no tools or functions, no high reasoning effort (nor any Anthropic
//!   `thinking` or Gemini `thinkingConfig`), a body of at most
//!   16 KiB and an output cap (if any) of at most 2048 tokens;
//! - the pressure: slots in use / total estimated capacity of the model's available accounts ≥
//!   `routing.downgrade_pressure` (0.8); an account's estimate is its `max_concurrency` while it
//!   answers well, less after 429s and failures (`route::capacity`).
//!
//! A downgraded call is billed at the served model's price; the client sees the served model in the
//! response's `model` field (the supplier's) and in the `x-tollgate-model-served` header.

use super::Routing;
use crate::classify::Route;
use crate::inspect::{Kind, Work};
use crate::models::ModelRoute;
use crate::wire::{Head, TopLevel};
use std::sync::Arc;

/// Largest body still considered simple work.
pub const SIMPLE_MAX_BODY: usize = 16 * 1024;
/// Largest output cap still considered simple work.
pub const SIMPLE_MAX_OUTPUT: u64 = 2_048;

/// The cheaper model a call is served by under pressure, when route, key and work allow it.
/// `None`: the call keeps its model. Transcriptions and image calls are never downgraded (no
/// cheaper model hears the same audio; a cheaper image model draws another picture).
pub(crate) async fn target(
    r: &Routing<'_>,
    work: &Work<'_>,
    model: &ModelRoute,
    group_id: i64,
    route: Route,
) -> Option<Arc<ModelRoute>> {
    let target_id = model.model.downgrade_to.as_deref()?;
    if model.model.kind != settings::ModelKind::Text {
        return None;
    }
    let Kind::Text { fields, call } = &work.kind else {
        return None;
    };
    if work.no_downgrade || !is_simple(fields, call, work.body_bytes) {
        return None;
    }
    let target = r.router.resolve(target_id, group_id, route).ok()?;
    let pool: Vec<_> = model
        .accounts
        .iter()
        .filter_map(|&i| r.accounts.get(i))
        .collect();
    let names: Vec<&str> = pool.iter().map(|u| u.account.id.as_str()).collect();
    let capacity: Vec<u32> = pool.iter().map(|u| u.estimate.now()).collect();
    let in_use = r.slots.in_use(&names).await.ok()?;
    (pressure(&in_use, &capacity) >= r.settings.downgrade_pressure).then_some(target)
}

/// Whether a call is simple or standard work (a documented, testable classification).
pub(crate) fn is_simple(fields: &TopLevel<'_>, call: &Head, body_bytes: usize) -> bool {
    let present = |name: &str| {
        fields
            .get(name)
            .is_some_and(|v| !matches!(v.get().trim(), "null" | "[]"))
    };
    // Anthropic `thinking` and Gemini `thinkingConfig` ask for reasoning whatever their budget.
    let high_effort = fields
        .get("reasoning_effort")
        .is_some_and(|v| v.get().contains("high"))
        || fields
            .get("reasoning")
            .is_some_and(|v| v.get().contains("\"high\""))
        || present("thinking")
        || fields
            .get("generationConfig")
            .is_some_and(|v| v.get().contains("\"thinkingConfig\""));
    !present("tools")
        && !present("functions")
        && !high_effort
        && body_bytes <= SIMPLE_MAX_BODY
        && call.output_cap.is_none_or(|c| c <= SIMPLE_MAX_OUTPUT)
}

/// Pool pressure from slots in use and capacities (0 when there is no capacity at all).
pub(crate) fn pressure(in_use: &[u32], capacity: &[u32]) -> f64 {
    let cap: u64 = capacity.iter().map(|&c| u64::from(c)).sum();
    if cap == 0 {
        return 0.0;
    }
    let used: u64 = in_use.iter().map(|&u| u64::from(u)).sum();
    used as f64 / cap as f64
}

#[cfg(test)]
mod tests {
    use super::*;
    use translate::Format;
    use translate::request::{Endpoint, head, top_level};

    fn simple(body: &str) -> bool {
        let fields = top_level(body.as_bytes()).unwrap();
        let call = head(Format::Chat, Endpoint::Generate, "", &fields).unwrap();
        is_simple(&fields, &call, body.len())
    }

    #[test]
    fn classification() {
        assert!(simple(r#"{"model":"m","messages":[]}"#));
        assert!(simple(
            r#"{"model":"m","messages":[],"max_tokens":100,"tools":[]}"#
        ));
        assert!(!simple(
            r#"{"model":"m","messages":[],"tools":[{"type":"function"}]}"#
        ));
        assert!(!simple(
            r#"{"model":"m","messages":[],"reasoning_effort":"high"}"#
        ));
        assert!(!simple(r#"{"model":"m","messages":[],"max_tokens":4096}"#));
        assert!(!simple(
            r#"{"model":"m","messages":[],"thinking":{"type":"enabled","budget_tokens":1024}}"#
        ));
        assert!(!simple(
            r#"{"model":"m","messages":[],"generationConfig":{"thinkingConfig":{"thinkingBudget":512}}}"#
        ));
        let long = format!(
            r#"{{"model":"m","messages":[{{"role":"user","content":"{}"}}]}}"#,
            "x".repeat(20_000)
        );
        assert!(!simple(&long));
    }

    #[test]
    fn pressure_is_a_ratio() {
        assert_eq!(pressure(&[1, 0], &[2, 2]), 0.25);
        assert_eq!(pressure(&[], &[]), 0.0);
    }
}
