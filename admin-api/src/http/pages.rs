//! The small HTML pages admin-api serves itself (invitation acceptance, hosted top-up).

use axum::response::Html;

/// `s` safe inside HTML text and attribute values.
pub(super) fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
        .replace('\'', "&#39;")
}

/// A page titled `title` around `body` (already HTML).
pub(super) fn page(title: &str, body: &str) -> Html<String> {
    Html(format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><meta name=\"viewport\" content=\"width=device-width\"><title>{t}</title>\
         <style>body{{font-family:system-ui,sans-serif;max-width:32rem;margin:3rem auto;padding:0 1rem}}input,button{{font-size:1rem;padding:.4rem}}</style>\
         </head><body><h1>{t}</h1>{body}</body></html>",
        t = escape(title)
    ))
}
