//! A stand-in for Stripe's hosted Checkout, as much as a browser following "Add funds" and
//! "Save a card" needs (issue 42): the two API calls the console makes (a customer, a Checkout
//! Session in `payment` or `setup` mode, answered with a hosted URL on this server) and the
//! hosted page itself, which names the session. admin-api's own suite (`tests/api/payments.rs`)
//! tests the money side against a fuller stand-in.

use axum::extract::{Path, State};
use axum::response::Html;
use axum::routing::{get, post};
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};

/// The stand-in's secret key (what `[payments] stripe_secret_key` must say).
pub const SECRET_KEY: &str = "sk_test_browser";

#[derive(Default)]
struct Sessions {
    base: String,
    made: Vec<Value>,
}

type Shared = Arc<Mutex<Sessions>>;

async fn customer() -> axum::Json<Value> {
    axum::Json(json!({"id": "cus_browser", "object": "customer"}))
}

async fn session(State(s): State<Shared>, body: String) -> axum::Json<Value> {
    let mut st = s.lock().unwrap();
    let id = format!("cs_browser_{}", st.made.len() + 1);
    let mode = if body.contains("mode=setup") {
        "setup"
    } else {
        "payment"
    };
    let made = json!({
        "id": id, "object": "checkout.session", "mode": mode,
        "url": format!("{}/pay/{id}", st.base),
        "status": "open",
        "payment_status": if mode == "setup" { "no_payment_required" } else { "unpaid" },
        "setup_intent": if mode == "setup" { json!("seti_browser") } else { Value::Null },
    });
    st.made.push(made.clone());
    axum::Json(made)
}

async fn read(State(s): State<Shared>, Path(id): Path<String>) -> axum::Json<Value> {
    let st = s.lock().unwrap();
    axum::Json(
        st.made
            .iter()
            .find(|m| m["id"] == id.as_str())
            .cloned()
            .unwrap_or(Value::Null),
    )
}

async fn hosted(Path(id): Path<String>) -> Html<String> {
    Html(format!(
        "<!doctype html><html lang=\"en\"><head><title>Checkout stand-in</title></head><body><main><h1>Checkout stand-in</h1><p id=\"session\">{id}</p></main></body></html>"
    ))
}

/// The running stand-in.
pub struct Checkout {
    pub base: String,
    _tasks: tokio::task::JoinSet<()>,
}

impl Checkout {
    pub async fn start() -> Checkout {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let state: Shared = Arc::default();
        state.lock().unwrap().base = base.clone();
        let app = axum::Router::new()
            .route("/v1/customers", post(customer))
            .route("/v1/checkout/sessions", post(session))
            .route("/v1/checkout/sessions/{id}", get(read))
            .route("/pay/{id}", get(hosted))
            // The browser asks for a favicon; a 404 would be an error in its log.
            .route(
                "/favicon.ico",
                get(|| async { axum::http::StatusCode::NO_CONTENT }),
            )
            .with_state(state);
        let mut tasks = tokio::task::JoinSet::new();
        tasks.spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        Checkout {
            base,
            _tasks: tasks,
        }
    }
}
