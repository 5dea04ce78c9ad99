//! SQL text for sluice, without building an AST on the hot path: a hand-written MySQL lexer
//! (`lexer`), the statement facts the session needs (`classify`) and query digests for rules
//! and statistics (`digest`).

pub mod classify;
pub mod digest;
mod keywords;
pub mod lexer;
