//! The seed corpus, written with the project's own writers (`tandem-fuzz --write-seeds`
//! regenerates `fuzz/corpus/`): small valid GGUF files, HF directories, tokenizer.json files,
//! chat templates and request bodies, each reaching past the parser into the loaders.

use std::path::Path;

use reference::dequant::GgmlType;
use reference::gguf::{GgufFile, GgufWriter, Value};
use reference::quant::{mxfp4, store, Granularity, Scheme};
use reference::tokenizer::Tokenizer;
use reference::weights::InMemory;
use reference::{loader, synthetic, Config, RopeLayout};

type Result<T> = std::result::Result<T, String>;

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// Chat templates: ChatML (SmolLM2, Qwen), Llama 2, Zephyr, Gemma, Llama 3, one with a
/// namespace and `raise_exception`, and one built on Python string methods.
pub const TEMPLATES: &[(&str, &str)] = &[
    (
        "chatml",
        "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}",
    ),
    (
        "llama2",
        "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}{% set system_message = false %}{% endif %}{% for message in loop_messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if loop.index0 == 0 and system_message != false %}{% set content = '<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}{% else %}{% set content = message['content'] %}{% endif %}{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %}",
    ),
    (
        "zephyr",
        "{% for message in messages %}\n{% if message['role'] == 'user' %}\n{{ '<|user|>\n' + message['content'] + eos_token }}\n{% elif message['role'] == 'system' %}\n{{ '<|system|>\n' + message['content'] + eos_token }}\n{% elif message['role'] == 'assistant' %}\n{{ '<|assistant|>\n'  + message['content'] + eos_token }}\n{% endif %}\n{% if loop.last and add_generation_prompt %}\n{{ '<|assistant|>' }}\n{% endif %}\n{% endfor %}",
    ),
    (
        "gemma",
        "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}{% for message in messages %}{% if (message['role'] == 'assistant') %}{% set role = 'model' %}{% else %}{% set role = message['role'] %}{% endif %}{{ '<start_of_turn>' + role + '\n' + message['content'] | trim + '<end_of_turn>\n' }}{% endfor %}{% if add_generation_prompt %}{{'<start_of_turn>model\n'}}{% endif %}",
    ),
    (
        "llama3",
        "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}",
    ),
    (
        "namespace",
        "{%- set ns = namespace(system='', seen=false) -%}\n{%- for m in messages -%}\n  {%- if m.role == 'system' -%}{%- set ns.system = m.content -%}\n  {%- elif m.role not in ['user', 'assistant'] -%}{{ raise_exception('bad role ' ~ m.role) }}\n  {%- else -%}<|{{ m.role }}|>{{ ns.system if not ns.seen else '' }}{{ m.content|tojson }}{%- set ns.seen = true -%}\n  {%- endif -%}\n{%- endfor -%}\n{%- if add_generation_prompt %}<|assistant|>{% endif -%}",
    ),
    (
        "pycompat",
        "{% for m in messages %}{{ bos_token }}{{ m.content.strip().upper() }}{% if m.content.startswith(' x') %}!{% endif %}{{ m['role']|length }}{{ m.items()|list|length }}{{ eos_token }}{% endfor %}",
    ),
];

/// Request bodies: every field of both endpoints, valid and at their edges.
pub const BODIES: &[(&str, &str)] = &[
    (
        "completions-text",
        r#"{"model": "tiny", "prompt": "Hello world", "max_tokens": 8, "temperature": 0.7, "top_p": 0.9, "top_k": 40, "min_p": 0.05, "seed": 7, "stop": ["\n", "the"], "presence_penalty": 0.5, "frequency_penalty": -0.5, "repetition_penalty": 1.1}"#,
    ),
    (
        "completions-ids",
        r#"{"prompt": [1, 2, 3, 200], "max_tokens": 4, "logprobs": 5, "return_token_ids": true, "ignore_eos": true, "n": 1, "best_of": 1}"#,
    ),
    (
        "completions-lists",
        r#"{"prompt": [[5, 6, 7]], "stream": true, "stream_options": {"include_usage": true}, "echo": false, "suffix": "", "logit_bias": {}}"#,
    ),
    ("completions-texts", r#"{"prompt": ["the the"], "max_completion_tokens": 2, "stop": "x", "temperature": 0}"#),
    (
        "chat-basic",
        r#"{"model": "tiny", "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}], "max_tokens": 16}"#,
    ),
    (
        "chat-parts",
        r#"{"messages": [{"role": "user", "content": [{"type": "text", "text": "Hello"}, {"type": "text", "text": " world"}]}, {"role": "assistant", "content": null}], "logprobs": true, "top_logprobs": 3, "stream": true}"#,
    ),
    (
        "chat-options",
        r#"{"messages": [{"role": "user", "content": "é 🎉"}], "reasoning_effort": "low", "response_format": {"type": "text"}, "tools": [], "seed": -1, "top_k": -1}"#,
    ),
    ("chat-empty", r#"{"messages": []}"#),
];

/// GPT-2's byte → printable character table (`bytes_to_unicode`), as byte-level BPE stores
/// every byte.
fn byte_chars() -> Vec<char> {
    let printable = |b: u32| (33..=126).contains(&b) || (161..=172).contains(&b) || (174..=255).contains(&b);
    let mut extra = 0;
    (0..256u32)
        .map(|b| {
            if printable(b) {
                char::from_u32(b).unwrap_or('?')
            } else {
                extra += 1;
                char::from_u32(255 + extra).unwrap_or('?')
            }
        })
        .collect()
}

/// A byte-level BPE vocabulary: every byte, a few merges, three control tokens. `pre` is the
/// `tokenizer.ggml.pre` (which pre-tokenizer is built).
fn tokenizer_kv(w: &mut GgufWriter, pre: &str) {
    let mut tokens: Vec<String> = vec!["<|endoftext|>".into(), "<|im_start|>".into(), "<|im_end|>".into()];
    tokens.extend(byte_chars().iter().map(|c| c.to_string()));
    let merges = ["Ġ t", "h e", "Ġt he", "i n", "e r", "Ġ w"];
    for m in merges {
        tokens.push(m.replace(' ', ""));
    }
    tokens.push("<tool>".into());
    let mut types = vec![3i32; 3];
    types.extend(std::iter::repeat_n(1, tokens.len() - 4));
    types.push(4);
    let strs = |v: &[String]| Value::Array(v.iter().map(|s| Value::String(s.clone())).collect());
    w.kv("tokenizer.ggml.model", Value::String("gpt2".into()))
        .kv("tokenizer.ggml.pre", Value::String(pre.into()))
        .kv("tokenizer.ggml.tokens", strs(&tokens))
        .kv("tokenizer.ggml.merges", strs(&merges.map(String::from)))
        .kv("tokenizer.ggml.token_type", Value::Array(types.into_iter().map(Value::I32).collect()))
        .kv("tokenizer.ggml.bos_token_id", Value::U32(1))
        .kv("tokenizer.ggml.eos_token_id", Value::U32(2))
        .kv("tokenizer.ggml.padding_token_id", Value::U32(0))
        .kv("tokenizer.ggml.add_bos_token", Value::Bool(false));
}

/// Tokens of [`tokenizer_kv`]'s vocabulary.
const N_TOKENS: usize = 3 + 256 + 6 + 1;

/// A one-layer llama of width `hidden` (GQA: 2 query heads on 1 KV head).
fn micro(hidden: usize, vocab: usize) -> Config {
    Config {
        n_layers: 1,
        n_heads: 2,
        n_kv_heads: 1,
        head_dim: hidden / 2,
        hidden,
        ffn: hidden,
        vocab,
        rope_theta: 10_000.0,
        rope_layout: RopeLayout::HalfSplit,
        rms_eps: 1e-5,
        max_ctx: 64,
        sliding_window: None,
        tied_embeddings: true,
        bos_id: Some(1),
        eos_id: Some(2),
    }
}

/// A GGUF llama of `cfg` with every matrix in `ty`, plus what `extra` adds to the metadata.
fn llama_gguf(dir: &Path, cfg: &Config, ty: GgmlType, extra: impl FnOnce(&mut GgufWriter)) -> Result<Vec<u8>> {
    let tmp = dir.join("tmp.gguf");
    loader::write_gguf(&tmp, cfg, &synthetic::weights(cfg, 3).map_err(err)?, ty).map_err(err)?;
    // Copy it through a writer, adding `extra`'s keys.
    let g = GgufFile::open(&tmp).map_err(err)?;
    let mut w = GgufWriter::new();
    for (k, v) in &g.metadata {
        w.kv(k, v.clone());
    }
    extra(&mut w);
    for t in &g.tensors {
        w.tensor_raw(&t.name, &t.shape, t.ty.id(), g.tensor_bytes(t).to_vec());
    }
    let bytes = w.to_bytes().map_err(err)?;
    std::fs::remove_file(&tmp).map_err(err)?;
    Ok(bytes)
}

/// A GGUF of no model: every tensor type, every metadata value type, alignment 64.
fn types_gguf() -> Result<Vec<u8>> {
    let mut w = GgufWriter::new();
    w.kv("general.alignment", Value::U32(64))
        .kv("u8", Value::U8(1))
        .kv("i8", Value::I8(-1))
        .kv("u16", Value::U16(2))
        .kv("i16", Value::I16(-2))
        .kv("i32", Value::I32(-3))
        .kv("f32", Value::F32(0.5))
        .kv("u64", Value::U64(1 << 40))
        .kv("i64", Value::I64(-4))
        .kv("f64", Value::F64(1e-9))
        .kv("nested", Value::Array(vec![Value::Array(vec![Value::U8(1), Value::U8(2)]), Value::Array(vec![])]));
    let data: Vec<f32> = (0..512).map(|i| ((i * 37 % 101) as f32 - 50.0) / 25.0).collect();
    for ty in [GgmlType::F16, GgmlType::BF16, GgmlType::Q4K, GgmlType::Q5K, GgmlType::Q6K, GgmlType::Q8_0] {
        w.tensor(&format!("t.{}", ty.name()), &[2, 256], ty, &data);
    }
    let m = mxfp4::quantize(&data[..128], 2, 64).map_err(err)?;
    w.tensor_raw("t.mxfp4", &[2, 64], reference::gguf::GGML_TYPE_MXFP4, mxfp4::to_ggml(&m));
    w.to_bytes().map_err(err)
}

/// A tokenizer-only GGUF (no model) with pre-tokenizer `pre`.
fn tokenizer_gguf(pre: &str) -> Result<Vec<u8>> {
    let mut w = GgufWriter::new();
    tokenizer_kv(&mut w, pre);
    w.to_bytes().map_err(err)
}

/// An HF directory of `cfg` (F32, or linear weights quantized by `scheme`) as one input.
fn hf_input(dir: &Path, cfg: &Config, scheme: Option<Scheme>) -> Result<Vec<u8>> {
    let d = dir.join("tmp-hf");
    let w = synthetic::weights(cfg, 5).map_err(err)?;
    match scheme {
        None => loader::write_hf_dir(&d, cfg, &w).map_err(err)?,
        Some(s) => {
            store::write_quantized_hf_dir(&d, cfg, &mut InMemory(&w), s).map_err(err)?;
        }
    }
    let read = |f: &str| std::fs::read(d.join(f)).map_err(err);
    let input = crate::targets::hf_dir::pack(&read("config.json")?, &read("model.safetensors")?);
    std::fs::remove_dir_all(&d).map_err(err)?;
    Ok(input)
}

/// Write the whole corpus under `corpus` (one folder per target); the files written.
pub fn write_all(corpus: &Path) -> Result<Vec<std::path::PathBuf>> {
    std::fs::create_dir_all(corpus).map_err(|e| format!("{}: {e}", corpus.display()))?;
    let mut files = Vec::new();
    let mut put = |target: &str, name: &str, bytes: &[u8]| -> Result<()> {
        let d = corpus.join(target);
        std::fs::create_dir_all(&d).map_err(err)?;
        let p = d.join(name);
        std::fs::write(&p, bytes).map_err(|e| format!("{}: {e}", p.display()))?;
        files.push(p);
        Ok(())
    };
    let chatml = TEMPLATES[0].1;
    // BOS / EOS come from the tokenizer keys (the config writer would write them a second time).
    let small = Config { bos_id: None, eos_id: None, ..micro(8, N_TOKENS) };
    put(
        "gguf",
        "llama-f32-tokenizer-chat.gguf",
        &llama_gguf(corpus, &small, GgmlType::F32, |w| {
            tokenizer_kv(w, "smollm");
            w.kv("tokenizer.chat_template", Value::String(chatml.into()));
        })?,
    )?;
    let wide = micro(32, 16);
    for (name, ty) in [("llama-q8_0.gguf", GgmlType::Q8_0), ("llama-q4_0.gguf", GgmlType::Q4_0), ("llama-q4_1.gguf", GgmlType::Q4_1)] {
        put("gguf", name, &llama_gguf(corpus, &wide, ty, |_| {})?)?;
    }
    let untied = Config { tied_embeddings: false, sliding_window: Some(4), ..micro(8, 8) };
    put("gguf", "llama-f16-untied-sliding.gguf", &llama_gguf(corpus, &untied, GgmlType::F16, |_| {})?)?;
    put("gguf", "types.gguf", &types_gguf()?)?;
    put("gguf", "tokenizer-llama-bpe.gguf", &tokenizer_gguf("llama-bpe")?)?;

    put("hf_dir", "llama-f32.bin", &hf_input(corpus, &Config { tied_embeddings: false, ..micro(8, 16) }, None)?)?;
    for (name, scheme) in [
        ("llama-int8-channel.bin", Scheme::Int8(Granularity::PerChannel)),
        ("llama-int8-group.bin", Scheme::Int8(Granularity::Group(16))),
        ("llama-mxfp4.bin", Scheme::Mxfp4),
        ("llama-q4_1.bin", Scheme::Q4_1),
    ] {
        put("hf_dir", name, &hf_input(corpus, &wide, Some(scheme))?)?;
    }

    for (name, pre) in [("tiny.json", "smollm"), ("llama-bpe.json", "llama-bpe"), ("qwen2.json", "qwen2")] {
        let tmp = corpus.join("tmp.gguf");
        std::fs::write(&tmp, tokenizer_gguf(pre)?).map_err(err)?;
        let t = Tokenizer::from_gguf(&GgufFile::open(&tmp).map_err(err)?).map_err(err)?;
        let out = corpus.join("tmp.json");
        t.save(&out).map_err(err)?;
        put("tokenizer", name, &std::fs::read(&out).map_err(err)?)?;
        std::fs::remove_file(&tmp).map_err(err)?;
        std::fs::remove_file(&out).map_err(err)?;
    }
    for (name, src) in TEMPLATES {
        put("chat", &format!("{name}.jinja"), src.as_bytes())?;
    }
    for (name, body) in BODIES {
        put("http", &format!("{name}.json"), body.as_bytes())?;
    }
    Ok(files)
}
