//! SQL text for sluice, without building an AST on the hot path: a hand-written MySQL lexer
//! (`lexer`), the statement facts the session needs (`classify`), what a statement may do to
//! session state for multiplexing (`effects`) and query digests for rules and statistics
//! (`digest`), with a per-worker memo of recent statement shapes' digests (`memo`), whether a
//! statement is a read a replica may answer (`rw`) and its routing hint (`hint`).

pub mod classify;
pub mod digest;
pub mod effects;
pub mod hint;
mod keywords;
pub mod lexer;
pub mod memo;
pub mod rw;
pub mod tables;
