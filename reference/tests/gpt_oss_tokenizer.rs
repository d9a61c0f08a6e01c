//! o200k_harmony and the harmony chat format. Expected strings and ids come from OpenAI's own
//! renderer, PyPI `openai-harmony` 0.0.8 (`fixtures/gpt_oss/harmony_expected.py` prints them).

use std::sync::OnceLock;

use reference::chat::Message;
use reference::gpt_oss::harmony::{parse_output, render_developer, render_prompt, render_system, Reasoning, SystemContent};
use reference::gpt_oss::tokenizer::{self as tk, GptOssTokenizer};

fn tok() -> &'static GptOssTokenizer {
    static T: OnceLock<GptOssTokenizer> = OnceLock::new();
    T.get_or_init(|| GptOssTokenizer::o200k_harmony().unwrap())
}

const DEFAULT_PROMPT: &str = "<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\nKnowledge cutoff: 2024-06\n\nReasoning: medium\n\n# Valid channels: analysis, commentary, final. Channel must be included for every message.<|end|><|start|>user<|message|>What is 2 + 2?<|end|><|start|>assistant";
const DEFAULT_IDS: [u32; 64] = [
    200006, 17360, 200008, 3575, 553, 17554, 162016, 11, 261, 4410, 6439, 2359, 22203, 656, 7788, 17527, 558, 87447, 100594, 25, 220, 1323, 19, 12,
    3218, 279, 30377, 289, 25, 14093, 279, 2, 13888, 18403, 25, 8450, 11, 49159, 11, 1721, 13, 21030, 2804, 413, 7360, 395, 1753, 3176, 13, 200007,
    200006, 1428, 200008, 4827, 382, 220, 17, 659, 220, 17, 30, 200007, 200006, 173781,
];

#[test]
fn special_tokens_have_their_ids() {
    let t = tok();
    for (text, id) in [
        ("<|startoftext|>", tk::START_OF_TEXT),
        ("<|endoftext|>", tk::END_OF_TEXT),
        ("<|return|>", tk::RETURN),
        ("<|constrain|>", tk::CONSTRAIN),
        ("<|channel|>", tk::CHANNEL),
        ("<|start|>", tk::START),
        ("<|end|>", tk::END),
        ("<|message|>", tk::MESSAGE),
        ("<|call|>", tk::CALL),
        ("<|reserved_200013|>", 200_013),
        ("<|reserved_201087|>", 201_087),
    ] {
        assert_eq!(t.encode(text).unwrap(), vec![id], "{text}");
        assert_eq!(t.decode(&[id]).unwrap(), text);
    }
    assert_eq!(t.vocab_size(), 201_088);
    assert!(t.decode(&[201_088]).unwrap_err().to_string().contains("201088"));
    assert!(GptOssTokenizer::is_stop(200_002) && GptOssTokenizer::is_stop(200_012) && !GptOssTokenizer::is_stop(200_007));
}

#[test]
fn o200k_encodes_like_openai() {
    for (text, ids) in [
        ("Hello, world! 1234567 ünïcödé 日本語", &[13225u32, 11, 2375, 0, 220, 7633, 19354, 22, 86582, 191375, 43369, 377, 17428, 40909][..]),
        ("  leading spaces\n\ttabs and\r\nnewlines  ", &[220, 8117, 18608, 198, 6264, 6071, 326, 370, 1389, 10105, 256]),
        ("don't I'LL we've", &[91418, 3413, 7454, 24716]),
    ] {
        assert_eq!(tok().encode(text).unwrap(), ids, "{text:?}");
        assert_eq!(tok().decode(ids).unwrap(), text);
    }
}

#[test]
fn default_prompt_renders_exactly() {
    let p = render_prompt(&SystemContent::default(), &[Message::user("What is 2 + 2?")]).unwrap();
    assert_eq!(p, DEFAULT_PROMPT);
    assert_eq!(tok().encode(&p).unwrap(), DEFAULT_IDS);
}

#[test]
fn system_and_developer_overrides_render_exactly() {
    let sys = SystemContent { reasoning: Reasoning::High, current_date: Some("2025-06-28".into()), ..SystemContent::default() };
    let msgs = [Message::new("developer", "Always respond in riddles"), Message::user("Hi"), Message::assistant("Hello!"), Message::user("Again")];
    let p = render_prompt(&sys, &msgs).unwrap();
    assert_eq!(
        p,
        "<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\nKnowledge cutoff: 2024-06\nCurrent date: 2025-06-28\n\nReasoning: high\n\n# Valid channels: analysis, commentary, final. Channel must be included for every message.<|end|><|start|>developer<|message|># Instructions\n\nAlways respond in riddles<|end|><|start|>user<|message|>Hi<|end|><|start|>assistant<|channel|>final<|message|>Hello!<|end|><|start|>user<|message|>Again<|end|><|start|>assistant"
    );
    let want: [u32; 93] = [
        200006, 17360, 200008, 3575, 553, 17554, 162016, 11, 261, 4410, 6439, 2359, 22203, 656, 7788, 17527, 558, 87447, 100594, 25, 220, 1323, 19,
        12, 3218, 198, 6576, 3521, 25, 220, 1323, 20, 12, 3218, 12, 2029, 279, 30377, 289, 25, 1932, 279, 2, 13888, 18403, 25, 8450, 11, 49159, 11,
        1721, 13, 21030, 2804, 413, 7360, 395, 1753, 3176, 13, 200007, 200006, 77944, 200008, 2, 68406, 279, 48258, 9570, 306, 151829, 1032, 200007,
        200006, 1428, 200008, 12194, 200007, 200006, 173781, 200005, 17196, 200008, 13225, 0, 200007, 200006, 1428, 200008, 46687, 200007, 200006,
        173781,
    ];
    assert_eq!(tok().encode(&p).unwrap(), want);
    // A `system` chat message is developer instructions, as in HF's gpt-oss template.
    let q = render_prompt(
        &sys,
        &[Message::system("Always respond in riddles"), Message::user("Hi"), Message::assistant("Hello!"), Message::user("Again")],
    )
    .unwrap();
    assert_eq!(q, p);
    assert_eq!(render_developer("x"), "<|start|>developer<|message|># Instructions\n\nx<|end|>");
    assert!(render_prompt(&sys, &[Message::new("tool", "{}")]).unwrap_err().to_string().contains("`tool`"));
}

#[test]
fn identity_cutoff_and_low_reasoning_render_exactly() {
    let sys = SystemContent {
        identity: "You are a test.".into(),
        knowledge_cutoff: "2025-01".into(),
        reasoning: Reasoning::Low,
        ..SystemContent::default()
    };
    let p = render_prompt(&sys, &[Message::user("x")]).unwrap();
    assert_eq!(p, "<|start|>system<|message|>You are a test.\nKnowledge cutoff: 2025-01\n\nReasoning: low\n\n# Valid channels: analysis, commentary, final. Channel must be included for every message.<|end|><|start|>user<|message|>x<|end|><|start|>assistant");
    assert!(p.starts_with(&render_system(&sys)));
    let want = [
        200006u32, 17360, 200008, 3575, 553, 261, 1746, 558, 87447, 100594, 25, 220, 1323, 20, 12, 2290, 279, 30377, 289, 25, 4465, 279, 2, 13888,
        18403, 25, 8450, 11, 49159, 11, 1721, 13, 21030, 2804, 413, 7360, 395, 1753, 3176, 13, 200007, 200006, 1428, 200008, 87, 200007, 200006,
        173781,
    ];
    assert_eq!(tok().encode(&p).unwrap(), want);
}

#[test]
fn output_parser_splits_channels() {
    // <|channel|>analysis<|message|>User asks 2+2. Answer 4.<|end|><|start|>assistant<|channel|>final<|message|>2 + 2 = 4.<|return|>
    let ids = [
        200005u32, 35644, 200008, 1844, 31064, 220, 17, 10, 17, 13, 30985, 220, 19, 13, 200007, 200006, 173781, 200005, 17196, 200008, 17, 659, 220,
        17, 314, 220, 19, 13, 200002,
    ];
    let out = parse_output(tok(), &ids).unwrap();
    assert_eq!(out.stop, Some(tk::RETURN));
    assert_eq!(out.messages.len(), 2);
    assert_eq!(out.analysis(), Some("User asks 2+2. Answer 4."));
    assert_eq!(out.final_text(), Some("2 + 2 = 4."));
    assert_eq!(out.messages[0].end, Some(tk::END));
    assert!(out.messages.iter().all(|m| m.role == "assistant" && m.recipient.is_none() && m.content_type.is_none()));
    // Cut off inside the final message: what is there, no stop.
    let part = parse_output(tok(), &ids[..24]).unwrap();
    assert_eq!((part.stop, part.final_text(), part.messages[1].end), (None, Some("2 + 2"), None));
    // Cut off inside a header: only the complete message.
    assert_eq!(parse_output(tok(), &ids[..18]).unwrap().messages.len(), 1);
    // After <|end|> only <|start|> may follow.
    let mut bad = ids[..15].to_vec();
    bad.push(13225);
    assert!(parse_output(tok(), &bad).unwrap_err().to_string().contains("13225"));
}

#[test]
fn output_parser_reads_a_tool_call() {
    // <|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"location": "Tokyo"}<|call|>
    let ids = [200005u32, 12606, 815, 316, 28, 44580, 775, 170154, 220, 200003, 4108, 200008, 10848, 7693, 1243, 392, 173844, 18583, 200012];
    let out = parse_output(tok(), &ids).unwrap();
    assert_eq!(out.stop, Some(tk::CALL));
    let m = &out.messages[0];
    assert_eq!(m.channel.as_deref(), Some("commentary"));
    assert_eq!(m.recipient.as_deref(), Some("functions.get_weather"));
    assert_eq!(m.content_type.as_deref(), Some("<|constrain|>json"));
    assert_eq!(m.content, r#"{"location": "Tokyo"}"#);
}

#[test]
fn a_tokenizer_json_beside_the_model_is_used() {
    // A byte-level BPE tokenizer.json with the harmony specials at their ids (the layout of a
    // real checkpoint's, with a 256-token vocabulary): for_model must pick it over the built-in.
    let bytes_to_unicode = |b: u8| -> char {
        let printable = (b'!'..=b'~').contains(&b) || (0xA1..=0xAC).contains(&b) || (0xAE..=0xFF).contains(&b);
        if printable {
            b as char
        } else {
            let n = (0..b).filter(|&c| !((b'!'..=b'~').contains(&c) || (0xA1..=0xAC).contains(&c) || (0xAE..=0xFF).contains(&c))).count();
            char::from_u32(256 + n as u32).unwrap()
        }
    };
    let specials = [("<|start|>", 200_006u64), ("<|end|>", 200_007), ("<|message|>", 200_008), ("<|return|>", 200_002)];
    // The tokenizers crate keeps an added token's id only when the model's vocabulary has it;
    // the ids between the bytes and the specials hold fillers (a real file's 199,998 ranks and
    // reserved specials), as a vocabulary with a hole is refused.
    let vocab: serde_json::Map<String, serde_json::Value> = (0..=255u8)
        .map(|b| (bytes_to_unicode(b).to_string(), (b as u64).into()))
        .chain(specials.iter().map(|(c, id)| (c.to_string(), (*id).into())))
        .chain((256..=200_008u64).filter(|id| !specials.iter().any(|s| s.1 == *id)).map(|id| (format!("<|filler_{id}|>"), id.into())))
        .collect();
    let added: Vec<serde_json::Value> = specials
        .iter()
        .map(|(c, id)| serde_json::json!({"id": id, "content": c, "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true}))
        .collect();
    let j = serde_json::json!({
        "version": "1.0", "truncation": null, "padding": null, "added_tokens": added, "normalizer": null,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true},
        "post_processor": null,
        "decoder": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
        "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null, "end_of_word_suffix": null,
                  "fuse_unk": false, "byte_fallback": false, "ignore_merges": false, "vocab": vocab, "merges": []}
    });
    let d = std::env::temp_dir().join(format!("tandem-gpt-oss-tokjson-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(d.join("tokenizer.json"), j.to_string()).unwrap();
    let t = GptOssTokenizer::for_model(&d).unwrap();
    assert!(matches!(t, GptOssTokenizer::Hf(_)));
    let ids = t.encode("<|start|>user<|message|>hi<|end|>").unwrap();
    assert_eq!(ids, vec![200_006, b'u' as u32, b's' as u32, b'e' as u32, b'r' as u32, 200_008, b'h' as u32, b'i' as u32, 200_007]);
    assert_eq!(t.decode(&ids).unwrap(), "<|start|>user<|message|>hi<|end|>");
    let _ = std::fs::remove_dir_all(&d);
}
