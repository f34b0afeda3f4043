//! Error bodies in the client's shape: a supplier's error answer (status ≥ 400), and the errors
//! this crate itself reports about a 2xx response (an invalid body, an error inside the body).
//!
//! The supplier's body is read in whichever shape it has (OpenAI `{error:{message,type,code,
//! param}}`, Anthropic `{type:"error",error:{type,message}}`, Gemini `{error:{code,message,status,
//! details}}`); its message always passes. Its type, code, param, status and details pass only to
//! a client of the same family (Chat ↔ Responses, or the same format); otherwise the client's own
//! vocabulary is derived from the HTTP status.

use serde_json::{Value, json};

use crate::Format;
use crate::vocabulary::{anthropic_type, google_status, openai_type};

/// A supplier's error body (status ≥ 400) in the client's error shape.
pub fn error_body(supplier: Format, client: Format, status: u16, body: &[u8]) -> Vec<u8> {
    let parsed = parse(body).unwrap_or_else(|| Parsed {
        message: format!("the supplier answered with status {status}"),
        ..Parsed::default()
    });
    write(
        client,
        status,
        &parsed,
        supplier.family() == client.family(),
    )
}

/// An error of this crate's own (`message`) in the client's error shape, as if with `status`.
pub(super) fn client_error(client: Format, status: u16, message: &str) -> Vec<u8> {
    let parsed = Parsed {
        message: message.to_string(),
        ..Parsed::default()
    };
    write(client, status, &parsed, false)
}

/// What a supplier's error body said.
#[derive(Debug, Default)]
struct Parsed {
    message: String,
    /// OpenAI's and Anthropic's `type`.
    kind: Option<String>,
    code: Option<Value>,
    param: Option<Value>,
    /// Gemini's `status`.
    status: Option<String>,
    details: Option<Value>,
}

fn parse(body: &[u8]) -> Option<Parsed> {
    let value: Value = serde_json::from_slice(body).ok()?;
    let value = match value {
        Value::Array(mut items) if !items.is_empty() => items.swap_remove(0),
        value => value,
    };
    let error = value.get("error")?;
    if let Some(message) = error.as_str() {
        return Some(Parsed {
            message: message.to_string(),
            ..Parsed::default()
        });
    }
    let text = |key: &str| error.get(key).and_then(Value::as_str).map(str::to_string);
    let present = |key: &str| error.get(key).filter(|value| !value.is_null()).cloned();
    Some(Parsed {
        message: text("message").filter(|message| !message.is_empty())?,
        kind: text("type"),
        code: present("code"),
        param: present("param"),
        status: text("status"),
        details: present("details"),
    })
}

fn write(client: Format, status: u16, parsed: &Parsed, same_family: bool) -> Vec<u8> {
    let keep = |field: &Option<Value>| {
        field
            .as_ref()
            .filter(|_| same_family)
            .cloned()
            .unwrap_or(Value::Null)
    };
    let body = match client {
        Format::Chat | Format::Responses => json!({"error": {
            "message": parsed.message,
            "type": parsed.kind.as_deref().filter(|_| same_family).unwrap_or(openai_type(status)),
            "param": keep(&parsed.param),
            "code": keep(&parsed.code),
        }}),
        Format::Messages => json!({"type": "error", "error": {
            "type": parsed.kind.as_deref().filter(|_| same_family).unwrap_or(anthropic_type(status)),
            "message": parsed.message,
        }}),
        Format::Gemini => {
            let mut error = json!({
                "code": status,
                "message": parsed.message,
                "status": parsed.status.as_deref().filter(|_| same_family).unwrap_or(google_status(status)),
            });
            if let (Some(details), Some(error)) = (
                parsed.details.as_ref().filter(|_| same_family),
                error.as_object_mut(),
            ) {
                error.insert("details".to_string(), details.clone());
            }
            json!({"error": error})
        }
    };
    body.to_string().into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    const OPENAI: &str = r#"{"error":{"message":"Rate limit reached for gpt-4o","type":"requests","param":null,"code":"rate_limit_exceeded"}}"#;
    const ANTHROPIC: &str = r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"},"request_id":"req_011"}"#;
    const GEMINI: &str = r#"{"error":{"code":429,"message":"Resource has been exhausted (e.g. check quota).","status":"RESOURCE_EXHAUSTED","details":[{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"36s"}]}}"#;

    fn translate(supplier: Format, client: Format, status: u16, body: &str) -> Value {
        let bytes = error_body(supplier, client, status, body.as_bytes());
        serde_json::from_slice(&bytes).expect("the error body is JSON")
    }

    #[test]
    fn every_supplier_shape_into_every_client_shape() {
        let suppliers = [
            (Format::Chat, 429, OPENAI, "Rate limit reached for gpt-4o"),
            (Format::Messages, 529, ANTHROPIC, "Overloaded"),
            (
                Format::Gemini,
                429,
                GEMINI,
                "Resource has been exhausted (e.g. check quota).",
            ),
        ];
        for (supplier, status, body, message) in suppliers {
            for client in [
                Format::Chat,
                Format::Responses,
                Format::Messages,
                Format::Gemini,
            ] {
                let value = translate(supplier, client, status, body);
                let error = &value["error"];
                assert_eq!(error["message"], message, "{supplier:?} → {client:?}");
                match client {
                    Format::Chat | Format::Responses => {
                        assert!(error["type"].is_string());
                        assert!(error.get("param").is_some() && error.get("code").is_some());
                    }
                    Format::Messages => {
                        assert_eq!(value["type"], "error");
                        assert!(error["type"].is_string());
                    }
                    Format::Gemini => {
                        assert_eq!(error["code"], status);
                        assert!(error["status"].is_string());
                    }
                }
            }
        }
    }

    #[test]
    fn the_vocabulary_follows_the_status_across_families() {
        let chat = translate(Format::Messages, Format::Chat, 529, ANTHROPIC);
        assert_eq!(chat["error"]["type"], "server_error");
        assert_eq!(chat["error"]["code"], Value::Null);
        let messages = translate(Format::Chat, Format::Messages, 429, OPENAI);
        assert_eq!(messages["error"]["type"], "rate_limit_error");
        let messages = translate(Format::Gemini, Format::Messages, 529, GEMINI);
        assert_eq!(messages["error"]["type"], "overloaded_error");
        let gemini = translate(Format::Chat, Format::Gemini, 401, OPENAI);
        assert_eq!(gemini["error"]["status"], "UNAUTHENTICATED");
        assert!(gemini["error"].get("details").is_none());
        let responses = translate(Format::Gemini, Format::Responses, 404, GEMINI);
        assert_eq!(responses["error"]["type"], "not_found_error");
        let messages = translate(Format::Chat, Format::Messages, 413, OPENAI);
        assert_eq!(messages["error"]["type"], "request_too_large");
    }

    #[test]
    fn the_same_family_keeps_the_suppliers_own_fields() {
        let responses = translate(Format::Chat, Format::Responses, 429, OPENAI);
        assert_eq!(responses["error"]["type"], "requests");
        assert_eq!(responses["error"]["code"], "rate_limit_exceeded");
        let gemini = translate(Format::Gemini, Format::Gemini, 429, GEMINI);
        assert_eq!(gemini["error"]["details"][0]["retryDelay"], "36s");
        let messages = translate(Format::Messages, Format::Messages, 529, ANTHROPIC);
        assert_eq!(messages["error"]["type"], "overloaded_error");
    }

    #[test]
    fn a_translated_error_speaks_the_gateways_vocabulary() {
        // The statuses where the two tables used to disagree (issue 43): one word each now.
        let billing = translate(Format::Chat, Format::Messages, 402, OPENAI);
        assert_eq!(billing["error"]["type"], "billing_error");
        let billing = translate(Format::Chat, Format::Gemini, 402, OPENAI);
        assert_eq!(billing["error"]["status"], "FAILED_PRECONDITION");
        let gateway = translate(Format::Messages, Format::Gemini, 502, ANTHROPIC);
        assert_eq!(gateway["error"]["status"], "UNAVAILABLE");
        let timeout = translate(Format::Chat, Format::Gemini, 408, OPENAI);
        assert_eq!(timeout["error"]["status"], "DEADLINE_EXCEEDED");
        let conflict = translate(Format::Chat, Format::Gemini, 409, OPENAI);
        assert_eq!(conflict["error"]["status"], "INVALID_ARGUMENT");
        for status in [402, 408, 409, 502] {
            let gemini = translate(Format::Chat, Format::Gemini, status, OPENAI);
            assert_eq!(
                gemini["error"]["status"],
                crate::vocabulary::google_status(status)
            );
            let messages = translate(Format::Gemini, Format::Messages, status, GEMINI);
            assert_eq!(
                messages["error"]["type"],
                crate::vocabulary::anthropic_type(status)
            );
        }
    }

    #[test]
    fn an_unknown_body_names_the_status() {
        for body in ["<html>Bad Gateway</html>", "", "{}", r#"{"error":{}}"#] {
            let value = translate(Format::Gemini, Format::Chat, 502, body);
            assert_eq!(
                value["error"]["message"],
                "the supplier answered with status 502"
            );
            assert_eq!(value["error"]["type"], "server_error");
        }
        let gemini = translate(Format::Messages, Format::Gemini, 503, "nope");
        assert_eq!(gemini["error"]["status"], "UNAVAILABLE");
        let bare = translate(
            Format::Chat,
            Format::Messages,
            400,
            r#"{"error":"bad model"}"#,
        );
        assert_eq!(bare["error"]["message"], "bad model");
        assert_eq!(bare["error"]["type"], "invalid_request_error");
    }
}
