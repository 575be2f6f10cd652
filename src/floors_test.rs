//! The tree in dependency order, checked: every top-level module sits on a
//! floor (the table in the crate's `//!` map, `src/lib.rs`, the one source)
//! and imports only modules on lower floors. A module that reached up, or
//! sideways to a module of its own floor, would tie the two into one
//! circle; this test names the file and the import instead.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Files that are no module of the map: the crate root, the binary and this test.
const NOT_MODULES: [&str; 3] = ["lib", "main", "floors_test"];

/// `module → floor`, read from the rows `//! | 3 | [`config`] | ... |` of lib.rs.
fn floor_table(lib_rs: &str) -> BTreeMap<String, u32> {
    let mut floors = BTreeMap::new();
    for line in lib_rs.lines() {
        let Some(row) = line.strip_prefix("//! |") else {
            continue;
        };
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        let (Some(floor), Some(module)) = (cells.first(), cells.get(1)) else {
            continue;
        };
        let Ok(floor) = floor.parse::<u32>() else {
            continue;
        };
        let name = module.trim_start_matches("[`").trim_end_matches("`]");
        floors.insert(name.to_string(), floor);
    }
    floors
}

/// Every `.rs` file under `dir`.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()))
        .filter_map(Result::ok)
        .map(|e| e.path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|x| x == "rs") {
            out.push(path);
        }
    }
}

/// The source without comments (`//` to the end of the line, `/* */`), so a
/// doc link to a higher module is no import. String literals are kept as
/// they are: none of the crate spells `crate::` inside one.
fn strip_comments(source: &str) -> String {
    let mut out = String::with_capacity(source.len());
    let mut rest = source;
    while !rest.is_empty() {
        if let Some(after) = rest.strip_prefix("/*") {
            rest = after.split_once("*/").map_or("", |(_, tail)| tail);
        } else if rest.starts_with("//") {
            rest = rest.find('\n').map_or("", |at| &rest[at..]);
        } else if rest.starts_with('"') {
            // Skip a string literal whole, so `"http://..."` is no comment.
            let mut end = 1;
            let bytes = rest.as_bytes();
            while end < bytes.len() && bytes[end] != b'"' {
                end += if bytes[end] == b'\\' { 2 } else { 1 };
            }
            let end = (end + 1).min(rest.len());
            out.push_str(&rest[..end]);
            rest = &rest[end..];
        } else {
            let ch = rest.chars().next().unwrap_or(' ');
            out.push(ch);
            rest = &rest[ch.len_utf8()..];
        }
    }
    out
}

/// The top-level modules named after each `crate::` of `code`: `crate::a::b`
/// gives `a`, `crate::{a, b::c}` gives `a` and `b`.
fn crate_references(code: &str) -> Vec<String> {
    let ident = |s: &str| -> String {
        s.chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect()
    };
    let mut found = Vec::new();
    for (at, _) in code.match_indices("crate::") {
        if code[..at].ends_with('$') || code[..at].ends_with(|c: char| c.is_alphanumeric()) {
            continue;
        }
        let rest = code[at + "crate::".len()..].trim_start();
        if let Some(group) = rest.strip_prefix('{') {
            // The items of the group at depth 0, up to its closing brace.
            let mut depth = 0usize;
            let mut item_start = true;
            for (i, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => item_start = true,
                    c if item_start && (c.is_ascii_alphanumeric() || c == '_') => {
                        found.push(ident(&group[i..]));
                        item_start = false;
                    }
                    _ => {}
                }
            }
        } else {
            let name = ident(rest);
            if !name.is_empty() {
                found.push(name);
            }
        }
    }
    found
}

#[test]
fn every_module_imports_only_lower_floors() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let lib_rs = std::fs::read_to_string(root.join("lib.rs")).expect("src/lib.rs");
    let floors = floor_table(&lib_rs);
    assert!(
        floors.len() >= 10,
        "the floor table in src/lib.rs's `//!` map was not found"
    );
    let mut files = Vec::new();
    rust_files(&root, &mut files);
    let mut problems = Vec::new();
    for file in &files {
        let relative = file.strip_prefix(&root).unwrap_or(file);
        let top = relative
            .components()
            .next()
            .map(|c| {
                c.as_os_str()
                    .to_string_lossy()
                    .trim_end_matches(".rs")
                    .to_string()
            })
            .unwrap_or_default();
        if NOT_MODULES.contains(&top.as_str()) {
            continue;
        }
        let Some(&floor) = floors.get(&top) else {
            problems.push(format!(
                "{}: module `{top}` has no floor in the table of src/lib.rs",
                relative.display()
            ));
            continue;
        };
        let source = std::fs::read_to_string(file).expect("a source file");
        for (line_no, line) in strip_comments(&source).lines().enumerate() {
            for used in crate_references(line) {
                if used == top || used == "TOOL_VERSION" {
                    continue;
                }
                match floors.get(&used) {
                    Some(&to) if to < floor => {}
                    Some(&to) => problems.push(format!(
                        "{}:{}: `{top}` (floor {floor}) imports `crate::{used}` (floor {to}): \
                         a module may only import lower floors",
                        relative.display(),
                        line_no + 1
                    )),
                    None => problems.push(format!(
                        "{}:{}: `crate::{used}` is no module of the floor table",
                        relative.display(),
                        line_no + 1
                    )),
                }
            }
        }
    }
    assert!(problems.is_empty(), "\n{}", problems.join("\n"));
}

#[test]
fn references_are_found_in_every_form() {
    let code = strip_comments(
        "use crate::config::{self, Api};\n\
         use crate::{stats::Stat, time};\n\
         // use crate::runner;\n\
         let url = \"http://x\"; f(crate::hash::mix(1, 2)); /* crate::k8s */\n\
         pub(crate) fn g() {}",
    );
    let refs = crate_references(&code);
    assert_eq!(refs, ["config", "stats", "time", "hash"]);
}
