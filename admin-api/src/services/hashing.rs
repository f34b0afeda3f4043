//! Password hashing that cannot starve the service (issue 42): argon2id runs on tokio's blocking
//! threads, at most one hash per core at a time (a semaphore sized to the cores); up to
//! [`QUEUE_PER_CORE`] per core more wait their turn for at most [`MAX_WAIT`], and anything beyond
//! that is refused at once with [`HashError::Busy`] (the pages and the API answer 503). Callers
//! refuse a password longer than [`MAX_PASSWORD`](super::people::MAX_PASSWORD) characters
//! before they come here.

use argon2::Argon2;
use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tokio::sync::Semaphore;

/// Hashes waiting per core beyond the ones running.
pub const QUEUE_PER_CORE: usize = 16;
/// The longest a hash waits for its turn before it is refused.
pub const MAX_WAIT: Duration = Duration::from_secs(10);

/// Why a hash was not computed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum HashError {
    /// too many hashes are running or waiting: try again shortly
    #[error("too many password checks at once; try again shortly")]
    Busy,
    /// argon2 failed (it does not for valid inputs)
    #[error("password hashing failed")]
    Failed,
}

/// A bounded pool of argon2 work.
pub struct Pool {
    permits: Semaphore,
    waiting: AtomicUsize,
    max_waiting: usize,
    max_wait: Duration,
}

impl Pool {
    /// `running` hashes at once, `max_waiting` more queued for at most `max_wait` each.
    pub fn new(running: usize, max_waiting: usize, max_wait: Duration) -> Pool {
        Pool {
            permits: Semaphore::new(running.max(1)),
            waiting: AtomicUsize::new(0),
            max_waiting,
            max_wait,
        }
    }

    /// The process's pool: one running hash per core.
    pub fn shared() -> &'static Pool {
        static POOL: OnceLock<Pool> = OnceLock::new();
        POOL.get_or_init(|| {
            let cores = std::thread::available_parallelism().map_or(1, usize::from);
            Pool::new(cores, cores * QUEUE_PER_CORE, MAX_WAIT)
        })
    }

    /// Runs `work` on a blocking thread once a permit is free.
    pub async fn run<T: Send + 'static>(
        &self,
        work: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, HashError> {
        let permit = match self.permits.try_acquire() {
            Ok(p) => p,
            Err(_) => {
                if self.waiting.fetch_add(1, Ordering::AcqRel) >= self.max_waiting {
                    self.waiting.fetch_sub(1, Ordering::AcqRel);
                    return Err(HashError::Busy);
                }
                let waited = tokio::time::timeout(self.max_wait, self.permits.acquire()).await;
                self.waiting.fetch_sub(1, Ordering::AcqRel);
                match waited {
                    Ok(Ok(p)) => p,
                    _ => return Err(HashError::Busy),
                }
            }
        };
        let done = tokio::task::spawn_blocking(work).await;
        drop(permit);
        done.map_err(|_| HashError::Failed)
    }
}

/// The argon2id PHC string of `password` with a fresh salt.
pub async fn hash(password: &str) -> Result<String, HashError> {
    let password = password.to_string();
    Pool::shared().run(move || hash_now(&password)).await?
}

/// Whether `password` matches the PHC string `hash` (a malformed hash matches nothing).
pub async fn verify(hash: &str, password: &str) -> Result<bool, HashError> {
    let (hash, password) = (hash.to_string(), password.to_string());
    Pool::shared()
        .run(move || verify_now(&hash, &password))
        .await
}

fn hash_now(password: &str) -> Result<String, HashError> {
    use rand::Rng;
    let mut bytes = [0u8; 16];
    rand::rng().fill(&mut bytes);
    let salt = SaltString::encode_b64(&bytes).map_err(|_| HashError::Failed)?;
    Argon2::default()
        .hash_password(password.as_bytes(), &salt)
        .map(|h| h.to_string())
        .map_err(|_| HashError::Failed)
}

fn verify_now(hash: &str, password: &str) -> bool {
    PasswordHash::new(hash).is_ok_and(|parsed| {
        Argon2::default()
            .verify_password(password.as_bytes(), &parsed)
            .is_ok()
    })
}

/// A hash to verify against when an address is unknown, so both answers cost the same.
pub async fn decoy() -> Result<String, HashError> {
    static DECOY: tokio::sync::OnceCell<String> = tokio::sync::OnceCell::const_new();
    DECOY
        .get_or_try_init(|| hash("decoy password, never valid"))
        .await
        .cloned()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]
    use super::*;

    #[tokio::test]
    async fn hashes_and_verifies() {
        let h = hash("correct horse battery").await.unwrap();
        assert!(h.starts_with("$argon2id$"));
        assert!(verify(&h, "correct horse battery").await.unwrap());
        assert!(!verify(&h, "correct horse batterx").await.unwrap());
        assert!(!verify("not a hash", "x").await.unwrap());
    }

    /// One running, one waiting: a third at the same time is refused at once, and the first two
    /// both finish.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn beyond_the_queue_work_is_refused_not_queued() {
        let pool = std::sync::Arc::new(Pool::new(1, 1, Duration::from_secs(5)));
        let (gate_tx, gate_rx) = std::sync::mpsc::channel::<()>();
        let gate = std::sync::Arc::new(std::sync::Mutex::new(gate_rx));
        let mut tasks = tokio::task::JoinSet::new();
        {
            let (pool, gate) = (pool.clone(), gate.clone());
            tasks.spawn(async move {
                pool.run(move || {
                    let _ = gate.lock().unwrap().recv();
                    1
                })
                .await
            });
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        {
            let pool = pool.clone();
            tasks.spawn(async move { pool.run(|| 2).await });
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(pool.run(|| 3).await, Err(HashError::Busy));
        gate_tx.send(()).unwrap();
        let mut done: Vec<i32> = tasks
            .join_all()
            .await
            .into_iter()
            .map(Result::unwrap)
            .collect();
        done.sort_unstable();
        assert_eq!(done, vec![1, 2]);
        assert_eq!(pool.run(|| 4).await, Ok(4));
    }

    /// A queued hash that waits longer than its bound is refused.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_hash_that_waits_too_long_is_refused() {
        let pool = std::sync::Arc::new(Pool::new(1, 4, Duration::from_millis(100)));
        let mut tasks = tokio::task::JoinSet::new();
        {
            let pool = pool.clone();
            tasks.spawn(async move {
                pool.run(|| std::thread::sleep(Duration::from_millis(600)))
                    .await
            });
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(pool.run(|| ()).await, Err(HashError::Busy));
        assert_eq!(tasks.join_all().await, vec![Ok(())]);
    }
}
