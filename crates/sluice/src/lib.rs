//! sluice: a MySQL/MariaDB-protocol proxy. The data path, in six steps:
//! ① `listener` → ② `session` → ③ `rules` → ④ `route` → ⑤ `pool` → ⑥ `exec`;
//! beside it `server` (workers, start/stop), `config`, `reload`, `users`, `throttle`, `registry`,
//! `monitor`, `tls`, `net`; the side paths `admin` (SQL port), `http`, `stats` and `querylog`.

pub mod admin;
pub mod config;
pub mod exec;
pub mod http;
pub mod listener;
pub mod monitor;
pub mod net;
pub mod pool;
pub mod querylog;
pub mod registry;
pub mod reload;
pub mod route;
pub mod rules;
pub mod server;
pub mod session;
pub mod stats;
pub mod throttle;
pub mod tls;
pub mod users;

pub use config::Config;
pub use server::Server;
