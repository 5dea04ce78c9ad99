//! Statement classification: `first_keyword`, `intercept` and `rewrite_connection_id` on
//! arbitrary bytes. A KILL sluice resolves must re-parse from its canonical text; a rewrite must
//! never panic, and when it returns a new text, that text must lex cleanly and keep its first
//! keyword.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_sql::classify::{first_keyword, intercept, rewrite_connection_id, Intercept, KillScope, KillTarget};
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

    match intercept(sql) {
        Some(Intercept::Kill(k)) => {
            assert!(first.eq_ignore_ascii_case(b"KILL"));
            // Numeric targets re-parse from their canonical text.
            let target = match &k.target {
                KillTarget::Id(id) => Some(id.to_string()),
                KillTarget::QueryId(id) => Some(format!("ID {id}")),
                _ => None,
            };
            if let Some(target) = target {
                let canonical = format!(
                    "KILL {}{} {target}",
                    match k.hard {
                        Some(true) => "HARD ",
                        Some(false) => "SOFT ",
                        None => "",
                    },
                    match k.scope {
                        KillScope::Connection => "CONNECTION",
                        KillScope::Query => "QUERY",
                    },
                );
                assert_eq!(intercept(canonical.as_bytes()), Some(Intercept::Kill(k)), "{canonical}");
            }
        }
        Some(Intercept::Processlist { .. }) => assert!(first.eq_ignore_ascii_case(b"SHOW")),
        _ => {}
    }

    for id in [0u32, 42, u32::MAX] {
        if let Some(out) = rewrite_connection_id(sql, id) {
            assert_ne!(out, sql, "a rewrite that changed nothing");
            assert!(out.windows(id.to_string().len()).any(|w| w == id.to_string().as_bytes()));
            lex_checked(&out);
            assert_eq!(first_keyword(&out), first, "rewrite changed the first keyword");
            let _ = intercept(&out);
        }
    }
});
