//! The pre-initialised MariaDB data directory that every test server copies.
//!
//! `mariadb-install-db` runs once per machine and MariaDB version, into
//! `<tmp>/sluice-testkit-template-<version>/data`, under an exclusive `flock` so that parallel
//! test processes don't race. A marker file records what was built; a missing or different
//! marker means the template is rebuilt.

use std::fs::File;
use std::os::fd::AsRawFd as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use anyhow::{bail, Context as _};

/// InnoDB sizing shared by the template build and every server (keeps copies small and fast).
pub(crate) const INNODB_ARGS: &[&str] =
    &["--innodb-buffer-pool-size=128M", "--innodb-log-file-size=48M", "--innodb-flush-log-at-trx-commit=2"];

/// Run after the system tables exist. The bootstrap server runs with --skip-grant-tables, so
/// FLUSH PRIVILEGES is needed before account statements work.
const SETUP_SQL: &str = "\
-- Accounts named after this machine's hostname are useless under --skip-name-resolve.
DELETE FROM mysql.global_priv WHERE host NOT IN ('localhost', '127.0.0.1', '::1', '%');
DELETE FROM mysql.proxies_priv WHERE host NOT IN ('localhost', '127.0.0.1', '::1', '%');
FLUSH PRIVILEGES;
CREATE OR REPLACE USER 'root'@'127.0.0.1' IDENTIFIED VIA mysql_native_password USING '';
GRANT ALL PRIVILEGES ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION;
CREATE OR REPLACE USER 'root'@'%' IDENTIFIED VIA mysql_native_password USING '';
GRANT ALL PRIVILEGES ON *.* TO 'root'@'%' WITH GRANT OPTION;
CREATE DATABASE IF NOT EXISTS test;
";

/// Path of a ready template data dir, building it first if needed.
pub(crate) fn data_dir() -> anyhow::Result<PathBuf> {
    static READY: OnceLock<PathBuf> = OnceLock::new();
    if let Some(dir) = READY.get() {
        return Ok(dir.clone());
    }
    let dir = build_if_missing()?;
    Ok(READY.get_or_init(|| dir).clone())
}

fn build_if_missing() -> anyhow::Result<PathBuf> {
    let version = mariadbd_version()?;
    let name = format!("sluice-testkit-template-{version}");
    let root = std::env::temp_dir().join(&name);
    let _lock = lock(&std::env::temp_dir().join(format!("{name}.lock")))?;

    let data = root.join("data");
    let marker = root.join("ready");
    let install_args = install_args(&data, &root.join("setup.sql"));
    let recipe = format!("{install_args:?}\n{SETUP_SQL}");
    if std::fs::read_to_string(&marker).is_ok_and(|m| m == recipe) {
        return Ok(data);
    }

    if root.exists() {
        std::fs::remove_dir_all(&root).with_context(|| format!("removing stale template {}", root.display()))?;
    }
    std::fs::create_dir_all(&root).with_context(|| format!("creating {}", root.display()))?;
    std::fs::write(root.join("setup.sql"), SETUP_SQL).context("writing setup.sql")?;
    let log_path = root.join("install.log");
    let log = File::create(&log_path).context("creating install.log")?;
    let status = Command::new("mariadb-install-db")
        .args(&install_args)
        .stdin(Stdio::null())
        .stdout(log.try_clone().context("cloning log handle")?)
        .stderr(log)
        .status()
        .context("running mariadb-install-db (is MariaDB installed?)")?;
    if !status.success() {
        let log = std::fs::read_to_string(&log_path).unwrap_or_default();
        bail!("mariadb-install-db failed ({status}) building {}; install log:\n{}", root.display(), tail(&log, 60));
    }
    std::fs::write(&marker, recipe).context("writing template marker")?;
    Ok(data)
}

fn install_args(data: &Path, setup_sql: &Path) -> Vec<String> {
    let mut args = vec![
        "--no-defaults".to_string(),
        "--auth-root-authentication-method=normal".into(),
        "--skip-test-db".into(),
        "--skip-name-resolve".into(),
        format!("--datadir={}", data.display()),
        format!("--extra-file={}", setup_sql.display()),
    ];
    // The bootstrap server's own tmpdir: a starting mariadbd deletes the `#sql*` files of its
    // tmpdir, which in a shared /tmp belong to servers already running.
    if let Some(root) = setup_sql.parent() {
        args.push(format!("--tmpdir={}", root.display()));
    }
    if is_root() {
        args.push("--user=root".into());
    }
    args.extend(INNODB_ARGS.iter().map(|a| a.to_string()));
    args
}

/// "10.11.19" from `mariadbd  Ver 10.11.19-MariaDB-0+deb12u1 for debian-linux-gnu ...`.
fn mariadbd_version() -> anyhow::Result<String> {
    let out = Command::new("mariadbd").arg("--version").output().context("running `mariadbd --version` (is MariaDB installed?)")?;
    let text = String::from_utf8_lossy(&out.stdout);
    let version = text
        .split_whitespace()
        .skip_while(|w| *w != "Ver")
        .nth(1)
        .and_then(|v| v.split('-').next())
        .filter(|v| !v.is_empty() && v.chars().all(|c| c.is_ascii_digit() || c == '.'));
    match version {
        Some(v) => Ok(v.to_string()),
        None => bail!("cannot parse `mariadbd --version` output: {text:?}"),
    }
}

/// Holds an exclusive flock on `path` until dropped.
fn lock(path: &Path) -> anyhow::Result<File> {
    let file = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .with_context(|| format!("opening lock file {}", path.display()))?;
    loop {
        // SAFETY: flock on a valid, open descriptor.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) } == 0 {
            return Ok(file);
        }
        let err = std::io::Error::last_os_error();
        if err.kind() != std::io::ErrorKind::Interrupted {
            return Err(err).with_context(|| format!("locking {}", path.display()));
        }
    }
}

pub(crate) fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// The last `n` lines of `text`.
pub(crate) fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

#[cfg(test)]
mod tests {
    #[test]
    fn tail_keeps_last_lines() {
        assert_eq!(super::tail("a\nb\nc\n", 2), "b\nc");
        assert_eq!(super::tail("a", 5), "a");
    }
}
