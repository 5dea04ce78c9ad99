//! Headless Chromium for checking pages as a browser runs them: [`dump_dom`] loads a URL, lets
//! its scripts run for a budget of virtual time, and returns the serialized DOM.
//!
//! The browser is Debian's `chromium` package, which `scripts/install-deps` installs; the first
//! of `chromium`, `chromium-browser` and `google-chrome` found on `PATH` is used.
//!
//! Browser tests must not pass silently where no browser is installed, so they start with
//! [`require`]: it is an error when none is found, unless the environment has
//! `SLUICE_SKIP_BROWSER=1`, in which case it returns `Ok(false)` and the test returns early
//! (for machines that cannot install Chromium; CI never sets it).
//!
//! ```no_run
//! if sluice_testkit::chromium::require()? {
//!     let dom = sluice_testkit::chromium::dump_dom("http://127.0.0.1:8080/", 3000)?;
//!     assert!(dom.contains("data-loaded=\"1\""));
//! }
//! # Ok::<(), anyhow::Error>(())
//! ```

use std::io::Read;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};

use crate::temp;

/// The executables looked for on `PATH`, in this order.
pub const BINARIES: [&str; 3] = ["chromium", "chromium-browser", "google-chrome"];

/// The environment variable that turns a missing browser into a skip (value `1`).
pub const SKIP_ENV: &str = "SLUICE_SKIP_BROWSER";

/// How long a browser may run beyond the virtual-time budget before it is killed.
const HARD_TIMEOUT: Duration = Duration::from_secs(60);

/// How many trailing stderr lines an error quotes.
const STDERR_LINES: usize = 30;

/// The browser executable: the first of [`BINARIES`] on `PATH`.
pub fn find() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    BINARIES.iter().find_map(|name| std::env::split_paths(&path).map(|dir| dir.join(name)).find(|candidate| is_executable(candidate)))
}

/// Whether a browser is installed (see [`find`]).
pub fn available() -> bool {
    find().is_some()
}

/// `Ok(true)` when a browser is installed; `Ok(false)` (after a note on stderr) when none is but
/// `SLUICE_SKIP_BROWSER=1` is set; otherwise an error telling what to install.
pub fn require() -> anyhow::Result<bool> {
    if available() {
        return Ok(true);
    }
    if std::env::var(SKIP_ENV).as_deref() == Ok("1") {
        eprintln!("chromium: no browser found ({}), skipping because {SKIP_ENV}=1", BINARIES.join(", "));
        return Ok(false);
    }
    bail!("{}", not_found())
}

/// Loads `url` in headless Chromium, lets it run `budget_ms` of virtual time (timers fire at
/// once; pending network loads hold the clock), and returns the DOM as HTML.
///
/// Each call has its own profile (`--user-data-dir` in a temp dir), so calls may run in
/// parallel. The browser's whole process group is killed if it has not exited
/// `budget_ms` + 60 s of real time after the start. Errors quote the tail of its stderr.
pub fn dump_dom(url: &str, budget_ms: u64) -> anyhow::Result<String> {
    let bin = find().ok_or_else(|| anyhow::anyhow!("{}", not_found()))?;
    let profile = temp::new_dir("chromium")?;
    let mut child = Command::new(&bin)
        .arg("--headless")
        .arg("--no-sandbox")
        .arg("--disable-gpu")
        .arg("--no-first-run")
        .arg("--no-default-browser-check")
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg(format!("--virtual-time-budget={budget_ms}"))
        .arg("--dump-dom")
        .arg(url)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // Its own process group, so that the renderer and helper processes can be killed too.
        .process_group(0)
        .spawn()
        .with_context(|| format!("starting {}", bin.display()))?;
    let pgid = i32::try_from(child.id()).context("process id out of range")?;
    let stdout = drain(child.stdout.take());
    let stderr = drain(child.stderr.take());

    let deadline = Instant::now() + Duration::from_millis(budget_ms) + HARD_TIMEOUT;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) if Instant::now() >= deadline => break None,
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => {
                kill_group(pgid);
                let _ = child.wait();
                return Err(e).context("waiting for chromium");
            }
        }
    };
    // Whatever is left of the group (helpers outliving the browser, or all of it on timeout)
    // goes, so that the pipes close and the readers finish.
    kill_group(pgid);
    let status = match status {
        Some(status) => Some(status),
        None => {
            child.wait().context("reaping chromium")?;
            None
        }
    };
    let out = join(stdout);
    let err = String::from_utf8_lossy(&join(stderr)).into_owned();

    let Some(status) = status else {
        bail!(
            "chromium did not finish loading {url} within {} s, killed; stderr:\n{}",
            (Duration::from_millis(budget_ms) + HARD_TIMEOUT).as_secs(),
            tail(&err)
        );
    };
    if !status.success() {
        bail!("chromium failed ({status}) loading {url}; stderr:\n{}", tail(&err));
    }
    let dom = String::from_utf8_lossy(&out).into_owned();
    if dom.trim().is_empty() {
        bail!("chromium printed no DOM for {url}; stderr:\n{}", tail(&err));
    }
    Ok(dom)
}

fn not_found() -> String {
    format!(
        "no Chromium found on PATH (looked for {}): run scripts/install-deps (it installs Debian's \
         `chromium`), or set {SKIP_ENV}=1 to skip the browser tests",
        BINARIES.join(", ")
    )
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

fn kill_group(pgid: i32) {
    // SAFETY: kill(2) with a negative pid signals a process group; no memory is involved.
    unsafe {
        libc::kill(-pgid, libc::SIGKILL);
    }
}

fn drain<R: Read + Send + 'static>(pipe: Option<R>) -> Option<JoinHandle<Vec<u8>>> {
    pipe.map(|mut pipe| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            let _ = pipe.read_to_end(&mut buf);
            buf
        })
    })
}

fn join(reader: Option<JoinHandle<Vec<u8>>>) -> Vec<u8> {
    reader.and_then(|r| r.join().ok()).unwrap_or_default()
}

/// The last lines of Chromium's stderr, without its D-Bus complaints (there is no bus here).
fn tail(stderr: &str) -> String {
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.contains(":ERROR:dbus/")).collect();
    let start = lines.len().saturating_sub(STDERR_LINES);
    let text = lines[start..].join("\n");
    if text.is_empty() {
        "(empty)".to_owned()
    } else {
        text
    }
}
