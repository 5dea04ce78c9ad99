//! ⑤ pool: backend connections. For now one connection per client session, opened at login
//! and kept for the session's life; `backend` connects and authenticates.

pub mod backend;

pub use backend::{connect, Backend, BackendError, ConnectParams, Credential};
