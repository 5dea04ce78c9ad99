//! A private MariaDB replication topology for tests: one primary and GTID replicas, each a
//! [`MariaDb`] of its own (own datadir, free port, 127.0.0.1 only), replicating over TCP.
//!
//! ```no_run
//! let t = sluice_testkit::Replication::start(2)?;
//! t.primary.sql("CREATE TABLE test.t (id INT PRIMARY KEY)")?;
//! t.sync()?;
//! assert_eq!(t.replicas[0].sql("SELECT @@read_only")?, "1\n");
//! # Ok::<(), anyhow::Error>(())
//! ```

use std::time::Duration;

use anyhow::{bail, Context as _};

use crate::{MariaDb, MariaDbOptions};

/// How long [`Replication::sync`] waits for a replica to apply the primary's position.
const SYNC_TIMEOUT: Duration = Duration::from_secs(30);

/// A primary and its replicas. Every server writes a binary log with GTIDs and
/// `log_slave_updates`, so any replica can be promoted; replicas start with `read_only = 1`.
/// Dropping the value kills every server.
#[derive(Debug)]
pub struct Replication {
    pub primary: MariaDb,
    pub replicas: Vec<MariaDb>,
}

/// `SHOW SLAVE STATUS` of `db`, by column name (`MariaDb::sql` leaves the names out).
fn slave_status(db: &MariaDb) -> anyhow::Result<std::collections::HashMap<String, String>> {
    let out = std::process::Command::new("mariadb")
        .arg("--no-defaults")
        .arg("-uroot")
        .arg(format!("--socket={}", db.socket_path().display()))
        .args(["-B", "-e", "SHOW SLAVE STATUS"])
        .output()
        .context("running the `mariadb` client")?;
    if !out.status.success() {
        bail!("SHOW SLAVE STATUS failed on port {}: {}", db.port(), String::from_utf8_lossy(&out.stderr));
    }
    let text = String::from_utf8(out.stdout).context("`mariadb` output is not UTF-8")?;
    let mut lines = text.lines();
    let (names, values) = (lines.next().unwrap_or_default(), lines.next().unwrap_or_default());
    Ok(names.split('\t').map(String::from).zip(values.split('\t').map(String::from)).collect())
}

/// The server options of member `server_id` of a topology; with `semi_sync`, the primary
/// acknowledges a commit only once a replica has received it (lossless, `AFTER_SYNC`), so a
/// replica promoted after the primary's crash has every acknowledged transaction.
fn member_args(server_id: u32, replica: bool, semi_sync: bool) -> Vec<String> {
    let mut args: Vec<String> = [
        "--log-bin=mariadb-bin",
        "--log-slave-updates",
        "--binlog-format=ROW",
        "--gtid-strict-mode=1",
        // Replicas apply in order; a stopped SQL thread or a delay is what tests set up.
        "--slave-parallel-threads=0",
    ]
    .map(String::from)
    .to_vec();
    args.push(format!("--server-id={server_id}"));
    if replica {
        args.push("--read-only=1".into());
    }
    if semi_sync && replica {
        args.push("--rpl-semi-sync-slave-enabled=1".into());
    } else if semi_sync {
        args.extend(
            ["--rpl-semi-sync-master-enabled=1", "--rpl-semi-sync-master-wait-point=AFTER_SYNC", "--rpl-semi-sync-master-timeout=600000"]
                .map(String::from),
        );
    }
    args
}

impl Replication {
    /// Starts a primary and `replicas` replicas replicating from it (GTID, `slave_pos`), and
    /// waits until each replica's threads run.
    pub fn start(replicas: usize) -> anyhow::Result<Replication> {
        Replication::start_with(replicas, false)
    }

    /// [`start`](Self::start) with semi-synchronous replication: a commit the primary
    /// acknowledged is on a replica too, so failover tests can ask for every acknowledged row.
    pub fn start_semi_sync(replicas: usize) -> anyhow::Result<Replication> {
        Replication::start_with(replicas, true)
    }

    fn start_with(replicas: usize, semi_sync: bool) -> anyhow::Result<Replication> {
        let primary = MariaDb::start_with(MariaDbOptions { extra_args: member_args(1, false, semi_sync), ..Default::default() })
            .context("starting the primary")?;
        let mut t = Replication { primary, replicas: Vec::with_capacity(replicas) };
        for i in 0..replicas {
            let id = 2 + i as u32;
            let replica = MariaDb::start_with(MariaDbOptions { extra_args: member_args(id, true, semi_sync), ..Default::default() })
                .with_context(|| format!("starting replica {i}"))?;
            t.replicas.push(replica);
            t.replicate(i, t.primary.port())?;
        }
        Ok(t)
    }

    /// Points replica `i` at the server on `port` (GTID positions) and starts replicating.
    pub fn replicate(&self, i: usize, port: u16) -> anyhow::Result<()> {
        let r = &self.replicas[i];
        r.sql(&format!(
            "STOP SLAVE; CHANGE MASTER TO MASTER_HOST='127.0.0.1', MASTER_PORT={port}, MASTER_USER='root', \
             MASTER_PASSWORD='', MASTER_USE_GTID=slave_pos, MASTER_CONNECT_RETRY=1; START SLAVE;"
        ))?;
        let deadline = std::time::Instant::now() + SYNC_TIMEOUT;
        loop {
            let status = r.sql("SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS WHERE VARIABLE_NAME = 'SLAVE_RUNNING'")?;
            let io = r.sql("SHOW SLAVE STATUS")?;
            if status.trim() == "ON" && io.contains("\tYes\tYes\t") {
                return Ok(());
            }
            if std::time::Instant::now() > deadline {
                bail!("replica {i} (port {}) did not start replicating from port {port}: {io}", r.port());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The primary's binlog GTID position now (`@@gtid_binlog_pos`).
    pub fn primary_position(&self) -> anyhow::Result<String> {
        Ok(self.primary.sql("SELECT @@gtid_binlog_pos")?.trim().to_string())
    }

    /// Waits until every running replica has applied everything the primary has written.
    pub fn sync(&self) -> anyhow::Result<()> {
        let pos = self.primary_position()?;
        for (i, r) in self.replicas.iter().enumerate() {
            let waited = r.sql(&format!("SELECT MASTER_GTID_WAIT('{pos}', {})", SYNC_TIMEOUT.as_secs()))?;
            if waited.trim() != "0" {
                bail!("replica {i} (port {}) did not reach {pos} within {SYNC_TIMEOUT:?}", r.port());
            }
        }
        Ok(())
    }

    /// Promotes replica `i` as an operator would after losing the primary: stops replicating,
    /// forgets its primary and turns writable. Returns it; the others are not re-pointed
    /// ([`replicate`](Self::replicate) does that).
    pub fn promote(&self, i: usize) -> anyhow::Result<&MariaDb> {
        let r = &self.replicas[i];
        r.sql("STOP SLAVE; RESET SLAVE ALL; SET GLOBAL read_only = 0;")?;
        Ok(r)
    }

    /// Promotes replica `i` after the primary was lost, losing nothing it received: stops
    /// receiving, applies everything already in its relay log (`Gtid_IO_Pos`), then as
    /// [`promote`](Self::promote).
    pub fn promote_after_loss(&self, i: usize) -> anyhow::Result<&MariaDb> {
        let r = &self.replicas[i];
        r.sql("STOP SLAVE IO_THREAD")?;
        let status = slave_status(r)?;
        let received = status.get("Gtid_IO_Pos").with_context(|| format!("no Gtid_IO_Pos in SHOW SLAVE STATUS of port {}", r.port()))?;
        if !received.is_empty() {
            let waited = r.sql(&format!("SELECT MASTER_GTID_WAIT('{received}', {})", SYNC_TIMEOUT.as_secs()))?;
            if waited.trim() != "0" {
                bail!("replica {i} (port {}) did not apply its relay log up to {received}", r.port());
            }
        }
        self.promote(i)
    }
}
