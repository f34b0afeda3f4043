//! The key directory and the usage stream on Redis: key records by hash, the settler's consumer
//! group, its claims (its own pending entries first) and acknowledgements.

use crate::error::{StoreError, StoreResult};
use crate::keys::{KeyDirectory, KeyRecord};
use crate::redis_store::*;
use crate::schema::KeySchema;
use crate::usage::{StreamEntry, UsageEvent, UsageStream};
use async_trait::async_trait;
use redis::AsyncCommands;
use std::time::Duration;

#[async_trait]
impl KeyDirectory for RedisStore {
    async fn lookup(&self, key_hash: &str) -> StoreResult<Option<KeyRecord>> {
        let mut conn = self.conn.clone();
        let raw: Option<String> = conn.hget(self.schema.key_directory(), key_hash).await?;
        raw.map(|json| {
            serde_json::from_str(&json).map_err(|e| StoreError::Corrupt(format!("key record: {e}")))
        })
        .transpose()
    }

    async fn publish(&self, key_hash: &str, record: &KeyRecord) -> StoreResult<()> {
        let json = serde_json::to_string(record)
            .map_err(|e| StoreError::Corrupt(format!("key record: {e}")))?;
        let mut conn = self.conn.clone();
        let _: () = redis::pipe()
            .hset(self.schema.key_directory(), key_hash, json)
            .ignore()
            .publish(self.schema.key_changes(), key_hash)
            .ignore()
            .query_async(&mut conn)
            .await?;
        Ok(())
    }

    async fn revoke(&self, key_hash: &str) -> StoreResult<()> {
        let mut conn = self.conn.clone();
        // Deleted, then announced: a proxy that reads the directory after the announcement finds
        // no record (see `CachedKeys`).
        let _: () = redis::pipe()
            .hdel(self.schema.key_directory(), key_hash)
            .ignore()
            .publish(self.schema.key_changes(), key_hash)
            .ignore()
            .query_async(&mut conn)
            .await?;
        Ok(())
    }

    async fn load(&self, entries: &[(String, KeyRecord)]) -> StoreResult<()> {
        let mut conn = self.conn.clone();
        for batch in entries.chunks(LOAD_BATCH) {
            let mut items = Vec::with_capacity(batch.len());
            for (hash, record) in batch {
                let json = serde_json::to_string(record)
                    .map_err(|e| StoreError::Corrupt(format!("key record: {e}")))?;
                items.push((hash.as_str(), json));
            }
            let _: () = conn
                .hset_multiple(self.schema.key_directory(), &items)
                .await?;
        }
        let _: () = conn.set(self.schema.key_directory_loaded(), 1).await?;
        let _: i64 = conn.publish(self.schema.key_changes(), "*").await?;
        Ok(())
    }

    async fn is_loaded(&self) -> StoreResult<bool> {
        let mut conn = self.conn.clone();
        Ok(conn.exists(self.schema.key_directory_loaded()).await?)
    }
}

#[async_trait]
impl UsageStream for RedisStore {
    async fn append(&self, event: &UsageEvent) -> StoreResult<()> {
        let json = serde_json::to_string(event)
            .map_err(|e| StoreError::Corrupt(format!("usage event: {e}")))?;
        let mut conn = self.conn.clone();
        let _: String = conn
            .xadd(self.schema.usage_stream(event.org_id), "*", &[("e", json)])
            .await?;
        Ok(())
    }

    async fn claim(
        &self,
        consumer: &str,
        max: usize,
        min_idle: Duration,
    ) -> StoreResult<Vec<StreamEntry>> {
        if self.schema.is_cluster() {
            return self
                .claim_marked(|own| self.claim_streams(consumer, max, min_idle, own))
                .await;
        }
        let stream = self.schema.usage_stream(0);
        self.claim_marked(|own| self.claim_stream(&stream, consumer, max, min_idle, own))
            .await
    }

    async fn claim_from(
        &self,
        consumer: &str,
        streams: &[usize],
        taken: &[usize],
        max: usize,
        min_idle: Duration,
    ) -> StoreResult<Vec<StreamEntry>> {
        let idle = |i: usize| crate::usage::idle_of(taken, i, min_idle);
        if self.schema.is_cluster() {
            return self
                .claim_marked(|own| self.claim_leased(consumer, streams, idle, max, own))
                .await;
        }
        if !streams.contains(&0) {
            return Ok(Vec::new());
        }
        let stream = self.schema.usage_stream(0);
        self.claim_marked(|own| self.claim_stream(&stream, consumer, max, idle(0), own))
            .await
    }

    async fn pending(&self, home: usize) -> StoreResult<Vec<UsageEvent>> {
        match self.schema.usage_streams().get(home) {
            Some(stream) => self.pending_of(stream).await,
            None => Ok(Vec::new()),
        }
    }

    async fn ack(&self, ids: &[String]) -> StoreResult<()> {
        if ids.is_empty() {
            return Ok(());
        }
        let acked = if self.schema.is_cluster() {
            self.ack_streams(ids).await
        } else {
            let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
            self.ack_stream(&self.schema.usage_stream(0), &ids).await
        };
        if acked.is_err() {
            // Some may have been acknowledged, some not: the next claim reads them back.
            self.unsure
                .store(true, std::sync::atomic::Ordering::Release);
        }
        acked
    }

    async fn backlog(&self) -> StoreResult<u64> {
        let mut total = 0;
        for stream in self.schema.usage_streams() {
            let mut conn = self.conn.clone();
            let len: u64 = conn.xlen(stream).await?;
            total += len;
        }
        Ok(total)
    }

    async fn homes(&self) -> StoreResult<Vec<Option<String>>> {
        let streams = self.schema.usage_streams();
        if !self.schema.is_cluster() {
            let mut conn = self.conn.clone();
            let id: String = HOME.key(&streams[0]).invoke_async(&mut conn).await?;
            return Ok(vec![Some(id).filter(|id| !id.is_empty())]);
        }
        // Each stream's master, asked at once (the script runs where its key lives); one that
        // does not answer is `None`.
        let asks = streams.iter().map(|stream| {
            let mut conn = self.conn.clone();
            async move {
                let id: String = HOME.key(stream).invoke_async(&mut conn).await.ok()?;
                Some(id).filter(|id| !id.is_empty())
            }
        });
        Ok(futures_util::future::join_all(asks).await)
    }

    fn home_of(&self, org: i64) -> usize {
        if self.schema.is_cluster() {
            usize::try_from(KeySchema::money_slot(org)).unwrap_or(0)
        } else {
            0
        }
    }
}
