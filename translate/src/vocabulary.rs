//! Each family's word for an HTTP status: the one table of the error vocabulary (issue 43). The
//! gateway's own errors (`proxy::errors`) and a supplier's errors written for a client of another
//! family (`response::error_body`) both take the type or status of their answer from here, unless
//! a row of SPEC names its own.

/// OpenAI's error `type` for `status`.
pub fn openai_type(status: u16) -> &'static str {
    match status {
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        429 => "rate_limit_error",
        400..=499 => "invalid_request_error",
        _ => "server_error",
    }
}

/// Anthropic's error `type` for `status` (its documented errors: 402 `billing_error`, 413
/// `request_too_large`, 529 `overloaded_error`).
pub fn anthropic_type(status: u16) -> &'static str {
    match status {
        401 => "authentication_error",
        402 => "billing_error",
        403 => "permission_error",
        404 => "not_found_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        503 | 529 => "overloaded_error",
        400..=499 => "invalid_request_error",
        _ => "api_error",
    }
}

/// The google.rpc `status` of `status`.
pub fn google_status(status: u16) -> &'static str {
    match status {
        401 => "UNAUTHENTICATED",
        402 => "FAILED_PRECONDITION",
        403 => "PERMISSION_DENIED",
        404 => "NOT_FOUND",
        408 | 504 => "DEADLINE_EXCEEDED",
        429 => "RESOURCE_EXHAUSTED",
        502 | 503 => "UNAVAILABLE",
        400..=499 => "INVALID_ARGUMENT",
        _ => "INTERNAL",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_family_names_the_statuses_the_gateway_answers() {
        for status in [
            400, 401, 402, 403, 404, 408, 409, 411, 413, 429, 500, 502, 503, 504, 529,
        ] {
            assert!(!openai_type(status).is_empty());
            let anthropic = anthropic_type(status);
            let google = google_status(status);
            if (400..500).contains(&status) {
                assert_ne!(anthropic, "api_error", "{status}");
                assert_ne!(google, "INTERNAL", "{status}");
            } else {
                assert!(!anthropic.ends_with("request_error"), "{status}");
            }
        }
        assert_eq!(anthropic_type(402), "billing_error");
        assert_eq!(google_status(402), "FAILED_PRECONDITION");
        assert_eq!(google_status(502), "UNAVAILABLE");
    }
}
