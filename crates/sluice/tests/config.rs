//! The configuration as a user meets it: the `sluice` binary's exit codes and messages for
//! `--check` and start-up, the default admin credentials refused off loopback whatever sets
//! the address (file, flag, SIGHUP, the admin port), the help text, the log of a failed
//! backend login, and `scripts/quickstart` run twice side by side.
//!
//! Addresses off loopback are TEST-NET (192.0.2.1): nothing here can bind or reach it, so a
//! check that failed to refuse one shows as a different error, never as a listening socket.

mod common;

use common::*;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const EXPOSED: &str = "192.0.2.1";

fn sluice(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sluice")).args(args).env("SLUICE_LOG", "warn").output().expect("sluice runs")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A config file whose only server is `backend`; `extra` goes into `[proxy]`, `tail` at the end.
fn write_config(dir: &Path, port: u16, backend: &str, extra: &str, tail: &str) -> PathBuf {
    let (host, backend_port) = backend.rsplit_once(':').unwrap();
    let path = dir.join("sluice.toml");
    let text = format!(
        "[proxy]\nlisten = [\"127.0.0.1:{port}\"]\nadmin_listen = \"127.0.0.1:0\"\nhttp_listen = \"\"\n{extra}\n\
         [[mysql_servers]]\nhostgroup_id = 0\nhostname = \"{host}\"\nport = {backend_port}\n\
         [[mysql_users]]\nusername = \"root\"\npassword = \"\"\n{tail}"
    );
    std::fs::write(&path, text).unwrap();
    path
}

/// A backend address nothing listens on (start-up does not need a backend).
fn dead_backend() -> String {
    format!("127.0.0.1:{}", testkit::free_port())
}

#[test]
fn default_admin_credentials_are_refused_off_loopback_when_a_flag_sets_the_address() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_config(dir.path(), testkit::free_port(), &dead_backend(), "", "");
    let file = path.to_str().unwrap();
    let admin = format!("{EXPOSED}:7032");
    let http = format!("{EXPOSED}:7070");
    let cases: Vec<Vec<&str>> = vec![
        vec!["--config", file, "--check", "--admin-listen", &admin],
        vec!["--config", file, "--check", "--http-listen", &http],
        // Start-up itself, not only --check.
        vec!["--config", file, "--admin-listen", &admin],
    ];
    let backend = dead_backend();
    let quick = vec!["--backend", &backend, "--listen", "127.0.0.1:0", "--check", "--http-listen", &http];
    for args in cases.iter().chain([&quick]) {
        let out = sluice(args);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains("proxy.admin_credentials: the default admin:admin is refused"), "{args:?}: {err}");
        assert!(err.contains(EXPOSED), "names the address: {err}");
    }
    // With credentials of one's own, the same flag passes the check.
    let own = write_config(dir.path(), testkit::free_port(), &dead_backend(), "admin_credentials = \"ops:s3cret\"", "");
    let out = sluice(&["--config", own.to_str().unwrap(), "--check", "--http-listen", &http]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "configuration OK");
    // A bad flag value is named by the flag.
    let out = sluice(&["--config", file, "--check", "--admin-listen", "nowhere"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("--admin-listen: `nowhere` is not an IP:port address"), "{}", stderr(&out));
}

#[test]
fn check_runs_the_start_up_checks_and_both_exit_2_naming_file_line_and_field() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().display().to_string();
    let cases = [
        (format!("datadir = \"{d}/missing\""), String::new(), 5, "proxy.datadir", "does not exist"),
        (String::new(), format!("[tls]\ncert = \"{d}/cert.pem\"\nkey = \"{d}/key.pem\"\n"), 14, "tls.cert", "cannot read"),
        (String::new(), format!("[tls]\nrsa_key = \"{d}/sluice.toml\"\n"), 14, "tls.rsa_key", "no PEM private key"),
    ];
    for (extra, tail, line, field, what) in cases {
        let port = testkit::free_port();
        let path = write_config(dir.path(), port, &dead_backend(), &extra, &tail);
        let expected = format!("{}:{line}: {field}: ", path.display());
        for check in [true, false] {
            let mut args = vec!["--config", path.to_str().unwrap()];
            if check {
                args.push("--check");
            }
            let out = sluice(&args);
            let err = stderr(&out);
            assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
            assert!(err.contains(&expected) && err.contains(what), "{args:?}: expected `{expected}…{what}`: {err}");
        }
    }
    // A server's CA file, read only when use_ssl is set.
    let path = write_config(dir.path(), testkit::free_port(), &dead_backend(), "", "");
    let text = std::fs::read_to_string(&path)
        .unwrap()
        .replace("hostgroup_id = 0", &format!("hostgroup_id = 0\nuse_ssl = 1\nssl_ca = \"{d}/ca.pem\""));
    std::fs::write(&path, text).unwrap();
    let out = sluice(&["--config", path.to_str().unwrap(), "--check"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains(&format!("{}:9: mysql_servers[0].ssl_ca: ", path.display())), "{}", stderr(&out));
}

#[test]
fn help_states_the_defaults_the_code_has() {
    let out = sluice(&["--help"]);
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(help.contains("else steal"), "{help}");
    assert!(!help.contains("per-core)"), "{help}");
    for default in ["127.0.0.1:6033", "127.0.0.1:6032", "127.0.0.1:6070", "[default: root]"] {
        assert!(help.contains(default), "help gives {default}: {help}");
    }
    let defaults = sluice::config::ProxySection::default();
    assert_eq!(defaults.runtime, sluice::config::RuntimeKind::Steal);
    assert_eq!(defaults.listen, vec!["127.0.0.1:6033".to_string()]);
    assert_eq!((defaults.admin_listen.as_str(), defaults.http_listen.as_str()), ("127.0.0.1:6032", "127.0.0.1:6070"));
}

/// The sluice binary running from a config file, its log in a file; killed on drop.
struct Running {
    child: Child,
    log: PathBuf,
}

impl Running {
    fn start(args: &[&str], log: PathBuf, port: u16) -> Running {
        let child = Command::new(env!("CARGO_BIN_EXE_sluice"))
            .args(args)
            .env("SLUICE_LOG", "info")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        let mut running = Running { child, log };
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "sluice did not start listening: {}", running.log_text());
            assert!(running.child.try_wait().unwrap().is_none(), "sluice exited: {}", running.log_text());
            std::thread::sleep(Duration::from_millis(50));
        }
        running
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits until the log has a line containing `needle`; returns the whole log.
    fn wait_for(&self, needle: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let text = self.log_text();
            if text.contains(needle) {
                return text;
            }
            assert!(Instant::now() < deadline, "no `{needle}` in the log:\n{text}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn a_sighup_reload_refuses_the_http_port_off_loopback_with_default_credentials() {
    let dir = tempfile::tempdir().unwrap();
    let port = testkit::free_port();
    let path = write_config(dir.path(), port, &dead_backend(), "", "");
    let running = Running::start(&["--config", path.to_str().unwrap()], dir.path().join("sluice.log"), port);
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, text.replace("http_listen = \"\"", &format!("http_listen = \"{EXPOSED}:{}\"", testkit::free_port()))).unwrap();
    // SAFETY: signalling our own child process.
    unsafe { libc::kill(running.child.id() as i32, libc::SIGHUP) };
    let log = running.wait_for("reload rejected");
    assert!(log.contains("proxy.admin_credentials: the default admin:admin is refused while http_listen"), "{log}");
}

#[test]
fn load_admin_variables_refuses_the_http_port_off_loopback_with_default_credentials() {
    let mut cfg = sluice::config::quick_start(vec!["127.0.0.1:0".into()], &dead_backend(), "root", "").unwrap();
    cfg.workers = 1;
    let proxy = Proxy::start(cfg);
    let admin = proxy.admin_port();
    let sql = format!(
        "UPDATE global_variables SET variable_value='{EXPOSED}:{}' WHERE variable_name='admin-http_listen'; LOAD ADMIN VARIABLES TO RUNTIME",
        testkit::free_port()
    );
    let err = mariadb_cli(admin, "admin", Some("admin"), &sql).expect_err("refused");
    assert!(err.contains("admin:admin is refused while http_listen"), "{err}");
    let http = mariadb_cli(
        admin,
        "admin",
        Some("admin"),
        "SELECT variable_value FROM runtime_global_variables WHERE variable_name='admin-http_listen'",
    );
    assert!(!http.unwrap().contains(EXPOSED), "the running configuration is unchanged");
}

#[tokio::test]
async fn a_failed_backend_login_is_logged_once_with_the_servers_error() {
    let db = testkit::shared();
    let dir = tempfile::tempdir().unwrap();
    let port = testkit::free_port();
    // Clients log in to sluice with this password; the backend's root has none.
    let args = ["--listen", &format!("127.0.0.1:{port}"), "--backend", &db.addr(), "--user", "root", "--password", "wrong"];
    let args: Vec<&str> = args.iter().copied().chain(["--admin-listen", "", "--http-listen", ""]).collect();
    let running = Running::start(&args, dir.path().join("sluice.log"), port);
    for _ in 0..3 {
        let Err(e) = mysql_async::Conn::new(opts(port, "root", "wrong")).await else { panic!("the backend refuses the login") };
        assert_eq!(server_code(&e), Some(1045), "{e}");
    }
    let log = running.wait_for("backend login failed");
    let lines: Vec<&str> = log.lines().filter(|l| l.contains("backend login failed")).collect();
    assert_eq!(lines.len(), 1, "the same failure is not logged again at once:\n{log}");
    let line = lines[0];
    assert!(line.contains("WARN"), "{line}");
    for part in [db.addr().as_str(), "root", "error 1045 (28000)", "Access denied for user 'root'"] {
        assert!(line.contains(part), "names {part}: {line}");
    }
}

/// `scripts/quickstart` running the built binary in front of a private MariaDB (its root over
/// its own socket); its stderr collected; killed on drop.
struct QuickStart {
    child: Child,
    port: u16,
    err: std::sync::Arc<std::sync::Mutex<String>>,
}

impl QuickStart {
    fn start(db: &testkit::MariaDb, extra: &[&str]) -> QuickStart {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/quickstart");
        let port = testkit::free_port();
        let mut child = Command::new("bash")
            .arg(&script)
            .args(["--listen", &format!("127.0.0.1:{port}"), "--port", &db.port().to_string()])
            .arg(format!("--socket={}", db.socket_path().display()))
            .args(extra)
            .env("SLUICE_BIN", env!("CARGO_BIN_EXE_sluice"))
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let err = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let (mut pipe, sink) = (child.stderr.take().unwrap(), err.clone());
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n @ 1..) = std::io::Read::read(&mut pipe, &mut buf) {
                sink.lock().unwrap().push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        });
        QuickStart { child, port, err }
    }

    fn stderr(&self) -> String {
        self.err.lock().unwrap().clone()
    }

    fn wait_listening(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            if let Some(status) = self.child.try_wait().unwrap() {
                panic!("quickstart exited {status}: {}", self.stderr());
            }
            assert!(Instant::now() < deadline, "quickstart's sluice did not start listening: {}", self.stderr());
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The admin port the banner tells the user to connect to.
    fn admin_port(&self) -> u16 {
        let err = self.stderr();
        let line = err.lines().find(|l| l.contains("-uadmin")).unwrap_or_else(|| panic!("no admin line: {err}"));
        line.split_whitespace().find_map(|w| w.strip_prefix("-P")).and_then(|p| p.parse().ok()).unwrap()
    }
}

impl Drop for QuickStart {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn quickstart_runs_a_second_instance_beside_the_first() {
    let db = testkit::MariaDb::start().unwrap();
    let (admin, http) = (format!("127.0.0.1:{}", testkit::free_port()), format!("127.0.0.1:{}", testkit::free_port()));
    let mut first = QuickStart::start(&db, &["--admin-listen", &admin, "--http-listen", &http]);
    first.wait_listening();
    assert_eq!(first.admin_port().to_string(), admin.rsplit(':').next().unwrap());
    // Given ports that are taken: refused before sluice starts.
    let mut busy = QuickStart::start(&db, &["--admin-listen", "", "--http-listen", &http]);
    assert_eq!(busy.child.wait().unwrap().code(), Some(1));
    // (The exit can come before the reader thread has taken the script's last line.)
    let refusal = format!("{http} (--http-listen) is already in use");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !busy.stderr().contains(&refusal) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(busy.stderr().contains(&refusal), "{}", busy.stderr());
    // Only its own --listen (and TCP to the server): the admin and HTTP ports move to free
    // ones, printed.
    let mut second = QuickStart::start(&db, &["--tcp"]);
    second.wait_listening();
    let second_admin = second.admin_port();
    assert_ne!(second_admin, first.admin_port());
    // The first reaches the server through its unix socket (the login the server sees is
    // sluice@localhost), the second over TCP as it was told.
    let socket = db.socket_path().display().to_string();
    assert!(first.stderr().contains(&format!("forward to MariaDB on its unix socket {socket}")), "{}", first.stderr());
    assert!(second.stderr().contains(&format!("forward to MariaDB on 127.0.0.1:{}", db.port())), "{}", second.stderr());
    for (q, admin, login) in [(&first, first.admin_port(), "sluice@localhost"), (&second, second_admin, "sluice@127.0.0.1")] {
        assert_eq!(mariadb_cli(q.port, "sluice", Some("sluice"), "SELECT CURRENT_USER()").unwrap(), login, "{}", q.stderr());
        assert_eq!(mariadb_cli(admin, "admin", Some("admin"), "SELECT COUNT(*) FROM runtime_mysql_servers").unwrap(), "1");
    }
}

#[test]
fn a_saved_configuration_is_checked_with_the_flags_over_it() {
    let dir = tempfile::tempdir().unwrap();
    let datadir = dir.path().join("data");
    std::fs::create_dir(&datadir).unwrap();
    let port = testkit::free_port();
    let backend = dead_backend();
    let with_datadir = format!("datadir = \"{}\"", datadir.display());
    // The first start saves the file's configuration, default admin credentials included.
    let path = write_config(dir.path(), port, &backend, &with_datadir, "");
    let running = Running::start(&["--config", path.to_str().unwrap()], dir.path().join("first.log"), port);
    drop(running);
    assert!(datadir.join("sluice.db").exists());
    // The file now has credentials of its own, so file and flag pass; the saved configuration
    // that start-up takes does not.
    write_config(dir.path(), port, &backend, &format!("{with_datadir}\nadmin_credentials = \"ops:s3cret\""), "");
    let admin = format!("{EXPOSED}:7032");
    let out = sluice(&["--config", path.to_str().unwrap(), "--admin-listen", &admin]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("the configuration saved in") && err.contains("admin:admin is refused"), "{err}");
}
