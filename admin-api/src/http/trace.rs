//! A span per admin-api request when `[telemetry]` is on (issue 33): `{METHOD} {route}`, the
//! route's template (never the path: an invitation's or a top-up's token is in it), its status,
//! and the client's `traceparent` continued. No header, query or body is recorded.

use crate::state::AppState;
use axum::extract::{MatchedPath, Request, State};
use axum::middleware::Next;
use axum::response::Response;
use opentelemetry::KeyValue;
use opentelemetry::propagation::{Extractor, TextMapPropagator};
use opentelemetry::trace::{Span, SpanKind, Status, Tracer};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use std::time::SystemTime;

/// A request's headers, read by the propagator.
struct Headers<'a>(&'a http::HeaderMap);

impl Extractor for Headers<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(|k| k.as_str()).collect()
    }
}

/// Runs the request inside a server span (when a tracer is set).
pub async fn span(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let Some(tracer) = state.tracer.clone() else {
        return next.run(request).await;
    };
    let parent = TraceContextPropagator::new().extract(&Headers(request.headers()));
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or("unmatched", |m| m.as_str())
        .to_string();
    let method = request.method().as_str().to_string();
    let started = SystemTime::now();
    let response = next.run(request).await;
    let status = response.status().as_u16();
    let mut span = tracer
        .span_builder(format!("{method} {route}"))
        .with_kind(SpanKind::Server)
        .with_start_time(started)
        .with_attributes([
            KeyValue::new("http.request.method", method),
            KeyValue::new("http.route", route),
            KeyValue::new("http.response.status_code", i64::from(status)),
        ])
        .start_with_context(&tracer, &parent);
    if status >= 500 {
        span.set_status(Status::error(format!("status {status}")));
    }
    span.end();
    response
}
