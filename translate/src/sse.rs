//! Server-sent events: the one incremental reader of a supplier's stream (the gateway frames
//! every streamed answer here, once, whether it translates it or passes it through) and the frame
//! writers for the client's.
//!
//! The reader takes the body in arbitrary chunks (a line, or a UTF-8 character, may be split
//! anywhere), understands `\n`, `\r\n` and `\r` line ends, `event:` and `data:` fields (one
//! optional space after the colon), `:` comments, and hands over an event at each blank line,
//! borrowed (no allocation per event: the reader's buffers are reused). It never holds back an
//! event that is complete. It does not interpret the data: the formats' decoders do.
//!
//! Bounds: a line is kept up to [`LINE_CAP`]. A longer `data:` line is **skimmed** instead
//! ([`crate::skim`]: the structure and the short strings, so the usage it carries is still read)
//! and its event is marked [`Event::skimmed`]; a longer line of any other field is skipped, and an
//! event whose data lines together outgrow the cap is dropped whole. The reader therefore holds at
//! most [`LINE_CAP`] + [`crate::skim::SKIM_CAP`] (plus the captured usage members) per stream,
//! whatever the answer's size.

use serde_json::Value;

use crate::skim::Skim;

/// The longest line (and event data) the reader keeps as it is.
pub const LINE_CAP: usize = 1 << 20;

/// One complete event of a supplier's stream, borrowed from the reader.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Event<'a> {
    /// The `event:` name, empty when the event had none.
    pub name: &'a [u8],
    /// The `data:` lines joined with `\n`.
    pub data: &'a [u8],
    /// A data line outgrew [`LINE_CAP`]: `data` is its skimmed copy (structure and short strings;
    /// long strings shortened), enough to read usage, not to show the text.
    pub skimmed: bool,
}

/// The incremental reader. Feed it with [`Reader::push`], end it with [`Reader::finish`].
#[derive(Debug, Default)]
pub struct Reader {
    /// The current line so far (without its end).
    line: Vec<u8>,
    /// The current line outgrew the cap and is not data: its bytes are dropped until its end.
    skipping: bool,
    /// The current line outgrew the cap and is data: its value is skimmed until its end.
    skim: Option<Skim>,
    /// The last byte seen ended a line with `\r`: a `\n` right after it belongs to that end.
    after_cr: bool,
    name: Vec<u8>,
    data: Vec<u8>,
    has_data: bool,
    skimmed: bool,
    /// The current event's data outgrew the cap: the event is dropped at its end.
    oversized: bool,
}

impl Reader {
    /// Reads the next chunk; hands every event it completes to `on_event`, in order.
    pub fn push(&mut self, mut chunk: &[u8], on_event: &mut impl FnMut(Event<'_>)) {
        if self.after_cr {
            self.after_cr = false;
            if let Some(rest) = chunk.strip_prefix(b"\n") {
                chunk = rest;
            }
        }
        while !chunk.is_empty() {
            match memchr::memchr2(b'\n', b'\r', chunk) {
                None => {
                    self.extend(chunk);
                    return;
                }
                Some(end) => {
                    self.extend(&chunk[..end]);
                    self.end_line(on_event);
                    let crlf = chunk[end] == b'\r';
                    chunk = &chunk[end + 1..];
                    if crlf {
                        match chunk.first() {
                            Some(b'\n') => chunk = &chunk[1..],
                            Some(_) => {}
                            None => self.after_cr = true,
                        }
                    }
                }
            }
        }
    }

    /// The body ended: a last line without its end counts, and an event with data that lacked
    /// its blank line is handed over too (the stream's end terminates it).
    pub fn finish(&mut self, on_event: &mut impl FnMut(Event<'_>)) {
        if !self.line.is_empty() || self.skipping || self.skim.is_some() {
            self.end_line(on_event);
        }
        self.dispatch(on_event);
    }

    fn extend(&mut self, bytes: &[u8]) {
        if self.skipping {
            return;
        }
        if let Some(skim) = &mut self.skim {
            skim.feed(bytes);
            return;
        }
        if self.line.len() + bytes.len() <= LINE_CAP {
            self.line.extend_from_slice(bytes);
            return;
        }
        // Too long to keep: a data line is skimmed from its value on, any other line skipped.
        match self.line.strip_prefix(b"data:") {
            Some(value) => {
                let mut skim = Skim::default();
                skim.feed(value.strip_prefix(b" ").unwrap_or(value));
                skim.feed(bytes);
                self.skim = Some(skim);
            }
            None => self.skipping = true,
        }
        self.line = Vec::new();
    }

    fn end_line(&mut self, on_event: &mut impl FnMut(Event<'_>)) {
        if self.skipping {
            self.skipping = false;
            return;
        }
        if let Some(skim) = self.skim.take() {
            match skim.finish() {
                Some(value) => {
                    self.skimmed = true;
                    self.data_line(&value);
                }
                // Not even its structure fits: the event cannot be read.
                None => self.oversized = true,
            }
            return;
        }
        let line = std::mem::take(&mut self.line);
        if line.is_empty() {
            self.dispatch(on_event);
        } else if line[0] != b':' {
            let (field, value) = match memchr::memchr(b':', &line) {
                Some(colon) => {
                    let value = &line[colon + 1..];
                    (&line[..colon], value.strip_prefix(b" ").unwrap_or(value))
                }
                None => (&line[..], &b""[..]),
            };
            match field {
                b"data" => self.data_line(value),
                b"event" => {
                    self.name.clear();
                    self.name.extend_from_slice(value);
                }
                _ => {}
            }
        }
        self.line = line;
        self.line.clear();
    }

    fn data_line(&mut self, value: &[u8]) {
        if self.has_data {
            self.data.push(b'\n');
        }
        self.has_data = true;
        if self.data.len() + value.len() > LINE_CAP {
            self.oversized = true;
            self.data = Vec::new();
        } else if !self.oversized {
            self.data.extend_from_slice(value);
        }
    }

    fn dispatch(&mut self, on_event: &mut impl FnMut(Event<'_>)) {
        let complete = self.has_data && !self.oversized;
        if complete {
            on_event(Event {
                name: &self.name,
                data: &self.data,
                skimmed: self.skimmed,
            });
        }
        self.name.clear();
        self.data.clear();
        self.has_data = false;
        self.skimmed = false;
        self.oversized = false;
    }
}

/// Writes a data-only frame: `data: JSON\n\n`.
pub(crate) fn data(out: &mut Vec<u8>, value: &Value) {
    out.extend_from_slice(b"data: ");
    // Writing into a Vec cannot fail, and a `Value` always serializes.
    let _ = serde_json::to_writer(&mut *out, value);
    out.extend_from_slice(b"\n\n");
}

/// Writes `text` as a JSON string (quoted, escaped): the hot frames (text deltas) are written
/// directly, without building a tree.
pub(crate) fn string(out: &mut Vec<u8>, text: &str) {
    // Writing into a Vec cannot fail, and a `str` always serializes.
    let _ = serde_json::to_writer(&mut *out, text);
}

/// Writes a named frame: `event: NAME\ndata: JSON\n\n`.
pub(crate) fn named(out: &mut Vec<u8>, event: &str, value: &Value) {
    out.extend_from_slice(b"event: ");
    out.extend_from_slice(event.as_bytes());
    out.push(b'\n');
    data(out, value);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One event, owned: (name, data, skimmed).
    type Owned = (String, String, bool);

    fn read(chunks: &[&[u8]]) -> Vec<Owned> {
        let mut reader = Reader::default();
        let mut events = Vec::new();
        let mut keep = |e: Event<'_>| {
            events.push((
                String::from_utf8_lossy(e.name).into_owned(),
                String::from_utf8_lossy(e.data).into_owned(),
                e.skimmed,
            ))
        };
        for chunk in chunks {
            reader.push(chunk, &mut keep);
        }
        reader.finish(&mut keep);
        events
    }

    fn sse(event: &str, data: &str) -> Owned {
        (event.into(), data.into(), false)
    }

    #[test]
    fn fields_comments_and_line_ends() {
        let body = b": keep-alive\r\nevent: ping\r\ndata:{\"a\":1}\r\n\r\ndata: x\ndata: y\n\nid: 3\nretry: 5\n\n";
        assert_eq!(
            read(&[body]),
            vec![sse("ping", "{\"a\":1}"), sse("", "x\ny")]
        );
    }

    #[test]
    fn cr_only_and_cr_split_from_lf() {
        assert_eq!(
            read(&[b"data: a\r\r", b"data: b\r", b"\n\r", b"\n"]),
            vec![sse("", "a"), sse("", "b")]
        );
    }

    #[test]
    fn an_event_leaves_as_soon_as_its_blank_line_arrives() {
        let mut reader = Reader::default();
        let mut events = Vec::new();
        let mut keep = |e: Event<'_>| events.push(e.data.to_vec());
        reader.push(b"data: {\"x\":", &mut keep);
        reader.push(b"1}\n", &mut keep);
        reader.push(b"\n", &mut keep);
        assert_eq!(events, vec![b"{\"x\":1}".to_vec()]);
    }

    #[test]
    fn the_end_of_the_body_ends_the_last_event() {
        assert_eq!(read(&[b"data: last"]), vec![sse("", "last")]);
        assert_eq!(read(&[b"event: only-a-name\n"]), vec![]);
    }

    #[test]
    fn an_oversized_data_line_is_skimmed_and_the_next_event_survives() {
        let long = "x".repeat(LINE_CAP + 10);
        let mut body = format!("data: {{\"text\":\"{long}\",\"usage\":{{\"n\":3}}}}").into_bytes();
        body.extend_from_slice(b"\n\nevent: e\ndata: ok\n\n");
        let events = read(&body.chunks(4096).collect::<Vec<_>>());
        assert_eq!(
            events,
            vec![
                (
                    "".into(),
                    "{\"text\":\"...\",\"usage\":{\"n\":3}}".into(),
                    true
                ),
                sse("e", "ok")
            ]
        );
        // The reader did not keep the long line.
        let mut reader = Reader::default();
        reader.push(&body[..LINE_CAP + 20], &mut |_| {});
        assert!(reader.line.capacity() <= LINE_CAP && reader.data.capacity() <= LINE_CAP);
    }

    #[test]
    fn an_oversized_line_of_another_field_is_skipped() {
        let mut body = b"event: ".to_vec();
        body.extend(std::iter::repeat_n(b'x', LINE_CAP + 10));
        body.extend_from_slice(b"\ndata: ok\n\n");
        assert_eq!(read(&[&body]), vec![sse("", "ok")]);
    }

    #[test]
    fn frames() {
        let mut out = Vec::new();
        named(&mut out, "ping", &serde_json::json!({"type": "ping"}));
        data(&mut out, &serde_json::json!("a\nb"));
        assert_eq!(
            out,
            b"event: ping\ndata: {\"type\":\"ping\"}\n\ndata: \"a\\nb\"\n\n"
        );
    }
}
