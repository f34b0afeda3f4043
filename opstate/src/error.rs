//! Errors of the operational store. Callers fail closed on every variant.

/// What went wrong talking to the store.
#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    /// The backend did not answer in time or refused the connection.
    #[error("operational store unavailable: {0}")]
    Unavailable(String),
    /// A stored record could not be decoded (written by an incompatible version?).
    #[error("corrupt record in operational store: {0}")]
    Corrupt(String),
}

pub type StoreResult<T> = Result<T, StoreError>;

impl From<redis::RedisError> for StoreError {
    fn from(e: redis::RedisError) -> Self {
        StoreError::Unavailable(e.to_string())
    }
}
