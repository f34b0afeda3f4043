//! The Gemini `generateContent` decoder: each event of a `streamGenerateContent?alt=sse` stream
//! is a whole `GenerateContentResponse`, and so is a body (a JSON array of them is read in order).
//!
//! Only `candidates[0]` is read. Parts: `text` (`thought: true` → thinking), `functionCall`
//! (whole: a start with a counter index and the id the supplier gave, else a synthesized
//! `call_<request id>_<index>`, then its `args` as one fragment); a `thoughtSignature` beside a
//! `functionCall` rides in that call's id (`crate::signature`), so the client echoes it back.
//! Other parts (inline data, code execution) and the signatures of text parts are dropped (Gemini
//! only requires the function calls' back). `usageMetadata` holds running totals: each
//! field keeps its last value. There is no terminal marker: the `finishReason` settles the stream.
//!
//! It is also the Gemini format's meter, with one typed reading of `usageMetadata` ([`RawUsage`])
//! for a translated event (from the decoded tree) and a passed-through one ([`Gemini::scan`], from
//! the bytes, only when they mention `"usageMetadata"`; a body may be an array of responses).
//!
//! Usage: `usageMetadata` with running totals on every streamed chunk; the last one holds the final
//! counts (never summed). input = `promptTokenCount` (which includes cached content) +
//! `toolUsePromptTokenCount`; cached = `cachedContentTokenCount`; output = `candidatesTokenCount` +
//! `thoughtsTokenCount` (thoughts are billed as output). A non-streaming `streamGenerateContent`
//! (no `alt=sse`) answers a JSON array of chunks: its last element's usage counts.

use serde::Deserialize;
use serde_json::Value;

use super::{Key, Scanned, error_message, has_text, mentions, text};
use crate::ir::{Event, FinishReason, Usage};

#[derive(Debug)]
pub(crate) struct Gemini {
    request_id: String,
    started: bool,
    tools: usize,
    usage: Running,
    settled: bool,
}

/// Gemini's usage fields, as last reported (each field present replaces the earlier value).
#[derive(Debug, Default, Clone, Copy)]
struct Running {
    prompt: Option<u64>,
    tool_prompt: Option<u64>,
    cached: Option<u64>,
    candidates: Option<u64>,
    thoughts: Option<u64>,
}

impl Running {
    /// The counts in canonical form, once the prompt was counted and when plausible.
    fn counted(&self) -> Option<Usage> {
        let thoughts = self.thoughts.unwrap_or(0);
        Usage {
            input: self.prompt?.checked_add(self.tool_prompt.unwrap_or(0))?,
            output: self.candidates.unwrap_or(0).checked_add(thoughts)?,
            cached: self.cached.unwrap_or(0),
            cache_write: 0,
            cache_write_1h: 0,
            reasoning: thoughts,
        }
        .plausible()
    }
}

/// Where usage sits in a `GenerateContentResponse`.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Carrier {
    usage_metadata: Option<RawUsage>,
}

/// Gemini's `usageMetadata`.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawUsage {
    prompt_token_count: Option<u64>,
    candidates_token_count: Option<u64>,
    cached_content_token_count: Option<u64>,
    thoughts_token_count: Option<u64>,
    tool_use_prompt_token_count: Option<u64>,
}

impl Gemini {
    pub fn new(request_id: &str) -> Gemini {
        Gemini {
            request_id: request_id.to_string(),
            started: false,
            tools: 0,
            usage: Running::default(),
            settled: false,
        }
    }

    /// One `GenerateContentResponse` (an event of the stream).
    pub fn response(&mut self, value: &Value, out: &mut Vec<Event>) {
        if let Some(error) = value.get("error").filter(|error| !error.is_null()) {
            out.push(Event::Error {
                message: error_message(error),
            });
            return;
        }
        if !value.is_object() {
            return;
        }
        if !self.started {
            self.started = true;
            out.push(Event::Start {
                id: text(value, "responseId")
                    .unwrap_or(&self.request_id)
                    .to_string(),
                model: text(value, "modelVersion").unwrap_or_default().to_string(),
            });
        }
        let candidate = value
            .get("candidates")
            .and_then(Value::as_array)
            .and_then(|candidates| candidates.first());
        let parts = candidate
            .and_then(|candidate| candidate.get("content"))
            .and_then(|content| content.get("parts"))
            .and_then(Value::as_array);
        for part in parts.into_iter().flatten() {
            self.part(part, out);
        }
        if let Some(usage) = value.get("usageMetadata") {
            if let Ok(usage) = RawUsage::deserialize(usage) {
                self.merge(usage);
            }
            out.extend(self.usage.counted().map(Event::Usage));
        }
        let reason = match candidate {
            Some(candidate) => text(candidate, "finishReason").map(|reason| self.reason(reason)),
            None => value
                .get("promptFeedback")
                .and_then(|feedback| text(feedback, "blockReason"))
                .map(|_| FinishReason::ContentFilter),
        };
        if let Some(reason) = reason {
            out.push(Event::Finish(reason));
            self.settled = true;
        }
    }

    /// A whole body; `false` when it is not a `GenerateContentResponse`.
    pub fn body(&mut self, body: &Value, out: &mut Vec<Event>) -> bool {
        let responses = match body {
            Value::Array(responses) => responses.as_slice(),
            single => std::slice::from_ref(single),
        };
        let known = ["candidates", "promptFeedback", "usageMetadata", "error"];
        let recognised = !responses.is_empty()
            && responses
                .iter()
                .all(|response| known.iter().any(|key| response.get(key).is_some()));
        if recognised {
            for response in responses {
                self.response(response, out);
            }
            self.settled = true;
        }
        recognised
    }

    pub fn settled(&self) -> bool {
        self.settled
    }

    /// The usage reported so far (running totals).
    pub fn reported(&self) -> Option<Usage> {
        self.usage.counted()
    }

    /// A passed-through event's data: its usage, else whether it carries text.
    pub fn scan(&mut self, data: &[u8]) -> Scanned {
        if mentions(data, Key::UsageMetadata)
            && let Ok(carrier) = serde_json::from_slice::<Carrier>(data)
            && let Some(usage) = carrier.usage_metadata
        {
            self.merge(usage);
            if self.reported().is_some() {
                return Scanned::Usage;
            }
        }
        match has_text(data, Key::Text) {
            true => Scanned::Text,
            false => Scanned::Nothing,
        }
    }

    /// A whole passed-through body: one response, or an array of them (a stream asked for
    /// without `alt=sse`), read in order.
    pub fn scan_body(&mut self, json: &[u8]) {
        let carriers = match serde_json::from_slice::<Carrier>(json) {
            Ok(carrier) => vec![carrier],
            Err(_) => serde_json::from_slice::<Vec<Carrier>>(json).unwrap_or_default(),
        };
        for usage in carriers.into_iter().filter_map(|c| c.usage_metadata) {
            self.merge(usage);
        }
    }

    fn part(&mut self, part: &Value, out: &mut Vec<Event>) {
        if let Some(call) = part.get("functionCall") {
            let index = self.tools;
            self.tools += 1;
            let id = text(call, "id")
                .filter(|id| !id.is_empty())
                .map(str::to_string)
                .unwrap_or_else(|| format!("call_{}_{index}", self.request_id));
            // A thought signature travels in the id the client echoes back (see `signature`).
            let id = match text(part, "thoughtSignature").filter(|s| !s.is_empty()) {
                Some(signature) => crate::signature::signed_id(&id, signature),
                None => id,
            };
            out.push(Event::ToolCallStart {
                index,
                id,
                name: text(call, "name").unwrap_or_default().to_string(),
            });
            let fragment = match call.get("args") {
                Some(args) if args.is_object() => args.to_string(),
                _ => "{}".to_string(),
            };
            out.push(Event::ToolCallArgs { index, fragment });
        } else if let Some(reply) = text(part, "text").filter(|t| !t.is_empty()) {
            if part.get("thought").and_then(Value::as_bool) == Some(true) {
                out.push(Event::Thinking(reply.to_string()));
            } else {
                out.push(Event::Text(reply.to_string()));
            }
        }
    }

    fn reason(&self, reason: &str) -> FinishReason {
        match reason {
            "STOP" if self.tools > 0 => FinishReason::ToolCalls,
            "STOP" => FinishReason::Stop,
            "MAX_TOKENS" => FinishReason::Length,
            "SAFETY" | "RECITATION" | "BLOCKLIST" | "PROHIBITED_CONTENT" | "SPII" => {
                FinishReason::ContentFilter
            }
            image if image.starts_with("IMAGE_") => FinishReason::ContentFilter,
            _ => FinishReason::Other,
        }
    }

    /// Each field present replaces the running one.
    fn merge(&mut self, usage: RawUsage) {
        let running = &mut self.usage;
        running.prompt = usage.prompt_token_count.or(running.prompt);
        running.tool_prompt = usage.tool_use_prompt_token_count.or(running.tool_prompt);
        running.cached = usage.cached_content_token_count.or(running.cached);
        running.candidates = usage.candidates_token_count.or(running.candidates);
        running.thoughts = usage.thoughts_token_count.or(running.thoughts);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Moved from the gateway's meter (its Gemini reader, gone): the billed usage.
    #[test]
    fn usage_in_every_form() {
        let usage = |body: &[u8]| {
            let mut decoder = Gemini::new("r");
            decoder.scan_body(body);
            decoder.reported()
        };
        let u = usage(br#"{"usageMetadata":{"promptTokenCount":10,"candidatesTokenCount":4,"thoughtsTokenCount":3,"cachedContentTokenCount":6,"totalTokenCount":17}}"#).unwrap();
        assert_eq!((u.input, u.output, u.cached), (10, 7, 6));
        let u = usage(br#"[{"usageMetadata":{"promptTokenCount":10}},{"usageMetadata":{"promptTokenCount":10,"candidatesTokenCount":5}}]"#).unwrap();
        assert_eq!((u.input, u.output), (10, 5));
        assert_eq!(usage(br#"{"candidates":[]}"#), None);
    }

    #[test]
    fn running_usage_last_wins_and_comes_before_finish() {
        let mut decoder = Gemini::new("r1");
        let mut out = Vec::new();
        decoder.response(&json!({"candidates":[{"content":{"role":"model","parts":[{"text":"Hel"}]},"index":0}],
            "usageMetadata":{"promptTokenCount":12,"totalTokenCount":12},"modelVersion":"gemini-2.5-flash","responseId":"abc"}), &mut out);
        assert!(!decoder.settled());
        decoder.response(&json!({"candidates":[{"content":{"role":"model","parts":[{"text":"lo"}]},"finishReason":"STOP","index":0}],
            "usageMetadata":{"promptTokenCount":12,"candidatesTokenCount":3,"thoughtsTokenCount":5,"cachedContentTokenCount":8,"totalTokenCount":20}}), &mut out);
        assert!(decoder.settled());
        assert_eq!(
            out,
            vec![
                Event::Start {
                    id: "abc".into(),
                    model: "gemini-2.5-flash".into()
                },
                Event::Text("Hel".into()),
                Event::Usage(Usage {
                    input: 12,
                    ..Usage::default()
                }),
                Event::Text("lo".into()),
                Event::Usage(Usage {
                    input: 12,
                    output: 8,
                    cached: 8,
                    cache_write: 0,
                    cache_write_1h: 0,
                    reasoning: 5
                }),
                Event::Finish(FinishReason::Stop),
            ]
        );
    }

    #[test]
    fn function_calls_get_ids_and_stop_means_tool_calls() {
        let mut decoder = Gemini::new("r2");
        let mut out = Vec::new();
        decoder.response(
            &json!({"candidates":[{"content":{"role":"model","parts":[
            {"text":"thinking…","thought":true},
            {"functionCall":{"name":"f","args":{"q":"x"}}},
            {"functionCall":{"id":"given","name":"g"}}]},"finishReason":"STOP"}]}),
            &mut out,
        );
        assert_eq!(
            &out[1..],
            &[
                Event::Thinking("thinking…".into()),
                Event::ToolCallStart {
                    index: 0,
                    id: "call_r2_0".into(),
                    name: "f".into()
                },
                Event::ToolCallArgs {
                    index: 0,
                    fragment: "{\"q\":\"x\"}".into()
                },
                Event::ToolCallStart {
                    index: 1,
                    id: "given".into(),
                    name: "g".into()
                },
                Event::ToolCallArgs {
                    index: 1,
                    fragment: "{}".into()
                },
                Event::Finish(FinishReason::ToolCalls),
            ]
        );
    }

    #[test]
    fn a_blocked_prompt_is_a_content_filter() {
        let mut decoder = Gemini::new("r3");
        let mut out = Vec::new();
        assert!(decoder.body(&json!({"promptFeedback":{"blockReason":"SAFETY"},"usageMetadata":{"promptTokenCount":4}}), &mut out));
        assert_eq!(
            out.last(),
            Some(&Event::Finish(FinishReason::ContentFilter))
        );
        assert!(!Gemini::new("r").body(&json!({"hello": 1}), &mut out));
    }
}
