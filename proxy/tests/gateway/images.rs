//! Images: both SPEC profiles on the compat routes, image models on the native surface, per-image
//! money, capability pools, hosted URLs. Every refusal is checked to reach no supplier and cost
//! nothing; every success to send the supplier exactly what the profile says.

use super::*;
use base64::Engine as _;

/// 0.04 USD, 0.039 USD and 0.134 USD per image (the key's rate is 1).
const OPENAI_IMAGE: i64 = 40_000_000;
const FAST_IMAGE: i64 = 39_000_000;
const PRO_IMAGE: i64 = 134_000_000;

/// The harness configuration plus image models: `gpt-image-x` (OpenAI-style profile: `img-openai`
/// on mock A with the capability, `img-nocap` on mock B without it), `gemini-image-fast`
/// (native-style, `img-gem` on A), `gemini-image-pro` (native-style with 16:9 and 2K; `img-pro`
/// on A takes edits, `img-pro-gen` on B generates only), `lonely-image` (only `img-nocap`).
fn images(text: String) -> String {
    let a = super::surfaces::mock_root(&text, "id = \"mock\"");
    let b = super::surfaces::mock_root(&text, "id = \"mock-b\"");
    let account = |id: &str, provider: &str, url: &str, models: &str, caps: &str| {
        format!(
            "\n[[accounts]]\nid = \"{id}\"\nprovider = \"{provider}\"\nbase_url = \"{url}\"\napi_key = \"sk-mock-supplier\"\nmodels = [{models}]\ncapabilities = [{caps}]\nforward_headers = [\"x-mock-images\", \"x-mock-fault\"]\n"
        )
    };
    let text = text.replace(
        &format!("max_body_bytes = {MAX_BODY}"),
        &format!("max_body_bytes = {}", 32 * 1024 * 1024),
    );
    format!(
        r#"{text}
[[models]]
id = "gpt-image-x"
family = "gpt-image"
kind = "image"
author = "openai"
per_image = 0.04

[[models]]
id = "gemini-image-fast"
family = "gemini-image"
kind = "image"
per_image = 0.039

[[models]]
id = "gemini-image-pro"
family = "gemini-image"
kind = "image"
per_image = 0.134
image_aspect_ratios = ["1:1", "16:9"]
image_sizes = ["1K", "2K"]

[[models]]
id = "lonely-image"
family = "lonely"
kind = "image"
per_image = 0.01
{}{}{}{}{}
[[groups]]
id = 8
name = "Images"
product_code = "images"
models = ["gpt-image-x", "gemini-image-fast", "gemini-image-pro", "lonely-image", "gpt-4o-mini"]
wholesale_rate_multiplier = 1
"#,
        account(
            "img-openai",
            "openai",
            &format!("{a}/v1"),
            "\"gpt-image-x\"",
            "\"image_generation\""
        ),
        account(
            "img-nocap",
            "openai",
            &format!("{b}/v1"),
            "\"gpt-image-x\", \"lonely-image\"",
            ""
        ),
        account(
            "img-gem",
            "gemini",
            &a,
            "\"gemini-image-fast\"",
            "\"image_generation\""
        ),
        account(
            "img-pro",
            "gemini",
            &a,
            "\"gemini-image-pro\"",
            "\"image_generation\", \"image_edit\""
        ),
        account(
            "img-pro-gen",
            "gemini",
            &b,
            "\"gemini-image-pro\"",
            "\"image_generation\""
        ),
    )
}

async fn start() -> (Harness, String) {
    let h = Harness::start_with_config(images).await;
    let key = h.add_key(8, KeyPermissions::default()).await;
    (h, key)
}

impl Harness {
    fn image(&self, key: &str, path: &str, body: &Value) -> reqwest::RequestBuilder {
        self.http
            .post(self.url(path))
            .bearer_auth(key)
            .header("content-type", "application/json")
            .body(body.to_string())
    }

    /// `POST /compat/v1/images/generations` with `body`.
    async fn generate(&self, key: &str, body: &Value) -> reqwest::Response {
        self.image(key, "/compat/v1/images/generations", body)
            .send()
            .await
            .unwrap()
    }

    /// The JSON body of the last request a mock received.
    fn last_body(mock: &MockHandle) -> Value {
        let sent = mock.requests().pop().unwrap();
        serde_json::from_slice(&sent.body).unwrap()
    }
}

/// `base` with the fields of `extra` set.
fn with(mut base: Value, extra: &Value) -> Value {
    for (k, v) in extra.as_object().unwrap() {
        base[k] = v.clone();
    }
    base
}

fn png_b64() -> String {
    mock_supplier::images::png_b64()
}

/// A refusal: status, `param`, no supplier contacted, no usage, the wallet untouched.
async fn assert_refused(h: &Harness, resp: reqwest::Response, status: u16, param: &str) {
    let before = h.wallet().await;
    let (got, body) = json_of(resp).await;
    assert_eq!(got, status, "{body}");
    assert_eq!(body["error"]["type"], "invalid_request_error", "{body}");
    assert_eq!(body["error"]["param"], param, "{body}");
    assert_eq!(
        h.mock.request_count() + h.mock_b.request_count(),
        0,
        "{body}"
    );
    h.no_usage_event().await;
    assert_eq!(h.wallet().await, before);
}

/// OpenAI-style profile: the served id, `size=auto` → 1024x1024, `quality` → medium, forwarded
/// fields forwarded, `user` and `stream: false` not; charged per image returned; only the account
/// with `image_generation` is used.
#[tokio::test]
async fn openai_profile_rewrites_and_forwards_as_spec_says() {
    let (h, key) = start().await;
    let body = json!({"model": "openai/gpt-image-x", "prompt": "a red fox", "n": 2, "size": "auto",
        "background": "transparent", "output_format": "webp", "moderation": "low",
        "output_compression": 50, "style": "vivid", "user": "end-user-1", "stream": false});
    for i in 0..4 {
        let resp = h
            .image(&key, "/compat/v1/images/generations", &body)
            .header("x-session-id", format!("s{i}"))
            .send()
            .await
            .unwrap();
        let (status, reply) = json_of(resp).await;
        assert_eq!(status, 200, "{reply}");
        assert_eq!(reply["data"].as_array().unwrap().len(), 2);
        assert_eq!(reply["data"][0]["b64_json"], png_b64());
        let e = h.usage_event().await;
        assert_eq!((e.images, e.route.as_str()), (2, "image_generations"));
        assert_eq!(e.hold_nanos, nano(2 * OPENAI_IMAGE));
        assert_eq!(
            (e.cost_nanos, e.charged_nanos),
            (nano(2 * OPENAI_IMAGE), nano(2 * OPENAI_IMAGE))
        );
        assert_eq!(e.model_served, "gpt-image-x");
    }
    assert_eq!(
        h.mock_b.request_count(),
        0,
        "never the account without the capability"
    );
    let sent = h.mock.requests().pop().unwrap();
    assert_eq!(sent.path, "/v1/images/generations");
    let sent: Value = serde_json::from_slice(&sent.body).unwrap();
    assert_eq!(
        sent,
        json!({"model": "gpt-image-x", "prompt": "a red fox", "n": 2, "size": "1024x1024",
            "background": "transparent", "output_format": "webp", "moderation": "low",
            "output_compression": 50, "style": "vivid", "quality": "medium"})
    );
    assert_eq!(
        h.wallet().await.balance,
        nano(1_000 * NANOS - 8 * OPENAI_IMAGE)
    );
    // An explicit size and quality go as sent; no size at all is 1024x1024.
    for (body, size, quality) in [
        (
            json!({"model": "gpt-image-x", "prompt": "p", "size": "1536x1024", "quality": "high"}),
            "1536x1024",
            "high",
        ),
        (
            json!({"model": "gpt-image-x", "prompt": "p"}),
            "1024x1024",
            "medium",
        ),
    ] {
        let (status, _) = json_of(h.generate(&key, &body).await).await;
        assert_eq!(status, 200);
        let sent = Harness::last_body(&h.mock);
        assert_eq!(
            (sent["size"].as_str(), sent["quality"].as_str()),
            (Some(size), Some(quality))
        );
        h.usage_event().await;
    }
}

/// OpenAI-style sizes: multiples of 16, 1:3 to 3:1, at most 3840x2160, 655,360 to 8,294,400
/// pixels. Each bad size is a 400 naming `size` before any supplier is contacted.
#[tokio::test]
async fn openai_profile_size_rules() {
    let (h, key) = start().await;
    for size in [
        "1000x1000",
        "3072x1008",
        "3856x2160",
        "2176x2176",
        "800x800",
        "big",
    ] {
        let body = json!({"model": "gpt-image-x", "prompt": "p", "size": size});
        let resp = h.generate(&key, &body).await;
        assert_refused(&h, resp, 400, "size").await;
    }
    for size in ["3840x2160", "2160x3840", "816x816", "2880x960"] {
        let body = json!({"model": "gpt-image-x", "prompt": "p", "size": size});
        let (status, reply) = json_of(h.generate(&key, &body).await).await;
        assert_eq!(status, 200, "{size}: {reply}");
        assert_eq!(Harness::last_body(&h.mock)["size"], size);
        h.usage_event().await;
    }
}

/// Fields SPEC rejects, native-format fields, unknown fields and bad values: 400 naming the field,
/// no supplier, no charge — on both profiles.
#[tokio::test]
async fn refused_fields_reach_no_supplier_and_cost_nothing() {
    let (h, key) = start().await;
    for model in ["gpt-image-x", "gemini-image-fast"] {
        for (extra, param) in [
            (json!({"stream": true}), "stream"),
            (json!({"partial_images": 2}), "partial_images"),
            (json!({"async": true}), "async"),
            (json!({"aspect_ratio": "16:9"}), "aspect_ratio"),
            (
                json!({"image_config": {"aspectRatio": "1:1"}}),
                "image_config",
            ),
            (
                json!({"background": "transparent", "output_format": "jpeg"}),
                "background",
            ),
            (json!({"n": 11}), "n"),
            (json!({"response_format": "png"}), "response_format"),
            (json!({"mask": {"file_id": "file-1"}}), "mask"),
            (json!({"seed": 7}), "seed"),
            (json!({"prompt": ""}), "prompt"),
        ] {
            let body = with(json!({"model": model, "prompt": "p"}), &extra);
            let resp = h.generate(&key, &body).await;
            assert_refused(&h, resp, 400, param).await;
        }
    }
    // Image generation inside the responses route is unavailable.
    let body = json!({"model": "gpt-image-x", "input": "draw a fox"});
    let resp = h
        .image(&key, "/compat/v1/responses", &body)
        .send()
        .await
        .unwrap();
    assert_refused(&h, resp, 400, "model").await;
    // The connection stays usable after a refusal (keep-alive, no Connection: close needed).
    let body = json!({"model": "gpt-image-x", "prompt": "p"});
    let (status, _) = json_of(h.generate(&key, &body).await).await;
    assert_eq!(status, 200);
}

/// Native-style profile on the compat route: generateContent with IMAGE and the size's aspect
/// ratio; the answer in the OpenAI images shape; one image per call; other sizes refused.
#[tokio::test]
async fn native_profile_on_the_compat_route() {
    let (h, key) = start().await;
    for (size, ratio) in [
        (Some("1536x1024"), Some("3:2")),
        (Some("1024x1536"), Some("2:3")),
        (Some("1024x1024"), Some("1:1")),
        (Some("auto"), None),
        (None, None),
    ] {
        let mut body = json!({"model": "gemini-image-fast", "prompt": "a fox", "quality": "high", "user": "u"});
        if let Some(size) = size {
            body["size"] = json!(size);
        }
        let (status, reply) = json_of(h.generate(&key, &body).await).await;
        assert_eq!(status, 200, "{reply}");
        assert_eq!(reply["data"], json!([{"b64_json": png_b64()}]));
        assert!(reply["created"].as_u64().unwrap() > 1_700_000_000);
        let sent = h.mock.requests().pop().unwrap();
        assert_eq!(
            sent.path,
            "/v1beta/models/gemini-image-fast:generateContent"
        );
        assert_eq!(sent.header("content-type"), Some("application/json"));
        let sent: Value = serde_json::from_slice(&sent.body).unwrap();
        let mut config = json!({"responseModalities": ["IMAGE"]});
        if let Some(ratio) = ratio {
            config["imageConfig"] = json!({"aspectRatio": ratio});
        }
        assert_eq!(
            sent,
            json!({"contents": [{"role": "user", "parts": [{"text": "a fox"}]}], "generationConfig": config})
        );
        let e = h.usage_event().await;
        assert_eq!(
            (e.images, e.cost_nanos, e.hold_nanos),
            (1, nano(FAST_IMAGE), nano(FAST_IMAGE))
        );
    }
    for (extra, param) in [
        (json!({"size": "1792x1024"}), "size"),
        (json!({"n": 2}), "n"),
        (json!({"background": "transparent"}), "background"),
        (json!({"output_format": "jpeg"}), "output_format"),
    ] {
        h.mock.clear_requests();
        let body = with(json!({"model": "gemini-image-fast", "prompt": "p"}), &extra);
        let resp = h.generate(&key, &body).await;
        assert_refused(&h, resp, 400, param).await;
    }
}

/// `response_format=url`: the supplier's own URL when it returns one; otherwise a gateway URL,
/// signed and fetchable without a key for its lifetime; a tampered URL is 404.
#[tokio::test]
async fn url_answers_are_fetchable_without_a_key() {
    let (h, key) = start().await;
    let body = json!({"model": "gpt-image-x", "prompt": "p", "response_format": "url"});
    let (status, reply) = json_of(h.generate(&key, &body).await).await;
    assert_eq!(status, 200, "{reply}");
    let supplier_url = reply["data"][0]["url"].as_str().unwrap();
    assert!(
        supplier_url.contains(&h.mock.addr().to_string()),
        "{supplier_url}"
    );
    assert_eq!(Harness::last_body(&h.mock)["response_format"], "url");
    h.usage_event().await;

    let body = json!({"model": "gemini-image-fast", "prompt": "p", "response_format": "url"});
    let (status, reply) = json_of(h.generate(&key, &body).await).await;
    assert_eq!(status, 200, "{reply}");
    let url = reply["data"][0]["url"].as_str().unwrap().to_string();
    assert!(reply["data"][0].get("b64_json").is_none());
    assert_eq!(h.usage_event().await.images, 1);
    let path = url
        .split_once("/media/")
        .map(|(_, p)| format!("/media/{p}"))
        .unwrap();
    let got = reqwest::get(h.url(&path)).await.unwrap();
    assert_eq!(got.status(), 200);
    assert_eq!(got.headers()["content-type"], "image/png");
    assert_eq!(
        got.bytes().await.unwrap().as_ref(),
        mock_supplier::images::PNG
    );
    let tampered = path.replace("signature=", "signature=00");
    let (status, body) = json_of(reqwest::get(h.url(&tampered)).await.unwrap()).await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (404, Some("media_not_found"))
    );
    let expired = path.replace("expires=", "expires=1");
    let (status, _) = json_of(reqwest::get(h.url(&expired)).await.unwrap()).await;
    assert_eq!(status, 404);
}

fn png_of(len: usize, seed: u8) -> Vec<u8> {
    let mut v = b"\x89PNG\r\n\x1a\n".to_vec();
    v.extend((0..len - 8).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)));
    v
}

/// A multipart edit body with `images` as `image[]` parts.
fn edit_form(model: &str, images: &[Vec<u8>], extra: &[(&str, &str)]) -> Vec<u8> {
    let mut b = Vec::new();
    let mut text = |name: &str, value: &str| {
        b.extend_from_slice(
            format!("--edit-boundary\r\nContent-Disposition: form-data; name=\"{name}\"\r\n\r\n{value}\r\n").as_bytes(),
        );
    };
    text("model", model);
    text("prompt", "make it blue");
    for (k, v) in extra {
        text(k, v);
    }
    for (i, image) in images.iter().enumerate() {
        b.extend_from_slice(
            format!("--edit-boundary\r\nContent-Disposition: form-data; name=\"image[]\"; filename=\"{i}.png\"\r\nContent-Type: image/png\r\n\r\n").as_bytes(),
        );
        b.extend_from_slice(image);
        b.extend_from_slice(b"\r\n");
    }
    b.extend_from_slice(b"--edit-boundary--\r\n");
    b
}

/// Edits: 1 to 14 references, multipart or JSON data URLs, translated to generateContent with
/// `inlineData`; only accounts with `image_edit` receive them; 10 × 1 MiB goes through; the
/// OpenAI-style profile and a model without edit accounts refuse edits; masks and file ids are
/// refused.
#[tokio::test]
async fn edits_go_only_to_edit_accounts_with_their_references() {
    let (h, key) = start().await;
    let big: Vec<Vec<u8>> = (0..10).map(|i| png_of(1024 * 1024, i)).collect();
    let form = |model: &str, images: &[Vec<u8>], extra: &[(&str, &str)]| {
        h.http
            .post(h.url("/compat/v1/images/edits"))
            .bearer_auth(&key)
            .header(
                "content-type",
                "multipart/form-data; boundary=edit-boundary",
            )
            .body(edit_form(model, images, extra))
    };
    for i in 0..3 {
        let resp = form("gemini-image-pro", &big, &[])
            .header("x-session-id", format!("e{i}"))
            .send()
            .await
            .unwrap();
        let (status, reply) = json_of(resp).await;
        assert_eq!(status, 200, "{reply}");
        assert_eq!(reply["data"], json!([{"b64_json": png_b64()}]));
        let e = h.usage_event().await;
        assert_eq!(
            (e.images, e.cost_nanos, e.route.as_str()),
            (1, nano(PRO_IMAGE), "image_edits")
        );
    }
    assert_eq!(
        h.mock_b.request_count(),
        0,
        "the account without image_edit never edits"
    );
    let sent = h.mock.requests().pop().unwrap();
    assert_eq!(sent.path, "/v1beta/models/gemini-image-pro:generateContent");
    let sent: Value = serde_json::from_slice(&sent.body).unwrap();
    let parts = sent["contents"][0]["parts"].as_array().unwrap();
    assert_eq!(parts.len(), 11);
    assert_eq!(parts[0], json!({"text": "make it blue"}));
    let b64 = base64::engine::general_purpose::STANDARD;
    for (part, image) in parts[1..].iter().zip(&big) {
        assert_eq!(part["inlineData"]["mimeType"], "image/png");
        assert_eq!(
            b64.decode(part["inlineData"]["data"].as_str().unwrap())
                .unwrap(),
            *image
        );
    }
    // JSON edits with data URLs.
    let url = format!("data:image/png;base64,{}", b64.encode(png_of(64, 1)));
    let body = json!({"model": "gemini-image-pro", "prompt": "p", "images": [{"image_url": url}, {"image_url": url}]});
    let (status, reply) = json_of(
        h.image(&key, "/compat/v1/images/edits", &body)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{reply}");
    assert_eq!(
        Harness::last_body(&h.mock)["contents"][0]["parts"]
            .as_array()
            .unwrap()
            .len(),
        3
    );
    h.usage_event().await;
    h.mock.clear_requests();
    // Refusals.
    let one = vec![png_of(64, 2)];
    let fifteen: Vec<Vec<u8>> = (0..15).map(|i| png_of(64, i)).collect();
    for (resp, param) in [
        (form("gemini-image-pro", &[], &[]).send().await.unwrap(), "image"),
        (form("gemini-image-pro", &fifteen, &[]).send().await.unwrap(), "image"),
        (form("gemini-image-pro", &one, &[("mask", "x")]).send().await.unwrap(), "mask"),
        (form("gpt-image-x", &one, &[]).send().await.unwrap(), "model"),
        (form("gemini-image-fast", &one, &[]).send().await.unwrap(), "model"),
        (
            h.image(&key, "/compat/v1/images/edits", &json!({"model": "gemini-image-pro", "prompt": "p", "images": [{"file_id": "file-1"}]})).send().await.unwrap(),
            "images[0].file_id",
        ),
        (
            h.image(&key, "/compat/v1/images/edits", &json!({"model": "gemini-image-pro", "prompt": "p", "images": [{"image_url": "https://example.com/a.png"}]})).send().await.unwrap(),
            "images[0].image_url",
        ),
    ] {
        assert_refused(&h, resp, 400, param).await;
    }
}

/// Image models on the native surface: one user turn, IMAGE among the modalities, candidateCount
/// 1, the model's aspect ratios and sizes; anything else 400 INVALID_ARGUMENT naming the field;
/// streaming and token counting unavailable. The image in candidates[0].content.parts[0].
#[tokio::test]
async fn native_surface_image_rules() {
    let (h, key) = start().await;
    let native = |model: &str, action: &str, body: &Value| {
        h.http
            .post(h.url(&format!("/v1beta/models/{model}:{action}")))
            .header("x-goog-api-key", &key)
            .header("content-type", "application/json")
            .body(body.to_string())
    };
    let turn = json!([{"role": "user", "parts": [{"text": "a fox"}]}]);
    let ok = json!({"contents": turn, "generationConfig": {"responseModalities": ["TEXT", "IMAGE"],
        "candidateCount": 1, "imageConfig": {"aspectRatio": "16:9", "imageSize": "2K"}}});
    let (status, reply) = json_of(
        native("gemini-image-pro", "generateContent", &ok)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{reply}");
    assert_eq!(
        reply["candidates"][0]["content"]["parts"][0]["inlineData"]["data"],
        png_b64()
    );
    // Either generating account of the model may have served it.
    let sent = h
        .mock
        .requests()
        .pop()
        .or_else(|| h.mock_b.requests().pop());
    assert_eq!(
        serde_json::from_slice::<Value>(&sent.unwrap().body).unwrap(),
        ok,
        "forwarded as sent"
    );
    let e = h.usage_event().await;
    assert_eq!(
        (e.images, e.cost_nanos, e.route.as_str()),
        (1, nano(PRO_IMAGE), "native_generate")
    );
    // The default profile: 1:1 at 1K only.
    let fast = json!({"contents": turn, "generationConfig": {"responseModalities": ["IMAGE"], "imageConfig": {"aspectRatio": "1:1", "imageSize": "1K"}}});
    let (status, _) = json_of(
        native("gemini-image-fast", "generateContent", &fast)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(h.usage_event().await.cost_nanos, nano(FAST_IMAGE));
    h.mock.clear_requests();
    h.mock_b.clear_requests();
    let config = |c: Value| json!({"contents": turn, "generationConfig": c});
    let image = json!(["IMAGE"]);
    for (model, action, body, field) in [
        (
            "gemini-image-pro",
            "generateContent",
            json!({"contents": turn}),
            "responseModalities",
        ),
        (
            "gemini-image-pro",
            "generateContent",
            config(json!({"responseModalities": ["TEXT"]})),
            "responseModalities",
        ),
        (
            "gemini-image-pro",
            "generateContent",
            config(json!({"responseModalities": image, "candidateCount": 2})),
            "candidateCount",
        ),
        (
            "gemini-image-pro",
            "generateContent",
            config(json!({"responseModalities": image, "imageConfig": {"aspectRatio": "4:3"}})),
            "aspectRatio",
        ),
        (
            "gemini-image-pro",
            "generateContent",
            config(json!({"responseModalities": image, "imageConfig": {"imageSize": "4K"}})),
            "imageSize",
        ),
        (
            "gemini-image-fast",
            "generateContent",
            config(json!({"responseModalities": image, "imageConfig": {"aspectRatio": "16:9"}})),
            "aspectRatio",
        ),
        (
            "gemini-image-pro",
            "generateContent",
            config(json!({"responseModalities": image, "temperature": 0.5})),
            "temperature",
        ),
        (
            "gemini-image-pro",
            "generateContent",
            json!({"contents": [{"role": "user", "parts": [{"text": "a"}]}, {"role": "model", "parts": [{"text": "b"}]}], "generationConfig": {"responseModalities": image}}),
            "contents",
        ),
        (
            "gemini-image-pro",
            "generateContent",
            json!({"contents": turn, "generationConfig": {"responseModalities": image}, "tools": []}),
            "tools",
        ),
        (
            "gemini-image-fast",
            "generateContent",
            json!({"contents": [{"role": "user", "parts": [{"text": "a"}, {"inlineData": {"mimeType": "image/png", "data": png_b64()}}]}], "generationConfig": {"responseModalities": image}}),
            "parts",
        ),
        (
            "gemini-image-pro",
            "streamGenerateContent",
            config(json!({"responseModalities": image})),
            "streamGenerateContent",
        ),
        (
            "gemini-image-pro",
            "countTokens",
            json!({"contents": turn}),
            "countTokens",
        ),
    ] {
        let before = h.wallet().await;
        let (status, reply) = json_of(native(model, action, &body).send().await.unwrap()).await;
        assert_eq!(status, 400, "{model} {action} {body}: {reply}");
        assert_eq!(reply["error"]["status"], "INVALID_ARGUMENT", "{reply}");
        let message = reply["error"]["message"].as_str().unwrap();
        assert!(message.contains(field), "{field} not in {message}");
        assert_eq!(
            h.mock.request_count() + h.mock_b.request_count(),
            0,
            "{reply}"
        );
        h.no_usage_event().await;
        assert_eq!(h.wallet().await, before);
    }
    // A reference image natively is an edit: only the edit account serves it.
    let edit = json!({"contents": [{"role": "user", "parts": [{"text": "bluer"}, {"inlineData": {"mimeType": "image/png", "data": png_b64()}}]}],
        "generationConfig": {"responseModalities": image}});
    for i in 0..3 {
        let resp = native("gemini-image-pro", "generateContent", &edit)
            .header("x-session-id", format!("n{i}"))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
        h.usage_event().await;
    }
    assert_eq!((h.mock.request_count(), h.mock_b.request_count()), (3, 0));
}

/// Charged images are the images returned: none when the supplier failed or returned none; a model
/// whose accounts lack `image_generation` is a 503, never another kind of account.
#[tokio::test]
async fn charges_follow_the_images_returned() {
    let (h, key) = start().await;
    let body = json!({"model": "gemini-image-fast", "prompt": "p"});
    let (status, reply) = json_of(
        h.image(&key, "/compat/v1/images/generations", &body)
            .header("x-mock-images", "0")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!((status, &reply["data"]), (200, &json!([])), "{reply}");
    let e = h.usage_event().await;
    assert_eq!(
        (e.images, e.cost_nanos, e.hold_nanos),
        (0, nano(0), nano(FAST_IMAGE))
    );
    // The supplier returns fewer images than asked: charged for those.
    let body = json!({"model": "gpt-image-x", "prompt": "p", "n": 3});
    let (status, reply) = json_of(
        h.image(&key, "/compat/v1/images/generations", &body)
            .header("x-mock-images", "1")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{reply}");
    let e = h.usage_event().await;
    assert_eq!(
        (e.images, e.cost_nanos, e.hold_nanos),
        (1, nano(OPENAI_IMAGE), nano(3 * OPENAI_IMAGE))
    );
    // A supplier failure: nothing charged (the error reaches the client in its route's shape).
    for model in ["gpt-image-x", "gemini-image-fast"] {
        let body = json!({"model": model, "prompt": "p"});
        let resp = h
            .image(&key, "/compat/v1/images/generations", &body)
            .header("x-mock-fault", "status=400")
            .send()
            .await
            .unwrap();
        let (status, reply) = json_of(resp).await;
        assert_eq!(status, 400, "{reply}");
        assert!(reply["error"]["message"].is_string(), "{reply}");
        let e = h.usage_event().await;
        assert_eq!((e.images, e.cost_nanos), (0, nano(0)));
    }
    assert_eq!(h.wallet().await.reserved, nano(0));
    let body = json!({"model": "lonely-image", "prompt": "p"});
    let (status, reply) = json_of(h.generate(&key, &body).await).await;
    assert_eq!(
        (status, reply["error"]["code"].as_str()),
        (503, Some("no_account_available")),
        "{reply}"
    );
    h.no_usage_event().await;
}

/// Every image refusal (inspection, routing, the native rules, a bad media URL) answers on a
/// connection the client may keep using: one pooled connection carries them all, then a good
/// call, and only that call reaches a supplier.
#[tokio::test]
async fn refusals_leave_the_pooled_connection_usable() {
    use super::errors::{exchange, raw_post};
    let (h, key) = start().await;
    let addr = h.base.trim_start_matches("http://").to_string();
    let mut sock = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let generation = "/compat/v1/images/generations";
    let native = "/v1beta/models/gemini-image-pro:generateContent";
    let media = "GET /media/0123456789abcdef0123456789abcdef?expires=1&signature=00 HTTP/1.1\r\nhost: gateway\r\n\r\n";
    let requests: Vec<(Vec<u8>, u16)> = vec![
        (
            raw_post(
                generation,
                Some(&key),
                r#"{"model":"gpt-image-x","prompt":"p","stream":true}"#,
            ),
            400,
        ),
        (
            raw_post(
                generation,
                Some(&key),
                r#"{"model":"gpt-image-x","prompt":"p","size":"17x17"}"#,
            ),
            400,
        ),
        (
            raw_post(
                "/compat/v1/images/edits",
                Some(&key),
                r#"{"model":"gpt-image-x","prompt":"p","images":[{"image_url":"data:image/png;base64,AA=="}]}"#,
            ),
            400,
        ),
        (
            raw_post(
                native,
                Some(&key),
                r#"{"contents":[{"parts":[{"text":"p"}]}]}"#,
            ),
            400,
        ),
        (media.as_bytes().to_vec(), 404),
        (
            raw_post(
                generation,
                Some(&key),
                r#"{"model":"gpt-image-x","prompt":"p"}"#,
            ),
            200,
        ),
    ];
    for (i, (request, expected)) in requests.iter().enumerate() {
        let (status, headers, body) = exchange(&mut sock, request)
            .await
            .unwrap_or_else(|| panic!("request {i}: the connection was closed"));
        assert_eq!(
            status,
            *expected,
            "request {i}: {}",
            String::from_utf8_lossy(&body)
        );
        assert!(
            !headers
                .iter()
                .any(|(k, v)| k == "connection" && v.eq_ignore_ascii_case("close")),
            "request {i} closed the connection"
        );
    }
    assert_eq!(h.mock.request_count() + h.mock_b.request_count(), 1);
    assert_eq!(h.usage_event().await.images, 1);
}
