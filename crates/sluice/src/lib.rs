//! sluice: a MySQL/MariaDB-protocol proxy. The data path, in six steps:
//! ① `listener` → ② `session` → ③ `rules` → ④ `route` → ⑤ `pool` → ⑥ `exec`;
//! beside it `server` (workers, start/stop), `config`, `users`, `registry`, `monitor`, `stats`, `tls`, `net`.

pub mod config;
pub mod exec;
pub mod listener;
pub mod monitor;
pub mod net;
pub mod pool;
pub mod registry;
pub mod route;
pub mod rules;
pub mod server;
pub mod session;
pub mod stats;
pub mod tls;
pub mod users;

pub use config::Config;
pub use server::Server;
