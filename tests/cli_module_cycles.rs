//! The CLI's modules (`src/cli/**/*.rs`) form no import cycle: shared pieces live in leaf
//! modules, so a file can be read knowing only what it imports. A module's references to its
//! ancestors (the `CliError` / `Result` of `cli`, a parent's helpers) are not edges: the
//! ancestor declares it. Test modules (from `#[cfg(test)]` on) are not read.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Module path (`["cli", "gpt_oss", "chat"]`) → source text, for every file under `dir`.
fn modules(dir: &Path, path: Vec<String>, out: &mut BTreeMap<Vec<String>, String>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir).unwrap().flatten().map(|e| e.path()).collect();
    entries.sort();
    for p in entries {
        let stem = p.file_stem().unwrap().to_string_lossy().into_owned();
        if p.is_dir() {
            let mut sub = path.clone();
            sub.push(stem);
            modules(&p, sub, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            let mut m = path.clone();
            if stem != "mod" {
                m.push(stem);
            }
            out.insert(m, std::fs::read_to_string(&p).unwrap());
        }
    }
}

/// The text without comments and without its test part.
fn code(text: &str) -> String {
    let text = text.split("#[cfg(test)]").next().unwrap_or("");
    text.lines().map(|l| l.split("//").next().unwrap_or("")).collect::<Vec<_>>().join("\n")
}

fn ident(s: &str) -> &str {
    let end = s.find(|c: char| !(c.is_alphanumeric() || c == '_')).unwrap_or(s.len());
    &s[..end]
}

/// The names a path continues with after its prefix: `x` in `x::…`, every top-level item of
/// `{a, b::c}` as a path of its own.
fn continuations(rest: &str) -> Vec<Vec<String>> {
    let one = |s: &str| s.split("::").map(|p| ident(p.trim()).to_owned()).take_while(|p| !p.is_empty()).collect::<Vec<_>>();
    match rest.strip_prefix('{') {
        Some(group) => {
            let (mut depth, mut items, mut cur) = (0, vec![], String::new());
            for c in group.chars() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        items.push(std::mem::take(&mut cur));
                        continue;
                    }
                    _ => {}
                }
                cur.push(c);
            }
            items.push(cur);
            items.iter().map(|i| one(i)).filter(|p| !p.is_empty()).collect()
        }
        None => vec![one(rest)],
    }
}

/// The module a path from `base` names: the longest prefix that is a module file.
fn resolve(base: &[String], rest: &[String], known: &BTreeMap<Vec<String>, String>) -> Vec<String> {
    let mut best = base.to_vec();
    let mut m = base.to_vec();
    for seg in rest {
        m.push(seg.clone());
        if known.contains_key(&m) {
            best = m.clone();
        }
    }
    best
}

/// Every module each module refers to, ancestors left out.
fn edges(known: &BTreeMap<Vec<String>, String>) -> BTreeMap<Vec<String>, BTreeSet<Vec<String>>> {
    let mut out = BTreeMap::new();
    for (m, text) in known {
        let code = code(text);
        let mut to = BTreeSet::new();
        let mut refer = |base: &[String], rest: &str| {
            for c in continuations(rest) {
                to.insert(resolve(base, &c, known));
            }
        };
        // `super::super::x`, `crate::cli::x`.
        for (i, _) in code.match_indices("super::") {
            if code[..i].ends_with("super::") {
                continue;
            }
            let mut rest = &code[i..];
            let mut base = m.clone();
            while let Some(r) = rest.strip_prefix("super::") {
                base.pop();
                rest = r;
            }
            refer(&base, rest);
        }
        for (i, _) in code.match_indices("crate::") {
            refer(&[], &code[i + "crate::".len()..]);
        }
        // A child module by its bare name: `chat::run` where `mod chat;` is declared here.
        for (child, _) in known.iter().filter(|(k, _)| k.len() == m.len() + 1 && k.starts_with(m)) {
            let name = child.last().unwrap();
            let used =
                code.match_indices(&format!("{name}::")).any(|(i, _)| !code[..i].ends_with(|c: char| c.is_alphanumeric() || c == '_' || c == ':'));
            if used {
                to.insert(child.clone());
            }
        }
        to.retain(|t| !m.starts_with(t));
        out.insert(m.clone(), to);
    }
    out
}

/// A cycle, as the module path of each member, if there is one.
fn cycle(edges: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>) -> Option<Vec<String>> {
    fn visit<'a>(
        n: &'a Vec<String>,
        e: &'a BTreeMap<Vec<String>, BTreeSet<Vec<String>>>,
        stack: &mut Vec<&'a Vec<String>>,
        done: &mut BTreeSet<&'a Vec<String>>,
    ) -> Option<Vec<String>> {
        if let Some(at) = stack.iter().position(|s| *s == n) {
            return Some(stack[at..].iter().chain([&n]).map(|m| m.join("::")).collect());
        }
        if !done.insert(n) {
            return None;
        }
        stack.push(n);
        for t in e.get(n).into_iter().flatten() {
            if let Some(c) = visit(t, e, stack, done) {
                return Some(c);
            }
        }
        stack.pop();
        None
    }
    let mut done = BTreeSet::new();
    edges.keys().find_map(|n| visit(n, edges, &mut vec![], &mut done))
}

fn graph_of(files: &[(&str, &str)]) -> BTreeMap<Vec<String>, BTreeSet<Vec<String>>> {
    let known = files.iter().map(|(p, t)| (p.split("::").map(str::to_owned).collect(), t.to_string())).collect();
    edges(&known)
}

#[test]
fn cli_modules_have_no_import_cycle() {
    let mut known = BTreeMap::new();
    modules(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src/cli"), vec!["cli".into()], &mut known);
    assert!(known.len() > 20, "read {} modules", known.len());
    let e = edges(&known);
    assert_eq!(cycle(&e), None, "an import cycle among src/cli modules (move the shared items into a leaf module)");
}

#[test]
fn the_check_sees_the_reference_forms() {
    // Sibling through `super::x::Item`, grouped `use super::{..}`, the parent's child by bare name.
    let g = graph_of(&[
        ("cli", "mod a; mod b; mod g; pub enum CliError {} fn f() { a::run(); }"),
        ("cli::a", "use super::{CliError, b::Thing};"),
        ("cli::b", "fn f() { super::g::c::go(); }"),
        ("cli::g", "mod c; fn f() { c::go(); }"),
        ("cli::g::c", "use super::super::a::X;\n#[cfg(test)]\nmod tests { use super::super::b::Y; }"),
    ]);
    let set = |xs: &[&str]| xs.iter().map(|x| x.split("::").map(str::to_owned).collect()).collect::<BTreeSet<Vec<String>>>();
    assert_eq!(g[&vec!["cli".to_owned()]], set(&["cli::a"]));
    assert_eq!(g[&vec!["cli".to_owned(), "a".to_owned()]], set(&["cli::b"]));
    assert_eq!(g[&vec!["cli".to_owned(), "b".to_owned()]], set(&["cli::g::c"]));
    assert_eq!(g[&vec!["cli".to_owned(), "g".to_owned(), "c".to_owned()]], set(&["cli::a"]));
    assert_eq!(cycle(&g), Some(vec!["cli::a".into(), "cli::b".into(), "cli::g::c".into(), "cli::a".into()]));
    // Without c → a the chain is a line; a child naming its ancestors is no cycle.
    let g = graph_of(&[
        ("cli", "mod a; mod b; fn f() { a::x(); b::y(); }"),
        ("cli::a", "use super::b::Y; use super::CliError;"),
        ("cli::b", "use super::Result;"),
    ]);
    assert_eq!(cycle(&g), None);
}
