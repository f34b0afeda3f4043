//! Skimming a JSON document as its bytes pass: a bounded copy that keeps the document's structure
//! and every short string, and replaces the content of each long string with a short stand-in.
//!
//! What the meter reads in an answer (usage objects, image entries, durations, error messages)
//! is structure, numbers and short strings; what makes an answer large is long strings (generated
//! text, base64 images). A skimmed copy of a 100 MiB answer is therefore a few hundred bytes, and
//! the readers (the format decoders' usage, the gateway's image counts, …) read it exactly as
//! they read the whole answer. Nothing here allocates more than [`SKIM_CAP`] + [`CAPTURE_CAP`] × members kept,
//! whatever the input's size.
//!
//! Should a document's structure itself exceed [`SKIM_CAP`] (millions of small values), the copy
//! is dropped; the top-level members named in [`KEPT`] (`usage`, `usageMetadata`, …) are still
//! captured on their own, so the usage a supplier reported is read whatever the answer's size.
//!
//! Bytes that are not JSON are copied as they come (bounded the same way); the readers then find
//! nothing, as they would in the original.

/// Largest skimmed copy kept.
pub const SKIM_CAP: usize = 1024 * 1024;
/// Longest string content kept as it is; longer ones become `"..."`.
pub const STRING_KEEP: usize = 4096;
/// Largest top-level member value captured on its own.
pub const CAPTURE_CAP: usize = 64 * 1024;
/// What a long string's content becomes: non-empty (an image entry or a text delta still carries
/// a string), and valid JSON string content.
const STAND_IN: &[u8] = b"...";
/// Top-level members captured on their own, in case the skimmed copy overflows.
pub const KEPT: &[&[u8]] = &[b"usage", b"usageMetadata", b"duration", b"error"];
/// Longest top-level key remembered (longer keys are never in [`KEPT`]).
const KEY_CAP: usize = 64;

/// A skimmer for one JSON document (a whole body, or the data of one SSE event).
#[derive(Debug, Default)]
pub struct Skim {
    out: Vec<u8>,
    overflow: bool,
    /// Inside a string; its content so far (up to [`STRING_KEEP`]), and whether it went past that.
    in_string: bool,
    escape: bool,
    string: Vec<u8>,
    long: bool,
    /// Open containers.
    depth: u32,
    /// The document is an object (its first byte was `{`).
    object: bool,
    started: bool,
    /// At depth 1 of the top-level object, the next string is a key.
    expect_key: bool,
    string_is_key: bool,
    key: Vec<u8>,
    /// The value of a [`KEPT`] member being captured.
    capture: Option<(Vec<u8>, Vec<u8>)>,
    capture_overflow: bool,
    captured: Vec<(Vec<u8>, Vec<u8>)>,
}

impl Skim {
    /// Feeds the next bytes of the document.
    pub fn feed(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            if self.in_string {
                bytes = self.string_bytes(bytes);
                continue;
            }
            let b = bytes[0];
            bytes = &bytes[1..];
            self.structural(b);
        }
    }

    /// The skimmed document: the whole copy when it fit, else a document made of the captured
    /// top-level members, else `None`.
    pub fn finish(mut self) -> Option<Vec<u8>> {
        if self.in_string {
            // A cut document: the reader will refuse it as it would the original.
            self.close_string();
        }
        if !self.overflow {
            return Some(self.out);
        }
        if self.captured.is_empty() {
            return None;
        }
        let mut doc = b"{".to_vec();
        for (i, (key, value)) in self.captured.iter().enumerate() {
            if i > 0 {
                doc.push(b',');
            }
            doc.push(b'"');
            doc.extend_from_slice(key);
            doc.extend_from_slice(b"\":");
            doc.extend_from_slice(value);
        }
        doc.push(b'}');
        Some(doc)
    }

    /// Consumes string bytes up to and including the closing quote; returns the rest.
    fn string_bytes<'a>(&mut self, bytes: &'a [u8]) -> &'a [u8] {
        if self.escape {
            self.escape = false;
            self.string_push(&bytes[..1]);
            return &bytes[1..];
        }
        match memchr::memchr2(b'"', b'\\', bytes) {
            None => {
                self.string_push(bytes);
                &[]
            }
            Some(i) if bytes[i] == b'\\' => {
                self.string_push(&bytes[..=i]);
                self.escape = true;
                &bytes[i + 1..]
            }
            Some(i) => {
                self.string_push(&bytes[..i]);
                self.close_string();
                &bytes[i + 1..]
            }
        }
    }

    fn string_push(&mut self, content: &[u8]) {
        if self.long {
            return;
        }
        if self.string.len() + content.len() > STRING_KEEP {
            self.long = true;
            self.string = Vec::new();
        } else {
            self.string.extend_from_slice(content);
        }
    }

    fn close_string(&mut self) {
        self.in_string = false;
        self.escape = false;
        let content = std::mem::take(&mut self.string);
        let long = std::mem::replace(&mut self.long, false);
        let kept: &[u8] = if long { STAND_IN } else { &content };
        if std::mem::replace(&mut self.string_is_key, false) {
            self.key = if long || kept.len() > KEY_CAP {
                Vec::new()
            } else {
                kept.to_vec()
            };
        }
        self.emit(b"\"");
        self.emit(kept);
        self.emit(b"\"");
    }

    fn structural(&mut self, b: u8) {
        match b {
            b' ' | b'\t' | b'\r' | b'\n' => return,
            b'"' => {
                self.in_string = true;
                self.string_is_key = self.expect_key && self.depth == 1;
                self.expect_key = false;
                // The opening quote is written with the content when the string closes.
                return;
            }
            _ => {}
        }
        let top = self.depth == 1 && self.object;
        match b {
            b'{' | b'[' => {
                if !self.started {
                    self.object = b == b'{';
                }
                self.depth = self.depth.saturating_add(1);
                self.expect_key = self.depth == 1 && b == b'{';
            }
            b'}' | b']' => {
                if top {
                    self.end_capture();
                }
                self.depth = self.depth.saturating_sub(1);
            }
            b',' if top => {
                self.end_capture();
                self.expect_key = true;
            }
            b':' if top => {
                self.emit(b":");
                let key = std::mem::take(&mut self.key);
                if KEPT.contains(&key.as_slice()) {
                    self.capture = Some((key, Vec::new()));
                    self.capture_overflow = false;
                }
                self.started = true;
                return;
            }
            _ => {}
        }
        self.started = true;
        self.emit(&[b]);
    }

    fn end_capture(&mut self) {
        if let Some((key, value)) = self.capture.take()
            && !self.capture_overflow
            && !value.is_empty()
        {
            self.captured.retain(|(k, _)| *k != key);
            self.captured.push((key, value));
        }
    }

    fn emit(&mut self, bytes: &[u8]) {
        if !self.overflow {
            if self.out.len() + bytes.len() > SKIM_CAP {
                self.overflow = true;
                self.out = Vec::new();
            } else {
                self.out.extend_from_slice(bytes);
            }
        }
        if let Some((_, value)) = &mut self.capture
            && !self.capture_overflow
        {
            if value.len() + bytes.len() > CAPTURE_CAP {
                self.capture_overflow = true;
                *value = Vec::new();
            } else {
                value.extend_from_slice(bytes);
            }
        }
    }
}

/// Skims a whole document at once.
#[cfg(test)]
pub(crate) fn skim(bytes: &[u8]) -> Option<Vec<u8>> {
    let mut s = Skim::default();
    s.feed(bytes);
    s.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn parsed(bytes: &[u8]) -> Value {
        serde_json::from_slice(&skim(bytes).expect("skimmed")).expect("valid JSON")
    }

    #[test]
    fn keeps_structure_and_short_strings_and_shortens_long_ones() {
        let long = "x".repeat(STRING_KEEP + 1);
        let doc = json!({"id": "a\"b\\c", "choices": [{"message": {"content": long}}],
                         "usage": {"prompt_tokens": 3, "completion_tokens": 4}});
        let v = parsed(doc.to_string().as_bytes());
        assert_eq!(v["id"], "a\"b\\c");
        assert_eq!(v["choices"][0]["message"]["content"], "...");
        assert_eq!(v["usage"], doc["usage"]);
    }

    #[test]
    fn escapes_split_across_chunks_stay_valid() {
        let doc = br#"{"a":"x\"y\\","usage":{"n":1}}"#;
        for cut in 0..doc.len() {
            let mut s = Skim::default();
            s.feed(&doc[..cut]);
            s.feed(&doc[cut..]);
            let v: Value = serde_json::from_slice(&s.finish().expect("doc")).expect("json");
            assert_eq!(v["a"], "x\"y\\", "cut at {cut}");
            assert_eq!(v["usage"]["n"], 1);
        }
    }

    #[test]
    fn an_oversized_structure_keeps_the_top_level_usage() {
        let mut doc = b"{\"data\":[".to_vec();
        for i in 0..(SKIM_CAP / 2) {
            if i > 0 {
                doc.push(b',');
            }
            doc.extend_from_slice(b"12");
        }
        doc.extend_from_slice(br#"],"usage":{"prompt_tokens":7},"other":1}"#);
        let v = parsed(&doc);
        assert_eq!(v, json!({"usage": {"prompt_tokens": 7}}));
        // Nothing to keep: nothing is read.
        let mut plain = b"[".to_vec();
        plain.extend(std::iter::repeat_n(b'1', SKIM_CAP + 1));
        assert_eq!(skim(&plain), None);
    }

    #[test]
    fn the_last_of_duplicate_members_wins_as_in_a_parser() {
        let mut doc = br#"{"usage":{"a":1},"x":["#.to_vec();
        doc.extend(std::iter::repeat_n(b'1', SKIM_CAP));
        doc.extend_from_slice(br#"],"usage":{"a":2}}"#);
        assert_eq!(parsed(&doc), json!({"usage": {"a": 2}}));
    }

    mod properties {
        use super::*;
        use proptest::prelude::*;

        fn value() -> impl Strategy<Value = Value> {
            let leaf = prop_oneof![
                Just(Value::Null),
                any::<bool>().prop_map(Value::Bool),
                any::<i64>().prop_map(|n| json!(n)),
                ".{0,12}".prop_map(Value::String),
                (0usize..3 * STRING_KEEP).prop_map(|n| Value::String("é\"\\".repeat(n / 4))),
            ];
            leaf.prop_recursive(4, 64, 6, |inner| {
                prop_oneof![
                    proptest::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                    proptest::collection::btree_map("[a-z]{1,8}", inner, 0..6)
                        .prop_map(|m| Value::Object(m.into_iter().collect())),
                ]
            })
        }

        /// Replaces every string longer than what is kept with the stand-in.
        fn shortened(v: &Value) -> Value {
            match v {
                Value::String(s)
                    if serde_json::to_string(s).map_or(0, |q| q.len() - 2) > STRING_KEEP =>
                {
                    Value::String("...".into())
                }
                Value::Array(a) => Value::Array(a.iter().map(shortened).collect()),
                Value::Object(o) => {
                    Value::Object(o.iter().map(|(k, v)| (k.clone(), shortened(v))).collect())
                }
                other => other.clone(),
            }
        }

        proptest! {
            /// A skimmed document is the document with its long strings shortened, whatever
            /// the chunking and whitespace.
            #[test]
            fn skimming_is_shortening(v in value(), cuts in proptest::collection::vec(any::<usize>(), 0..8), pretty in any::<bool>()) {
                let text = if pretty { serde_json::to_vec_pretty(&v) } else { serde_json::to_vec(&v) }.expect("serialize");
                let mut cuts: Vec<usize> = cuts.iter().map(|c| c % (text.len() + 1)).collect();
                cuts.sort_unstable();
                let mut s = Skim::default();
                let mut from = 0;
                for c in cuts {
                    s.feed(&text[from..c]);
                    from = c;
                }
                s.feed(&text[from..]);
                let doc = s.finish().expect("fits");
                let back: Value = serde_json::from_slice(&doc).expect("valid");
                prop_assert_eq!(back, shortened(&v));
            }

            /// Any bytes: no panic, and the copy never exceeds its bound.
            #[test]
            fn any_bytes_are_bounded(bytes in proptest::collection::vec(any::<u8>(), 0..4000)) {
                if let Some(doc) = skim(&bytes) {
                    prop_assert!(doc.len() <= SKIM_CAP + 2 + KEPT.len() * (CAPTURE_CAP + KEY_CAP + 4));
                }
            }
        }
    }
}
