#!/usr/bin/env python3
"""A video task through the official openai SDK's generic calls (issue 14), as the README shows.

Run by tests/tests/e2e/sdk.rs (`official_openai_sdk_runs_a_video_task`):

    videos.py BASE_URL KEY MODEL

Prints one JSON object: {id, status, seconds, signed_bytes, keyed_bytes}, or {error} on an
unexpected exception.
"""

import json
import sys
import time
import traceback
import urllib.request

import openai


def main():
    base, key, model = sys.argv[1:4]
    client = openai.OpenAI(base_url=f"{base}/compat/v1", api_key=key, max_retries=0)
    body = {"model": model, "prompt": "a red fox", "durationSeconds": 4,
            "resolution": "720p", "aspectRatio": "16:9"}
    task = client.post("/videos", cast_to=object, body=body)
    deadline = time.time() + 30
    while task["status"] not in ("completed", "failed") and time.time() < deadline:
        time.sleep(0.2)
        task = client.get(f"/videos/{task['id']}", cast_to=object)
    signed = urllib.request.urlopen(task["data"][0]["url"]).read()
    keyed = urllib.request.urlopen(urllib.request.Request(
        f"{base}/compat/v1/videos/{task['id']}/content",
        headers={"Authorization": f"Bearer {key}"})).read()
    print(json.dumps({"id": task["id"], "status": task["status"], "seconds": task["seconds"],
                      "signed_bytes": len(signed), "keyed_bytes": len(keyed)}), flush=True)


if __name__ == "__main__":
    try:
        main()
    except Exception as e:  # noqa: BLE001 - reported to the Rust test
        print(json.dumps({"error": f"{type(e).__name__}: {e}",
                          "trace": traceback.format_exc()}), flush=True)
