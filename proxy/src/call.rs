//! A generation call as inspection and routing leave it: what the client asked for, the model
//! route, the bodies for each format its accounts speak, and the bounds its charge keeps to.
//! Read by every later phase (rewrite, meter, settle), so it sits below them.

use crate::classify::Route;
use crate::inspect::Work;
use crate::meter::Meter;
use crate::models::ModelRoute;
use crate::wire::cells::Bodies;
use opstate::KeyRecord;
use std::sync::Arc;
use std::time::Duration;

/// A generation call after inspection and routing.
pub(crate) struct Call {
    /// The model id as the client sent it.
    pub requested_model: String,
    pub model: Arc<ModelRoute>,
    pub stream: bool,
    /// The client's wire format (`None`: an audio form).
    pub client: Option<translate::Format>,
    /// The bodies forwarded upstream, one per format the call's accounts speak.
    pub bodies: Bodies,
    /// Size of the client's original body (feeds the usage estimate, and bounds its input).
    pub request_bytes: usize,
    /// The most output the call may produce: its output cap, else the configured default
    /// (bounds the usage estimate).
    pub output_bound: u64,
    /// Audio calls: the duration read from the file at admission, in seconds (the charge when the
    /// supplier reports none).
    pub audio_seconds: Option<u64>,
    /// Attribution headers (`x-tollgate-project`, `x-tollgate-workflow`).
    pub project: Option<String>,
    pub workflow: Option<String>,
    /// The request's `Host` header.
    pub host: Option<String>,
    /// Image calls (an image model served it): priced per image served.
    pub images: Option<ImageCharge>,
    /// Embedding calls: how the answer is read and shaped.
    pub embedding: Option<crate::wire::embedding_call::Answering>,
}

/// What an image call asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ImageCharge {
    /// Images asked for (what the hold covers).
    pub asked: u64,
    /// The client wants URLs (`response_format=url`).
    pub urls: bool,
}

impl Call {
    /// The call inspection and routing produced, forwarding `body` to accounts of `model`;
    /// `default_output` is the output bound of a call that sets no cap.
    pub(crate) fn new(
        work: Work<'_>,
        client: Option<translate::Format>,
        bodies: Bodies,
        model: Arc<ModelRoute>,
        default_output: u64,
    ) -> Call {
        let images = (model.model.kind == settings::ModelKind::Image).then(|| ImageCharge {
            asked: work.images_asked(),
            urls: work.wants_urls(),
        });
        let embedding = match &work.kind {
            crate::inspect::Kind::Embedding(call) => Some(call.answering()),
            _ => None,
        };
        Call {
            images,
            embedding,
            requested_model: work.model().to_string(),
            model,
            stream: work.stream(),
            client,
            bodies,
            request_bytes: work.body_bytes,
            output_bound: work.output_cap().unwrap_or(default_output),
            audio_seconds: work.audio_seconds(),
            host: work.host,
            project: work.project,
            workflow: work.workflow,
        }
    }
}

/// A finished request, as settlement and the metrics see it (`RequestCtx::finished`).
pub(crate) struct Finished<'a> {
    pub request_id: &'a str,
    pub route: Option<Route>,
    /// What the client received (0: nothing was sent).
    pub status: u16,
    pub caller: Option<&'a KeyRecord>,
    pub call: Option<&'a Call>,
    /// The account tried last (the one that answered, if any did).
    pub account: Option<&'a str>,
    /// That account's `supplier_price_multiplier`.
    pub supplier_rate: Option<money::RateMultiplier>,
    /// The attempts before it (a failover).
    pub earlier: &'a [opstate::EarlierAttempt],
    pub meter: Option<&'a Meter>,
    /// Image calls: the images of the whole answer (counted by the meter, or by the rewrite of a
    /// reshaped answer); `None` when it was not read whole.
    pub images: Option<u64>,
    pub started_at_ms: u64,
    pub latency: Duration,
    pub ttfb: Option<Duration>,
    /// The gateway's own time before the answer's header, and the supplier's (`Server-Timing`).
    pub gateway_time: Option<Duration>,
    pub upstream_wait: Option<Duration>,
    pub attempts: u32,
    /// The bounded label of the error the gateway answered with, if it answered itself.
    pub refusal: Option<&'static str>,
    /// The batch line the call ran (issue 46).
    pub batch: Option<&'a opstate::BatchRef>,
}

impl Finished<'_> {
    /// What the metrics record of it.
    pub(crate) fn outcome(&self) -> crate::metrics::Outcome<'_> {
        crate::metrics::Outcome {
            route: self.route.map(|r| r.label()),
            model: self.call.map_or("-", |c| c.model.model.id.as_str()),
            status: self.status,
            refusal: self.refusal,
            ttfb: self.ttfb,
            gateway_time: self.gateway_time,
        }
    }
}
