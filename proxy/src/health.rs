//! Health for load balancers and orchestrators, on the metrics listener: `GET /healthz` (the
//! process answers) and `GET /readyz` (it can serve calls: the gateway's own listener answers, the
//! key directory is loaded, the operational store and the ledger database answer, the
//! configuration in use is valid).
//!
//! `/readyz` answers 200 when every check passes and 503 otherwise, with the same JSON body:
//! `{"status": "ready"|"not_ready", "checks": {name: state}}`. Each store check is bounded by
//! [`CHECK_TIMEOUT`], so a hung store makes the probe fail, not hang.

use crate::gateway::Gateway;
use serde_json::{Value, json};
use std::time::Duration;

/// Longest a readiness check waits for one store.
pub const CHECK_TIMEOUT: Duration = Duration::from_secs(2);

/// The outcome of the readiness checks.
#[derive(Debug, Clone, PartialEq)]
pub struct Readiness {
    /// Every check passed.
    pub ready: bool,
    /// The JSON body of `/readyz`.
    pub body: Value,
}

impl Gateway {
    /// Runs the readiness checks (see the module).
    pub async fn readiness(&self) -> Readiness {
        let s = &self.shared;
        let mut ready = true;
        let keys = tokio::time::timeout(CHECK_TIMEOUT, s.stores().keys.is_loaded()).await;
        let (store, directory) = match keys {
            Ok(Ok(true)) => ("reachable", "loaded"),
            Ok(Ok(false)) => ("reachable", "not_loaded"),
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "readiness: the operational store did not answer");
                ("unreachable", "unknown")
            }
            Err(_) => ("timeout", "unknown"),
        };
        ready &= store == "reachable" && directory == "loaded";
        let database = match s.tasks.get() {
            None => "not_configured",
            Some(book) => match tokio::time::timeout(CHECK_TIMEOUT, book.ping()).await {
                Ok(Ok(())) => "reachable",
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, "readiness: the ledger database did not answer");
                    "unreachable"
                }
                Err(_) => "timeout",
            },
        };
        ready &= matches!(database, "reachable" | "not_configured");
        let configuration = crate::control::configuration_state(s);
        ready &= configuration["state"] == "valid";
        // The gateway's own listener answers (the metrics listener may be up before it). A
        // deployment bound to port 0 (tests) was bound before it served: nothing to check.
        let listen = s.settings.server.listen;
        let gateway = if listen.port() == 0 {
            "listening"
        } else {
            let ip = if listen.ip().is_unspecified() {
                std::net::IpAddr::from([127, 0, 0, 1])
            } else {
                listen.ip()
            };
            let probe = tokio::net::TcpStream::connect((ip, listen.port()));
            match tokio::time::timeout(CHECK_TIMEOUT, probe).await {
                Ok(Ok(_)) => "listening",
                _ => "not_listening",
            }
        };
        ready &= gateway == "listening";
        Readiness {
            ready,
            body: json!({
                "status": if ready { "ready" } else { "not_ready" },
                "checks": {
                    "gateway": gateway,
                    "operational_store": store,
                    "key_directory": directory,
                    "database": database,
                    "configuration": configuration,
                },
            }),
        }
    }
}
