//! admin-api's HTTP surface. For now: health. Handlers extract and map; rules live in services.

use axum::Router;
use axum::routing::get;
use sea_orm::DatabaseConnection;
use tokio::net::TcpListener;
use tokio::sync::watch;

/// Shared state of the admin HTTP handlers.
#[derive(Clone)]
pub struct AppState {
    pub db: DatabaseConnection,
}

/// The admin-api router.
pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/healthz", get(health))
        .with_state(state)
}

/// `GET /healthz`: 200 when the database answers, 503 otherwise.
async fn health(
    axum::extract::State(state): axum::extract::State<AppState>,
) -> (axum::http::StatusCode, &'static str) {
    match state.db.ping().await {
        Ok(()) => (axum::http::StatusCode::OK, "ok"),
        Err(_) => (
            axum::http::StatusCode::SERVICE_UNAVAILABLE,
            "database unavailable",
        ),
    }
}

/// Serves `router(state)` on `listener` until `shutdown` turns true.
pub async fn serve(
    listener: TcpListener,
    state: AppState,
    mut shutdown: watch::Receiver<bool>,
) -> std::io::Result<()> {
    let stop = async move {
        let _ = shutdown.wait_for(|s| *s).await;
    };
    axum::serve(listener, router(state))
        .with_graceful_shutdown(stop)
        .await
}
