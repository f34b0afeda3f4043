//! `[video]`: video tasks' signed URLs, lifetime and sweep.

use crate::error::{ConfigError, err};
use serde::Deserialize;

/// The section as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawVideo {
    pub url_ttl_ms: Option<u64>,
    pub task_ttl_ms: Option<u64>,
    pub sweep_interval_ms: Option<u64>,
}

/// Video tasks (`[video]`).
#[derive(Debug, Clone)]
pub struct Video {
    /// Lifetime of a completed task's signed content URL (SPEC: 15 minutes; shorter for tests).
    pub url_ttl_ms: u64,
    /// The longest a task may run: a task not finished by then is failed and its hold released.
    /// Its hold's deadline is this plus `money.hold_ttl_ms`, so the reconciler never takes a live
    /// task for a dead call.
    pub task_ttl_ms: u64,
    /// How often each proxy asks suppliers about unfinished tasks nobody polled recently.
    pub sweep_interval_ms: u64,
}

/// Validates `[video]`.
pub(crate) fn validate(raw: &RawVideo) -> Result<Video, ConfigError> {
    let video = Video {
        url_ttl_ms: raw.url_ttl_ms.unwrap_or(900_000),
        task_ttl_ms: raw.task_ttl_ms.unwrap_or(7_200_000),
        sweep_interval_ms: raw.sweep_interval_ms.unwrap_or(15_000),
    };
    if !(1_000..=900_000).contains(&video.url_ttl_ms) {
        return Err(err(
            "video.url_ttl_ms",
            "must be between 1000 and 900000 (15 minutes)",
        ));
    }
    if video.task_ttl_ms < 60_000 {
        return Err(err("video.task_ttl_ms", "must be at least 60000"));
    }
    if video.sweep_interval_ms < 100 {
        return Err(err("video.sweep_interval_ms", "must be at least 100"));
    }
    Ok(video)
}
