"""Fixtures for the sluice real-client Python suite.

Three drivers are exercised:
  * ``pymysql``          -- PyMySQL (pure Python)
  * ``connector_pure``   -- mysql-connector-python, ``use_pure=True``
  * ``connector_cext``   -- mysql-connector-python C extension, ``use_pure=False``

The C extension being unavailable is a test FAILURE, unless
``SLUICE_ALLOW_NO_CEXT=1`` is set (then those tests are skipped).

Endpoints come from the environment:
  SLUICE_HOST/PORT/USER/PASSWORD/DB  -- the endpoint under test (the proxy)
  DIRECT_HOST/PORT/USER/PASSWORD     -- the same backend reached directly
"""

# The wheel of mysql-connector-python ships its own libssl/libcrypto (OpenSSL 3.x
# newer than Debian 12's 3.0), found through the extension's RPATH.  pytest
# imports hashlib at start-up, which loads the system libcrypto.so.3 first; the
# C extension then fails with "version `OPENSSL_3.x.0' not found".  When that
# happens, pytest_configure below re-runs this same pytest command once with the
# bundled libraries in LD_PRELOAD, so the whole process (hashlib, ssl and the C
# extension) uses them.  Nothing has been collected or printed at that point.
import os
import sys

try:
    import _mysql_connector  # noqa: F401

    _CEXT_IMPORT_ERROR = None
except Exception as exc:  # depends on the machine
    _CEXT_IMPORT_ERROR = f"{type(exc).__name__}: {exc}"


def _vendored_openssl():
    import importlib.util

    spec = importlib.util.find_spec("mysql")
    if not spec or not spec.submodule_search_locations:
        return None
    vendor = os.path.join(list(spec.submodule_search_locations)[0], "vendor")
    libs = [os.path.join(vendor, n) for n in ("libcrypto.so.3", "libssl.so.3")]
    return libs if all(os.path.exists(p) for p in libs) else None


def pytest_configure(config):
    if not _CEXT_IMPORT_ERROR or "OPENSSL" not in _CEXT_IMPORT_ERROR:
        return
    if os.environ.get("SLUICE_CEXT_REEXEC") == "1" or not getattr(sys, "orig_argv", None):
        return
    libs = _vendored_openssl()
    if not libs:
        return
    capman = config.pluginmanager.getplugin("capturemanager")
    if capman is not None:
        capman.stop_global_capturing()  # give the real stdout/stderr back before exec
    env = dict(os.environ)
    env["SLUICE_CEXT_REEXEC"] = "1"
    env["LD_PRELOAD"] = ":".join(libs + ([env["LD_PRELOAD"]] if env.get("LD_PRELOAD") else []))
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable] + list(sys.orig_argv[1:]), env)

import itertools
import signal
import threading
import time
from dataclasses import dataclass

import pymysql
import pymysql.constants.CLIENT
import pytest

import mysql.connector
import mysql.connector.errors

try:
    from mysql.connector import HAVE_CEXT
except ImportError:  # pragma: no cover
    HAVE_CEXT = False


# --------------------------------------------------------------------------
# endpoints


@dataclass(frozen=True)
class Endpoint:
    name: str
    host: str
    port: int
    user: str
    password: str
    db: str


def _env(key, default):
    v = os.environ.get(key)
    return v if v else default


SLUICE = Endpoint(
    "sluice",
    _env("SLUICE_HOST", "127.0.0.1"),
    int(_env("SLUICE_PORT", "3306")),
    _env("SLUICE_USER", "root"),
    os.environ.get("SLUICE_PASSWORD", ""),
    _env("SLUICE_DB", "test"),
)
DIRECT = Endpoint(
    "direct",
    _env("DIRECT_HOST", "127.0.0.1"),
    int(_env("DIRECT_PORT", "3306")),
    _env("DIRECT_USER", "root"),
    os.environ.get("DIRECT_PASSWORD", ""),
    SLUICE.db,
)

TLS_REQUESTED = os.environ.get("SLUICE_TLS") == "1"
TLS_CA = os.environ.get("SLUICE_TLS_CA") or None

PID = os.getpid()
_counter = itertools.count(1)


def unique(prefix="t"):
    """A name unique to this process and call (suites may run concurrently)."""
    return f"py_{prefix}_{PID}_{next(_counter)}"


# --------------------------------------------------------------------------
# driver abstraction


class Driver:
    name = "?"
    module = None
    Error = Exception
    OperationalError = Exception
    IntegrityError = Exception
    ProgrammingError = Exception
    # errors a driver may raise for a connection the server closed
    LostConnectionErrors = (Exception,)

    def connect(self, ep, *, autocommit=True, database=True, multi=False, local_infile=False, **extra):
        raise NotImplementedError

    def errno(self, exc):
        raise NotImplementedError

    def errmsg(self, exc):
        raise NotImplementedError

    def sqlstate(self, exc):
        return None

    def thread_id(self, conn):
        raise NotImplementedError

    def ping(self, conn):
        raise NotImplementedError

    def select_db(self, conn, db):
        raise NotImplementedError

    def kill(self, conn, thread_id):
        raise NotImplementedError

    def uses_tls(self, conn):
        raise NotImplementedError

    def warning_count(self, cursor):
        raise NotImplementedError

    def server_info(self, conn):
        return conn.get_server_info()

    def __repr__(self):
        return self.name


class PyMySQLDriver(Driver):
    name = "pymysql"
    module = pymysql
    Error = pymysql.err.Error
    OperationalError = pymysql.err.OperationalError
    IntegrityError = pymysql.err.IntegrityError
    ProgrammingError = pymysql.err.ProgrammingError
    LostConnectionErrors = (pymysql.err.OperationalError, pymysql.err.InterfaceError)
    paramstyle = "%s"

    def connect(self, ep, *, autocommit=True, database=True, multi=False, local_infile=False, **extra):
        kw = dict(
            host=ep.host,
            port=ep.port,
            user=ep.user,
            password=ep.password,
            charset="utf8mb4",
            autocommit=autocommit,
            connect_timeout=10,
            read_timeout=30,
            write_timeout=30,
            local_infile=local_infile,
        )
        if database:
            kw["database"] = ep.db
        if multi:
            kw["client_flag"] = pymysql.constants.CLIENT.MULTI_STATEMENTS
        kw.update(extra)
        return pymysql.connect(**kw)

    def errno(self, exc):
        return exc.args[0]

    def errmsg(self, exc):
        return exc.args[1] if len(exc.args) > 1 else str(exc)

    def thread_id(self, conn):
        return conn.thread_id()

    def ping(self, conn):
        conn.ping(reconnect=False)

    def select_db(self, conn, db):
        conn.select_db(db)  # COM_INIT_DB

    def kill(self, conn, thread_id):
        conn.kill(thread_id)

    def uses_tls(self, conn):
        import ssl

        return isinstance(conn._sock, ssl.SSLSocket)

    def warning_count(self, cursor):
        # PyMySQL keeps the OK/EOF packet's warning count on the result object
        return cursor._result.warning_count


class ConnectorDriver(Driver):
    module = mysql.connector
    Error = mysql.connector.errors.Error
    OperationalError = mysql.connector.errors.OperationalError
    IntegrityError = mysql.connector.errors.IntegrityError
    ProgrammingError = mysql.connector.errors.ProgrammingError
    # the pure driver reports a peer that closed the socket as InterfaceError 2013
    LostConnectionErrors = (mysql.connector.errors.OperationalError, mysql.connector.errors.InterfaceError)
    paramstyle = "%s"

    def __init__(self, use_pure):
        self.use_pure = use_pure
        self.name = "connector_pure" if use_pure else "connector_cext"

    def available(self):
        if self.use_pure:
            return None
        if not HAVE_CEXT or _CEXT_IMPORT_ERROR:
            return _CEXT_IMPORT_ERROR or "mysql.connector.HAVE_CEXT is False"
        return None

    def connect(self, ep, *, autocommit=True, database=True, multi=False, local_infile=False, **extra):
        kw = dict(
            host=ep.host,
            port=ep.port,
            user=ep.user,
            password=ep.password,
            use_pure=self.use_pure,
            charset="utf8mb4",
            collation="utf8mb4_general_ci",
            autocommit=autocommit,
            connection_timeout=10,
            read_timeout=30,
            write_timeout=30,
            allow_local_infile=local_infile,
        )
        if database:
            kw["database"] = ep.db
        kw.update(extra)
        conn = mysql.connector.connect(**kw)
        expected = "CMySQLConnection" if not self.use_pure else "MySQLConnection"
        assert type(conn).__name__ == expected, f"got {type(conn).__name__}, wanted {expected}"
        return conn

    def errno(self, exc):
        return exc.errno

    def errmsg(self, exc):
        return exc.msg

    def sqlstate(self, exc):
        return exc.sqlstate

    def thread_id(self, conn):
        return conn.connection_id

    def ping(self, conn):
        conn.ping(reconnect=False)

    def select_db(self, conn, db):
        conn.cmd_init_db(db)  # COM_INIT_DB

    def kill(self, conn, thread_id):
        conn.cmd_process_kill(thread_id)  # COM_PROCESS_KILL

    def uses_tls(self, conn):
        if self.use_pure:
            import ssl

            return isinstance(conn._socket.sock, ssl.SSLSocket)
        return bool(conn._cmysql.get_ssl_cipher())

    def warning_count(self, cursor):
        return cursor.warning_count

    def server_info(self, conn):
        return conn.server_info


DRIVERS = {
    "pymysql": PyMySQLDriver(),
    "connector_pure": ConnectorDriver(True),
    "connector_cext": ConnectorDriver(False),
}
CONNECTOR_DRIVERS = ["connector_pure", "connector_cext"]


def _require(drv):
    reason = drv.available() if isinstance(drv, ConnectorDriver) else None
    if reason:
        if os.environ.get("SLUICE_ALLOW_NO_CEXT") == "1":
            pytest.skip(f"mysql-connector C extension unavailable: {reason}")
        pytest.fail(f"mysql-connector C extension unavailable (set SLUICE_ALLOW_NO_CEXT=1 to allow): {reason}")
    return drv


# --------------------------------------------------------------------------
# fixtures


@pytest.fixture(params=list(DRIVERS), ids=list(DRIVERS))
def drv(request):
    return _require(DRIVERS[request.param])


@pytest.fixture(params=CONNECTOR_DRIVERS, ids=CONNECTOR_DRIVERS)
def connector_drv(request):
    return _require(DRIVERS[request.param])


ENDPOINT_DOWN = None


class Connections:
    """Opens connections for a test and closes them all at teardown."""

    def __init__(self, drv):
        self.drv = drv
        self._open = []

    def sluice(self, **kw):
        global ENDPOINT_DOWN
        try:
            c = self.drv.connect(SLUICE, **kw)
        except self.drv.Error as exc:
            code = self.drv.errno(exc)
            if code in (2002, 2003, 2006, 2013, 2055, -1) or code is None:
                # the endpoint is unreachable or hangs: later tests fail at once
                ENDPOINT_DOWN = f"{self.drv.name} could not connect: {exc!r}"
            raise
        self._open.append(c)
        return c

    def direct(self, **kw):
        c = self.drv.connect(DIRECT, **kw)
        self._open.append(c)
        return c

    def close_all(self):
        for c in self._open:
            try:
                c.close()
            except Exception:
                pass


# conns/cconns depend on cleanup so that connections are closed before the
# cleanup statements run (an open session may hold locks on what is dropped)


@pytest.fixture
def conns(drv, cleanup):
    cs = Connections(drv)
    yield cs
    cs.close_all()


@pytest.fixture
def cconns(connector_drv, cleanup):
    cs = Connections(connector_drv)
    yield cs
    cs.close_all()


def admin_connect(db=True):
    """A PyMySQL connection to the backend directly, for setup and inspection."""
    kw = dict(
        host=DIRECT.host,
        port=DIRECT.port,
        user=DIRECT.user,
        password=DIRECT.password,
        charset="utf8mb4",
        autocommit=True,
        connect_timeout=10,
        read_timeout=30,
        write_timeout=30,
    )
    if db:
        kw["database"] = DIRECT.db
    return pymysql.connect(**kw)


class Cleanup:
    def __init__(self):
        self.sql = []
        self.files = []

    def table(self, prefix="t"):
        name = unique(prefix)
        self.sql.append(f"DROP TABLE IF EXISTS `{DIRECT.db}`.`{name}`")
        return name

    def add(self, sql):
        self.sql.append(sql)

    def file(self, path):
        self.files.append(path)
        return path


@pytest.fixture
def cleanup():
    cl = Cleanup()
    yield cl
    if cl.sql:
        a = admin_connect(db=False)
        try:
            with a.cursor() as cur:
                for s in reversed(cl.sql):
                    cur.execute(s)
        finally:
            a.close()
    for p in cl.files:
        try:
            os.unlink(p)
        except FileNotFoundError:
            pass


@pytest.fixture
def admin():
    a = admin_connect()
    yield a
    a.close()


# --------------------------------------------------------------------------
# per-test time limit (the suite must be bounded even if the endpoint hangs)

TEST_TIMEOUT = int(os.environ.get("SLUICE_PY_TEST_TIMEOUT", "45"))
SUITE_TIMEOUT = int(os.environ.get("SLUICE_PY_SUITE_TIMEOUT", "300"))
_SUITE_START = time.monotonic()


class SuiteTimeout(Exception):
    pass


@pytest.fixture(autouse=True)
def _time_limit():
    if ENDPOINT_DOWN:
        pytest.fail(f"not run: the endpoint is unusable ({ENDPOINT_DOWN})")
    remaining = SUITE_TIMEOUT - (time.monotonic() - _SUITE_START)
    if remaining <= 1:
        pytest.fail(f"suite time limit of {SUITE_TIMEOUT}s exceeded (SLUICE_PY_SUITE_TIMEOUT)")
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    limit = int(min(TEST_TIMEOUT, remaining))

    def on_alarm(signum, frame):
        raise SuiteTimeout(f"test exceeded {limit}s")

    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(limit)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


# --------------------------------------------------------------------------
# helpers shared by the tests


def query(conn, sql, params=None):
    cur = conn.cursor()
    try:
        cur.execute(sql, params) if params is not None else cur.execute(sql)
        rows = cur.fetchall() if cur.description else None
        desc = cur.description
        return rows, desc
    finally:
        cur.close()


def scalar(conn, sql, params=None):
    rows, _ = query(conn, sql, params)
    assert rows and len(rows) == 1, f"{sql!r} returned {rows!r}"
    return rows[0][0]


def run(conn, sql, params=None):
    cur = conn.cursor()
    try:
        cur.execute(sql, params) if params is not None else cur.execute(sql)
        if cur.description:
            cur.fetchall()
        return cur.rowcount
    finally:
        cur.close()


def desc_key(desc):
    """The parts of cursor.description that both endpoints must agree on."""
    return [tuple(d) for d in desc] if desc else desc


def pytest_report_header(config):
    return [
        f"sluice endpoint: {SLUICE.host}:{SLUICE.port} db={SLUICE.db}; direct: {DIRECT.host}:{DIRECT.port}",
        f"mysql-connector C extension: {'available' if HAVE_CEXT and not _CEXT_IMPORT_ERROR else _CEXT_IMPORT_ERROR}",
    ]
