//! One video task of the mock: what the create's `x-mock-video` header asked for (see
//! `videos`), and how it stands as time passes.

use std::time::{Duration, Instant};

/// One task the mock runs.
#[derive(Debug, Clone)]
pub(crate) struct VideoTask {
    pub(crate) model: String,
    pub(crate) size: String,
    pub(crate) created: Instant,
    pub(crate) created_unix: u64,
    pub(crate) delay: Duration,
    pub(crate) fail: bool,
    pub(crate) bytes: u64,
    pub(crate) seconds: Option<String>,
}

impl VideoTask {
    /// A task of `model` made now, ended at the first poll unless `x-mock-video` (the create's
    /// header, see the module) says otherwise.
    pub(crate) fn new(
        model: &str,
        size: String,
        seconds: Option<String>,
        header: Option<&str>,
    ) -> Result<VideoTask, String> {
        let mut task = VideoTask {
            model: model.to_string(),
            size,
            created: Instant::now(),
            created_unix: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
            delay: Duration::ZERO,
            fail: false,
            bytes: 1024,
            seconds,
        };
        for pair in header
            .unwrap_or_default()
            .split(',')
            .map(str::trim)
            .filter(|p| !p.is_empty())
        {
            let number = |v: &str| {
                v.parse::<u64>()
                    .map_err(|_| format!("bad x-mock-video value {pair:?}"))
            };
            match pair.split_once('=') {
                Some(("delay_ms", v)) => task.delay = Duration::from_millis(number(v)?),
                Some(("bytes", v)) => task.bytes = number(v)?,
                Some(("fail", "safety")) => task.fail = true,
                Some(("seconds", "none")) => task.seconds = None,
                Some(("seconds", v)) => task.seconds = Some(number(v)?.to_string()),
                _ => return Err(format!("unknown x-mock-video setting {pair:?}")),
            }
        }
        Ok(task)
    }

    /// The content's size in bytes.
    pub(crate) fn bytes(&self) -> u64 {
        self.bytes
    }
}

/// How a task is at `now`: its status (`queued`, `in_progress`, `completed`, `failed`) and
/// progress.
pub(crate) fn status(task: &VideoTask) -> (&'static str, u64) {
    let elapsed = task.created.elapsed();
    if elapsed >= task.delay {
        return (if task.fail { "failed" } else { "completed" }, 100);
    }
    let share = elapsed.as_millis() * 100 / task.delay.as_millis().max(1);
    if share < 34 {
        ("queued", 0)
    } else {
        ("in_progress", u64::try_from(share).unwrap_or(99))
    }
}
