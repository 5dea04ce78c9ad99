//! Transactions on sharded tables: `shop.t_order` over 4 shards (2 private MariaDB servers × 2
//! databases, `mod` on user_id). A transaction's statements on shards run on XA branches: a
//! commit across shards is two-phase with the decision in the recovery log; a crash of sluice
//! between PREPARE and COMMIT is resolved by the recovery of the next sluice, all or nothing.

mod common;

use common::*;
use mysql_async::prelude::*;
use mysql_async::Conn;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use testkit::MariaDb;

/// ds_0, ds_1 on `a` (hostgroup 1, also the default: `plain` lives there); ds_2, ds_3 on `b`.
fn config_text(a: &MariaDb, b: &MariaDb, listen: &str, log: &Path) -> String {
    format!(
        "[proxy]\nlisten = [\"{listen}\"]\nworkers = 2\nadmin_listen = \"\"\nhttp_listen = \"\"\n\
         [monitor]\nusername = \"root\"\npassword = \"\"\n{}\
         [[shard_databases]]\nname = \"shop\"\nxa_log = \"{}\"\n{SHOP_NODES}\
         [[sharded_tables]]\ndatabase = \"shop\"\ntable = \"t_order\"\nsharding_column = \"user_id\"\nalgorithm = \"mod\"\n",
        two_hostgroups(a, b),
        log.display()
    )
}

/// Rows of `t_order` with ids in [from, to) on each shard, read on the servers themselves.
fn per_shard(a: &MariaDb, b: &MariaDb, from: u64, to: u64) -> Vec<u64> {
    let mut out = Vec::new();
    for (db, name) in [(a, "ds_0"), (a, "ds_1"), (b, "ds_2"), (b, "ds_3")] {
        let n = db.sql(&format!("SELECT COUNT(*) FROM {name}.t_order WHERE id >= {from} AND id < {to}")).unwrap();
        out.push(n.trim().parse().unwrap());
    }
    out
}

/// The prepared XA branches a server holds (XA RECOVER's data column).
fn prepared(db: &MariaDb) -> Vec<String> {
    db.sql("XA RECOVER").unwrap().lines().filter_map(|l| l.split('\t').nth(3).map(str::to_string)).collect()
}

fn com_xa_prepare(db: &MariaDb) -> u64 {
    let out = db.sql("SHOW GLOBAL STATUS LIKE 'Com_xa_prepare'").unwrap();
    out.split('\t').nth(1).unwrap().trim().parse().unwrap()
}

/// Inserts ids from `first`, one row on each of the 4 shards (user_id 0..3), in one statement.
async fn insert_four(c: &mut Conn, first: u64) -> Result<(), mysql_async::Error> {
    let values: Vec<String> = (0..4).map(|u| format!("({}, {u}, 'x')", first + u)).collect();
    c.query_drop(format!("INSERT INTO t_order (id, user_id, note) VALUES {}", values.join(", "))).await
}

fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting: {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The sluice binary, its stderr in a file; killed on drop.
struct Binary {
    child: Child,
    log: std::path::PathBuf,
}

impl Binary {
    fn start(config: &Path, port: u16, failpoint: Option<&str>, log: std::path::PathBuf) -> Binary {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_sluice"));
        cmd.args(["--config", config.to_str().unwrap()])
            .env("SLUICE_LOG", "info")
            .env_remove("SLUICE_FAILPOINT")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap());
        if let Some(f) = failpoint {
            cmd.env("SLUICE_FAILPOINT", f);
        }
        let mut child = cmd.spawn().unwrap();
        let deadline = Instant::now() + Duration::from_secs(15);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            assert!(Instant::now() < deadline, "sluice did not start listening: {text}");
            assert!(child.try_wait().unwrap().is_none(), "sluice exited: {text}");
            std::thread::sleep(Duration::from_millis(50));
        }
        Binary { child, log }
    }

    /// Waits for the process to end by itself (a failpoint's abort).
    fn wait_aborted(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                assert!(!status.success(), "sluice aborted at its failpoint");
                let text = std::fs::read_to_string(&self.log).unwrap_or_default();
                assert!(text.contains("failpoint"), "{text}");
                return;
            }
            assert!(Instant::now() < deadline, "sluice did not abort");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Binary {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transactions_across_shards_commit_all_or_nothing_and_survive_a_crash() {
    let a = MariaDb::start().unwrap();
    let b = MariaDb::start().unwrap();
    create_shop_databases(&a, &b);
    a.sql("CREATE TABLE shop.plain (id INT PRIMARY KEY)").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let text = config_text(&a, &b, "127.0.0.1:0", &dir.path().join("inprocess.xalog"));
    let proxy = Proxy::start(valid_config(&text));
    let mut c = connect_shop(proxy.port).await;
    c.query_drop("CREATE TABLE t_order (id BIGINT PRIMARY KEY, user_id BIGINT NOT NULL, note VARCHAR(20))").await.unwrap();
    let mut other = connect_shop(proxy.port).await;

    // Committed across shards: nothing visible to others before COMMIT, all of it after; the
    // transaction reads its own writes.
    let commits = proxy.counter("Shard_xa_commits");
    c.query_drop("BEGIN").await.unwrap();
    insert_four(&mut c, 100).await.unwrap();
    c.query_drop("INSERT INTO t_order (id, user_id, note) VALUES (104, 5, 'y')").await.unwrap();
    c.query_drop("UPDATE t_order SET note = 'z' WHERE user_id = 1").await.unwrap();
    let own: Option<u64> = c.query_first("SELECT COUNT(*) FROM t_order WHERE id >= 100 AND id < 200").await.unwrap();
    assert_eq!(own, Some(5), "the transaction reads its own writes");
    let note: Option<String> = c.query_first("SELECT note FROM t_order WHERE user_id = 1").await.unwrap();
    assert_eq!(note.as_deref(), Some("z"));
    let seen: Option<u64> = other.query_first("SELECT COUNT(*) FROM t_order WHERE id >= 100 AND id < 200").await.unwrap();
    assert_eq!(seen, Some(0), "not visible before COMMIT");
    let plain: Option<u64> = c.query_first("SELECT COUNT(*) FROM plain").await.unwrap();
    assert_eq!(plain, Some(0), "reads of unsharded tables run beside the branches");
    c.query_drop("COMMIT").await.unwrap();
    assert_eq!(per_shard(&a, &b, 100, 200), [1, 2, 1, 1]);
    assert_eq!(proxy.counter("Shard_xa_commits"), commits + 1);
    assert!(prepared(&a).is_empty() && prepared(&b).is_empty());

    // Rolled back: none of it.
    c.query_drop("START TRANSACTION").await.unwrap();
    insert_four(&mut c, 200).await.unwrap();
    c.query_drop("ROLLBACK").await.unwrap();
    assert_eq!(per_shard(&a, &b, 200, 300), [0, 0, 0, 0]);

    // Prepared statements (the binary protocol) run on the same branches: a single-shard and a
    // fan-out read see the transaction's own rows; ROLLBACK, then COMMIT, apply to all of it.
    for (first, end) in [(5000u64, "ROLLBACK"), (5100, "COMMIT")] {
        c.query_drop("BEGIN").await.unwrap();
        let insert = c.prep("INSERT INTO t_order (id, user_id, note) VALUES (?, ?, ?)").await.unwrap();
        for u in 0..4u64 {
            c.exec_drop(&insert, (first + u, u, "ps")).await.unwrap();
        }
        insert_four(&mut c, first + 10).await.unwrap();
        let one: Option<(u64, String)> =
            c.exec_first("SELECT id, note FROM t_order WHERE user_id = ? AND id = ?", (2, first + 2)).await.unwrap();
        assert_eq!(one, Some((first + 2, "ps".to_string())), "its own row, one shard, binary");
        let all: Vec<u64> = c.exec("SELECT id FROM t_order WHERE id >= ? AND id < ? ORDER BY id", (first, first + 100)).await.unwrap();
        assert_eq!(all.len(), 8, "its own rows on every shard: {all:?}");
        let seen: Option<u64> =
            other.query_first(format!("SELECT COUNT(*) FROM t_order WHERE id >= {first} AND id < {}", first + 100)).await.unwrap();
        assert_eq!(seen, Some(0), "not visible before COMMIT");
        // Prepared too (sysbench prepares its BEGIN and COMMIT): the branches end first.
        c.exec_drop(end, ()).await.unwrap();
        let want = if end == "COMMIT" { [2, 2, 2, 2] } else { [0, 0, 0, 0] };
        assert_eq!(per_shard(&a, &b, first, first + 100), want, "{end}");
    }
    assert!(prepared(&a).is_empty() && prepared(&b).is_empty());

    // autocommit off: the same transaction, ended by COMMIT.
    c.query_drop("SET autocommit = 0").await.unwrap();
    insert_four(&mut c, 300).await.unwrap();
    let e = c.query_drop("SET autocommit = 1").await.expect_err("an implicit commit beside branches");
    assert_eq!(server_code(&e), Some(1235), "{e}");
    c.query_drop("COMMIT").await.unwrap();
    c.query_drop("SET autocommit = 1").await.unwrap();
    assert_eq!(per_shard(&a, &b, 300, 400), [1, 1, 1, 1]);

    // One shard: one phase, no PREPARE on any server.
    let before = (com_xa_prepare(&a), com_xa_prepare(&b));
    c.query_drop("BEGIN").await.unwrap();
    c.query_drop("INSERT INTO t_order (id, user_id, note) VALUES (400, 2, 'one')").await.unwrap();
    c.query_drop("UPDATE t_order SET note = 'two' WHERE user_id = 2 AND id = 400").await.unwrap();
    c.query_drop("COMMIT").await.unwrap();
    assert_eq!((com_xa_prepare(&a), com_xa_prepare(&b)), before, "ONE PHASE");
    assert_eq!(per_shard(&a, &b, 400, 500), [0, 0, 1, 0]);

    // Writes to unsharded tables do not mix with branches, either way round.
    c.query_drop("BEGIN").await.unwrap();
    c.query_drop("INSERT INTO plain VALUES (1)").await.unwrap();
    let e = c.query_drop("INSERT INTO t_order (id, user_id) VALUES (500, 1)").await.expect_err("after an unsharded write");
    assert!(e.to_string().contains("unsharded"), "{e}");
    c.query_drop("ROLLBACK").await.unwrap();
    // The same after reads first, and with the unsharded write prepared.
    c.query_drop("BEGIN").await.unwrap();
    c.query_drop("SELECT COUNT(*) FROM plain").await.unwrap();
    c.exec_drop("/* w */ insert into plain values (?)", (4,)).await.unwrap();
    c.query_drop("SELECT COUNT(*) FROM plain").await.unwrap();
    let e = c.query_drop("INSERT INTO t_order (id, user_id) VALUES (500, 1)").await.expect_err("after a prepared unsharded write");
    assert!(e.to_string().contains("unsharded"), "{e}");
    c.query_drop("ROLLBACK").await.unwrap();
    c.query_drop("BEGIN").await.unwrap();
    c.query_drop("INSERT INTO t_order (id, user_id) VALUES (500, 1)").await.unwrap();
    let e = c.query_drop("INSERT INTO plain VALUES (2)").await.expect_err("an unsharded write beside branches");
    assert_eq!(server_code(&e), Some(1235), "{e}");
    let e = c.exec_drop("INSERT INTO plain VALUES (?)", (3,)).await.expect_err("a prepared unsharded write beside branches");
    assert_eq!(server_code(&e), Some(1235), "{e}");
    let e = c.query_drop("ALTER TABLE t_order ADD COLUMN x INT").await.expect_err("DDL in a transaction");
    assert_eq!(server_code(&e), Some(1235), "{e}");
    c.query_drop("ROLLBACK").await.unwrap();
    assert_eq!(per_shard(&a, &b, 500, 600), [0, 0, 0, 0]);
    assert_eq!(a.sql("SELECT COUNT(*) FROM shop.plain").unwrap().trim(), "0");

    // A branch lost before COMMIT (its connection killed on its server): PREPARE cannot
    // succeed everywhere, so nothing commits, and the client is told.
    c.query_drop("BEGIN").await.unwrap();
    insert_four(&mut c, 600).await.unwrap();
    let ids = b.sql("SELECT ID FROM information_schema.PROCESSLIST WHERE USER = 'root' AND ID <> CONNECTION_ID()").unwrap();
    for id in ids.lines().filter(|l| !l.trim().is_empty()) {
        let _ = b.sql(&format!("KILL {}", id.trim()));
    }
    let e = c.query_drop("COMMIT").await.expect_err("a branch is gone");
    assert_eq!(server_code(&e), Some(1402), "{e}");
    assert!(e.to_string().contains("rolled back"), "{e}");
    assert_eq!(per_shard(&a, &b, 600, 700), [0, 0, 0, 0]);
    assert!(prepared(&a).is_empty(), "the branches on the other server were rolled back: {:?}", prepared(&a));
    // The session goes on.
    let n: Option<u64> = c.query_first("SELECT COUNT(*) FROM t_order").await.unwrap();
    assert_eq!(n, Some(18), "10 text rows and 8 prepared ones committed");

    // A client gone mid-transaction: nothing committed, no branch left behind.
    let mut gone = connect_shop(proxy.port).await;
    gone.query_drop("BEGIN").await.unwrap();
    insert_four(&mut gone, 700).await.unwrap();
    gone.disconnect().await.unwrap();
    wait_until("the branches of a gone client end", || {
        a.sql("SELECT COUNT(*) FROM information_schema.INNODB_TRX").unwrap().trim() == "0"
            && b.sql("SELECT COUNT(*) FROM information_schema.INNODB_TRX").unwrap().trim() == "0"
    });
    assert_eq!(per_shard(&a, &b, 700, 800), [0, 0, 0, 0]);
    assert!(prepared(&a).is_empty() && prepared(&b).is_empty());
    drop(c);
    drop(other);
    drop(proxy);

    // A branch that is not sluice's: recovery must leave it alone.
    a.sql("XA START 'foreign','x'; INSERT INTO ds_0.t_order VALUES (900, 0, 'f'); XA END 'foreign','x'; XA PREPARE 'foreign','x';")
        .unwrap();
    assert_eq!(prepared(&a), ["foreignx"]);

    // sluice crashes after every PREPARE, before its decision: the next sluice's recovery rolls
    // every branch back.
    let port = testkit::free_port();
    let config = dir.path().join("sluice.toml");
    std::fs::write(&config, config_text(&a, &b, &format!("127.0.0.1:{port}"), &dir.path().join("binary.xalog"))).unwrap();
    for (failpoint, first, committed) in [("xa_after_prepare", 1000, false), ("xa_after_decision", 2000, true)] {
        let mut crashing = Binary::start(&config, port, Some(failpoint), dir.path().join(format!("{failpoint}.log")));
        let mut c = connect_shop(port).await;
        c.query_drop("BEGIN").await.unwrap();
        insert_four(&mut c, first).await.unwrap();
        c.query_drop("COMMIT").await.expect_err("sluice aborts during the commit");
        crashing.wait_aborted();
        drop(c);
        // Each server holds its branches prepared: nothing of it is visible yet.
        wait_until("the servers see the crashed sluice's connections go", || prepared(&a).len() == 3 && prepared(&b).len() == 2);
        assert_eq!(per_shard(&a, &b, first, first + 100), [0, 0, 0, 0], "{failpoint}: prepared, not committed");
        drop(crashing);
        let restarted = Binary::start(&config, port, None, dir.path().join(format!("{failpoint}-restart.log")));
        wait_until("recovery resolves the branches", || prepared(&a) == ["foreignx"] && prepared(&b).is_empty());
        let want = if committed { [1, 1, 1, 1] } else { [0, 0, 0, 0] };
        assert_eq!(per_shard(&a, &b, first, first + 100), want, "{failpoint}: all or nothing");
        let mut r = connect_shop(port).await;
        let n: Option<u64> =
            r.query_first(format!("SELECT COUNT(*) FROM t_order WHERE id >= {first} AND id < {}", first + 100)).await.unwrap();
        assert_eq!(n, Some(if committed { 4 } else { 0 }));
        drop(r);
        drop(restarted);
    }

    // A branch's connection fails after the decision: sluice commits it from a new connection
    // before it answers OK.
    let _elsewhere = Binary::start(&config, port, Some("xa_commit_elsewhere"), dir.path().join("elsewhere.log"));
    let mut c = connect_shop(port).await;
    c.query_drop("BEGIN").await.unwrap();
    insert_four(&mut c, 3000).await.unwrap();
    c.query_drop("COMMIT").await.unwrap();
    assert_eq!(per_shard(&a, &b, 3000, 3100), [1, 1, 1, 1]);
    assert_eq!(prepared(&a), ["foreignx"]);
    assert!(prepared(&b).is_empty());
    a.sql("XA ROLLBACK 'foreign','x'").unwrap();
}
