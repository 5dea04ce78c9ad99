//! The SQL-injection heuristic: one pass of the SQL lexer over a statement, a few tokens of
//! history, no allocation. It looks for what an injected value leaves in a statement, not for
//! dangerous statements: an application's own SQL rarely has any of it.
//!
//! - **tautology** (`T`): `OR` / `||` / `XOR` followed by a comparison of two literals that is
//!   always true (`OR 1=1`, `OR 'a'='a'`, `OR 2>1`, `OR 'a'<>'b'`), or by a lone true literal at
//!   the end of the statement or before a comment (`OR 1 --`, `OR TRUE`);
//! - **stacked statement** (`S`): a `;` right after a literal compared in a WHERE clause,
//!   followed by a statement that writes or changes the server (`… WHERE id=1; DROP TABLE t`);
//! - **comment tricks** (`C`): a `/*` comment that never ends, or a trailing `--` / `#` comment
//!   that is empty after a literal (`name='admin'--`) or holds a quote (the rest of the original
//!   statement commented out: `name='admin' -- ' AND pass='…'`);
//! - **UNION SELECT in a literal context** (`U`): `UNION [ALL] SELECT` right after a literal of
//!   a WHERE clause, whose select list starts with NULL, a number, a variable or a system
//!   function, or which reads `information_schema` / `mysql.`, or ends in a comment;
//! - **blind probe** (`B`): `OR` / `AND` followed by `SLEEP(` or `BENCHMARK(`.
//!
//! A finding carries a **fingerprint**: its letter, then one character per token from where it
//! was found (`s` string, `1` number, `&` OR/AND, `o` operator, `k` keyword, `n` name, `c`
//! comment, `(`, `)`, `;`, `v` variable). `T&1o1` is `OR 1=1`. The
//! `mysql_firewall_whitelist_sqli_fingerprints` table lists fingerprints not to flag.

use sql::lexer::{Kind, Lexer, Token};

/// The longest fingerprint.
pub const FINGERPRINT_MAX: usize = 8;

/// What the heuristic found: its kind and fingerprint, kept inline (no allocation).
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Finding {
    buf: [u8; FINGERPRINT_MAX],
    len: u8,
}

impl Finding {
    fn new(kind: u8) -> Finding {
        let mut buf = [0; FINGERPRINT_MAX];
        buf[0] = kind;
        Finding { buf, len: 1 }
    }

    fn push(&mut self, class: u8) {
        if usize::from(self.len) < FINGERPRINT_MAX {
            self.buf[usize::from(self.len)] = class;
            self.len += 1;
        }
    }

    /// `T&1o1`: the kind's letter and the token classes.
    pub fn fingerprint(&self) -> &str {
        // Only ASCII is ever pushed.
        std::str::from_utf8(&self.buf[..usize::from(self.len)]).unwrap_or("?")
    }

    /// What the letter means, for messages.
    pub fn kind(&self) -> &'static str {
        match self.buf[0] {
            b'T' => "tautology",
            b'S' => "stacked statement",
            b'C' => "comment trick",
            b'U' => "UNION SELECT after a literal",
            b'B' => "blind probe",
            _ => "pattern",
        }
    }
}

impl std::fmt::Debug for Finding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.fingerprint(), self.kind())
    }
}

/// Words that start a statement a stacked injection would add.
const STACKED: &[&[u8]] = &[
    b"DROP",
    b"DELETE",
    b"UPDATE",
    b"INSERT",
    b"REPLACE",
    b"TRUNCATE",
    b"ALTER",
    b"CREATE",
    b"GRANT",
    b"REVOKE",
    b"SHUTDOWN",
    b"RENAME",
    b"LOAD",
    b"CALL",
    b"HANDLER",
];

/// Select-list starts that show a probe rather than an application's union.
const PROBES: &[&[u8]] = &[
    b"NULL",
    b"USER",
    b"CURRENT_USER",
    b"SYSTEM_USER",
    b"SESSION_USER",
    b"VERSION",
    b"DATABASE",
    b"SCHEMA",
    b"CONCAT",
    b"CONCAT_WS",
    b"GROUP_CONCAT",
    b"LOAD_FILE",
    b"CHAR",
    b"HEX",
];

const KEYWORDS: &[&[u8]] = &[
    b"SELECT",
    b"FROM",
    b"WHERE",
    b"INSERT",
    b"UPDATE",
    b"DELETE",
    b"DROP",
    b"INTO",
    b"VALUES",
    b"SET",
    b"HAVING",
    b"ORDER",
    b"GROUP",
    b"BY",
    b"LIMIT",
    b"ALL",
    b"DISTINCT",
    b"LIKE",
    b"IS",
    b"NULL",
    b"TRUE",
    b"FALSE",
    b"TABLE",
    b"CREATE",
    b"ALTER",
    b"TRUNCATE",
];

fn is_word(text: &[u8], t: &Token, w: &[u8]) -> bool {
    t.kind == Kind::Word && t.text(text).eq_ignore_ascii_case(w)
}

fn is_any(text: &[u8], t: &Token, words: &[&[u8]]) -> bool {
    t.kind == Kind::Word && words.iter().any(|w| t.text(text).eq_ignore_ascii_case(w))
}

fn is_punct(text: &[u8], t: &Token, p: u8) -> bool {
    t.kind == Kind::Punct && t.text(text) == [p]
}

fn is_literal(t: &Token) -> bool {
    matches!(t.kind, Kind::String | Kind::Number | Kind::HexOrBit)
}

/// `OR`, `XOR`, `||` (two `|` tokens: the second is what history holds).
fn is_or(text: &[u8], t: &Token) -> bool {
    is_word(text, t, b"OR") || is_word(text, t, b"XOR") || is_punct(text, t, b'|')
}

fn is_logic(text: &[u8], t: &Token) -> bool {
    is_or(text, t) || is_word(text, t, b"AND") || is_punct(text, t, b'&')
}

/// One character per token class, for fingerprints.
fn class(text: &[u8], t: &Token) -> u8 {
    match t.kind {
        Kind::String => b's',
        Kind::Number | Kind::HexOrBit => b'1',
        Kind::Variable => b'v',
        Kind::Placeholder => b'?',
        Kind::Comment => b'c',
        Kind::QuotedIdent => b'n',
        Kind::Word if is_logic(text, t) || is_word(text, t, b"NOT") => b'&',
        Kind::Word if is_word(text, t, b"UNION") => b'U',
        Kind::Word if is_any(text, t, KEYWORDS) => b'k',
        Kind::Word => b'n',
        Kind::Punct => match t.text(text) {
            [b'('] => b'(',
            [b')'] => b')',
            [b';'] => b';',
            [b','] => b',',
            [b'|' | b'&'] => b'&',
            _ => b'o',
        },
    }
}

/// A string literal's content (quotes off; an introducer is a separate token).
fn string_body(raw: &[u8]) -> &[u8] {
    if raw.len() >= 2 {
        &raw[1..raw.len() - 1]
    } else {
        raw
    }
}

/// A numeric literal's value, when it is a plain number.
fn number(raw: &[u8]) -> Option<f64> {
    std::str::from_utf8(raw).ok()?.parse().ok()
}

/// `a op b` of two literals is always true. `op` is one or two punctuation characters, or LIKE.
fn always_true(text: &[u8], a: &Token, op: &[u8], b: &Token) -> bool {
    let (ra, rb) = (a.text(text), b.text(text));
    let ordering = match (a.kind, b.kind) {
        (Kind::Number, Kind::Number) => number(ra).zip(number(rb)).and_then(|(x, y)| x.partial_cmp(&y)),
        // Server collations are case-insensitive by default: 'a'='A' is true.
        (Kind::String, Kind::String) => {
            let (x, y) = (string_body(ra), string_body(rb));
            Some(if x.eq_ignore_ascii_case(y) { std::cmp::Ordering::Equal } else { x.cmp(y) })
        }
        (Kind::HexOrBit, Kind::HexOrBit) => Some(if ra.eq_ignore_ascii_case(rb) { std::cmp::Ordering::Equal } else { ra.cmp(rb) }),
        _ => None,
    };
    let Some(ord) = ordering else { return false };
    use std::cmp::Ordering::*;
    match op {
        b"=" | b"<=>" | b"LIKE" => ord == Equal,
        b"<>" | b"!=" => ord != Equal,
        b"<" => ord == Less,
        b">" => ord == Greater,
        b"<=" => ord != Greater,
        b">=" => ord != Less,
        _ => false,
    }
}

/// A lone literal that is true on its own: a non-zero number or TRUE.
fn truthy(text: &[u8], t: &Token) -> bool {
    match t.kind {
        Kind::Number => number(t.text(text)).is_some_and(|n| n != 0.0),
        Kind::Word => is_word(text, t, b"TRUE"),
        _ => false,
    }
}

/// The last few code tokens, newest last.
struct History {
    toks: [Option<Token>; 6],
}

impl History {
    fn push(&mut self, t: Token) {
        self.toks.rotate_left(1);
        self.toks[5] = Some(t);
    }

    /// The token `n` back (0: the newest).
    fn back(&self, n: usize) -> Option<&Token> {
        self.toks.get(5usize.checked_sub(n)?)?.as_ref()
    }

    fn clear(&mut self) {
        self.toks = [None; 6];
    }
}

/// A fingerprint from the tokens `from..=to` back in history (`from` ≥ `to`), then `extra`.
fn finding(kind: u8, text: &[u8], hist: &History, from: usize, extra: Option<&Token>) -> Finding {
    let mut f = Finding::new(kind);
    for n in (0..=from).rev() {
        if let Some(t) = hist.back(n) {
            f.push(class(text, t));
        }
    }
    if let Some(t) = extra {
        f.push(class(text, t));
    }
    f
}

/// A union found after its select list's first token: `U` and the token that gave it away.
fn late_union(text: &[u8], t: &Token) -> Finding {
    let mut f = Finding::new(b'U');
    f.push(class(text, t));
    f
}

/// A comparison operator ending at history position 0 (`=`, `<>`, `!=`, `<=`, `>=`, `<=>`,
/// `<`, `>`, LIKE): its text and how many tokens it takes. Adjacent characters only.
fn operator<'a>(text: &'a [u8], hist: &History) -> Option<(&'a [u8], usize)> {
    // LIKE in any case reads as `LIKE`.
    let last = hist.back(0)?;
    if is_word(text, last, b"LIKE") {
        return Some((b"LIKE", 1));
    }
    if last.kind != Kind::Punct || !matches!(last.text(text), [b'=' | b'<' | b'>']) {
        return None;
    }
    let mut start = last.start;
    let mut n = 1;
    while n < 3 {
        match hist.back(n) {
            Some(p) if p.kind == Kind::Punct && p.end == start && matches!(p.text(text), [b'<' | b'>' | b'!' | b'=']) => {
                start = p.start;
                n += 1;
            }
            _ => break,
        }
    }
    Some((&text[start..last.end], n))
}

/// Scans `text`; the first finding, if any.
pub fn scan(text: &[u8]) -> Option<Finding> {
    let mut hist = History { toks: [None; 6] };
    // The current statement has a WHERE / HAVING clause.
    let mut in_where = false;
    // After `UNION [ALL|DISTINCT] SELECT` following a WHERE literal: waiting for the first
    // select-list token (`Some(false)`), then for the rest of the statement (`Some(true)`).
    let mut union: Option<bool> = None;
    // A `;` after a compared literal of a WHERE clause: what starts the next statement decides.
    let mut stacked = false;
    let mut lexer = Lexer::new(text).peekable();
    while let Some(t) = lexer.next() {
        if t.kind == Kind::Comment {
            let raw = t.text(text);
            if raw.starts_with(b"/*") && (raw.len() < 4 || !raw.ends_with(b"*/")) {
                return Some(finding(b'C', text, &hist, 0, Some(&t)));
            }
            let line = raw.starts_with(b"#") || raw.starts_with(b"--");
            let trailing = lexer.peek().is_none();
            if line && trailing {
                let body = raw.strip_prefix(b"#").or_else(|| raw.strip_prefix(b"--")).unwrap_or(raw);
                let empty = body.iter().all(u8::is_ascii_whitespace);
                let after_literal = hist.back(0).is_some_and(is_literal);
                if body.iter().any(|&c| c == b'\'' || c == b'"') || (empty && after_literal) {
                    return Some(finding(b'C', text, &hist, 0, Some(&t)));
                }
            }
            if trailing && union.is_some() {
                return Some(late_union(text, &t));
            }
            if hist.back(1).is_some_and(|o| is_or(text, o)) && hist.back(0).is_some_and(|l| truthy(text, l)) {
                return Some(finding(b'T', text, &hist, 1, Some(&t)));
            }
            continue;
        }
        if stacked {
            stacked = false;
            if is_any(text, &t, STACKED) {
                return Some(finding(b'S', text, &hist, 1, Some(&t)));
            }
        }
        if is_punct(text, &t, b';') {
            if hist.back(1).is_some_and(|o| is_or(text, o)) && hist.back(0).is_some_and(|l| truthy(text, l)) {
                return Some(finding(b'T', text, &hist, 1, Some(&t)));
            }
            stacked = in_where && hist.back(0).is_some_and(is_literal) && operator(text, &{ History { toks: shift(&hist) } }).is_some();
            in_where = false;
            union = None;
            hist.clear();
            hist.push(t);
            continue;
        }
        match union {
            Some(false) => {
                let probe = matches!(t.kind, Kind::Number | Kind::Variable | Kind::String) || is_any(text, &t, PROBES);
                if probe {
                    return Some(finding(b'U', text, &hist, 2, Some(&t)));
                }
                union = Some(true);
            }
            Some(true) if is_word(text, &t, b"INFORMATION_SCHEMA") || is_word(text, &t, b"PERFORMANCE_SCHEMA") => {
                return Some(late_union(text, &t));
            }
            Some(true) if is_word(text, &t, b"mysql") && lexer.peek().is_some_and(|n| is_punct(text, n, b'.')) => {
                return Some(late_union(text, &t));
            }
            _ => {}
        }
        if is_word(text, &t, b"WHERE") || is_word(text, &t, b"HAVING") {
            in_where = true;
        }
        // Tautology: OR <literal> <op> <literal>.
        if is_literal(&t) {
            if let Some((op, n)) = operator(text, &hist) {
                // `OR (1=1)`: one parenthesis may stand between.
                let paren = hist.back(n + 1).is_some_and(|p| is_punct(text, p, b'('));
                let at = n + 1 + usize::from(paren);
                if let (Some(a), Some(or)) = (hist.back(n), hist.back(at)) {
                    if is_literal(a) && is_or(text, or) && always_true(text, a, op, &t) {
                        return Some(finding(b'T', text, &hist, at, Some(&t)));
                    }
                }
            }
        }
        // Blind probe: OR/AND SLEEP( / BENCHMARK(.
        if is_punct(text, &t, b'(') {
            if let (Some(f), Some(l)) = (hist.back(0), hist.back(1)) {
                if (is_word(text, f, b"SLEEP") || is_word(text, f, b"BENCHMARK")) && is_logic(text, l) {
                    return Some(finding(b'B', text, &hist, 1, Some(&t)));
                }
            }
        }
        // UNION [ALL|DISTINCT] SELECT right after a WHERE literal.
        if is_word(text, &t, b"SELECT") && in_where {
            let (u, before) = match hist.back(0) {
                Some(w) if is_word(text, w, b"ALL") || is_word(text, w, b"DISTINCT") => (hist.back(1), hist.back(2)),
                other => (other, hist.back(1)),
            };
            if u.is_some_and(|u| is_word(text, u, b"UNION")) && before.is_some_and(is_literal) {
                union = Some(false);
            }
        }
        hist.push(t);
    }
    if hist.back(1).is_some_and(|o| is_or(text, o)) && hist.back(0).is_some_and(|l| truthy(text, l)) {
        return Some(finding(b'T', text, &hist, 1, None));
    }
    None
}

/// The history one token back (its newest dropped), to look at what came before the newest.
fn shift(hist: &History) -> [Option<Token>; 6] {
    let mut toks = [None; 6];
    toks[1..].copy_from_slice(&hist.toks[..5]);
    toks
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flagged(sql: &str) -> Option<String> {
        scan(sql.as_bytes()).map(|f| f.fingerprint().to_string())
    }

    #[test]
    fn injections_are_found() {
        let cases = [
            ("SELECT * FROM users WHERE id = 1 OR 1=1", "T&1o1"),
            ("SELECT * FROM users WHERE id = 1 or 1 = 1", "T&1o1"),
            ("SELECT * FROM users WHERE name = '' OR 'a'='a'", "T&sos"),
            ("SELECT * FROM users WHERE name = '' OR '1'='1'", "T&sos"),
            ("SELECT * FROM users WHERE name = '' OR 'x'='X'", "T&sos"),
            ("SELECT * FROM users WHERE id = 5 OR 2>1", "T&1o1"),
            ("SELECT * FROM users WHERE id = 5 OR 1<>2", "T&1oo1"),
            ("SELECT * FROM users WHERE id = 5 OR 1!=2", "T&1oo1"),
            ("SELECT * FROM users WHERE id = 5 OR 3>=3", "T&1oo1"),
            ("SELECT * FROM users WHERE id = 5 || 1=1", "T&1o1"),
            ("SELECT * FROM users WHERE id = 5 XOR 1=1", "T&1o1"),
            ("SELECT * FROM users WHERE name = 'a' OR 'b' LIKE 'b'", "T&sks"),
            ("SELECT * FROM users WHERE id = 1 OR 1", "T&1"),
            ("SELECT * FROM users WHERE id = 1 OR TRUE", "T&k"),
            ("SELECT * FROM users WHERE id = 1 OR 1 -- x", "T&1c"),
            ("SELECT * FROM users WHERE id = 1 OR 1=1 -- ", "T&1o1"),
            ("SELECT * FROM users WHERE (id = 1) OR (1=1)", "T&(1o1"),
            ("SELECT * FROM t WHERE id = 1; DROP TABLE t", "S;k"),
            ("SELECT * FROM t WHERE name = 'x'; DELETE FROM t", "S;k"),
            ("SELECT * FROM t WHERE id = 1;UPDATE t SET a=1", "S;k"),
            ("SELECT * FROM t WHERE id = 1; SHUTDOWN", "S;n"),
            ("SELECT * FROM users WHERE name = 'admin'-- ' AND pass = 'x'", "Csc"),
            ("SELECT * FROM users WHERE name = 'admin' # ' AND pass = 'x'", "Csc"),
            ("SELECT * FROM users WHERE name = 'admin'#", "Csc"),
            ("SELECT * FROM users WHERE name = 'admin' -- ", "Csc"),
            ("SELECT * FROM users WHERE id = 1 --", "C1c"),
            ("SELECT * FROM users WHERE id = 1 /*", "C1c"),
            ("SELECT * FROM users WHERE id = 1 /* and pass = 'x'", "C1c"),
            ("SELECT a FROM t WHERE id = 1 UNION SELECT NULL, NULL", "U1Ukk"),
            ("SELECT a FROM t WHERE id = 1 UNION ALL SELECT 1,2,3", "UUkk1"),
            ("SELECT a FROM t WHERE id = '1' UNION SELECT user()", "UsUkn"),
            ("SELECT a FROM t WHERE id = 1 UNION SELECT @@version", "U1Ukv"),
            ("SELECT a, b FROM t WHERE id = 1 UNION SELECT table_name, 2 FROM information_schema.tables", "Un"),
            ("SELECT a FROM t WHERE id = 1 UNION SELECT password FROM mysql.user", "Un"),
            ("SELECT a FROM t WHERE id = 1 UNION SELECT password FROM users -- ", "Uc"),
            ("SELECT a FROM t WHERE name = 'x' UNION DISTINCT SELECT NULL", "UUkkk"),
            ("SELECT * FROM t WHERE id = 1 AND SLEEP(5)", "B&n("),
            ("SELECT * FROM t WHERE id = 1 OR BENCHMARK(1000000, MD5('a'))", "B&n("),
            ("SELECT * FROM t WHERE id = 1 and sleep(5)", "B&n("),
        ];
        for (sql, fp) in cases {
            assert_eq!(flagged(sql).as_deref(), Some(fp), "{sql}");
        }
    }

    #[test]
    fn harmless_statements_pass() {
        let cases = [
            "SELECT 1",
            "SELECT * FROM t WHERE 1=1 AND a = 2",
            "SELECT * FROM t WHERE 1=1",
            "SELECT * FROM t WHERE a = 1 OR b = 2",
            "SELECT * FROM t WHERE a = 1 OR a = 2",
            "SELECT * FROM t WHERE a = 1 OR 1 = 2",
            "SELECT * FROM t WHERE a = 1 OR 'a' = 'b'",
            "SELECT * FROM t WHERE a = 1 OR b = 'x'",
            "SELECT * FROM t WHERE status IN ('a', 'b') OR id > 5",
            "SELECT 1 = 1",
            "SELECT 'a' = 'a'",
            "SELECT a OR b FROM t",
            "SELECT * FROM t WHERE x = 'it''s -- not a comment'",
            "SELECT * FROM t WHERE x = 'a # b'",
            "SELECT '#'",
            "SELECT '/*'",
            "SELECT /* a hint */ 1",
            "SELECT /*+ MAX_EXECUTION_TIME(1000) */ * FROM t",
            "SELECT 1 -- trailing note",
            "SELECT * FROM t WHERE id = 1 -- the first row",
            "SELECT * FROM t # look up all",
            "SELECT 1 UNION SELECT 2",
            "SELECT a FROM t UNION SELECT b FROM u",
            "SELECT a FROM t WHERE x = 1 UNION SELECT b FROM u WHERE y = 2",
            "(SELECT a FROM t WHERE x = 1) UNION (SELECT b FROM u)",
            "INSERT INTO t VALUES ('a'); INSERT INTO t VALUES ('b')",
            "BEGIN; UPDATE t SET a = 1 WHERE id = 2; COMMIT",
            "SELECT 1; SELECT 2",
            "UPDATE t SET a = 1 WHERE id = 2; SELECT ROW_COUNT()",
            "SELECT SLEEP(1)",
            "SELECT BENCHMARK(10, 1)",
            "SELECT c FROM sbtest1 WHERE id=?",
            "SELECT c FROM sbtest1 WHERE id BETWEEN 1 AND 100 ORDER BY c",
            "SELECT DISTINCT c FROM sbtest1 WHERE id BETWEEN 5 AND 104 ORDER BY c",
            "SELECT SUM(k) FROM sbtest1 WHERE id BETWEEN 1 AND 100",
            "UPDATE sbtest1 SET k=k+1 WHERE id=5",
            "UPDATE sbtest1 SET c='12345-67890' WHERE id=5",
            "DELETE FROM sbtest1 WHERE id=5",
            "INSERT INTO sbtest1 (id, k, c, pad) VALUES (5, 4, '1-2-3', '4-5-6')",
            "SET NAMES utf8mb4",
            "SET autocommit=1",
            "SHOW VARIABLES LIKE 'sql_mode'",
            "SELECT @@version_comment LIMIT 1",
            "SELECT * FROM t WHERE name LIKE 'a%' OR name LIKE 'b%'",
            "SELECT * FROM t WHERE a = 'x' OR 'y' = b",
            "SELECT * FROM t WHERE a <=> NULL OR b IS NULL",
            "SELECT * FROM t WHERE d > '2024-01-01' OR d < '2023-01-01'",
            "SELECT CASE WHEN 1=1 THEN 'a' END",
            "CREATE TABLE t (id INT PRIMARY KEY, c VARCHAR(10) DEFAULT '#')",
            "SELECT * FROM t WHERE x = \"double -- quoted\"",
            "SELECT /*!40001 SQL_NO_CACHE */ * FROM t",
            "SELECT * FROM t WHERE a = 1 OR 0",
            "SELECT * FROM t WHERE a = 1 OR FALSE",
            "",
            "   ",
            ";",
            "/* only a comment */",
        ];
        for sql in cases {
            assert_eq!(flagged(sql), None, "{sql}");
        }
    }

    #[test]
    fn fingerprints_are_bounded() {
        let long = format!("SELECT * FROM t WHERE id = 1 OR {}1=1", "(".repeat(100));
        let f = scan(long.as_bytes());
        assert!(f.is_none_or(|f| f.fingerprint().len() <= FINGERPRINT_MAX));
    }
}
