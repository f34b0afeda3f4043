//! Shared support for the end-to-end scenarios in `tests/tests/`: fresh databases, the mock
//! supplier and gateways wired the way the binaries wire them.
//!
//! Databases: with `DATABASE_URL` set (CI), every call to [`fresh_database_url`] creates a new
//! PostgreSQL database on that server, so test binaries and tests never share state; without it, a
//! private in-memory SQLite database is used.

#![allow(
    clippy::panic,
    reason = "test support: a broken test environment must stop the test"
)]

/// A database URL no other test uses.
pub async fn fresh_database_url() -> String {
    match std::env::var("DATABASE_URL") {
        Ok(url) if url.starts_with("postgres") => {
            use sea_orm::ConnectionTrait;
            let name = format!("tollgate_e2e_{}", uuid::Uuid::new_v4().simple());
            let admin = sea_orm::Database::connect(url.as_str())
                .await
                .unwrap_or_else(|e| panic!("DATABASE_URL={url} is set but unusable: {e}"));
            admin
                .execute_unprepared(&format!("CREATE DATABASE {name}"))
                .await
                .unwrap_or_else(|e| panic!("cannot create database {name}: {e}"));
            let base = url.rsplit_once('/').map(|(b, _)| b).unwrap_or(url.as_str());
            format!("{base}/{name}")
        }
        _ => {
            assert!(
                std::env::var("TOLLGATE_REQUIRE_SERVICES").as_deref() != Ok("1"),
                "TOLLGATE_REQUIRE_SERVICES=1 but DATABASE_URL is not set"
            );
            "sqlite::memory:".to_string()
        }
    }
}
