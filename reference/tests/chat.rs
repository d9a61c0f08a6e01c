//! Chat template from the real SmolLM2 GGUF against the oracle prompt, plus HF conventions.

mod common;
use common::oracle_dir;

use reference::chat::{ChatTemplate, Message};
use reference::gguf::GgufFile;
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
