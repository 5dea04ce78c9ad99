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

fn is_word_byte(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_' || c == b'$' || c >= 0x80
}

impl Iterator for Lexer<'_> {
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
                            while self.pos < self.sql.len() && (is_word_byte(self.sql[self.pos]) || self.sql[self.pos] == b'.') {
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
                    if self.pos < self.sql.len() && is_word_byte(self.sql[self.pos]) && !self.sql[start..self.pos].contains(&b'.') {
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
                c if is_word_byte(c) => {
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

impl Lexer<'_> {
    fn skip_line(&mut self) {
        match memchr_newline(&self.sql[self.pos..]) {
            Some(p) => self.pos += p + 1,
            None => self.pos = self.sql.len(),
        }
    }

    fn skip_word(&mut self) {
        while self.pos < self.sql.len() && is_word_byte(self.sql[self.pos]) {
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

fn memchr_newline(b: &[u8]) -> Option<usize> {
    b.iter().position(|&c| c == b'\n')
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

    proptest! {
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
