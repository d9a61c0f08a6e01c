//! Every architecture of `reference::arch` through the CLI on `--device cpu`: `tandem logits`
//! on each tiny checkpoint (GGUF and HF directory) gives transformers' logits
//! (`reference/tests/fixtures/tiny/*/logits.json`) within 1e-3; `tandem generate` greedy gives
//! the reference's argmax chain (computed here through `reference::arch`); on a GPU device
//! (wgpu, f32) the GPU model gives the same logits for what it runs, and refuses the rest with
//! one line naming the architecture and the missing feature before any device opens; `tandem serve`
//! answers `/v1/completions` and `/v1/chat/completions` on the tiny qwen3 GGUF. Run with
//! `--release`.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use reference::arch;
use reference::gguf::{GgufFile, GgufWriter, Value};
use reference::tokenizer::Tokenizer;
use serde_json::{json, Value as Json};

mod common;
use common::{fails, http_text, tandem};

const NAMES: [&str; 8] = ["llama3", "mistral_hd", "qwen2", "qwen3", "qwen3_moe", "gemma3", "phi3", "qwen3_yarn"];
const TOL: f32 = 1e-3;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("reference/tests/fixtures/tiny").join(name)
}

fn gguf(name: &str) -> String {
    fixture(name).join("model.gguf").to_str().expect("UTF-8 path").to_string()
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("tandem-cli-arch-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d.join(name)
}

/// The ids and transformers' logits `[T][V]` of a fixture.
fn expected(name: &str) -> (Vec<u32>, Vec<Vec<f32>>) {
    expected_in(name, "logits.json")
}

/// The ids and logits `[T][V]` of the oracle file `file` of a fixture.
fn expected_in(name: &str, file: &str) -> (Vec<u32>, Vec<Vec<f32>>) {
    let p = fixture(name).join(file);
    let j: Json = serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
    (serde_json::from_value(j["ids"].clone()).unwrap(), serde_json::from_value(j["logits"].clone()).unwrap())
}

/// Run `tandem ARGS`, expect success; (stdout, stderr).
fn ok(args: &[&str]) -> (String, String) {
    let o = tandem(args);
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(o.status.success(), "tandem {args:?} failed: {err}");
    (String::from_utf8(o.stdout).expect("UTF-8 stdout"), err)
}

/// Max |Δ| of `tandem logits --device cpu` on `model` against transformers' logits.
fn logits_delta(name: &str, model: &str) -> f32 {
    let (ids, want) = expected(name);
    let v = want[0].len();
    let ids_arg: Vec<String> = ids.iter().map(u32::to_string).collect();
    let (out, err) = ok(&["logits", "--model", model, "--device", "cpu", "--ids", &ids_arg.join(","), "--top-k", &v.to_string()]);
    assert!(err.contains("cpu-reference"), "{name}: ran on {err}");
    let j: Json = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{name}: not JSON ({e}): {out}"));
    let (top_ids, top_logits) = (j["top_ids"].as_array().unwrap(), j["top_logits"].as_array().unwrap());
    assert_eq!(top_ids.len(), ids.len(), "{name}: one row per position");
    let mut d = 0f32;
    for ((ti, tl), w) in top_ids.iter().zip(top_logits).zip(&want) {
        let (ti, tl) = (ti.as_array().unwrap(), tl.as_array().unwrap());
        assert_eq!(ti.len(), v, "{name}: every logit of the row");
        for (i, l) in ti.iter().zip(tl) {
            let (i, l) = (i.as_u64().unwrap() as usize, l.as_f64().unwrap() as f32);
            d = d.max((l - w[i]).abs());
        }
    }
    d
}

fn check_logits(name: &str) {
    let g = logits_delta(name, &gguf(name));
    let hf = logits_delta(name, fixture(name).to_str().unwrap());
    eprintln!("{name}: tandem logits --device cpu vs transformers, max |Δ|: GGUF {g:.2e}, HF {hf:.2e}");
    assert!(g <= TOL && hf <= TOL, "{name}: max |Δ| GGUF {g}, HF {hf} > {TOL}");
}

#[test]
fn logits_llama3() {
    check_logits(NAMES[0]);
}
#[test]
fn logits_mistral_hd() {
    check_logits(NAMES[1]);
}
#[test]
fn logits_qwen2() {
    check_logits(NAMES[2]);
}
#[test]
fn logits_qwen3() {
    check_logits(NAMES[3]);
}
#[test]
fn logits_qwen3_moe() {
    check_logits(NAMES[4]);
}
#[test]
fn logits_gemma3() {
    check_logits(NAMES[5]);
}
#[test]
fn logits_phi3() {
    check_logits(NAMES[6]);
}
#[test]
fn logits_qwen3_yarn() {
    check_logits(NAMES[7]);
}

/// The greedy chain of `n` tokens after `prompt` through `reference::arch` (as `generate`
/// encodes a raw prompt: all of it literal text, BOS by the tokenizer's rule), or `None` when
/// it meets an end-of-generation id (the engine would stop there).
fn argmax_chain(path: &Path, prompt: &str, n: usize) -> Option<Vec<u32>> {
    let m = arch::load(path).unwrap();
    let tok = Tokenizer::from_gguf(&GgufFile::open(path).unwrap()).unwrap();
    let literal: Vec<std::ops::Range<usize>> = std::iter::once(0..prompt.len()).collect();
    let ids = tok.encode_marked(prompt, &literal, tok.add_bos_default()).unwrap();
    let stops: Vec<u32> = tok.eog_ids().into_iter().chain(m.spec.eos_ids.iter().copied()).collect();
    let mut cache = m.new_cache();
    let mut logits = m.forward(&ids, &mut cache, None).unwrap();
    let mut out = vec![];
    for _ in 0..n {
        let next = reference::ops::argmax::argmax(&logits.row(logits.nrows() - 1).to_vec());
        if stops.contains(&next) {
            return None;
        }
        out.push(next);
        logits = m.forward(&[next], &mut cache, None).unwrap();
    }
    Some(out)
}

/// `tandem generate --device cpu` greedy on a tiny GGUF: `--prompts` writes the reference's
/// argmax chain as token ids, and `--prompt` streams the same text as that run's.
fn check_generate(name: &str) {
    const N: usize = 12;
    let path = PathBuf::from(gguf(name));
    // The prompt whose chain runs N tokens with the most distinct ones (random weights repeat).
    let distinct = |c: &Vec<u32>| c.iter().collect::<std::collections::BTreeSet<_>>().len();
    let (prompt, want) = ["Hello there", "the cat sat", "abc", "one two three", "x", "Once upon", "42 + 17 =", "Zebra"]
        .iter()
        .filter_map(|p| argmax_chain(&path, p, N).map(|c| (*p, c)))
        .max_by_key(|(_, c)| distinct(c))
        .unwrap_or_else(|| panic!("{name}: every prompt's greedy chain stops early"));
    let prompts = tmp(&format!("{name}-prompts.jsonl"));
    let out = tmp(&format!("{name}-out.jsonl"));
    std::fs::write(&prompts, format!("{}\n", json!({"prompt": prompt, "max_tokens": N}))).unwrap();
    let p = path.to_str().unwrap();
    ok(&["generate", "--model", p, "--device", "cpu", "--prompts", prompts.to_str().unwrap(), "--out", out.to_str().unwrap()]);
    let row: Json = serde_json::from_str(std::fs::read_to_string(&out).unwrap().trim()).unwrap();
    let got: Vec<u32> = serde_json::from_value(row["token_ids"].clone()).unwrap();
    eprintln!("{name}: prompt {prompt:?} → {got:?}");
    assert_eq!(got, want, "{name}: generate --prompts vs the reference's argmax chain");
    let (stdout, err) = ok(&["generate", "--model", p, "--device", "cpu", "--prompt", prompt, "--max-tokens", &N.to_string()]);
    let text = row["text"].as_str().unwrap();
    assert_eq!(stdout.strip_suffix('\n').unwrap_or(&stdout), text, "{name}: generate --prompt text vs --prompts");
    assert!(err.contains(&format!("{N} generated")), "{name}: {err}");
}

#[test]
fn generate_qwen3_greedy_is_the_argmax_chain() {
    check_generate("qwen3");
}

#[test]
fn generate_gemma3_greedy_is_the_argmax_chain() {
    check_generate("gemma3");
}

/// A GPU device is refused with one line naming the architecture, before the device opens
/// (wgpu here: on a machine without a GPU opening it would fail differently, or find lavapipe):
/// Qwen3-MoE with more experts a token than the MoE kernels take
/// (`optimized::model::gpu_unsupported`), read from the metadata only.
#[test]
fn gpu_devices_refuse_spec_models_in_one_line() {
    let k = optimized::kernels::moe::MAX_K + 1;
    let words = ["qwen3moe:", "not on the GPU yet", &format!("more than {} experts a token", k - 1), "--device cpu"];
    let q = tmp("qwen3_moe-k17.gguf");
    let keys = [("qwen3moe.expert_count", Value::U32(2 * k as u32)), ("qwen3moe.expert_used_count", Value::U32(k as u32))];
    with_keys(&PathBuf::from(gguf("qwen3_moe")), &q, &keys);
    let q = q.to_str().unwrap();
    fails(&["generate", "--model", q, "--device", "wgpu", "--prompt", "hi"], 2, &words);
    fails(&["logits", "--model", q, "--device", "cuda", "--ids", "1,2"], 2, &words);
    fails(&["serve", "--model", q, "--device", "wgpu", "--port", "0"], 2, &words);
    fails(&["bench", "--model", q, "--device", "wgpu"], 2, &words);
    fails(&["bench", "--model", q, "--device", "wgpu", "--batches", "1"], 2, &words);
    fails(&["audit", "--model", q, "--device", "wgpu"], 2, &words);
    // The HF directories have no tokenizer.json: ids.
    let hf = tmp("qwen3_moe-k17-hf");
    std::fs::create_dir_all(&hf).unwrap();
    std::fs::copy(fixture("qwen3_moe").join("model.safetensors"), hf.join("model.safetensors")).unwrap();
    let mut j: Json = serde_json::from_str(&std::fs::read_to_string(fixture("qwen3_moe").join("config.json")).unwrap()).unwrap();
    (j["num_experts"], j["num_experts_per_tok"]) = ((2 * k).into(), k.into());
    std::fs::write(hf.join("config.json"), j.to_string()).unwrap();
    fails(&["logits", "--model", hf.to_str().unwrap(), "--device", "wgpu", "--ids", "1,2"], 2, &["qwen3_moe:", "more than", "experts a token"]);
}

/// transformers 5 stores each MoE layer's experts stacked — `mlp.experts.gate_up_proj`
/// `[E, 2F, C]` (each expert's gate rows, then its up rows) and `mlp.experts.down_proj`
/// `[E, C, F]` — where earlier versions wrote one tensor per expert. The Qwen3-MoE fixture
/// rewritten so gives transformers' logits on the CPU reference and on the GPU (wgpu, f32).
#[test]
fn stacked_hf_experts_run_on_cpu_and_gpu() {
    let (src, dir) = (fixture("qwen3_moe"), tmp("qwen3_moe-stacked"));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(src.join("config.json"), dir.join("config.json")).unwrap();
    let cfg: Json = serde_json::from_str(&std::fs::read_to_string(src.join("config.json")).unwrap()).unwrap();
    let (e, layers) = (cfg["num_experts"].as_u64().unwrap() as usize, cfg["num_hidden_layers"].as_u64().unwrap() as usize);
    let bytes = std::fs::read(src.join("model.safetensors")).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let mut ts: Vec<(String, safetensors::Dtype, Vec<usize>, Vec<u8>)> = st
        .tensors()
        .into_iter()
        .filter(|(n, _)| !n.contains(".mlp.experts."))
        .map(|(n, v)| (n, v.dtype(), v.shape().to_vec(), v.data().to_vec()))
        .collect();
    for l in 0..layers {
        let get = |x: usize, p: &str| st.tensor(&format!("model.layers.{l}.mlp.experts.{x}.{p}.weight")).unwrap();
        let (mut gu, mut dn) = (Vec::new(), Vec::new());
        for x in 0..e {
            gu.extend_from_slice(get(x, "gate_proj").data());
            gu.extend_from_slice(get(x, "up_proj").data());
            dn.extend_from_slice(get(x, "down_proj").data());
        }
        let (g, d) = (get(0, "gate_proj"), get(0, "down_proj"));
        ts.push((format!("model.layers.{l}.mlp.experts.gate_up_proj"), g.dtype(), vec![e, 2 * g.shape()[0], g.shape()[1]], gu));
        ts.push((format!("model.layers.{l}.mlp.experts.down_proj"), d.dtype(), vec![e, d.shape()[0], d.shape()[1]], dn));
    }
    let views: Vec<_> = ts.iter().map(|(n, d, s, b)| (n.clone(), safetensors::tensor::TensorView::new(*d, s.clone(), b).unwrap())).collect();
    safetensors::serialize_to_file(views, None, &dir.join("model.safetensors")).unwrap();
    let m = dir.to_str().unwrap();
    let (cpu, gpu) = (logits_delta("qwen3_moe", m), gpu_logits_delta("qwen3_moe", m));
    eprintln!("qwen3_moe, stacked experts: max |Δ| vs transformers: cpu {cpu:.2e}, wgpu {gpu:.2e}");
    assert!(cpu <= TOL && gpu <= TOL, "stacked experts: max |Δ| cpu {cpu}, wgpu {gpu} > {TOL}");
}

/// Max |Δ| of `tandem logits --device wgpu --dtype f32` on `model` against transformers'
/// logits (the GPU model over the spec, through the batched runner).
fn gpu_logits_delta(name: &str, model: &str) -> f32 {
    gpu_delta_vs(name, "logits.json", model)
}

/// [`gpu_logits_delta`] against the fixture's oracle file `oracle`.
fn gpu_delta_vs(name: &str, oracle: &str, model: &str) -> f32 {
    let (ids, want) = expected_in(name, oracle);
    let ids_arg: Vec<String> = ids.iter().map(u32::to_string).collect();
    let v = want[0].len().to_string();
    let (out, err) = ok(&["logits", "--model", model, "--device", "wgpu", "--dtype", "f32", "--ids", &ids_arg.join(","), "--top-k", &v]);
    assert!(err.contains("wgpu"), "{name}: ran on {err}");
    let j: Json = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{name}: not JSON ({e}): {out}"));
    let mut d = 0f32;
    for ((ti, tl), w) in j["top_ids"].as_array().unwrap().iter().zip(j["top_logits"].as_array().unwrap()).zip(&want) {
        for (i, l) in ti.as_array().unwrap().iter().zip(tl.as_array().unwrap()) {
            d = d.max((l.as_f64().unwrap() as f32 - w[i.as_u64().unwrap() as usize]).abs());
        }
    }
    d
}

/// Llama-3.x RoPE scaling (a hub GGUF's `rope_freqs.weight`, an HF `rope_scaling` of type
/// llama3), which the llama `Config` refuses, takes the spec path; so do Qwen3's q/k norms,
/// Phi-3's partial rotary and fused projections and Gemma-3 (sandwich norms, GELU-tanh,
/// embedding scale, local / global layers) and Qwen3-MoE (experts routed softmax-then-top-k,
/// renormalised). On the GPU (wgpu, f32) they give transformers'
/// logits within 1e-3, from the GGUF and the HF directory.
#[test]
fn spec_models_run_on_the_gpu() {
    assert!(GgufFile::open(gguf("llama3")).unwrap().tensor_info("rope_freqs.weight").is_some(), "the fixture has rope_freqs");
    for name in ["llama3", "qwen3", "phi3", "gemma3", "qwen3_moe"] {
        for m in [gguf(name), fixture(name).to_str().unwrap().to_string()] {
            let d = gpu_logits_delta(name, &m);
            eprintln!("{name} {m}: tandem logits --device wgpu vs transformers, max |Δ| {d:.2e}");
            assert!(d <= TOL, "{name} {m}: max |Δ| {d} > {TOL}");
        }
    }
}

/// The k-quant mixes llama-quantize writes (`<name>_k/model.<TYPE>.gguf`: Q2_K .. Q6_K and
/// IQ4_XS matrices; `<name>/model.<MIX>.gguf`: the fallback types, `reference/tests/tiny_kquants.rs`)
/// load on the GPU (wgpu, f32) and give the logits transformers gives for the same file
/// (`logits.<TYPE>.json`) within 1e-3.
#[test]
fn kquant_files_run_on_the_gpu() {
    let files = [
        ("llama3_k", "Q4_K_M"),
        ("llama3_k", "Q6_K"),
        ("llama3_k", "Q3_K_M"),
        ("llama3_k", "Q2_K"),
        ("llama3_k", "IQ4_XS"),
        ("qwen3_k", "Q5_K_M"),
        ("qwen2_k", "Q4_K_M"),
        ("gemma3_k", "Q4_K_M"),
        ("phi3_k", "Q4_K_M"),
        ("qwen3_moe_k", "Q4_K_M"),
    ];
    // llama-quantize's fallbacks for rows that are no whole number of super-blocks (the tiny
    // checkpoints' own rows of 64 / 128): Q5_0 (Q4_K_M), Q5_1 (Q5_K_M; Qwen3-MoE's Q4_K_M too),
    // IQ4_NL (IQ4_XS).
    let mixes = [("llama3", "Q4_K_M"), ("qwen3", "Q5_K_M"), ("llama3", "IQ4_XS"), ("gemma3", "Q4_K_M"), ("phi3", "Q4_K_M"), ("qwen3_moe", "Q4_K_M")];
    let files = files.into_iter().chain(mixes);
    for (name, q) in files {
        let m = fixture(name).join(format!("model.{q}.gguf")).to_str().expect("UTF-8 path").to_string();
        let d = gpu_delta_vs(name, &format!("logits.{q}.json"), &m);
        eprintln!("{name}/{q}: tandem logits --device wgpu vs transformers on the file, max |Δ| {d:.2e}");
        assert!(d <= TOL, "{name}/{q}: max |Δ| {d} > {TOL}");
    }
    // The low-bit files stay quantized on the device: their linear weights dense in f32 would
    // take ~30 bits a parameter (Q2_K measured 5.26 kept, embeddings and norms included).
    for q in ["Q3_K_M", "Q2_K", "IQ4_XS"] {
        let m = fixture("llama3_k").join(format!("model.{q}.gguf")).to_str().expect("UTF-8 path").to_string();
        let (_, err) = ok(&["logits", "--model", &m, "--device", "wgpu", "--dtype", "f32", "--ids", "1,2", "--top-k", "1"]);
        let bits: f32 = err
            .split(" bits a parameter")
            .next()
            .and_then(|s| s.rsplit(' ').next())
            .and_then(|b| b.parse().ok())
            .unwrap_or_else(|| panic!("llama3_k/{q}: no bits a parameter in {err}"));
        assert!(bits < 8.0, "llama3_k/{q}: {bits} bits a parameter on the device: not kept as stored");
    }
}

/// Commands of llama-family weights refuse a spec model by name, in one line.
#[test]
fn llama_only_commands_name_the_architecture() {
    let q = gguf("qwen3");
    fails(&["generate", "--model", &q, "--device", "cpu", "--weights", "int8", "--prompt", "hi"], 2, &["qwen3", "--weights int8"]);
    let out = tmp("quantized-qwen3");
    fails(&["quantize", "--model", &q, "--format", "int8", "--out", out.to_str().unwrap()], 2, &["qwen3 model", "llama-family"]);
}

const TEMPLATE: &str = "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}";

/// An HF directory of a spec model with tokenizer.json and tokenizer_config.json's template
/// chats as its GGUF with the same template does (same weights, tokenizer and prompt).
#[test]
fn hf_dir_tokenizer_and_chat_template_are_read() {
    let dir = tmp("qwen3-hf");
    std::fs::create_dir_all(&dir).unwrap();
    for f in ["config.json", "model.safetensors"] {
        std::fs::copy(fixture("qwen3").join(f), dir.join(f)).unwrap();
    }
    Tokenizer::from_gguf(&GgufFile::open(gguf("qwen3")).unwrap()).unwrap().save(dir.join("tokenizer.json")).unwrap();
    std::fs::write(dir.join("tokenizer_config.json"), json!({"chat_template": TEMPLATE}).to_string()).unwrap();
    let model = tmp("qwen3-hf-chat.gguf");
    with_chat_template(&PathBuf::from(gguf("qwen3")), &model, TEMPLATE);
    let run = |m: &Path| ok(&["generate", "--model", m.to_str().unwrap(), "--device", "cpu", "--chat", "Hi", "--max-tokens", "6"]).0;
    let (hf, g) = (run(&dir), run(&model));
    assert!(!hf.trim().is_empty(), "a reply");
    assert_eq!(hf, g, "HF directory vs GGUF, the same chat");
}

/// A copy of the GGUF at `src` with `tokenizer.chat_template` set to `tmpl`.
fn with_chat_template(src: &Path, dst: &Path, tmpl: &str) {
    with_keys(src, dst, &[("tokenizer.chat_template", Value::String(tmpl.into()))]);
}

/// A copy of the GGUF at `src` with the metadata `keys` set.
fn with_keys(src: &Path, dst: &Path, keys: &[(&str, Value)]) {
    let g = GgufFile::open(src).unwrap();
    let mut w = GgufWriter::new();
    for (k, v) in g.metadata.iter().filter(|(k, _)| k.as_str() != "general.alignment" && !keys.iter().any(|(n, _)| n == k)) {
        w.kv(k, v.clone());
    }
    for (k, v) in keys {
        w.kv(k, v.clone());
    }
    for t in &g.tensors {
        w.tensor_raw(&t.name, &t.shape, t.ty.id(), g.tensor_bytes(t).to_vec());
    }
    w.write(dst).unwrap();
}

/// A `tandem serve` process, killed when dropped.
struct Served {
    child: Child,
    port: u16,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One HTTP/1.1 request to the server (`Connection: close`); (status, body as JSON).
fn http(port: u16, method: &str, path: &str, body: Option<&Json>) -> (u16, Json) {
    let (status, text) = http_text(port, method, path, &body.map(|b| b.to_string()).unwrap_or_default());
    (status, serde_json::from_str(&text).unwrap_or(Json::Null))
}

fn serve(model: &Path) -> Served {
    let mut child = Command::new(env!("CARGO_BIN_EXE_tandem"))
        .args(["serve", "--model", model.to_str().unwrap(), "--device", "cpu", "--port", "0", "--kv-tokens", "512"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn tandem serve");
    let stderr = child.stderr.take().unwrap();
    let mut lines = BufReader::new(stderr).lines();
    let (mut port, mut seen) = (None, vec![]);
    for line in lines.by_ref() {
        let line = line.unwrap();
        port = line.split("(port ").nth(1).and_then(|r| r.split(')').next()).and_then(|p| p.parse::<u16>().ok());
        seen.push(line);
        if port.is_some() {
            break;
        }
    }
    std::thread::spawn(move || lines.for_each(drop));
    let port = port.unwrap_or_else(|| panic!("no listening line: {seen:?}"));
    assert!(seen.iter().any(|l| l.contains("(qwen3)")), "the serve line names the architecture: {seen:?}");
    let served = Served { child, port };
    let t = Instant::now();
    while http(port, "GET", "/health", None).0 != 200 {
        assert!(t.elapsed() < Duration::from_secs(60), "never healthy");
        std::thread::sleep(Duration::from_millis(50));
    }
    served
}

#[test]
fn serve_qwen3_completions_and_chat() {
    let model = tmp("qwen3-chat.gguf");
    with_chat_template(&PathBuf::from(gguf("qwen3")), &model, TEMPLATE);
    let s = serve(&model);
    let (code, body) = http(s.port, "POST", "/v1/completions", Some(&json!({"model": "qwen3-chat", "prompt": "Hello there", "max_tokens": 5})));
    assert_eq!(code, 200, "/v1/completions: {body}");
    assert!(body["usage"]["completion_tokens"].as_u64().unwrap() > 0, "{body}");
    let chat = json!({"model": "qwen3-chat", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 5});
    let (code, body) = http(s.port, "POST", "/v1/chat/completions", Some(&chat));
    assert_eq!(code, 200, "/v1/chat/completions: {body}");
    assert!(body["usage"]["completion_tokens"].as_u64().unwrap() > 0, "{body}");
    assert!(body["choices"][0]["message"]["content"].is_string(), "{body}");
}
