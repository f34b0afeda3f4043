//! Request recording: [`RecordedRequest`], what the mock saw and answered, and
//! the shared [`Recorder`] log the server appends to.
//!
//! An entry is created when a request arrives (after its body was read); the
//! response status is filled in when the response head is decided and the
//! response body grows as the body is produced, so a streamed response that is
//! cut records exactly the bytes that were handed to the connection.

use std::sync::{Mutex, MutexGuard, PoisonError};

use bytes::Bytes;

/// One request the mock received, and what it answered.
#[derive(Clone, Debug)]
pub struct RecordedRequest {
    /// HTTP method, e.g. `POST`.
    pub method: String,
    /// Path and query, e.g. `/v1/chat/completions`.
    pub path: String,
    /// Request headers in arrival order, names lowercased.
    pub headers: Vec<(String, String)>,
    /// The full request body.
    pub body: Bytes,
    /// The status the mock sent; 0 when no response was sent (`close` fault).
    pub response_status: u16,
    /// Exactly the bytes the mock wrote as the response body, as far as it got
    /// (for SSE: all events concatenated; for a cut response: the prefix sent).
    pub response_body: Bytes,
}

impl RecordedRequest {
    /// The first value of header `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The request body parsed as JSON, if it is JSON.
    pub fn json(&self) -> Option<serde_json::Value> {
        serde_json::from_slice(&self.body).ok()
    }
}

/// A request entry while its response is still being produced.
#[derive(Debug)]
struct Entry {
    request: RecordedRequest,
    response_body: Vec<u8>,
}

/// The log of every request one mock instance received, in order.
#[derive(Debug, Default)]
pub(crate) struct Recorder {
    log: Mutex<Log>,
}

/// Entries plus the absolute index of the first one (entries before it were
/// cleared), so in-flight responses keep appending to the right entry.
#[derive(Debug, Default)]
struct Log {
    base: usize,
    entries: Vec<Entry>,
}

impl Log {
    fn get_mut(&mut self, index: usize) -> Option<&mut Entry> {
        let i = index.checked_sub(self.base)?;
        self.entries.get_mut(i)
    }
}

impl Recorder {
    fn lock(&self) -> MutexGuard<'_, Log> {
        self.log.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Appends an entry for a request that just arrived; returns its index.
    pub(crate) fn start(
        &self,
        method: String,
        path: String,
        headers: Vec<(String, String)>,
        body: Bytes,
    ) -> usize {
        let mut log = self.lock();
        log.entries.push(Entry {
            request: RecordedRequest {
                method,
                path,
                headers,
                body,
                response_status: 0,
                response_body: Bytes::new(),
            },
            response_body: Vec::new(),
        });
        log.base + log.entries.len() - 1
    }

    /// Sets the status sent for entry `index`.
    pub(crate) fn set_status(&self, index: usize, status: u16) {
        if let Some(entry) = self.lock().get_mut(index) {
            entry.request.response_status = status;
        }
    }

    /// Appends response body bytes to entry `index`.
    pub(crate) fn append_body(&self, index: usize, bytes: &[u8]) {
        if let Some(entry) = self.lock().get_mut(index) {
            entry.response_body.extend_from_slice(bytes);
        }
    }

    /// A snapshot of every entry, in arrival order.
    pub(crate) fn snapshot(&self) -> Vec<RecordedRequest> {
        self.lock()
            .entries
            .iter()
            .map(|e| {
                let mut r = e.request.clone();
                r.response_body = Bytes::copy_from_slice(&e.response_body);
                r
            })
            .collect()
    }

    /// How many requests were recorded.
    pub(crate) fn len(&self) -> usize {
        self.lock().entries.len()
    }

    /// Forgets every entry recorded so far; responses still in flight for them
    /// are no longer recorded.
    pub(crate) fn clear(&self) {
        let mut log = self.lock();
        log.base += log.entries.len();
        log.entries.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_and_appends() {
        let rec = Recorder::default();
        let i = rec.start(
            "POST".into(),
            "/v1/x?a=1".into(),
            vec![("content-type".into(), "application/json".into())],
            Bytes::from_static(br#"{"model":"m"}"#),
        );
        rec.set_status(i, 200);
        rec.append_body(i, b"data: a\n\n");
        rec.append_body(i, b"data: b\n\n");
        assert_eq!(rec.len(), 1);
        let r = &rec.snapshot()[0];
        assert_eq!(r.response_status, 200);
        assert_eq!(&r.response_body[..], b"data: a\n\ndata: b\n\n");
        assert_eq!(r.header("Content-Type"), Some("application/json"));
        assert_eq!(r.header("x-missing"), None);
        assert_eq!(r.json().unwrap()["model"], "m");

        rec.clear();
        assert_eq!(rec.len(), 0);
        rec.append_body(i, b"late");
        let j = rec.start("GET".into(), "/".into(), vec![], Bytes::new());
        assert_eq!(j, 1);
        rec.append_body(j, b"x");
        assert_eq!(&rec.snapshot()[0].response_body[..], b"x");
    }
}
