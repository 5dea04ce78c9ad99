//! The runnable examples under `examples/` stay true: each `examples/<name>/run.sh` starts its
//! own MariaDB servers and this build's sluice, shows its feature, checks the output and cleans
//! up. A test fails when the script exits non-zero (a check that did not hold) or runs past the
//! time limit, and shows what the script printed.

use std::io::{Read as _, Seek as _};
use std::os::unix::process::CommandExt as _;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// An example takes well under a minute; this leaves room for a loaded machine.
const TIME_LIMIT: Duration = Duration::from_secs(120);
/// After SIGTERM at the time limit, how long the script's cleanup trap gets before SIGKILL.
const CLEANUP_GRACE: Duration = Duration::from_secs(15);

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().unwrap()
}

/// Runs `examples/<name>/run.sh` against this build's sluice and asserts it passed.
fn run_example(name: &str) {
    let script = repo().join("examples").join(name).join("run.sh");
    assert!(script.is_file(), "{} is missing", script.display());
    // One file for stdout and stderr, in the order the script wrote them.
    let mut out = tempfile::tempfile().expect("temp file for the script's output");
    let mut cmd = Command::new("bash");
    cmd.arg(&script)
        .current_dir(repo())
        .env("SLUICE_BIN", env!("CARGO_BIN_EXE_sluice"))
        .env_remove("KEEP_TMP")
        .stdin(Stdio::null())
        .stdout(out.try_clone().unwrap())
        .stderr(out.try_clone().unwrap())
        // Its own process group, so that the time limit stops the script and what it started.
        .process_group(0);
    // SAFETY: prctl is async-signal-safe; it only asks for SIGTERM if this thread dies, so the
    // script's cleanup trap runs even when the test process is killed.
    unsafe {
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
            Ok(())
        });
    }
    let mut child = cmd.spawn().expect("running bash");
    let pgid = libc::pid_t::try_from(child.id()).unwrap();
    let started = Instant::now();
    let mut timed_out = false;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        let elapsed = started.elapsed();
        if elapsed > TIME_LIMIT && !timed_out {
            timed_out = true;
            // SAFETY: signalling the process group this test created.
            unsafe { libc::kill(-pgid, libc::SIGTERM) };
        }
        if elapsed > TIME_LIMIT + CLEANUP_GRACE {
            // SAFETY: as above.
            unsafe { libc::kill(-pgid, libc::SIGKILL) };
            break child.wait().unwrap();
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let mut text = String::new();
    out.rewind().unwrap();
    out.read_to_string(&mut text).unwrap();
    // Shown by the test harness when the test fails (or with --nocapture).
    println!("{text}");
    assert!(!timed_out, "examples/{name}/run.sh ran longer than {TIME_LIMIT:?} and was stopped (its output above)");
    assert!(status.success(), "examples/{name}/run.sh failed ({status}); its output above says which check");
}

/// Every folder under `examples/`, each run by the test of the same name below.
const EXAMPLES: [&str; 18] = [
    "query-rules",
    "cache",
    "firewall",
    "read-write-split",
    "replication-failover",
    "live-reconfig",
    "pooling",
    "load-balancing",
    "backend-accounts",
    "login-limits",
    "observability",
    "tls",
    "graceful-shutdown",
    "sharding",
    "traffic",
    "probe",
    "io-uring",
    "unix-socket",
];

#[test]
fn every_example_has_a_test() {
    let mut found: Vec<String> = std::fs::read_dir(repo().join("examples"))
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.file_type().unwrap().is_dir())
        .map(|e| e.file_name().into_string().unwrap())
        .collect();
    found.sort();
    let mut listed: Vec<String> = EXAMPLES.iter().map(|s| s.to_string()).collect();
    listed.sort();
    assert_eq!(found, listed, "examples/ and EXAMPLES in this file differ: add a test for each example");
}

#[test]
fn query_rules() {
    run_example("query-rules");
}

#[test]
fn traffic() {
    run_example("traffic");
}

#[test]
fn io_uring() {
    run_example("io-uring");
}

#[test]
fn unix_socket() {
    run_example("unix-socket");
}

#[test]
fn cache() {
    run_example("cache");
}

#[test]
fn firewall() {
    run_example("firewall");
}

#[test]
fn read_write_split() {
    run_example("read-write-split");
}

#[test]
fn replication_failover() {
    run_example("replication-failover");
}

#[test]
fn live_reconfig() {
    run_example("live-reconfig");
}

#[test]
fn pooling() {
    run_example("pooling");
}

#[test]
fn load_balancing() {
    run_example("load-balancing");
}

#[test]
fn backend_accounts() {
    run_example("backend-accounts");
}

#[test]
fn login_limits() {
    run_example("login-limits");
}

#[test]
fn observability() {
    run_example("observability");
}

#[test]
fn tls() {
    run_example("tls");
}

#[test]
fn graceful_shutdown() {
    run_example("graceful-shutdown");
}

#[test]
fn sharding() {
    run_example("sharding");
}

/// Skips (exit 0, saying why) where the probe is not permitted.
#[test]
fn probe() {
    run_example("probe");
}
