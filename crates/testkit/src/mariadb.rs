//! Private MariaDB server processes for tests: start, query, kill, restart, clean up.

use std::fs::File;
use std::io::{Read as _, Seek as _, SeekFrom, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use tempfile::TempDir;

use crate::template::{self, tail};
use crate::{free_port, spawner, temp, TestCerts};

/// How long a server gets to accept connections after being spawned.
const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// How many ports `start_with` tries when the chosen one gets taken before mariadbd binds it.
const PORT_ATTEMPTS: usize = 3;

/// What to start a server with. `Default` gives a plain, non-TLS server.
#[derive(Debug, Default)]
pub struct MariaDbOptions {
    /// Enable TLS with these certificates (`--ssl-ca/--ssl-cert/--ssl-key`).
    pub tls: Option<TestCerts>,
    /// Extra `mariadbd` arguments, appended last (so they override the defaults).
    pub extra_args: Vec<String>,
}

/// A private `mariadbd` listening on 127.0.0.1 with its own datadir in a temp dir.
///
/// Accounts: `root` with an empty password and all privileges (WITH GRANT OPTION) at
/// `localhost` (unix socket), `127.0.0.1` and `%`, all `mysql_native_password`. Database `test`
/// exists. Dropping the value kills the server and removes its directory.
#[derive(Debug)]
pub struct MariaDb {
    port: u16,
    pid: u32,
    socket: PathBuf,
    error_log: PathBuf,
    child: Option<Child>,
    opts: MariaDbOptions,
    dir: TempDir,
}

/// mariadbd exited because its TCP port was already taken.
#[derive(Debug)]
struct PortTaken(u16);

impl std::fmt::Display for PortTaken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "port {} is already in use", self.0)
    }
}

impl std::error::Error for PortTaken {}

impl MariaDb {
    /// Starts a server with default options.
    pub fn start() -> anyhow::Result<MariaDb> {
        Self::start_with(MariaDbOptions::default())
    }

    /// Starts a server: copies the template datadir, spawns `mariadbd`, waits until it answers.
    pub fn start_with(opts: MariaDbOptions) -> anyhow::Result<MariaDb> {
        let template = template::data_dir()?;
        let dir = temp::new_dir("srv")?;
        let socket = dir.path().join("mariadbd.sock");
        // sun_path holds 108 bytes including the terminating NUL.
        if socket.as_os_str().len() > 107 {
            bail!("socket path {} is too long for a unix socket; set TMPDIR to a shorter path", socket.display());
        }
        let data = dir.path().join("data");
        let out = Command::new("cp").arg("-a").arg(&template).arg(&data).output().context("running cp")?;
        if !out.status.success() {
            bail!("copying template {} to {} failed: {}", template.display(), data.display(), String::from_utf8_lossy(&out.stderr));
        }

        let mut db = MariaDb { port: 0, pid: 0, error_log: dir.path().join("error.log"), socket, child: None, opts, dir };
        for attempt in 1.. {
            db.port = free_port();
            match db.launch() {
                Ok(()) => break,
                Err(e) if attempt < PORT_ATTEMPTS && e.downcast_ref::<PortTaken>().is_some() => {}
                Err(e) => return Err(e),
            }
        }
        Ok(db)
    }

    /// The TCP port, on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `"127.0.0.1:PORT"`.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Process id of the current `mariadbd` (changes on [`restart`](Self::restart)).
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The server's unix socket.
    pub fn socket_path(&self) -> &Path {
        &self.socket
    }

    /// The certificates the server was started with, if any.
    pub fn tls(&self) -> Option<&TestCerts> {
        self.opts.tls.as_ref()
    }

    /// Runs SQL as root over the unix socket with the `mariadb` CLI in batch mode (`-N -B`) and
    /// returns its stdout. Several `;`-separated statements are fine.
    pub fn sql(&self, sql: &str) -> anyhow::Result<String> {
        let mut child = Command::new("mariadb")
            .arg("--no-defaults")
            .arg("-uroot")
            .arg(format!("--socket={}", self.socket.display()))
            .args(["-N", "-B"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .context("running the `mariadb` client")?;
        // Feed stdin from another thread so a large result can't deadlock against a large input.
        let mut stdin = child.stdin.take().context("client stdin")?;
        let input = sql.to_owned();
        let writer = std::thread::spawn(move || stdin.write_all(input.as_bytes()));
        let out = child.wait_with_output().context("waiting for `mariadb`")?;
        // A write error (broken pipe) only matters if the client did not report one itself.
        let written = writer.join().unwrap_or(Ok(()));
        if !out.status.success() {
            bail!(
                "`mariadb` failed ({}) on port {}: {}\nSQL: {}",
                out.status,
                self.port,
                String::from_utf8_lossy(&out.stderr).trim(),
                shorten(sql, 500)
            );
        }
        written.context("writing SQL to `mariadb`")?;
        String::from_utf8(out.stdout).context("`mariadb` output is not UTF-8")
    }

    /// SIGKILLs the server and reaps it. Does nothing if it is not running.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the server again on the same port and datadir (killing it first if still running).
    pub fn restart(&mut self) -> anyhow::Result<()> {
        self.kill();
        self.launch().with_context(|| format!("restarting MariaDB on port {}", self.port))
    }

    /// Spawns mariadbd on `self.port` and waits until it serves queries.
    fn launch(&mut self) -> anyhow::Result<()> {
        let log_start = std::fs::metadata(&self.error_log).map_or(0, |m| m.len());
        std::fs::create_dir_all(self.dir.path().join("tmp")).context("creating the server's tmpdir")?;
        let stderr = File::create(self.dir.path().join("mariadbd.stderr")).context("creating mariadbd.stderr")?;
        let mut cmd = Command::new("mariadbd");
        cmd.args(self.server_args()).stdin(Stdio::null()).stdout(Stdio::null()).stderr(stderr);
        let child = spawner::spawn(cmd).context("spawning mariadbd")?;
        self.pid = child.id();
        self.child = Some(child);
        let ready = self.wait_ready(log_start);
        if ready.is_err() {
            self.kill();
        }
        ready
    }

    fn server_args(&self) -> Vec<String> {
        let dir = self.dir.path();
        let mut args = vec![
            "--no-defaults".to_string(),
            format!("--datadir={}", dir.join("data").display()),
            format!("--port={}", self.port),
            "--bind-address=127.0.0.1".into(),
            format!("--socket={}", self.socket.display()),
            format!("--pid-file={}", dir.join("mariadbd.pid").display()),
            format!("--log-error={}", self.error_log.display()),
            // Its own: a starting mariadbd deletes every `#sql*` file in its tmpdir, which in a
            // shared /tmp are the temporary tables of the servers already running.
            format!("--tmpdir={}", dir.join("tmp").display()),
        ];
        if template::is_root() {
            args.push("--user=root".into());
        }
        args.extend(
            ["--skip-name-resolve", "--local-infile=1", "--max-allowed-packet=1G", "--max-connections=1000", "--skip-log-bin"]
                .map(String::from),
        );
        args.extend(template::INNODB_ARGS.iter().map(|a| a.to_string()));
        if let Some(tls) = &self.opts.tls {
            args.push(format!("--ssl-ca={}", tls.ca_cert.display()));
            args.push(format!("--ssl-cert={}", tls.server_cert.display()));
            args.push(format!("--ssl-key={}", tls.server_key.display()));
        }
        args.extend(self.opts.extra_args.iter().cloned());
        args
    }

    fn wait_ready(&mut self, log_start: u64) -> anyhow::Result<()> {
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            let child = self.child.as_mut().context("mariadbd is not running")?;
            if let Some(status) = child.try_wait().context("polling mariadbd")? {
                let log = self.log_since(log_start);
                let err = anyhow::anyhow!("mariadbd exited during startup ({status}); error log:\n{}", tail(&log, 40));
                if log.contains("Address already in use") {
                    return Err(err.context(PortTaken(self.port)));
                }
                return Err(err);
            }
            // mariadbd binds TCP before the unix socket and serves neither until fully started,
            // so a query over our private socket proves both are up. (A bare TCP probe would log
            // an "Aborted connection" warning and bump Aborted_connects.)
            if self.socket.exists() && self.sql("SELECT 1").is_ok() {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!(
                    "mariadbd (pid {}, port {}) did not accept connections within {:?}; \
                     error log:\n{}",
                    self.pid,
                    self.port,
                    READY_TIMEOUT,
                    tail(&self.log_since(log_start), 40)
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Error log text written since byte `start`, plus what this launch printed to stderr.
    fn log_since(&self, start: u64) -> String {
        let mut text = String::new();
        if let Ok(mut f) = File::open(&self.error_log) {
            let _ = f.seek(SeekFrom::Start(start));
            let _ = f.read_to_string(&mut text);
        }
        if let Ok(stderr) = std::fs::read_to_string(self.dir.path().join("mariadbd.stderr")) {
            text.push_str(&stderr);
        }
        text
    }
}

/// `text` cut to at most `max` bytes (on a char boundary), with "..." if cut.
fn shorten(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &text[..end])
}

impl Drop for MariaDb {
    fn drop(&mut self) {
        self.kill();
        // `dir` (a TempDir) is removed after this.
    }
}

static SHARED: OnceLock<MariaDb> = OnceLock::new();

/// One server per test process, started on first call. Panics if it cannot be started.
///
/// It lives in a static, so `Drop` never runs: an `atexit` hook kills it and removes its
/// directory at normal exit, and `PR_SET_PDEATHSIG` kills it if the process dies abruptly.
pub fn shared() -> &'static MariaDb {
    SHARED.get_or_init(|| {
        let db = MariaDb::start().unwrap_or_else(|e| panic!("starting the shared MariaDB: {e:#}"));
        // SAFETY: registering a plain extern "C" fn; failure only means no cleanup at exit.
        unsafe { libc::atexit(stop_shared) };
        db
    })
}

extern "C" fn stop_shared() {
    if let Some(db) = SHARED.get() {
        if let Ok(pid) = libc::pid_t::try_from(db.pid) {
            // SAFETY: signalling and reaping our own child; its `Child` is never used again.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, std::ptr::null_mut(), 0);
            }
        }
        let _ = std::fs::remove_dir_all(db.dir.path());
    }
}
