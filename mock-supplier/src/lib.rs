//! A fault-injecting, deterministic OpenAI-style model supplier for the
//! gateway's tests, benchmarks and quickstart. Never linked into production
//! binaries.
//!
//! This crate root owns the public entry points: [`MockSupplier`] starts an
//! instance from a [`MockConfig`] and returns a [`MockHandle`], which exposes
//! the address, the recorded requests and the instance-level [`Fault`].
//!
//! * Routes: `GET /v1/models`, `POST /v1/chat/completions`,
//!   `POST /v1/responses`, `POST /v1/audio/transcriptions` (multipart; see
//!   `audio`); anything else is 404. Every response carries
//!   `x-mock-name: <name>`.
//! * Processing order: read and record the request (bodies up to
//!   [`MAX_BODY_BYTES`], else 413) → choose the fault (`x-mock-fault` header,
//!   `none`/empty meaning no fault and an invalid spec 400; else the instance
//!   fault) → `stall_ms` → `close` → API key (401) → `status=` fault → route
//!   (404) → body and `x-mock-*` header validation (400) → reply, to which
//!   `cut_after` / `malformed_sse` apply.
//! * Exact reply bytes, ids, reply text and usage rules: [`reply`].
//! * Fault syntax (`x-mock-fault` header and [`MockHandle::set_fault`]):
//!   [`Fault`].
//!
//! Request headers the mock understands: `x-mock-fault`, `x-mock-events`
//! (pieces, default 5, max 10000), `x-mock-usage`
//! (`prompt=P,completion=C,cached=K`), `x-mock-delay-ms` (pause between stream
//! events, max 60000), `x-mock-audio-seconds` (the duration a transcription
//! reports).
//!
//! ```no_run
//! # async fn demo() -> std::io::Result<()> {
//! use mock_supplier::{MockConfig, MockSupplier};
//! let mock = MockSupplier::start(MockConfig::default()).await?;
//! let base = mock.base_url(); // "http://127.0.0.1:PORT/v1"
//! # let _ = base;
//! mock.set_fault(Some("status=429;retry_after=7".parse().map_err(std::io::Error::other)?));
//! # Ok(()) }
//! ```

mod anthropic;
mod anthropic_check;
mod audio;
mod clock;
mod fault;
mod gemini;
mod openai_tools;
mod record;
pub mod reply;
mod respond;
mod route_anthropic;
mod route_gemini;
mod route_openai;
mod server;
mod tools;
mod usage;

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex, PoisonError};

use tokio::net::TcpListener;
use tokio::task::JoinSet;

pub use fault::{Fault, ParseFaultError};
pub use record::RecordedRequest;
pub use server::{MAX_BODY_BYTES, MAX_DELAY_MS};

use server::Shared;

/// Builder entry point: starts mock supplier instances.
#[derive(Clone, Copy, Debug, Default)]
pub struct MockSupplier;

/// Configuration of one mock instance.
#[derive(Clone, Debug)]
pub struct MockConfig {
    /// When set, requests must carry `Authorization: Bearer <key>` exactly,
    /// else they get 401. `None` accepts any (or no) `Authorization`.
    pub api_key: Option<String>,
    /// Instance name, sent back in the `x-mock-name` response header so tests
    /// with several mocks can tell which one answered.
    pub name: String,
}

impl Default for MockConfig {
    fn default() -> Self {
        MockConfig {
            api_key: None,
            name: "mock".to_owned(),
        }
    }
}

impl MockSupplier {
    /// Binds `127.0.0.1:0` and serves until the handle is shut down or every
    /// clone of it is dropped.
    pub async fn start(config: MockConfig) -> std::io::Result<MockHandle> {
        Self::start_on(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)), config).await
    }

    /// Binds `addr` and serves until the handle is shut down or every clone of
    /// it is dropped. Must be called inside a tokio runtime.
    pub async fn start_on(addr: SocketAddr, config: MockConfig) -> std::io::Result<MockHandle> {
        let listener = TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared::new(config));
        let mut tasks = JoinSet::new();
        tasks.spawn(server::accept_loop(listener, Arc::clone(&shared)));
        Ok(MockHandle {
            inner: Arc::new(Inner {
                addr,
                shared,
                tasks: Mutex::new(tasks),
            }),
        })
    }
}

/// A running mock instance. Cheap to clone; the instance stops when
/// [`MockHandle::shutdown`] is called or the last clone is dropped.
#[derive(Clone)]
pub struct MockHandle {
    inner: Arc<Inner>,
}

struct Inner {
    addr: SocketAddr,
    shared: Arc<Shared>,
    /// The accept loop, which owns the connection tasks; dropping or aborting
    /// it stops everything.
    tasks: Mutex<JoinSet<()>>,
}

impl std::fmt::Debug for MockHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MockHandle")
            .field("addr", &self.inner.addr)
            .field("name", &self.inner.shared.config.name)
            .finish_non_exhaustive()
    }
}

impl MockHandle {
    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.inner.addr
    }

    /// `http://ADDR/v1`, e.g. `http://127.0.0.1:41234/v1`.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.inner.addr)
    }

    /// Every request received so far, in arrival order, with the response
    /// status and body as sent so far.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.inner.shared.recorder.snapshot()
    }

    /// How many requests were received (since the last
    /// [`clear_requests`](Self::clear_requests)).
    pub fn request_count(&self) -> usize {
        self.inner.shared.recorder.len()
    }

    /// Forgets the requests recorded so far.
    pub fn clear_requests(&self) {
        self.inner.shared.recorder.clear();
    }

    /// Sets (or with `None` clears) the instance-level fault, applied to every
    /// later request that has no `x-mock-fault` header.
    pub fn set_fault(&self, fault: Option<Fault>) {
        *self
            .inner
            .shared
            .fault
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = fault;
    }

    /// The current instance-level fault.
    pub fn fault(&self) -> Option<Fault> {
        self.inner
            .shared
            .fault
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Stops the instance: the listener closes (new connections are refused
    /// once the runtime has dropped the accept task, which is immediate in
    /// practice) and open connections, including in-flight streams, are
    /// dropped. Idempotent.
    pub fn shutdown(&self) {
        self.inner
            .tasks
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .abort_all();
    }
}
