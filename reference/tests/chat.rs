//! Chat template from the real SmolLM2 GGUF against the oracle prompt, plus HF conventions.

mod common;
use common::oracle_dir;

use std::time::{Duration, Instant};

use reference::chat::{ChatTemplate, Message, RenderLimits};
use reference::gguf::{GgufFile, GgufWriter, Value as GgufValue};
use reference::tokenizer::Tokenizer;

fn model() -> GgufFile {
    let path = reference::fetch::default_model(&mut |m| eprintln!("{m}")).unwrap();
    GgufFile::open(path).unwrap()
}

#[test]
fn gguf_template_matches_oracle_prompt_and_ids() {
    let gguf = model();
    let tmpl = ChatTemplate::from_gguf(&gguf).unwrap().expect("SmolLM2 GGUF has a chat template");
    let text = tmpl.render(&[Message::user("What is the capital of France?")], true).unwrap();
    let path = oracle_dir().join("chat.json");
    let oracle: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert_eq!(text, oracle["text"].as_str().unwrap());
    let want: Vec<u32> = oracle["ids"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as u32).collect();
    let tok = Tokenizer::from_gguf(&gguf).unwrap();
    assert_eq!(tok.encode(&text, false).unwrap(), want);
}

#[test]
fn system_message_replaces_default_and_no_generation_prompt() {
    let tmpl = ChatTemplate::from_gguf(&model()).unwrap().unwrap();
    let msgs = [Message::system("Be terse."), Message::user("Hi"), Message::assistant("Hello.")];
    let text = tmpl.render(&msgs, false).unwrap();
    assert_eq!(text, "<|im_start|>system\nBe terse.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello.<|im_end|>\n");
}

#[test]
fn hf_conventions() {
    let src = "{% for m in messages %}{% if m.role not in ['user', 'assistant'] %}\
               {{ raise_exception('bad role ' + m.role) }}{% endif %}\
               {{ bos_token }}{{ m.content.strip().upper() }}{% if m.content.startswith(' x') %}!{% endif %}\
               {{ eos_token }}{% endfor %}";
    let t = ChatTemplate::new(src, "test", "<s>", "</s>").unwrap();
    assert_eq!(t.render(&[Message::user(" xy ")], false).unwrap(), "<s>XY!</s>");
    let err = t.render(&[Message::new("tool", "z")], false).unwrap_err();
    assert!(matches!(err, reference::Error::Template(_)), "{err:?}");
    assert!(err.to_string().contains("bad role tool"), "{err}");
    // HF renders with trim_blocks + lstrip_blocks.
    let t = ChatTemplate::new("  {% if true %}\nA{% endif %}\n", "test", "", "").unwrap();
    assert_eq!(t.render(&[], false).unwrap(), "A");
}

#[test]
fn syntax_error_is_template_error() {
    let err = ChatTemplate::new("{% for %}", "broken", "", "").unwrap_err();
    assert!(matches!(err, reference::Error::Template(_)), "{err:?}");
    assert!(err.to_string().contains("broken"), "{err}");
}

#[test]
fn hf_dir_list_form_picks_default() {
    let d = std::env::temp_dir().join(format!("tandem-chat-test-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    let cfg = serde_json::json!({
        "bos_token": {"content": "<s>", "special": true},
        "eos_token": "</s>",
        "chat_template": [
            {"name": "tool_use", "template": "TOOLS"},
            {"name": "default", "template": "{{ bos_token }}{% for m in messages %}{{ m.content }}{% endfor %}{{ eos_token }}"}
        ]
    });
    std::fs::write(d.join("tokenizer_config.json"), cfg.to_string()).unwrap();
    let t = ChatTemplate::from_hf_dir(&d).unwrap().unwrap();
    assert_eq!(t.render(&[Message::user("hi")], true).unwrap(), "<s>hi</s>");
    let empty = d.join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    assert!(ChatTemplate::from_hf_dir(&empty).unwrap().is_none());
}

/// Templates that try to run without bound, each guarded by a conversation longer than the
/// load-time check renders (so they load, and fail when a request renders them).
fn hostile() -> Vec<(&'static str, String)> {
    let chained: String = (1..=40).map(|i| format!("{{% set s{i} = s{p} ~ s{p} %}}", p = i - 1)).collect();
    vec![
        // 40 doublings in a loop: 2^40 bytes (the abort in minijinja's string_concat).
        ("doubling", "{% set ns = namespace(s='x') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s }}".into()),
        // The same without a loop: 40 statements, far too few instructions for fuel alone.
        ("chained doubling", format!("{{% set s0 = 'x' %}}{chained}{{{{ s40 }}}}")),
        (
            "replace doubling",
            "{% set ns = namespace(s='xx') %}{% for i in range(40) %}{% set ns.s = ns.s.replace('x', 'xx') %}{% endfor %}{{ ns.s }}".into(),
        ),
        ("repeat then concat", "{% set a = 'x' * 100000000 %}{% set b = a ~ a %}{{ b }}".into()),
        ("join", "{% set sep = 'x' * 1000000 %}{{ range(100000)|join(sep) }}".into()),
        // Lists doubled by `+`: lazy joins until the chain is deep, then copied whole (the
        // vendored minijinja charges fuel for the slots before that copy).
        ("list doubling", "{% set ns = namespace(l=[1]) %}{% for i in range(40) %}{% set ns.l = ns.l + ns.l %}{% endfor %}{{ ns.l|length }}".into()),
        ("list doubling printed", "{% set ns = namespace(l=[1]) %}{% for i in range(40) %}{% set ns.l = ns.l + ns.l %}{% endfor %}{{ ns.l }}".into()),
        // A safe string `+` a plain one escapes the plain one (as Python's Markup): up to five
        // bytes a byte, charged so before the copy.
        (
            "markup escaping doubling",
            "{% set ns = namespace(s='\"') %}{% for i in range(40) %}{% set ns.s = ('x'|safe + (ns.s ~ ns.s)) ~ '' %}{% endfor %}{{ ns.s }}".into(),
        ),
        // 10^10 iterations, with and without output.
        ("nested range", "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}".into()),
        ("nested range output", "{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}{% endfor %}".into()),
    ]
}

/// `body` only when the conversation has more than two messages, else a plain prompt.
fn guarded(body: &str) -> String {
    format!("{{% if messages|length > 2 %}}{body}{{% endif %}}{{% for m in messages %}}{{{{ m.content }}}}{{% endfor %}}")
}

/// Generous for a loaded 2-core machine: the budget runs out in well under a second.
const QUICK: Duration = Duration::from_secs(10);

fn three_turns() -> Vec<Message> {
    vec![Message::user("a"), Message::assistant("b"), Message::user("c")]
}

fn assert_limit(err: reference::Error, origin: &str, what: &str) {
    assert!(matches!(err, reference::Error::TemplateLimit(_)), "{what}: {err:?}");
    let msg = err.to_string();
    assert!(msg.contains(origin), "{what}: {msg}");
    assert!(msg.contains("fuel") || msg.contains("output passes"), "{what}: {msg}");
}

#[test]
fn hostile_templates_fail_quickly_when_rendered() {
    for (what, body) in hostile() {
        let t = ChatTemplate::new(guarded(&body), "hostile.gguf: tokenizer.chat_template", "", "").unwrap();
        assert_eq!(t.render(&[Message::user("hi")], true).unwrap(), "hi", "{what}");
        let t0 = Instant::now();
        let err = t.render(&three_turns(), true).unwrap_err();
        assert!(t0.elapsed() < QUICK, "{what}: took {:?}", t0.elapsed());
        assert_limit(err, "hostile.gguf: tokenizer.chat_template", what);
    }
}

#[test]
fn hostile_templates_are_refused_at_load() {
    for (what, body) in hostile() {
        let t0 = Instant::now();
        let err = ChatTemplate::new(body.clone(), "model.gguf: tokenizer.chat_template", "", "").unwrap_err();
        assert!(t0.elapsed() < QUICK, "{what}: took {:?}", t0.elapsed());
        assert_limit(err, "model.gguf: tokenizer.chat_template", what);
        // Also when it only misbehaves with a system message.
        let sys_only = format!("{{% if messages[0].role == 'system' %}}{body}{{% endif %}}");
        let err = ChatTemplate::new(sys_only, "model.gguf: tokenizer.chat_template", "", "").unwrap_err();
        assert_limit(err, "model.gguf: tokenizer.chat_template", what);
    }
}

#[test]
fn hostile_templates_in_tokenizer_config_are_refused_at_load() {
    let d = std::env::temp_dir().join(format!("tandem-chat-hostile-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    let path = d.join("tokenizer_config.json");
    for (what, body) in hostile() {
        std::fs::write(&path, serde_json::json!({ "chat_template": body }).to_string()).unwrap();
        let t0 = Instant::now();
        let err = ChatTemplate::from_hf_dir(&d).unwrap_err();
        assert!(t0.elapsed() < QUICK, "{what}: took {:?}", t0.elapsed());
        assert_limit(err, &format!("{}: chat_template", path.display()), what);
        // Guarded: loads, then fails the request that trips it.
        std::fs::write(&path, serde_json::json!({ "chat_template": guarded(&body) }).to_string()).unwrap();
        let t = ChatTemplate::from_hf_dir(&d).unwrap().unwrap();
        assert_limit(t.render(&three_turns(), true).unwrap_err(), "tokenizer_config.json: chat_template", what);
    }
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn a_template_refusing_system_messages_still_loads() {
    let src = "{% if messages[0].role == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}\
               {% for m in messages %}{{ m.content }}{% endfor %}";
    let t = ChatTemplate::new(src, "t", "", "").unwrap();
    let err = t.render(&[Message::system("s"), Message::user("u")], true).unwrap_err();
    assert!(matches!(err, reference::Error::Template(_)), "{err:?}");
}

#[test]
fn limits_grow_with_the_conversation() {
    // A long conversation through a template that copies it a few times renders.
    let src = "{% set ns = namespace(p='') %}{% for m in messages %}{% set ns.p = ns.p ~ '<|' ~ m.role ~ '|>' ~ m.content|trim ~ '\n' %}{% endfor %}{{ ns.p }}";
    let t = ChatTemplate::new(src, "t", "", "").unwrap();
    let msgs: Vec<Message> = (0..200).map(|i| Message::new(if i % 2 == 0 { "user" } else { "assistant" }, "w ".repeat(2500))).collect();
    let text = t.render(&msgs, true).unwrap();
    assert_eq!(text.len(), msgs.iter().map(|m| m.role.len() + m.content.trim().len() + 5).sum::<usize>());
    let small = RenderLimits::for_messages(&[Message::user("hi")]);
    let big = RenderLimits::for_messages(&msgs);
    assert!(big.fuel > small.fuel && big.output > small.output, "{small:?} {big:?}");
}

/// `turns` user / assistant exchanges of about `size` bytes each, after a system message, ending
/// with a user message.
fn conversation(turns: usize, size: usize) -> Vec<Message> {
    let mut msgs = vec![Message::system("You are a helpful assistant. ".repeat(size / 30 + 1))];
    for i in 0..turns {
        msgs.push(Message::user(format!("Question {i}: {}", "why is the sky blue? ".repeat(size / 21 + 1))));
        msgs.push(Message::assistant(format!("Answer {i}: {}", "Rayleigh scattering. ".repeat(size / 21 + 1))));
    }
    msgs.push(Message::user("Thanks."));
    msgs
}

/// Real templates (llama.cpp's test set, a few copied to `fixtures/templates`, the heaviest
/// among them) render a short conversation and a long one (100 turns of 2 KB: 400 KB) within
/// the limits.
#[test]
fn real_templates_fit_the_limits() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/templates");
    let mut n = 0;
    for e in std::fs::read_dir(&dir).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_none_or(|x| x != "jinja") {
            continue;
        }
        let src = std::fs::read_to_string(&p).unwrap();
        let t = ChatTemplate::new(src, p.display().to_string(), "<s>", "</s>").unwrap();
        for (turns, size) in [(10, 200), (100, 2000)] {
            let msgs = conversation(turns, size);
            let text = t.render(&msgs, true).unwrap_or_else(|e| panic!("{}: {turns} turns: {e}", p.display()));
            let last = format!("Question {}", turns - 1);
            assert!(text.contains(&last) && text.contains("Thanks."), "{}: {text}", p.display());
        }
        n += 1;
    }
    assert_eq!(n, 8, "templates in {}", dir.display());
}

#[test]
fn hostile_templates_in_a_gguf_are_refused_at_load() {
    let d = std::env::temp_dir().join(format!("tandem-chat-gguf-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    let path = d.join("hostile.gguf");
    for (what, body) in hostile() {
        let mut w = GgufWriter::new();
        w.kv("general.architecture", GgufValue::String("llama".into())).kv("tokenizer.chat_template", GgufValue::String(body));
        w.write(&path).unwrap();
        let t0 = Instant::now();
        let err = ChatTemplate::from_gguf(&GgufFile::open(&path).unwrap()).unwrap_err();
        assert!(t0.elapsed() < QUICK, "{what}: took {:?}", t0.elapsed());
        assert_limit(err, &format!("{}: tokenizer.chat_template", path.display()), what);
    }
    std::fs::remove_dir_all(&d).unwrap();
}
