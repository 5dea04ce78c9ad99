//! MySQL wire protocol for sluice: pure functions and state machines, no I/O, fuzzed.
//!
//! Steps ②–⑥ of the data path use it: `frame` cuts the byte stream into packets,
//! `packet` reads and writes the generic OK/ERR/EOF packets, `handshake` and `auth`
//! carry the connection phase, `command` names the command bytes, and `response`
//! follows a backend's reply packet by packet so it can be streamed without decoding rows;
//! `resultset` writes the text result sets sluice answers itself (the admin port).

pub mod auth;
pub mod codec;
pub mod command;
pub mod errors;
pub mod frame;
pub mod handshake;
pub mod packet;
pub mod response;
pub mod resultset;

pub use mysql_common::constants::{CapabilityFlags, StatusFlags};

/// Everything that can be wrong with bytes received from a peer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProtoError {
    #[error("malformed {0} packet")]
    Malformed(&'static str),
    #[error("packet of {size} bytes exceeds the limit of {limit} bytes")]
    TooLarge { size: usize, limit: usize },
    #[error("unexpected packet in {0}")]
    Unexpected(&'static str),
}
