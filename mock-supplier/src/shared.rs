//! The state one mock instance shares between its connections: its configuration, the
//! recorder, the instance fault and the video tasks it runs.

use std::sync::{Mutex, PoisonError};

use crate::MockConfig;
use crate::fault::Fault;
use crate::record::Recorder;
use crate::video_task::VideoTask;

/// Upper bound for `x-mock-delay-ms` (larger values are clamped).
pub const MAX_DELAY_MS: u64 = 60_000;

/// State shared by every connection of one mock instance.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) config: MockConfig,
    pub(crate) recorder: Recorder,
    pub(crate) fault: Mutex<Option<Fault>>,
    /// Video tasks created on this mock, by id.
    pub(crate) videos: Mutex<std::collections::HashMap<String, VideoTask>>,
    /// Files uploaded or written for batches (id → purpose, bytes), and batches, by id.
    pub(crate) batch_files: Mutex<std::collections::HashMap<String, (String, bytes::Bytes)>>,
    pub(crate) batches: Mutex<std::collections::HashMap<String, crate::batch_state::MockBatch>>,
    /// `x-mock-batch` for creates that send none (`MockHandle::set_batch_behaviour`).
    pub(crate) batch_behaviour: Mutex<Option<String>>,
    /// Every answer billed, for the usage reports (`usage_report`).
    pub(crate) billed: Mutex<Vec<Billed>>,
}

/// One billed answer: when it arrived (Unix seconds), the key it was called with, its model and
/// the usage it was built with.
#[derive(Clone, Debug)]
pub(crate) struct Billed {
    pub(crate) at: u64,
    pub(crate) key: String,
    pub(crate) model: String,
    pub(crate) usage: crate::usage::Usage,
}

impl Shared {
    pub(crate) fn new(config: MockConfig) -> Shared {
        Shared {
            config,
            recorder: Recorder::default(),
            fault: Mutex::new(None),
            videos: Mutex::default(),
            batch_files: Mutex::default(),
            batches: Mutex::default(),
            batch_behaviour: Mutex::default(),
            billed: Mutex::default(),
        }
    }

    pub(crate) fn instance_fault(&self) -> Option<Fault> {
        self.fault
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}
