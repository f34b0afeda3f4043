//! A batch's state in the mock (`openai_batches` serves it).

use serde_json::Value;

/// A batch's state in the mock.
#[derive(Debug, Clone)]
pub(crate) struct MockBatch {
    pub(crate) endpoint: String,
    pub(crate) input_file_id: String,
    pub(crate) created_at: u64,
    /// Each line's custom id and its result: (status, body).
    pub(crate) results: Vec<(String, u16, Value)>,
    pub(crate) polls_left: u32,
    pub(crate) expire: bool,
    pub(crate) drop: Option<String>,
    pub(crate) cancelled: bool,
    pub(crate) output_file_id: Option<String>,
    pub(crate) error_file_id: Option<String>,
    pub(crate) status: &'static str,
    pub(crate) metadata: Value,
}
