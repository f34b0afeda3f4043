#!/usr/bin/env python3
"""The official SDKs' embedding calls against the gateway, unmodified (issue 46).

Run by tests/tests/e2e/sdk.rs (`official_sdks_embed`), which starts the gateway and the mock
supplier and checks the vectors and what was charged:

    embeddings.py BASE_URL KEY OPENAI_SERVED_MODEL GEMINI_SERVED_MODEL

Each model is asked through both SDKs (so each SDK meets a supplier of its own format and one of
the other). Prints one JSON object per line: {id, vectors, prompt_tokens} for calls, {id, check:
"raised", class, status} for expected SDK errors, {id, error} for an unexpected exception.
"""

import sys
import traceback

import openai
from google import genai
from google.genai import types
from sdk_lines import emit, raised


def openai_call(id_, r):
    emit({"id": id_, "vectors": [list(d.embedding) for d in r.data], "prompt_tokens": r.usage.prompt_tokens})


def genai_call(id_, r):
    emit({"id": id_, "vectors": [list(e.values) for e in r.embeddings], "prompt_tokens": None})


def main():
    base, key, oa_model, ge_model = sys.argv[1:5]
    oa = openai.OpenAI(api_key=key, base_url=f"{base}/compat/v1", max_retries=0)
    ge = genai.Client(api_key=key, http_options=types.HttpOptions(base_url=base, api_version="v1beta"))
    steps = []
    for name, model in (("openai", oa_model), ("gemini", ge_model)):
        steps += [
            # The SDK's default: base64 on the wire, floats to the caller.
            (f"{name}-sdk-openai-default", lambda m=model, n=name: openai_call(
                f"{n}-sdk-openai-default", oa.embeddings.create(model=m, input=["alpha", "beta"]))),
            (f"{name}-sdk-openai-float", lambda m=model, n=name: openai_call(
                f"{n}-sdk-openai-float", oa.embeddings.create(
                    model=m, input="gamma", encoding_format="float", dimensions=4))),
            (f"{name}-sdk-genai", lambda m=model, n=name: genai_call(
                f"{n}-sdk-genai", ge.models.embed_content(
                    model=m, contents=["alpha", "beta"],
                    config=types.EmbedContentConfig(output_dimensionality=4)))),
        ]
    steps += [
        # What the other format cannot take: the SDKs' own 400 classes.
        ("genai-task-type-to-openai", lambda: raised("genai-task-type-to-openai", lambda: ge.models.embed_content(
            model=oa_model, contents="a", config=types.EmbedContentConfig(task_type="RETRIEVAL_QUERY")))),
        ("openai-tokens-to-gemini", lambda: raised("openai-tokens-to-gemini", lambda: oa.embeddings.create(
            model=ge_model, input=[[1, 2, 3]]))),
    ]
    for id_, step in steps:
        try:
            step()
        except Exception:  # noqa: BLE001 - reported to the Rust test
            emit({"id": id_, "error": traceback.format_exc()})


if __name__ == "__main__":
    main()
