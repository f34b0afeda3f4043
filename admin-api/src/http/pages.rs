//! The small HTML pages admin-api serves itself (invitation acceptance, hosted top-up).

use axum::response::Html;

/// `s` safe inside HTML text and attribute values.
pub(crate) fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
        .replace('\'', "&#39;")
}

/// A page titled `title` around `body` (already HTML).
pub(crate) fn page(title: &str, body: &str) -> Html<String> {
    Html(format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><meta name=\"viewport\" content=\"width=device-width\"><title>{t}</title>\
         <link rel=\"icon\" href=\"/console/assets/favicon.svg\" type=\"image/svg+xml\"><link rel=\"stylesheet\" href=\"/console/assets/console.css\"></head><body><main id=\"main\"><section class=\"card narrow\"><h1>{t}</h1>{body}</section></main></body></html>",
        t = escape(title)
    ))
}
