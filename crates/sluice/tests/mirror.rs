//! Mirroring (query rules' mirror_hostgroup) against real MariaDB servers: the mirror runs the
//! statements a rule matches, in the client's schema and as its user, reads only unless
//! `[mirror] writes`; the client gets the primary's answers and is not slowed by a mirror that
//! never answers; mirrored statements count only in the Mirror_* counters.

mod common;

use common::*;
use mysql_async::prelude::*;
use std::time::{Duration, Instant};
use testkit::MariaDb;

/// sluice with `primary` as hostgroup 0 and the mirror at `mirror_port` as hostgroup 1, a rule
/// mirroring every statement on `table` to hostgroup 1, and `[mirror]` with `mirror`.
fn mirrored_proxy(primary: &MariaDb, mirror_port: u16, table: &str, mirror: &str, proxy: &str) -> Proxy {
    let text = format!(
        "[proxy]\nlisten = [\"127.0.0.1:0\"]\nworkers = 2\n{proxy}\n\
         [mirror]\n{mirror}\n\
         [[mysql_servers]]\nhostgroup_id = 0\nhostname = \"127.0.0.1\"\nport = {{BACKEND_PORT}}\n\
         [[mysql_servers]]\nhostgroup_id = 1\nhostname = \"127.0.0.1\"\nport = {mirror_port}\n\
         [[mysql_users]]\nusername = \"root\"\npassword = \"\"\ndefault_hostgroup = 0\n\
         [[mysql_query_rules]]\nrule_id = 1\nactive = 1\nmatch_pattern = \"{table}\"\nmirror_hostgroup = 1\napply = 1\n"
    );
    Proxy::start(toml_config(&text, primary))
}

/// The server's own count of a global status variable.
fn status(db: &MariaDb, name: &str) -> u64 {
    let out = db.sql(&format!("SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS WHERE VARIABLE_NAME = '{name}'")).unwrap();
    out.trim().lines().last().and_then(|l| l.trim().parse().ok()).unwrap_or_else(|| panic!("{name}: {out:?}"))
}

/// Waits until `done()` or panics after `secs` seconds naming `what`.
fn wait_for(secs: u64, what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_mirror_runs_what_the_rule_matches_reads_only_unless_writes_are_on() {
    let primary = testkit::shared();
    let mirror = MariaDb::start().expect("mirror MariaDB starts");
    let t = unique("mirrored");
    for (db, v) in [(primary, 1), (&mirror, 2)] {
        db.sql(&format!("CREATE TABLE test.{t} (id INT PRIMARY KEY, v INT); INSERT INTO test.{t} VALUES (1, {v});")).unwrap();
    }
    let proxy = mirrored_proxy(primary, mirror.port(), &t, "", "");
    let mut c = connect(proxy.port).await;
    let selects_before = status(&mirror, "COM_SELECT");
    let questions = proxy.counter("Questions");

    // Unqualified names: the mirror must run them in the client's schema (test).
    for _ in 0..20 {
        let v: Option<i64> = c.query_first(format!("SELECT v FROM {t} WHERE id = 1")).await.unwrap();
        assert_eq!(v, Some(1), "the client gets the primary's answer, never the mirror's");
    }
    // Writes are not mirrored by default, nor what changes the session.
    c.query_drop(format!("INSERT INTO {t} VALUES (2, 1)")).await.unwrap();
    c.query_drop(format!("SELECT v INTO @x FROM {t} WHERE id = 1")).await.unwrap();
    // A statement that fails on the primary is not mirrored.
    assert!(c.query_drop(format!("SELECT nope FROM {t}")).await.is_err());
    // Neither is a statement outside the rule.
    c.query_drop("SELECT 1").await.unwrap();
    let client_statements = 24;

    wait_for(10, "20 mirrored statements", || proxy.counter("Mirror_completed") >= 20);
    assert_eq!(proxy.counter("Mirror_queued"), 20, "only the 20 reads were queued");
    assert_eq!(proxy.counter("Mirror_completed"), 20);
    assert_eq!(proxy.counter("Mirror_failed"), 0);
    assert_eq!(proxy.counter("Mirror_dropped"), 0);
    assert!(status(&mirror, "COM_SELECT") >= selects_before + 20, "the mirror ran the reads");
    assert_eq!(mirror.sql(&format!("SELECT COUNT(*) FROM test.{t}")).unwrap().trim().lines().last(), Some("1"), "no write reached it");
    assert_eq!(proxy.counter("Questions") - questions, client_statements, "mirrored statements are not the client's");

    // The counters reach /metrics, and the pending gauge is back to 0.
    let metrics = http_get(proxy.http_port(), "/metrics", None).body;
    assert!(metrics.contains("sluice_mirror_completed_total 20"), "{metrics}");
    assert!(metrics.contains("sluice_mirror_pending 0"), "{metrics}");
    drop(c);
    drop(proxy);

    // With writes on, an INSERT reaches the mirror too (in autocommit, as the client's user).
    let proxy = mirrored_proxy(primary, mirror.port(), &t, "writes = true", "");
    let mut c = connect(proxy.port).await;
    c.query_drop(format!("INSERT INTO {t} VALUES (3, 1)")).await.unwrap();
    c.query_drop("BEGIN").await.unwrap();
    c.query_drop(format!("UPDATE {t} SET v = 5 WHERE id = 1")).await.unwrap();
    c.query_drop("COMMIT").await.unwrap();
    wait_for(10, "the mirrored writes", || proxy.counter("Mirror_completed") >= 2);
    let rows = mirror.sql(&format!("SELECT id, v FROM test.{t} ORDER BY id")).unwrap();
    assert!(rows.contains("3\t1") && rows.contains("1\t5"), "the mirror got the INSERT and the UPDATE: {rows}");
    assert_eq!(proxy.counter("Mirror_queued"), 2, "BEGIN and COMMIT are never mirrored");
    drop(c);
    drop(proxy);

    // mirror_flagOUT: the copy is evaluated again from chain 100, where a rule rewrites it to
    // another table and sends it to hostgroup 1; the primary's statement is untouched.
    mirror.sql(&format!("CREATE TABLE test.{t}_copy (id INT PRIMARY KEY, v INT)")).unwrap();
    let text = format!(
        "[proxy]\nlisten = [\"127.0.0.1:0\"]\nworkers = 2\n[mirror]\nwrites = true\n\
         [[mysql_servers]]\nhostgroup_id = 0\nhostname = \"127.0.0.1\"\nport = {{BACKEND_PORT}}\n\
         [[mysql_servers]]\nhostgroup_id = 1\nhostname = \"127.0.0.1\"\nport = {}\n\
         [[mysql_users]]\nusername = \"root\"\npassword = \"\"\ndefault_hostgroup = 0\n\
         [[mysql_query_rules]]\nrule_id = 1\nmatch_pattern = \"INTO {t} \"\nmirror_flagOUT = 100\n\
         [[mysql_query_rules]]\nrule_id = 100\nflagIN = 100\nmatch_pattern = \"INTO {t} \"\nreplace_pattern = \"INTO {t}_copy \"\ndestination_hostgroup = 1\napply = 1\n",
        mirror.port()
    );
    let proxy = Proxy::start(toml_config(&text, primary));
    let mut c = connect(proxy.port).await;
    c.query_drop(format!("INSERT INTO {t} VALUES (4, 4)")).await.unwrap();
    wait_for(10, "the mirrored copy", || proxy.counter("Mirror_completed") >= 1);
    assert_eq!(
        mirror.sql(&format!("SELECT v FROM test.{t}_copy WHERE id = 4")).unwrap().trim(),
        "4",
        "the copy, rewritten, on hostgroup 1"
    );
    assert_eq!(mirror.sql(&format!("SELECT COUNT(*) FROM test.{t} WHERE id = 4")).unwrap().trim(), "0");
    assert_eq!(primary.sql(&format!("SELECT v FROM test.{t} WHERE id = 4")).unwrap().trim(), "4", "the primary got the statement as sent");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_mirror_does_not_slow_the_client_and_its_queue_stays_bounded() {
    let primary = testkit::shared();
    // A mirror that takes connections and never says a word: every connect hangs until
    // connect_timeout_ms.
    let blackhole = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let t = unique("dead_mirror");
    primary.sql(&format!("CREATE TABLE test.{t} (id INT PRIMARY KEY); INSERT INTO test.{t} VALUES (1);")).unwrap();
    let proxy =
        mirrored_proxy(primary, blackhole.local_addr().unwrap().port(), &t, "queue_size = 4\nconcurrency = 2", "connect_timeout_ms = 1000");
    let mut c = connect(proxy.port).await;
    let sql = format!("SELECT id FROM {t} WHERE id = 1");
    c.query_drop(&sql).await.unwrap();

    let mut slowest = Duration::ZERO;
    let started = Instant::now();
    for _ in 0..200 {
        let one = Instant::now();
        let v: Option<i64> = c.query_first(&sql).await.unwrap();
        assert_eq!(v, Some(1));
        slowest = slowest.max(one.elapsed());
    }
    let all = started.elapsed();
    // Were the client waiting for its mirror, one statement would take the 1 s connect timeout.
    assert!(slowest < Duration::from_millis(500), "slowest statement {slowest:?}");
    assert!(all < Duration::from_secs(10), "200 statements took {all:?}");
    assert!(proxy.counter("Mirror_queued") <= 4 + 201, "queued: {}", proxy.counter("Mirror_queued"));
    assert!(proxy.counter("Mirror_dropped") > 150, "a full queue drops: {}", proxy.counter("Mirror_dropped"));
    assert!(proxy.server().data.mirror.pending() <= 4, "the queue is bounded");
    // The hung connects end at connect_timeout_ms and count as failures; the queue drains.
    wait_for(10, "the mirror's failures", || proxy.counter("Mirror_failed") >= 4 && proxy.server().data.mirror.pending() == 0);
    assert_eq!(proxy.counter("Mirror_completed"), 0);
    assert!(proxy.counter("Mirror_failed") >= proxy.counter("Mirror_queued"), "every queued one failed");
    // Unreachable a moment ago: the next offers fail at once, without a connect attempt (a dead
    // mirror costs a connect a second, not one per statement).
    // Without that they would be queued (a connect each) or, the queue full, dropped. (Timing
    // on a loaded machine: a window may pass; most of 50 statements fall within one.)
    let (queued, dropped, failed) = (proxy.counter("Mirror_queued"), proxy.counter("Mirror_dropped"), proxy.counter("Mirror_failed"));
    for _ in 0..50 {
        c.query_drop(&sql).await.unwrap();
    }
    let failed_at_once = proxy.counter("Mirror_failed") - failed;
    let tried = (proxy.counter("Mirror_queued") - queued) + (proxy.counter("Mirror_dropped") - dropped);
    assert!(failed_at_once >= 25, "failed at once {failed_at_once}, queued or dropped {tried}");
    // The client's session is as good as ever.
    let v: Option<i64> = c.query_first(&sql).await.unwrap();
    assert_eq!(v, Some(1));
}
