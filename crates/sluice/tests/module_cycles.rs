//! The top-level modules of crates/sluice form no import cycle, and the data path imports
//! nothing from the control side (docs/architecture.md). Read from the sources' `crate::NAME`
//! paths, so a new cycle fails here with the modules that form it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Modules of the control side: the data path must not reach them.
const CONTROL_SIDE: &[&str] = &["admin", "http", "control", "server"];
/// Modules on the data path (① – ⑥ and what they read).
const DATA_PATH: &[&str] = &["listener", "session", "plan", "rules", "route", "pool", "exec", "datapath", "registry", "users", "stats"];

/// Module → the top-level modules its non-test sources name as `crate::X`.
fn imports(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("read src dir") {
            let path = entry.expect("dir entry").path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") || path.file_name().is_some_and(|n| n == "tests.rs") {
                continue;
            }
            let rel = path.strip_prefix(src).expect("under src");
            let first = rel.components().next().expect("a component").as_os_str().to_string_lossy().into_owned();
            let module = first.trim_end_matches(".rs").to_string();
            if module == "main" || module == "lib" {
                continue;
            }
            let text = std::fs::read_to_string(&path).expect("read source");
            // Inline test modules may reach anywhere.
            let code = text.split("#[cfg(test)]\nmod tests {").next().unwrap_or("");
            let deps = graph.entry(module.clone()).or_default();
            for (i, _) in code.match_indices("crate::") {
                let name: String = code[i + 7..].chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
                if !name.is_empty() && name != module {
                    deps.insert(name);
                }
            }
        }
    }
    let modules: BTreeSet<String> = graph.keys().cloned().collect();
    for deps in graph.values_mut() {
        deps.retain(|d| modules.contains(d));
    }
    graph
}

/// Strongly connected components with more than one module (Tarjan).
fn cycles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct Walk<'a> {
        graph: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        found: Vec<Vec<String>>,
    }
    impl<'a> Walk<'a> {
        fn visit(&mut self, v: &'a str) {
            let n = self.index.len();
            self.index.insert(v, n);
            self.low.insert(v, n);
            self.stack.push(v);
            self.on_stack.insert(v);
            for w in &self.graph[v] {
                let w = w.as_str();
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let lw = self.low[w];
                    let lv = self.low.get_mut(v).expect("visited");
                    *lv = (*lv).min(lw);
                } else if self.on_stack.contains(w) {
                    let iw = self.index[w];
                    let lv = self.low.get_mut(v).expect("visited");
                    *lv = (*lv).min(iw);
                }
            }
            if self.low[v] == self.index[v] {
                let mut component = Vec::new();
                while let Some(w) = self.stack.pop() {
                    self.on_stack.remove(w);
                    component.push(w.to_string());
                    if w == v {
                        break;
                    }
                }
                if component.len() > 1 {
                    component.sort();
                    self.found.push(component);
                }
            }
        }
    }
    let mut walk =
        Walk { graph, index: BTreeMap::new(), low: BTreeMap::new(), stack: Vec::new(), on_stack: BTreeSet::new(), found: Vec::new() };
    for v in graph.keys() {
        if !walk.index.contains_key(v.as_str()) {
            walk.visit(v);
        }
    }
    walk.found
}

fn src() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

#[test]
fn the_modules_of_the_crate_form_no_import_cycle() {
    let graph = imports(&src());
    assert!(graph.len() > 10, "read only {} modules", graph.len());
    let found = cycles(&graph);
    assert!(found.is_empty(), "import cycles between modules of crates/sluice: {found:?}");
}

#[test]
fn the_data_path_imports_nothing_from_the_control_side() {
    let graph = imports(&src());
    let mut wrong = Vec::new();
    for m in DATA_PATH {
        let deps = graph.get(*m).unwrap_or_else(|| panic!("module {m} not found"));
        for d in deps.iter().filter(|d| CONTROL_SIDE.contains(&d.as_str())) {
            wrong.push(format!("{m} → {d}"));
        }
    }
    assert!(wrong.is_empty(), "data-path modules import the control side: {wrong:?}");
}

#[test]
fn the_check_sees_a_cycle() {
    let mut graph = BTreeMap::new();
    graph.insert("a".to_string(), BTreeSet::from(["b".to_string()]));
    graph.insert("b".to_string(), BTreeSet::from(["c".to_string()]));
    graph.insert("c".to_string(), BTreeSet::from(["a".to_string()]));
    graph.insert("d".to_string(), BTreeSet::from(["a".to_string()]));
    assert_eq!(cycles(&graph), vec![vec!["a".to_string(), "b".to_string(), "c".to_string()]]);
}
