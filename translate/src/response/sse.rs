//! Server-sent events: the incremental reader for a supplier's stream and the frame writers for
//! the client's.
//!
//! The reader takes the body in arbitrary chunks (a line, or a UTF-8 character, may be split
//! anywhere), understands `\n`, `\r\n` and `\r` line ends, `event:` and `data:` fields (one
//! optional space after the colon), `:` comments, and yields an event at each blank line. It never
//! holds back an event that is complete. A line longer than [`LINE_CAP`] is skipped, and an event
//! whose data outgrows the cap is dropped whole. It does not interpret the data: decoders do.

use serde_json::Value;

/// The longest line (and event data) the reader keeps.
pub(super) const LINE_CAP: usize = 1 << 20;

/// One complete event of a supplier's stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Sse {
    /// The `event:` name, empty when the event had none.
    pub event: String,
    /// The `data:` lines joined with `\n`.
    pub data: Vec<u8>,
}

/// The incremental reader. Feed it with [`Reader::push`], end it with [`Reader::finish`].
#[derive(Debug, Default)]
pub(super) struct Reader {
    /// The current line so far (without its end).
    line: Vec<u8>,
    /// The current line outgrew the cap: its bytes are dropped until its end.
    skipping: bool,
    /// The last byte seen ended a line with `\r`: a `\n` right after it belongs to that end.
    after_cr: bool,
    event: String,
    data: Vec<u8>,
    has_data: bool,
    /// The current event's data outgrew the cap: the event is dropped at its end.
    oversized: bool,
}

impl Reader {
    /// Reads the next chunk; pushes every event it completes.
    pub fn push(&mut self, mut chunk: &[u8], events: &mut Vec<Sse>) {
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
                    self.end_line(events);
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
    /// its blank line is yielded too (the stream's end terminates it).
    pub fn finish(&mut self, events: &mut Vec<Sse>) {
        if !self.line.is_empty() || self.skipping {
            self.end_line(events);
        }
        self.dispatch(events);
    }

    fn extend(&mut self, bytes: &[u8]) {
        if self.skipping {
            return;
        }
        if self.line.len() + bytes.len() > LINE_CAP {
            self.skipping = true;
            self.line = Vec::new();
        } else {
            self.line.extend_from_slice(bytes);
        }
    }

    fn end_line(&mut self, events: &mut Vec<Sse>) {
        if self.skipping {
            self.skipping = false;
            return;
        }
        let line = std::mem::take(&mut self.line);
        if line.is_empty() {
            self.dispatch(events);
            return;
        }
        if line[0] == b':' {
            return;
        }
        let (field, value) = match memchr::memchr(b':', &line) {
            Some(colon) => {
                let value = &line[colon + 1..];
                (&line[..colon], value.strip_prefix(b" ").unwrap_or(value))
            }
            None => (&line[..], &b""[..]),
        };
        match field {
            b"data" => {
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
            b"event" => self.event = String::from_utf8_lossy(value).into_owned(),
            _ => {}
        }
        self.line = line;
        self.line.clear();
    }

    fn dispatch(&mut self, events: &mut Vec<Sse>) {
        let event = std::mem::take(&mut self.event);
        let data = std::mem::take(&mut self.data);
        let complete = self.has_data && !self.oversized;
        self.has_data = false;
        self.oversized = false;
        if complete {
            events.push(Sse { event, data });
        }
    }
}

/// Writes a data-only frame: `data: JSON\n\n`.
pub(super) fn data(out: &mut Vec<u8>, value: &Value) {
    out.extend_from_slice(b"data: ");
    out.extend_from_slice(value.to_string().as_bytes());
    out.extend_from_slice(b"\n\n");
}

/// Writes a named frame: `event: NAME\ndata: JSON\n\n`.
pub(super) fn named(out: &mut Vec<u8>, event: &str, value: &Value) {
    out.extend_from_slice(b"event: ");
    out.extend_from_slice(event.as_bytes());
    out.push(b'\n');
    data(out, value);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(chunks: &[&[u8]]) -> Vec<Sse> {
        let mut reader = Reader::default();
        let mut events = Vec::new();
        for chunk in chunks {
            reader.push(chunk, &mut events);
        }
        reader.finish(&mut events);
        events
    }

    fn sse(event: &str, data: &str) -> Sse {
        Sse {
            event: event.into(),
            data: data.as_bytes().to_vec(),
        }
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
        reader.push(b"data: {\"x\":", &mut events);
        assert!(events.is_empty());
        reader.push(b"1}\n", &mut events);
        assert!(events.is_empty());
        reader.push(b"\n", &mut events);
        assert_eq!(events, vec![sse("", "{\"x\":1}")]);
    }

    #[test]
    fn the_end_of_the_body_ends_the_last_event() {
        assert_eq!(read(&[b"data: last"]), vec![sse("", "last")]);
        assert_eq!(read(&[b"event: only-a-name\n"]), vec![]);
    }

    #[test]
    fn an_oversized_line_is_skipped_and_the_next_event_survives() {
        let long = vec![b'x'; LINE_CAP + 10];
        let mut body = b"data: ".to_vec();
        body.extend_from_slice(&long);
        body.extend_from_slice(b"\n\ndata: ok\n\n");
        let events = read(&body.chunks(4096).collect::<Vec<_>>());
        assert_eq!(events, vec![sse("", "ok")]);
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
