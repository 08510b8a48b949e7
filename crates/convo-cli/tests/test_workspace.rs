//! Checks over the workspace's own layout that no compiler makes.

use std::collections::BTreeSet;
use std::path::Path;

/// Every crate's tests are one binary, `tests/runner.rs`, with
/// `autotests = false`: a file in `tests/` that runner.rs does not name as a
/// module would never be compiled, and its tests never run. This lists every
/// `tests/*.rs` of every crate and checks that its runner includes it.
#[test]
fn every_test_file_is_a_module_of_its_runner() {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut checked = 0;
    let mut forgotten = Vec::new();
    for krate in std::fs::read_dir(&crates).unwrap() {
        let tests = krate.unwrap().path().join("tests");
        let Ok(runner) = std::fs::read_to_string(tests.join("runner.rs")) else {
            continue;
        };
        let modules: BTreeSet<&str> = runner
            .lines()
            .filter_map(|l| {
                let l = l.trim();
                let l = l.strip_prefix("pub ").unwrap_or(l);
                l.strip_prefix("mod ")?.strip_suffix(';')
            })
            .collect();
        for file in std::fs::read_dir(&tests).unwrap() {
            let path = file.unwrap().path();
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let stem = path.file_stem().unwrap().to_string_lossy().into_owned();
            if stem == "runner" {
                continue;
            }
            checked += 1;
            if !modules.contains(stem.as_str()) {
                forgotten.push(path.display().to_string());
            }
        }
    }
    assert!(
        checked >= 20,
        "found only {checked} test files under {crates:?}"
    );
    assert!(
        forgotten.is_empty(),
        "test files that no tests/runner.rs includes (add `mod NAME;`): {forgotten:?}"
    );
}
