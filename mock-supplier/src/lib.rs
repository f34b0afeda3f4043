//! A fault-injecting, deterministic model supplier for the gateway's tests,
//! benchmarks and quickstart, speaking three wire formats at once: OpenAI
//! (chat completions, responses, audio), Anthropic Messages and Gemini
//! `generateContent`. Never linked into production binaries.
//!
//! This crate root owns the public entry points: [`MockSupplier`] starts an
//! instance from a [`MockConfig`] and returns a [`MockHandle`], which exposes
//! the address, the recorded requests and the instance-level [`Fault`]. One
//! instance serves every format: point an OpenAI account at
//! [`MockHandle::base_url`] (`http://ADDR/v1`), an Anthropic or Gemini account
//! at [`MockHandle::root_url`] (`http://ADDR`).
//!
//! # Routes
//!
//! The path decides the wire format, and with it the auth header, the error
//! shape and the status-fault headers. Every response carries
//! `x-mock-name: <name>`.
//!
//! * **OpenAI** (every path not claimed below): `GET /v1/models`,
//!   `POST /v1/chat/completions`, `POST /v1/responses`,
//!   `POST /v1/audio/transcriptions` (multipart; see `audio`),
//!   `POST /v1/images/generations` and `GET /files/{name}.png` (no
//!   credentials needed; see [`images`]), `POST /v1/videos`, `GET /v1/videos/{id}` and
//!   `GET /v1/videos/{id}/content` (tasks in memory, `x-mock-video`; see [`videos`]),
//!   `POST /v1/embeddings` (see [`embeddings`]), OpenAI's Batch API (`POST /v1/files`,
//!   `GET /v1/files/{id}/content`, `POST /v1/batches`, `GET /v1/batches/{id}`, `POST
//!   /v1/batches/{id}/cancel`; batches in memory, `x-mock-batch`; see `openai_batches`);
//!   OpenAI's completions usage API (`GET /v1/organization/usage/completions`, from what the
//!   mock billed; see [`usage_report`]);
//!   anything else 404. Auth: `Authorization: Bearer <key>`, else 401
//!   `{"error":{"message":"Incorrect API key provided","type":"invalid_request_error","code":"invalid_api_key"}}`.
//!   Errors: `{"error":{"message":M,"type":T}}`.
//! * **Anthropic** (`/v1/messages`, `/v1/messages/…`, `/v1/organizations/…`):
//!   `POST /v1/messages`, `POST /v1/messages/count_tokens` and the message batches
//!   (`/v1/messages/batches…`, in memory; see `anthropic_batches`)
//!   (`{"input_tokens": prompt}`, never charged), and the messages usage report
//!   (`GET /v1/organizations/usage_report/messages`; see [`usage_report`]); anything else 404. Both
//!   require header `anthropic-version` (else 400) and validate like the real
//!   API: string `model`, integer `max_tokens` ≥ 1 (messages only), `system`
//!   string or `[{type:"text",text}]`, `messages` non-empty with roles
//!   `user`/`assistant`, first `user`, content a string or known blocks
//!   (`tool_use` only from the assistant, `tool_result` only from the user),
//!   no empty text (`messages: text content blocks must be non-empty`), every
//!   `tool_use` id answered by a `tool_result` (`tool_use_id`) in the
//!   immediately following user message and every `tool_result` matching a
//!   `tool_use` of the message before. Auth: `x-api-key: <key>` exactly, else
//!   401 `authentication_error` `invalid x-api-key`. Errors:
//!   `{"type":"error","error":{"type":T,"message":M},"request_id":"req_mock"}`,
//!   T by status: 400 `invalid_request_error`, 401 `authentication_error`,
//!   403 `permission_error`, 404 `not_found_error`, 413 `request_too_large`,
//!   429 `rate_limit_error`, 529 `overloaded_error`, other 5xx `api_error`,
//!   other 4xx `invalid_request_error`.
//! * **Gemini** (`/v1beta/…`, and `/v1/models/{model}:ACTION`):
//!   `GET /v1beta/models` (`{"models":[{"name":"models/<id>","displayName",
//!   "supportedGenerationMethods":["generateContent","countTokens"]}]}` for
//!   `gemini-2.5-pro`, `gemini-2.5-flash`, `gemini-2.0-flash`),
//!   `POST /v1beta/models/{model}:generateContent`,
//!   `…:streamGenerateContent` (`?alt=sse`: SSE; without: a JSON array of the
//!   same chunks), `…:countTokens` (`{"totalTokens": prompt}`; body
//!   `{contents}` or `{generateContentRequest:{…}}`); the same under
//!   `/v1/models/`; Veo's `…:predictLongRunning`, its operations and the file
//!   download (see [`veo`]); `…:embedContent` and `…:batchEmbedContents` (see
//!   [`embeddings`]); anything else 404. The model comes from the path. Bodies:
//!   `contents` non-empty, each role `user`/`model` (or absent; else 400
//!   `Please use a valid role: user, model.`), `parts` non-empty objects;
//!   top-level fields other than `contents`, `systemInstruction`,
//!   `generationConfig`, `tools`, `toolConfig`, `safetySettings`,
//!   `cachedContent`, `labels`, `model` (or their snake_case forms) are 400.
//!   Auth: `x-goog-api-key: <key>` or query `key=<key>`; a wrong key is 401
//!   `UNAUTHENTICATED` (`API key not valid. Please pass a valid API key.`), no
//!   key at all 403 `PERMISSION_DENIED`. Errors:
//!   `{"error":{"code":C,"message":M,"status":S}}`, S by status: 400
//!   `INVALID_ARGUMENT`, 401 `UNAUTHENTICATED`, 403 `PERMISSION_DENIED`, 404
//!   `NOT_FOUND`, 429 `RESOURCE_EXHAUSTED`, 500 `INTERNAL`, 503
//!   `UNAVAILABLE`, 504 `DEADLINE_EXCEEDED` (409 `ABORTED`, 499 `CANCELLED`,
//!   501 `UNIMPLEMENTED`, other 4xx `INVALID_ARGUMENT`, other 5xx
//!   `INTERNAL`).
//!
//! # Processing order
//!
//! Read and record the request (bodies up to [`MAX_BODY_BYTES`], else 413) →
//! choose the fault (`x-mock-fault` header, `none`/empty meaning no fault and
//! an invalid spec 400; else the instance fault) → `stall_ms` → `close` → API
//! key (401/403) → `status=` fault → route (404) → required headers, body and
//! `x-mock-*` header validation (400) → reply, to which `cut_after`,
//! `error_after` and `malformed_sse` apply. Errors the mock raises itself are in the route's
//! error shape.
//!
//! # Replies
//!
//! Exact bytes, ids, reply text and usage rules: [`reply`]; in short:
//!
//! * ids from `hash` = 16 hex digits of FNV-1a of the request body: chat
//!   `chatcmpl-<hash>`, responses `resp_<hash>` / `msg_<hash>`, Anthropic
//!   `msg_<hash>`, Gemini `responseId` `<hash>`, tool calls `call_<hash>`
//!   (responses item `fc_<hash>`), Anthropic `toolu_<hash>`.
//! * text: non-streaming `"mock reply w1 … wn"`, streams the pieces
//!   `" w1"` … `" wn"`.
//! * usage: `prompt` = all input tokens (default `ceil(body bytes / 4)`),
//!   `completion` = all billed output tokens (default n), `cached`,
//!   `cache_creation`, `thoughts` (default 0). Anthropic reports
//!   `input_tokens = prompt - cached - cache_creation`,
//!   `cache_read_input_tokens = cached`,
//!   `cache_creation_input_tokens = cache_creation`,
//!   `output_tokens = completion`; Gemini `promptTokenCount = prompt`
//!   (cached included), `candidatesTokenCount = completion - thoughts`,
//!   `thoughtsTokenCount = thoughts` and `cachedContentTokenCount = cached`
//!   (each omitted when 0), `totalTokenCount = prompt + completion`.
//! * Anthropic stream: `message_start` (usage with `output_tokens: 1`),
//!   `content_block_start`, `ping`, `content_block_delta` × n,
//!   `content_block_stop`, `message_delta` with the CUMULATIVE usage (input,
//!   cache fields and final `output_tokens` all repeated), `message_stop`.
//! * Gemini stream: `data: JSON\r\n\r\n` chunks, one per piece, each with a
//!   RUNNING `usageMetadata` (`candidatesTokenCount = min(i, final)`); the last
//!   carries `finishReason: "STOP"` and the final counts.
//! * Tool calls (every format): a request that declares a function tool and
//!   whose conversation does not end with a tool result gets a call of the
//!   FIRST declared tool with arguments `{"q":"mock"}` instead of text
//!   (chat `finish_reason: "tool_calls"`, Anthropic `stop_reason:
//!   "tool_use"`, Gemini `functionCall` with `STOP`); see `tools` for what
//!   counts as declared and as a tool result per format.
//!
//! # Headers and faults
//!
//! Fault syntax (`x-mock-fault` header and [`MockHandle::set_fault`]):
//! [`Fault`]. A `status=` fault answers in the route's error shape; its hints:
//! `retry_after=S` → `retry-after: S` (every format); `reset_header=S` →
//! OpenAI `x-ratelimit-reset-requests: Ss`, Anthropic
//! `anthropic-ratelimit-requests-reset` and `anthropic-ratelimit-tokens-reset`
//! = RFC 3339 UTC time now + S (`2026-11-24T10:00:07Z`; the only clock
//! read), Gemini nothing; `reset_body=S` → OpenAI and Anthropic message
//! `Rate limit reached. Please try again in Ss.`, Gemini a
//! `details:[{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"Ss"}]`.
//! `cut_after` and `malformed_sse` apply to every stream (Gemini: the SSE
//! form); `error_after` to OpenAI's and Anthropic's streams.
//!
//! Request headers the mock understands: `x-mock-fault`, `x-mock-events`
//! (pieces, default 5, max 10000), `x-mock-pad-bytes` (bytes of `x` appended to the
//! reply text, the last streamed piece for streams; OpenAI routes and Gemini; max 256 MiB), `x-mock-usage`
//! (`prompt=P,completion=C,cached=K,cache_creation=W,cache_creation_1h=H,thoughts=T`, any
//! subset), `x-mock-delay-ms` (pause between stream events, max 60000),
//! `x-mock-audio-seconds` (the duration a transcription reports),
//! `x-mock-images` (images an image answer carries, 0 to 16).
//!
//! ```no_run
//! # async fn demo() -> std::io::Result<()> {
//! use mock_supplier::{MockConfig, MockSupplier};
//! let mock = MockSupplier::start(MockConfig::default()).await?;
//! let openai = mock.base_url(); // "http://127.0.0.1:PORT/v1"
//! let anthropic_or_gemini = mock.root_url(); // "http://127.0.0.1:PORT"
//! # let _ = (openai, anthropic_or_gemini);
//! mock.set_fault(Some("status=429;retry_after=7".parse().map_err(std::io::Error::other)?));
//! # Ok(()) }
//! ```

mod anthropic;
mod anthropic_batches;
mod anthropic_check;
mod audio;
mod batch_state;
mod clock;
pub mod embeddings;
mod fault;
pub mod gemini;
pub mod images;
mod openai_batches;
mod openai_tools;
mod record;
pub mod reply;
mod respond;
mod route_anthropic;
mod route_gemini;
mod route_openai;
mod server;
mod shared;
mod tools;
mod usage;
pub mod usage_report;
pub mod veo;
mod video_task;
pub mod videos;

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex, PoisonError};

use tokio::net::TcpListener;
use tokio::task::JoinSet;

pub use fault::{Fault, ParseFaultError};
pub use record::RecordedRequest;
pub use server::MAX_BODY_BYTES;
pub use shared::MAX_DELAY_MS;

use shared::Shared;

/// Builder entry point: starts mock supplier instances.
#[derive(Clone, Copy, Debug, Default)]
pub struct MockSupplier;

/// Configuration of one mock instance.
#[derive(Clone, Debug)]
pub struct MockConfig {
    /// When set, requests must carry the key in their format's auth header,
    /// else they get 401 (Gemini without any key: 403): OpenAI
    /// `Authorization: Bearer <key>`, Anthropic `x-api-key: <key>`, Gemini
    /// `x-goog-api-key: <key>` or query `key=<key>`. `None` accepts any (or
    /// no) credentials.
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

    /// `http://ADDR/v1`, e.g. `http://127.0.0.1:41234/v1`: the base URL of an
    /// OpenAI account.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.inner.addr)
    }

    /// `http://ADDR`, e.g. `http://127.0.0.1:41234`: the base URL of an
    /// Anthropic account (which appends `/v1/messages`) or a Gemini account
    /// (which appends `/v1beta/models/{model}:ACTION`).
    pub fn root_url(&self) -> String {
        format!("http://{}", self.inner.addr)
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
    /// How batches created from now on behave when their create carries no `x-mock-batch`
    /// header (same syntax: `polls=N`, `expire=true`, `drop=CUSTOM_ID`); `None`: the default.
    pub fn set_batch_behaviour(&self, behaviour: Option<&str>) {
        *self
            .inner
            .shared
            .batch_behaviour
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = behaviour.map(str::to_string);
    }

    /// How many batches were created on this mock.
    pub fn batches_created(&self) -> usize {
        self.inner
            .shared
            .batches
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

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
