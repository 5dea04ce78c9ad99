//! Test-only helpers for sluice: private MariaDB servers (alone or as a replication topology), TLS test certificates, a Prometheus exposition checker,
//! headless Chromium for page checks.
//!
//! ```no_run
//! let db = sluice_testkit::MariaDb::start()?;
//! assert_eq!(db.sql("SELECT 1")?, "1\n");
//! # Ok::<(), anyhow::Error>(())
//! ```

mod certs;
pub mod chromium;
mod mariadb;
pub mod prometheus;
mod replication;
mod spawner;
mod temp;
mod template;

pub use certs::TestCerts;
pub use mariadb::{shared, MariaDb, MariaDbOptions};
pub use replication::Replication;

/// A TCP port on 127.0.0.1 that was free a moment ago (bind to port 0, read it back, release it).
///
/// Another process may grab it before you use it; [`MariaDb::start`] retries on such races.
/// Panics only if the loopback interface cannot be bound at all.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or_else(|e| panic!("cannot bind a TCP port on 127.0.0.1: {e}"))
}
