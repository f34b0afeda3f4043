#!/usr/bin/env python3
"""The official SDKs' image calls against the gateway, unmodified (issue 13).

Run by tests/tests/e2e/sdk.rs (`official_sdks_generate_and_edit_images`), which starts the gateway
and the mock supplier and checks what reached the supplier and what was charged:

    images.py BASE_URL KEY OPENAI_MODEL FAST_MODEL PRO_MODEL PNG_BASE64

Prints one JSON object per line: {id, count, b64 (first image, base64), url} for calls, {id,
check: "raised", class, status} for expected SDK errors, {id, error} for an unexpected exception.
"""

import base64
import sys
import traceback
import urllib.request

import openai
from google import genai
from google.genai import types
from sdk_lines import emit, raised


def images(id_, r):
    first = r.data[0] if r.data else None
    emit(
        {
            "id": id_,
            "count": len(r.data),
            "b64": first.b64_json if first else None,
            "url": first.url if first else None,
        }
    )


def main():
    base, key, openai_model, fast, pro, png_b64 = sys.argv[1:7]
    png = base64.b64decode(png_b64)
    oa = openai.OpenAI(api_key=key, base_url=f"{base}/compat/v1", max_retries=0)
    ge = genai.Client(api_key=key, http_options=types.HttpOptions(base_url=base, api_version="v1beta"))
    steps = [
        ("openai-generate", lambda: images("openai-generate", oa.images.generate(
            model=f"openai/{openai_model}", prompt="a red fox", n=2, size="1536x1024", quality="high", user="u-1"))),
        ("openai-generate-url", lambda: images("openai-generate-url", oa.images.generate(
            model=openai_model, prompt="a red fox", response_format="url"))),
        ("fast-generate", lambda: images("fast-generate", oa.images.generate(
            model=fast, prompt="a red fox", size="1024x1536"))),
        ("fast-generate-url", lambda: fetched("fast-generate-url", oa.images.generate(
            model=fast, prompt="a red fox", response_format="url"))),
        ("pro-edit-two", lambda: images("pro-edit-two", oa.images.edit(
            model=pro, prompt="make it blue",
            image=[("a.png", png, "image/png"), ("b.png", png, "image/png")]))),
        ("pro-edit-one", lambda: images("pro-edit-one", oa.images.edit(
            model=pro, prompt="make it blue", image=("a.png", png, "image/png")))),
        ("native-pro", lambda: native("native-pro", ge.models.generate_content(
            model=pro, contents="a red fox",
            config=types.GenerateContentConfig(
                response_modalities=["IMAGE"], image_config=types.ImageConfig(aspect_ratio="16:9"))))),
    ]
    for id_, step in steps:
        try:
            step()
        except Exception:  # noqa: BLE001 - reported, and the Rust side fails on it
            emit({"id": id_, "error": traceback.format_exc()})
    raised("openai-edit-refused", lambda: oa.images.edit(
        model=openai_model, prompt="x", image=("a.png", png, "image/png")))
    raised("openai-bad-size", lambda: oa.images.generate(model=openai_model, prompt="x", size="1000x1000"))
    raised("native-bad-ratio", lambda: ge.models.generate_content(
        model=fast, contents="x",
        config=types.GenerateContentConfig(
            response_modalities=["IMAGE"], image_config=types.ImageConfig(aspect_ratio="16:9"))))


def fetched(id_, r):
    """A URL answer: fetched without any credential, its bytes reported as base64."""
    url = r.data[0].url
    with urllib.request.urlopen(url, timeout=10) as resp:  # noqa: S310 - the test's own gateway
        body = resp.read()
    emit({"id": id_, "count": len(r.data), "b64": base64.b64encode(body).decode(), "url": url})


def native(id_, r):
    part = r.candidates[0].content.parts[0]
    emit({"id": id_, "count": 1, "b64": base64.b64encode(part.inline_data.data).decode(), "url": None})


if __name__ == "__main__":
    main()
