//! HF's Jinja environment as tandem renders it: Python's `str` of printed values, transformers'
//! `tojson`, `strftime_now`, Jinja2's `is iterable` / `sequence` / `number`, Markup `+`, the
//! `{% generation %}` tag, and the variables of a render (tools, tool calls, content parts,
//! extra variables). Expected strings are what jinja2 3.1 renders in the environment of
//! `scripts/render_templates.py`.

use std::time::{Duration, SystemTime};

use reference::chat::{ChatTemplate, Message, RenderOptions, ToolCall};

/// The instant `strftime_now` reads: 2026-03-07 09:05:03 UTC (the script's `NOW`).
fn now() -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1772874303)
}

fn render(src: &str, msgs: &[Message], opts: &RenderOptions) -> reference::Result<String> {
    ChatTemplate::new(src, "test", "<s>", "</s>")?.render_with(msgs, opts)
}

#[test]
fn python_semantics_match_jinja2() {
    let cases: &[(&str, &str)] = &[
        ("{{ none }}|{{ true }}|{{ false }}|{{ 1.5 }}|{{ undefined_var }}", "None|True|False|1.5|"),
        ("{{ {'a': none, 'b': [1, 'x', true], \"c\": \"it's\"} }}", "{'a': None, 'b': [1, 'x', True], 'c': \"it's\"}"),
        ("{{ ['a\\nb', 2.0] }}", "['a\\nb', 2.0]"),
        ("{{ {'k': 'é<>&', 'n': [1, 2.5, none]}|tojson }}", "{\"k\": \"é<>&\", \"n\": [1, 2.5, null]}"),
        ("{{ {'k': 'é\\u2028\"', 'z': {}}|tojson(ensure_ascii=True) }}", "{\"k\": \"\\u00e9\\u2028\\\"\", \"z\": {}}"),
        ("{{ {'b': [1, {'c': []}], 'a': 'x'}|tojson(indent=2) }}", "{\n  \"b\": [\n    1,\n    {\n      \"c\": []\n    }\n  ],\n  \"a\": \"x\"\n}"),
        ("{{ {'b': 1, 'a': 2}|tojson(sort_keys=true, separators=(',', ':')) }}", "{\"a\":2,\"b\":1}"),
        ("{{ 'x\\u0001\\t'|tojson }}", "\"x\\u0001\\t\""),
        ("{{ none is iterable }}{{ 'ab' is iterable }}{{ nothing is iterable }}{{ 3 is iterable }}{{ {} is iterable }}", "FalseTrueTrueFalseTrue"),
        ("{{ 'ab' is sequence }}{{ {} is sequence }}{{ 3 is sequence }}{{ true is number }}{{ none is sequence }}", "TrueTrueFalseTrueFalse"),
        ("{{ strftime_now('%Y-%m-%d|%d %b %Y|%B %d, %Y|%A %H:%M:%S') }}", "2026-03-07|07 Mar 2026|March 07, 2026|Saturday 09:05:03"),
        ("{{ '<a>'|safe + '\"q\" & <b>' }}|{{ 'p' + '<i>'|safe }}|{{ ('<a>'|safe ~ '<b>') }}", "<a>&#34;q&#34; &amp; &lt;b&gt;|p<i>|<a><b>"),
        ("{% generation %}  G\n{% endgeneration %}\n  {%- generation -%} H {%- endgeneration %}", "  G\nH"),
        ("{{ true|string }}|{{ none|string }}|{{ {\"a\": [true, none]}|string }}|{{ 1.0|string }}", "True|None|{'a': [True, None]}|1.0"),
        ("{{ \"x\" ~ true ~ none ~ [1, \"b\"] ~ {\"k\": false} }}", "xTrueNone[1, 'b']{'k': False}"),
        ("{{ [1, \"b\"]|join(\",\") }}|{{ [true, none]|join(\",\") }}", "1,b|True,None"),
    ];
    let opts = RenderOptions { now: Some(now()), ..Default::default() };
    let mut bad = Vec::new();
    for (src, want) in cases {
        let got = render(src, &[], &opts).unwrap();
        if got != *want {
            bad.push(format!("{src}: jinja2 {want:?}, tandem {got:?}"));
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

#[test]
fn messages_reach_the_template_as_hf_dicts() {
    let call = ToolCall::new(Some("call1".into()), "get_weather", r#"{"unit": "c", "city": "Paris"}"#);
    let msgs = [
        Message::with_parts("user", vec!["a ".into(), "b".into()]),
        Message::tool_calls("", vec![call, ToolCall::new(None, "f", "not json")]),
        Message::tool_result("call1", "get_weather", "18"),
    ];
    let src = "{% for m in messages %}{{ m }}\n{% endfor %}";
    let want = "{'role': 'user', 'content': [{'type': 'text', 'text': 'a '}, {'type': 'text', 'text': 'b'}]}\n\
                {'role': 'assistant', 'content': '', 'tool_calls': [{'id': 'call1', 'type': 'function', 'function': \
                {'name': 'get_weather', 'arguments': {'unit': 'c', 'city': 'Paris'}}}, {'type': 'function', 'function': \
                {'name': 'f', 'arguments': 'not json'}}]}\n\
                {'role': 'tool', 'content': '18', 'tool_call_id': 'call1', 'name': 'get_weather'}\n";
    assert_eq!(render(src, &msgs, &RenderOptions::default()).unwrap(), want);
    assert_eq!(msgs[0].content, "a b");
    let m = Message { reasoning_content: Some("r".into()), ..Message::assistant("c") };
    assert_eq!(render(src, &[m], &RenderOptions::default()).unwrap(), "{'role': 'assistant', 'content': 'c', 'reasoning_content': 'r'}\n");
}

#[test]
fn tools_documents_and_extra_variables() {
    let src = "{{ tools is none }}|{{ documents is none }}|{{ add_generation_prompt }}|{{ enable_thinking is defined }}";
    assert_eq!(render(src, &[], &RenderOptions::default()).unwrap(), "True|True|False|False");
    let opts = RenderOptions {
        add_generation_prompt: true,
        tools: Some(r#"[{"type": "function", "function": {"name": "f", "parameters": {"z": 1, "a": 2}}}]"#.into()),
        documents: Some(r#"[{"title": "t", "text": "x"}]"#.into()),
        extra: vec![("enable_thinking".into(), "false".into()), ("reasoning_effort".into(), r#""low""#.into())],
        now: None,
    };
    let src = "{{ tools[0]|tojson }}|{{ documents[0].title }}|{{ add_generation_prompt }}|{{ enable_thinking }}|{{ reasoning_effort }}";
    assert_eq!(
        render(src, &[], &opts).unwrap(),
        r#"{"type": "function", "function": {"name": "f", "parameters": {"z": 1, "a": 2}}}|t|True|False|low"#
    );
}

#[test]
fn bad_options_and_constructs_are_named() {
    let opts = RenderOptions { tools: Some("[{".into()), ..Default::default() };
    let err = render("{{ tools }}", &[], &opts).unwrap_err().to_string();
    assert!(err.contains("`tools`") && err.contains("invalid JSON"), "{err}");
    let opts = RenderOptions { extra: vec![("flag".into(), "yes".into())], ..Default::default() };
    let err = render("x", &[], &opts).unwrap_err().to_string();
    assert!(err.contains("`flag`"), "{err}");
    let err = render("{{ strftime_now('%Q') }}", &[], &RenderOptions::default()).unwrap_err().to_string();
    assert!(err.contains("strftime_now") && err.contains("%Q"), "{err}");
    let err = render("{{ {'a': 1}|tojson(indent=[1]) }}", &[], &RenderOptions::default()).unwrap_err().to_string();
    assert!(err.contains("tojson: indent"), "{err}");
    let err = render("{{ x|tojson(colour=1) }}", &[], &RenderOptions::default()).unwrap_err().to_string();
    assert!(err.contains("colour"), "{err}");
    let err = render("{{ nothing|tojson }}", &[], &RenderOptions::default()).unwrap_err().to_string();
    assert!(err.contains("Undefined"), "{err}");
    // HF passes tools=None, and Python cannot loop over None (the vendored minijinja agrees).
    let err = render("{% for t in tools %}{% endfor %}", &[], &RenderOptions::default()).unwrap_err().to_string();
    assert!(err.contains("cannot iterate over none"), "{err}");
}

#[test]
fn strftime_now_reads_the_clock_without_one_given() {
    let year = render("{{ strftime_now('%Y') }}", &[], &RenderOptions::default()).unwrap();
    let y: i32 = year.parse().unwrap();
    assert!((2024..3000).contains(&y), "{year}");
}
