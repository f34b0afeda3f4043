//! What the three encoders share: the conversation regrouped into turns of alternating roles,
//! each part keeping the canonical position a refusal names it by.

use super::origin::{Field, Origin};
use serde_json::Value;

use crate::Refusal;
use crate::ir::{Part, Request, Role};

/// One turn of the target's conversation: consecutive canonical messages of one role, merged.
#[derive(Debug)]
pub(super) struct Turn<'a> {
    pub(super) role: Role,
    /// Each part with its canonical position ([`Field::Part`]).
    pub(super) parts: Vec<(Field, &'a Part)>,
}

/// The conversation with the parts `keep` rejects removed, then consecutive turns of the same
/// role merged, so roles alternate and no turn is empty.
pub(super) fn turns<'a>(request: &'a Request, keep: impl Fn(Role, &Part) -> bool) -> Vec<Turn<'a>> {
    let mut turns: Vec<Turn<'a>> = Vec::new();
    for (m, message) in request.messages.iter().enumerate() {
        let parts = message
            .parts
            .iter()
            .enumerate()
            .filter(|(_, part)| keep(message.role, part))
            .map(|(p, part)| (Field::Part(m, p), part));
        match turns.last_mut() {
            Some(last) if last.role == message.role => last.parts.extend(parts),
            _ => {
                let parts: Vec<_> = parts.collect();
                if !parts.is_empty() {
                    turns.push(Turn {
                        role: message.role,
                        parts,
                    });
                }
            }
        }
    }
    turns
}

/// Puts a user turn's tool results before its other parts (order otherwise kept): Anthropic and
/// Gemini want the answers to the previous turn's calls first.
pub(super) fn tool_results_first(turn: &mut Turn<'_>) {
    turn.parts
        .sort_by_key(|(_, part)| !matches!(part, Part::ToolResult { .. }));
}

/// The stop sequences as a JSON array (`None` when there are none), refused when there are more
/// than the supplier's `limit`.
pub(super) fn stop(
    request: &Request,
    origin: &Origin,
    limit: usize,
) -> Result<Option<Value>, Refusal> {
    if request.stop.len() > limit {
        let param = origin.name(Field::Stop);
        return Err(Refusal::new(
            format!("`{param}` has more than {limit} sequences, the most the supplier accepts"),
            param,
        ));
    }
    Ok((!request.stop.is_empty()).then(|| Value::from(request.stop.clone())))
}

/// The system prompt as one text (parts joined by a blank line); `None` when it says nothing
/// (Messages rejects blank text, and an empty instruction means nothing anywhere).
pub(super) fn system(request: &Request) -> Option<String> {
    let system = request.system.join("\n\n");
    (!system.trim().is_empty()).then_some(system)
}

/// Whether a JSON Schema for tool parameters says nothing (absent or `{}`).
pub(super) fn empty_schema(schema: &Value) -> bool {
    match schema {
        Value::Null => true,
        Value::Object(map) => map.is_empty(),
        _ => false,
    }
}

/// A refusal for a part the target cannot hold in this turn (a tool call in a user turn, an
/// image in an assistant turn).
pub(super) fn misplaced(origin: &Origin, field: Field, turn: &str) -> Refusal {
    let param = origin.name(field);
    Refusal::new(
        format!("`{param}` cannot be sent in {turn} to this supplier"),
        param,
    )
}
