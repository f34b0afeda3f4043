//! Token usage: the [`Usage`] a reply reports, its defaults, the
//! `x-mock-usage` header that overrides it, and how it maps onto the usage
//! objects of each wire format (OpenAI chat and responses, Anthropic Messages,
//! Gemini `usageMetadata`).
//!
//! Across formats `prompt` always means ALL input tokens (cached and
//! cache-written ones included) and `completion` all billed output tokens
//! (Gemini thoughts included):
//!
//! | format    | mapping                                                                                         |
//! |-----------|-------------------------------------------------------------------------------------------------|
//! | chat      | `prompt_tokens = prompt`, `completion_tokens = completion`, `prompt_tokens_details.cached_tokens = cached` |
//! | responses | `input_tokens = prompt`, `output_tokens = completion`, `input_tokens_details.cached_tokens = cached` |
//! | Anthropic | `input_tokens = prompt - cached - cache_creation` (saturating), `cache_read_input_tokens = cached`, `cache_creation_input_tokens = cache_creation`, `output_tokens = completion` |
//! | Gemini    | `promptTokenCount = prompt`, `candidatesTokenCount = completion - thoughts` (saturating), `thoughtsTokenCount = thoughts` (omitted when 0), `cachedContentTokenCount = cached` (omitted when 0), `totalTokenCount = prompt + completion` |

use serde_json::{Map, Value, json};

/// The default prompt token count: `ceil(body_len / 4)`.
pub fn default_prompt_tokens(body_len: usize) -> u64 {
    (body_len as u64).div_ceil(4)
}

/// Token counts reported in a reply's usage object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Usage {
    /// All prompt / input tokens (cached and cache-written ones included).
    pub prompt: u64,
    /// All billed completion / output tokens (thoughts included).
    pub completion: u64,
    /// Cached prompt tokens (cache reads), part of `prompt`.
    pub cached: u64,
    /// Prompt tokens written to the cache (Anthropic
    /// `cache_creation_input_tokens`), part of `prompt`. Default 0.
    pub cache_creation: u64,
    /// The part of `cache_creation` written for an hour (`x-mock-usage` `cache_creation_1h`):
    /// when not 0, Anthropic's usage also carries `cache_creation: {ephemeral_5m_input_tokens,
    /// ephemeral_1h_input_tokens}`. Default 0.
    pub cache_creation_1h: u64,
    /// Reasoning tokens (Gemini `thoughtsTokenCount`), part of `completion`.
    /// Default 0.
    pub thoughts: u64,
}

impl Usage {
    /// The defaults for a request body of `body_len` bytes and `n` pieces.
    pub fn defaults(body_len: usize, n: usize) -> Usage {
        Usage {
            prompt: default_prompt_tokens(body_len),
            completion: n as u64,
            cached: 0,
            cache_creation: 0,
            cache_creation_1h: 0,
            thoughts: 0,
        }
    }

    /// Applies an `x-mock-usage` header value
    /// (`prompt=11,completion=5,cached=2,cache_creation=3,thoughts=1`, any
    /// subset, any order) on top of `self`.
    pub fn with_header(mut self, header: &str) -> Result<Usage, String> {
        for item in header.split(',') {
            let item = item.trim();
            if item.is_empty() {
                continue;
            }
            let (key, value) = item
                .split_once('=')
                .ok_or_else(|| format!("x-mock-usage item `{item}` is not key=value"))?;
            let value: u64 = value
                .trim()
                .parse()
                .map_err(|_| format!("x-mock-usage value in `{item}` is not an integer"))?;
            match key.trim() {
                "prompt" => self.prompt = value,
                "completion" => self.completion = value,
                "cached" => self.cached = value,
                "cache_creation" => self.cache_creation = value,
                "cache_creation_1h" => self.cache_creation_1h = value,
                "thoughts" => self.thoughts = value,
                other => return Err(format!("x-mock-usage key `{other}` is unknown")),
            }
        }
        Ok(self)
    }

    /// prompt + completion.
    pub fn total(&self) -> u64 {
        self.prompt.saturating_add(self.completion)
    }

    /// The chat-completions usage object.
    pub fn chat_json(&self) -> Value {
        json!({
            "prompt_tokens": self.prompt,
            "completion_tokens": self.completion,
            "total_tokens": self.total(),
            "prompt_tokens_details": {"cached_tokens": self.cached},
        })
    }

    /// The responses-API usage object.
    pub fn responses_json(&self) -> Value {
        json!({
            "input_tokens": self.prompt,
            "output_tokens": self.completion,
            "total_tokens": self.total(),
            "input_tokens_details": {"cached_tokens": self.cached},
        })
    }

    /// Anthropic `input_tokens`: the uncached, unwritten part of the prompt.
    pub fn anthropic_input(&self) -> u64 {
        self.prompt
            .saturating_sub(self.cached)
            .saturating_sub(self.cache_creation)
    }

    /// An Anthropic usage object reporting `output_tokens` output tokens
    /// (the final count, or 1 in `message_start`).
    pub fn anthropic_json(&self, output_tokens: u64) -> Value {
        let mut usage = json!({
            "input_tokens": self.anthropic_input(),
            "cache_creation_input_tokens": self.cache_creation,
            "cache_read_input_tokens": self.cached,
            "output_tokens": output_tokens,
        });
        if self.cache_creation_1h > 0 {
            usage["cache_creation"] = json!({
                "ephemeral_5m_input_tokens": self.cache_creation.saturating_sub(self.cache_creation_1h),
                "ephemeral_1h_input_tokens": self.cache_creation_1h,
            });
        }
        usage
    }

    /// Gemini `candidatesTokenCount` of the finished reply:
    /// `completion - thoughts` (saturating).
    pub fn gemini_candidates(&self) -> u64 {
        self.completion.saturating_sub(self.thoughts)
    }

    /// A Gemini `usageMetadata` object with `candidates` candidate tokens so
    /// far (the final one has [`gemini_candidates`](Self::gemini_candidates)):
    /// `totalTokenCount = prompt + candidates + thoughts`.
    pub fn gemini_json(&self, candidates: u64) -> Value {
        let mut m = Map::new();
        m.insert("promptTokenCount".into(), Value::from(self.prompt));
        m.insert("candidatesTokenCount".into(), Value::from(candidates));
        if self.thoughts > 0 {
            m.insert("thoughtsTokenCount".into(), Value::from(self.thoughts));
        }
        if self.cached > 0 {
            m.insert("cachedContentTokenCount".into(), Value::from(self.cached));
        }
        let total = self
            .prompt
            .saturating_add(candidates)
            .saturating_add(self.thoughts);
        m.insert("totalTokenCount".into(), Value::from(total));
        Value::Object(m)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usage_defaults_and_header() {
        assert_eq!(default_prompt_tokens(0), 0);
        assert_eq!(default_prompt_tokens(8), 2);
        assert_eq!(default_prompt_tokens(9), 3);
        let u = Usage::defaults(9, 5)
            .with_header("cached=2, prompt=11")
            .unwrap();
        assert_eq!(
            u,
            Usage {
                prompt: 11,
                completion: 5,
                cached: 2,
                cache_creation: 0,
                cache_creation_1h: 0,
                thoughts: 0,
            }
        );
        assert_eq!(u.total(), 16);
        assert_eq!(
            u.chat_json(),
            json!({"prompt_tokens":11,"completion_tokens":5,"total_tokens":16,"prompt_tokens_details":{"cached_tokens":2}})
        );
        assert_eq!(
            u.responses_json(),
            json!({"input_tokens":11,"output_tokens":5,"total_tokens":16,"input_tokens_details":{"cached_tokens":2}})
        );
        let u = u.with_header("cache_creation=4,thoughts=1").unwrap();
        assert_eq!((u.cache_creation, u.thoughts), (4, 1));
        assert!(Usage::defaults(1, 1).with_header("prompt=x").is_err());
        assert!(Usage::defaults(1, 1).with_header("bogus=1").is_err());
        assert!(Usage::defaults(1, 1).with_header("prompt").is_err());
    }

    #[test]
    fn anthropic_mapping() {
        let u = Usage::defaults(0, 0)
            .with_header("prompt=100,completion=7,cached=30,cache_creation=20")
            .unwrap();
        assert_eq!(
            u.anthropic_json(7),
            json!({"input_tokens":50,"cache_creation_input_tokens":20,"cache_read_input_tokens":30,"output_tokens":7})
        );
        let hour = u.with_header("cache_creation_1h=15").unwrap();
        assert_eq!(
            hour.anthropic_json(7)["cache_creation"],
            json!({"ephemeral_5m_input_tokens": 5, "ephemeral_1h_input_tokens": 15})
        );
        let tiny = Usage::defaults(0, 0)
            .with_header("prompt=10,cached=30")
            .unwrap();
        assert_eq!(tiny.anthropic_input(), 0);
    }

    #[test]
    fn gemini_mapping() {
        let u = Usage::defaults(0, 0)
            .with_header("prompt=100,completion=9,cached=40,thoughts=4")
            .unwrap();
        assert_eq!(u.gemini_candidates(), 5);
        assert_eq!(
            u.gemini_json(5),
            json!({"promptTokenCount":100,"candidatesTokenCount":5,"thoughtsTokenCount":4,"cachedContentTokenCount":40,"totalTokenCount":109})
        );
        let plain = Usage::defaults(0, 3).with_header("prompt=10").unwrap();
        assert_eq!(
            plain.gemini_json(2),
            json!({"promptTokenCount":10,"candidatesTokenCount":2,"totalTokenCount":12})
        );
    }
}
