//! Meta-tests of the project's conventions (`docs/contributing.md`): every operator
//! file has a test file of its own and an extension method, every operator method's
//! documentation has the six headings, and `operators/mod.rs` holds no logic.

use std::fs;
use std::path::Path;

/// Files under `operators/` that are not operators.
const NOT_OPERATORS: [&str; 1] = ["mod"];
/// Operators tested in another operator's file: (operator, file).
const TESTED_ELSEWHERE: [(&str, &str); 1] = [("merge_all", "merge")];
/// Headings every operator method documents.
const HEADINGS: [&str; 6] = [
    "# Backpressure",
    "# Timing",
    "# Errors",
    "# Cancellation",
    "# Panics",
    "# Examples",
];

fn operator_files() -> Vec<String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut names: Vec<String> = fs::read_dir(root.join("operators"))
        .expect("operators/ exists")
        .filter_map(|entry| {
            let path = entry.ok()?.path();
            let stem = path.file_stem()?.to_str()?.to_owned();
            (path.extension()? == "rs" || path.is_dir()).then_some(stem)
        })
        .filter(|name| !NOT_OPERATORS.contains(&name.as_str()))
        .collect();
    names.sort();
    names
}

/// The doc comment right above `fn <name>` in `src/ext.rs` (and its attributes, such
/// as a `#[cfg(feature = ..)]`), if there is one.
fn ext_doc(ext: &str, name: &str) -> Option<String> {
    let lines: Vec<&str> = ext.lines().collect();
    let at = lines.iter().position(|l| {
        l.trim_start().starts_with(&format!("fn {name}<"))
            || l.trim_start().starts_with(&format!("fn {name}("))
    })?;
    let doc: Vec<&str> = lines[..at]
        .iter()
        .rev()
        .skip_while(|l| l.trim_start().starts_with("#["))
        .take_while(|l| l.trim_start().starts_with("///"))
        .copied()
        .collect();
    Some(doc.into_iter().rev().collect::<Vec<_>>().join("\n"))
}

#[test]
fn every_operator_has_a_test_file() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for name in operator_files() {
        let file = TESTED_ELSEWHERE
            .iter()
            .find(|(op, _)| *op == name)
            .map_or(name.as_str(), |(_, file)| file);
        assert!(
            root.join("tests/operators")
                .join(format!("{file}.rs"))
                .exists(),
            "operators/{name} has no tests/operators/{file}.rs"
        );
    }
}

#[test]
fn every_operator_method_documents_the_headings() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let ext = fs::read_to_string(root.join("src/ext.rs")).expect("src/ext.rs exists");
    let mut checked = 0;
    for name in operator_files() {
        if name == "merge_all" {
            continue; // `weir::merge` is a free function, documented in its file.
        }
        let doc = ext_doc(&ext, &name).unwrap_or_else(|| panic!("no PublisherExt::{name}"));
        for heading in HEADINGS {
            assert!(
                doc.contains(heading),
                "PublisherExt::{name} lacks `{heading}`"
            );
        }
        checked += 1;
    }
    assert!(checked >= 20, "only {checked} operators found");
}

#[test]
fn operators_mod_only_declares_and_reexports() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let module = fs::read_to_string(root.join("operators/mod.rs")).expect("operators/mod.rs");
    for line in module.lines() {
        let line = line.trim();
        assert!(
            line.is_empty()
                || line.starts_with("//")
                || line.starts_with("mod ")
                || line.starts_with("pub use ")
                || line.starts_with("#[cfg"),
            "operators/mod.rs holds more than declarations: {line}"
        );
    }
}
