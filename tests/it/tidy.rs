//! Tidy checks over the source tree, in the manner of rust-analyzer's `tidy` tests: plain
//! reads of the files, each failure naming the file and the fix.
//!
//! - every Rust file opens with `//!`;
//! - no module cycles: within each crate, at every level of the module tree, the sibling
//!   modules depend on each other without a cycle (see [`module_cycles`]);
//! - no source file is over 600 lines without a line at its top saying why
//!   (`Why this file is long:`);
//! - no `RecoveryPolicy` decision is asked outside the recovery crates and the decorators
//!   that wrap a policy (`impl RecoveryPolicy for`), tests and benchmarks aside (`describe`,
//!   what a policy is rather than a decision, is read where it is shown);
//! - ARCHITECTURE.md's code map names, for each crate, exactly the workspace crates it
//!   depends on (`cargo metadata`), only external crates it does depend on, and none it
//!   must not.
//!
//! (That the metric's status names are `ServerStatus`'s is a fact of the types: the metric
//! iterates `ServerStatus::NAMES`, which a unit test in the recovery crate holds to the
//! variants.)

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace root")
        .to_path_buf()
}

/// Files under `dir` whose names end with one of `extensions`, skipping build output,
/// installed packages and fuzzing corpora.
fn files(dir: &Path, extensions: &[&str]) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(current) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&current) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let name = entry.file_name().to_string_lossy().into_owned();
            if path.is_dir() {
                let skipped = [
                    "target",
                    "node_modules",
                    ".venv",
                    ".git",
                    "corpus",
                    "artifacts",
                ];
                if !skipped.contains(&name.as_str()) && !name.starts_with('.') {
                    pending.push(path);
                }
            } else if extensions.iter().any(|extension| name.ends_with(extension)) {
                found.push(path);
            }
        }
    }
    found.sort();
    found
}

/// The directories holding the project's own sources.
fn source_dirs() -> Vec<PathBuf> {
    [
        "gateway",
        "tests",
        "policies",
        "fuzz",
        "templates",
        "examples",
    ]
    .iter()
    .map(|dir| root().join(dir))
    .filter(|dir| dir.exists())
    .collect()
}

fn relative(path: &Path) -> String {
    path.strip_prefix(root())
        .unwrap_or(path)
        .display()
        .to_string()
}

#[test]
fn every_rust_file_opens_with_a_module_comment() {
    let missing: Vec<String> = source_dirs()
        .iter()
        .flat_map(|dir| files(dir, &[".rs"]))
        .filter(|path| {
            let text = std::fs::read_to_string(path).unwrap_or_default();
            !text.starts_with("//!")
        })
        .map(|path| relative(&path))
        .collect();
    assert!(
        missing.is_empty(),
        "these files do not open with a `//!` comment saying what they are: {missing:?}"
    );
}

/// The line a long file carries near its top.
const LONG_MARKER: &str = "Why this file is long:";
const LONG: usize = 600;

#[test]
fn no_source_file_is_over_600_lines_without_saying_why() {
    let unexplained: Vec<String> = source_dirs()
        .iter()
        .flat_map(|dir| files(dir, &[".rs", ".js", ".mjs", ".py"]))
        .filter_map(|path| {
            let text = std::fs::read_to_string(&path).ok()?;
            let lines = text.lines().count();
            let explained = text.lines().take(30).any(|line| line.contains(LONG_MARKER));
            (lines > LONG && !explained).then(|| format!("{} ({lines} lines)", relative(&path)))
        })
        .collect();
    assert!(
        unexplained.is_empty(),
        "these files are over {LONG} lines: split them where a boundary is real, or say why \
         not in a line near the top containing {LONG_MARKER:?}: {unexplained:?}"
    );
}

/// The decisions of `RecoveryPolicy` (gateway/policy), as a call spells them.
const POLICY_METHODS: [&str; 5] = [
    ".classify(",
    ".reconnect_delay(",
    ".health(",
    ".probe_schedule(",
    ".crash(",
];

#[test]
fn policies_are_asked_only_by_the_recovery_crates_and_the_decorators() {
    let allowed_dirs = [
        root().join("gateway/policy"),
        root().join("gateway/recovery"),
    ];
    let mut callers = Vec::new();
    for path in files(&root().join("gateway"), &[".rs"]) {
        let test_or_bench = path.components().any(|part| {
            let part = part.as_os_str();
            part == "tests" || part == "benches" || part == "tests.rs"
        });
        if test_or_bench || allowed_dirs.iter().any(|dir| path.starts_with(dir)) {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        // A decorator wraps a policy and passes each question on.
        if text.contains("impl RecoveryPolicy for") {
            continue;
        }
        let code = without_tests(&without_comments(&text));
        for method in POLICY_METHODS {
            if code.contains(method) && names_a_policy(&code) {
                callers.push(format!("{} calls {method}", relative(&path)));
            }
        }
    }
    assert!(
        callers.is_empty(),
        "a policy's decisions are asked by the recovery machine (gateway/recovery) or a \
         decorator that wraps a policy, nowhere else: {callers:?}"
    );
}

/// Whether code handles a policy at all (so that `.health(` of something else is not taken
/// for a policy's question).
fn names_a_policy(code: &str) -> bool {
    code.contains("RecoveryPolicy") || code.contains("Builtin")
}

/// `text` without `//` comments (to the end of the line).
fn without_comments(text: &str) -> String {
    text.lines()
        .map(|line| match line.find("//") {
            Some(at) => &line[..at],
            None => line,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// `code` up to its test module (`#[cfg(test)]` followed by `mod`), which by the house
/// style closes a file.
fn without_tests(code: &str) -> String {
    let mut rest = code;
    let mut kept = String::new();
    while let Some(at) = rest.find("#[cfg(test)]") {
        let after = rest[at + "#[cfg(test)]".len()..].trim_start();
        if after.starts_with("mod ") || after.starts_with("pub mod ") {
            kept.push_str(&rest[..at]);
            return kept;
        }
        kept.push_str(&rest[..at + 1]);
        rest = &rest[at + 1..];
    }
    kept.push_str(rest);
    kept
}

/// One crate's modules: module path (`a::b`, `""` for the root) → its file.
fn modules(src: &Path) -> BTreeMap<String, PathBuf> {
    let mut modules = BTreeMap::new();
    for path in files(src, &[".rs"]) {
        let rel = path
            .strip_prefix(src)
            .expect("under src")
            .with_extension("");
        let mut parts: Vec<String> = rel
            .components()
            .map(|part| part.as_os_str().to_string_lossy().into_owned())
            .collect();
        if parts.iter().any(|part| part == "tests") {
            continue;
        }
        if parts.len() == 1 && (parts[0] == "lib" || parts[0] == "main") {
            parts.clear();
        }
        if parts.last().is_some_and(|last| last == "mod") {
            parts.pop();
        }
        modules.insert(parts.join("::"), path);
    }
    modules
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// The path that starts at byte `at` of `code`: identifiers joined by `::`.
fn path_at(code: &str, at: usize) -> String {
    let mut end = at;
    let bytes = code.as_bytes();
    loop {
        let start = end;
        while end < bytes.len() && is_ident(bytes[end] as char) {
            end += 1;
        }
        if end == start {
            return code[at..start].trim_end_matches("::").to_owned();
        }
        if code[end..].starts_with("::") && code[end + 2..].starts_with(is_ident) {
            end += 2;
        } else {
            return code[at..end].to_owned();
        }
    }
}

/// Every module path `code` (the file of module `module`) refers to, as written: through
/// `crate::`, `super::`, `self::` or a child module's name.
fn references(code: &str, module: &str, children: &[&str]) -> BTreeSet<String> {
    let own: Vec<&str> = if module.is_empty() {
        Vec::new()
    } else {
        module.split("::").collect()
    };
    let mut found = BTreeSet::new();
    let starts = |needle: &str| -> Vec<usize> {
        code.match_indices(needle)
            .filter(|(at, _)| {
                !code[..*at]
                    .chars()
                    .next_back()
                    .is_some_and(|c| is_ident(c) || c == ':')
            })
            .map(|(at, _)| at + needle.len())
            .collect()
    };
    for at in starts("crate::") {
        if code[at..].starts_with('{') {
            // `crate::{a::b, c}`: each item of one level of braces.
            let close = code[at..].find('}').map_or(code.len(), |end| at + end);
            for item in code[at + 1..close].split(',') {
                let item = item.trim().trim_start_matches('{');
                if !item.is_empty() {
                    found.insert(item.split_whitespace().next().unwrap_or("").to_owned());
                }
            }
        } else {
            found.insert(path_at(code, at));
        }
    }
    for at in starts("super::") {
        let mut ups = 1;
        let mut at = at;
        while code[at..].starts_with("super::") {
            ups += 1;
            at += "super::".len();
        }
        let base = &own[..own.len().saturating_sub(ups)];
        let rest = path_at(code, at);
        let mut path: Vec<&str> = base.to_vec();
        if !rest.is_empty() {
            path.push(&rest);
        }
        found.insert(path.join("::"));
    }
    for at in starts("self::") {
        let mut path = own.clone();
        let rest = path_at(code, at);
        path.push(&rest);
        found.insert(path.join("::"));
    }
    for child in children {
        let name = child.rsplit("::").next().unwrap_or(child);
        for at in starts(&format!("{name}::")) {
            found.insert(format!("{child}::{}", path_at(code, at)));
        }
    }
    found
}

/// The longest module path of `modules` that `path` starts with.
fn owning_module<'a>(path: &str, modules: &'a BTreeMap<String, PathBuf>) -> Option<&'a str> {
    let parts: Vec<&str> = path.split("::").collect();
    (0..=parts.len()).rev().find_map(|length| {
        let candidate = parts[..length].join("::");
        modules
            .get_key_value(&candidate)
            .map(|(key, _)| key.as_str())
    })
}

fn is_within(module: &str, ancestor: &str) -> bool {
    ancestor.is_empty() || module == ancestor || module.starts_with(&format!("{ancestor}::"))
}

/// The cycles among sibling modules of the crate whose sources are in `src`: for each use
/// of module B in module A (neither inside the other: a module and its submodules are one
/// home), A's ancestor and B's ancestor just below their common ancestor depend on each
/// other; each strongly connected group of those is a cycle, shown with the uses that
/// make it. Test modules are left out. (A use through a re-export at the crate root is not
/// seen.)
fn module_cycles(src: &Path) -> Vec<String> {
    let modules = modules(src);
    let mut level: BTreeMap<String, BTreeMap<String, Vec<String>>> = BTreeMap::new();
    for (module, path) in &modules {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        let code = without_tests(&without_comments(&text));
        let children: Vec<&str> = modules
            .keys()
            .filter(|other| {
                let prefix = if module.is_empty() {
                    String::new()
                } else {
                    format!("{module}::")
                };
                other.starts_with(&prefix)
                    && other.as_str() != module
                    && !other[prefix.len()..].contains("::")
            })
            .map(String::as_str)
            .collect();
        for reference in references(&code, module, &children) {
            let Some(target) = owning_module(&reference, &modules) else {
                continue;
            };
            if is_within(module, target) || is_within(target, module) {
                continue;
            }
            let a: Vec<&str> = module.split("::").collect();
            let b: Vec<&str> = target.split("::").collect();
            let common = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
            let from = a[..=common].join("::");
            let to = b[..=common].join("::");
            level
                .entry(from)
                .or_default()
                .entry(to)
                .or_default()
                .push(format!("{module} → {target}"));
        }
    }
    strongly_connected(&level)
        .into_iter()
        .map(|group| {
            let uses: Vec<&String> = group
                .iter()
                .flat_map(|from| {
                    level[from]
                        .iter()
                        .filter(|(to, _)| group.contains(*to))
                        .flat_map(|(_, uses)| uses)
                })
                .collect();
            format!("{} ({} because {uses:?})", relative(src), group.join(" ↔ "))
        })
        .collect()
}

/// Tarjan's strongly connected components of more than one node.
fn strongly_connected(graph: &BTreeMap<String, BTreeMap<String, Vec<String>>>) -> Vec<Vec<String>> {
    struct Walk<'a> {
        graph: &'a BTreeMap<String, BTreeMap<String, Vec<String>>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        found: Vec<Vec<String>>,
    }
    impl<'a> Walk<'a> {
        fn visit(&mut self, node: &'a str) {
            let number = self.index.len();
            self.index.insert(node, number);
            self.low.insert(node, number);
            self.stack.push(node);
            for next in self
                .graph
                .get(node)
                .into_iter()
                .flat_map(|edges| edges.keys())
            {
                if !self.index.contains_key(next.as_str()) {
                    self.visit(next);
                    let low = self.low[node].min(self.low[next.as_str()]);
                    self.low.insert(node, low);
                } else if self.stack.contains(&next.as_str()) {
                    let low = self.low[node].min(self.index[next.as_str()]);
                    self.low.insert(node, low);
                }
            }
            if self.low[node] == self.index[node] {
                let mut group = Vec::new();
                while let Some(top) = self.stack.pop() {
                    group.push(top.to_owned());
                    if top == node {
                        break;
                    }
                }
                if group.len() > 1 {
                    group.sort();
                    self.found.push(group);
                }
            }
        }
    }
    let mut walk = Walk {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        found: Vec::new(),
    };
    for node in graph.keys() {
        if !walk.index.contains_key(node.as_str()) {
            walk.visit(node);
        }
    }
    walk.found
}

/// `cargo metadata` of the workspace, without dependencies' own packages.
fn metadata() -> serde_json::Value {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let output = std::process::Command::new(cargo)
        .args([
            "metadata",
            "--no-deps",
            "--format-version",
            "1",
            "--offline",
        ])
        .current_dir(root())
        .output()
        .expect("run cargo metadata");
    assert!(
        output.status.success(),
        "cargo metadata failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("cargo metadata is JSON")
}

/// The directories of the workspace's crate roots (`src/lib.rs`, `src/main.rs`, or a
/// binary's `main.rs` in a directory of its own).
fn crate_sources() -> Vec<PathBuf> {
    let metadata = metadata();
    let mut dirs = BTreeSet::new();
    for package in metadata["packages"].as_array().expect("packages") {
        for target in package["targets"].as_array().expect("targets") {
            let path = PathBuf::from(target["src_path"].as_str().expect("src_path"));
            let name = path
                .file_name()
                .and_then(|name| name.to_str())
                .unwrap_or("");
            if name == "lib.rs" || name == "main.rs" {
                dirs.insert(path.parent().expect("a directory").to_path_buf());
            }
        }
    }
    dirs.into_iter().collect()
}

#[test]
fn no_crate_has_a_module_cycle() {
    let sources = crate_sources();
    assert!(
        sources.len() >= 6,
        "the workspace's crates were found: {sources:?}"
    );
    let cycles: Vec<String> = sources.iter().flat_map(|src| module_cycles(src)).collect();
    assert!(
        cycles.is_empty(),
        "module cycles (move what both sides need to one of them or below both, or make one \
         module a submodule of the other):\n{}",
        cycles.join("\n")
    );
}

#[test]
fn the_cycle_check_finds_a_cycle_between_siblings_and_none_between_parent_and_child() {
    let dir = tempfile::tempdir().expect("tempdir");
    let write = |path: &str, text: &str| {
        let path = dir.path().join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    };
    write("lib.rs", "//! root\nmod a;\nmod b;\nmod c;\n");
    write("a.rs", "//! a\nmod inner;\nuse inner::X;\n");
    write("a/inner.rs", "//! inner\nuse super::Y;\nuse crate::b::Z;\n");
    write("b.rs", "//! b\nuse crate::{c::W, a};\n");
    write(
        "c.rs",
        "//! c\n#[cfg(test)]\nmod tests {\n    use crate::b::Q;\n}\n",
    );
    let cycles = module_cycles(dir.path());
    assert_eq!(cycles.len(), 1, "{cycles:?}");
    assert!(cycles[0].contains("a ↔ b"), "{cycles:?}");
    assert!(
        cycles[0].contains("a::inner → b"),
        "the use that makes it: {cycles:?}"
    );
}

/// The code map's rows: crate name → (may depend on, must not depend on).
fn code_map() -> BTreeMap<String, (String, String)> {
    let text = std::fs::read_to_string(root().join("ARCHITECTURE.md")).expect("ARCHITECTURE.md");
    let mut rows = BTreeMap::new();
    for line in text.lines().filter(|line| line.starts_with("| `")) {
        let cells: Vec<&str> = line.trim().trim_matches('|').split(" | ").collect();
        let Some(name) = cells.first().and_then(|cell| {
            let open = cell.find("(`")?;
            let close = cell[open..].find("`)")?;
            Some(cell[open + 2..open + close].to_owned())
        }) else {
            continue;
        };
        assert_eq!(
            cells.len(),
            4,
            "the code map row of {name} has {} cells, not 4 (a `|` in a cell?)",
            cells.len()
        );
        rows.insert(name, (cells[2].to_owned(), cells[3].to_owned()));
    }
    rows
}

/// The words of a cell that could name crates.
fn words(cell: &str) -> BTreeSet<String> {
    cell.split(|c: char| !(c.is_ascii_alphanumeric() || c == '-' || c == '_'))
        .filter(|word| !word.is_empty())
        .map(str::to_owned)
        .collect()
}

#[test]
fn the_code_map_names_what_each_crate_depends_on() {
    let metadata = metadata();
    let packages = metadata["packages"].as_array().expect("packages");
    let ours: BTreeSet<String> = packages
        .iter()
        .map(|package| package["name"].as_str().expect("name").to_owned())
        .collect();
    // How the code map calls a crate of ours: `wardgate-engine` is "engine".
    let short = |name: &str| -> String {
        match name {
            "wardgate" => "cli".to_owned(),
            _ => name.trim_start_matches("wardgate-").to_owned(),
        }
    };
    let map = code_map();
    let mut wrong = Vec::new();
    for package in packages {
        let name = package["name"].as_str().expect("name");
        if name == "wardgate-tests" {
            continue;
        }
        let Some((may, must_not)) = map.get(name) else {
            wrong.push(format!("{name} has no row in the code map"));
            continue;
        };
        let dependencies: BTreeSet<String> = package["dependencies"]
            .as_array()
            .expect("dependencies")
            .iter()
            .filter(|dependency| dependency["kind"].is_null())
            .map(|dependency| dependency["name"].as_str().expect("name").to_owned())
            .collect();
        let internal: BTreeSet<String> = dependencies
            .iter()
            .filter(|dependency| ours.contains(*dependency))
            .map(|dependency| short(dependency))
            .collect();
        let may_words = words(may);
        let named_internal: BTreeSet<String> = ours
            .iter()
            .map(|crate_name| short(crate_name))
            .filter(|crate_name| may_words.contains(crate_name))
            .collect();
        if named_internal != internal {
            wrong.push(format!(
                "{name} depends on {internal:?} of ours; its row names {named_internal:?}"
            ));
        }
        for word in &may_words {
            if KNOWN_CRATES.contains(&word.as_str()) && !dependencies.contains(word) {
                wrong.push(format!(
                    "{name}'s row says it may depend on {word}, and it does not"
                ));
            }
        }
        // What a crate must not depend on is named before any explanation (after " — ",
        // ";" or in parentheses).
        let named = must_not
            .split(" — ")
            .next()
            .and_then(|cell| cell.split(';').next())
            .unwrap_or("");
        let mut unexplained = String::new();
        let mut depth = 0;
        for c in named.chars() {
            match c {
                '(' => depth += 1,
                ')' => depth -= 1,
                _ if depth == 0 => unexplained.push(c),
                _ => {}
            }
        }
        for word in words(&unexplained) {
            let internal_name = ours.iter().find(|crate_name| short(crate_name) == word);
            let forbidden = match internal_name {
                Some(crate_name) => dependencies.contains(crate_name),
                None => dependencies.contains(&word),
            };
            if forbidden {
                wrong.push(format!("{name} depends on {word}, which its row forbids"));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "ARCHITECTURE.md's code map is out of date with Cargo.toml: {wrong:?}"
    );
}

/// External crates a "may depend on" cell may name: each named one must be a dependency.
const KNOWN_CRATES: &[&str] = &[
    "serde",
    "rmcp",
    "tokio",
    "hyper",
    "reqwest",
    "wasmtime",
    "wasmtime-wasi",
    "tokio-postgres",
    "clap",
    "anyhow",
];

/// ARCHITECTURE.md stays an overview (issue 32: at most about 3,000 words); the detail
/// belongs in `docs/`.
#[test]
fn the_architecture_overview_stays_short() {
    let text = std::fs::read_to_string(root().join("ARCHITECTURE.md")).expect("ARCHITECTURE.md");
    let words = text.split_whitespace().count();
    assert!(
        words <= 3_200,
        "ARCHITECTURE.md has {words} words, over the overview's 3,200: move detail to docs/ and link it"
    );
    let invariants = text.matches("**Architecture Invariant:**").count();
    assert!(
        invariants >= 20,
        "ARCHITECTURE.md names {invariants} invariants as bold `**Architecture Invariant:**` lines; they are the document's point"
    );
}

/// The `fn` names in the `impl ServerHandler for TYPE` block of `file`.
fn handler_methods(file: &str, type_name: &str) -> BTreeSet<String> {
    let code = std::fs::read_to_string(root().join(file)).expect("read the handler");
    let start = code
        .find(&format!("impl ServerHandler for {type_name} {{"))
        .unwrap_or_else(|| panic!("{file} implements ServerHandler for {type_name}"));
    let block = &code[start..];
    let end = block.find("\n}\n").expect("the impl block ends");
    block[..end]
        .lines()
        .filter_map(|line| {
            let line = line.trim_start();
            let rest = line
                .strip_prefix("async fn ")
                .or_else(|| line.strip_prefix("fn "))?;
            Some(rest.split(['(', '<']).next()?.to_owned())
        })
        .collect()
}

#[test]
fn the_traced_handler_passes_on_every_method_the_session_handler_implements() {
    let session = handler_methods("gateway/downstream/src/lib.rs", "SessionHandler");
    let traced = handler_methods("gateway/downstream/src/traced.rs", "Traced");
    assert!(session.len() > 10, "{session:?}");
    let missing: Vec<_> = session.difference(&traced).collect();
    assert!(
        missing.is_empty(),
        "gateway/downstream/src/traced.rs does not pass on {missing:?}: rmcp's default would answer instead of SessionHandler's; add each to `impl ServerHandler for Traced`"
    );
}
