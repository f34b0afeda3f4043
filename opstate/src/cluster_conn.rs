//! The Redis Cluster connection of a process, rebuilt from the seeds when it has answered nothing
//! for a while.
//!
//! redis-rs's cluster connection follows the slot map by itself, and after a failover it usually
//! does within a few retries. Not always: CI once saw a cluster connection keep timing out for
//! 40 s after a master was stopped (its "repair in background" never finished), while a fresh
//! connection made from the seeds found the promoted replica at once. So a command that fails
//! with a connection error or a timeout, when nothing has answered for [`STALL`] and no rebuild
//! was tried in that time, makes a new connection from the seeds (bounded by [`REBUILD`]) and
//! swaps it in for the commands that follow; the command itself still fails (its caller retries,
//! as for any store error).

use redis::aio::ConnectionLike;
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long without any answer before a failing command rebuilds the connection.
const STALL: Duration = Duration::from_secs(3);
/// The longest a rebuild may take (connecting to the seeds and reading the slot map).
const REBUILD: Duration = Duration::from_secs(2);

/// A cluster connection that is rebuilt from the seeds after 3 s without an answer (see the
/// module). Clones share the connection.
#[derive(Clone)]
pub struct ClusterConn {
    client: Arc<ClusterClient>,
    current: Arc<Mutex<ClusterConnection>>,
    /// Milliseconds since `born` of the last answer, and of the last rebuild tried.
    born: Instant,
    answered: Arc<AtomicU64>,
    rebuilt: Arc<AtomicU64>,
}

impl ClusterConn {
    /// Connects through `client` (fails when no seed answers).
    pub async fn connect(client: ClusterClient) -> redis::RedisResult<ClusterConn> {
        let conn = client.get_async_connection().await?;
        Ok(ClusterConn {
            client: Arc::new(client),
            current: Arc::new(Mutex::new(conn)),
            born: Instant::now(),
            answered: Arc::default(),
            rebuilt: Arc::default(),
        })
    }

    fn connection(&self) -> ClusterConnection {
        self.current
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    fn now(&self) -> u64 {
        u64::try_from(self.born.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Notes an answer, or after a connection failure rebuilds the connection when it is due.
    async fn observe<T>(&self, result: &redis::RedisResult<T>) {
        let now = self.now();
        let e = match result {
            Ok(_) => return self.answered.store(now, Ordering::Relaxed),
            Err(e) => e,
        };
        if !(e.is_timeout() || e.is_io_error() || e.is_connection_dropped()) {
            // The server answered (an error reply): the connection works.
            return self.answered.store(now, Ordering::Relaxed);
        }
        let stall = u64::try_from(STALL.as_millis()).unwrap_or(u64::MAX);
        let (answered, rebuilt) = (
            self.answered.load(Ordering::Relaxed),
            self.rebuilt.load(Ordering::Relaxed),
        );
        if now.saturating_sub(answered) < stall || now.saturating_sub(rebuilt) < stall {
            return;
        }
        // One rebuild at a time: the process's other commands keep the old connection meanwhile.
        if self
            .rebuilt
            .compare_exchange(rebuilt, now, Ordering::Relaxed, Ordering::Relaxed)
            .is_err()
        {
            return;
        }
        match tokio::time::timeout(REBUILD, self.client.get_async_connection()).await {
            Ok(Ok(fresh)) => {
                *self
                    .current
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner) = fresh;
                tracing::warn!(
                    silent_ms = now.saturating_sub(answered),
                    "rebuilt the Redis Cluster connection from its seeds"
                );
            }
            Ok(Err(e)) => tracing::warn!(error = %e, "Redis Cluster connection rebuild failed"),
            Err(_) => tracing::warn!("Redis Cluster connection rebuild timed out"),
        }
    }
}

impl ConnectionLike for ClusterConn {
    fn req_packed_command<'a>(
        &'a mut self,
        cmd: &'a redis::Cmd,
    ) -> redis::RedisFuture<'a, redis::Value> {
        Box::pin(async move {
            let result = self.connection().req_packed_command(cmd).await;
            self.observe(&result).await;
            result
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> redis::RedisFuture<'a, Vec<redis::Value>> {
        Box::pin(async move {
            let result = self
                .connection()
                .req_packed_commands(pipeline, offset, count)
                .await;
            self.observe(&result).await;
            result
        })
    }

    fn get_db(&self) -> i64 {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timed_out() -> redis::RedisResult<()> {
        Err(std::io::Error::new(std::io::ErrorKind::TimedOut, "timed out").into())
    }

    /// On the local cluster (`TOLLGATE_REDIS_CLUSTER`): a connection that just answered is kept
    /// when a command times out; one silent for longer than [`STALL`] is rebuilt once (not again
    /// within [`STALL`]) and the new connection serves.
    #[tokio::test]
    async fn a_silent_connection_is_rebuilt_once_and_serves() {
        let Some(seeds) = testkit::redis_cluster() else {
            return;
        };
        let client = redis::cluster::ClusterClientBuilder::new(seeds.iter().map(String::as_str))
            .build()
            .unwrap();
        let mut conn = ClusterConn::connect(client).await.unwrap();
        let pong: String = redis::cmd("PING").query_async(&mut conn).await.unwrap();
        assert_eq!(pong, "PONG");
        conn.observe(&timed_out()).await;
        assert_eq!(
            conn.rebuilt.load(Ordering::Relaxed),
            0,
            "it answered just now"
        );

        // Ten seconds old, and nothing has answered since its first second.
        conn.born = Instant::now().checked_sub(Duration::from_secs(10)).unwrap();
        conn.answered.store(1_000, Ordering::Relaxed);
        conn.observe(&timed_out()).await;
        let rebuilt = conn.rebuilt.load(Ordering::Relaxed);
        assert!(rebuilt >= 10_000, "rebuilt at {rebuilt} ms");
        conn.observe(&timed_out()).await;
        assert_eq!(
            conn.rebuilt.load(Ordering::Relaxed),
            rebuilt,
            "once per stall"
        );
        let pong: String = redis::cmd("PING").query_async(&mut conn).await.unwrap();
        assert_eq!(pong, "PONG");
        assert!(conn.answered.load(Ordering::Relaxed) >= rebuilt);
    }
}
