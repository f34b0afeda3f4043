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

impl MockBatch {
    /// A batch just created (`in_progress`) of `results`, behaving as `behaviour` says (the
    /// create's `x-mock-batch`, else the instance's: `polls=N`, `expire=true`, `drop=ID`).
    pub(crate) fn new(
        endpoint: String,
        input_file_id: String,
        results: Vec<(String, u16, Value)>,
        behaviour: &str,
        metadata: Value,
    ) -> MockBatch {
        let setting = |key: &str| {
            behaviour
                .split(',')
                .filter_map(|kv| kv.trim().split_once('='))
                .find(|(k, _)| *k == key)
                .map(|(_, v)| v.to_string())
        };
        MockBatch {
            endpoint,
            input_file_id,
            created_at: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
            results,
            polls_left: setting("polls").and_then(|v| v.parse().ok()).unwrap_or(1),
            expire: setting("expire").as_deref() == Some("true"),
            drop: setting("drop"),
            cancelled: false,
            output_file_id: None,
            error_file_id: None,
            status: "in_progress",
            metadata,
        }
    }
}

/// How a batch being created behaves: the create's `x-mock-batch`, else the instance's
/// (`MockHandle::set_batch_behaviour`).
pub(crate) fn behaviour(
    instance: &std::sync::Mutex<Option<String>>,
    headers: &http::HeaderMap,
) -> String {
    let instance = instance.lock().ok().and_then(|b| b.clone());
    headers
        .get("x-mock-batch")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
        .or(instance)
        .unwrap_or_default()
}
