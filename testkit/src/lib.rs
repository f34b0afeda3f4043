//! Test support shared by every crate's suites.
//!
//! - Services: [`fresh_database_url`] (a database no other test uses), [`redis_url`] and
//!   [`redis_cluster`]; with
//!   `TOLLGATE_REQUIRE_SERVICES=1` (CI) a missing service fails the test instead of skipping it.
//! - Configuration: [`TestConfig`], a typed builder of the one TOML file (rendered, then parsed by
//!   the real loader, so tests exercise the operator's format).
//! - Processes and ports: [`free_port`], [`KillOnDrop`], [`temp_dir`].
//! - Logs: [`captured_logs`] (every log line of the test binary, for credential checks).
//!
//! A leaf crate (only `settings` of the workspace): every crate may dev-depend on it.

#![allow(
    clippy::panic,
    clippy::expect_used,
    reason = "test support: a broken test environment must stop the test"
)]

mod config;
mod logs;
mod mail;

pub use config::{Account, Group, Model, TestConfig};
pub use logs::{captured_logs, captured_text};
pub use mail::{INVITEE_PASSWORD, accept_invitation, mailed_codes, next_code};

/// The pepper every test configuration uses.
pub const PEPPER: &str = "test-pepper-0123456789";

/// Whether the run demands the services (`TOLLGATE_REQUIRE_SERVICES=1`, set by CI).
pub fn services_required() -> bool {
    std::env::var("TOLLGATE_REQUIRE_SERVICES").as_deref() == Ok("1")
}

/// The Redis server under test (`REDIS_URL`). `None` lets a test skip its Redis part; when the
/// services are required, a missing `REDIS_URL` fails the calling test instead.
pub fn redis_url() -> Option<String> {
    match std::env::var("REDIS_URL") {
        Ok(url) if !url.is_empty() => Some(url),
        _ => {
            assert!(
                !services_required(),
                "TOLLGATE_REQUIRE_SERVICES=1 but REDIS_URL is not set"
            );
            None
        }
    }
}

/// The seed URLs of the Redis Cluster under test: `TOLLGATE_REDIS_CLUSTER` (comma-separated),
/// else, when `REDIS_URL` is set (the run uses services), the local cluster of
/// `scripts/redis-cluster` on ports 7100–7105, started once if it is not running (three
/// masters, three replicas, from the distribution's `redis-server`). `None` lets a test skip its
/// cluster part; when the services are required, a cluster that cannot be had fails the test.
pub fn redis_cluster() -> Option<Vec<String>> {
    static STARTED: std::sync::OnceLock<Result<Vec<String>, String>> = std::sync::OnceLock::new();
    if let Ok(seeds) = std::env::var("TOLLGATE_REDIS_CLUSTER")
        && !seeds.is_empty()
    {
        return Some(seeds.split(',').map(|s| s.trim().to_string()).collect());
    }
    redis_url()?;
    let started = STARTED.get_or_init(|| {
        let script =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/redis-cluster");
        let out = std::process::Command::new(&script)
            .arg("start")
            .output()
            .map_err(|e| format!("{}: {e}", script.display()))?;
        if !out.status.success() {
            return Err(String::from_utf8_lossy(&out.stderr).into_owned());
        }
        let seeds: Vec<String> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| l.starts_with("redis://"))
            .map(str::to_string)
            .collect();
        if seeds.is_empty() {
            return Err("scripts/redis-cluster printed no seed".into());
        }
        Ok(seeds)
    });
    match started {
        Ok(seeds) => Some(seeds.clone()),
        Err(e) => {
            assert!(
                !services_required(),
                "TOLLGATE_REQUIRE_SERVICES=1 but no Redis Cluster could be started: {e}"
            );
            None
        }
    }
}

/// A key prefix no other test uses on a shared Redis.
pub fn redis_prefix(name: &str) -> String {
    format!("test:{name}:{}:", uuid::Uuid::new_v4().simple())
}

/// A database URL no other test uses: with `DATABASE_URL` set (CI), a new PostgreSQL database on
/// that server; without it, a new SQLite file in a temporary directory (so that several
/// connections, e.g. a test's and a deployment's, see the same database).
pub async fn fresh_database_url() -> String {
    match std::env::var("DATABASE_URL") {
        Ok(url) if url.starts_with("postgres") => {
            use sea_orm::ConnectionTrait;
            let name = format!("tollgate_test_{}", uuid::Uuid::new_v4().simple());
            let server = sea_orm::Database::connect(url.as_str())
                .await
                .unwrap_or_else(|e| panic!("DATABASE_URL={url} is set but unusable: {e}"));
            server
                .execute_unprepared(&format!("CREATE DATABASE {name}"))
                .await
                .unwrap_or_else(|e| panic!("cannot create database {name}: {e}"));
            let base = url.rsplit_once('/').map(|(b, _)| b).unwrap_or(url.as_str());
            format!("{base}/{name}")
        }
        _ => {
            assert!(
                !services_required(),
                "TOLLGATE_REQUIRE_SERVICES=1 but DATABASE_URL is not set"
            );
            format!(
                "sqlite://{}?mode=rwc",
                temp_dir("db").join("ledger.db").display()
            )
        }
    }
}

/// A new, empty temporary directory named for `what`.
pub fn temp_dir(what: &str) -> std::path::PathBuf {
    let dir =
        std::env::temp_dir().join(format!("tollgate-{what}-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).expect("temporary directory");
    dir
}

/// Where [`free_port`] picks: below Linux's default ephemeral range (32768–60999), so that no
/// outgoing connection is given the port between the pick and the child process's bind.
const PICKED_PORTS: std::ops::Range<u16> = 20_000..32_000;

/// A loopback port free right now, for a process that binds it itself (a `proxy` child, its
/// metrics listener). Two picks of one test process never return the same port (tests run in
/// parallel threads and each starts its processes later), and the port is outside the ephemeral
/// range, so neither a parallel test nor an outgoing connection takes it before the child binds.
pub fn free_port() -> u16 {
    static TAKEN: std::sync::Mutex<std::collections::BTreeSet<u16>> =
        std::sync::Mutex::new(std::collections::BTreeSet::new());
    let span = u128::from(PICKED_PORTS.end - PICKED_PORTS.start);
    let mut taken = TAKEN
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    for _ in 0..10_000 {
        let offset = u16::try_from(uuid::Uuid::new_v4().as_u128() % span).unwrap_or(0);
        let port = PICKED_PORTS.start + offset;
        if !taken.contains(&port) && std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            taken.insert(port);
            return port;
        }
    }
    panic!("no free loopback port in {PICKED_PORTS:?}");
}

/// A loopback base URL where nothing listens.
pub fn closed_url() -> String {
    format!("http://127.0.0.1:{}/v1", free_port())
}

/// Kills the child process when dropped (a failing test never leaves a process behind).
pub struct KillOnDrop(pub std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The Python of the official-SDK virtual environment (`scripts/sdk-env` makes it at
/// `target/sdk-venv`; `TOLLGATE_SDK_PYTHON` overrides). `None` lets an SDK test skip on a machine
/// without it; with `TOLLGATE_REQUIRE_SDKS=1` (set by CI) a missing one fails the calling test.
pub fn sdk_python() -> Option<std::path::PathBuf> {
    let path = match std::env::var("TOLLGATE_SDK_PYTHON") {
        Ok(p) if !p.is_empty() => std::path::PathBuf::from(p),
        _ => std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/sdk-venv/bin/python"),
    };
    if path.exists() {
        return Some(path);
    }
    assert!(
        std::env::var("TOLLGATE_REQUIRE_SDKS").as_deref() != Ok("1"),
        "TOLLGATE_REQUIRE_SDKS=1 but {} is missing (run scripts/sdk-env)",
        path.display()
    );
    None
}

#[cfg(test)]
mod port_tests {
    #[test]
    fn picked_ports_are_distinct_and_below_the_ephemeral_range() {
        let ports: Vec<u16> = (0..200).map(|_| super::free_port()).collect();
        let distinct: std::collections::BTreeSet<u16> = ports.iter().copied().collect();
        assert_eq!(distinct.len(), ports.len());
        assert!(ports.iter().all(|p| super::PICKED_PORTS.contains(p)));
    }
}
