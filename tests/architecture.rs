//! The crate graph drawn in `docs/architecture.md` is the one the manifests declare.
//!
//! The document's ```` ```mermaid ```` block under "Crate graph" lists every workspace package as a
//! node and every `[dependencies]` entry of one workspace package on another as an edge
//! `from --> to`. A node is written `id` or `id["package-name"]` (mermaid ids cannot hold every
//! package name); the label, where given, is the package name. This test reads the workspace's
//! `Cargo.toml` files (members from `[workspace] members`, a dependency on a member found through
//! its `path`, directly or through `[workspace.dependencies]`) and compares both sets.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

type Graph = (BTreeSet<String>, BTreeSet<(String, String)>);

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read_toml(path: &Path) -> toml::Table {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.parse().unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The directory a manifest's `path = "…"` names, normalised so that two spellings of one
/// directory compare equal.
fn dir(base: &Path, rel: &str) -> PathBuf {
    let p = base.join(rel);
    p.canonicalize().unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// Packages and member-on-member `[dependencies]` edges, from the manifests.
fn manifest_graph(root: &Path) -> Graph {
    let ws = read_toml(&root.join("Cargo.toml"));
    let members = ws["workspace"]["members"].as_array().expect("[workspace] members");
    // Member directory -> package name.
    let mut by_dir = BTreeMap::new();
    let mut manifests = Vec::new();
    for m in members {
        let d = dir(root, m.as_str().expect("member is a string"));
        let manifest = read_toml(&d.join("Cargo.toml"));
        let name = manifest["package"]["name"].as_str().expect("package.name").to_string();
        by_dir.insert(d.clone(), name.clone());
        manifests.push((d, name, manifest));
    }
    let ws_deps = ws["workspace"].get("dependencies").and_then(|v| v.as_table()).cloned().unwrap_or_default();
    let mut edges = BTreeSet::new();
    for (d, name, manifest) in &manifests {
        let mut tables = vec![manifest.get("dependencies")];
        // Platform-specific dependencies are dependencies too.
        if let Some(targets) = manifest.get("target").and_then(|t| t.as_table()) {
            tables.extend(targets.values().map(|t| t.get("dependencies")));
        }
        for (key, spec) in tables.into_iter().flatten().filter_map(|t| t.as_table()).flatten() {
            let path = if spec.get("workspace").and_then(|w| w.as_bool()) == Some(true) {
                ws_deps.get(key).and_then(|w| w.get("path")).and_then(|p| p.as_str()).map(|p| dir(root, p))
            } else {
                spec.get("path").and_then(|p| p.as_str()).map(|p| dir(d, p))
            };
            if let Some(dep) = path.and_then(|p| by_dir.get(&p)) {
                edges.insert((name.clone(), dep.clone()));
            }
        }
    }
    (by_dir.into_values().collect(), edges)
}

/// `id` or `id["label"]` / `id[label]`: the id, and the label if there is one.
fn node(token: &str) -> (String, Option<String>) {
    let token = token.trim();
    match token.split_once('[') {
        Some((id, rest)) => {
            let label = rest.trim_end_matches(']').trim_matches('"');
            (id.trim().to_string(), Some(label.to_string()))
        }
        None => (token.to_string(), None),
    }
}

/// The graph of the first ```` ```mermaid ```` block after the heading `## Crate graph`.
fn doc_graph(doc: &str) -> Graph {
    let section = doc.split_once("\n## Crate graph").expect("docs/architecture.md has a section '## Crate graph'").1;
    let block = section.split_once("```mermaid\n").expect("a ```mermaid block in 'Crate graph'").1;
    let block = block.split_once("```").expect("the mermaid block is closed").0;
    let mut labels = BTreeMap::new();
    let mut ids = BTreeSet::new();
    let mut id_edges = Vec::new();
    for line in block.lines().map(str::trim) {
        if line.is_empty() || line.starts_with("%%") || line.starts_with("graph ") || line.starts_with("flowchart ") {
            continue;
        }
        let parts: Vec<_> = line.split("-->").map(node).collect();
        assert!(parts.len() <= 2, "one edge a line: {line}");
        for (id, label) in &parts {
            ids.insert(id.clone());
            if let Some(l) = label {
                let old = labels.insert(id.clone(), l.clone());
                assert!(old.is_none() || old.as_ref() == Some(l), "node {id} has two labels");
            }
        }
        if let [(from, _), (to, _)] = &parts[..] {
            id_edges.push((from.clone(), to.clone()));
        }
    }
    let name = |id: &String| labels.get(id).cloned().unwrap_or_else(|| id.clone());
    (ids.iter().map(name).collect(), id_edges.iter().map(|(a, b)| (name(a), name(b))).collect())
}

/// What differs between the drawn graph and the declared one, one line each; empty if equal.
fn differences(drawn: &Graph, declared: &Graph) -> Vec<String> {
    let mut out = Vec::new();
    out.extend(declared.0.difference(&drawn.0).map(|p| format!("package {p} is not drawn")));
    out.extend(drawn.0.difference(&declared.0).map(|p| format!("{p} is drawn but is no workspace package")));
    out.extend(declared.1.difference(&drawn.1).map(|(a, b)| format!("{a} depends on {b}: no edge {a} --> {b}")));
    out.extend(drawn.1.difference(&declared.1).map(|(a, b)| format!("edge {a} --> {b} drawn, but {a} does not depend on {b}")));
    out
}

#[test]
fn documented_crate_graph_matches_the_manifests() {
    let root = root();
    let doc = std::fs::read_to_string(root.join("docs/architecture.md")).expect("read docs/architecture.md");
    let diff = differences(&doc_graph(&doc), &manifest_graph(&root));
    assert!(diff.is_empty(), "docs/architecture.md's crate graph is out of date:\n{}", diff.join("\n"));
}

#[test]
fn the_manifests_have_member_edges() {
    // The comparison above means something only if the manifests parse into a real graph.
    let (packages, edges) = manifest_graph(&root());
    assert!(packages.contains("tandem") && packages.contains("reference"), "{packages:?}");
    assert!(edges.contains(&("engine".to_string(), "reference".to_string())), "{edges:?}");
}

#[test]
fn a_missing_or_extra_edge_is_reported() {
    let doc = "x\n## Crate graph\n```mermaid\ngraph TD\n  a --> b\n  b[\"pkg-b\"] --> c\n  d\n```\n";
    let drawn = doc_graph(doc);
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<BTreeSet<_>>();
    assert_eq!(drawn.0, s(&["a", "pkg-b", "c", "d"]));
    let edge = |a: &str, b: &str| (a.to_string(), b.to_string());
    let declared = (drawn.0.clone(), [edge("a", "pkg-b"), edge("d", "c")].into_iter().collect());
    assert_eq!(differences(&drawn, &declared), ["d depends on c: no edge d --> c", "edge pkg-b --> c drawn, but pkg-b does not depend on c"]);
}
