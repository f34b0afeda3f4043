//! Phase 6, metering: count what the supplier served while the response streams through.
//!
//! The supplier's answer is read once, by `translate::response::Answer`: it frames a stream
//! (one SSE reader) and hands each event to the supplier format's decoder, which is that format's
//! meter too. Passed through, the bytes reach the client untouched and each event is only
//! scanned (the few that may carry usage are decoded typed and borrowed, the rest searched for
//! text); translated, each event is decoded once, and the usage the client is shown is the usage
//! billed. This module adds what is the gateway's own: the audio durations, image counts and
//! rate-limit hints of JSON answers, and the estimate when no usage was reported.
//!
//! Runs inside Pingora's synchronous body filters, so it only parses and adds up: no I/O.
//! Bounds (`translate::response`): a body is kept up to `RAW_CAP` (`BODY_CAP` when translated)
//! and **skimmed** past it, a stream's line up to `LINE_CAP` and skimmed past it — a bounded copy
//! with the structure and the short strings, in which usage, images and durations are found
//! exactly as in the original. The usage a supplier reports is therefore read whatever the
//! answer's size.
//!
//! An error response (status ≥ 400) without usage served nothing and is recorded with zero tokens.
//! When no usage arrives otherwise (stream cut, malformed body) the result is an **estimate**,
//! flagged as such, and **never above what the request could have cost** ([`Meter::outcome`]):
//! input = ceil(request body bytes / 4) (at most the request's bytes), output = the number of
//! events carrying non-empty text seen (suppliers stream about one token per event), or for a JSON
//! body ceil(body bytes / 4), at most the request's output cap (or the configured default when it
//! set none); cached = 0. A supplier that sent no body byte at all served nothing: zero tokens. The
//! estimate is documented in docs/ARCHITECTURE.md.

use bytes::Bytes;
use opstate::Measurement;
use translate::Format;
use translate::Usage;
use translate::response::Answer;

/// Observes one response body (and, for a translated answer, replaces it).
pub(crate) struct Meter {
    answer: Answer,
    /// The supplier's format (what the gateway's own readings of a JSON body look for).
    supplier: Format,
    finished: bool,
    /// Audio calls: read the duration the supplier reports.
    audio: bool,
    audio_seconds: Option<u64>,
    /// Image calls: count the images the answer carries.
    images: bool,
    image_count: Option<u64>,
    /// Rate-limited answers: read the reset hint in the body.
    watch_reset: bool,
    reset_hint: Option<std::time::Duration>,
    /// Embedding calls: the tokens charged when the supplier reports none, and the ones it
    /// reported (`wire::embeddings::reported_tokens`).
    embedding: Option<u64>,
    embedding_tokens: Option<u64>,
}

impl std::fmt::Debug for Meter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Meter")
            .field("supplier", &self.supplier)
            .field("translates", &self.answer.translates())
            .field("bytes", &self.answer.bytes())
            .finish_non_exhaustive()
    }
}

/// Whether a `Content-Type` is a stream's.
pub(crate) fn is_sse(content_type: Option<&str>) -> bool {
    content_type.is_some_and(|c| c.trim_start().starts_with("text/event-stream"))
}

impl Meter {
    /// A meter for an answer in `supplier`'s format, passed through, whose `Content-Type` is
    /// `content_type`.
    #[cfg(test)]
    pub fn new(supplier: Format, content_type: Option<&str>) -> Meter {
        Meter::passing(supplier, is_sse(content_type))
    }

    /// A meter for an answer in `supplier`'s format, passed through (`sse`: it is a stream).
    pub fn passing(supplier: Format, sse: bool) -> Meter {
        Meter::reading(supplier, Answer::pass(supplier, sse))
    }

    /// A meter reading `answer` (passed through, or translated) from a supplier speaking
    /// `supplier`.
    pub fn reading(supplier: Format, answer: Answer) -> Meter {
        Meter {
            answer,
            supplier,
            finished: false,
            audio: false,
            audio_seconds: None,
            images: false,
            image_count: None,
            watch_reset: false,
            reset_hint: None,
            embedding: None,
            embedding_tokens: None,
        }
    }

    /// Embedding calls: read the input tokens the answer reports; `estimate` when it reports
    /// none.
    pub fn embedding(mut self, estimate: u64) -> Meter {
        self.embedding = Some(estimate);
        self
    }

    /// Audio calls also read the duration the supplier reports, rate-limited answers that reach
    /// the client also read the reset their body names.
    pub fn watching(mut self, audio: bool, watch_reset: bool) -> Meter {
        self.audio = audio;
        self.watch_reset = watch_reset;
        self
    }

    /// Image calls: count the images of the answer.
    pub fn count_images(&mut self, images: bool) {
        self.images = images;
    }

    /// Feeds one chunk of the response body as it passes to the client (`end_of_stream`: the
    /// body ends with it). A translated answer's chunk is replaced by the client's bytes.
    pub fn body(&mut self, body: &mut Option<Bytes>, end_of_stream: bool) {
        let mut out = match body.as_ref().filter(|chunk| !chunk.is_empty()) {
            Some(chunk) => self.answer.feed(chunk),
            None => Vec::new(),
        };
        if end_of_stream {
            out.extend(self.answer.finish());
            self.finish();
        }
        if self.answer.translates() {
            *body = Some(Bytes::from(out));
        }
    }

    /// Feeds one chunk of a passed-through body.
    #[cfg(test)]
    pub fn observe(&mut self, chunk: &[u8]) {
        self.answer.feed(chunk);
    }

    /// Called once the body has ended (or was cut).
    pub fn finish(&mut self) {
        if std::mem::replace(&mut self.finished, true) {
            return;
        }
        self.answer.finish();
        let json = self.answer.body();
        if self.answer.stream() || json.is_empty() {
            return;
        }
        if self.audio && matches!(self.supplier, Format::Chat | Format::Responses) {
            self.audio_seconds = translate::response::audio_seconds(json);
        }
        if self.images {
            self.image_count = match self.supplier {
                Format::Gemini => crate::wire::images::gemini_count(json),
                Format::Messages => None,
                Format::Chat | Format::Responses => crate::wire::images::openai_count(json),
            };
        }
        if self.watch_reset {
            self.reset_hint = crate::wire::hints::body_hint(json);
        }
        if self.embedding.is_some() {
            self.embedding_tokens = crate::wire::embeddings::reported_tokens(self.supplier, json);
        }
    }

    /// Whether the supplier reported usage (tokens, for audio a duration, for images a count).
    pub fn has_usage(&self) -> bool {
        self.answer.reported().is_some()
            || self.audio_seconds.is_some()
            || self.image_count.is_some()
            || self.embedding_tokens.is_some()
    }

    /// The images a whole, readable image answer carried (`None`: not an image call, or the
    /// answer was cut, unreadable or over the cap).
    pub fn images(&self) -> Option<u64> {
        self.image_count
    }

    /// The token counts the supplier reported, if it did.
    pub fn reported(&self) -> Option<Usage> {
        self.answer.reported()
    }

    /// The seconds of audio the supplier reported, if it did.
    pub fn audio_seconds(&self) -> Option<u64> {
        self.audio_seconds
    }

    /// The reset time a rate-limited body named, if it was watched and named one.
    pub fn reset_hint(&self) -> Option<std::time::Duration> {
        self.reset_hint
    }

    /// Whether the answer's content began: a stream's first event carrying text.
    pub fn began(&self) -> bool {
        self.answer.text_events() > 0
    }

    /// Whether the stream carried the supplier's error event.
    pub fn errored(&self) -> bool {
        self.answer.errored()
    }

    /// The body bytes the supplier sent so far.
    pub fn body_bytes(&self) -> u64 {
        self.answer.bytes()
    }

    /// Whether the supplier sent any body byte at all.
    pub fn served_bytes(&self) -> bool {
        self.answer.bytes() > 0
    }

    /// The usage of the call and how it was obtained. `request_bytes` (the client's body) and
    /// `output_bound` (the request's output cap, or the configured default when it set none)
    /// bound the estimate.
    ///
    /// - Reported usage is exact.
    /// - No body byte at all (the supplier stalled after its headers, or closed): nothing was
    ///   served, zero tokens.
    /// - Otherwise an estimate: input = what the stream reported before it ended (Anthropic's
    ///   `message_start`), else ⌈request bytes / 4⌉; output = the events carrying text
    ///   (streams), or ⌈response body bytes / 4⌉ (a JSON body without `usage`), at most
    ///   `output_bound`. An estimate is never above what the request could have cost: input at
    ///   most `request_bytes` tokens, output at most `output_bound`.
    ///
    /// An embedding: the input tokens its answer reports, else (bytes were served) the estimate
    /// from its inputs' size (`EmbeddingCall::estimate`, at most ⌈request bytes / 2⌉, the
    /// hold's bound); never output.
    pub fn outcome(&self, request_bytes: usize, output_bound: u64) -> (Usage, Measurement) {
        if let Some(estimate) = self.embedding {
            let input = |input| Usage {
                input,
                ..Usage::default()
            };
            return match self.embedding_tokens {
                Some(n) => (input(n), Measurement::Exact),
                None if self.answer.bytes() == 0 => (Usage::default(), Measurement::Exact),
                None => (
                    input(estimate.min((request_bytes as u64).div_ceil(2))),
                    Measurement::Estimated,
                ),
            };
        }
        if let Some(usage) = self.answer.reported() {
            return (usage, Measurement::Exact);
        }
        if self.answer.bytes() == 0 {
            return (Usage::default(), Measurement::Exact);
        }
        let so_far = self.answer.reported_so_far();
        let output = match self.answer.stream() {
            true => self.answer.text_events(),
            false => self.answer.bytes().div_ceil(4),
        };
        (
            Usage {
                // The input a stream reported before it was cut is exact; else estimated.
                input: so_far.map_or((request_bytes as u64).div_ceil(4), |u| u.input),
                output: output.min(output_bound),
                cached: so_far.map_or(0, |u| u.cached),
                cache_write: so_far.map_or(0, |u| u.cache_write),
                cache_write_1h: so_far.map_or(0, |u| u.cache_write_1h),
                reasoning: 0,
            },
            Measurement::Estimated,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(content_type: &str, chunks: &[&[u8]]) -> (Usage, Measurement) {
        let mut m = Meter::new(Format::Chat, Some(content_type));
        for c in chunks {
            m.observe(c);
        }
        m.finish();
        m.outcome(400, 4096)
    }

    const CHAT: &[u8] = b"data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\ndata: {\"choices\":[{\"delta\":{\"content\":\"b\"}}]}\n\ndata: {\"choices\":[],\"usage\":{\"prompt_tokens\":11,\"completion_tokens\":5,\"prompt_tokens_details\":{\"cached_tokens\":2}}}\n\ndata: [DONE]\n\n";

    #[test]
    fn chat_stream_usage_across_any_split() {
        let expected = (
            Usage {
                cache_write: 0,
                cache_write_1h: 0,
                reasoning: 0,
                input: 11,
                output: 5,
                cached: 2,
            },
            Measurement::Exact,
        );
        for cut in 0..CHAT.len() {
            let (a, b) = CHAT.split_at(cut);
            assert_eq!(run("text/event-stream", &[a, b]), expected, "cut at {cut}");
        }
        let bytes: Vec<&[u8]> = CHAT.chunks(1).collect();
        assert_eq!(run("text/event-stream; charset=utf-8", &bytes), expected);
    }

    #[test]
    fn responses_stream_usage() {
        let body = b"event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\" w1\"}\n\nevent: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"usage\":{\"input_tokens\":7,\"output_tokens\":3,\"input_tokens_details\":{\"cached_tokens\":0}}}}\n\n";
        assert_eq!(
            run("text/event-stream", &[body]),
            (
                Usage {
                    cache_write: 0,
                    cache_write_1h: 0,
                    reasoning: 0,
                    input: 7,
                    output: 3,
                    cached: 0
                },
                Measurement::Exact
            )
        );
    }

    #[test]
    fn cut_stream_is_estimated() {
        let cut = &CHAT[..CHAT.len() / 2];
        let (u, m) = run("text/event-stream", &[cut]);
        assert_eq!(m, Measurement::Estimated);
        assert_eq!(
            u,
            Usage {
                cache_write: 0,
                cache_write_1h: 0,
                reasoning: 0,
                input: 100,
                output: 2,
                cached: 0
            }
        );
    }

    #[test]
    fn json_body_usage() {
        let body =
            br#"{"id":"x","usage":{"prompt_tokens":9,"completion_tokens":4,"total_tokens":13}}"#;
        let (a, b) = body.split_at(20);
        assert_eq!(
            run("application/json", &[a, b]),
            (
                Usage {
                    cache_write: 0,
                    cache_write_1h: 0,
                    reasoning: 0,
                    input: 9,
                    output: 4,
                    cached: 0
                },
                Measurement::Exact
            )
        );
        assert_eq!(
            run("application/json", &[b"{not json"]).1,
            Measurement::Estimated
        );
    }

    #[test]
    fn implausible_or_malformed_usage_is_not_trusted() {
        let body = br#"{"usage":{"prompt_tokens":999999999999,"completion_tokens":1}}"#;
        assert_eq!(run("application/json", &[body]).1, Measurement::Estimated);
        let sse = b"data: {not json \"usage\"\n\ngarbage line\n\n";
        assert_eq!(run("text/event-stream", &[sse]).1, Measurement::Estimated);
    }

    #[test]
    fn huge_lines_are_skipped_without_growing() {
        let mut m = Meter::new(Format::Chat, Some("text/event-stream"));
        let big = vec![b'x'; 64 * 1024];
        for _ in 0..40 {
            m.observe(&big);
        }
        m.observe(b"\n");
        m.observe(CHAT);
        m.finish();
        assert_eq!(m.outcome(0, 4096).1, Measurement::Exact);
    }

    #[test]
    fn audio_durations() {
        let seconds = |body: &[u8]| {
            let mut m = Meter::new(Format::Chat, Some("application/json")).watching(true, false);
            m.observe(body);
            m.finish();
            m.audio_seconds()
        };
        assert_eq!(
            seconds(br#"{"text":"hi","usage":{"type":"duration","seconds":9}}"#),
            Some(9)
        );
        assert_eq!(seconds(br#"{"text":"hi","duration":8.2}"#), Some(9));
        assert_eq!(
            seconds(
                br#"{"text":"hi","usage":{"type":"tokens","input_tokens":3,"output_tokens":1}}"#
            ),
            None
        );
        assert_eq!(seconds(br#"{"text":"hi","duration":-1}"#), None);
        assert_eq!(seconds(b"plain transcript"), None);
        // Without the audio flag the duration is not read.
        let mut m = Meter::new(Format::Chat, Some("application/json"));
        m.observe(br#"{"duration":3}"#);
        m.finish();
        assert_eq!(m.audio_seconds(), None);
    }

    #[test]
    fn reset_hints_in_watched_bodies() {
        let mut m = Meter::new(Format::Chat, Some("application/json")).watching(false, true);
        m.observe(br#"{"error":{"message":"Rate limit reached. Please try again in 20s."}}"#);
        m.finish();
        assert_eq!(m.reset_hint(), Some(std::time::Duration::from_secs(20)));
        assert!(!m.has_usage());
    }

    /// Feeds `total` bytes: `head`, then `filler` repeated in 64 KiB chunks, then `tail`.
    fn huge(wire: Format, ct: &str, head: &[u8], filler: u8, total: usize, tail: &[u8]) -> Meter {
        let mut m = Meter::new(wire, Some(ct));
        m.observe(head);
        let chunk = vec![filler; 64 * 1024];
        let mut left = total - head.len() - tail.len();
        while left > 0 {
            let n = left.min(chunk.len());
            m.observe(&chunk[..n]);
            left -= n;
        }
        m.observe(tail);
        m.finish();
        m
    }

    #[test]
    fn huge_json_answers_are_charged_their_reported_usage() {
        for total in [10 << 20, 100 << 20] {
            let m = huge(
                Format::Chat,
                "application/json",
                br#"{"id":"c","choices":[{"message":{"role":"assistant","content":""#,
                b'a',
                total,
                br#""}}],"usage":{"prompt_tokens":12,"completion_tokens":16}}"#,
            );
            assert_eq!(
                m.outcome(100, 64),
                (
                    Usage {
                        cache_write: 0,
                        cache_write_1h: 0,
                        reasoning: 0,
                        input: 12,
                        output: 16,
                        cached: 0
                    },
                    Measurement::Exact
                )
            );
            assert!(m.answer.body().len() <= translate::response::RAW_CAP);
            let g = huge(
                Format::Gemini,
                "application/json",
                br#"{"candidates":[{"content":{"parts":[{"text":""#,
                b'g',
                total,
                br#""}]}}],"usageMetadata":{"promptTokenCount":5,"candidatesTokenCount":9}}"#,
            );
            assert_eq!(
                g.reported().map(|u| (u.input, u.output)),
                Some((5, 9)),
                "{total}"
            );
        }
    }

    #[test]
    fn one_huge_sse_line_is_charged_its_reported_usage() {
        let m = huge(
            Format::Chat,
            "text/event-stream",
            b"data: {\"choices\":[{\"delta\":{\"content\":\"",
            b'z',
            10 << 20,
            b"\"}}],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":8}}\n\ndata: [DONE]\n\n",
        );
        assert_eq!(
            m.outcome(100, 64),
            (
                Usage {
                    cache_write: 0,
                    cache_write_1h: 0,
                    reasoning: 0,
                    input: 3,
                    output: 8,
                    cached: 0
                },
                Measurement::Exact
            )
        );
        // A huge line with text and no usage counts as one text event.
        let cut = huge(
            Format::Chat,
            "text/event-stream",
            b"data: {\"choices\":[{\"delta\":{\"content\":\"",
            b'z',
            4 << 20,
            b"\"}}]}\n\n",
        );
        assert_eq!(
            cut.outcome(100, 64),
            (
                Usage {
                    cache_write: 0,
                    cache_write_1h: 0,
                    reasoning: 0,
                    input: 25,
                    output: 1,
                    cached: 0
                },
                Measurement::Estimated
            )
        );
    }

    #[test]
    fn cut_bodies_are_estimated_within_the_request_bounds() {
        let m = huge(
            Format::Chat,
            "application/json",
            b"{\"choices\":[{\"message\":{\"content\":\"",
            b'a',
            10 << 20,
            b"",
        );
        let (usage, measurement) = m.outcome(40, 64);
        assert_eq!(measurement, Measurement::Estimated);
        assert_eq!((usage.input, usage.output), (10, 64));
    }

    mod properties {
        use super::*;
        use proptest::prelude::*;

        /// Splits `bytes` at the sorted, deduplicated `cuts`.
        fn split<'a>(bytes: &'a [u8], cuts: &[usize]) -> Vec<&'a [u8]> {
            let mut cuts: Vec<usize> = cuts.iter().map(|c| c % (bytes.len() + 1)).collect();
            cuts.sort_unstable();
            cuts.dedup();
            let mut out = Vec::new();
            let mut from = 0;
            for c in cuts {
                out.push(&bytes[from..c]);
                from = c;
            }
            out.push(&bytes[from..]);
            out
        }

        proptest! {
            /// The usage found in a stream never depends on where the chunks split.
            #[test]
            fn sse_usage_is_independent_of_chunking(cuts in proptest::collection::vec(0usize..400, 0..40)) {
                let whole = run("text/event-stream", &[CHAT]);
                prop_assert_eq!(run("text/event-stream", &split(CHAT, &cuts)), whole);
            }

            /// Arbitrary bytes, streamed or not, in any chunking: no panic, and without usage
            /// the outcome is the estimate or (no byte) nothing.
            #[test]
            fn arbitrary_bytes_never_panic(
                bytes in proptest::collection::vec(any::<u8>(), 0..2000),
                cuts in proptest::collection::vec(0usize..2000, 0..20),
                sse in any::<bool>(),
            ) {
                let ct = if sse { "text/event-stream" } else { "application/json" };
                let (usage, measurement) = run(ct, &split(&bytes, &cuts));
                if bytes.is_empty() {
                    prop_assert_eq!((usage, measurement), (Usage::default(), Measurement::Exact));
                }
            }

            /// No estimate exceeds what the request could have cost: input at most the
            /// request's bytes, output at most its output bound, whatever the answer.
            #[test]
            fn estimates_never_exceed_the_request_bounds(
                bytes in proptest::collection::vec(any::<u8>(), 0..3000),
                events in 0usize..200,
                request_bytes in 0usize..100_000,
                output_bound in 0u64..5000,
                wire in prop_oneof![Just(Format::Chat), Just(Format::Messages), Just(Format::Gemini)],
                sse in any::<bool>(),
            ) {
                let ct = if sse { "text/event-stream" } else { "application/json" };
                let mut m = Meter::new(wire, Some(ct));
                m.observe(&bytes);
                for _ in 0..events {
                    m.observe(b"data: {\"choices\":[{\"delta\":{\"content\":\"t\"}}],\"delta\":{\"type\":\"text_delta\",\"text\":\"t\"},\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"t\"}]}}]}\n\n");
                }
                m.finish();
                let (usage, measurement) = m.outcome(request_bytes, output_bound);
                if measurement == Measurement::Estimated && m.answer.reported_so_far().is_none() {
                    prop_assert!(usage.input <= request_bytes as u64);
                    prop_assert!(usage.output <= output_bound);
                    prop_assert_eq!(usage.cached, 0);
                }
            }
        }
    }
}
