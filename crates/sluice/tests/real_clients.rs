//! Real clients through sluice: the C API suite (libmariadb), the Python drivers (PyMySQL,
//! mysql-connector-python pure and C extension), the `mariadb` CLI and a sysbench
//! oltp_read_write run. Each suite compares what it sees through sluice with the backend
//! reached directly. A missing tool is a failure, not a skip: `.ci/run` installs them.

mod common;

use common::*;
use std::process::Command;
use std::sync::OnceLock;

/// sluice for these suites: root from the config, every other account from the backend
/// (the suites create users and log in as them), TLS on with a generated certificate.
fn proxy_port() -> u16 {
    static P: OnceLock<Proxy> = OnceLock::new();
    P.get_or_init(|| {
        let text = r#"
[proxy]
listen = ["127.0.0.1:0"]
workers = 2
backend_users = true
backend_users_refresh_ms = 100
[monitor]
username = "root"
password = ""
[[mysql_servers]]
hostgroup_id = 0
hostname = "127.0.0.1"
port = {BACKEND_PORT}
[[mysql_users]]
username = "root"
password = ""
"#;
        Proxy::start(toml_config(text, testkit::shared()))
    })
    .port
}

fn env_command(program: &str) -> Command {
    let mut c = client_suite_command(proxy_port(), program);
    c.env("SLUICE_TLS", "1");
    c
}

#[test]
fn c_api_suite() {
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("capi");
    let flags = Command::new("mariadb_config").args(["--cflags", "--libs"]).output().expect("mariadb_config (libmariadb-dev) is installed");
    let flags = String::from_utf8_lossy(&flags.stdout).replace('\n', " ");
    let mut cc = Command::new("cc");
    cc.args(["-O1", "-Wall", "-o"]).arg(&bin).arg(repo().join("tests/clients/capi.c")).args(flags.split_whitespace());
    run_tool(cc, "compiling tests/clients/capi.c");
    let text = run_tool(env_command(bin.to_str().unwrap()), "C API suite");
    assert!(text.contains(" passed, 0 failed"), "{text}");
}

#[test]
fn python_drivers_suite() {
    let mut cmd = env_command("python3");
    cmd.args(["-m", "pytest", "tests/python", "-q", "-p", "no:cacheprovider"]);
    let text = run_tool(cmd, "Python suite (PyMySQL, mysql-connector pure and C extension)");
    assert!(text.contains(" passed"), "{text}");
}

#[test]
fn mariadb_cli_suite() {
    let mut cmd = env_command("bash");
    cmd.arg("tests/cli/run.sh");
    let text = run_tool(cmd, "mariadb CLI suite");
    assert!(text.contains(" passed, 0 failed"), "{text}");
}

#[test]
fn sysbench_oltp_read_write_has_no_errors() {
    let db = testkit::shared();
    let schema = unique("sbtest");
    db.sql(&format!("CREATE DATABASE {schema}")).unwrap();
    let args = |port: u16| {
        vec![
            "oltp_read_write".to_string(),
            "--mysql-host=127.0.0.1".into(),
            format!("--mysql-port={port}"),
            "--mysql-user=root".into(),
            format!("--mysql-db={schema}"),
            "--tables=8".into(),
            "--table-size=10000".into(),
            "--mysql-ssl=off".into(),
        ]
    };
    let mut prepare = Command::new("sysbench");
    prepare.args(args(db.port())).arg("prepare");
    run_tool(prepare, "sysbench prepare (direct)");
    let mut bench = Command::new("sysbench");
    bench.args(args(proxy_port())).args(["--threads=4", "--time=10", "--report-interval=0", "--db-ps-mode=auto", "run"]);
    let text = run_tool(bench, "sysbench oltp_read_write through sluice");
    assert_sysbench_clean_writes(&text);
    db.sql(&format!("DROP DATABASE {schema}")).unwrap();
}
