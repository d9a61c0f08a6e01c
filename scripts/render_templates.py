#!/usr/bin/env python3
"""Render llama.cpp's test chat templates the way HF transformers does, for a fixed set of
conversations, into the fixture `reference/tests/chat_templates.rs` compares tandem against.

The environment copies transformers' `utils/chat_template_utils.py`
(`_compile_jinja_template` / `render_jinja_template`): an `ImmutableSandboxedEnvironment` with
`trim_blocks`, `lstrip_blocks` and `loopcontrols`; `tojson` as `json.dumps` with
`ensure_ascii=False` by default (no HTML escaping, keys in insertion order); `raise_exception`;
`strftime_now` (here at a fixed instant, so the fixture is reproducible); `tools` and
`documents` passed as None when absent; the special tokens as extra variables.

A render that raises is recorded as {"error": text, "raised": bool}, `raised` true when the
template itself refused through `raise_exception`.

Usage: scripts/render_templates.py [TEMPLATE_DIR] [OUT_JSON]
(defaults: ../shared/peers/llama.cpp-tests/models/templates beside the repo, and
reference/tests/fixtures/chat_templates.json).
"""

import datetime
import hashlib
import json
import os
import sys

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

# The instant `strftime_now` reads (tandem's test passes the same one).
NOW = datetime.datetime(2026, 3, 7, 9, 5, 3)

# Special tokens by template file prefix; anything else gets <s> / </s>.
TOKENS = [
    ("meta-llama-Llama-3", "<|begin_of_text|>", "<|eot_id|>"),
    ("fireworks-ai-llama-3", "<|begin_of_text|>", "<|eot_id|>"),
    ("NousResearch-Hermes-3", "<|begin_of_text|>", "<|im_end|>"),
    ("deepseek-ai", "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"),
    ("llama-cpp-deepseek", "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"),
    ("google-gemma", "<bos>", "<eos>"),
    ("Qwen", "", "<|im_end|>"),
    ("openai-gpt-oss", "<|startoftext|>", "<|return|>"),
]

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "The city, e.g. Zürich"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city"],
        },
    },
}

TIME_TOOL = {
    "type": "function",
    "function": {
        "name": "get_time",
        "description": "Current local time of a time zone.",
        "strict": True,
        "parameters": {
            "type": "object",
            "properties": {
                "zone": {"type": "string", "description": "IANA zone name"},
                "offset_hours": {"type": "number", "minimum": -12.5, "maximum": 14, "default": 0.0},
                "exact": {"type": "boolean", "default": False},
            },
            "required": ["zone"],
        },
    },
}

SYSTEM = "You are a helpful assistant. Answer briefly."

DOCUMENTS = [
    {"title": "Lakes of Switzerland", "text": "Lake Geneva is the largest lake in Switzerland."},
    {"title": "Zürich", "text": "Lake Zürich lies south-east of the city."},
]

# Each conversation: messages, tools (or None), add_generation_prompt, and optionally documents
# and extra variables. Message keys are in the order tandem builds its message dicts (role,
# content, reasoning_content, tool_calls, tool_call_id, name), since a template may print a
# whole message.
CONVERSATIONS = {
    "system_user": {
        "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "What is the capital of France?"}],
        "tools": None,
        "add_generation_prompt": True,
    },
    "multi_turn": {
        "messages": [
            {"role": "user", "content": "Hi there!"},
            {"role": "assistant", "content": "Hello! How can I help?"},
            {"role": "user", "content": "  Tell me a joke about café owners.  "},
        ],
        "tools": None,
        "add_generation_prompt": True,
    },
    "prefill": {
        "messages": [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": "Name three colours."},
            {"role": "assistant", "content": "Red, green and"},
        ],
        "tools": None,
        "add_generation_prompt": False,
    },
    "content_parts": {
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "Describe this: "}, {"type": "text", "text": "a quiet lake."}]},
        ],
        "tools": None,
        "add_generation_prompt": True,
    },
    "tools": {
        "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "What's the weather in Paris?"}],
        "tools": [WEATHER_TOOL, TIME_TOOL],
        "add_generation_prompt": True,
    },
    "tool_calls": {
        "messages": [
            {"role": "user", "content": "What's the weather in Paris?"},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {
                        "id": "call12345",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}},
                    }
                ],
            },
            {"role": "tool", "content": '{"temperature": 18, "sky": "clear"}', "tool_call_id": "call12345", "name": "get_weather"},
            {"role": "assistant", "content": "It is 18 °C and clear in Paris."},
            {"role": "user", "content": "Thanks!"},
        ],
        "tools": [WEATHER_TOOL],
        "add_generation_prompt": True,
    },
    "thinking_off": {
        "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "What is 2 + 2?"}],
        "tools": None,
        "add_generation_prompt": True,
        "extra": {"enable_thinking": False},
    },
    "reasoning_history": {
        "messages": [
            {"role": "user", "content": "Is 91 prime?"},
            {"role": "assistant", "content": "No: 91 = 7 × 13.", "reasoning_content": "Try small primes: 91 / 7 = 13."},
            {"role": "user", "content": "And 97?"},
        ],
        "tools": None,
        "add_generation_prompt": True,
    },
    "parallel_calls": {
        "messages": [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": "Weather in Zürich, and the time in Tokyo?"},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {"id": "call00001", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Zürich", "unit": "celsius"}}},
                    {"id": "call00002", "type": "function", "function": {"name": "get_time", "arguments": {"zone": "Asia/Tokyo", "exact": True, "offset_hours": 9, "precision": 0.5, "tags": ["a", None]}}},
                ],
            },
            {"role": "tool", "content": '{"temperature": 9}', "tool_call_id": "call00001", "name": "get_weather"},
            {"role": "tool", "content": "21:04", "tool_call_id": "call00002", "name": "get_time"},
        ],
        "tools": [WEATHER_TOOL, TIME_TOOL],
        "add_generation_prompt": True,
    },
    "inline_think": {
        "messages": [
            {"role": "user", "content": "How many r's in \"strawberry\"?"},
            {"role": "assistant", "content": "<think>\nCount: s-t-r-a-w-b-e-r-r-y.\n</think>\n\nThree."},
            {"role": "user", "content": "And in 'raspberry'?\n"},
        ],
        "tools": None,
        "add_generation_prompt": True,
    },
    "tools_no_system": {
        "messages": [{"role": "user", "content": "What time is it in Lima?"}],
        "tools": [TIME_TOOL],
        "add_generation_prompt": True,
    },
    "documents": {
        "messages": [{"role": "user", "content": "Which is the largest Swiss lake?"}],
        "tools": None,
        "documents": DOCUMENTS,
        "add_generation_prompt": True,
    },
}


class TemplateError(Exception):
    """What `raise_exception` raises (transformers raises jinja2's TemplateError)."""


def raise_exception(message):
    raise TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    # transformers' override: no HTML escaping, options passed through to json.dumps.
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def strftime_now(fmt):
    return NOW.strftime(fmt)


class AssistantTracker(Extension):
    """transformers' `{% generation %}` tag, which marks the assistant's part of the output for
    `return_assistant_tokens_mask`; the text is the body's, unchanged."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return nodes.CallBlock(self.call_method("_generation_support"), [], [], body).set_lineno(lineno)

    def _generation_support(self, caller):
        return caller()


def environment():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[AssistantTracker, loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def tokens_for(name):
    for prefix, bos, eos in TOKENS:
        if name.startswith(prefix):
            return bos, eos
    return "<s>", "</s>"


def tandem_form(conv):
    """A conversation as the Rust test reads it: tools and tool-call arguments as JSON text
    (tandem takes them so, and keeps their key order), everything else as is."""
    messages = []
    for m in conv["messages"]:
        m = dict(m)
        if "tool_calls" in m:
            m["tool_calls"] = [
                {"id": c.get("id"), "name": c["function"]["name"], "arguments": json.dumps(c["function"]["arguments"], ensure_ascii=False)}
                for c in m["tool_calls"]
            ]
        messages.append(m)
    text = lambda v: None if v is None else json.dumps(v, ensure_ascii=False)  # noqa: E731
    return {
        "messages": messages,
        "tools": text(conv["tools"]),
        "documents": text(conv.get("documents")),
        "extra": {k: text(v) for k, v in conv.get("extra", {}).items()},
        "add_generation_prompt": conv["add_generation_prompt"],
    }


def render_all(template_dir):
    env = environment()
    templates = {}
    for name in sorted(os.listdir(template_dir)):
        if not name.endswith(".jinja"):
            continue
        with open(os.path.join(template_dir, name), encoding="utf-8") as f:
            source = f.read()
        bos, eos = tokens_for(name)
        sha = hashlib.sha256(source.encode("utf-8")).hexdigest()
        entry = {"sha256": sha, "bos_token": bos, "eos_token": eos, "renders": {}}
        try:
            compiled = env.from_string(source)
        except jinja2.TemplateError as e:
            entry["compile_error"] = str(e)
            templates[name] = entry
            continue
        for conv_name, conv in CONVERSATIONS.items():
            try:
                text = compiled.render(
                    messages=conv["messages"],
                    tools=conv["tools"],
                    documents=conv.get("documents"),
                    add_generation_prompt=conv["add_generation_prompt"],
                    bos_token=bos,
                    eos_token=eos,
                    **conv.get("extra", {}),
                )
                entry["renders"][conv_name] = {"text": text}
            except TemplateError as e:
                entry["renders"][conv_name] = {"error": str(e), "raised": True}
            except Exception as e:  # noqa: BLE001 - any failure of the template is data here
                entry["renders"][conv_name] = {"error": f"{type(e).__name__}: {e}", "raised": False}
        templates[name] = entry
    return templates


def main():
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    template_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(repo, "..", "shared", "peers", "llama.cpp-tests", "models", "templates")
    out = sys.argv[2] if len(sys.argv) > 2 else os.path.join(repo, "reference", "tests", "fixtures", "chat_templates.json")
    fixture = {
        "generator": "scripts/render_templates.py",
        "jinja2": jinja2.__version__,
        "now": NOW.isoformat(),
        "now_unix": int(NOW.replace(tzinfo=datetime.timezone.utc).timestamp()),
        "conversations": {name: tandem_form(conv) for name, conv in CONVERSATIONS.items()},
        "templates": render_all(template_dir),
    }
    with open(out, "w", encoding="utf-8") as f:
        json.dump(fixture, f, ensure_ascii=False, indent=1)
        f.write("\n")
    renders = [r for t in fixture["templates"].values() for r in t["renders"].values()]
    print(f"{out}: {len(fixture['templates'])} templates, {sum('text' in r for r in renders)} renders, {sum('error' in r for r in renders)} errors")


if __name__ == "__main__":
    main()
