//! State shared by every request of one gateway: the configuration and the tables built from it,
//! the stores, the metrics, this proxy's wait queue.
//!
//! Built once at start-up. The phases never receive it whole: the gateway hands each one the plain
//! data and the store capability it needs (see [`Shared::routing`]).

use crate::ctx::RequestCtx;
use crate::live::{Live, ReloadState};
use crate::metrics::Metrics;
use crate::money::renew::LiveHolds;
use crate::money::resend::{RecentEvents, Spool};
use crate::route::capacity::{self, Queue};
use crate::route::{Routing, cooldown, select};
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
    live: std::sync::RwLock<Arc<Live>>,
    /// The last reload's outcome.
    reloads: std::sync::Mutex<ReloadState>,
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
    /// Usage events appended recently, re-sent if the store loses them.
    pub recent: RecentEvents,
    /// Video task records, given by the binaries (`set_video_tasks`: the ledger database's);
    /// unset: the video routes answer 503.
    pub tasks: std::sync::OnceLock<std::sync::Arc<dyn opstate::TaskBook>>,
    /// The gateway's own supplier calls (video tasks).
    pub supplier: crate::upstream::direct::Client,
    /// Key records kept in this proxy (on Redis, `redis.key_cache_ms` > 0; see
    /// `opstate::KeyCache`): refreshed by [`Shared::watch_keys`].
    key_cache: Option<opstate::KeyCache>,
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
            live: std::sync::RwLock::new(live),
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
            recent,
            tasks: std::sync::OnceLock::new(),
            supplier: crate::upstream::direct::Client::default(),
            key_cache,
        }
    }

    /// The configuration in force now (a request keeps the one it started with).
    pub fn live(&self) -> Arc<Live> {
        match self.live.read() {
            Ok(live) => live.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// Applies `new` (validated settings read from the configuration file): the sections a reload
    /// can change take effect for calls that start from now on; the others keep their start-up
    /// values and are returned (they need a restart). Calls in flight keep their configuration.
    pub fn reload(&self, new: Settings) -> Vec<String> {
        let current = self.live();
        let (merged, restart) = crate::live::merge(&self.settings, &new);
        let next = Arc::new(Live::build(Arc::new(merged), Some(&current)));
        match self.live.write() {
            Ok(mut live) => *live = next,
            Err(poisoned) => *poisoned.into_inner() = next,
        }
        let now = crate::live::unix_now();
        if let Ok(mut state) = self.reloads.lock() {
            state.loaded_at = now;
            state.last = Some((now, None));
            state.needs_restart = restart.clone();
        }
        self.metrics.reloads.with_label_values(&["ok"]).inc();
        restart
    }

    /// A reload whose file was refused: nothing changed; the error is kept for `/readyz`.
    pub fn reload_failed(&self, error: String) {
        if let Ok(mut state) = self.reloads.lock() {
            state.last = Some((crate::live::unix_now(), Some(error)));
        }
        self.metrics.reloads.with_label_values(&["failed"]).inc();
    }

    /// Sets the gauges read at scrape time (each account's estimated capacity).
    pub fn refresh_gauges(&self) {
        let live = self.live();
        for u in live.accounts.all() {
            self.metrics
                .account_capacity
                .with_label_values(&[u.account.id.as_str()])
                .set(i64::from(u.estimate.now()));
        }
    }

    /// The state of the configuration in use, for `/readyz`: always valid (an invalid file is
    /// never applied), when it was loaded, and the last reload's outcome.
    pub fn configuration_state(&self) -> serde_json::Value {
        let state = self.reloads.lock().map(|s| s.clone()).unwrap_or_default();
        let last = state.last.map(|(at, error)| {
            serde_json::json!({
                "at": at,
                "result": if error.is_some() { "failed" } else { "ok" },
                "error": error,
            })
        });
        serde_json::json!({
            "state": "valid",
            "loaded_at": state.loaded_at,
            "last_reload": last,
            "needs_restart": state.needs_restart,
        })
    }

    /// The caller of `header` on `surface`, by its key (see `auth::authenticate`), and its key's
    /// hash. `admitted`: the call goes through admission, which checks the key against the
    /// directory again in its own store step, so this proxy's key cache may answer; other calls
    /// (model lists, video polls and downloads) read the directory itself, so a key disabled on
    /// any proxy is refused at once everywhere.
    pub async fn authenticate(
        &self,
        header: &pingora::http::RequestHeader,
        surface: crate::errors::Surface,
        admitted: bool,
    ) -> Result<(opstate::KeyRecord, String), crate::errors::GatewayError> {
        let keys = self.stores().keys.as_ref();
        let (env, hasher) = (self.env, &self.hasher);
        match &self.key_cache {
            Some(cache) if admitted => {
                let cached = cache.through(keys);
                crate::auth::authenticate(header, surface, env, hasher, &cached).await
            }
            _ => crate::auth::authenticate(header, surface, env, hasher, keys).await,
        }
    }

    /// Listens to the key directory's changes for the key cache until `shutdown` (nothing to do
    /// without a cache; see `opstate::RedisStore::watch_keys`).
    pub async fn watch_keys(&self, mut shutdown: tokio::sync::watch::Receiver<bool>) {
        let (Some(cache), Some(redis)) = (&self.key_cache, &self.settings.redis) else {
            return;
        };
        tokio::select! {
            _ = opstate::RedisStore::watch_keys(&redis.url, &redis.key_prefix, cache) => {}
            _ = shutdown.wait_for(|stop| *stop) => {}
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
                match Stores::redis(&redis.url, &redis.key_prefix).await {
                    Ok(stores) => Some(stores),
                    Err(e) => {
                        tracing::warn!(error = %e, "the gateway's own redis connection failed; using the start-up one");
                        None
                    }
                }
            })
            .await;
    }

    /// Writes the cooldowns `ctx` decided so far (see `cooldown::apply`).
    pub async fn cool(&self, ctx: &mut RequestCtx) {
        if ctx.to_cool.is_empty() {
            return;
        }
        let stores = self.stores();
        let cooling = std::mem::take(&mut ctx.to_cool);
        // Each 429 or failure also halves the account's estimated capacity in this proxy.
        let live = ctx.live.clone();
        for c in &cooling {
            if let Some(u) = live.accounts.get(c.account) {
                let estimate = u.estimate.cut();
                tracing::debug!(account = %u.account.id, estimate, "account capacity estimate cut");
            }
        }
        let (counters, cooldowns) = (stores.counters.as_ref(), stores.cooldowns.as_ref());
        let (accounts, metrics) = (&live.accounts, self.metrics.as_ref());
        cooldown::apply(
            cooling,
            accounts,
            counters,
            cooldowns,
            metrics,
            &ctx.request_id,
        )
        .await;
    }

    /// Moves `ctx`'s capacity slot to account `i` (a failover). `false`: `i` is full.
    pub async fn move_slot(&self, ctx: &mut RequestCtx, i: usize) -> bool {
        let live = ctx.live.clone();
        let Some(to) = live.accounts.get(i) else {
            return false;
        };
        let from = ctx.slot.and_then(|o| live.accounts.get(o));
        let ttl = Duration::from_millis(live.settings.routing.slot_ttl_ms);
        let slots = self.stores().slots.as_ref();
        let moved = capacity::move_to(slots, from, to, &ctx.request_id, ttl).await;
        if moved {
            ctx.slot = Some(i);
        }
        moved
    }

    /// Updates the queue's depth gauge (after a call gave its slot back).
    pub fn queue_depth_gauge(&self) {
        let depth = i64::try_from(self.queue.depth()).unwrap_or(i64::MAX);
        self.metrics.queue_depth.set(depth);
    }

    /// Records that `ctx`'s session succeeded on account `i` (see `select::remember`).
    pub async fn remember_session(&self, ctx: &RequestCtx, i: usize) {
        let live = ctx.live.clone();
        let (Some(key), Some(caller), Some(id)) = (&ctx.session, &ctx.caller, live.accounts.id(i))
        else {
            return;
        };
        let ttl = Duration::from_millis(live.settings.routing.session_ttl_ms);
        let sessions = self.stores().sessions.as_ref();
        select::remember(sessions, caller.org_id, key, id, ttl).await;
    }

    /// The base of the URLs of hosted media: `server.public_base_url` when configured, else the
    /// request's own `Host` (what the client reached the gateway as).
    pub(crate) fn media_base(&self, host: Option<&str>) -> String {
        let server = &self.settings.server;
        match host {
            Some(host) if !server.public_base_url_configured => format!("http://{host}/"),
            _ => server.public_base_url.to_string(),
        }
    }

    /// What the routing decision reads.
    pub fn routing<'a>(&'a self, live: &'a Live) -> Routing<'a> {
        let stores = self.stores();
        Routing {
            router: &live.router,
            accounts: &live.accounts,
            settings: &live.settings.routing,
            queue: &self.queue,
            metrics: &self.metrics,
            sessions: stores.sessions.as_ref(),
            slots: stores.slots.as_ref(),
            calls: stores.calls.as_ref(),
        }
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
