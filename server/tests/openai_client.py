"""The official `openai` Python client against a running `tandem serve` (SmolLM2 on the CPU).

Usage: python3 openai_client.py BASE_URL MODEL   (BASE_URL: http://HOST:PORT)
Run by server/tests/smollm2.rs; exits non-zero on the first failed check.
"""

import sys

import openai


def check(cond, what):
    if not cond:
        raise AssertionError(what)


def main():
    base, model = sys.argv[1], sys.argv[2]
    client = openai.OpenAI(base_url=base + "/v1", api_key="unused", max_retries=0)

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

    print("openai client: every check passed")


if __name__ == "__main__":
    main()
