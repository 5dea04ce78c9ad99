//! Statement classification: `first_keyword`, `parse_kill` and `rewrite_connection_id` on
//! arbitrary bytes. A parsed KILL must re-parse from its canonical text; a rewrite must never
//! panic, and when it returns a new text, that text must lex cleanly and keep its first keyword.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_sql::classify::{first_keyword, parse_kill, rewrite_connection_id, KillScope};
use sluice_sql::lexer::{code_tokens, Kind, Lexer};

/// Lexes all of `sql`, checking order and bounds.
fn lex_checked(sql: &[u8]) {
    let mut last = 0;
    for t in Lexer::new(sql) {
        assert!(t.start >= last && t.end > t.start && t.end <= sql.len(), "token {t:?} out of order or bounds in rewritten text");
        let _ = t.text(sql);
        last = t.end;
    }
}

fuzz_target!(|sql: &[u8]| {
    let first = first_keyword(sql);
    match code_tokens(sql).next() {
        Some(t) if t.kind == Kind::Word => assert_eq!(first, t.text(sql)),
        _ => assert!(first.is_empty()),
    }

    if let Some(k) = parse_kill(sql) {
        assert!(first.eq_ignore_ascii_case(b"KILL"));
        let canonical = format!(
            "KILL {}{} {}",
            match k.hard {
                Some(true) => "HARD ",
                Some(false) => "SOFT ",
                None => "",
            },
            match k.scope {
                KillScope::Connection => "CONNECTION",
                KillScope::Query => "QUERY",
            },
            k.id
        );
        assert_eq!(parse_kill(canonical.as_bytes()), Some(k), "{canonical}");
    }

    for id in [0u32, 42, u32::MAX] {
        if let Some(out) = rewrite_connection_id(sql, id) {
            assert_ne!(out, sql, "a rewrite that changed nothing");
            assert!(out.windows(id.to_string().len()).any(|w| w == id.to_string().as_bytes()));
            lex_checked(&out);
            assert_eq!(first_keyword(&out), first, "rewrite changed the first keyword");
            let _ = parse_kill(&out);
        }
    }
});
