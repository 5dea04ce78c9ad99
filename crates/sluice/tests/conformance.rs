//! MariaDB's own test suite (mysql-test, suite `main`, from Debian's `mariadb-test`) through
//! sluice: tests/conformance/run.py runs each test in extern mode directly and through sluice
//! (pooling on), in the text and the prepared-statement protocol, each mode against a fresh
//! server, and fails if a test passes directly but not through sluice (less the differences
//! tests/conformance/expected-differences.txt explains).
//!
//! `ci_subset` runs tests/conformance/ci-subset.txt (a few minutes). The whole suite is
//! `cargo test -p sluice --test conformance -- --ignored` (hours on 2 cores; CONFORMANCE.md).
//! Results, with each failing test's report, stay under target/tmp/conformance/.
//!
//! Without mariadb-test installed the tests say so and pass, except under CI (`CI` set), where
//! scripts/install-deps has installed it and its absence is a failure.

use std::path::{Path, PathBuf};
use std::process::Command;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().expect("repository root")
}

fn mtr_installed() -> bool {
    let dir = std::env::var("MTR_DIR").unwrap_or_else(|_| "/usr/share/mysql/mysql-test".into());
    Path::new(&dir).join("mysql-test-run.pl").exists()
}

/// Runs the conformance runner with `args`; panics with its report unless it exits 0.
fn conformance(name: &str, args: &[&str], limit_secs: u32) {
    if !mtr_installed() {
        assert!(
            std::env::var_os("CI").is_none(),
            "mariadb-test is not installed (mysql-test-run.pl missing); scripts/install-deps installs it"
        );
        eprintln!("SKIPPED conformance::{name}: mariadb-test is not installed (apt-get install mariadb-test, or scripts/install-deps)");
        return;
    }
    let results = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("conformance").join(name);
    let _ = std::fs::remove_dir_all(&results);
    let out = Command::new("timeout")
        .arg(limit_secs.to_string())
        .arg("python3")
        .arg(repo().join("tests/conformance/run.py"))
        .args(args)
        .arg("--sluice")
        .arg(env!("CARGO_BIN_EXE_sluice"))
        .arg("--results")
        .arg(&results)
        .current_dir(repo())
        .output()
        .expect("running python3 tests/conformance/run.py");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(
        out.status.success(),
        "conformance run failed ({}; exit 1: tests pass directly but not through sluice, 2: the run itself failed, \
         124: over {limit_secs}s):\n{text}",
        out.status
    );
    println!("{text}");
}

#[test]
fn ci_subset() {
    conformance("ci_subset", &["--tests", "tests/conformance/ci-subset.txt", "--jobs", "2"], 900);
}

#[test]
#[ignore = "the whole suite `main`: hours on 2 cores"]
fn whole_main_suite() {
    conformance("whole_main_suite", &["--all", "--jobs", "2", "--chunk", "100"], 6 * 3600);
}
