//! Hosted media: files the gateway serves itself for a while (an image answered with
//! `response_format=url` when the supplier returned only its bytes), shared by every proxy of a
//! deployment so a URL handed out by one instance can be fetched through any other.
//!
//! Entries expire by themselves. The in-memory backend bounds its total size
//! ([`MEMORY_MEDIA_CAP`]): a put that does not fit after dropping expired entries is refused.

use crate::error::StoreResult;
use async_trait::async_trait;
use bytes::Bytes;
use std::time::Duration;

/// Most bytes the in-memory backend keeps at once.
pub const MEMORY_MEDIA_CAP: usize = 512 * 1024 * 1024;

/// A hosted file: its bytes and their content type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MediaFile {
    pub content_type: String,
    pub bytes: Bytes,
}

/// Files by id, with a TTL.
#[async_trait]
pub trait Media: Send + Sync {
    /// Keeps `file` under `id` for `ttl` (replacing any file of that id).
    async fn put(&self, id: &str, file: &MediaFile, ttl: Duration) -> StoreResult<()>;

    /// The file of `id`, while it is alive.
    async fn get(&self, id: &str) -> StoreResult<Option<MediaFile>>;

    /// Keeps `file` under `id` for `ttl` only when no live file has that id: `Ok(None)` when it
    /// was kept, else the file already there (nothing written). A claim that two callers race
    /// for is won by one.
    async fn put_new(
        &self,
        id: &str,
        file: &MediaFile,
        ttl: Duration,
    ) -> StoreResult<Option<MediaFile>>;

    /// Forgets the file of `id` (nothing when there is none).
    async fn remove(&self, id: &str) -> StoreResult<()>;

    /// Keeps the file of `id` for `ttl` from now, only while it is alive and its content type is
    /// `content_type` (a claim still unanswered): `Ok(false)` when it is gone or was replaced.
    async fn touch(&self, id: &str, content_type: &str, ttl: Duration) -> StoreResult<bool>;
}

/// The stored form of a file: the content type, a NUL byte, the bytes (content types never
/// contain NUL).
pub(crate) fn encode(file: &MediaFile) -> Vec<u8> {
    let mut out = Vec::with_capacity(file.content_type.len() + 1 + file.bytes.len());
    out.extend_from_slice(file.content_type.as_bytes());
    out.push(0);
    out.extend_from_slice(&file.bytes);
    out
}

/// Reads [`encode`]'s form; `None` when it is not one.
pub(crate) fn decode(stored: &[u8]) -> Option<MediaFile> {
    let at = stored.iter().position(|&b| b == 0)?;
    let content_type = std::str::from_utf8(stored.get(..at)?).ok()?.to_string();
    Some(MediaFile {
        content_type,
        bytes: Bytes::copy_from_slice(stored.get(at + 1..)?),
    })
}
