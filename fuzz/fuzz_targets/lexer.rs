//! The SQL lexer on arbitrary bytes: it must end, yield non-empty tokens in order and within
//! the text, give each kind the shape its documentation describes, and leave between tokens
//! only whitespace and the delimiters of executable comments (`/*!`, `/*M!`, version digits, `*/`).
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_sql::lexer::{code_tokens, Kind, Lexer};

fn is_word_byte(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_' || c == b'$' || c >= 0x80
}

fuzz_target!(|sql: &[u8]| {
    let mut last = 0;
    let mut count = 0;
    let mut code = Vec::new();
    for t in Lexer::new(sql) {
        count += 1;
        assert!(count <= sql.len(), "more tokens than bytes");
        assert!(
            t.start >= last && t.end > t.start && t.end <= sql.len(),
            "token {t:?} out of order or bounds (previous end {last}, len {})",
            sql.len()
        );
        for &c in &sql[last..t.start] {
            assert!(c.is_ascii_whitespace() || b"/*!M0123456789".contains(&c), "byte {c:#04x} skipped between tokens");
        }
        let text = t.text(sql);
        let shaped = match t.kind {
            Kind::Word => is_word_byte(text[0]),
            Kind::QuotedIdent => text[0] == b'`',
            Kind::String => matches!(text[0], b'\'' | b'"'),
            Kind::Number => text[0].is_ascii_digit() || text[0] == b'.',
            Kind::HexOrBit => {
                text.len() >= 2
                    && (matches!(&text[..2], b"0x" | b"0b") || (matches!(text[0], b'x' | b'X' | b'b' | b'B') && text[1] == b'\''))
            }
            Kind::Variable => text[0] == b'@',
            Kind::Placeholder => text == b"?",
            Kind::Punct => text.len() == 1 && !text[0].is_ascii_whitespace(),
            Kind::Comment => text.starts_with(b"/*") || text.starts_with(b"#") || text.starts_with(b"--"),
        };
        assert!(shaped, "{:?} token {:?}", t.kind, String::from_utf8_lossy(text));
        if t.kind != Kind::Comment {
            code.push(t);
        }
        last = t.end;
    }
    for &c in &sql[last..] {
        assert!(c.is_ascii_whitespace() || b"/*!M0123456789".contains(&c), "byte {c:#04x} skipped after the last token");
    }
    assert!(code_tokens(sql).eq(code.into_iter()));
});
