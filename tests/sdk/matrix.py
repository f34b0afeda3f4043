#!/usr/bin/env python3
"""The official SDKs against the gateway, unmodified: the end-to-end matrix of issue 12.

Run by tests/tests/e2e/sdk.rs (which starts the gateway and the mock supplier, then checks what
reached the supplier and what was charged); not meant to be run by hand, though it can be:

    matrix.py BASE_URL KEY openai=MODEL anthropic=MODEL gemini=MODEL

For every client surface {chat, responses, messages, native} and every supplier format
{openai, anthropic, gemini} whose cell is served (native: gemini-served models only), streaming
and not, it makes a plain call and a tool round trip (a call that declares a tool and gets the
mock's tool call back, then the tool's result sent back and a text answer). Every call carries its
own `x-mock-usage` with a unique prompt count so the test can find its usage record and its
supplier request. Then the SDKs' own error classes, model lists and token counts.

Prints one JSON object per line: calls as {id, client, supplier, model, stream, step, prompt,
completion, text, tool, usage} and checks as {id, check, ...}; an SDK exception where a result was
expected is printed as {id, error} so the Rust side fails with it.
"""

import json
import sys
import traceback

import anthropic
import openai
from google import genai
from google.genai import types

TOOL_NAME = "lookup"
TOOL_SCHEMA = {
    "type": "object",
    "properties": {"q": {"type": "string"}},
    "required": ["q"],
}
TOOL_RESULT = "sunny-42"
QUESTION = "What is the weather? Use the tool."


def emit(obj):
    print(json.dumps(obj), flush=True)


class Usage:
    """A unique prompt count per call (the key that finds its usage record), fixed output."""

    def __init__(self):
        self.n = 0

    def next(self):
        self.n += 1
        return 1000 + self.n, 10 + self.n % 7


# --- chat completions -------------------------------------------------------------------------


def chat_call(client, model, stream, messages, tools, headers):
    kwargs = {"model": model, "messages": messages, "extra_headers": headers}
    if tools:
        kwargs["tools"] = [
            {
                "type": "function",
                "function": {"name": TOOL_NAME, "description": "Looks up.", "parameters": TOOL_SCHEMA},
            }
        ]
    if not stream:
        r = client.chat.completions.create(**kwargs)
        msg = r.choices[0].message
        tool = None
        if msg.tool_calls:
            c = msg.tool_calls[0]
            tool = {"name": c.function.name, "args": json.loads(c.function.arguments), "id": c.id}
        usage = {"input": r.usage.prompt_tokens, "output": r.usage.completion_tokens}
        return msg.content or "", tool, usage
    text, usage, calls = "", None, {}
    for chunk in client.chat.completions.create(
        stream=True, stream_options={"include_usage": True}, **kwargs
    ):
        if chunk.usage is not None:
            usage = {"input": chunk.usage.prompt_tokens, "output": chunk.usage.completion_tokens}
        for choice in chunk.choices:
            text += choice.delta.content or ""
            for d in choice.delta.tool_calls or []:
                c = calls.setdefault(d.index, {"name": "", "args": "", "id": None})
                if d.id:
                    c["id"] = d.id
                if d.function and d.function.name:
                    c["name"] += d.function.name
                if d.function and d.function.arguments:
                    c["args"] += d.function.arguments
    tool = None
    if calls:
        c = calls[min(calls)]
        tool = {"name": c["name"], "args": json.loads(c["args"]), "id": c["id"]}
    return text, tool, usage


def chat_round(client, model, stream, usage, record):
    p, c = usage.next()
    messages = [{"role": "user", "content": "Say hello"}]
    record(1, p, c, *chat_call(client, model, stream, messages, False, mock_usage(p, c)))
    p, c = usage.next()
    messages = [{"role": "user", "content": QUESTION}]
    _, tool, _ = record(2, p, c, *chat_call(client, model, stream, messages, True, mock_usage(p, c)))
    p, c = usage.next()
    messages += [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": tool["id"],
                    "type": "function",
                    "function": {"name": tool["name"], "arguments": json.dumps(tool["args"])},
                }
            ],
        },
        {"role": "tool", "tool_call_id": tool["id"], "content": TOOL_RESULT},
    ]
    record(3, p, c, *chat_call(client, model, stream, messages, True, mock_usage(p, c)))


# --- responses --------------------------------------------------------------------------------


def responses_call(client, model, stream, input_, tools, headers):
    kwargs = {"model": model, "input": input_, "extra_headers": headers}
    if tools:
        kwargs["tools"] = [
            {"type": "function", "name": TOOL_NAME, "description": "Looks up.", "parameters": TOOL_SCHEMA}
        ]
    if stream:
        final, deltas = None, ""
        for event in client.responses.create(stream=True, **kwargs):
            if event.type == "response.output_text.delta":
                deltas += event.delta
            elif event.type == "response.completed":
                final = event.response
        if final is None:
            raise RuntimeError("the stream ended without response.completed")
        if final.output_text != deltas:
            raise RuntimeError(f"deltas {deltas!r} differ from the final text {final.output_text!r}")
        r = final
    else:
        r = client.responses.create(**kwargs)
    tool = None
    for item in r.output:
        if item.type == "function_call":
            tool = {"name": item.name, "args": json.loads(item.arguments), "id": item.call_id, "item": item}
            break
    usage = {"input": r.usage.input_tokens, "output": r.usage.output_tokens}
    return r.output_text, tool, usage


def responses_round(client, model, stream, usage, record):
    p, c = usage.next()
    record(1, p, c, *responses_call(client, model, stream, "Say hello", False, mock_usage(p, c)))
    p, c = usage.next()
    input_ = [{"role": "user", "content": QUESTION}]
    _, tool, _ = record(2, p, c, *responses_call(client, model, stream, input_, True, mock_usage(p, c)))
    p, c = usage.next()
    call = tool["item"]
    input_ += [
        {"type": "function_call", "call_id": call.call_id, "name": call.name, "arguments": call.arguments},
        {"type": "function_call_output", "call_id": call.call_id, "output": TOOL_RESULT},
    ]
    record(3, p, c, *responses_call(client, model, stream, input_, True, mock_usage(p, c)))


# --- messages ---------------------------------------------------------------------------------


def messages_call(client, model, stream, messages, tools, headers):
    kwargs = {"model": model, "max_tokens": 256, "messages": messages, "extra_headers": headers}
    if tools:
        kwargs["tools"] = [{"name": TOOL_NAME, "description": "Looks up.", "input_schema": TOOL_SCHEMA}]
    if stream:
        with client.messages.stream(**kwargs) as s:
            streamed = "".join(s.text_stream)
            m = s.get_final_message()
        text = "".join(b.text for b in m.content if b.type == "text")
        if text != streamed:
            raise RuntimeError(f"text events {streamed!r} differ from the final message {text!r}")
    else:
        m = client.messages.create(**kwargs)
        text = "".join(b.text for b in m.content if b.type == "text")
    tool = None
    for b in m.content:
        if b.type == "tool_use":
            tool = {"name": b.name, "args": b.input, "id": b.id, "content": m.content}
            break
    u = m.usage
    total_in = u.input_tokens + (u.cache_read_input_tokens or 0) + (u.cache_creation_input_tokens or 0)
    return text, tool, {"input": total_in, "output": u.output_tokens}


def messages_round(client, model, stream, usage, record):
    p, c = usage.next()
    messages = [{"role": "user", "content": "Say hello"}]
    record(1, p, c, *messages_call(client, model, stream, messages, False, mock_usage(p, c)))
    p, c = usage.next()
    messages = [{"role": "user", "content": QUESTION}]
    _, tool, _ = record(2, p, c, *messages_call(client, model, stream, messages, True, mock_usage(p, c)))
    p, c = usage.next()
    messages += [
        {"role": "assistant", "content": tool["content"]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": tool["id"], "content": TOOL_RESULT}]},
    ]
    record(3, p, c, *messages_call(client, model, stream, messages, True, mock_usage(p, c)))


# --- Gemini native ----------------------------------------------------------------------------


def native_call(client, model, stream, contents, tools, headers):
    config = types.GenerateContentConfig(http_options=types.HttpOptions(headers=headers))
    if tools:
        config.tools = [
            types.Tool(
                function_declarations=[
                    types.FunctionDeclaration(
                        name=TOOL_NAME, description="Looks up.", parameters_json_schema=TOOL_SCHEMA
                    )
                ]
            )
        ]
    if stream:
        text, usage, calls, parts = "", None, [], []
        for chunk in client.models.generate_content_stream(model=model, contents=contents, config=config):
            text += chunk.text or ""
            calls += chunk.function_calls or []
            if chunk.candidates and chunk.candidates[0].content and chunk.candidates[0].content.parts:
                parts += chunk.candidates[0].content.parts
            if chunk.usage_metadata and chunk.usage_metadata.prompt_token_count is not None:
                usage = chunk.usage_metadata
    else:
        r = client.models.generate_content(model=model, contents=contents, config=config)
        text, calls, usage = r.text or "", r.function_calls or [], r.usage_metadata
        parts = r.candidates[0].content.parts
    tool = None
    if calls:
        tool = {"name": calls[0].name, "args": dict(calls[0].args), "id": calls[0].id, "parts": parts}
    return text, tool, {"input": usage.prompt_token_count, "output": usage.candidates_token_count}


def native_round(client, model, stream, usage, record):
    p, c = usage.next()
    record(1, p, c, *native_call(client, model, stream, "Say hello", False, mock_usage(p, c)))
    p, c = usage.next()
    contents = [types.Content(role="user", parts=[types.Part(text=QUESTION)])]
    _, tool, _ = record(2, p, c, *native_call(client, model, stream, contents, True, mock_usage(p, c)))
    p, c = usage.next()
    contents += [
        types.Content(role="model", parts=tool["parts"]),
        types.Content(
            role="user",
            parts=[types.Part.from_function_response(name=tool["name"], response={"result": TOOL_RESULT})],
        ),
    ]
    record(3, p, c, *native_call(client, model, stream, contents, True, mock_usage(p, c)))


def mock_usage(p, c):
    return {"x-mock-usage": f"prompt={p},completion={c}"}


# --- errors, lists, counts --------------------------------------------------------------------


def raised(id_, fn):
    """Runs fn expecting an SDK exception; emits its class, status and message."""
    try:
        fn()
    except Exception as e:  # noqa: BLE001 - the class is what is checked
        status = getattr(e, "status_code", None) or getattr(e, "code", None)
        emit({"id": id_, "check": "raised", "class": type(e).__name__, "status": status, "message": str(e)})
        return
    emit({"id": id_, "check": "raised", "class": None})


def checks(base, key, models):
    oa = openai.OpenAI(api_key=key, base_url=f"{base}/compat/v1", max_retries=0)
    an = anthropic.Anthropic(api_key=key, base_url=base, max_retries=0)
    ge = genai.Client(api_key=key, http_options=types.HttpOptions(base_url=base))
    bad_oa = openai.OpenAI(api_key="sk-wrong", base_url=f"{base}/compat/v1", max_retries=0)
    bad_an = anthropic.Anthropic(api_key="sk-wrong", base_url=base, max_retries=0)
    bad_ge = genai.Client(api_key="sk-wrong", http_options=types.HttpOptions(base_url=base))
    # No key reaches the gateway (each SDK's credential header sent empty): SPEC's no-key body.
    none_oa = openai.OpenAI(
        api_key="unused", base_url=f"{base}/compat/v1", max_retries=0, default_headers={"Authorization": ""}
    )
    none_an = anthropic.Anthropic(
        api_key="unused", base_url=base, max_retries=0, default_headers={"x-api-key": "", "Authorization": anthropic.Omit()}
    )
    none_ge = genai.Client(
        api_key="unused", http_options=types.HttpOptions(base_url=base, headers={"x-goog-api-key": ""})
    )
    hello = [{"role": "user", "content": "hi"}]
    raised("openai-no-key", lambda: none_oa.chat.completions.create(model=models["openai"], messages=hello))
    raised(
        "anthropic-no-key",
        lambda: none_an.messages.create(model=models["anthropic"], max_tokens=16, messages=hello),
    )
    raised("native-no-key", lambda: none_ge.models.generate_content(model=models["gemini"], contents="hi"))
    raised("openai-unknown-model", lambda: oa.chat.completions.create(model="no-such-model", messages=hello))
    raised("openai-bad-key", lambda: bad_oa.chat.completions.create(model=models["anthropic"], messages=hello))
    raised(
        "anthropic-unknown-model",
        lambda: an.messages.create(model="no-such-model", max_tokens=16, messages=hello),
    )
    raised(
        "anthropic-bad-key",
        lambda: bad_an.messages.create(model=models["openai"], max_tokens=16, messages=hello),
    )
    raised(
        "anthropic-invalid",
        lambda: an.messages.create(model=models["openai"], max_tokens=-1, messages=hello),
    )
    raised("native-unknown-model", lambda: ge.models.generate_content(model="no-such-model", contents="hi"))
    raised("native-not-gemini-served", lambda: ge.models.generate_content(model=models["openai"], contents="hi"))
    raised("native-bad-key", lambda: bad_ge.models.generate_content(model=models["gemini"], contents="hi"))
    emit({"id": "openai-models", "check": "list", "ids": sorted(m.id for m in oa.models.list())})
    emit({"id": "anthropic-models", "check": "list", "ids": sorted(m.id for m in an.models.list())})
    emit({"id": "native-models", "check": "list", "ids": sorted(m.name for m in ge.models.list())})
    counted = an.messages.count_tokens(model=models["anthropic"], messages=hello)
    emit({"id": "anthropic-count", "check": "count", "tokens": counted.input_tokens})
    counted = ge.models.count_tokens(model=models["gemini"], contents="hi")
    emit({"id": "native-count", "check": "count", "tokens": counted.total_tokens})


def main():
    base, key = sys.argv[1], sys.argv[2]
    models = dict(arg.split("=", 1) for arg in sys.argv[3:])
    clients = {
        "chat": (openai.OpenAI(api_key=key, base_url=f"{base}/compat/v1"), chat_round),
        "responses": (openai.OpenAI(api_key=key, base_url=f"{base}/compat/v1"), responses_round),
        "messages": (anthropic.Anthropic(api_key=key, base_url=base), messages_round),
        "native": (genai.Client(api_key=key, http_options=types.HttpOptions(base_url=base)), native_round),
    }
    usage = Usage()
    for surface, (client, round_) in clients.items():
        for supplier, model in models.items():
            if surface == "native" and supplier != "gemini":
                continue
            for stream in (False, True):
                cell = f"{surface}-{supplier}-{'stream' if stream else 'json'}"

                def record(step, p, c, text, tool, used, cell=cell, supplier=supplier, model=model, stream=stream):
                    shown = None if tool is None else {k: tool[k] for k in ("name", "args", "id")}
                    emit(
                        {
                            "id": f"{cell}-{step}",
                            "client": surface,
                            "supplier": supplier,
                            "model": model,
                            "stream": stream,
                            "step": step,
                            "prompt": p,
                            "completion": c,
                            "text": text,
                            "tool": shown,
                            "usage": used,
                        }
                    )
                    return text, tool, used

                try:
                    round_(client, model, stream, usage, record)
                except Exception:  # noqa: BLE001 - reported, and the Rust side fails on it
                    emit({"id": cell, "error": traceback.format_exc()})
    try:
        checks(base, key, models)
    except Exception:  # noqa: BLE001
        emit({"id": "checks", "error": traceback.format_exc()})


if __name__ == "__main__":
    main()
