//! Checks over the workspace's own layout that no compiler makes.

use std::collections::BTreeSet;

/// Every crate's tests are one binary, `tests/runner.rs`, with
/// `autotests = false`: a file in `tests/` that runner.rs does not name as a
/// module would never be compiled, and its tests never run. This lists every
/// `tests/*.rs` of every crate and checks that its runner includes it.
#[test]
fn every_test_file_is_a_module_of_its_runner() {
    let crates = convo_testutil::package_dir(env!("CARGO_MANIFEST_DIR")).join("..");
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

/// The arrows point down (ARCHITECTURE.md): each crate's normal
/// dependencies on convo's own crates are among the ones listed here, so
/// the proxy and the harness never depend on each other nor on the server
/// (which mounts the proxy), the parsers need no store and the wire types
/// need no store. A new arrow is a decision: make it here.
#[test]
fn crates_depend_only_downward() {
    let allowed: &[(&str, &[&str])] = &[
        ("convo-core", &[]),
        ("convo-api", &["convo-core"]),
        ("convo-store", &["convo-core"]),
        // The parsers know no store (nor the wire types).
        ("convo-formats", &["convo-core"]),
        ("convo-git", &["convo-core", "convo-store"]),
        ("convo-runtime", &["convo-core", "convo-store", "convo-api"]),
        // Calls and conversations into the store: the ledger, threading,
        // OTLP, record, replay (the recording format writes payloads and
        // times as the API does).
        (
            "convo-llm",
            &["convo-core", "convo-store", "convo-api", "convo-formats"],
        ),
        (
            "convo-proxy",
            &[
                "convo-core",
                "convo-store",
                "convo-api",
                "convo-runtime",
                "convo-llm",
            ],
        ),
        // The server assembles every surface (`launch`): the recording
        // proxy is one it mounts.
        (
            "convo-server",
            &[
                "convo-core",
                "convo-store",
                "convo-api",
                "convo-formats",
                "convo-runtime",
                "convo-llm",
                "convo-proxy",
            ],
        ),
        (
            "convo-mcp",
            &[
                "convo-core",
                "convo-store",
                "convo-api",
                "convo-runtime",
                "convo-llm",
            ],
        ),
        (
            "convo-harness",
            &[
                "convo-core",
                "convo-store",
                "convo-api",
                "convo-runtime",
                "convo-llm",
            ],
        ),
    ];
    let crates = convo_testutil::package_dir(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut wrong = Vec::new();
    for (name, ok) in allowed {
        let toml = std::fs::read_to_string(crates.join(name).join("Cargo.toml"))
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        // The [dependencies] table only (dev-dependencies may reach up).
        let deps = toml
            .split("\n[")
            .find(|t| t.starts_with("dependencies]"))
            .unwrap_or("");
        for line in deps.lines().skip(1) {
            let dep = line.split(['=', '.', ' ']).next().unwrap_or("").trim();
            if dep.starts_with("convo-") && !ok.contains(&dep) {
                wrong.push(format!("{name} -> {dep}"));
            }
        }
    }
    assert!(wrong.is_empty(), "arrows not in ARCHITECTURE.md: {wrong:?}");
}
