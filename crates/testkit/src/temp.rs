//! Temporary directories owned by one test process, and removal of those left by dead ones.
//!
//! Every directory is named `sluice-testkit-<pid>-<kind>-<random>` under [`std::env::temp_dir`],
//! so a later run can tell that its owner is gone and delete it.

use std::sync::Once;

use anyhow::Context as _;
use tempfile::TempDir;

const PREFIX: &str = "sluice-testkit-";

/// Creates a fresh temp dir for this process (and, once per process, sweeps stale ones).
pub(crate) fn new_dir(kind: &str) -> anyhow::Result<TempDir> {
    static SWEEP: Once = Once::new();
    SWEEP.call_once(remove_stale);
    tempfile::Builder::new()
        .prefix(&format!("{PREFIX}{}-{kind}-", std::process::id()))
        .tempdir()
        .with_context(|| format!("creating a temp dir in {}", std::env::temp_dir().display()))
}

/// Removes `sluice-testkit-<pid>-*` dirs whose process no longer exists. Best effort.
fn remove_stale() {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(owner_pid) else {
            continue;
        };
        if pid != std::process::id() && !process_exists(pid) {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// The pid in a `sluice-testkit-<pid>-...` name, if it is one.
fn owner_pid(name: &str) -> Option<u32> {
    let rest = name.strip_prefix(PREFIX)?;
    let (pid, _) = rest.split_once('-')?;
    pid.parse().ok()
}

/// Whether a process with this pid exists (EPERM counts as existing).
pub(crate) fn process_exists(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return false;
    };
    // SAFETY: kill with signal 0 only checks for existence and permission.
    let rc = unsafe { libc::kill(pid, 0) };
    rc == 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_owner_pid() {
        assert_eq!(owner_pid("sluice-testkit-123-srv-abc"), Some(123));
        assert_eq!(owner_pid("sluice-testkit-template-10.11.19"), None);
        assert_eq!(owner_pid("other-123-x"), None);
    }

    #[test]
    fn own_process_exists() {
        assert!(process_exists(std::process::id()));
    }
}
