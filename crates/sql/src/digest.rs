//! Query digests, part of step ③ (rules) input: the digest text and its 64-bit id, which rules
//! match on and statistics group by. Literals become `?`, literal lists fold, comments go,
//! keywords are upper-cased and spacing is canonical, so statements that differ only in values,
//! comments, spacing or keyword case share a digest.
//!
//! Rules the text follows (one pass over the lexer's tokens, no allocation except `out`):
//! - strings, numbers, hex/bit literals and `?` are `?`; adjacent strings (`'a' 'b'`) are one
//!   literal; charset introducers (`_utf8mb4'x'`, `_latin1 X'41'`, `N'x'`) go with theirs;
//! - a `+`/`-` is a sign, and goes with its number, after nothing, an operator, `(`, `,`, `;` or a
//!   reserved keyword (`id = -5` ≡ `id = 5`; `a - 5` stays `a - ?`);
//! - `IN (…)`, `VALUES (…)`, `VALUE (…)` holding only literals become `(?,...)`, and so do the
//!   further literal rows of VALUES; a list with NULL or any expression is not folded;
//! - comments and optimizer hints go; executable comments (`/*! … */`) are code;
//! - keywords (see `keywords`) are upper case, other words and `quoted` names stay as written,
//!   and a word right after or before `.` is a name, never a keyword;
//! - tokens are one space apart, except: none before `,` `)` `.` `;`, none after `(` `.`, none
//!   between a function name and its `(` (`COUNT(*)`, `f(x)`), but one between a keyword and `(`
//!   (`IN (`, `VALUES (`) and between a table name and its column list (`INTO t (a, b)`);
//!   operators written as adjacent characters are one token (`<=`, `<=>`, `->>`, `:=`, …);
//! - leading and trailing `;` go; the text stops, at a token boundary, at `MAX_DIGEST_LEN`.

use std::ops::Range;

use crate::keywords::{self, FN, FOLD, NAME, OP, ROWS};
use crate::lexer::{Kind, Lexer, Token};

/// Digest of one statement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Digest {
    /// 64-bit id: xxh3-64 of the digest text bytes.
    pub id: u64,
    /// Byte range in the original sql of the first comment's inner text (between `/*` and `*/`,
    /// or after `#` / `-- ` to the end of the line): routing hints live there
    /// (`/* hostgroup=2 */`). Executable comments are code and optimizer hints (`/*+ … */`)
    /// are the server's, so neither counts.
    pub first_comment: Option<Range<usize>>,
}

/// Longest digest text produced; longer statements are cut at a token boundary (ProxySQL's
/// `query_digests_max_digest_length` default).
pub const MAX_DIGEST_LEN: usize = 2048;

/// Writes the digest text of `sql` into `out` (cleared first) and returns its id. Never panics,
/// any bytes accepted. No allocation except growing `out`.
pub fn digest_into(sql: &[u8], out: &mut Vec<u8>) -> Digest {
    out.clear();
    let mut code = Code { lexer: Lexer::new(sql), sql, comment: None };
    let mut w = Writer::new(out);
    let mut next = code.next();
    while let Some(t) = next {
        if w.full {
            break;
        }
        next = code.next();
        let text = t.text(sql);
        match t.kind {
            Kind::Word => {
                let is_name = w.after_dot() || next.is_some_and(|n| is_punct(sql, n, b'.'));
                if !is_name {
                    if next.is_some_and(|n| matches!(n.kind, Kind::String | Kind::HexOrBit) && is_introducer(sql, t, n)) {
                        // The literal that follows stands for both.
                        continue;
                    }
                    if let Some(kw) = keywords::lookup_in(sql, t.start, t.end) {
                        let flags = kw.flags;
                        if flags & FOLD != 0 && next.is_some_and(|n| is_punct(sql, n, b'(')) {
                            let mut list = code.clone();
                            if scan_list(&mut list) {
                                if flags & ROWS != 0 {
                                    fold_rows(&mut list);
                                }
                                code = list;
                                next = code.next();
                                w.put(kw.text().as_bytes(), Space::Normal, 0);
                                w.put(b"(?,...)", Space::Open, 0);
                                continue;
                            }
                        }
                        if kw.len <= 8 {
                            w.put_short(kw.head, kw.len, Space::Normal, keyword_after(flags));
                        } else {
                            w.put(kw.text().as_bytes(), Space::Normal, keyword_after(flags));
                        }
                        continue;
                    }
                }
                if text.len() <= 8 {
                    w.put_short(keywords::load(sql, t.start, t.end, 0), text.len(), Space::Normal, CALL | KEEP_NAME);
                } else {
                    w.put(text, Space::Normal, CALL | KEEP_NAME);
                }
            }
            Kind::QuotedIdent => w.put(text, Space::Normal, CALL | KEEP_NAME),
            Kind::String => {
                while next.is_some_and(|n| n.kind == Kind::String) {
                    next = code.next();
                }
                w.put(b"?", Space::Normal, 0);
            }
            Kind::Number | Kind::HexOrBit | Kind::Placeholder => w.put(b"?", Space::Normal, 0),
            Kind::Variable => w.put(text, Space::Normal, 0),
            Kind::Punct => {
                let c = text.first().copied().unwrap_or(0);
                match c {
                    b';' => w.semis += 1,
                    b'(' => w.put(b"(", Space::Open, GLUE | UNARY),
                    b')' => w.put(b")", Space::Tight, 0),
                    b',' => w.put(b",", Space::Tight, UNARY),
                    b'.' => w.put(b".", Space::Tight, GLUE | KEEP_NAME | DOT),
                    // The sign is part of the number that follows, which becomes `?`.
                    b'-' | b'+' if w.unary() && next.is_some_and(|n| n.kind == Kind::Number) => {}
                    _ => {
                        let mut end = t.end;
                        if let Some(n) = next.filter(|n| n.kind == Kind::Punct && n.start == end) {
                            let c2 = sql.get(n.start).copied().unwrap_or(0);
                            if glues(c, c2) {
                                end = n.end;
                                next = code.next();
                                // `<=>` and `->>`.
                                if (c, c2) == (b'<', b'=') || (c, c2) == (b'-', b'>') {
                                    if let Some(n) = next.filter(|n| n.start == end && is_punct(sql, *n, b'>')) {
                                        end = n.end;
                                        next = code.next();
                                    }
                                }
                            }
                        }
                        // At most 3 bytes.
                        w.put_short(keywords::load(sql, t.start, end, 0), end - t.start, Space::Normal, UNARY);
                    }
                }
            }
            // `Code` never yields comments.
            Kind::Comment => {}
        }
    }
    if w.full {
        // The first comment may lie past the cut.
        while code.comment.is_none() && code.next().is_some() {}
    }
    Digest { id: xxhash_rust::xxh3::xxh3_64(out), first_comment: code.comment.map(|(a, b)| a..b) }
}

/// Convenience for tests and tools: the digest text as a String (lossy) and the Digest.
pub fn digest(sql: &str) -> (String, Digest) {
    let mut out = Vec::with_capacity(sql.len().min(MAX_DIGEST_LEN));
    let d = digest_into(sql.as_bytes(), &mut out);
    (String::from_utf8_lossy(&out).into_owned(), d)
}

/// Formats an id the way ProxySQL shows digests: `0x` + 16 upper-case hex digits.
pub fn format_id(id: u64) -> String {
    format!("0x{id:016X}")
}

/// Parses `0x…` hex (case-insensitive, 1–16 digits) or a decimal u64.
pub fn parse_id(s: &str) -> Option<u64> {
    let b = s.as_bytes();
    if b.len() > 2 && b[0] == b'0' && (b[1] | 0x20) == b'x' {
        let hex = &s[2..];
        // from_str_radix alone would accept a leading `+`.
        if hex.len() > 16 || !hex.bytes().all(|c| c.is_ascii_hexdigit()) {
            return None;
        }
        return u64::from_str_radix(hex, 16).ok();
    }
    if b.is_empty() || !b.iter().all(u8::is_ascii_digit) {
        return None;
    }
    s.parse().ok()
}

/// The lexer without comments; it remembers the first ordinary comment it passes. Cloned to
/// look ahead over a literal list, and kept only when the list folds.
#[derive(Clone)]
struct Code<'a> {
    lexer: Lexer<'a>,
    sql: &'a [u8],
    comment: Option<(usize, usize)>,
}

impl Code<'_> {
    // Always inlined (into the main loop and into `scan_list`): a token returned through
    // memory stalls on store forwarding.
    #[inline(always)]
    fn next(&mut self) -> Option<Token> {
        loop {
            let t = self.lexer.next()?;
            if t.kind != Kind::Comment {
                return Some(t);
            }
            if self.comment.is_none() {
                self.comment = comment_inner(self.sql, t);
            }
        }
    }
}

/// The inner text of a comment token, `None` for an optimizer hint.
fn comment_inner(sql: &[u8], t: Token) -> Option<(usize, usize)> {
    let text = sql.get(t.start..t.end)?;
    if text.starts_with(b"/*") {
        if text.get(2) == Some(&b'+') {
            return None;
        }
        let end = if text.len() >= 4 && text.ends_with(b"*/") { t.end - 2 } else { t.end };
        return Some((t.start + 2, end));
    }
    // `# …` or `-- …` up to the newline (the lexer includes it in the token).
    let mut end = t.end;
    for strip in [b'\n', b'\r'] {
        if end > t.start && sql.get(end - 1) == Some(&strip) {
            end -= 1;
        }
    }
    let skip = if text.first() == Some(&b'#') { 1 } else { 3 };
    Some(((t.start + skip).min(end), end))
}

fn is_punct(sql: &[u8], t: Token, c: u8) -> bool {
    t.kind == Kind::Punct && sql.get(t.start) == Some(&c)
}

/// Two adjacent operator characters that MySQL reads as one operator.
fn glues(a: u8, b: u8) -> bool {
    matches!(
        (a, b),
        (b'<', b'=')
            | (b'>', b'=')
            | (b'<', b'>')
            | (b'!', b'=')
            | (b':', b'=')
            | (b'|', b'|')
            | (b'&', b'&')
            | (b'<', b'<')
            | (b'>', b'>')
            | (b'-', b'>')
    )
}

/// Character sets a `_name` introducer may name (MySQL 8 and MariaDB 10.11).
const CHARSETS: &[&[u8]] = &[
    b"armscii8",
    b"ascii",
    b"big5",
    b"binary",
    b"cp1250",
    b"cp1251",
    b"cp1256",
    b"cp1257",
    b"cp850",
    b"cp852",
    b"cp866",
    b"cp932",
    b"dec8",
    b"eucjpms",
    b"euckr",
    b"gb18030",
    b"gb2312",
    b"gbk",
    b"geostd8",
    b"greek",
    b"hebrew",
    b"hp8",
    b"keybcs2",
    b"koi8r",
    b"koi8u",
    b"latin1",
    b"latin2",
    b"latin5",
    b"latin7",
    b"macce",
    b"macroman",
    b"sjis",
    b"swe7",
    b"tis620",
    b"ucs2",
    b"ujis",
    b"utf16",
    b"utf16le",
    b"utf32",
    b"utf8",
    b"utf8mb3",
    b"utf8mb4",
];

/// `word` introduces the literal `lit`: `_charset` before a string or hex/bit literal, or
/// `N`/`n` written right against a string (`N 'x'` is a column and an alias).
fn is_introducer(sql: &[u8], word: Token, lit: Token) -> bool {
    if !matches!(lit.kind, Kind::String | Kind::HexOrBit) {
        return false;
    }
    match word.text(sql) {
        [b'N' | b'n'] => lit.kind == Kind::String && lit.start == word.end,
        [b'_', name @ ..] => CHARSETS.iter().any(|c| name.eq_ignore_ascii_case(c)),
        _ => false,
    }
}

/// Consumes one literal starting with `t` (sign, introducer and string continuation included)
/// and returns the token after it; `None` if `t` does not start a literal.
#[inline(always)]
fn skip_literal(code: &mut Code, mut t: Token) -> Option<Option<Token>> {
    let sql = code.sql;
    match t.kind {
        Kind::Punct if is_punct(sql, t, b'-') || is_punct(sql, t, b'+') => {
            return (code.next()?.kind == Kind::Number).then(|| code.next());
        }
        Kind::Word => {
            let lit = code.next()?;
            if !is_introducer(sql, t, lit) {
                return None;
            }
            t = lit;
        }
        _ => {}
    }
    match t.kind {
        Kind::Number | Kind::HexOrBit | Kind::Placeholder => Some(code.next()),
        Kind::String => {
            let mut n = code.next();
            while n.is_some_and(|s| s.kind == Kind::String) {
                n = code.next();
            }
            Some(n)
        }
        _ => None,
    }
}

/// After a `(`: `literal (, literal)* )` and nothing else. Not inlined: one more copy of the
/// lexer is enough.
#[inline(never)]
fn scan_list(code: &mut Code) -> bool {
    loop {
        let Some(t) = code.next() else { return false };
        match skip_literal(code, t) {
            Some(Some(p)) if is_punct(code.sql, p, b',') => {}
            Some(Some(p)) => return is_punct(code.sql, p, b')'),
            _ => return false,
        }
    }
}

/// After a folded VALUES list: absorbs the `, (literals)` rows that follow.
fn fold_rows(code: &mut Code) {
    loop {
        let mut row = code.clone();
        let sql = code.sql;
        if row.next().is_some_and(|t| is_punct(sql, t, b',')) && row.next().is_some_and(|t| is_punct(sql, t, b'(')) && scan_list(&mut row) {
            *code = row;
        } else {
            return;
        }
    }
}

// What a written token means for the next one.
/// No space after it (`(`, `.`).
const GLUE: u8 = 1;
/// A `(` right after it is a call: no space (function names, names).
const CALL: u8 = 2;
/// A `+`/`-` after it is a sign.
const UNARY: u8 = 4;
/// Starts a table-name position (INTO, TABLE, …); in `Writer::state`, inside one.
const SET_NAME: u8 = 8;
/// Continues a table-name position (a name, `.`).
const KEEP_NAME: u8 = 16;
/// It is a `.`: the next word is a name.
const DOT: u8 = 32;

fn keyword_after(flags: u8) -> u8 {
    let mut after = 0;
    if flags & OP != 0 {
        after |= UNARY;
    }
    if flags & FN != 0 {
        after |= CALL;
    }
    if flags & NAME != 0 {
        after |= SET_NAME;
    }
    after
}

/// How a token spaces against the one before.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Space {
    /// One space, unless the previous token glues.
    Normal,
    /// Never a space: `,` `)` `.` `;`.
    Tight,
    /// `(` and folded lists: no space after a call name.
    Open,
}

struct Writer<'o> {
    out: &'o mut Vec<u8>,
    /// What the previous token means for the next one: GLUE, CALL, UNARY, DOT and SET_NAME
    /// (inside a table-name position, after INTO, TABLE, …). One byte: this loop is hot and
    /// short of registers.
    state: u8,
    /// `;` seen but not written: written only when a token follows (trailing ones are dropped).
    semis: usize,
    /// MAX_DIGEST_LEN reached: nothing more is written.
    full: bool,
}

impl<'o> Writer<'o> {
    fn new(out: &'o mut Vec<u8>) -> Self {
        Writer { out, state: GLUE | UNARY, semis: 0, full: false }
    }

    #[inline(always)]
    fn unary(&self) -> bool {
        self.state & UNARY != 0 || self.semis > 0
    }

    #[inline(always)]
    fn after_dot(&self) -> bool {
        self.state & DOT != 0
    }

    #[inline(always)]
    fn put(&mut self, bytes: &[u8], space: Space, after: u8) {
        if let Some(sep) = self.begin(bytes.len(), space) {
            if sep {
                self.out.push(b' ');
            }
            self.out.extend_from_slice(bytes);
            self.end(after);
        }
    }

    /// Writes `n` ≤ 8 bytes held little-endian in `x`, with the space before them when it fits
    /// in the same word: one 8-byte store, then the length cut back, instead of a push and a
    /// memcpy call for a few bytes.
    #[inline(always)]
    fn put_short(&mut self, x: u64, n: usize, space: Space, after: u8) {
        if let Some(sep) = self.begin(n, space) {
            let (x, n) = match sep {
                true if n < 8 => ((x << 8) | u64::from(b' '), n + 1),
                true => {
                    self.out.push(b' ');
                    (x, n)
                }
                false => (x, n),
            };
            let len = self.out.len();
            self.out.extend_from_slice(&x.to_le_bytes());
            self.out.truncate(len + n.min(8));
            self.end(after);
        }
    }

    /// Room for a token of `n` bytes: writes the pending `;` and says whether a space goes
    /// before the token; `None` (and the text marked full) when it does not fit. (Every write
    /// checks the room itself; `full` only stops the main loop.)
    #[inline(always)]
    fn begin(&mut self, n: usize, space: Space) -> Option<bool> {
        let mut state = self.state;
        let mut semis = 0;
        // Leading `;` are dropped like trailing ones.
        if self.semis > 0 && !self.out.is_empty() {
            semis = self.semis;
            state = 0;
        }
        let sep = state & GLUE == 0
            && match space {
                Space::Normal => true,
                Space::Tight => false,
                Space::Open => state & CALL == 0,
            };
        if self.out.len() + semis + usize::from(sep) + n > MAX_DIGEST_LEN {
            self.full = true;
            return None;
        }
        if semis > 0 {
            self.out.resize(self.out.len() + semis, b';');
            self.state = 0;
        }
        self.semis = 0;
        Some(sep)
    }

    #[inline(always)]
    fn end(&mut self, after: u8) {
        // A name in a table-name position is followed by a column list, not called.
        let in_name = after & KEEP_NAME != 0 && self.state & SET_NAME != 0;
        let state = after & (GLUE | CALL | UNARY | DOT | SET_NAME);
        self.state = if in_name { (state & !CALL) | SET_NAME } else { state };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn text(sql: &str) -> String {
        digest(sql).0
    }

    #[track_caller]
    fn check(sql: &str, want: &str) {
        let (got, d) = digest(sql);
        assert_eq!(got, want, "digest of {sql:?}");
        assert_eq!(d.id, xxhash_rust::xxh3::xxh3_64(want.as_bytes()));
    }

    #[test]
    fn brief_examples() {
        check("select * from t where id=1", "SELECT * FROM t WHERE id = ?");
        assert_eq!(digest("SELECT  *  FROM t WHERE id = 42 -- x").1.id, digest("select * from t where id=1").1.id);
        check("SELECT  *  FROM t WHERE id = 42 -- x", "SELECT * FROM t WHERE id = ?");
        let sql = "/* 000 */ select 'test' from dual";
        let (t, d) = digest(sql);
        assert_eq!(t, "SELECT ? FROM DUAL");
        assert_eq!(d.first_comment, Some(2..7));
        assert_eq!(&sql[2..7], " 000 ");
        check("select * from t where a in (1, 2,3) and b = 'x'", "SELECT * FROM t WHERE a IN (?,...) AND b = ?");
        check("INSERT INTO t (a,b) VALUES (1,'a'),(2,'b')", "INSERT INTO t (a, b) VALUES (?,...)");
        check("select count(*) from t where x<=-1.5e3", "SELECT COUNT(*) FROM t WHERE x <= ?");
        check("SELECT _utf8mb4'a' , X'41', 0x41, b'1'", "SELECT ?, ?, ?, ?");
    }

    #[test]
    fn literals() {
        check("SELECT 'it''s', \"q\\\"\", 'a\\'b'", "SELECT ?, ?, ?");
        check("SELECT 'a' 'b' \"c\", 'd'", "SELECT ?, ?");
        check("SELECT 1, 1.5, .5, 1e10, 1.5e-3, 2E+4, 18446744073709551616", "SELECT ?, ?, ?, ?, ?, ?, ?");
        check("SELECT X'4142', x'', 0x1f, 0XZZ, B'101', 0b11", "SELECT ?, ?, ?, 0XZZ, ?, ?");
        check("SELECT ?, ? + 1", "SELECT ?, ? + ?");
        check("SELECT _latin1 X'41', _binary'x', _UTF8MB4 'y', N'z', n'w'", "SELECT ?, ?, ?, ?, ?");
        // Not introducers: an unknown `_word`, `N` apart from its string.
        check("SELECT _nope 'x', N 'x'", "SELECT _nope ?, N ?");
        check("SELECT DATE '2020-01-01', TIMESTAMP'2020-01-01 00:00:00'", "SELECT DATE ?, TIMESTAMP ?");
    }

    #[test]
    fn signs() {
        assert_eq!(text("SELECT * FROM t WHERE id = -5"), text("SELECT * FROM t WHERE id = 5"));
        check("SELECT a - 5, a-5, a+-5, -5, +5, - -5", "SELECT a - ?, a - ?, a + ?, ?, ?, - ?");
        check("SELECT 1 - 2", "SELECT ? - ?");
        check("SELECT (-1), f(-1, +2)", "SELECT (?), f(?, ?)");
        check("SELECT * FROM t LIMIT -1", "SELECT * FROM t LIMIT ?");
        check("SELECT CASE WHEN a THEN -1 ELSE -2 END - 3", "SELECT CASE WHEN a THEN ? ELSE ? END - ?");
        check(
            "SELECT NULL - 1, TRUE + 1, x.y - 1, @v - 1, `q` - 1, count(*) - 1",
            "SELECT NULL - ?, TRUE + ?, x.y - ?, @v - ?, `q` - ?, COUNT(*) - ?",
        );
        check("SELECT a MOD -2, a DIV -2", "SELECT a MOD ?, a DIV ?");
        check("SELECT 1; -1", "SELECT ?; ?");
        // Not before a number: kept as an operator.
        check("SELECT -a, - 'x'", "SELECT - a, - ?");
    }

    #[test]
    fn lists_fold() {
        check("SELECT * FROM t WHERE a IN (1)", "SELECT * FROM t WHERE a IN (?,...)");
        assert_eq!(text("SELECT * FROM t WHERE a IN (1)"), text("select * from t where a in (1,2,3,-4,'x',?,0x1,_utf8mb4'y' 'z')"));
        check("SELECT * FROM t WHERE a NOT IN(1,2) AND b IN (3)", "SELECT * FROM t WHERE a NOT IN (?,...) AND b IN (?,...)");
        // NULL and expressions stop the fold; their literals are still `?`.
        check("SELECT * FROM t WHERE a IN (1, NULL)", "SELECT * FROM t WHERE a IN (?, NULL)");
        check("SELECT * FROM t WHERE a IN (1, 2+3)", "SELECT * FROM t WHERE a IN (?, ? + ?)");
        check("SELECT * FROM t WHERE a IN (SELECT b FROM u WHERE c = 1)", "SELECT * FROM t WHERE a IN (SELECT b FROM u WHERE c = ?)");
        check("SELECT * FROM t WHERE (a, b) IN ((1, 2), (3, 4))", "SELECT * FROM t WHERE (a, b) IN ((?, ?), (?, ?))");
        check("SELECT * FROM t WHERE a IN ()", "SELECT * FROM t WHERE a IN ()");
        check("SELECT * FROM t WHERE a IN (1,)", "SELECT * FROM t WHERE a IN (?,)");
        check("SELECT * FROM t WHERE a IN (1", "SELECT * FROM t WHERE a IN (?");
        check("INSERT INTO t VALUES (1, 'a'), (2, 'b'), (3, 'c');", "INSERT INTO t VALUES (?,...)");
        check("INSERT INTO t VALUE (1)", "INSERT INTO t VALUE (?,...)");
        assert_eq!(text("INSERT INTO t VALUES (1)"), text("INSERT INTO t VALUES (1,2),(3,4),(5,6)"));
        // A row that is not all literals ends the folding; the rest stays as written.
        check("INSERT INTO t VALUES (1), (2), (NOW()), (3)", "INSERT INTO t VALUES (?,...), (NOW()), (?)");
        check(
            "INSERT INTO t (a) VALUES (1) ON DUPLICATE KEY UPDATE a = VALUES(a) + 1",
            "INSERT INTO t (a) VALUES (?,...) ON DUPLICATE KEY UPDATE a = VALUES (a) + ?",
        );
        // IN takes one list only.
        check("SELECT * FROM t WHERE a IN (1), (2)", "SELECT * FROM t WHERE a IN (?,...), (?)");
    }

    #[test]
    fn comments() {
        check("SELECT 1 -- c\n + 2 # d\n /* e */ + /*+ hint */ 3", "SELECT ? + ? + ?");
        check("/* only */ -- comments\n# here", "");
        check("   ", "");
        check("", "");
        check(";;", "");
        assert_eq!(digest("/* only */").1.id, xxhash_rust::xxh3::xxh3_64(b""));
        check("/*!40101 SET NAMES utf8 */", "SET NAMES utf8");
        check("SELECT /*!50100 SQL_NO_CACHE */ 1 /*M!100100 , 2 */", "SELECT SQL_NO_CACHE ?, ?");
        check("SELECT 1 /* unterminated", "SELECT ?");
        check("SELECT 1--2", "SELECT ? - ?");
    }

    #[test]
    fn first_comment_ranges() {
        let fc = |sql: &str| digest(sql).1.first_comment.map(|r| sql[r].to_string());
        assert_eq!(fc("SELECT 1"), None);
        assert_eq!(fc("SELECT 1 /* hostgroup=2 */"), Some(" hostgroup=2 ".into()));
        assert_eq!(fc("SELECT 1 -- hostgroup=2\nFROM t"), Some("hostgroup=2".into()));
        assert_eq!(fc("SELECT 1 -- a\r\n"), Some("a".into()));
        assert_eq!(fc("SELECT 1 #x=1"), Some("x=1".into()));
        assert_eq!(fc("SELECT 1 --"), Some("".into()));
        assert_eq!(fc("SELECT 1 --\n"), Some("".into()));
        assert_eq!(fc("SELECT 1 /**/ /* b */"), Some("".into()));
        assert_eq!(fc("SELECT 1 /* open"), Some(" open".into()));
        assert_eq!(fc("SELECT 1 /*/"), Some("/".into()));
        // Executable comments are code, hints are the server's: the next comment counts.
        assert_eq!(fc("/*!40101 SET x=1 */ /*+ BKA(t) */ /* a */ /* b */"), Some(" a ".into()));
        // Inside a folded list, and past the length cut.
        assert_eq!(fc("SELECT * FROM t WHERE a IN (1 /* in */, 2)"), Some(" in ".into()));
        let long = format!("SELECT {} /* late */", "a, ".repeat(1000) + "a");
        assert_eq!(fc(&long), Some(" late ".into()));
    }

    #[test]
    fn spacing_and_operators() {
        check("SELECT a.b, `t`.`c`, t . c, t.* FROM db.t", "SELECT a.b, `t`.`c`, t.c, t.* FROM db.t");
        check("SELECT f(x),NOW( ),COUNT( DISTINCT a ) FROM t", "SELECT f(x), NOW(), COUNT(DISTINCT a) FROM t");
        check(
            "SELECT a<=b, a>=b, a<>b, a!=b, a<=>b, a:=b, a||b, a&&b, a<<b, a>>b, a->'$.x', a->>'$.x'",
            "SELECT a <= b, a >= b, a <> b, a != b, a <=> b, a := b, a || b, a && b, a << b, a >> b, a -> ?, a ->> ?",
        );
        // Apart in the source, apart in the digest.
        check("SELECT a < = b, a - > b", "SELECT a < = b, a - > b");
        check(
            "SELECT a<b, a>b, !a, ~a, a%b, a^b, a|b, a&b, a*b, a/b",
            "SELECT a < b, a > b, ! a, ~ a, a % b, a ^ b, a | b, a & b, a * b, a / b",
        );
        check("SELECT 1; SELECT 2;", "SELECT ?; SELECT ?");
        check(" ; SELECT 1 ;; ", "SELECT ?");
        check("SELECT 1;;SELECT 2", "SELECT ?;; SELECT ?");
        check(
            "CREATE TABLE t(id INT(11) PRIMARY KEY, b VARCHAR(255), KEY k(b))",
            "CREATE TABLE t (id INT(?) PRIMARY KEY, b VARCHAR(?), KEY k (b))",
        );
        check("INSERT INTO db.t(a) SELECT REPLACE(a, 'x', 'y') FROM u", "INSERT INTO db.t (a) SELECT REPLACE(a, ?, ?) FROM u");
        check(
            "SELECT * FROM t WHERE EXISTS(SELECT 1) AND a IN(SELECT b FROM u)",
            "SELECT * FROM t WHERE EXISTS (SELECT ?) AND a IN (SELECT b FROM u)",
        );
        check("select @x, @@session.sql_mode, @'q y', @`z` := 1", "SELECT @x, @@session.sql_mode, @'q y', @`z` := ?");
    }

    #[test]
    fn keyword_case() {
        check("select Id, `Select`, t.select, order.x from T", "SELECT Id, `Select`, t.select, order.x FROM T");
        check("Begin; CoMmIt; rollback", "BEGIN; COMMIT; ROLLBACK");
        check("SELECT x FROM t FOR UPDATE", "SELECT x FROM t FOR UPDATE");
        check("select * from t lock in share mode", "SELECT * FROM t LOCK IN SHARE MODE");
        check("start transaction read only", "START TRANSACTION READ ONLY");
        check("select sysdate(), length(a), Length(a)", "SELECT SYSDATE(), length(a), Length(a)");
        check("SELECT é, ÉTÉ FROM t", "SELECT é, ÉTÉ FROM t");
    }

    #[test]
    fn length_cap() {
        let long = format!("SELECT {} FROM t", "abcdefg + ".repeat(500) + "z");
        let (t, d) = digest(&long);
        assert!(t.len() <= MAX_DIGEST_LEN && t.len() > MAX_DIGEST_LEN - 12, "{}", t.len());
        assert!(t.ends_with("abcdefg") || t.ends_with('+'), "cut inside a token: {}", &t[t.len() - 20..]);
        assert_eq!(d.id, xxhash_rust::xxh3::xxh3_64(t.as_bytes()));
        // Statements that differ only past the cut share the digest.
        assert_eq!(d, digest(&format!("{long} WHERE x = 1")).1);
        // One token longer than the cap: nothing of it.
        check(&format!("SELECT {}", "a".repeat(3000)), "SELECT");
        let semis = format!("SELECT 1{}", ";".repeat(5000)) + " SELECT 2";
        assert_eq!(text(&semis), "SELECT ?");
    }

    #[test]
    fn reuses_a_dirty_buffer() {
        let mut out = b"garbage".to_vec();
        let d = digest_into(b"SELECT 1", &mut out);
        assert_eq!(out, b"SELECT ?");
        assert_eq!(d.id, digest("select 2").1.id);
    }

    #[test]
    fn non_utf8_bytes() {
        let mut out = Vec::new();
        digest_into(b"SELECT \xff\xfe FROM t WHERE a = '\xff'", &mut out);
        assert_eq!(out, b"SELECT \xff\xfe FROM t WHERE a = ?");
    }

    #[test]
    fn ids() {
        assert_eq!(format_id(0xC6A2_A0AA_0AF1_4133), "0xC6A2A0AA0AF14133");
        assert_eq!(format_id(1), "0x0000000000000001");
        assert_eq!(parse_id("0xC6A2A0AA0AF14133"), Some(0xC6A2_A0AA_0AF1_4133));
        assert_eq!(parse_id("0Xc6a2a0aa0af14133"), Some(0xC6A2_A0AA_0AF1_4133));
        assert_eq!(parse_id("0x1"), Some(1));
        assert_eq!(parse_id("18446744073709551615"), Some(u64::MAX));
        assert_eq!(parse_id("0"), Some(0));
        for bad in ["", "0x", "0x12345678901234567", "0x+1", "+1", "-1", "18446744073709551616", "0xg", " 1", "1 ", "x1"] {
            assert_eq!(parse_id(bad), None, "{bad:?}");
        }
        for id in [0, 1, 42, u64::MAX, 0xdead_beef] {
            assert_eq!(parse_id(&format_id(id)), Some(id));
            assert_eq!(parse_id(&id.to_string()), Some(id));
        }
    }

    // ---- properties over statements built from a small grammar ----

    /// One token of a generated statement.
    #[derive(Clone, Debug)]
    enum G {
        Kw(&'static str),
        Id(&'static str),
        /// A literal slot: filled from LITERALS.
        Lit,
        P(&'static str),
    }
    use G::*;

    const IDENTS: &[&str] = &["a", "b", "col_1", "Tbl", "x1", "`my col`", "t.c", "`T`.`Select`"];
    const LITERALS: &[&str] = &[
        "1",
        "42",
        "-7",
        "+3",
        "1.5e-3",
        ".5",
        "1e10",
        "0x1F",
        "X'AB'",
        "b'01'",
        "0b101",
        "'x'",
        "'it''s'",
        "\"a\\\"b\"",
        "'a' 'b'",
        "_utf8mb4'x'",
        "_latin1 X'41'",
        "N'x'",
        "?",
        "18446744073709551616",
    ];
    /// Separators between tokens. `""` is used only beside `(`, `)` and `,`.
    const SEPS: &[&str] = &[" ", "  ", "\n", "\t \r\n", " /* c */ ", "/*x*/", " -- c\n", "#c\n", "/*!*/", ""];
    const CMP: &[&str] = &["=", "<=", ">=", "<>", "!=", "<=>", "<", ">"];

    fn ident() -> impl Strategy<Value = G> {
        proptest::sample::select(IDENTS).prop_map(Id)
    }

    fn cond_atom() -> impl Strategy<Value = Vec<G>> {
        prop_oneof![
            (ident(), proptest::sample::select(CMP)).prop_map(|(i, op)| vec![i, P(op), Lit]),
            (ident(), 1..5usize).prop_map(|(i, n)| {
                let mut v = vec![i, Kw("IN"), P("("), Lit];
                for _ in 1..n {
                    v.extend([P(","), Lit]);
                }
                v.push(P(")"));
                v
            }),
            (ident(), any::<bool>()).prop_map(|(i, not)| {
                let mut v = vec![i];
                if not {
                    v.push(Kw("NOT"));
                }
                v.extend([Kw("BETWEEN"), Lit, Kw("AND"), Lit]);
                v
            }),
            (ident(), any::<bool>()).prop_map(|(i, not)| {
                let mut v = vec![i, Kw("IS")];
                if not {
                    v.push(Kw("NOT"));
                }
                v.push(Kw("NULL"));
                v
            }),
            ident().prop_map(|i| vec![i, Kw("LIKE"), Lit]),
            (ident(), proptest::sample::select(&["+", "-", "*"][..])).prop_map(|(i, op)| vec![i, P(op), Lit, P(">"), Lit]),
            (ident(), ident()).prop_map(|(a, b)| vec![a, P("="), b]),
            Just(vec![Kw("COUNT"), P("("), P("*"), P(")"), P(">"), Lit]),
            ident().prop_map(|i| vec![i, P("="), Id("@x")]),
        ]
    }

    fn cond() -> impl Strategy<Value = Vec<G>> {
        (proptest::collection::vec((cond_atom(), any::<bool>(), any::<bool>()), 1..4)).prop_map(|atoms| {
            let mut v = Vec::new();
            for (i, (atom, or, paren)) in atoms.into_iter().enumerate() {
                if i > 0 {
                    v.push(Kw(if or { "OR" } else { "AND" }));
                }
                if paren {
                    v.push(P("("));
                }
                v.extend(atom);
                if paren {
                    v.push(P(")"));
                }
            }
            v
        })
    }

    fn statement() -> impl Strategy<Value = Vec<G>> {
        let select = (0..3usize, ident(), proptest::option::of(cond()), proptest::option::of((ident(), 0..3usize)), any::<bool>())
            .prop_map(|(cols, from, whr, order, limit)| {
                let mut v = vec![Kw("SELECT")];
                match cols {
                    0 => v.push(P("*")),
                    1 => v.extend([Id("a"), P(","), Id("t.c"), P(","), Lit]),
                    _ => v.extend([Kw("COUNT"), P("("), P("*"), P(")")]),
                }
                v.extend([Kw("FROM"), from]);
                if let Some(c) = whr {
                    v.push(Kw("WHERE"));
                    v.extend(c);
                }
                if let Some((col, dir)) = order {
                    v.extend([Kw("ORDER"), Kw("BY"), col]);
                    match dir {
                        0 => {}
                        1 => v.push(Kw("ASC")),
                        _ => v.push(Kw("DESC")),
                    }
                }
                if limit {
                    v.extend([Kw("LIMIT"), Lit]);
                }
                v
            });
        let insert = (ident(), 1..4usize).prop_map(|(t, rows)| {
            let mut v = vec![Kw("INSERT"), Kw("INTO"), t, P("("), Id("a"), P(","), Id("b"), P(")"), Kw("VALUES")];
            for r in 0..rows {
                if r > 0 {
                    v.push(P(","));
                }
                v.extend([P("("), Lit, P(","), Lit, P(")")]);
            }
            v
        });
        let update = (ident(), ident(), cond()).prop_map(|(t, c, w)| {
            let mut v = vec![Kw("UPDATE"), t, Kw("SET"), c, P("="), Lit, Kw("WHERE")];
            v.extend(w);
            v
        });
        let delete = (ident(), cond()).prop_map(|(t, w)| {
            let mut v = vec![Kw("DELETE"), Kw("FROM"), t, Kw("WHERE")];
            v.extend(w);
            v
        });
        (prop_oneof![select, insert, update, delete], any::<bool>()).prop_map(|(mut v, semi)| {
            if semi {
                v.push(P(";"));
            }
            v
        })
    }

    /// Writes a statement: `lits`, `seps` and `case` are cycled through (empty: the plain choice).
    fn render(stmt: &[G], lits: &[usize], seps: &[usize], case: &[bool]) -> String {
        let mut s = String::new();
        let (mut li, mut ki) = (0, 0);
        for (i, g) in stmt.iter().enumerate() {
            if i > 0 {
                let tight = |g: &G| matches!(g, P("(" | ")" | ","));
                let mut sep = SEPS[seps.get(i % seps.len().max(1)).copied().unwrap_or(0) % SEPS.len()];
                if sep.is_empty() && !(tight(g) || tight(&stmt[i - 1])) {
                    sep = " ";
                }
                s.push_str(sep);
            }
            match g {
                Kw(k) => {
                    for (j, c) in k.chars().enumerate() {
                        let lower = case.get((ki + j) % case.len().max(1)).copied().unwrap_or(false);
                        s.push(if lower { c.to_ascii_lowercase() } else { c });
                    }
                    ki += k.len();
                }
                Id(x) | P(x) => s.push_str(x),
                Lit => {
                    s.push_str(LITERALS[lits.get(li % lits.len().max(1)).copied().unwrap_or(0) % LITERALS.len()]);
                    li += 1;
                }
            }
        }
        s
    }

    #[test]
    fn grammar_words_are_what_the_properties_assume() {
        for w in [
            "IN", "NOT", "BETWEEN", "AND", "OR", "IS", "NULL", "LIKE", "COUNT", "SELECT", "FROM", "WHERE", "ORDER", "BY", "ASC", "DESC",
            "LIMIT",
        ] {
            assert!(keywords::lookup(w.as_bytes()).is_some(), "{w}");
        }
        for w in ["INSERT", "INTO", "VALUES", "UPDATE", "SET", "DELETE"] {
            assert!(keywords::lookup(w.as_bytes()).is_some(), "{w}");
        }
        for w in ["a", "b", "col_1", "Tbl", "x1", "t", "c"] {
            assert!(keywords::lookup(w.as_bytes()).is_none(), "{w}");
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

        #[test]
        fn never_panics_and_stays_short(b in proptest::collection::vec(any::<u8>(), 0..3000)) {
            let mut out = Vec::new();
            let d = digest_into(&b, &mut out);
            prop_assert!(out.len() <= MAX_DIGEST_LEN);
            prop_assert_eq!(d.id, xxhash_rust::xxh3::xxh3_64(&out));
            if let Some(r) = d.first_comment {
                prop_assert!(r.start <= r.end && r.end <= b.len());
            }
        }

        #[test]
        fn sql_like_bytes(b in proptest::collection::vec(proptest::sample::select(&b"  \n'\"`\\/*-+#!M(),.;=<>|&:@?0123456789abexXbBnN_eE"[..]), 0..3000)) {
            let mut out = Vec::new();
            let d = digest_into(&b, &mut out);
            prop_assert!(out.len() <= MAX_DIGEST_LEN);
            // (Its end may be a space or `;`: the inside of an unterminated `name`.)
            prop_assert!(!out.starts_with(b" "));
            prop_assert_eq!(d.id, xxhash_rust::xxh3::xxh3_64(&out));
            if let Some(r) = d.first_comment {
                prop_assert!(r.start <= r.end && r.end <= b.len());
            }
        }

        #[test]
        fn whitespace_and_comments_do_not_matter(stmt in statement(), seps in proptest::collection::vec(0..SEPS.len(), 1..40)) {
            let plain = render(&stmt, &[], &[], &[]);
            let spaced = render(&stmt, &[], &seps, &[]);
            prop_assert_eq!(digest(&plain).0, digest(&spaced).0, "{:?} vs {:?}", plain, spaced);
            prop_assert_eq!(digest(&plain).1.id, digest(&spaced).1.id);
        }

        #[test]
        fn literal_values_do_not_matter(stmt in statement(), lits in proptest::collection::vec(0..LITERALS.len(), 1..20)) {
            let plain = render(&stmt, &[], &[], &[]);
            let other = render(&stmt, &lits, &[], &[]);
            prop_assert_eq!(digest(&plain).0, digest(&other).0, "{:?} vs {:?}", plain, other);
        }

        #[test]
        fn keyword_case_does_not_matter(stmt in statement(), case in proptest::collection::vec(any::<bool>(), 1..20)) {
            let plain = render(&stmt, &[], &[], &[]);
            let cased = render(&stmt, &[], &[], &case);
            prop_assert_eq!(digest(&plain).0, digest(&cased).0, "{:?} vs {:?}", plain, cased);
        }

        /// The memo (`crate::memo`) gives every statement the digest `digest_into` gives it:
        /// a shape seen again with other literals, and the same statement with one byte
        /// changed anywhere (which may or may not still fit the template).
        #[test]
        fn memo_agrees_with_digest(
            stmt in statement(),
            lits in proptest::collection::vec(proptest::collection::vec(0..LITERALS.len(), 1..20), 1..6),
            seps in proptest::collection::vec(0..SEPS.len(), 1..40),
            edits in proptest::collection::vec((any::<usize>(), proptest::sample::select(&b" '\"`/*-+#0123456789.eExX,()"[..])), 0..8),
        ) {
            let mut memo = crate::memo::DigestMemo::new();
            let mut out = Vec::new();
            for l in &lits {
                let sql = render(&stmt, l, &seps, &[]);
                let mut variants = vec![sql.clone().into_bytes()];
                for &(at, b) in &edits {
                    let mut v = sql.clone().into_bytes();
                    let i = at % (v.len() + 1);
                    if at % 2 == 0 && i < v.len() { v[i] = b } else { v.insert(i, b) }
                    variants.push(v);
                }
                for v in variants.iter().chain(&variants) {
                    let got = memo.digest(v, &mut out);
                    let mut want_text = Vec::new();
                    let want = digest_into(v, &mut want_text);
                    prop_assert_eq!(&out, &want_text, "{:?}", String::from_utf8_lossy(v));
                    prop_assert_eq!(got, want, "{:?}", String::from_utf8_lossy(v));
                }
            }
        }

        /// The same on SQL-like bytes: a short text, then copies with a few bytes changed,
        /// each twice, so templates are built from garbage and tried on garbage.
        #[test]
        fn memo_agrees_on_sql_like_bytes(
            base in proptest::collection::vec(proptest::sample::select(&b" '\"`\\/*-+#!M(),.;=<>@?0123456789abexXbBnN_eE"[..]), 0..60),
            edits in proptest::collection::vec((any::<usize>(), proptest::sample::select(&b" '\"`\\/*-+#!(.0123456789eExXbN_"[..])), 1..24),
        ) {
            let mut memo = crate::memo::DigestMemo::new();
            let (mut out, mut want_text) = (Vec::new(), Vec::new());
            let mut texts = vec![base.clone(), base.clone()];
            for (k, &(at, b)) in edits.iter().enumerate() {
                let mut v = if k % 3 == 0 { base.clone() } else { texts.last().cloned().unwrap_or_default() };
                let i = at % (v.len() + 1);
                if at % 3 == 0 && i < v.len() { v[i] = b } else if at % 3 == 1 || i == v.len() { v.insert(i, b) } else { v.remove(i); }
                texts.push(v.clone());
                texts.push(v);
            }
            for t in &texts {
                let got = memo.digest(t, &mut out);
                let want = digest_into(t, &mut want_text);
                prop_assert_eq!(&out, &want_text, "{:?}", String::from_utf8_lossy(t));
                prop_assert_eq!(got, want, "{:?}", String::from_utf8_lossy(t));
            }
        }

        #[test]
        fn all_at_once(
            stmt in statement(),
            lits in proptest::collection::vec(0..LITERALS.len(), 1..20),
            seps in proptest::collection::vec(0..SEPS.len(), 1..40),
            case in proptest::collection::vec(any::<bool>(), 1..20),
        ) {
            let plain = render(&stmt, &[], &[], &[]);
            let varied = render(&stmt, &lits, &seps, &case);
            let (a, b) = (digest(&plain), digest(&varied));
            prop_assert_eq!((a.0, a.1.id), (b.0, b.1.id), "{:?} vs {:?}", plain, varied);
        }
    }
}
