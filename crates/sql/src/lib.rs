//! SQL text for sluice, without building an AST on the hot path: a hand-written MySQL lexer
//! (`lexer`) and the statement facts the session needs (`classify`).

pub mod classify;
pub mod lexer;
