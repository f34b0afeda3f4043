//! A line's result at a supplier's batch API (`super::supplier`), read from OpenAI's output and
//! error files or Anthropic's results, and the booking it makes at the gateway.

use serde_json::{Value, json};

/// One line's result at the supplier.
pub(super) enum Outcome {
    /// The supplier's answer: its status and body.
    Answered { status: u16, body: Value },
    /// No answer: why (`batch_expired`, `batch_cancelled`, …).
    Error { code: String, message: String },
}

impl Outcome {
    /// A result line of a supplier's output or error file.
    pub(super) fn of(row: &Value) -> Outcome {
        let response = &row["response"];
        match response["status_code"].as_u64() {
            Some(status) => Outcome::Answered {
                status: u16::try_from(status).unwrap_or(502),
                body: response["body"].clone(),
            },
            None => Outcome::Error {
                code: row["error"]["code"]
                    .as_str()
                    .unwrap_or("supplier_error")
                    .to_string(),
                message: row["error"]["message"]
                    .as_str()
                    .unwrap_or("The supplier gave no answer to this line.")
                    .to_string(),
            },
        }
    }

    /// A result line of an Anthropic message batch (`{custom_id, result: {type, message |
    /// error}}`).
    pub(super) fn of_message(row: &Value) -> Outcome {
        let result = &row["result"];
        let error = |code: &str| Outcome::Error {
            code: code.to_string(),
            message: format!("The supplier's message batch ended this request {code}."),
        };
        match result["type"].as_str().unwrap_or("") {
            "succeeded" => Outcome::Answered {
                status: 200,
                body: result["message"].clone(),
            },
            "errored" => Outcome::Answered {
                status: match result["error"]["error"]["type"].as_str().unwrap_or("") {
                    "invalid_request_error" => 400,
                    "authentication_error" => 401,
                    "permission_error" => 403,
                    "not_found_error" => 404,
                    "request_too_large" => 413,
                    "rate_limit_error" => 429,
                    "overloaded_error" => 529,
                    _ => 500,
                },
                body: result["error"].clone(),
            },
            "canceled" => error("batch_cancelled"),
            "expired" => error("batch_expired"),
            _ => error("supplier_error"),
        }
    }

    /// The booking sent to the gateway, and the status the line ends in when it is not an
    /// answer ("": as its answer says).
    pub(super) fn booking(self) -> (Value, &'static str) {
        match self {
            Outcome::Answered { status, body } => {
                (json!({"status_code": status, "body": body}), "")
            }
            Outcome::Error { code, message } => {
                let ends = match code.as_str() {
                    "batch_expired" => "expired",
                    "batch_cancelled" => "cancelled",
                    _ => "failed",
                };
                let body =
                    json!({"error": {"code": code, "message": message, "type": "batch_error"}});
                (json!({"status_code": 502, "body": body}), ends)
            }
        }
    }
}
