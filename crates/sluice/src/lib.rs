//! sluice: a MySQL/MariaDB-protocol proxy. The data path, in six steps:
//! ① `listener` → ② `session` → (`plan`: ③ `rules` → ④ `route`) → ⑤ `pool` → ⑥ `exec`;
//! beside it `config`, `users`, `throttle`, `registry`, `monitor` (its findings in `health`), `tls`,
//! `net`; the side paths `admin` (SQL port), `http`, `stats` and `querylog`.
//!
//! Three handles, no god object: `datapath::DataPath` (what sessions read: the config snapshot,
//! pools, registry, statistics), `control::Control` (reloads, ports, worker count; used by
//! `admin` and SIGHUP) and `server::Runtime` (workers, shutdown). The data path imports nothing
//! from the control side, and the modules form no import cycle (`tests/module_cycles.rs`).

pub mod accounts;
pub mod admin;
pub mod cache;
pub mod config;
pub mod control;
pub mod datapath;
pub mod exec;
pub mod firewall;
pub mod health;
pub mod http;
mod lenient;
pub mod limits;
pub mod listener;
pub mod mirror;
pub mod monitor;
pub mod net;
pub mod plan;
pub mod pool;
pub mod probe;
pub mod querylog;
pub mod registry;
pub mod route;
pub mod rules;
pub mod server;
pub mod session;
pub mod shard;
pub mod shard_expr;
pub mod snapshot;
pub mod stats;
pub mod throttle;
pub mod tls;
pub mod users;
pub mod xa_recovery;

pub use config::Config;
pub use server::Server;
