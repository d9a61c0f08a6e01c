//! Tool-call parsing per family (`server::tools`), on the cases of llama.cpp's
//! `tests/test-chat.cpp` for Hermes-2-Pro / Hermes-3 / Qwen2.5 / Qwen3, Llama-3.x,
//! Mistral-Nemo / Mistral-Small-3.2 / Devstral and gpt-oss: each input parsed whole, in 1-char
//! deltas and in random deltas gives the expected message, and the streamed events add up to
//! it. Malformed output ends as content with a reason; arbitrary text never panics.

use proptest::prelude::*;
use rand::{Rng, SeedableRng};
use serde_json::Value;
use server::tools::{Family, Parsed, ToolEvent};

const HELLO: &str = "Hello, world!\nWhat's up?";
const THINKING: &str = "I'm\nthinking";
const SPECIAL: &str = "special_function";
const TOOLS: [&str; 4] = ["special_function", "special_function_with_opt", "edit", "python"];

/// Expected message: content, reasoning, calls (name, arguments, id if the model gave one).
struct Case {
    name: &'static str,
    family: Family,
    input: String,
    content: String,
    reasoning: String,
    calls: Vec<(&'static str, &'static str, Option<&'static str>)>,
    /// Malformed: the raw text comes back as content, with a reason.
    malformed: bool,
}

fn case(name: &'static str, family: Family, input: impl Into<String>) -> Case {
    Case { name, family, input: input.into(), content: String::new(), reasoning: String::new(), calls: vec![], malformed: false }
}

impl Case {
    fn content(mut self, c: &str) -> Self {
        self.content = c.into();
        self
    }
    fn reasoning(mut self, r: &str) -> Self {
        self.reasoning = r.into();
        self
    }
    fn call(mut self, name: &'static str, args: &'static str, id: Option<&'static str>) -> Self {
        self.calls.push((name, args, id));
        self
    }
    fn special(self) -> Self {
        self.call(SPECIAL, r#"{"arg1": 1}"#, None)
    }
    fn malformed(mut self) -> Self {
        self.content = self.input.clone();
        self.malformed = true;
        self
    }
}

const HERMES_CALL: &str = "<tool_call>\n{\"name\": \"special_function\", \"arguments\": {\"arg1\": 1}}\n</tool_call>";

fn cases() -> Vec<Case> {
    use Family::*;
    let hermes_pro_call = "<tool_call>\n{\"name\": \"special_function\", \"arguments\": {\"arg1\": 1}}</tool_call>";
    vec![
        // NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use
        case("hermes2pro_call", Hermes, hermes_pro_call).special(),
        case("hermes2pro_content_then_call", Hermes, format!("{HELLO}{hermes_pro_call}")).content(HELLO).special(),
        case("hermes2pro_content", Hermes, HELLO).content(HELLO),
        // Hermes-3 / Qwen2.5 (llama.cpp runs the same cases on MiMo-VL, Hermes-3, Qwen2.5)
        case("hermes3_content", Hermes, HELLO).content(HELLO),
        case("hermes3_call", Hermes, HERMES_CALL).special(),
        case("qwen25_content", Hermes, HELLO).content(HELLO),
        case("qwen25_call", Hermes, HERMES_CALL).special(),
        // Qwen3 (Hermes calls after a <think> block; llama.cpp's Reka-Edge cases, same format)
        case("qwen3_think_then_call", Hermes, format!("<think>\n{THINKING}\n</think>\n\n{HERMES_CALL}")).reasoning(THINKING).special(),
        case("qwen3_think_then_content", Hermes, format!("<think>\n{THINKING}\n</think>\n\n{HELLO}")).reasoning(THINKING).content(HELLO),
        case("qwen3_content_newline_call", Hermes, format!("{HELLO}\n{HERMES_CALL}")).content(HELLO).special(),
        case(
            "qwen3_parallel_calls",
            Hermes,
            format!("{HERMES_CALL}\n<tool_call>\n{{\"name\": \"special_function_with_opt\", \"arguments\": {{\"arg1\": 1, \"arg2\": 2}}}}\n</tool_call>"),
        )
        .special()
        .call("special_function_with_opt", r#"{"arg1": 1, "arg2": 2}"#, None),
        case("hermes_no_arguments_is_empty_object", Hermes, "<tool_call>\n{\"name\": \"special_function\"}\n</tool_call>").call(SPECIAL, "{}", None),
        // Mistral-Nemo-Instruct-2407
        case("mistral_nemo_content", Mistral, HELLO).content(HELLO),
        case("mistral_nemo_call_id", Mistral, r#"[TOOL_CALLS][{"name": "special_function", "arguments": {"arg1": 1}, "id": "123456789"}]"#)
            .call(SPECIAL, r#"{"arg1":1}"#, Some("123456789")),
        // Mistral-Small-3.2-24B-Instruct-2506
        case("mistral_small_content", Mistral, HELLO).content(HELLO),
        case("mistral_small_call_id", Mistral, r#"[TOOL_CALLS]special_function[CALL_ID]123456789[ARGS]{"arg1": 1}"#)
            .call(SPECIAL, r#"{"arg1":1}"#, Some("123456789")),
        case(
            "mistral_small_parallel_calls",
            Mistral,
            r#"[TOOL_CALLS]special_function[CALL_ID]000000001[ARGS]{"arg1": 1}[TOOL_CALLS]special_function_with_opt[CALL_ID]000000002[ARGS]{"arg1": 1, "arg2": 2}"#,
        )
        .call(SPECIAL, r#"{"arg1": 1}"#, Some("000000001"))
        .call("special_function_with_opt", r#"{"arg1": 1, "arg2": 2}"#, Some("000000002")),
        // Devstral-Small-2507 (Mistral without call ids)
        case("devstral_call", Mistral, r#"[TOOL_CALLS]special_function[ARGS]{"arg1": 1}"#).special(),
        case("devstral_content_then_call", Mistral, format!(r#"{HELLO}[TOOL_CALLS]special_function[ARGS]{{"arg1": 1}}"#)).content(HELLO).special(),
        // Llama-3.1-8B / 3.2-3B / 3.3-70B: content with tools offered, and the JSON calls their
        // templates ask for (llama.cpp's earlier Llama-3.x cases)
        case("llama31_content", Llama3Json, HELLO).content(HELLO),
        case("llama32_content", Llama3Json, HELLO).content(HELLO),
        case("llama33_content", Llama3Json, HELLO).content(HELLO),
        case("llama3_call_parameters", Llama3Json, r#"{"name": "special_function", "parameters": {"arg1": 1}}"#).special(),
        case("llama3_call_typed", Llama3Json, r#"{"type": "function", "name": "special_function", "parameters": {"arg1": 1}}"#).special(),
        case("llama3_call_arguments", Llama3Json, r#"{"name": "special_function", "arguments": {"arg1": 1}}"#).special(),
        case("llama3_python_tag_call", Llama3Json, r#"<|python_tag|>{"name": "special_function", "parameters": {"arg1": 1}}"#).special(),
        case("llama3_json_answer_is_content", Llama3Json, r#"{"answer": 42}"#).content(r#"{"answer": 42}"#),
        case(
            "llama3_two_calls",
            Llama3Json,
            r#"{"name": "special_function", "parameters": {"arg1": 1}}; {"name": "python", "parameters": {"code": "print('hey')"}}"#,
        )
        .special()
        .call("python", r#"{"code": "print('hey')"}"#, None),
        // openai-gpt-oss-120b
        case("gptoss_final", Harmony, format!("<|channel|>final<|message|>{HELLO}")).content(HELLO),
        case("gptoss_commentary", Harmony, format!("<|channel|>commentary<|message|>{HELLO}")).content(HELLO),
        case("gptoss_analysis_final", Harmony, format!("<|channel|>analysis<|message|>{THINKING}<|end|><|start|>assistant<|channel|>final<|message|>{HELLO}"))
            .reasoning(THINKING)
            .content(HELLO),
        case("gptoss_analysis_partial", Harmony, format!("<|channel|>analysis<|message|>{THINKING}")).reasoning(THINKING),
        case("gptoss_call_recipient_in_role", Harmony, " to=functions.special_function<|channel|>analysis<|message|>{\"arg1\": 1}").special(),
        case("gptoss_call_recipient_in_channel", Harmony, "<|channel|>analysis to=functions.special_function<|message|>{\"arg1\": 1}").special(),
        case("gptoss_call_constrain", Harmony, " to=functions.special_function<|channel|>analysis <|constrain|>json<|message|>{\"arg1\": 1}").special(),
        case("gptoss_call_commentary", Harmony, "<|channel|>commentary to=functions.special_function<|message|>{\"arg1\": 1}").special(),
        case(
            "gptoss_analysis_then_call",
            Harmony,
            format!("<|channel|>analysis<|message|>{THINKING}<|end|><|start|>assistant to=functions.special_function<|channel|>analysis<|message|>{{\"arg1\": 1}}"),
        )
        .reasoning(THINKING)
        .special(),
        case(
            "gptoss_complex_edit_call",
            Harmony,
            "<|channel|>analysis<|message|>Thinking about edit...<|end|><|start|>assistant<|channel|>commentary to=functions.edit <|constrain|>json<|message|>{\"oldString\": \"if (part < railCount - 1) {\", \"newString\": \"if (part < 4) {\", \"replaceAll\": false}",
        )
        .reasoning("Thinking about edit...")
        .call("edit", r#"{"oldString": "if (part < railCount - 1) {", "newString": "if (part < 4) {", "replaceAll": false}"#, None),
        case(
            "gptoss_structured_output",
            Harmony,
            r#"<|channel|>analysis<|message|>I need to output the invoice details in JSON<|end|><|start|>assistant<|channel|>final <|constrain|>json<|message|>{"amount": 123.45, "date": "2025-12-03"}"#,
        )
        .reasoning("I need to output the invoice details in JSON")
        .content(r#"{"amount": 123.45, "date": "2025-12-03"}"#),
        case(
            "gptoss_builtin_recipient_in_role",
            Harmony,
            "<|channel|>analysis<|message|>I will execute python to say hello<|end|><|start|>assistant to=container.exec<|channel|>commentary<|message|>python3 -c 'print(\"hello\")'",
        )
        .reasoning("I will execute python to say hello"),
        case(
            "gptoss_builtin_recipient_in_channel",
            Harmony,
            "<|channel|>analysis<|message|>I will execute python to say hello<|end|><|start|>assistant<|channel|>commentary to=python <|constrain|>code<|message|>print(\"hello\")",
        )
        .reasoning("I will execute python to say hello"),
        case(
            "gptoss_commentary_to_assistant_before_reasoning",
            Harmony,
            format!("<|channel|>commentary to=assistant<|channel|>analysis<|message|>{THINKING}<|end|><|start|>assistant<|channel|>final<|message|>{HELLO}"),
        )
        .reasoning(THINKING)
        .content(HELLO),
        case(
            "gptoss_commentary_to_assistant_before_final",
            Harmony,
            format!("<|channel|>analysis<|message|>{THINKING}<|end|><|start|>assistant<|channel|>commentary to=assistant<|channel|>final<|message|>{HELLO}"),
        )
        .reasoning(THINKING)
        .content(HELLO),
        // Malformed output: the raw text as content, with a reason.
        case("hermes_truncated_json", Hermes, "<tool_call>\n{\"name\": \"special_function\", \"arguments\": {\"arg").malformed(),
        case("hermes_missing_end_tag", Hermes, "<tool_call>\n{\"name\": \"special_function\", \"arguments\": {\"arg1\": 1}}").malformed(),
        case("hermes_unknown_function", Hermes, "<tool_call>\n{\"name\": \"rm_rf\", \"arguments\": {}}\n</tool_call>").malformed(),
        case("hermes_not_json", Hermes, "Sure.<tool_call>\nnot json\n</tool_call>").malformed(),
        case("hermes_arguments_not_object", Hermes, "<tool_call>\n{\"name\": \"special_function\", \"arguments\": [1]}\n</tool_call>").malformed(),
        case("mistral_truncated_args", Mistral, r#"[TOOL_CALLS]special_function[ARGS]{"arg1": "#).malformed(),
        case("mistral_nemo_unterminated_array", Mistral, r#"[TOOL_CALLS][{"name": "special_function", "arguments": {"arg1": 1}, "id": "123456789"}"#)
            .malformed(),
        case("mistral_no_name", Mistral, r#"[TOOL_CALLS][ARGS]{"arg1": 1}"#).malformed(),
        case("llama3_truncated_call", Llama3Json, r#"{"name": "special_function", "parameters": {"arg1": 1"#).malformed(),
        case("gptoss_unknown_function", Harmony, "<|channel|>commentary to=functions.rm_rf<|message|>{}").malformed(),
        case("gptoss_args_not_json", Harmony, "<|channel|>commentary to=functions.special_function<|message|>arg1=1").malformed(),
        case("gptoss_ends_in_header", Harmony, "<|channel|>analysis<|message|>hm<|end|><|start|>assistant<|channel|>commentary to=functions.special_function").malformed(),
    ]
}

/// What the events of one run add up to, and the final parse.
struct Run {
    content: String,
    reasoning: String,
    /// (id, name, arguments) from CallStart / CallArgs.
    calls: Vec<(String, String, String)>,
    parsed: Parsed,
}

fn run(family: Family, pieces: &[&str]) -> Run {
    let mut p = family.parser(Some(TOOLS.iter().map(|s| s.to_string()).collect()));
    let mut events = vec![];
    for piece in pieces {
        events.extend(p.feed(piece));
    }
    let (tail, parsed) = p.finish();
    events.extend(tail);
    let mut r = Run { content: String::new(), reasoning: String::new(), calls: vec![], parsed };
    for e in events {
        match e {
            ToolEvent::Content(t) => r.content.push_str(&t),
            ToolEvent::Reasoning(t) => r.reasoning.push_str(&t),
            ToolEvent::CallStart { index, id, name } => {
                assert_eq!(index, r.calls.len(), "calls start in order");
                r.calls.push((id, name, String::new()));
            }
            ToolEvent::CallArgs { index, delta } => r.calls[index].2.push_str(&delta),
        }
    }
    r
}

/// `s` cut into pieces: every char, or at random char boundaries (`seed`).
fn chars(s: &str) -> Vec<&str> {
    s.char_indices().map(|(i, c)| &s[i..i + c.len_utf8()]).collect()
}

fn random_pieces(s: &str, seed: u64) -> Vec<&str> {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let mut out = vec![];
    let mut at = 0;
    while at < s.len() {
        let mut end = (at + rng.random_range(1..=8)).min(s.len());
        while !s.is_char_boundary(end) {
            end += 1;
        }
        out.push(&s[at..end]);
        at = end;
    }
    out
}

fn json(s: &str) -> Value {
    serde_json::from_str(s).unwrap_or_else(|e| panic!("not JSON ({e}): {s}"))
}

/// Every mismatch of `r` (from `how` deltas) against `c`.
fn check(c: &Case, r: &Run, how: &str) -> Vec<String> {
    let mut bad = vec![];
    let mut fail = |what: String| bad.push(format!("{} ({how}): {what}", c.name));
    let p = &r.parsed;
    if p.malformed.is_some() != c.malformed {
        fail(format!("malformed = {:?}", p.malformed));
    }
    if p.content != c.content {
        fail(format!("content {:?}, expected {:?}", p.content, c.content));
    }
    if p.reasoning != c.reasoning {
        fail(format!("reasoning {:?}, expected {:?}", p.reasoning, c.reasoning));
    }
    if p.calls.len() != c.calls.len() {
        fail(format!("{} calls, expected {}: {:?}", p.calls.len(), c.calls.len(), p.calls));
    } else {
        for (got, (name, args, id)) in p.calls.iter().zip(&c.calls) {
            if got.name != *name || json(&got.arguments) != json(args) {
                fail(format!("call {got:?}, expected {name} {args}"));
            }
            match id {
                Some(id) if got.id != *id => fail(format!("call id {:?}, expected {id:?}", got.id)),
                None if got.id.is_empty() => fail("a call without an id".into()),
                None if c.family == Family::Mistral && !(got.id.len() == 9 && got.id.chars().all(|c| c.is_ascii_alphanumeric())) => {
                    fail(format!("Mistral call id {:?} is not 9 letters or digits (its templates refuse it)", got.id))
                }
                _ => {}
            }
        }
    }
    if c.malformed {
        if r.calls.is_empty() && r.reasoning.is_empty() && r.content != c.input {
            fail(format!("streamed content {:?} is not the raw text", r.content));
        }
    } else {
        // The streamed events add up to the final message.
        let streamed: Vec<(String, String, String)> = p.calls.iter().map(|t| (t.id.clone(), t.name.clone(), t.arguments.clone())).collect();
        if r.content != p.content || r.reasoning != p.reasoning || r.calls != streamed {
            fail(format!("streamed {:?} / {:?} / {:?} differ from the final message", r.content, r.reasoning, r.calls));
        }
    }
    bad
}

#[test]
fn llama_cpp_cases_whole_and_in_deltas() {
    let mut bad = vec![];
    let all = cases();
    for c in &all {
        bad.extend(check(c, &run(c.family, &[&c.input]), "whole"));
        bad.extend(check(c, &run(c.family, &chars(&c.input)), "1-char deltas"));
        for seed in 0..16 {
            bad.extend(check(c, &run(c.family, &random_pieces(&c.input, seed)), &format!("random deltas, seed {seed}")));
        }
    }
    assert!(bad.is_empty(), "{} of {} cases failed:\n{}", bad.len(), all.len(), bad.join("\n"));
}

#[test]
fn arguments_stream_as_prefixes_of_the_final_text() {
    // A call cut off in its arguments (llama.cpp's message_assist_call_cutoff_args): the
    // streamed arguments so far are `{"arg`, and every piece extends the last.
    let mut p = Family::Hermes.parser(None);
    let mut args = String::new();
    let mut names = vec![];
    for piece in chars("<tool_call>\n{\"name\": \"special_function\", \"arguments\": {\"arg") {
        for e in p.feed(piece) {
            match e {
                ToolEvent::CallStart { name, .. } => names.push(name),
                ToolEvent::CallArgs { delta, .. } => args.push_str(&delta),
                e => panic!("unexpected {e:?}"),
            }
        }
    }
    assert_eq!(names, ["special_function"]);
    assert_eq!(args, "{\"arg");
    let (_, parsed) = p.finish();
    assert!(parsed.malformed.as_deref().is_some_and(|r| r.contains("unterminated")), "{parsed:?}");
}

#[test]
fn a_call_is_not_announced_before_its_name_is_whole_nor_when_unknown() {
    let mut p = Family::Hermes.parser(Some(vec!["special_function".into()]));
    assert!(p.feed("<tool_call>\n{\"name\": \"special_fun").is_empty());
    let ev = p.feed("ction\", \"arguments\": {");
    assert!(matches!(&ev[0], ToolEvent::CallStart { name, .. } if name == "special_function"), "{ev:?}");
    let mut p = Family::Hermes.parser(Some(vec!["special_function".into()]));
    assert!(p.feed("<tool_call>\n{\"name\": \"other\", \"arguments\": {\"a\": 1}}").is_empty());
}

#[test]
fn markers_split_across_deltas_are_not_content() {
    for (family, text) in [
        (Family::Hermes, "Hi<tool_call>\n{\"name\": \"special_function\", \"arguments\": {}}\n</tool_call>"),
        (Family::Mistral, "Hi[TOOL_CALLS]special_function[ARGS]{}"),
        (Family::Harmony, "<|channel|>final<|message|>Hi<|end|><|start|>assistant<|channel|>commentary to=functions.special_function<|message|>{}"),
    ] {
        let r = run(family, &chars(text));
        assert_eq!(r.content, "Hi", "{family:?}");
        assert_eq!(r.calls.len(), 1, "{family:?}");
    }
}

#[test]
fn family_of_real_templates() {
    let read = |p: &str| std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{p}: {e}"));
    let ours = |f: &str| read(&format!("{}/tests/fixtures/templates/{f}", env!("CARGO_MANIFEST_DIR")));
    let reference = |f: &str| read(&format!("{}/../reference/tests/fixtures/templates/{f}", env!("CARGO_MANIFEST_DIR")));
    let cases = [
        (ours("NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja"), Some(Family::Hermes)),
        (ours("NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja"), Some(Family::Hermes)),
        (reference("Qwen-Qwen2.5-7B-Instruct.jinja"), Some(Family::Hermes)),
        (ours("Qwen-Qwen3-0.6B.jinja"), Some(Family::Hermes)),
        (reference("meta-llama-Llama-3.1-8B-Instruct.jinja"), Some(Family::Llama3Json)),
        (ours("meta-llama-Llama-3.2-3B-Instruct.jinja"), Some(Family::Llama3Json)),
        (ours("meta-llama-Llama-3.3-70B-Instruct.jinja"), Some(Family::Llama3Json)),
        (reference("mistralai-Mistral-Nemo-Instruct-2407.jinja"), Some(Family::Mistral)),
        (ours("Mistral-Small-3.2-24B-Instruct-2506.jinja"), Some(Family::Mistral)),
        (ours("unsloth-mistral-Devstral-Small-2507.jinja"), Some(Family::Mistral)),
        (ours("openai-gpt-oss-120b.jinja"), Some(Family::Harmony)),
        (ours("google-gemma-2-2b-it.jinja"), None),
    ];
    for (i, (t, want)) in cases.iter().enumerate() {
        assert_eq!(Family::detect("llama", Some(t)), *want, "template {i}");
    }
    assert_eq!(Family::detect("gpt-oss", None), Some(Family::Harmony));
    assert_eq!(Family::detect("llama", None), None);
}

/// Pieces arbitrary text is made of: every family's markers, JSON fragments, words.
const PIECES: [&str; 24] = [
    "<tool_call>",
    "</tool_call>",
    "<think>",
    "</think>",
    "[TOOL_CALLS]",
    "[ARGS]",
    "[CALL_ID]",
    "<|python_tag|>",
    "<|channel|>",
    "<|message|>",
    "<|start|>",
    "<|end|>",
    "<|constrain|>",
    " to=functions.special_function",
    "analysis",
    "final",
    "{\"name\": \"special_function\", ",
    "\"arguments\": ",
    "{\"arg1\": 1}",
    "}",
    "[",
    "\"",
    "\n",
    "é",
];

fn family() -> impl Strategy<Value = Family> {
    prop_oneof![Just(Family::Harmony), Just(Family::Llama3Json), Just(Family::Hermes), Just(Family::Mistral)]
}

fn text() -> impl Strategy<Value = String> {
    prop_oneof![proptest::collection::vec(proptest::sample::select(&PIECES[..]), 0..24).prop_map(|v| v.concat()), ".{0,64}",]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// Whatever the text and its deltas: no panic; the final parse is the same for any deltas;
    /// well-formed, the events add up to it; malformed, its content is the raw text.
    #[test]
    fn arbitrary_text_never_panics(f in family(), t in text(), seed in 0u64..1000) {
        let whole = run(f, &[&t]);
        let pieces = if seed % 4 == 0 { chars(&t) } else { random_pieces(&t, seed) };
        let split = run(f, &pieces);
        let strip = |p: &Parsed| (p.content.clone(), p.reasoning.clone(), p.calls.iter().map(|c| (c.name.clone(), c.arguments.clone())).collect::<Vec<_>>(), p.malformed.clone());
        prop_assert_eq!(strip(&whole.parsed), strip(&split.parsed));
        for r in [&whole, &split] {
            let p = &r.parsed;
            if p.malformed.is_some() {
                prop_assert_eq!(&p.content, &t);
                prop_assert!(p.calls.is_empty());
            } else {
                let streamed: Vec<_> = p.calls.iter().map(|c| (c.id.clone(), c.name.clone(), c.arguments.clone())).collect();
                prop_assert_eq!(&r.content, &p.content);
                prop_assert_eq!(&r.reasoning, &p.reasoning);
                prop_assert_eq!(&r.calls, &streamed);
            }
        }
    }
}

#[test]
fn mistral_call_ids_go_back_through_mistral_nemo_s_template() {
    use reference::chat::{ChatTemplate, Message, ToolCall};
    let path = format!("{}/../reference/tests/fixtures/templates/mistralai-Mistral-Nemo-Instruct-2407.jinja", env!("CARGO_MANIFEST_DIR"));
    let src = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let t = ChatTemplate::new(src, path, "<s>", "</s>").unwrap();
    let r = run(Family::Mistral, &[r#"[TOOL_CALLS]special_function[ARGS]{"arg1": 1}"#]);
    let call = &r.parsed.calls[0];
    let msgs = [
        Message::user("Call it."),
        Message::tool_calls("", vec![ToolCall::new(Some(call.id.clone()), call.name.clone(), call.arguments.clone())]),
        Message::tool_result(call.id.clone(), call.name.clone(), "2"),
    ];
    let out = t.render(&msgs, true).unwrap_or_else(|e| panic!("id {:?}: {e}", call.id));
    assert!(out.contains(&format!("\"call_id\": \"{}\"", call.id)), "{out}");
}
