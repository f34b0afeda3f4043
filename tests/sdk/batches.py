#!/usr/bin/env python3
"""The official openai SDK's batch calls against the gateway, unmodified (issue 46).

Run by tests/tests/e2e/sdk.rs (`official_sdks_batch`), which starts the gateway and the mock
supplier and checks what was charged:

    batches.py BASE_URL KEY ENDPOINT:MODEL [ENDPOINT:MODEL ...]

For each ENDPOINT:MODEL (`/v1/chat/completions:gpt-x`, `/v1/embeddings:emb-x`): uploads three
lines with `files.create(purpose="batch")`, starts them with `batches.create`, polls
`batches.retrieve` until the batch ends and reads `files.content` of its output file. For
`anthropic:MODEL`, the anthropic SDK's `messages.batches.create`, `retrieve` and `results`. Each
batch is then looked for in the SDK's paged list (`batches.list`, `messages.batches.list`). Prints one
JSON object per line: {id, status, counts, custom_ids, objects, request_ids} for a batch, {id,
check: "raised", class, status} for expected SDK errors, {id, error} for an unexpected exception.
"""

import io
import json
import sys
import time
import traceback

import anthropic
import openai
from sdk_lines import emit, raised


def body(endpoint, model, i):
    if endpoint == "/v1/embeddings":
        return {"model": model, "input": [f"line {i}", "batch"]}
    return {"model": model, "max_tokens": 16, "messages": [{"role": "user", "content": f"line {i}"}]}


def run(client, endpoint, model):
    lines = [
        json.dumps({"custom_id": f"{model}-{i}", "method": "POST", "url": endpoint, "body": body(endpoint, model, i)})
        for i in range(3)
    ]
    f = client.files.create(file=("in.jsonl", io.BytesIO(("\n".join(lines) + "\n").encode())), purpose="batch")
    b = client.batches.create(input_file_id=f.id, endpoint=endpoint, completion_window="24h",
                              metadata={"job": "nightly"})
    deadline = time.time() + 60
    while b.status not in ("completed", "failed", "expired", "cancelled"):
        if time.time() > deadline:
            raise RuntimeError(f"batch {b.id} still {b.status}")
        time.sleep(0.2)
        b = client.batches.retrieve(b.id)
    out = client.files.content(b.output_file_id).text if b.output_file_id else ""
    rows = [json.loads(l) for l in out.splitlines() if l.strip()]
    emit({
        "id": f"{endpoint}:{model}",
        "batch": b.id,
        "status": b.status,
        "counts": {"total": b.request_counts.total, "completed": b.request_counts.completed,
                   "failed": b.request_counts.failed},
        "metadata": b.metadata,
        "custom_ids": [r["custom_id"] for r in rows],
        "objects": [r["response"]["body"].get("object") for r in rows],
        "request_ids": [r["response"]["request_id"] for r in rows],
        # The list, a batch to a page: the SDK follows `after` through every page.
        "listed": b.id in [x.id for x in client.batches.list(limit=1)],
    })


def run_anthropic(client, model):
    """Anthropic's Message Batches through the official SDK: create, poll, results."""
    requests = [
        {"custom_id": f"{model}-{i}", "params": {"model": model, "max_tokens": 16,
                                                  "messages": [{"role": "user", "content": f"line {i}"}]}}
        for i in range(3)
    ]
    b = client.messages.batches.create(requests=requests)
    deadline = time.time() + 60
    while b.processing_status != "ended":
        if time.time() > deadline:
            raise RuntimeError(f"message batch {b.id} still {b.processing_status}")
        time.sleep(0.2)
        b = client.messages.batches.retrieve(b.id)
    results = list(client.messages.batches.results(b.id))
    emit({
        "id": f"anthropic:{model}",
        "batch": b.id,
        "status": b.processing_status,
        "counts": b.request_counts.model_dump(),
        "custom_ids": [r.custom_id for r in results],
        "types": [r.result.type for r in results],
        "messages": [r.result.message.type if r.result.type == "succeeded" else None for r in results],
        "listed": b.id in [x.id for x in client.messages.batches.list(limit=1)],
    })


def main():
    base, key = sys.argv[1:3]
    client = openai.OpenAI(api_key=key, base_url=f"{base}/compat/v1", max_retries=0)
    claude = anthropic.Anthropic(api_key=key, base_url=base, max_retries=0)
    for pair in sys.argv[3:]:
        endpoint, model = pair.rsplit(":", 1)
        try:
            if endpoint == "anthropic":
                run_anthropic(claude, model)
            else:
                run(client, endpoint, model)
        except Exception:  # noqa: BLE001 - reported to the Rust test
            emit({"id": pair, "error": traceback.format_exc()})
    raised("unknown-message-batch", lambda: claude.messages.batches.retrieve("msgbatch_none"))
    raised("bad-custom-id", lambda: claude.messages.batches.create(requests=[
        {"custom_id": "has space", "params": {"model": "x", "max_tokens": 1, "messages": []}}]))
    # What the gateway refuses, as the SDK's own error classes.
    raised("unknown-batch", lambda: client.batches.retrieve("batch_none"))
    raised("bad-purpose", lambda: client.files.create(file=("x.jsonl", io.BytesIO(b"{}\n")), purpose="fine-tune"))


if __name__ == "__main__":
    main()
