//! `[telemetry]`: a deployment's tracer provider — OTLP over HTTP (protobuf posted to
//! `{otlp_endpoint}/v1/traces` by a batch processor on its own thread, every 500 ms or 512
//! spans, 5 s per export), sampled parent-first then at `sample_ratio`, under `service_name`.
//! A collector that does not answer costs dropped spans (the queue holds 2048), never a call.

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{Protocol, SpanExporter, WithExportConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, Sampler, SdkTracer, SdkTracerProvider,
};
use std::time::Duration;

/// A running provider and its tracer.
pub struct Traces {
    provider: SdkTracerProvider,
    pub tracer: SdkTracer,
}

impl Traces {
    /// The provider `settings` ask for; `None` without an `otlp_endpoint`.
    pub fn start(settings: &settings::Telemetry) -> Result<Option<Traces>, String> {
        let Some(url) = settings.traces_url() else {
            return Ok(None);
        };
        let exporter = SpanExporter::builder()
            .with_http()
            .with_protocol(Protocol::HttpBinary)
            .with_endpoint(url)
            .with_timeout(Duration::from_secs(5))
            .build()
            .map_err(|e| format!("telemetry.otlp_endpoint: {e}"))?;
        let batches = BatchSpanProcessor::builder(exporter)
            .with_batch_config(
                BatchConfigBuilder::default()
                    .with_scheduled_delay(Duration::from_millis(500))
                    .build(),
            )
            .build();
        let provider = SdkTracerProvider::builder()
            .with_span_processor(batches)
            .with_sampler(Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(
                settings.sample_ratio,
            ))))
            .with_resource(
                Resource::builder()
                    .with_service_name(settings.service_name.clone())
                    .build(),
            )
            .build();
        let tracer = provider.tracer("tollgate");
        Ok(Some(Traces { provider, tracer }))
    }

    /// Exports what is queued and stops (blocking: run it off the async workers).
    pub fn shutdown(&self) {
        if let Err(e) = self.provider.shutdown() {
            tracing::warn!(error = %e, "traces not all exported at shutdown");
        }
    }
}
