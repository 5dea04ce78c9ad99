//! A MySQL/MariaDB lexer over bytes: yields token kinds and byte ranges, never allocates and
//! never fails (malformed input ends in a token that runs to the end of the text).
//!
//! Executable comments (`/*! … */`, `/*!50100 … */`, `/*M! … */`) are code to the server, so
//! their content is lexed as ordinary tokens; other comments are one `Comment` token.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Identifier or keyword.
    Word,
    /// `identifier` in backticks.
    QuotedIdent,
    /// '…' or "…" (with an optional `_charset` introducer lexed as a separate Word).
    String,
    /// Integer or decimal, with exponent.
    Number,
    /// X'…', 0x…, B'…', 0b….
    HexOrBit,
    /// @var, @'var', @@var, @@session.var.
    Variable,
    /// ? placeholder.
    Placeholder,
    /// Any other single character (operators, parentheses, commas, semicolons).
    Punct,
    Comment,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Token {
    pub kind: Kind,
    pub start: usize,
    pub end: usize,
}

impl Token {
    pub fn text<'a>(&self, sql: &'a [u8]) -> &'a [u8] {
        &sql[self.start..self.end]
    }
}

// Clone: the digest looks ahead over a literal list on a copy and keeps it only if the list folds.
#[derive(Clone)]
pub struct Lexer<'a> {
    sql: &'a [u8],
    pos: usize,
    /// Inside an executable comment: its closing `*/` is skipped silently.
    in_exec_comment: bool,
}

impl<'a> Lexer<'a> {
    pub fn new(sql: &'a [u8]) -> Self {
        Lexer { sql, pos: 0, in_exec_comment: false }
    }

    /// Lexes from `pos` on, outside any executable comment (the digest memo re-reads one
    /// literal in place).
    pub(crate) fn at(sql: &'a [u8], pos: usize) -> Self {
        Lexer { sql, pos, in_exec_comment: false }
    }
}

// Byte classes, one table load per byte: the lexer is most of the digest's time.
const WS: u8 = 1;
const WORD: u8 = 2;
const DIGIT: u8 = 4;
const ALNUM: u8 = 8;
/// Digits and `.` (numbers).
const NUM: u8 = 16;
/// Word bytes and `.` (`@@session.x`).
const VAR: u8 = 32;
/// Starts a plain word: a word byte that is not a digit and not `x X b B` (which may start
/// `X'…'`).
const WORD_START: u8 = 64;

pub(crate) const fn is_word_byte(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_' || c == b'$' || c >= 0x80
}

static CLASS: [u8; 256] = {
    let mut t = [0u8; 256];
    let mut i = 0;
    while i < 256 {
        let c = i as u8;
        if c.is_ascii_whitespace() {
            t[i] |= WS;
        }
        if is_word_byte(c) {
            t[i] |= WORD | VAR;
        }
        if c.is_ascii_digit() {
            t[i] |= DIGIT | NUM;
        }
        if c.is_ascii_alphanumeric() {
            t[i] |= ALNUM;
        }
        if c == b'.' {
            t[i] |= NUM | VAR;
        }
        if is_word_byte(c) && !c.is_ascii_digit() && !matches!(c, b'x' | b'X' | b'b' | b'B') {
            t[i] |= WORD_START;
        }
        i += 1;
    }
    t
};

#[inline]
fn is(c: u8, class: u8) -> bool {
    CLASS[c as usize] & class != 0
}

/// The byte at `i`, 0 past the end (0 is in no class and matches no delimiter).
#[inline]
fn at(sql: &[u8], i: usize) -> u8 {
    sql.get(i).copied().unwrap_or(0)
}

/// The first position from `pos` whose byte is not in `class`.
#[inline]
fn skip_class(sql: &[u8], pos: usize, class: u8) -> usize {
    match sql.get(pos..) {
        Some(rest) => pos + rest.iter().position(|&c| !is(c, class)).unwrap_or(rest.len()),
        None => sql.len(),
    }
}

/// `pos` is just after the opening quote. Backslash escapes apply to ' and " strings; a doubled
/// quote is an escaped quote in every kind. Unterminated: the end of the text.
fn skip_quoted(sql: &[u8], mut pos: usize, quote: u8) -> usize {
    loop {
        let Some(rest) = sql.get(pos..) else { return sql.len() };
        let hit = if quote == b'`' { memchr::memchr(quote, rest) } else { memchr::memchr2(quote, b'\\', rest) };
        let Some(i) = hit else { return sql.len() };
        pos += i;
        if sql[pos] == b'\\' || at(sql, pos + 1) == quote {
            pos += 2;
        } else {
            return pos + 1;
        }
    }
}

/// Just after the `*/` that closes the comment whose text starts at `pos`, or the end of the
/// text. (memchr for `*` then a look at the next byte: `memmem::find` builds a searcher per
/// call.)
fn comment_end(sql: &[u8], mut pos: usize) -> usize {
    // Most comments are short: a plain look at their first bytes costs less than a memchr call.
    let near = sql.len().min(pos + 24);
    while pos < near {
        if sql[pos] == b'*' && at(sql, pos + 1) == b'/' {
            return pos + 2;
        }
        pos += 1;
    }
    while let Some(i) = sql.get(pos..).and_then(|rest| memchr::memchr(b'*', rest)) {
        pos += i + 1;
        if at(sql, pos) == b'/' {
            return pos + 1;
        }
    }
    sql.len()
}

const ONES: u64 = 0x0101_0101_0101_0101;
pub(crate) const HIGH: u64 = 0x8080_8080_8080_8080;

/// High bit of each byte of `y` (all bytes below 0x80) that lies in `lo..=hi`.
#[inline(always)]
pub(crate) fn in_range(y: u64, lo: u8, hi: u8) -> u64 {
    (y + (0x80 - u64::from(lo)) * ONES) & !(y + (0x7f - u64::from(hi)) * ONES) & HIGH
}

/// High bit of each byte of `y` (all bytes below 0x80) equal to `c`.
#[inline(always)]
pub(crate) fn equal(y: u64, c: u8) -> u64 {
    !((y ^ (u64::from(c) * ONES)) + 0x7f * ONES) & HIGH
}

/// High bit of each byte of `x` that is a word byte (`is_word_byte`), eight at a time.
#[inline(always)]
pub(crate) fn word_bytes(x: u64) -> u64 {
    let y = x & !HIGH;
    (x & HIGH) | in_range(y, b'0', b'9') | in_range(y | 0x2020_2020_2020_2020, b'a', b'z') | equal(y, b'_') | equal(y, b'$')
}

/// The end of the word starting at `pos` (word bytes: `is_word_byte`). Eight bytes at a time
/// while the text lasts (SWAR): no per-byte loop and no mispredicted exit per word.
#[inline(always)]
fn skip_word(sql: &[u8], mut pos: usize) -> usize {
    while let Some(b) = sql.get(pos..pos + 8).and_then(|b| b.first_chunk::<8>()) {
        let stop = !word_bytes(u64::from_le_bytes(*b)) & HIGH;
        if stop != 0 {
            return pos + (stop.trailing_zeros() / 8) as usize;
        }
        pos += 8;
    }
    skip_class(sql, pos, WORD)
}

fn skip_line(sql: &[u8], pos: usize) -> usize {
    match memchr::memchr(b'\n', &sql[pos..]) {
        Some(p) => pos + p + 1,
        None => sql.len(),
    }
}

fn skip_number(sql: &[u8], pos: usize) -> usize {
    let pos = skip_class(sql, pos, NUM);
    if matches!(at(sql, pos), b'e' | b'E') {
        let mut p = pos + 1;
        if matches!(at(sql, p), b'+' | b'-') {
            p += 1;
        }
        if is(at(sql, p), DIGIT) {
            return skip_class(sql, p, DIGIT);
        }
    }
    pos
}

impl Iterator for Lexer<'_> {
    type Item = Token;

    // Inlined so the token comes back in registers: returned through memory it cost the digest
    // a store-forwarding stall per token.
    #[inline(always)]
    fn next(&mut self) -> Option<Token> {
        let sql = self.sql;
        let mut pos = self.pos;
        loop {
            // Usually one space: a plain loop that leaves the first byte of the token in hand.
            let mut c = at(sql, pos);
            while is(c, WS) {
                pos += 1;
                c = at(sql, pos);
            }
            if pos >= sql.len() {
                self.pos = pos;
                return None;
            }
            let start = pos;
            // Most tokens are words: tested first, before the dispatch on the byte.
            if is(c, WORD_START) {
                pos = skip_word(sql, pos + 1);
                self.pos = pos;
                return Some(Token { kind: Kind::Word, start, end: pos });
            }
            let c1 = at(sql, pos + 1);
            let kind = match c {
                b'*' if c1 == b'/' && self.in_exec_comment => {
                    pos += 2;
                    self.in_exec_comment = false;
                    continue;
                }
                b'/' if c1 == b'*' => {
                    let c2 = at(sql, pos + 2);
                    let exec = c2 == b'!' || (c2 == b'M' && at(sql, pos + 3) == b'!');
                    if exec && !self.in_exec_comment {
                        pos = skip_class(sql, pos + if c2 == b'M' { 4 } else { 3 }, DIGIT);
                        self.in_exec_comment = true;
                        continue;
                    }
                    pos = comment_end(sql, pos + 2);
                    Kind::Comment
                }
                b'#' => {
                    pos = skip_line(sql, pos);
                    Kind::Comment
                }
                b'-' if c1 == b'-' && (is(at(sql, pos + 2), WS) || pos + 2 == sql.len()) => {
                    pos = skip_line(sql, pos);
                    Kind::Comment
                }
                b'\'' | b'"' => {
                    pos = skip_quoted(sql, pos + 1, c);
                    Kind::String
                }
                b'`' => {
                    pos = skip_quoted(sql, pos + 1, b'`');
                    Kind::QuotedIdent
                }
                b'?' => {
                    pos += 1;
                    Kind::Placeholder
                }
                b'@' => {
                    pos += if c1 == b'@' { 2 } else { 1 };
                    pos = match at(sql, pos) {
                        q @ (b'\'' | b'"' | b'`') => skip_quoted(sql, pos + 1, q),
                        _ => skip_class(sql, pos, VAR),
                    };
                    Kind::Variable
                }
                b'0' if (c1 == b'x' || c1 == b'b') && is(at(sql, pos + 2), ALNUM) => {
                    pos = skip_class(sql, pos + 2, ALNUM);
                    Kind::HexOrBit
                }
                b'x' | b'X' | b'b' | b'B' if c1 == b'\'' => {
                    pos = skip_quoted(sql, pos + 2, b'\'');
                    Kind::HexOrBit
                }
                b'0'..=b'9' => {
                    pos = skip_number(sql, pos);
                    // 1abc is an identifier in MySQL.
                    if is(at(sql, pos), WORD) && !sql[start..pos].contains(&b'.') {
                        pos = skip_word(sql, pos);
                        Kind::Word
                    } else {
                        Kind::Number
                    }
                }
                b'.' if c1.is_ascii_digit() => {
                    pos = skip_number(sql, pos);
                    Kind::Number
                }
                c if is(c, WORD) => {
                    pos = skip_word(sql, pos);
                    Kind::Word
                }
                _ => {
                    pos += 1;
                    Kind::Punct
                }
            };
            self.pos = pos;
            return Some(Token { kind, start, end: pos });
        }
    }
}

/// Tokens that matter to the server: comments dropped.
pub fn code_tokens(sql: &[u8]) -> impl Iterator<Item = Token> + '_ {
    Lexer::new(sql).filter(|t| t.kind != Kind::Comment)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn kinds(sql: &str) -> Vec<(Kind, &str)> {
        Lexer::new(sql.as_bytes()).map(|t| (t.kind, &sql[t.start..t.end])).collect()
    }

    #[test]
    fn basic_statement() {
        use Kind::*;
        assert_eq!(
            kinds("SELECT `a``b`, 'it''s', \"q\\\"\", 1.5e-3, 0x1F, X'AB', @x, @@session.y, ? FROM t -- c\n# d\n/* e */;"),
            vec![
                (Word, "SELECT"),
                (QuotedIdent, "`a``b`"),
                (Punct, ","),
                (String, "'it''s'"),
                (Punct, ","),
                (String, "\"q\\\"\""),
                (Punct, ","),
                (Number, "1.5e-3"),
                (Punct, ","),
                (HexOrBit, "0x1F"),
                (Punct, ","),
                (HexOrBit, "X'AB'"),
                (Punct, ","),
                (Variable, "@x"),
                (Punct, ","),
                (Variable, "@@session.y"),
                (Punct, ","),
                (Placeholder, "?"),
                (Word, "FROM"),
                (Word, "t"),
                (Comment, "-- c\n"),
                (Comment, "# d\n"),
                (Comment, "/* e */"),
                (Punct, ";"),
            ]
        );
    }

    #[test]
    fn executable_comments_are_code() {
        use Kind::*;
        assert_eq!(kinds("/*!40101 SET x=1 */"), vec![(Word, "SET"), (Word, "x"), (Punct, "="), (Number, "1")]);
        assert_eq!(kinds("/*M! KILL 5*/"), vec![(Word, "KILL"), (Number, "5")]);
    }

    #[test]
    fn unterminated_things_end_at_the_end() {
        assert_eq!(kinds("'abc").len(), 1);
        assert_eq!(kinds("/* abc").len(), 1);
        assert_eq!(kinds("`abc").len(), 1);
        assert_eq!(kinds("a--b"), vec![(Kind::Word, "a"), (Kind::Punct, "-"), (Kind::Punct, "-"), (Kind::Word, "b")]);
    }

    /// The first, plain implementation: the fast one must yield exactly its tokens.
    mod reference {
        use super::super::{Kind, Token};

        pub struct RefLexer<'a> {
            sql: &'a [u8],
            pos: usize,
            /// Inside an executable comment: its closing `*/` is skipped silently.
            in_exec_comment: bool,
        }

        impl<'a> RefLexer<'a> {
            pub fn new(sql: &'a [u8]) -> Self {
                RefLexer { sql, pos: 0, in_exec_comment: false }
            }

            fn peek(&self, off: usize) -> u8 {
                self.sql.get(self.pos + off).copied().unwrap_or(0)
            }

            fn skip_quoted(&mut self, quote: u8) {
                // pos is just after the opening quote. Backslash escapes apply to ' and " strings;
                // a doubled quote is an escaped quote in every kind.
                let backslash = quote != b'`';
                while self.pos < self.sql.len() {
                    let c = self.sql[self.pos];
                    if backslash && c == b'\\' {
                        self.pos += 2;
                    } else if c == quote {
                        if self.peek(1) == quote {
                            self.pos += 2;
                        } else {
                            self.pos += 1;
                            return;
                        }
                    } else {
                        self.pos += 1;
                    }
                }
                self.pos = self.sql.len();
            }
        }

        fn ref_is_word_byte(c: u8) -> bool {
            c.is_ascii_alphanumeric() || c == b'_' || c == b'$' || c >= 0x80
        }

        impl Iterator for RefLexer<'_> {
            type Item = Token;

            fn next(&mut self) -> Option<Token> {
                loop {
                    while self.pos < self.sql.len() && self.sql[self.pos].is_ascii_whitespace() {
                        self.pos += 1;
                    }
                    if self.pos >= self.sql.len() {
                        return None;
                    }
                    let start = self.pos;
                    let c = self.sql[self.pos];
                    let c1 = self.peek(1);
                    let kind = match c {
                        b'*' if c1 == b'/' && self.in_exec_comment => {
                            self.pos += 2;
                            self.in_exec_comment = false;
                            continue;
                        }
                        b'/' if c1 == b'*' => {
                            let exec = self.peek(2) == b'!' || (self.peek(2) == b'M' && self.peek(3) == b'!');
                            if exec && !self.in_exec_comment {
                                self.pos += if self.peek(2) == b'M' { 4 } else { 3 };
                                while self.pos < self.sql.len() && self.sql[self.pos].is_ascii_digit() {
                                    self.pos += 1;
                                }
                                self.in_exec_comment = true;
                                continue;
                            }
                            match self.sql[self.pos + 2..].windows(2).position(|w| w == b"*/") {
                                Some(p) => self.pos += 2 + p + 2,
                                None => self.pos = self.sql.len(),
                            }
                            Kind::Comment
                        }
                        b'#' => {
                            self.skip_line();
                            Kind::Comment
                        }
                        b'-' if c1 == b'-' && (self.peek(2).is_ascii_whitespace() || self.pos + 2 == self.sql.len()) => {
                            self.skip_line();
                            Kind::Comment
                        }
                        b'\'' | b'"' => {
                            self.pos += 1;
                            self.skip_quoted(c);
                            Kind::String
                        }
                        b'`' => {
                            self.pos += 1;
                            self.skip_quoted(b'`');
                            Kind::QuotedIdent
                        }
                        b'?' => {
                            self.pos += 1;
                            Kind::Placeholder
                        }
                        b'@' => {
                            self.pos += 1;
                            if self.peek(0) == b'@' {
                                self.pos += 1;
                            }
                            match self.peek(0) {
                                q @ (b'\'' | b'"' | b'`') => {
                                    self.pos += 1;
                                    self.skip_quoted(q);
                                }
                                _ => {
                                    while self.pos < self.sql.len() && (ref_is_word_byte(self.sql[self.pos]) || self.sql[self.pos] == b'.')
                                    {
                                        self.pos += 1;
                                    }
                                }
                            }
                            Kind::Variable
                        }
                        b'0' if (c1 == b'x' || c1 == b'b') && self.peek(2).is_ascii_alphanumeric() => {
                            self.pos += 2;
                            while self.pos < self.sql.len() && self.sql[self.pos].is_ascii_alphanumeric() {
                                self.pos += 1;
                            }
                            Kind::HexOrBit
                        }
                        b'x' | b'X' | b'b' | b'B' if c1 == b'\'' => {
                            self.pos += 2;
                            self.skip_quoted(b'\'');
                            Kind::HexOrBit
                        }
                        b'0'..=b'9' => {
                            self.skip_number();
                            // 1abc is an identifier in MySQL.
                            if self.pos < self.sql.len()
                                && ref_is_word_byte(self.sql[self.pos])
                                && !self.sql[start..self.pos].contains(&b'.')
                            {
                                self.skip_word();
                                Kind::Word
                            } else {
                                Kind::Number
                            }
                        }
                        b'.' if c1.is_ascii_digit() => {
                            self.skip_number();
                            Kind::Number
                        }
                        c if ref_is_word_byte(c) => {
                            self.skip_word();
                            Kind::Word
                        }
                        _ => {
                            self.pos += 1;
                            Kind::Punct
                        }
                    };
                    return Some(Token { kind, start, end: self.pos });
                }
            }
        }

        impl RefLexer<'_> {
            fn skip_line(&mut self) {
                match ref_memchr_newline(&self.sql[self.pos..]) {
                    Some(p) => self.pos += p + 1,
                    None => self.pos = self.sql.len(),
                }
            }

            fn skip_word(&mut self) {
                while self.pos < self.sql.len() && ref_is_word_byte(self.sql[self.pos]) {
                    self.pos += 1;
                }
            }

            fn skip_number(&mut self) {
                let s = self.sql;
                while self.pos < s.len() && (s[self.pos].is_ascii_digit() || s[self.pos] == b'.') {
                    self.pos += 1;
                }
                if self.pos < s.len() && (s[self.pos] == b'e' || s[self.pos] == b'E') {
                    let mut p = self.pos + 1;
                    if p < s.len() && (s[p] == b'+' || s[p] == b'-') {
                        p += 1;
                    }
                    if p < s.len() && s[p].is_ascii_digit() {
                        while p < s.len() && s[p].is_ascii_digit() {
                            p += 1;
                        }
                        self.pos = p;
                    }
                }
            }
        }

        fn ref_memchr_newline(b: &[u8]) -> Option<usize> {
            b.iter().position(|&c| c == b'\n')
        }
    }

    fn sqlish() -> impl Strategy<Value = Vec<u8>> {
        proptest::collection::vec(proptest::sample::select(&b" \t\n'\"`\\/*-+#!M(),.;=<>@?0123456789eExXbBnN_$a\x80"[..]), 0..300)
    }

    proptest! {
        #[test]
        fn same_tokens_as_the_reference(b in prop_oneof![sqlish(), proptest::collection::vec(any::<u8>(), 0..300)]) {
            let fast: Vec<Token> = Lexer::new(&b).collect();
            let plain: Vec<Token> = reference::RefLexer::new(&b).collect();
            prop_assert_eq!(fast, plain);
        }

        #[test]
        fn never_panics_and_covers_in_order(b in proptest::collection::vec(any::<u8>(), 0..200)) {
            let mut last = 0;
            for t in Lexer::new(&b) {
                prop_assert!(t.start >= last && t.end > t.start && t.end <= b.len());
                last = t.end;
            }
        }
    }
}
