//! The clock of the in-memory store. Deadlines there (cooldowns, holds, counter windows, slots,
//! sticky sessions, stream claims) are measured on a [`Clock`]: the process's monotonic clock in
//! production, a [`ManualClock`] in tests, which moves only when told (a cooldown test advances it
//! past the reset instead of sleeping). The Redis backend uses the server's `TIME` instead.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A monotonic clock.
pub trait Clock: Send + Sync {
    fn now(&self) -> Instant;
}

/// The process's monotonic clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Instant {
        Instant::now()
    }
}

/// A clock that stands still until [`ManualClock::advance`] moves it (tests).
#[derive(Debug)]
pub struct ManualClock {
    start: Instant,
    elapsed: Mutex<Duration>,
}

impl ManualClock {
    /// A clock standing at the process's present moment.
    pub fn new() -> Arc<ManualClock> {
        Arc::new(ManualClock {
            start: Instant::now(),
            elapsed: Mutex::new(Duration::ZERO),
        })
    }

    /// Moves the clock forward by `by`.
    pub fn advance(&self, by: Duration) {
        if let Ok(mut e) = self.elapsed.lock() {
            *e += by;
        }
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Instant {
        let elapsed = self.elapsed.lock().map(|e| *e).unwrap_or_default();
        self.start + elapsed
    }
}

/// The clock a store holds (the system clock unless one is injected).
#[derive(Clone)]
pub(crate) struct StoreClock(pub Arc<dyn Clock>);

impl Default for StoreClock {
    fn default() -> StoreClock {
        StoreClock(Arc::new(SystemClock))
    }
}
