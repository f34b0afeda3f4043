//! A batch line's state in a request (`crate::batch` has the rules): the verified signature and
//! the answer collected for the store.

use bytes::Bytes;
use opstate::BatchRef;

/// The largest answer kept; a larger one is kept as 502 `batch_line_interrupted`.
pub(crate) const MAX_ANSWER_BYTES: usize = 8 * 1024 * 1024;

/// A verified batch line.
#[derive(Debug, Clone)]
pub(crate) struct Line {
    pub batch: BatchRef,
    pub request_id: String,
    pub key_hash: String,
    /// The claim is this request's (given back or replaced by the answer at its end).
    pub claimed: bool,
}

/// The answer being collected for a batch line (`answer::body`).
#[derive(Debug, Default)]
pub(crate) struct Capture {
    pub status: u16,
    pub body: Vec<u8>,
    pub complete: bool,
    pub overflow: bool,
}

impl Capture {
    /// Adds a chunk the client is sent.
    pub(crate) fn add(&mut self, chunk: Option<&Bytes>, end_of_stream: bool) {
        if let Some(c) = chunk {
            if self.body.len() + c.len() > MAX_ANSWER_BYTES {
                self.overflow = true;
            } else if !self.overflow {
                self.body.extend_from_slice(c);
            }
        }
        self.complete |= end_of_stream;
    }
}
