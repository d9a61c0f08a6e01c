//! Every chat template of llama.cpp's test set (`<repo>/../shared/peers/llama.cpp-tests/models/
//! templates`, or `$TANDEM_TEMPLATES_DIR`) rendered by tandem against Python jinja2 rendering it
//! the HF way (`scripts/render_templates.py`, whose output is `fixtures/chat_templates.json`).
//!
//! Per template and conversation: where Python rendered, tandem's text must be byte-equal;
//! where the template raised (`raise_exception`), tandem must fail with that message; where
//! Python failed otherwise (a TypeError, say), tandem must fail too unless [`LENIENT`] lists
//! the case with its reason. A template tandem cannot render is listed in [`REFUSED`] with the
//! construct its error names; any other failure fails the test, and so does a listed entry that
//! no longer applies (the lists only shrink).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use reference::chat::{ChatTemplate, Message, RenderOptions, ToolCall};
use serde_json::Value as Json;
use sha2::{Digest, Sha256};

/// Templates tandem refuses, each with the text its error must contain (the construct).
const REFUSED: &[(&str, &str)] = &[];

/// Where Python fails with an error of its own (not the template's `raise_exception`) and
/// tandem renders: template, the Python error, and why tandem differs. Reviewed, not a catch-all:
/// a divergence not listed here fails the test.
const LENIENT: &[(&str, &str, &str)] = &[(
    "llama-cpp-deepseek-r1.jinja",
    "TypeError: Object of type generator is not JSON serializable",
    "`tools | map(attribute='function') | tojson`: Python's `map` filter makes a generator json.dumps refuses; tandem writes the list",
)];

fn templates_dir() -> PathBuf {
    let dir = match std::env::var_os("TANDEM_TEMPLATES_DIR") {
        Some(d) => PathBuf::from(d),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/peers/llama.cpp-tests/models/templates"),
    };
    assert!(dir.is_dir(), "template dir {} is missing: check out shared/ beside the repo or set TANDEM_TEMPLATES_DIR", dir.display());
    dir
}

fn fixture() -> Json {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/chat_templates.json");
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

fn opt_str(v: &Json, key: &str) -> Option<String> {
    v.get(key).and_then(Json::as_str).map(str::to_string)
}

/// A fixture message (the script's tandem form) as tandem's [`Message`].
fn message(m: &Json) -> Message {
    let role = m["role"].as_str().unwrap();
    let mut msg = match &m["content"] {
        Json::String(s) => Message::new(role, s.as_str()),
        Json::Array(parts) => Message::with_parts(role, parts.iter().map(|p| p["text"].as_str().unwrap().to_string()).collect()),
        other => panic!("content {other}"),
    };
    for c in m.get("tool_calls").and_then(Json::as_array).into_iter().flatten() {
        msg.tool_calls.push(ToolCall::new(opt_str(c, "id"), c["name"].as_str().unwrap(), c["arguments"].as_str().unwrap()));
    }
    msg.reasoning_content = opt_str(m, "reasoning_content");
    msg.tool_call_id = opt_str(m, "tool_call_id");
    msg.name = opt_str(m, "name");
    msg
}

/// The conversations of the fixture: name, messages, options.
fn conversations(fx: &Json) -> Vec<(String, Vec<Message>, RenderOptions)> {
    let now = SystemTime::UNIX_EPOCH + Duration::from_secs(fx["now_unix"].as_u64().unwrap());
    let convs = fx["conversations"].as_object().unwrap();
    convs
        .iter()
        .map(|(name, c)| {
            let msgs = c["messages"].as_array().unwrap().iter().map(message).collect();
            let opts = RenderOptions {
                add_generation_prompt: c["add_generation_prompt"].as_bool().unwrap(),
                tools: opt_str(c, "tools"),
                documents: opt_str(c, "documents"),
                extra: c["extra"].as_object().unwrap().iter().map(|(k, v)| (k.clone(), v.as_str().unwrap().to_string())).collect(),
                now: Some(now),
            };
            (name.clone(), msgs, opts)
        })
        .collect()
}

#[derive(Default)]
struct Tally {
    exact: usize,
    both_failed: usize,
    /// Python failed on its own, tandem rendered, and [`LENIENT`] says why.
    lenient: BTreeMap<String, usize>,
    /// Template → first failure that is not accounted for.
    failures: BTreeMap<String, Vec<String>>,
    /// Template → the errors of a listed template (each must name its construct).
    refused: BTreeMap<String, Vec<String>>,
}

#[test]
fn every_template_renders_as_python_or_is_refused_by_name() {
    let dir = templates_dir();
    let fx = fixture();
    let convs = conversations(&fx);
    let expected = fx["templates"].as_object().unwrap();
    let mut names: Vec<String> =
        std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).filter(|n| n.ends_with(".jinja")).collect();
    names.sort();
    let mut listed: Vec<&String> = expected.keys().collect();
    listed.sort(); // key order follows serde_json's preserve_order, which a workspace build enables
    assert_eq!(names.iter().collect::<Vec<_>>(), listed, "the fixture's templates differ from {}: run scripts/render_templates.py", dir.display());
    for (name, _) in REFUSED {
        assert!(names.iter().any(|n| n == name), "REFUSED lists {name}, which is not in {}", dir.display());
    }

    let mut t = Tally::default();
    for name in &names {
        let source = std::fs::read_to_string(dir.join(name)).unwrap();
        let want = &expected[name];
        let sha = format!("{:x}", Sha256::digest(source.as_bytes()));
        assert_eq!(want["sha256"].as_str(), Some(sha.as_str()), "{name} changed since the fixture was made: run scripts/render_templates.py");
        let listed = REFUSED.iter().find(|(n, _)| n == name);
        let fail = |t: &mut Tally, what: String| match listed {
            Some(_) => t.refused.entry(name.clone()).or_default().push(what),
            None => t.failures.entry(name.clone()).or_default().push(what),
        };
        let tmpl = match ChatTemplate::new(source, name.as_str(), want["bos_token"].as_str().unwrap(), want["eos_token"].as_str().unwrap()) {
            Ok(tmpl) => tmpl,
            Err(_) if want.get("compile_error").is_some() => {
                t.both_failed += convs.len();
                continue;
            }
            Err(e) => {
                fail(&mut t, format!("load: {e}"));
                continue;
            }
        };
        for (conv, msgs, opts) in &convs {
            let py = &want["renders"][conv];
            let got = tmpl.render_with(msgs, opts);
            match (py.get("text").and_then(Json::as_str), got) {
                (Some(text), Ok(got)) if got == text => t.exact += 1,
                (Some(text), Ok(got)) => {
                    let at = text.bytes().zip(got.bytes()).take_while(|(a, b)| a == b).count();
                    let ctx = |s: &str| s.get(at.saturating_sub(40)..(at + 60).min(s.len())).map(str::to_string).unwrap_or_default();
                    fail(&mut t, format!("{conv}: differs at byte {at}: python {:?} tandem {:?}", ctx(text), ctx(&got)))
                }
                (Some(_), Err(e)) => fail(&mut t, format!("{conv}: python rendered, tandem failed: {e}")),
                (None, Err(e)) => {
                    let msg = py["error"].as_str().unwrap();
                    if py["raised"].as_bool().unwrap() && !e.to_string().contains(msg) {
                        fail(&mut t, format!("{conv}: the template raised {msg:?} in python, tandem failed otherwise: {e}"));
                    } else {
                        t.both_failed += 1;
                    }
                }
                (None, Ok(got)) => {
                    let msg = py["error"].as_str().unwrap();
                    let excused = !py["raised"].as_bool().unwrap() && LENIENT.iter().any(|(n, err, _)| n == name && msg.contains(err));
                    if excused {
                        *t.lenient.entry(name.clone()).or_default() += 1;
                    } else {
                        fail(&mut t, format!("{conv}: python failed ({msg:?}), tandem rendered {} bytes", got.len()))
                    }
                }
            }
        }
    }

    let mut report = String::new();
    for (name, construct) in REFUSED {
        match t.refused.get(*name) {
            None => report.push_str(&format!("{name}: listed in REFUSED but renders every conversation as Python: remove it\n")),
            Some(errs) => {
                for e in errs.iter().filter(|e| !e.contains(construct)) {
                    report.push_str(&format!("{name}: listed as refusing `{construct}`, but: {e}\n"));
                }
            }
        }
    }
    for (name, _, _) in LENIENT {
        if !t.lenient.contains_key(*name) {
            report.push_str(&format!("{name}: listed in LENIENT but no longer renders where Python fails: remove it\n"));
        }
    }
    for (name, errs) in &t.failures {
        for e in errs {
            report.push_str(&format!("{name}: {e}\n"));
        }
    }
    eprintln!(
        "{} templates x {} conversations: {} renders exact, {} failed in both, {} rendered where Python failed (LENIENT), \
         {} templates refused by name, {} templates failing",
        names.len(),
        convs.len(),
        t.exact,
        t.both_failed,
        t.lenient.values().sum::<usize>(),
        t.refused.len(),
        t.failures.len()
    );
    assert!(report.is_empty(), "{report}");
}
