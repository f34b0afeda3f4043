//! State shared by every request of one gateway: the configuration and the tables built from it,
//! the stores, the metrics, this proxy's wait queue.
//!
//! Data only: built once at start-up, with three accessors that read (or, for the gateway's own
//! Redis connection, open once) what it holds — [`Shared::live`], [`Shared::stores`],
//! [`Shared::open_local_stores`]. What is done with it is the phases' (`admission.rs`,
//! `attempt.rs`, `answer.rs`, `money/settle.rs`) and the binaries' handle's (`control.rs`:
//! reloads, gauges, the configuration's state). The phases below the gateway never receive it
//! whole: the phase files hand each one the plain data and the store capability it needs.

use crate::live::{Live, ReloadState};
use crate::metrics::Metrics;
use crate::money::renew::LiveHolds;
use crate::money::resend::{RecentEvents, Spool};
use crate::route::capacity::Queue;
use credentials::{Env, KeyHasher};
use opstate::Stores;
use settings::{Environment, Settings};
use std::sync::Arc;
use std::time::Duration;

pub(crate) struct Shared {
    /// The start-up settings: what a reload cannot change (listen, stores, pepper, server limits,
    /// video, …). Models, accounts, groups, routing and prices are in [`Shared::live`].
    pub settings: Arc<Settings>,
    /// The configuration a reload swaps (`crate::live`); each request keeps the one it started
    /// with (`RequestCtx::live`).
    pub live_now: std::sync::RwLock<Arc<Live>>,
    /// The last reload's outcome.
    pub reloads: std::sync::Mutex<ReloadState>,
    /// Requests in progress in this proxy (each `RequestCtx` counts itself until dropped).
    pub in_flight: Arc<std::sync::atomic::AtomicUsize>,
    pub env: Env,
    pub hasher: KeyHasher,
    /// Signs the URLs of hosted media (`crate::media`).
    pub signer: crate::media::Signer,
    /// Hosted images waiting for their store write.
    pub pending_media: Arc<crate::media::Pending>,
    /// The stores created at start-up (on the background runtime, shared with an embedded
    /// admin-api). See [`Shared::stores`].
    startup_stores: Stores,
    /// The gateway's own Redis stores, connected from the proxy's runtime on the first request.
    local_stores: tokio::sync::OnceCell<Option<Stores>>,
    pub metrics: Arc<Metrics>,
    /// Where admin-api answers (`/partner/v1`, `/api/v1`, `/invitations`); `None`: not served.
    pub admin: Option<std::net::SocketAddr>,
    /// Requests waiting for capacity in this proxy.
    pub queue: Queue,
    /// Holds of the calls in progress in this proxy, renewed until settled.
    pub live_holds: LiveHolds,
    /// Batch lines this proxy serves now, their claims renewed until answered.
    pub(crate) live_claims: crate::batch_line::LiveClaims,
    /// Usage events appended recently, re-sent if the store loses them.
    pub recent: RecentEvents,
    /// Video task records, given by the binaries (`set_video_tasks`: the ledger database's);
    /// unset: the video routes answer 503.
    pub tasks: std::sync::OnceLock<std::sync::Arc<dyn opstate::TaskBook>>,
    /// The tracer of `[telemetry]`, given by the binaries (`Gateway::set_tracer`); unset: calls
    /// are not traced.
    pub tracer: std::sync::OnceLock<opentelemetry_sdk::trace::SdkTracer>,
    /// The gateway's own supplier calls (video tasks).
    pub supplier: crate::upstream::direct::Client,
    /// Key records kept in this proxy (on Redis, `redis.key_cache_ms` > 0; see
    /// `opstate::KeyCache`): refreshed by `auth::watch_keys`.
    pub key_cache: Option<opstate::KeyCache>,
}

impl Shared {
    pub fn new(
        settings: Arc<Settings>,
        stores: Stores,
        metrics: Arc<Metrics>,
        admin: Option<std::net::SocketAddr>,
    ) -> Shared {
        let live = Arc::new(Live::build(settings.clone(), None));
        let env = match settings.server.environment {
            Environment::Production => Env::Live,
            Environment::Development => Env::Dev,
        };
        let recent = match stores.in_process {
            false => RecentEvents::with_spool(spool(&settings)),
            // The in-memory store cannot lose events while this process lives.
            true => RecentEvents::with_spool(spool(&settings)).without_memory(),
        };
        let key_cache = settings
            .redis
            .as_ref()
            .filter(|r| r.key_cache_ms > 0)
            .map(|r| opstate::KeyCache::new(Duration::from_millis(r.key_cache_ms)));
        Shared {
            hasher: KeyHasher::new(&settings.security.key_pepper),
            signer: crate::media::Signer::new(&settings.security.key_pepper),
            pending_media: Arc::default(),
            env,
            startup_stores: stores,
            local_stores: tokio::sync::OnceCell::new(),
            live_now: std::sync::RwLock::new(live),
            in_flight: Arc::default(),
            reloads: std::sync::Mutex::new(ReloadState {
                loaded_at: crate::live::unix_now(),
                ..ReloadState::default()
            }),
            metrics,
            settings,
            admin,
            queue: Queue::default(),
            live_holds: LiveHolds::default(),
            live_claims: Default::default(),
            recent,
            tasks: std::sync::OnceLock::new(),
            tracer: std::sync::OnceLock::new(),
            supplier: crate::upstream::direct::Client::default(),
            key_cache,
        }
    }

    /// The configuration in force now (a request keeps the one it started with).
    pub fn live(&self) -> Arc<Live> {
        match self.live_now.read() {
            Ok(live) => live.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// The operational stores the request path uses: the gateway's own Redis connection once it
    /// exists, else the start-up ones (always, with the in-memory store).
    ///
    /// Decision (README "Performance"): a Redis connection's I/O task runs on the runtime that
    /// opened it. Opened at start-up it runs on the background runtime, so every store round trip
    /// of a request hopped between threads twice; the benchmark showed the background thread
    /// taking more CPU than the proxy thread. The gateway therefore opens its own connection from
    /// the proxy's runtime on its first request ([`Shared::open_local_stores`]).
    pub fn stores(&self) -> &Stores {
        self.local_stores
            .get()
            .and_then(Option::as_ref)
            .unwrap_or(&self.startup_stores)
    }

    /// Opens the gateway's own Redis connection once (see [`Shared::stores`]); on failure the
    /// start-up stores stay in use. Cheap after the first call.
    pub async fn open_local_stores(&self) {
        if self.local_stores.get().is_some() {
            return;
        }
        let Some(redis) = &self.settings.redis else {
            return;
        };
        self.local_stores
            .get_or_init(|| async {
                match Stores::redis_at(&redis.url, &redis.cluster, &redis.key_prefix).await {
                    Ok(stores) => Some(stores),
                    Err(e) => {
                        tracing::warn!(error = %e, "the gateway's own redis connection failed; using the start-up one");
                        None
                    }
                }
            })
            .await;
    }
}

/// The usage spool of `server.usage_spool_dir`, if configured and usable (an unusable one is
/// logged; events are then kept in memory only).
fn spool(settings: &Settings) -> Option<Spool> {
    let dir = settings.server.usage_spool_dir.as_deref()?;
    Spool::open(dir)
        .map_err(|e| {
            tracing::error!(error = %e, dir = %dir.display(), "usage spool unusable: events kept in memory only");
        })
        .ok()
}
