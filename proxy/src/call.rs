//! A generation call as inspection and routing leave it: what the client asked for, the model
//! route, the bodies for each format its accounts speak, and the bounds its charge keeps to.
//! Read by every later phase (rewrite, meter, settle), so it sits below them.

use crate::inspect::Work;
use crate::models::ModelRoute;
use crate::wire::cells::Bodies;
use std::sync::Arc;

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
        Call {
            images,
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
