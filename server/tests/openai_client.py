"""The official `openai` Python client against a running `tandem serve` (SmolLM2 on the CPU).

Usage: python3 openai_client.py BASE_URL MODEL [--tools]   (BASE_URL: http://HOST:PORT)
With --tools, against a model whose template has a tool-call format: function tools forced by
`tool_choice` through chat completions and `responses.create`, arguments checked against the
schema; then a suite of schemas (nested objects, arrays, enums, anyOf, bounded numbers, string
patterns, optional keys) through `response_format` and `text.format`, every output validated. Run by server/tests/smollm2.rs; exits non-zero on the first failed check.
"""

import json
import sys

import openai

WEATHER = {
    "type": "object",
    "properties": {"city": {"type": "string", "maxLength": 8}, "days": {"type": "integer", "minimum": 1, "maximum": 7}},
    "required": ["city", "days"],
    "additionalProperties": False,
}


def check(cond, what):
    if not cond:
        raise AssertionError(what)


def weather_args(text):
    """The arguments text of a get_weather call, valid against WEATHER."""
    a = json.loads(text)
    check(set(a) == {"city", "days"} and isinstance(a["city"], str) and len(a["city"]) <= 8, f"arguments {text!r}")
    check(isinstance(a["days"], int) and 1 <= a["days"] <= 7, f"arguments {text!r}")


def responses(client, model):
    """`responses.create`: a text reply whole and streamed (the same text, the events in order)."""
    r = client.responses.create(model=model, input="What is the capital of France?", instructions="Be brief.", max_output_tokens=12, temperature=0)
    check(r.object == "response" and r.status in ("completed", "incomplete") and r.output[0].type == "message", f"response: {r}")
    check(r.output_text and r.usage.output_tokens >= 1, f"response: {r}")
    check(r.usage.total_tokens == r.usage.input_tokens + r.usage.output_tokens, f"usage: {r.usage}")
    events = list(client.responses.create(model=model, input="What is the capital of France?", instructions="Be brief.", max_output_tokens=12, temperature=0, stream=True))
    kinds = [e.type for e in events]
    check(kinds[0] == "response.created" and kinds[-1] in ("response.completed", "response.incomplete"), f"events: {kinds}")
    streamed = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    check(streamed == r.output_text, f"streamed response {streamed!r} != {r.output_text!r}")
    check(events[-1].response.output_text == r.output_text, f"last event: {events[-1]}")
    try:
        client.responses.create(model=model, input="hi", max_output_tokens=0)
        check(False, "max_output_tokens=0 was accepted")
    except openai.BadRequestError as e:
        check(e.status_code == 400 and e.param == "max_output_tokens", f"bad max_output_tokens: {e}")


def tools(client, model):
    """Forced function calls through chat completions and `responses.create`, whole and streamed."""
    chat_tool = {"type": "function", "function": {"name": "get_weather", "description": "Weather", "parameters": WEATHER}}
    msgs = [{"role": "user", "content": "Weather in Paris?"}]
    for choice in ("required", {"type": "function", "function": {"name": "get_weather"}}):
        chat = client.chat.completions.create(model=model, messages=msgs, tools=[chat_tool], tool_choice=choice, parallel_tool_calls=False, max_tokens=200, seed=1)
        c = chat.choices[0]
        check(c.finish_reason == "tool_calls" and len(c.message.tool_calls) == 1, f"chat: {chat}")
        check(c.message.tool_calls[0].function.name == "get_weather", f"chat: {chat}")
        weather_args(c.message.tool_calls[0].function.arguments)
        chunks = list(client.chat.completions.create(model=model, messages=msgs, tools=[chat_tool], tool_choice=choice, parallel_tool_calls=False, max_tokens=200, seed=1, stream=True))
        args = "".join(tc.function.arguments or "" for ch in chunks if ch.choices for tc in (ch.choices[0].delta.tool_calls or []))
        check(args == c.message.tool_calls[0].function.arguments, f"streamed arguments {args!r}")
    flat = {"type": "function", "name": "get_weather", "description": "Weather", "parameters": WEATHER}
    r = client.responses.create(model=model, input="Weather in Paris?", tools=[flat], tool_choice="required", parallel_tool_calls=False, max_output_tokens=200, extra_body={"seed": 2})
    calls = [o for o in r.output if o.type == "function_call"]
    check(len(calls) == 1 and calls[0].name == "get_weather" and calls[0].call_id, f"response: {r}")
    weather_args(calls[0].arguments)
    events = list(client.responses.create(model=model, input="Weather in Paris?", tools=[flat], tool_choice="required", parallel_tool_calls=False, max_output_tokens=200, extra_body={"seed": 2}, stream=True))
    args = "".join(e.delta for e in events if e.type == "response.function_call_arguments.delta")
    check(args == calls[0].arguments, f"streamed arguments {args!r} != {calls[0].arguments!r}")
    follow = [
        {"role": "user", "content": "Weather in Paris?"},
        {"type": "function_call", "call_id": calls[0].call_id, "name": "get_weather", "arguments": calls[0].arguments},
        {"type": "function_call_output", "call_id": calls[0].call_id, "output": "{\"temp\": 21}"},
    ]
    r = client.responses.create(model=model, input=follow, tools=[flat], max_output_tokens=4)
    check(r.object == "response", f"after the call: {r}")


SCHEMAS = [
    # Nested objects, required and optional keys.
    {"type": "object", "properties": {"inner": {"type": "object", "properties": {"ok": {"type": "boolean"}, "n": {"type": "integer", "minimum": -5, "maximum": 5}},
     "required": ["ok"], "additionalProperties": False}, "note": {"type": "string", "maxLength": 4}}, "required": ["inner"], "additionalProperties": False},
    # Arrays of enums.
    {"type": "object", "properties": {"tags": {"type": "array", "items": {"type": "string", "enum": ["a", "bb", "ccc"]}, "minItems": 1, "maxItems": 3}},
     "required": ["tags"], "additionalProperties": False},
    # anyOf.
    {"type": "object", "properties": {"v": {"anyOf": [{"type": "integer", "minimum": 10, "maximum": 99}, {"type": "string", "enum": ["none"]}]}},
     "required": ["v"], "additionalProperties": False},
    # Numbers with bounds (integers: random weights write fractions without end).
    {"type": "object", "properties": {"x": {"type": "integer", "minimum": -30, "maximum": 30}, "k": {"type": "integer", "exclusiveMinimum": 0, "maximum": 3}},
     "required": ["x", "k"], "additionalProperties": False},
    # String patterns.
    {"type": "object", "properties": {"code": {"type": "string", "pattern": "^[A-Z]{2}[0-9]{3}$"}, "opt": {"type": "boolean"}}, "required": ["code"], "additionalProperties": False},
]


def schemas(client, model):
    """Every schema of SCHEMAS through chat's `response_format` and the Responses API's
    `text.format`, whole and streamed: each output is valid against its schema (checked by
    `jsonschema`, installed beside `openai` by scripts/test.sh; its absence is an error)."""
    import jsonschema

    def valid(text, schema):
        v = json.loads(text)
        jsonschema.validate(v, schema)

    msgs = [{"role": "user", "content": "Answer in JSON."}]
    for i, schema in enumerate(SCHEMAS):
        rf = {"type": "json_schema", "json_schema": {"name": f"s{i}", "schema": schema, "strict": True}}
        chat = client.chat.completions.create(model=model, messages=msgs, response_format=rf, max_tokens=200, seed=i)
        check(chat.choices[0].finish_reason == "stop", f"schema {i}: {chat}")
        valid(chat.choices[0].message.content, schema)
        chunks = list(client.chat.completions.create(model=model, messages=msgs, response_format=rf, max_tokens=200, seed=i, stream=True))
        valid("".join(c.choices[0].delta.content or "" for c in chunks if c.choices), schema)
        fmt = {"format": {"type": "json_schema", "name": f"s{i}", "schema": schema, "strict": True}}
        r = client.responses.create(model=model, input="Answer in JSON.", text=fmt, max_output_tokens=200, extra_body={"seed": i})
        check(r.status == "completed", f"schema {i}: {r}")
        valid(r.output_text, schema)


def main():
    base, model = sys.argv[1], sys.argv[2]
    client = openai.OpenAI(base_url=base + "/v1", api_key="unused", max_retries=0)
    if sys.argv[3:] == ["--tools"]:
        tools(client, model)
        schemas(client, model)
        print("openai client: every tool and schema check passed")
        return

    models = client.models.list()
    check([m.id for m in models.data] == [model], f"models: {models}")

    msgs = [{"role": "user", "content": "What is the capital of France?"}]
    chat = client.chat.completions.create(model=model, messages=msgs, max_tokens=12, temperature=0)
    text = chat.choices[0].message.content
    check(chat.object == "chat.completion" and chat.choices[0].message.role == "assistant", f"chat: {chat}")
    check(text and chat.choices[0].finish_reason in ("stop", "length"), f"chat: {chat}")
    u = chat.usage
    check(u.completion_tokens >= 1 and u.total_tokens == u.prompt_tokens + u.completion_tokens, f"usage: {u}")

    chunks = list(client.chat.completions.create(model=model, messages=msgs, max_tokens=12, temperature=0, stream=True, stream_options={"include_usage": True}))
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    check(streamed == text, f"streamed chat {streamed!r} != {text!r}")
    check(chunks[0].choices[0].delta.role == "assistant", f"first chunk: {chunks[0]}")
    check(chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == u.completion_tokens, f"usage chunk: {chunks[-1]}")
    reasons = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    check(reasons == [chat.choices[0].finish_reason], f"finish reasons {reasons}")

    comp = client.completions.create(model=model, prompt="Once upon a time", max_tokens=10, temperature=0)
    check(comp.object == "text_completion" and comp.choices[0].finish_reason == "length", f"completion: {comp}")
    check(comp.usage.completion_tokens == 10, f"completion usage: {comp.usage}")
    parts = client.completions.create(model=model, prompt="Once upon a time", max_tokens=10, temperature=0, stream=True)
    streamed = "".join(c.choices[0].text for c in parts if c.choices)
    check(streamed == comp.choices[0].text, f"streamed completion {streamed!r} != {comp.choices[0].text!r}")

    seeded = [client.completions.create(model=model, prompt="Once upon a time", max_tokens=8, temperature=0.9, seed=5).choices[0].text for _ in range(2)]
    check(seeded[0] == seeded[1], f"same seed, different text: {seeded}")

    lp = client.chat.completions.create(model=model, messages=msgs, max_tokens=4, temperature=0, logprobs=True, top_logprobs=2)
    content = lp.choices[0].logprobs.content
    check(len(content) == lp.usage.completion_tokens and all(len(t.top_logprobs) == 2 and t.logprob <= 0 for t in content), f"logprobs: {lp}")

    try:
        client.chat.completions.create(model="no-such-model", messages=msgs, max_tokens=2)
        check(False, "an unknown model was accepted")
    except openai.NotFoundError as e:
        check(e.status_code == 404 and e.param == "model", f"unknown model: {e}")
    try:
        client.completions.create(model=model, prompt="x", max_tokens=2, top_p=5)
        check(False, "top_p=5 was accepted")
    except openai.BadRequestError as e:
        check(e.status_code == 400 and e.param == "top_p" and e.type == "invalid_request_error", f"bad top_p: {e}")

    responses(client, model)

    print("openai client: every check passed")


if __name__ == "__main__":
    main()
