//! Hosted media on Redis (`crate::Media`): one key per file, with its TTL.

use crate::error::StoreResult;
use crate::media::{Media, MediaFile};
use crate::redis_store::RedisStore;
use async_trait::async_trait;
use redis::AsyncCommands;
use std::time::Duration;

#[async_trait]
impl Media for RedisStore {
    async fn put(&self, id: &str, file: &MediaFile, ttl: Duration) -> StoreResult<()> {
        let mut conn = self.conn.clone();
        let ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1);
        let stored = crate::media::encode(file);
        let _: () = conn.pset_ex(self.schema.media(id), stored, ms).await?;
        Ok(())
    }

    async fn get(&self, id: &str) -> StoreResult<Option<MediaFile>> {
        let mut conn = self.conn.clone();
        let stored: Option<Vec<u8>> = conn.get(self.schema.media(id)).await?;
        Ok(stored.as_deref().and_then(crate::media::decode))
    }

    async fn put_new(
        &self,
        id: &str,
        file: &MediaFile,
        ttl: Duration,
    ) -> StoreResult<Option<MediaFile>> {
        let mut conn = self.conn.clone();
        let ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1);
        let stored = crate::media::encode(file);
        let set: Option<String> = redis::cmd("SET")
            .arg(self.schema.media(id))
            .arg(stored)
            .arg("NX")
            .arg("PX")
            .arg(ms)
            .query_async(&mut conn)
            .await?;
        if set.is_some() {
            return Ok(None);
        }
        let existing: Option<Vec<u8>> = conn.get(self.schema.media(id)).await?;
        // Gone between the two steps (it expired): report it as taken, the caller tries later.
        Ok(Some(
            existing
                .as_deref()
                .and_then(crate::media::decode)
                .unwrap_or_else(|| MediaFile {
                    content_type: String::new(),
                    bytes: bytes::Bytes::new(),
                }),
        ))
    }

    async fn remove(&self, id: &str) -> StoreResult<()> {
        let mut conn = self.conn.clone();
        let _: () = conn.del(self.schema.media(id)).await?;
        Ok(())
    }

    async fn touch(&self, id: &str, content_type: &str, ttl: Duration) -> StoreResult<bool> {
        let mut conn = self.conn.clone();
        let ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1);
        let kept: i64 = TOUCH
            .key(self.schema.media(id))
            .arg(format!("{content_type}\0"))
            .arg(ms)
            .invoke_async(&mut conn)
            .await?;
        Ok(kept == 1)
    }
}

/// `touch` in one step: the TTL moves only while the stored file starts with its content type
/// and the NUL that ends it (`crate::media::encode`).
static TOUCH: std::sync::LazyLock<redis::Script> =
    std::sync::LazyLock::new(|| redis::Script::new(include_str!("lua/media_touch.v1.lua")));
