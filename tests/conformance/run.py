#!/usr/bin/env python3
"""MariaDB's own test suite (mysql-test, suite `main`) directly and through sluice.

Runs mysql-test-run.pl in extern mode over TCP in four modes -- direct/text, direct/ps,
sluice/text, sluice/ps -- each against a fresh private MariaDB (and, for the sluice modes, a
fresh sluice with pooling on in front of it), then prints the tests that pass directly but not
through sluice in the same protocol, minus those listed with a reason in
expected-differences.txt. Exit status: 0 when there are none, 1 when there are, 2 when the
run itself could not be done (no mariadb-test, a server that does not start...).

    tests/conformance/run.py --tests tests/conformance/ci-subset.txt
    tests/conformance/run.py --all --jobs 2          # the whole suite (long)

See README.md ("Conformance: MariaDB's own test suite") and CONFORMANCE.md.
"""

import argparse
import concurrent.futures
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
DEFAULT_MTR_DIR = "/usr/share/mysql/mysql-test"
SHARE_DIR = "/usr/share/mysql"
MODES = ("direct-text", "direct-ps", "sluice-text", "sluice-ps")
STATUS_LINE = re.compile(r"^(?:worker\[\d+\]\s+)?(main\.\S+)\s+(?:'[^']*'\s+)?\[ (pass|fail|skipped|disabled) \]\s*(.*)$")
# The mtr report line that ends a failing test's block.
BLOCK_END = re.compile(r"^ - saving '|^-{40,}$")


def log(msg):
    print(f"[conformance {time.strftime('%H:%M:%S')}] {msg}", flush=True)


class RunError(Exception):
    """The run could not be done (as opposed to tests failing)."""


# ---------------------------------------------------------------------------------------------
# Servers


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(port, proc, timeout, what, clean_exit_served=False):
    """Waits until `SELECT 1` works on port (the server may accept before it serves).
    `clean_exit_served`: a process that exits with status 0 meanwhile served and was shut down
    by a client (a test that restarts the server reconnects as soon as it listens, and may run
    up to its next shutdown before this check's own client gets in)."""
    deadline = time.monotonic() + timeout
    last = "nothing listening"
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            if proc.returncode == 0 and clean_exit_served:
                return
            raise RunError(f"{what} exited ({proc.returncode}) before serving on {port}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                pass
            sql(port, "SELECT 1", timeout=30)
            return
        except (OSError, RunError, subprocess.TimeoutExpired) as e:
            last = str(e)
            time.sleep(0.2)
    raise RunError(f"{what} did not serve on {port} within {timeout}s: {last}")


def sql(port, text, user="root", timeout=120):
    """Runs SQL with the mariadb CLI over TCP; returns stdout."""
    out = subprocess.run(
        ["mariadb", "--no-defaults", "--protocol=tcp", "-h127.0.0.1", f"-P{port}", f"-u{user}", "-N", "-B"],
        input=text.encode(),
        capture_output=True,
        timeout=timeout,
    )
    if out.returncode != 0:
        raise RunError(f"mariadb on port {port} failed: {out.stderr.decode(errors='replace').strip()}")
    return out.stdout.decode(errors="replace")


def server_args(vardir, port):
    """mariadbd's arguments: what mtr's include/default_mysqld.cnf and My::ConfigFactory give
    a test server ([mysqld] and [mysqld.1]), minus what only mtr's own servers can have."""
    mtr = os.environ.get("MTR_DIR", DEFAULT_MTR_DIR)
    base = os.path.join(vardir, "mysqld.1")
    args = [
        "--no-defaults",
        # log-basename first: it renames every log it touches, the explicit ones below win.
        "--log-basename=mysqld",
        f"--datadir={base}/data",
        f"--port={port}",
        "--bind-address=127.0.0.1",
        f"--socket={base}/mysqld.sock",
        f"--pid-file={base}/mysqld.pid",
        f"--log-error={base}/mysqld.err",
        f"--tmpdir={vardir}/tmp/mysqld.1",
        "--general-log=1",
        f"--general-log-file={base}/mysqld.log",
        "--slow-query-log=1",
        f"--slow-query-log-file={base}/mysqld-slow.log",
        "--server-id=1",
        "--disable-getopt-prefix-matching",
        "--plugin-maturity=unknown",
        "--open-files-limit=1024",
        "--local-infile",
        "--character-set-server=latin1",
        "--connect-timeout=60",
        # Tests write files under $MYSQLTEST_VARDIR; the datadir is inside it as with mtr.
        f"--secure-file-priv={vardir}",
        "--debug-no-sync",
        "--log-bin-trust-function-creators=1",
        "--key-buffer-size=1M",
        "--sort-buffer-size=256K",
        "--max-heap-table-size=1M",
        "--loose-aria-pagecache-buffer-size=8M",
        "--innodb-buffer-pool-size=8M",
        "--innodb-lru-scan-depth=100",
        "--innodb-log-buffer-size=2M",
        "--innodb-log-file-size=10M",
        "--slave-net-timeout=120",
        "--performance-schema",
        "--binlog-direct-non-transactional-updates",
        "--default-storage-engine=myisam",
        "--use-stat-tables=preferably",
        "--histogram-type=json_hb",
        f"--ssl-ca={mtr}/std_data/cacert.pem",
        f"--ssl-cert={mtr}/std_data/server-cert.pem",
        f"--ssl-key={mtr}/std_data/server-key.pem",
        "--loose-aria",
    ]
    if os.geteuid() == 0:
        args.append("--user=root")
    return args


def mysql_cli_script(path):
    """An mtr bootstrap SQL file (`delimiter ||;` syntax, `--` comment lines) for the mariadb CLI."""
    out, delim = [], ";"
    with open(path, encoding="utf-8") as f:
        for line in f.read().splitlines():
            m = re.match(r"^delimiter (.*)", line)
            if m:
                new = m.group(1)
                if new.endswith(delim):
                    new = new[: -len(delim)]
                delim = new
                out.append(f"delimiter {new}")
            elif not re.match(r"^\s*--", line):
                out.append(line)
    out.append("delimiter ;")
    return "\n".join(out) + "\n"


def setup_sql():
    """What mtr's bootstrap adds to a fresh datadir (mysql-test-run.pl, mysql_install_db)."""
    mtr = os.environ.get("MTR_DIR", DEFAULT_MTR_DIR)
    with open(os.path.join(SHARE_DIR, "mysql_test_data_timezone.sql"), encoding="utf-8") as f:
        timezones = f.read()
    return (
        "CREATE DATABASE IF NOT EXISTS test CHARACTER SET latin1 COLLATE latin1_swedish_ci;\n"
        "use mysql;\n" + timezones + "\n"
        "ALTER TABLE mysql.gtid_slave_pos ENGINE=Aria transactional=0;\n"
        "DELETE FROM mysql.global_priv WHERE user = '';\n"
        "FLUSH PRIVILEGES;\n"
        "CREATE DATABASE mtr CHARSET=latin1;\n"
        "use mtr;\n"
        + mysql_cli_script(os.path.join(mtr, "include/mtr_warnings.sql"))
        + mysql_cli_script(os.path.join(mtr, "include/mtr_check.sql"))
    )


# Every process this run starts gets its own process group; on exit or a signal they all go.
CHILDREN = set()
CHILDREN_LOCK = threading.Lock()
ENDING = threading.Event()


def spawn(cmd, **kw):
    with CHILDREN_LOCK:
        if ENDING.is_set():
            raise RunError("the run is ending")
        proc = subprocess.Popen(cmd, start_new_session=True, **kw)
        CHILDREN.add(proc)
    return proc


def kill_children(*_):
    with CHILDREN_LOCK:
        ENDING.set()
        procs = list(CHILDREN)
    for proc in procs:
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except OSError:
                pass


class Server:
    """A private mariadbd on 127.0.0.1 in an mtr vardir (datadir vardir/mysqld.1/data, tmpdir
    vardir/tmp/mysqld.1, as mtr lays them out).

    While `supervise()` runs, it does for extern mode what mtr does for its own servers: a test
    that shuts the server down (include/restart_mysqld.inc, kill_mysqld.inc...) writes
    vardir/tmp/mysqld.1.expect, and the server is started again on the same port -- with the
    options after `restart:` -- once that file says so; a server that dies unannounced is
    started again too. Before each test the mysqltest wrapper asks for a server with the
    default options if the previous test left one with others (see MYSQLTEST_WRAPPER)."""

    def __init__(self, vardir, template=None):
        self.vardir = vardir
        self.template = template
        self.resets = 0
        self.base = os.path.join(vardir, "mysqld.1")
        self.tmpdir = os.path.join(vardir, "tmp", "mysqld.1")
        self.ctl = os.path.join(vardir, "conformance")
        self.expect = os.path.join(vardir, "tmp", "mysqld.1.expect")
        self.proc = None
        self.port = None
        self.extra = []
        self.events = []
        self.stopping = threading.Event()
        self.thread = None
        for d in (self.base, self.tmpdir, self.ctl, os.path.join(vardir, "log")):
            os.makedirs(d, exist_ok=True)
        if template:
            subprocess.run(["cp", "-a", template, os.path.join(self.base, "data")], check=True)

    def start(self, extra=()):
        """Starts mariadbd (on a free port the first time, on the same port afterwards)."""
        first = self.port is None
        for attempt in range(3):
            if first:
                self.port = free_port()
            try:
                self._launch(list(extra))
                return
            except RunError:
                if attempt == 2 or not first:
                    raise

    def _launch(self, extra):
        env = {k: v for k, v in os.environ.items() if k != "TZ"}  # mtr's default: the system zone
        os.makedirs(self.tmpdir, exist_ok=True)
        with open(os.path.join(self.base, "mariadbd.stderr"), "ab") as stderr:
            self.proc = spawn(["mariadbd"] + server_args(self.vardir, self.port) + extra, stdin=subprocess.DEVNULL,
                              stdout=subprocess.DEVNULL, stderr=stderr, env=env)
        self.extra = extra
        try:
            wait_ready(self.port, self.proc, 120, "mariadbd", clean_exit_served=True)
        except RunError as e:
            self.stop()
            raise RunError(f"mariadbd did not start ({e}); see {self.base}/mysqld.err") from None
        if extra:
            open(os.path.join(self.ctl, "nondefault"), "w").close()
        for marker in ("down",) if extra else ("down", "nondefault"):
            try:
                os.unlink(os.path.join(self.ctl, marker))
            except FileNotFoundError:
                pass

    def stop(self):
        proc, self.proc = self.proc, None
        if proc and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def supervise(self):
        self.thread = threading.Thread(target=self._supervise, daemon=True)
        self.thread.start()

    def shutdown(self):
        self.stopping.set()
        if self.thread:
            self.thread.join()
        self.stop()

    def _restart(self, extra, why):
        self.events.append(f"{time.strftime('%H:%M:%S')} {why}; starting with {' '.join(extra) or 'the default options'}")
        self.stop()
        try:
            self.start(extra)
        except RunError as e:
            self.events.append(f"{time.strftime('%H:%M:%S')} {e}")
            if extra:
                self.events.append("starting with the default options instead")
                self.start([])

    def _reset(self):
        """What mtr does after a failed test: a server restarted on a fresh copy of the datadir
        (so what the failed test left behind does not fail the next ones)."""
        self.resets += 1
        self.stop()
        data = os.path.join(self.base, "data")
        shutil.rmtree(data, ignore_errors=True)
        subprocess.run(["cp", "-a", self.template, data], check=True)
        os.unlink(os.path.join(self.ctl, "dirty"))
        self.start([])

    def _supervise(self):
        request = os.path.join(self.ctl, "before-test")
        down = os.path.join(self.ctl, "down")
        while not self.stopping.wait(0.05):
            try:
                alive = self.proc is not None and self.proc.poll() is None
                if os.path.exists(request):
                    # A test that failed while the server was down ("wait") leaves it so.
                    if os.path.exists(self.expect):
                        os.unlink(self.expect)
                    if os.path.exists(os.path.join(self.ctl, "dirty")):
                        self._reset()
                    elif self.extra or not alive:
                        self._restart([], "before the next test: a server with the default options")
                    os.unlink(request)
                    continue
                if alive:
                    continue
                open(down, "w").close()
                if not os.path.exists(self.expect):
                    self._restart([], f"mariadbd exited ({self.proc.returncode if self.proc else '-'}) unannounced")
                    continue
                with open(self.expect, encoding="utf-8", errors="replace") as f:
                    lines = f.read().splitlines()
                last = lines[-1].strip() if lines else ""
                if not last.startswith("restart"):
                    continue  # "wait" (or not written yet): the test starts it later
                os.unlink(self.expect)
                m = re.match(r"restart(?:_bindir\s+\S+)?:(.+)", last)
                self._restart(m.group(1).split() if m else [], f"the test asked: {last}")
            except RunError as e:
                self.events.append(f"{time.strftime('%H:%M:%S')} {e}")
                self.proc = None
                time.sleep(1)


# mtr runs this instead of mariadb-test (MYSQL_TEST). For a test (its parent is mtr's
# my_safe_process, not a test's own `exec $MYSQL_TEST`): before it, if the previous test failed
# ("dirty"), or the server is down or runs with options a previous test restarted it with, ask
# the supervisor for a clean default server and wait; after it, a failure (exit status other
# than 0 and 62, a skip) marks the server dirty.
MYSQLTEST_WRAPPER = """#!/bin/sh
ctl="$CONFORMANCE_CTL"
[ -n "$ctl" ] && [ "$(ps -o comm= -p $PPID)" = "my_safe_process" ] || exec mariadb-test "$@"
if [ -e "$ctl/dirty" ] || [ -e "$ctl/nondefault" ] || [ -e "$ctl/down" ]; then
    : > "$ctl/before-test"
    n=0
    while [ -e "$ctl/before-test" ] && [ $n -lt 1200 ]; do sleep 0.1; n=$((n + 1)); done
fi
mariadb-test "$@"
rc=$?
if [ $rc -ne 0 ] && [ $rc -ne 62 ]; then : > "$ctl/dirty"; fi
exit $rc
"""


def build_template(workdir):
    """A datadir as mtr's bootstrap makes it, built once per run; every unit copies it."""
    vardir = os.path.join(workdir, "template")
    server = Server(vardir)
    data = os.path.join(server.base, "data")
    install = subprocess.run(
        ["mariadb-install-db", "--no-defaults", "--auth-root-authentication-method=normal", "--skip-test-db", f"--datadir={data}"]
        + (["--user=root"] if os.geteuid() == 0 else []),
        capture_output=True,
    )
    if install.returncode != 0:
        raise RunError("mariadb-install-db failed:\n" + install.stdout.decode(errors="replace")[-3000:])
    server.start()
    try:
        sql(server.port, setup_sql())
    finally:
        server.stop()
    return data


class Sluice:
    """sluice in front of a server: quick-start shape, pooling (multiplexing) on."""

    def __init__(self, binary, unitdir, backend_port):
        self.port = None
        self.proc = None
        self.binary = binary
        self.unitdir = unitdir
        self.backend_port = backend_port

    def config(self):
        return (
            "[proxy]\n"
            f'listen = ["127.0.0.1:{self.port}"]\n'
            'admin_listen = ""\n'
            'http_listen = ""\n'
            # Tests create their own accounts and log in with them (connect(...)).
            "backend_users = true\n"
            "\n[pool]\nmultiplexing = true\n"
            '\n[monitor]\nusername = "root"\npassword = ""\n'
            f'\n[[mysql_servers]]\nhostgroup_id = 0\nhostname = "127.0.0.1"\nport = {self.backend_port}\n'
            '\n[[mysql_users]]\nusername = "root"\npassword = ""\ndefault_hostgroup = 0\n'
        )

    def start(self):
        for attempt in range(3):
            self.port = free_port()
            path = os.path.join(self.unitdir, "sluice.toml")
            with open(path, "w") as f:
                f.write(self.config())
            with open(os.path.join(self.unitdir, "sluice.log"), "ab") as log_file:
                self.proc = spawn([self.binary, "--config", path], stdin=subprocess.DEVNULL, stdout=log_file, stderr=log_file)
            try:
                wait_ready(self.port, self.proc, 30, "sluice")
                return
            except RunError:
                self.stop()
                if attempt == 2:
                    raise RunError(f"sluice did not start; see {self.unitdir}/sluice.log") from None

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None


# ---------------------------------------------------------------------------------------------
# mtr


def mtr_tree(unitdir):
    """A private mysql-test directory of symlinks to the installed one, with a real `main`:
    mysqltest writes main/<test>.reject next to the result file, and units running at the
    same time must not share (or write into the package's) directory."""
    mtr = os.environ.get("MTR_DIR", DEFAULT_MTR_DIR)
    # mtr takes the directory above mysql-test as the install's base (bin/, share/, lib/).
    base = os.path.join(unitdir, "base")
    tree = os.path.join(base, "mysql-test")
    os.makedirs(os.path.join(tree, "main"))
    install = os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(mtr))))  # /usr
    for name in ("bin", "sbin", "lib", "share"):
        if os.path.isdir(os.path.join(install, name)):
            os.symlink(os.path.join(install, name), os.path.join(base, name))
    for name in os.listdir(mtr):
        if name != "main" and name != "var":
            os.symlink(os.path.join(mtr, name), os.path.join(tree, name))
    for name in os.listdir(os.path.join(mtr, "main")):
        if not name.endswith(".reject"):
            os.symlink(os.path.join(mtr, "main", name), os.path.join(tree, "main", name))
    return tree


def run_mtr(unitdir, server, port, tests, ps, test_timeout, unit_timeout):
    """Runs mysql-test-run.pl in extern mode against 127.0.0.1:port; returns its output."""
    mtr = mtr_tree(unitdir)
    vardir = server.vardir
    wrapper = os.path.join(unitdir, "mariadb-test")
    with open(wrapper, "w") as f:
        f.write(MYSQLTEST_WRAPPER)
    os.chmod(wrapper, 0o755)
    nosock = os.path.join(unitdir, "no-such.sock")
    cmd = [
        "perl",
        "mysql-test-run.pl",
        "--extern", "host=127.0.0.1",
        "--extern", f"port={port}",
        "--extern", "user=root",
        # Every connection over TCP to this endpoint: `connect(c,localhost,...)` would use the
        # unix socket otherwise, bypassing sluice. The socket path does not exist on purpose.
        "--extern", "protocol=tcp",
        "--extern", f"socket={nosock}",
        # As mtr's own [mysqltest] group has it (default_client.cnf: loose-skip-ssl).
        "--extern", "ssl=0",
        f"--vardir={vardir}",
        "--force",
        "--max-test-fail=0",
        "--no-reorder",
        "--retry=0",
        f"--testcase-timeout={test_timeout}",
        "--suite=main",
    ]
    if ps:
        cmd.append("--ps-protocol")
    cmd += tests
    env = {k: v for k, v in os.environ.items() if k != "TZ"}
    # Tests `replace_result $MASTER_MYPORT ...`; mtr sets these only for its own servers.
    env["MASTER_MYPORT"] = str(port)
    env["MASTER_MYSOCK"] = nosock
    env["MYSQL_TEST"] = wrapper
    for name in ("MYSQLD_DATADIR", "MARIADB_DATADIR", "MARIADB_TOPDIR"):
        env[name] = os.path.join(server.base, "data")
    env["CONFORMANCE_CTL"] = server.ctl
    out_path = os.path.join(unitdir, "mtr.log")
    with open(out_path, "wb") as out:
        proc = spawn(cmd, cwd=mtr, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, env=env)
        try:
            proc.wait(unit_timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            with open(out_path, "ab") as o:
                o.write(f"\n[conformance] mtr killed after {unit_timeout}s\n".encode())
    # surrogateescape: result diffs hold the tests' raw bytes (latin1, sjis...); keep them.
    with open(out_path, encoding="utf-8", errors="surrogateescape") as f:
        return f.read()


def parse_mtr(output):
    """{test: (status, detail)} with status pass|fail|skip|disabled; detail is the skip reason
    or the failing test's report (error, diff)."""
    results, current, block = {}, None, []
    for line in output.splitlines():
        m = STATUS_LINE.match(line)
        if m:
            if current:
                results[current] = ("fail", "\n".join(block))
                current = None
            name, status, rest = m.group(1)[len("main."):], m.group(2), m.group(3)
            status = {"skipped": "skip"}.get(status, status)
            if status == "fail":
                current, block = name, []
            else:
                results[name] = (status, rest.strip())
            continue
        if current:
            if BLOCK_END.match(line):
                results[current] = ("fail", "\n".join(block))
                current = None
            else:
                block.append(line)
    if current:
        results[current] = ("fail", "\n".join(block))
    return results


# ---------------------------------------------------------------------------------------------
# Units: one mode over one chunk of tests, against a fresh server (and sluice)


def run_unit(args, template, mode, chunk, tests, failures="failures"):
    """One mode over a list of tests against a fresh server; {test: (status, detail)}.
    `chunk` names the unit (a chunk number, or "recheck")."""
    label = f"{chunk:03d}" if isinstance(chunk, int) else chunk
    unitdir = os.path.join(args.results, "units", f"{mode}-{label}")
    shutil.rmtree(unitdir, ignore_errors=True)
    vardir = os.path.join(unitdir, "var")
    os.makedirs(unitdir)
    server = Server(vardir, template)
    proxy = None
    started = time.monotonic()
    try:
        server.start()
        server.supervise()
        port = server.port
        if mode.startswith("sluice"):
            proxy = Sluice(args.sluice, unitdir, server.port)
            proxy.start()
            port = proxy.port
        unit_timeout = max(600, len(tests) * 60 * args.test_timeout // 4)
        output = run_mtr(unitdir, server, port, tests, mode.endswith("-ps"), args.test_timeout, unit_timeout)
        sluice_alive = proxy is None or proxy.proc.poll() is None
    finally:
        if proxy:
            proxy.stop()
        server.shutdown()
        with open(os.path.join(unitdir, "server-events.log"), "w") as f:
            f.write("".join(e + "\n" for e in server.events))
    results = parse_mtr(output)
    for t in tests:
        if t not in results:
            results[t] = ("fail", "no result from mtr (crashed, killed or timed out); see " + os.path.join(unitdir, "mtr.log"))
    faildir = os.path.join(args.results, failures, mode)
    for t, (status, detail) in results.items():
        if status == "fail":
            os.makedirs(faildir, exist_ok=True)
            with open(os.path.join(faildir, f"{t}.txt"), "w", encoding="utf-8", errors="surrogateescape") as f:
                f.write(detail + "\n")
            # mtr's own log of the test (the result so far, as far as it got), and the result
            # it got where it ran to the end (.reject; compare with the suite's main/<test>.result).
            for src, ext in ((os.path.join(vardir, "log", f"{t}.log"), "log"), (os.path.join(unitdir, "base", "mysql-test", "main", f"{t}.reject"), "reject")):
                if os.path.exists(src):
                    shutil.copy(src, os.path.join(faildir, f"{t}.{ext}"))
    if not args.keep_vardirs:
        # Datadirs are large; keep mtr.log, sluice.log and the server's error log.
        err = os.path.join(vardir, "mysqld.1", "mysqld.err")
        if os.path.exists(err):
            shutil.copy(err, os.path.join(unitdir, "mysqld.err"))
        shutil.rmtree(vardir, ignore_errors=True)
        shutil.rmtree(os.path.join(unitdir, "base"), ignore_errors=True)
    counts = {s: sum(1 for st, _ in results.values() if st == s) for s in ("pass", "fail", "skip", "disabled")}
    note = f", {len(server.events)} server restart(s) asked by tests" if server.events else ""
    note += f", {server.resets} reset(s) after a failure" if server.resets else ""
    note += "" if sluice_alive else "  SLUICE EXITED (see sluice.log)"
    log(f"{mode} chunk {label}: {len(tests)} tests in {time.monotonic() - started:.0f}s: "
        f"{counts['pass']} pass, {counts['fail']} fail, {counts['skip']} skip, {counts['disabled']} disabled{note}")
    return results


# ---------------------------------------------------------------------------------------------
# Test lists, expected differences, report


def read_list(path):
    names = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            if line:
                names.append(line.split()[0].removeprefix("main."))
    return names


def all_tests():
    mtr = os.environ.get("MTR_DIR", DEFAULT_MTR_DIR)
    return sorted(f[: -len(".test")] for f in os.listdir(os.path.join(mtr, "main")) if f.endswith(".test"))


def read_expected(path):
    """{(test, protocol): reason}; protocol is text, ps or both."""
    expected = {}
    if not os.path.exists(path):
        return expected
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            parts = line.split(None, 2)
            if len(parts) < 3 or parts[1] not in ("text", "ps", "both"):
                raise RunError(f"{path}:{n}: want `test  text|ps|both  reason`")
            for proto in ("text", "ps") if parts[1] == "both" else (parts[1],):
                expected[(parts[0].removeprefix("main."), proto)] = parts[2].strip()
    return expected


UNIT_DIR = re.compile(r"^(%s)-(\d+)$" % "|".join(MODES))


def read_reuse(path, table, where):
    """Adds an earlier run's statuses to `table` ({mode: {test: (status, "")}}), from its
    summary.tsv or, for a results directory, from its units' mtr.log (so a run stopped part
    way counts for the units it finished or got into); `where` maps (mode, test) to the
    directory holding that result's failures/."""
    if os.path.isdir(path):
        units = os.path.join(path, "units")
        for name in sorted(os.listdir(units)) if os.path.isdir(units) else []:
            m = UNIT_DIR.match(name)
            log_path = os.path.join(units, name, "mtr.log")
            if not m or not os.path.exists(log_path):
                continue
            with open(log_path, encoding="utf-8", errors="replace") as f:
                for test, result in parse_mtr(f.read()).items():
                    table.setdefault(m.group(1), {})[test] = result
                    where[(m.group(1), test)] = path
        return
    with open(path, encoding="utf-8") as f:
        header = f.readline().rstrip("\n").split("\t")
        if header[:1] != ["test"] or any(m not in MODES for m in header[1:]):
            raise RunError(f"{path}: not a conformance summary.tsv")
        for line in f:
            row = line.rstrip("\n").split("\t")
            for m, status in zip(header[1:], row[1:]):
                if status != "-":
                    table.setdefault(m, {})[row[0]] = (status, "")
                    where[(m, row[0])] = os.path.dirname(os.path.abspath(path))


def parse_chunks(text):
    chunks = set()
    for part in text.split(","):
        a, _, b = part.partition("-")
        chunks.update(range(int(a), int(b or a) + 1))
    return chunks


def first_lines(path, n):
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = [l.rstrip() for l in f if l.strip() and "Test ended at" not in l]
        return lines[:n]
    except OSError:
        return []


def differences(tests, table, expected, protocols):
    """(unexpected, explained, fixed): tests passing directly but not through sluice in a
    protocol, not listed / listed in expected-differences.txt; listed ones that now pass."""
    unexpected, explained, fixed = [], [], []
    for proto in protocols:
        if f"direct-{proto}" not in table or f"sluice-{proto}" not in table:
            continue
        for t in tests:
            direct, through = table[f"direct-{proto}"].get(t, ("-",))[0], table[f"sluice-{proto}"].get(t, ("-",))[0]
            reason = expected.get((t, proto))
            if through == "-":
                continue  # not run through sluice (a partial run)
            if direct == "pass" and through != "pass":
                (explained if reason else unexpected).append((t, proto, through, reason))
            elif reason and direct == "pass" and through == "pass":
                fixed.append((t, proto))
    return unexpected, explained, fixed


def recheck(args, template, unexpected):
    """Runs the tests that passed directly but not through sluice again, alone, directly and
    through sluice (fresh servers): {(test, protocol): (direct status, sluice status)}."""
    again = {}
    for proto in args.protocols:
        names = [t for t, p, _, _ in unexpected if p == proto]
        if not names:
            continue
        log(f"rechecking {len(names)} {proto} test(s) alone")
        pool = concurrent.futures.ThreadPoolExecutor(max_workers=max(1, min(2, args.jobs)))
        try:
            direct = pool.submit(run_unit, args, template, f"direct-{proto}", "recheck", names, "failures-recheck")
            through = pool.submit(run_unit, args, template, f"sluice-{proto}", "recheck", names, "failures-recheck")
            d, s = direct.result(), through.result()
        finally:
            pool.shutdown(wait=False, cancel_futures=True)
        for t in names:
            again[(t, proto)] = (d.get(t, ("-",))[0], s.get(t, ("-",))[0])
    return again


def report(args, tests, table, expected, again):
    modes = [m for m in MODES if m in table]
    with open(os.path.join(args.results, "summary.tsv"), "w") as f:
        f.write("test\t" + "\t".join(modes) + "\n")
        for t in tests:
            f.write(t + "\t" + "\t".join(table[m].get(t, ("-", ""))[0] for m in modes) + "\n")
    print()
    print(f"{'mode':<12} {'pass':>6} {'fail':>6} {'skip':>6} {'disabled':>9} {'not run':>8}")
    for m in modes:
        c = {s: sum(1 for t in tests if table[m].get(t, ("-",))[0] == s) for s in ("pass", "fail", "skip", "disabled", "-")}
        print(f"{m:<12} {c['pass']:>6} {c['fail']:>6} {c['skip']:>6} {c['disabled']:>9} {c['-']:>8}")
    unexpected, explained, fixed = differences(tests, table, expected, args.protocols)
    confirmed = [u for u in unexpected if again is None or again.get((u[0], u[1])) in (None, ("pass", "fail"), ("pass", "-"))]
    unconfirmed = [u for u in unexpected if u not in confirmed]
    print()
    if explained:
        print(f"Pass directly, not through sluice, listed in {os.path.relpath(args.expected, REPO)} ({len(explained)}):")
        for t, proto, through, reason in explained:
            print(f"  {t:<40} {proto:<4} {through:<5} {reason}")
        print()
    if fixed:
        print("Listed as expected differences but now pass through sluice (remove them from the list):")
        for t, proto in fixed:
            print(f"  {t:<40} {proto}")
        print()
    if unconfirmed:
        print(f"Passed directly, failed through sluice, but not again when rerun alone ({len(unconfirmed)}; "
              "flaky, or depending on the tests before them):")
        for t, proto, through, _ in unconfirmed:
            d, s = again[(t, proto)]
            path = os.path.join(args.where.get((f"sluice-{proto}", t), args.results), "failures", f"sluice-{proto}", f"{t}.txt")
            print(f"  {t:<40} {proto:<4} rerun: direct {d}, sluice {s}  {os.path.relpath(path, os.getcwd())}")
        print()
    if confirmed:
        print(f"PASS DIRECTLY, FAIL THROUGH SLUICE ({len(confirmed)}{', confirmed by a rerun alone' if again else ''}):")
        for t, proto, through, _ in confirmed:
            path = os.path.join(args.where.get((f"sluice-{proto}", t), args.results), "failures", f"sluice-{proto}", f"{t}.txt")
            print(f"  {t:<40} {proto:<4} {through:<5} {os.path.relpath(path, os.getcwd())}")
            detail = table[f"sluice-{proto}"].get(t, ("", ""))[1].encode("utf-8", "surrogateescape").decode("utf-8", "replace")
            for line in first_lines(path, args.show_lines) or [l.rstrip() for l in detail.splitlines() if l.strip()][: args.show_lines]:
                print(f"      | {line[:160]}")
        print()
    else:
        print("Every test that passes directly passes through sluice.")
    print(f"Results: {args.results} (summary.tsv, failures/<mode>/<test>.txt, units/<mode>-<chunk>/mtr.log, sluice.log)")
    return 1 if confirmed else 0


def default_sluice():
    for kind in ("release", "debug"):
        path = os.path.join(REPO, "target", kind, "sluice")
        if os.access(path, os.X_OK):
            return path
    return None


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("names", nargs="*", help="test names (suite main), e.g. select join")
    p.add_argument("--tests", help="file with one test name a line (# comments)")
    p.add_argument("--all", action="store_true", help="every test of suite main")
    p.add_argument("--protocols", default="text,ps", help="text, ps or text,ps (default)")
    p.add_argument("--modes", dest="modes_arg", help="run only these modes, e.g. direct-text,direct-ps (no comparison without both sides)")
    p.add_argument("--sluice", default=os.environ.get("SLUICE_BIN") or default_sluice(), help="sluice binary (default: target/release/sluice, else target/debug/sluice)")
    p.add_argument("--results", help="results directory (default: target/conformance/<date-time>)")
    p.add_argument("--expected", default=os.path.join(HERE, "expected-differences.txt"))
    p.add_argument("--reuse", action="append", default=[], metavar="DIR",
                   help="results directory (or summary.tsv) of an earlier run with the same tests and --chunk: its "
                   "results count for what this run does not run (repeatable; e.g. --modes sluice-text,sluice-ps "
                   "--reuse DIR to compare with earlier direct results, or --modes none to report on earlier runs)")
    p.add_argument("--chunks", help="run only these chunks of --chunk tests, e.g. 0-6 or 7,9")
    p.add_argument("--jobs", type=int, default=1, help="units (a mode over a chunk) run at once (default 1)")
    p.add_argument("--chunk", type=int, default=0, help="tests per fresh server (default: all in one)")
    p.add_argument("--test-timeout", type=int, default=5, help="minutes per test (mtr --testcase-timeout, default 5)")
    p.add_argument("--show-lines", type=int, default=12, help="lines of each failure to print (default 12)")
    p.add_argument("--no-recheck", dest="recheck", action="store_false",
                   help="do not rerun the tests that passed directly but not through sluice alone to confirm them")
    p.add_argument("--keep-vardirs", action="store_true", help="keep each unit's mtr vardir (datadir, logs)")
    args = p.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    mtr = os.environ.get("MTR_DIR", DEFAULT_MTR_DIR)
    if not os.path.exists(os.path.join(mtr, "mysql-test-run.pl")):
        print(f"conformance: {mtr}/mysql-test-run.pl not found: install mariadb-test (scripts/install-deps)", file=sys.stderr)
        return 2
    args.protocols = [x for x in args.protocols.split(",") if x]
    if not args.protocols or any(x not in ("text", "ps") for x in args.protocols):
        p.error("--protocols: text, ps or text,ps")
    args.modes = [m for m in MODES if m.split("-")[1] in args.protocols]
    if args.modes_arg:
        args.modes = [m for m in args.modes_arg.split(",") if m and m != "none"]
        if any(m not in MODES for m in args.modes):
            p.error("--modes: some of " + ",".join(MODES))
    needs_sluice = any(m.startswith("sluice") for m in args.modes)
    if needs_sluice and (not args.sluice or not os.access(args.sluice, os.X_OK)):
        p.error("no sluice binary: cargo build --release, or give --sluice PATH")
    args.sluice = os.path.abspath(args.sluice) if needs_sluice else None
    tests = list(args.names)
    if args.tests:
        tests += read_list(args.tests)
    if args.all:
        tests += all_tests()
    tests = list(dict.fromkeys(t.removeprefix("main.") for t in tests))
    if not tests:
        p.error("no tests: give names, --tests FILE or --all")
    missing = [t for t in tests if not os.path.exists(os.path.join(mtr, "main", f"{t}.test"))]
    if missing:
        p.error("not in suite main: " + " ".join(missing))
    args.results = os.path.abspath(args.results or os.path.join(REPO, "target", "conformance", time.strftime("%Y%m%d-%H%M%S")))
    os.makedirs(args.results, exist_ok=True)
    expected = read_expected(args.expected)

    chunk = args.chunk or len(tests)
    chunks = [tests[i : i + chunk] for i in range(0, len(tests), chunk)]
    modes = args.modes
    log(f"{len(tests)} tests, {len(chunks)} chunk(s), modes {', '.join(modes)}, {args.jobs} at once; sluice {args.sluice}")
    log(f"results in {args.results}")
    workdir = tempfile.mkdtemp(prefix="conformance-", dir=args.results)
    template = None
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs))
    try:
        if modes or args.recheck:
            template = build_template(workdir)
        table, where = {}, {}
        for path in args.reuse:
            read_reuse(os.path.abspath(path), table, where)
        for m in modes:
            table.setdefault(m, {})
        args.where = where
        # Chunk by chunk, every mode of a chunk before the next chunk: partial results compare.
        wanted = parse_chunks(args.chunks) if args.chunks else range(len(chunks))
        units = [(m, i, c) for i, c in enumerate(chunks) if i in wanted for m in modes]
        futures = {pool.submit(run_unit, args, template, m, i, c): m for m, i, c in units}
        for fut in concurrent.futures.as_completed(futures):
            mode = futures[fut]
            for t, result in fut.result().items():
                table[mode][t] = result
                where.pop((mode, t), None)
        again = None
        if args.recheck:
            unexpected = differences(tests, table, expected, args.protocols)[0]
            again = recheck(args, template, unexpected) if unexpected else {}
    except RunError as e:
        print(f"conformance: {e}", file=sys.stderr)
        return 2
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
        kill_children()
        shutil.rmtree(workdir, ignore_errors=True)
    return report(args, tests, table, expected, again)


if __name__ == "__main__":
    sys.exit(main())
