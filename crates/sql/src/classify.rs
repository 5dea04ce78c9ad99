//! Statement facts the session acts on before forwarding: statements that name sessions
//! (KILL, SHOW PROCESSLIST), which sluice answers from its own sessions, and any text that could
//! run a KILL sluice cannot resolve, which it refuses (`intercept`); CONNECTION_ID() calls
//! (answered with the session id sluice announced, so the id stays stable whatever backend
//! serves it); USE.

use crate::lexer::{code_tokens, is_word_byte, Kind, Lexer, Token};

fn eq_ignore_case(a: &[u8], b: &str) -> bool {
    a.eq_ignore_ascii_case(b.as_bytes())
}

/// The first keyword of a statement, comments skipped (`b""` if none).
pub fn first_keyword(sql: &[u8]) -> &[u8] {
    code_tokens(sql).next().filter(|t| t.kind == Kind::Word).map(|t| t.text(sql)).unwrap_or(b"")
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KillScope {
    Connection,
    Query,
}

/// Whom a KILL names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KillTarget {
    /// A thread id written as a plain number: to sluice, a session id.
    Id(u64),
    /// `CONNECTION_ID()`: the killer's own session.
    Own,
    /// `USER name[@host]`: `name` is `None` for `CURRENT_USER`; `host` is `None` when not
    /// given (or `%`).
    User { name: Option<String>, host: Option<String> },
    /// `QUERY ID n`: a statement by the server's query id.
    QueryId(u64),
    /// `?`: the id is an execute's parameter (a thread id, or a query id after `QUERY ID`).
    /// Only a prepared statement (COM_STMT_PREPARE) has one; in a text it is a syntax error.
    Parameter { query_id: bool },
    /// Any other expression (`@id`, `37+0`, `'37'`, a column name): the id is its value, as
    /// the session evaluates it (a thread id, or a query id after `QUERY ID`).
    Expression { text: String, query_id: bool },
}

/// `KILL [HARD | SOFT] [CONNECTION | QUERY [ID]] <target>`, alone in its text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Kill {
    pub scope: KillScope,
    /// `Some(true)` for HARD, `Some(false)` for SOFT.
    pub hard: Option<bool>,
    pub target: KillTarget,
}

/// A statement sluice answers itself, checks further, or refuses: through a pooling proxy a
/// KILL's number must name one of sluice's sessions, never whatever backend thread has it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Intercept {
    Kill(Kill),
    /// `SHOW [FULL] PROCESSLIST`, alone.
    Processlist {
        full: bool,
    },
    /// `PREPARE s FROM …` or `EXECUTE IMMEDIATE …`, alone, of text sluice reads and checks
    /// first.
    Dynamic(Dynamic),
    /// Must not reach the backend; why, for the client's error message.
    Refuse(&'static str),
}

impl Intercept {
    /// Sluice answers the statement itself (it never reaches rules or a backend); `Dynamic`
    /// goes on once its text is checked.
    pub fn answered_by_sluice(&self) -> bool {
        !matches!(self, Intercept::Dynamic(_))
    }
}

/// Dynamic SQL whose text the session reads before it lets the statement run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Dynamic {
    /// `@v`: the statement is the value of the user variable `v` (name unquoted).
    Variable(String),
    /// Any other expression: the statement is its value, evaluated once by the session. The
    /// text is `head` + the expression + `tail` (`USING …`, a `;`); `prepare`: PREPARE … FROM
    /// (else EXECUTE IMMEDIATE).
    Expression { head: Vec<u8>, expression: Vec<u8>, tail: Vec<u8>, prepare: bool },
    /// A compound statement (`BEGIN NOT ATOMIC …`, `FOR … DO … END FOR`…) whose dynamic SQL
    /// takes its text from values only the server has while it runs: `sql` is the client's
    /// text with each such statement behind a guard (`guard_dynamic_sql`) that stops it when
    /// its text could run KILL or SHOW PROCESSLIST. `sites` are where the guards go.
    Guarded { sql: Vec<u8>, sites: Vec<GuardSite> },
}

/// A dynamic SQL statement of a compound statement, guarded: the statement (`PREPARE …` or
/// `EXECUTE IMMEDIATE …`, up to its `;`) and the source of its text, as ranges of the text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GuardSite {
    pub statement: (usize, usize),
    pub source: (usize, usize),
}

/// Why a text is refused (the client's error message).
pub mod refusal {
    pub const KILL_FORM: &str = "KILL through sluice needs an id it can resolve to its own sessions: a number, an expression \
         (a `?` only in a prepared KILL, and as the whole id), CONNECTION_ID() or USER name";
    pub const KILL_IN_TEXT: &str = "KILL must be a statement of its own through sluice, not one of several statements \
         or part of a compound statement (sluice resolves its id to its own sessions)";
    pub const KILL_IN_PROGRAM: &str = "KILL inside a stored procedure, function, trigger or event is refused by sluice: \
         its id would name a backend thread, which serves many clients";
    pub const DYNAMIC_KILL: &str = "PREPARE or EXECUTE IMMEDIATE of KILL or SHOW PROCESSLIST is refused by sluice: \
         send the statement itself, so sluice can resolve it to its own sessions";
    pub const DYNAMIC_UNSEEN: &str = "sluice cannot see the statement this PREPARE or EXECUTE IMMEDIATE would run, \
         so it cannot rule out a KILL: use a string literal, or a user variable in a statement of its own";
    pub const AMBIGUOUS: &str = "sluice cannot tell whether this text runs KILL: backslashes in its quoted text \
         read differently under NO_BACKSLASH_ESCAPES, ANSI_QUOTES or multi-byte character sets";
    pub const PROCESSLIST_IN_TEXT: &str = "SHOW PROCESSLIST must be a statement of its own through sluice, which answers it \
         from its own sessions";
    /// What a guarded dynamic SQL statement fails with (SIGNAL's MESSAGE_TEXT: at most 128
    /// characters, no quote).
    pub const GUARDED_DYNAMIC: &str = "sluice refused dynamic SQL whose text holds KILL or PROCESSLIST: send that statement on its own";
}

/// The tokens the server acts on (comments dropped), cloneable for look-ahead.
type Code<'a> = std::iter::Filter<Lexer<'a>, fn(&Token) -> bool>;

fn code(sql: &[u8]) -> Code<'_> {
    fn is_code(t: &Token) -> bool {
        t.kind != Kind::Comment
    }
    Lexer::new(sql).filter(is_code as fn(&Token) -> bool)
}

/// `t` is the keyword or identifier `k` (any case).
pub fn is_word(t: &Token, sql: &[u8], k: &str) -> bool {
    t.kind == Kind::Word && eq_ignore_case(t.text(sql), k)
}

/// Is one of `words` (lower case, sharing their first letter) anywhere in `sql`, in any case?
/// One memchr pass over that letter.
fn mentions(sql: &[u8], words: &[&[u8]]) -> bool {
    let Some(&first) = words.first().and_then(|w| w.first()) else { return false };
    memchr::memchr2_iter(first, first.to_ascii_uppercase(), sql)
        .any(|i| words.iter().any(|w| sql.get(i + 1..i + w.len()).is_some_and(|r| r.eq_ignore_ascii_case(&w[1..]))))
}

/// Could the text hold anything `intercept` acts on? Each needs a keyword spelled out in code
/// (a keyword cannot be escaped, and quoted it is an identifier): KILL, PREPARE or IMMEDIATE
/// (dynamic SQL), PROCESSLIST. Text without them is passed on without being lexed.
/// Grouped by first letter for `mentions`; the same words as `INTERCEPT_WORDS`.
pub fn mentions_keywords(sql: &[u8]) -> bool {
    mentions(sql, &[b"kill"]) || mentions(sql, &[b"prepare", b"processlist"]) || mentions(sql, &[b"immediate"])
}

/// The words `intercept` acts on (`mentions_keywords` looks for the same ones).
const INTERCEPT_WORDS: [&[u8]; 4] = [b"kill", b"prepare", b"processlist", b"immediate"];
const LONGEST_INTERCEPT_WORD: usize = b"processlist".len();

/// Watches the part of a statement sluice relays unread (larger than it holds) for the words
/// `intercept` acts on: KILL, PREPARE, IMMEDIATE, PROCESSLIST, as whole words, quoted or not
/// (no lexer runs over a stream). Bytes go in as they arrive, in any slices.
#[derive(Debug, Clone, Default)]
pub struct KeywordWatch {
    /// The current word, lowercased, while it is no longer than the longest keyword.
    word: [u8; LONGEST_INTERCEPT_WORD],
    len: usize,
    in_word: bool,
    too_long: bool,
    found: bool,
}

impl KeywordWatch {
    /// A watch over text that follows `before` (the last byte already read; a word in progress
    /// there is not a keyword's start).
    pub fn after(before: Option<u8>) -> KeywordWatch {
        let in_word = before.is_some_and(is_word_byte);
        KeywordWatch { in_word, too_long: in_word, ..Default::default() }
    }

    pub fn feed(&mut self, bytes: &[u8]) {
        for &b in bytes {
            if is_word_byte(b) {
                if !self.in_word {
                    (self.in_word, self.len, self.too_long) = (true, 0, false);
                }
                if self.len < self.word.len() {
                    self.word[self.len] = b.to_ascii_lowercase();
                    self.len += 1;
                } else {
                    self.too_long = true;
                }
            } else if self.in_word {
                self.end_word();
            }
        }
    }

    /// Whether a keyword was seen; `at_end`: the text ended (a word in progress is whole).
    pub fn found(&mut self, at_end: bool) -> bool {
        if at_end && self.in_word {
            self.end_word();
        }
        self.found
    }

    fn end_word(&mut self) {
        self.in_word = false;
        if !self.too_long {
            let w = &self.word[..self.len];
            self.found |= INTERCEPT_WORDS.contains(&w);
        }
    }
}

/// What sluice must do about a COM_QUERY (or COM_STMT_PREPARE) text before any backend sees
/// it; `None` for nearly every statement, found without lexing it (`mentions_keywords`).
///
/// Every KILL keyword counts, wherever it is: KILL is a reserved word, so outside quotes and
/// after no `.` it is a statement. A KILL alone is sluice's to resolve; one among several
/// statements, in a compound statement or in a stored program's body is refused. Dynamic SQL
/// (PREPARE … FROM, EXECUTE IMMEDIATE) is refused unless its text can be seen: a string
/// literal (checked here), or a user variable in a statement of its own (checked by the
/// session). Inside a stored program's definition only literals can be checked; other
/// dynamic SQL there runs later, out of sluice's sight (README, "What differs").
///
/// Quotes hide text, and where a quote ends depends on the session: under
/// NO_BACKSLASH_ESCAPES or ANSI_QUOTES, or in a character set whose characters may end in a
/// backslash byte, `\'` ends a string. So a text with backslashes is read both ways, and
/// refused when the readings disagree; except a single SELECT, INSERT… (where a KILL could
/// only be a syntax error), which carry most quoted data.
pub fn intercept(sql: &[u8]) -> Option<Intercept> {
    intercept_as(sql, false)
}

/// `intercept`, for a session the server is known to read with backslash escapes (`escapes`:
/// its status flags say NO_BACKSLASH_ESCAPES is off, and its client character set has no
/// character ending in a backslash byte, as sjis or gbk have). Then a text that is one
/// statement in that reading (no mode can change within it) has one reading, the server's,
/// unless a double-quoted token holds a backslash (ANSI_QUOTES, which the flags do not show,
/// makes that an identifier, where a backslash escapes nothing).
pub fn intercept_as(sql: &[u8], escapes: bool) -> Option<Intercept> {
    if !mentions_keywords(sql) {
        return None;
    }
    let several = memchr::memchr(b';', sql).is_some();
    let found = scan(sql, 0);
    // Lexed again only for a text with a backslash, where the readings may differ.
    let two_readings = memchr::memchr(b'\\', sql).is_some()
        && (several || !plain_dml(sql))
        && (!escapes || (several && !one_statement(sql)) || backslash_in_double_quotes(sql));
    if two_readings {
        // Also read with backslashes as plain characters: a KILL or quote boundary that only
        // one reading sees must not slip through.
        let plain: Vec<u8> = sql.iter().map(|&b| if b == b'\\' { b' ' } else { b }).collect();
        let other = scan(&plain, 0);
        if other.is_some() && !same_reading(&other, &found) {
            return Some(Intercept::Refuse(refusal::AMBIGUOUS));
        }
    }
    found
}

/// One statement, with an optional `;` at its end, as the server reads it with escapes.
fn one_statement(sql: &[u8]) -> bool {
    let mut toks = code(sql);
    while let Some(t) = toks.next() {
        if t.text(sql) == b";" {
            return toks.next().is_none();
        }
    }
    true
}

/// A `"…"` token holding a backslash.
fn backslash_in_double_quotes(sql: &[u8]) -> bool {
    memchr::memchr(b'"', sql).is_some()
        && code(sql).any(|t| t.kind == Kind::String && t.text(sql).first() == Some(&b'"') && memchr::memchr(b'\\', t.text(sql)).is_some())
}

/// Whether two readings of a text (`intercept`) agree; guarded texts agree when their guards
/// go in the same places (their texts differ by the backslashes).
fn same_reading(a: &Option<Intercept>, b: &Option<Intercept>) -> bool {
    match (a, b) {
        (Some(Intercept::Dynamic(Dynamic::Guarded { sites: x, .. })), Some(Intercept::Dynamic(Dynamic::Guarded { sites: y, .. }))) => {
            x == y
        }
        _ => a == b,
    }
}

/// A single statement of a kind that cannot carry a KILL (a KILL inside it would be a syntax
/// error): quotes it holds need no second reading. Such statements carry most quoted data.
pub fn plain_dml(sql: &[u8]) -> bool {
    code(sql).next().is_some_and(|t| {
        ["SELECT", "INSERT", "UPDATE", "DELETE", "REPLACE", "WITH", "VALUES", "CALL", "DO", "LOAD"].iter().any(|k| is_word(&t, sql, k))
    })
}

/// Where dynamic SQL takes its text from.
enum Source {
    /// String literals (adjacent ones concatenate), unescaped, and nothing else.
    Literal(Vec<u8>),
    /// A user variable (name unquoted), and nothing else; `at`: its token's range.
    Variable(String, (usize, usize)),
    /// Any other expression, `start..end` in the text (up to `USING` or the statement's end);
    /// `single`: one expression (no `,` outside parentheses), the only form the server takes.
    Expression { start: usize, end: usize, single: bool },
}

/// Words after which a statement begins inside a compound statement (`BEGIN NOT ATOMIC`,
/// `IF … THEN`, `SET STATEMENT … FOR`…), besides the start of the text and `;`.
const STATEMENT_AFTER: [&str; 8] = ["BEGIN", "ATOMIC", "THEN", "ELSE", "DO", "LOOP", "REPEAT", "FOR"];

fn scan(sql: &[u8], depth: u8) -> Option<Intercept> {
    use refusal::*;
    let definition = defines_program(sql);
    // Its dynamic SQL can only be guarded (`GuardSite`), not read first.
    let compound = depth == 0 && !definition && is_compound(sql);
    let mut guards: Vec<GuardSite> = Vec::new();
    let mut toks = code(sql);
    let mut first: Option<Token> = None;
    let mut prev: Option<Token> = None;
    let mut statements = 0usize;
    let mut at_start = true;
    let mut kill = false;
    let mut processlist = false;
    let mut dynamic: Option<Dynamic> = None;
    while let Some(t) = toks.next() {
        if t.kind == Kind::Punct && t.text(sql) == b";" {
            at_start = true;
            prev = Some(t);
            continue;
        }
        let starts = std::mem::take(&mut at_start);
        statements += starts as usize;
        first.get_or_insert(t);
        let before = prev.replace(t);
        let after_dot = before.is_some_and(|p| p.text(sql) == b".");
        if t.kind != Kind::Word || after_dot {
            continue;
        }
        if is_word(&t, sql, "KILL") {
            kill = true;
            continue;
        }
        if starts && is_word(&t, sql, "SHOW") {
            let mut ahead = toks.clone().skip_while(|n| is_word(n, sql, "FULL"));
            processlist |= ahead.next().is_some_and(|n| is_word(&n, sql, "PROCESSLIST"));
            continue;
        }
        let prepare = is_word(&t, sql, "PREPARE");
        let source = if is_word(&t, sql, "EXECUTE") && toks.clone().next().is_some_and(|n| is_word(&n, sql, "IMMEDIATE")) {
            let mut ahead = toks.clone();
            ahead.next();
            source(sql, ahead)
        } else if prepare {
            let statement_start = starts || definition || before.is_some_and(|b| STATEMENT_AFTER.iter().any(|k| is_word(&b, sql, k)));
            let mut ahead = toks.clone();
            let named = ahead.next().is_some_and(|n| matches!(n.kind, Kind::Word | Kind::QuotedIdent));
            if !(named && ahead.next().is_some_and(|n| is_word(&n, sql, "FROM"))) {
                continue;
            }
            if !statement_start {
                // `SELECT prepare x FROM t`, or a handler's statement (`DECLARE … HANDLER FOR
                // SQLEXCEPTION PREPARE s FROM …`), which a compound statement may hold.
                if compound {
                    return Some(Intercept::Refuse(DYNAMIC_UNSEEN));
                }
                continue;
            }
            source(sql, ahead)
        } else {
            continue;
        };
        match source {
            Source::Literal(text) => {
                if depth >= 2 {
                    return Some(Intercept::Refuse(DYNAMIC_UNSEEN));
                }
                if let Some(inner) = runs_something(&text, depth + 1) {
                    return Some(Intercept::Refuse(inner));
                }
            }
            // Read only by the server, as the compound statement runs: guarded.
            Source::Variable(_, at) if compound => match guard_site(sql, t.start, at, toks.clone()) {
                Some(site) => guards.push(site),
                None => return Some(Intercept::Refuse(DYNAMIC_UNSEEN)),
            },
            Source::Expression { start, end, single } if compound => {
                // Guarded by evaluating it twice (once in the guard, once to run): only an
                // expression whose two values cannot differ.
                if !single || !pure_expression(sql, start, end) {
                    return Some(Intercept::Refuse(DYNAMIC_UNSEEN));
                }
                match guard_site(sql, t.start, (start, end), toks.clone()) {
                    Some(site) => guards.push(site),
                    None => return Some(Intercept::Refuse(DYNAMIC_UNSEEN)),
                }
            }
            Source::Variable(name, _) if !definition => {
                if dynamic.is_some() {
                    return Some(Intercept::Refuse(DYNAMIC_UNSEEN));
                }
                dynamic = Some(Dynamic::Variable(name));
            }
            // Evaluated by the session, which can do so only for a statement it runs now.
            Source::Expression { start, end, single } if !definition => {
                if !single || depth > 0 || dynamic.is_some() {
                    return Some(Intercept::Refuse(DYNAMIC_UNSEEN));
                }
                let (head, expression, tail) = (sql[..start].to_vec(), sql[start..end].to_vec(), sql[end..].to_vec());
                dynamic = Some(Dynamic::Expression { head, expression, tail, prepare });
            }
            // Run later by a stored program, with values sluice cannot see.
            Source::Variable(..) | Source::Expression { .. } => {}
        }
    }
    let first = first?;
    if kill {
        return Some(match () {
            _ if statements == 1 && is_word(&first, sql, "KILL") => parse_kill(sql),
            _ if definition => Intercept::Refuse(KILL_IN_PROGRAM),
            _ => Intercept::Refuse(KILL_IN_TEXT),
        });
    }
    if let Some(dynamic) = dynamic {
        return Some(if statements == 1 { Intercept::Dynamic(dynamic) } else { Intercept::Refuse(DYNAMIC_UNSEEN) });
    }
    if processlist {
        return if statements == 1 { parse_processlist(sql) } else { Some(Intercept::Refuse(PROCESSLIST_IN_TEXT)) };
    }
    if !guards.is_empty() {
        return Some(Intercept::Dynamic(Dynamic::Guarded { sql: guard_dynamic_sql(sql, &guards), sites: guards }));
    }
    None
}

/// Does the text start a compound statement run now (`BEGIN NOT ATOMIC`, or `IF`, `CASE`,
/// `LOOP`, `WHILE`, `REPEAT`, `FOR`, optionally after a label)? A top-level `BEGIN` alone
/// starts a transaction.
fn is_compound(sql: &[u8]) -> bool {
    let mut toks = code(sql);
    let Some(mut first) = toks.next() else { return false };
    let mut next = toks.next();
    if next.is_some_and(|n| n.text(sql) == b":") {
        let Some(after) = toks.next() else { return false };
        first = after;
        next = toks.next();
    }
    if is_word(&first, sql, "BEGIN") {
        return next.is_some_and(|n| is_word(&n, sql, "NOT"));
    }
    ["IF", "CASE", "LOOP", "WHILE", "REPEAT", "FOR"].iter().any(|k| is_word(&first, sql, k))
}

/// Where the guard of a dynamic SQL statement starting at `start`, taking its text from
/// `source`, goes: the statement runs up to the next `;` outside parentheses (every statement
/// of a compound statement ends with one). `None` when there is none.
fn guard_site(sql: &[u8], start: usize, source: (usize, usize), rest: Code) -> Option<GuardSite> {
    let (mut depth, mut last) = (0usize, source.1);
    for t in rest.skip_while(|t| t.start < source.1) {
        match t.text(sql) {
            b"(" => depth += 1,
            b")" => depth = depth.saturating_sub(1),
            b";" if depth == 0 => return Some(GuardSite { statement: (start, last), source }),
            _ => {}
        }
        last = t.end;
    }
    None
}

/// Functions whose value depends only on their arguments and the session's settings, and
/// that change nothing: an expression of these evaluates the same twice in a row.
const PURE_FUNCTIONS: [&str; 44] = [
    "CONCAT",
    "CONCAT_WS",
    "REPLACE",
    "CONV",
    "HEX",
    "UNHEX",
    "LOWER",
    "UPPER",
    "LCASE",
    "UCASE",
    "SUBSTRING",
    "SUBSTR",
    "MID",
    "LEFT",
    "RIGHT",
    "TRIM",
    "LTRIM",
    "RTRIM",
    "LPAD",
    "RPAD",
    "REPEAT",
    "REVERSE",
    "CAST",
    "CONVERT",
    "CHAR",
    "IF",
    "IFNULL",
    "COALESCE",
    "NULLIF",
    "LENGTH",
    "CHAR_LENGTH",
    "QUOTE",
    "INSERT",
    "LOCATE",
    "INSTR",
    "ELT",
    "FIELD",
    "ASCII",
    "ORD",
    "BIN",
    "OCT",
    "SPACE",
    "DATABASE",
    "SCHEMA",
];

/// An expression of literals, variables, names (a FOR loop's record fields, a compound
/// statement's variables) and `PURE_FUNCTIONS`: no subquery, no assignment, no other call.
fn pure_expression(sql: &[u8], start: usize, end: usize) -> bool {
    let toks: Vec<Token> = code(sql).skip_while(|t| t.start < start).take_while(|t| t.end <= end).collect();
    toks.iter().enumerate().all(|(i, t)| {
        let called = toks.get(i + 1).is_some_and(|n| n.text(sql) == b"(");
        match t.kind {
            Kind::Word if called => PURE_FUNCTIONS.iter().any(|f| is_word(t, sql, f)),
            Kind::Word => !["SELECT", "WITH", "VALUES", "TABLE"].iter().any(|k| is_word(t, sql, k)),
            Kind::QuotedIdent => !called,
            Kind::Placeholder => false,
            Kind::Punct => t.text(sql) != b":",
            _ => true,
        }
    })
}

/// The guard's condition: the text could hold the word KILL or PROCESSLIST (the server's
/// own regular expressions, case-insensitive, on the text in its own character set; a digit
/// before it counts as a boundary, for `/*!50000KILL*/`). No backslash, so it reads the
/// same under NO_BACKSLASH_ESCAPES.
const GUARD_PATTERN: &str = "(?i)(^|[^a-z_$])(kill|processlist)([^a-z_$]|$)";

/// `sql` with each dynamic SQL statement at `sites` (in order) run inside a block that first
/// stops it with 1235 if its text matches `GUARD_PATTERN`.
fn guard_dynamic_sql(sql: &[u8], sites: &[GuardSite]) -> Vec<u8> {
    let mut out = Vec::with_capacity(sql.len() + sites.len() * 256);
    let mut at = 0;
    for site in sites {
        let (start, end) = site.statement;
        out.extend_from_slice(&sql[at..start]);
        out.extend_from_slice(b"BEGIN IF (");
        out.extend_from_slice(&sql[site.source.0..site.source.1]);
        out.extend_from_slice(b") RLIKE '");
        out.extend_from_slice(GUARD_PATTERN.as_bytes());
        out.extend_from_slice(b"' THEN SIGNAL SQLSTATE '0A000' SET MYSQL_ERRNO = 1235, MESSAGE_TEXT = '");
        out.extend_from_slice(refusal::GUARDED_DYNAMIC.as_bytes());
        out.extend_from_slice(b"'; END IF; ");
        out.extend_from_slice(&sql[start..end]);
        out.extend_from_slice(b"; END");
        at = end;
    }
    out.extend_from_slice(&sql[at..]);
    out
}

/// The refusal for dynamic SQL whose text is `sql` (read both ways, as `intercept` does), if
/// that text would run something sluice must answer or cannot see.
fn runs_something(sql: &[u8], depth: u8) -> Option<&'static str> {
    let reason = |i: Option<Intercept>| i.map(|i| dynamic_refusal(&i));
    reason(scan(sql, depth)).or_else(|| {
        memchr::memchr(b'\\', sql)?;
        let plain: Vec<u8> = sql.iter().map(|&b| if b == b'\\' { b' ' } else { b }).collect();
        reason(scan(&plain, depth))
    })
}

/// Why dynamic SQL whose text `intercept` answered with `i` is refused: a statement sluice
/// must answer itself cannot run inside it, and nested dynamic SQL it cannot read.
pub fn dynamic_refusal(i: &Intercept) -> &'static str {
    match i {
        Intercept::Refuse(why) => why,
        Intercept::Dynamic(_) => refusal::DYNAMIC_UNSEEN,
        Intercept::Kill(_) | Intercept::Processlist { .. } => refusal::DYNAMIC_KILL,
    }
}

/// The text dynamic SQL runs, from the tokens after `FROM` or `IMMEDIATE`.
fn source(sql: &[u8], mut ahead: Code) -> Source {
    let ends = |n: Option<Token>| n.is_none_or(|n| n.text(sql) == b";" || is_word(&n, sql, "USING"));
    let rest = ahead.clone();
    let mut t = ahead.next();
    // A character set introducer: _utf8mb4'…', N'…'.
    if t.is_some_and(|w| w.kind == Kind::Word && (w.text(sql).starts_with(b"_") || is_word(&w, sql, "N")))
        && ahead.clone().next().is_some_and(|s| s.kind == Kind::String)
    {
        t = ahead.next();
    }
    match t {
        Some(s) if s.kind == Kind::String => {
            let mut text = unquote(s.text(sql));
            let mut next = ahead.next();
            while let Some(more) = next.filter(|n| n.kind == Kind::String) {
                text.extend_from_slice(&unquote(more.text(sql)));
                next = ahead.next();
            }
            // A text that asks for the connection's id is evaluated by the session like an
            // expression, which answers it with the client's id (not the server thread's).
            if ends(next) && !mentions_connection_id(&text) {
                Source::Literal(text)
            } else {
                dynamic_expression(sql, rest)
            }
        }
        Some(v) if v.kind == Kind::Variable && !v.text(sql).starts_with(b"@@") && ends(ahead.clone().next()) => {
            match variable_name(v.text(sql)) {
                Some(name) => Source::Variable(name, (v.start, v.end)),
                None => dynamic_expression(sql, rest),
            }
        }
        _ => dynamic_expression(sql, rest),
    }
}

/// The expression dynamic SQL takes its text from: the tokens up to `USING` or `;` outside
/// parentheses (`CONVERT(x USING utf8mb4)` is inside), or the end.
fn dynamic_expression(sql: &[u8], toks: Code) -> Source {
    let (mut start, mut end, mut depth, mut single) = (None, 0, 0usize, true);
    for t in toks {
        let text = t.text(sql);
        if depth == 0 && (text == b";" || is_word(&t, sql, "USING")) {
            break;
        }
        match text {
            b"(" => depth += 1,
            b")" => depth = depth.saturating_sub(1),
            b"," if depth == 0 => single = false,
            _ => {}
        }
        start.get_or_insert(t.start);
        end = t.end;
    }
    match start {
        Some(start) => Source::Expression { start, end, single },
        // `PREPARE s FROM` with nothing after it: the server's syntax error, nothing runs.
        None => Source::Literal(Vec::new()),
    }
}

/// A `@name` token's name, unquoted; `None` when empty or not UTF-8.
fn variable_name(token: &[u8]) -> Option<String> {
    let raw = token.strip_prefix(b"@")?;
    let name = match raw.first() {
        Some(b'\'' | b'"' | b'`') => unquote(raw),
        _ => raw.to_vec(),
    };
    String::from_utf8(name).ok().filter(|n| !n.is_empty())
}

/// A quoted token's content: doubled quotes and (outside backticks) backslash escapes undone,
/// as the server reads them by default. Unterminated: up to the end.
fn unquote(quoted: &[u8]) -> Vec<u8> {
    let Some((&quote, rest)) = quoted.split_first() else { return Vec::new() };
    let body = rest.strip_suffix(&[quote]).unwrap_or(rest);
    let mut out = Vec::with_capacity(body.len());
    let mut i = 0;
    while let Some(&c) = body.get(i) {
        match (c, body.get(i + 1)) {
            (b'\\', Some(&e)) if quote != b'`' => {
                match e {
                    b'0' => out.push(0),
                    b'b' => out.push(8),
                    b'n' => out.push(b'\n'),
                    b'r' => out.push(b'\r'),
                    b't' => out.push(b'\t'),
                    b'Z' => out.push(26),
                    b'%' | b'_' => out.extend_from_slice(&[b'\\', e]),
                    _ => out.push(e),
                }
                i += 2;
            }
            (q, Some(&n)) if q == quote && n == quote => {
                out.push(quote);
                i += 2;
            }
            _ => {
                out.push(c);
                i += 1;
            }
        }
    }
    out
}

/// An identifier or string token's name (`bob`, `'bob'`, `` `bob` ``); `None` for other tokens
/// or names that are not UTF-8.
fn name_of(t: &Token, sql: &[u8]) -> Option<String> {
    let text = t.text(sql);
    let raw = match t.kind {
        Kind::Word => text.to_vec(),
        Kind::String | Kind::QuotedIdent => unquote(text),
        _ => return None,
    };
    String::from_utf8(raw).ok()
}

/// Does the text define a stored program (CREATE/ALTER … PROCEDURE, FUNCTION, TRIGGER,
/// EVENT, PACKAGE)? Its body runs later, not now.
fn defines_program(sql: &[u8]) -> bool {
    if !code(sql).next().is_some_and(|t| is_word(&t, sql, "CREATE") || is_word(&t, sql, "ALTER")) {
        return false;
    }
    let toks: Vec<Token> = code(sql).take(24).collect();
    let w = |i: usize, k: &str| toks.get(i).is_some_and(|t| is_word(t, sql, k));
    let text = |i: usize| toks.get(i).map_or(&b""[..], |t| t.text(sql));
    let mut i = 1;
    while i < toks.len() {
        if ["OR", "REPLACE", "AGGREGATE", "EDITIONABLE", "NONEDITIONABLE"].iter().any(|k| w(i, k)) {
            i += 1;
        } else if w(i, "DEFINER") {
            // DEFINER = user[@host] | CURRENT_USER[()]
            i += 1;
            if text(i) == b"=" {
                i += 1;
            }
            i += 1;
            if text(i) == b"(" && text(i + 1) == b")" {
                i += 2;
            }
            if toks.get(i).is_some_and(|t| t.kind == Kind::Variable) {
                i += if text(i) == b"@" { 2 } else { 1 };
            }
        } else {
            return ["PROCEDURE", "FUNCTION", "TRIGGER", "EVENT", "PACKAGE"].iter().any(|k| w(i, k));
        }
    }
    false
}

/// A KILL statement alone in its text (with an optional `;`): what it names, or why sluice
/// refuses it.
fn parse_kill(sql: &[u8]) -> Intercept {
    // All of them: an expression id is evaluated whole.
    let mut toks: Vec<Token> = code(sql).collect();
    if toks.last().is_some_and(|t| t.text(sql) == b";") {
        toks.pop();
    }
    let w = |i: usize, k: &str| toks.get(i).is_some_and(|t| is_word(t, sql, k));
    let mut i = 1;
    let hard = match () {
        _ if w(i, "HARD") => Some(true),
        _ if w(i, "SOFT") => Some(false),
        _ => None,
    };
    i += hard.is_some() as usize;
    let mut scope = KillScope::Connection;
    let mut by_query_id = false;
    if w(i, "CONNECTION") {
        i += 1;
    } else if w(i, "QUERY") {
        scope = KillScope::Query;
        i += 1;
        if w(i, "ID") {
            by_query_id = true;
            i += 1;
        }
    }
    let rest = toks.get(i..).unwrap_or_default();
    let target = if !by_query_id && w(i, "USER") {
        parse_user(sql, &rest[1..])
    } else {
        match rest {
            [n] if n.kind == Kind::Number && n.text(sql).iter().all(u8::is_ascii_digit) => std::str::from_utf8(n.text(sql))
                .ok()
                .and_then(|s| s.parse().ok())
                .map(|id| if by_query_id { KillTarget::QueryId(id) } else { KillTarget::Id(id) }),
            [f, open, close] if !by_query_id && is_word(f, sql, "CONNECTION_ID") && open.text(sql) == b"(" && close.text(sql) == b")" => {
                Some(KillTarget::Own)
            }
            [p] if p.kind == Kind::Placeholder => Some(KillTarget::Parameter { query_id: by_query_id }),
            _ => None,
        }
        .or_else(|| expression(sql, rest).map(|text| KillTarget::Expression { text, query_id: by_query_id }))
    };
    match target {
        Some(target) => Intercept::Kill(Kill { scope, hard, target }),
        None => Intercept::Refuse(refusal::KILL_FORM),
    }
}

/// A KILL id that is an expression, as text sluice can have the session evaluate (`SELECT
/// <text>`): one expression, no `;`, no `?`, UTF-8.
fn expression(sql: &[u8], t: &[Token]) -> Option<String> {
    let (first, last) = (t.first()?, t.last()?);
    if t.iter().any(|t| t.kind == Kind::Placeholder || t.text(sql) == b";") {
        return None;
    }
    let text = sql.get(first.start..last.end)?;
    String::from_utf8(text.to_vec()).ok()
}

/// `user`, `user@host`, `'user'@'host'`, `user @ host`, `CURRENT_USER[()]`.
fn parse_user(sql: &[u8], t: &[Token]) -> Option<KillTarget> {
    let host_of = |v: &Token| {
        let host = variable_name(v.text(sql))?;
        Some((host != "%").then_some(host))
    };
    let (name, host) = match t {
        [c] if is_word(c, sql, "CURRENT_USER") => (None, None),
        [c, open, close] if is_word(c, sql, "CURRENT_USER") && open.text(sql) == b"(" && close.text(sql) == b")" => (None, None),
        [u] => (Some(name_of(u, sql)?), None),
        [u, at, h] if at.kind == Kind::Variable && at.text(sql) == b"@" => {
            let host = name_of(h, sql)?;
            (Some(name_of(u, sql)?), (host != "%").then_some(host))
        }
        [u, v] if v.kind == Kind::Variable && !v.text(sql).starts_with(b"@@") => (Some(name_of(u, sql)?), host_of(v)?),
        _ => return None,
    };
    Some(KillTarget::User { name, host })
}

/// `SHOW [FULL] PROCESSLIST` alone (with an optional `;`).
fn parse_processlist(sql: &[u8]) -> Option<Intercept> {
    let mut toks = code(sql);
    toks.next().filter(|t| is_word(t, sql, "SHOW"))?;
    let mut t = toks.next()?;
    let full = is_word(&t, sql, "FULL");
    if full {
        t = toks.next()?;
    }
    if !is_word(&t, sql, "PROCESSLIST") {
        return None;
    }
    match toks.next() {
        None => {}
        Some(semi) if semi.text(sql) == b";" && toks.next().is_none() => {}
        Some(_) => return None,
    }
    Some(Intercept::Processlist { full })
}

/// `SHOW [GLOBAL | SESSION | LOCAL] STATUS [LIKE … | WHERE …]`, one statement (with an
/// optional `;`). Its answer holds Threads_connected, which a pooling proxy answers for its own
/// sessions (the server counts sluice's pooled connections). Text that does not start with
/// SHOW is turned away by its first bytes, unlexed.
pub fn show_status(sql: &[u8]) -> bool {
    let start = sql.iter().position(|b| !b.is_ascii_whitespace()).unwrap_or(sql.len());
    if !sql.get(start..start + 4).is_some_and(|w| w.eq_ignore_ascii_case(b"show")) {
        return false;
    }
    let mut toks = code(sql);
    if !toks.next().is_some_and(|t| is_word(&t, sql, "SHOW")) {
        return false;
    }
    let mut t = toks.next();
    if t.is_some_and(|t| ["GLOBAL", "SESSION", "LOCAL"].iter().any(|k| is_word(&t, sql, k))) {
        t = toks.next();
    }
    t.is_some_and(|t| is_word(&t, sql, "STATUS")) && one_statement(sql) && !code(sql).any(|t| t.text(sql) == b"?")
}

/// Statement kinds whose text may be rewritten: not DDL that stores the text (a procedure or
/// view body must keep calling CONNECTION_ID() itself).
fn rewritable(first: &[u8]) -> bool {
    ["SELECT", "DO", "SET", "INSERT", "UPDATE", "DELETE", "REPLACE", "KILL", "WITH", "VALUES", "CALL", "EXECUTE"]
        .iter()
        .any(|k| eq_ignore_case(first, k))
}

/// Cheap pre-check on every statement: is "connection_id" or "pseudo_thread_id" anywhere (any
/// case)? Looks only around underscores (memchr), so ordinary statements cost a few nanoseconds.
fn mentions_connection_id(sql: &[u8]) -> bool {
    let around = |i: usize, before: &[u8], after: &[u8]| {
        i >= before.len()
            && sql[i - before.len()..i].eq_ignore_ascii_case(before)
            && sql.get(i + 1..i + 1 + after.len()).is_some_and(|a| a.eq_ignore_ascii_case(after))
    };
    memchr::memchr_iter(b'_', sql).any(|i| around(i, b"connection", b"id") || around(i, b"pseudo", b"thread_id"))
}

/// A reference to `information_schema.processlist` in a text (any case, quoted or not), which
/// sluice answers with its own sessions (their ids are the ones CONNECTION_ID() and KILL take).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcesslistSite {
    pub start: usize,
    pub end: usize,
    /// An alias follows; otherwise the derived table that replaces it needs one.
    pub aliased: bool,
}

/// Where a text reads `information_schema.processlist`. `None` when it does not, or when the
/// text cannot be rewritten: a statement that stores its text (a view or routine keeps the
/// server's table), or one that qualifies a column with the table's full name.
pub fn processlist_sites(sql: &[u8]) -> Option<Vec<ProcesslistSite>> {
    if !mentions(sql, &[b"information_schema"]) || !mentions(sql, &[b"processlist"]) {
        return None;
    }
    let first = code_tokens(sql).find(|t| t.text(sql) != b"(").filter(|t| t.kind == Kind::Word).map_or(&b""[..], |t| t.text(sql));
    if !rewritable(first) {
        return None;
    }
    let toks: Vec<Token> = code_tokens(sql).collect();
    let mut sites = Vec::new();
    for (i, t) in toks.iter().enumerate() {
        let [dot, table] = [toks.get(i + 1), toks.get(i + 2)];
        let names_it = eq_ignore_case(identifier(t, sql), "information_schema")
            && dot.is_some_and(|d| d.text(sql) == b".")
            && table.is_some_and(|n| eq_ignore_case(identifier(n, sql), "processlist"));
        let Some(table) = table.filter(|_| names_it) else { continue };
        let next = toks.get(i + 3);
        if next.is_some_and(|n| n.text(sql) == b".") || (i > 0 && toks[i - 1].text(sql) == b".") {
            return None;
        }
        let aliased = next.is_some_and(|n| match n.kind {
            Kind::QuotedIdent => true,
            Kind::Word => eq_ignore_case(n.text(sql), "AS") || crate::keywords::lookup_in(sql, n.start, n.end).is_none(),
            _ => false,
        });
        sites.push(ProcesslistSite { start: t.start, end: table.end, aliased });
    }
    (!sites.is_empty()).then_some(sites)
}

/// `sql` with each site replaced by `(derived)`, named PROCESSLIST where no alias follows.
pub fn replace_processlist(sql: &[u8], sites: &[ProcesslistSite], derived: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(sql.len() + sites.len() * (derived.len() + 20));
    let mut last = 0;
    for s in sites {
        out.extend_from_slice(sql.get(last..s.start).unwrap_or_default());
        out.push(b'(');
        out.extend_from_slice(derived);
        out.push(b')');
        if !s.aliased {
            out.extend_from_slice(b" AS PROCESSLIST");
        }
        last = s.end;
    }
    out.extend_from_slice(sql.get(last..).unwrap_or_default());
    out
}

/// How the select list of `sql` (between its first SELECT and the FROM after it) spells the
/// identifier `name` (any case), backticks off, where it first names it.
pub fn spelling<'a>(sql: &'a [u8], name: &str) -> Option<&'a [u8]> {
    code_tokens(sql)
        .skip_while(|t| !is_word(t, sql, "SELECT"))
        .skip(1)
        .take_while(|t| !is_word(t, sql, "FROM"))
        .map(|t| identifier(&t, sql))
        .find(|n| eq_ignore_case(n, name))
}

/// A word's or quoted identifier's name (backticks off); empty for other tokens.
fn identifier<'a>(t: &Token, sql: &'a [u8]) -> &'a [u8] {
    match t.kind {
        Kind::Word => t.text(sql),
        Kind::QuotedIdent => t.text(sql).get(1..t.text(sql).len().saturating_sub(1)).unwrap_or_default(),
        _ => b"",
    }
}

/// Tables keyed by the server's own thread ids: a statement reading them compares
/// CONNECTION_ID() with those ids (`WHERE PROCESSLIST_ID = CONNECTION_ID()`), so the call must
/// stay the server's there.
fn names_server_threads(word: &[u8]) -> bool {
    [
        "PROCESSLIST",
        "SESSION_ACCOUNT_CONNECT_ATTRS",
        "SESSION_CONNECT_ATTRS",
        "THREADS",
        "USER_VARIABLES_BY_THREAD",
        "STATUS_BY_THREAD",
        "VARIABLES_BY_THREAD",
    ]
    .iter()
    .any(|k| eq_ignore_case(word, k))
}

/// Replaces each `CONNECTION_ID()` call, and with `pseudo_thread_id` each read of
/// `@@pseudo_thread_id` (the server sets it to the thread id; false when the session set it
/// itself), with the literal `id`. A select item that held one keeps its column name through an
/// alias. `None` when there is nothing to replace (the common case, found without allocating).
///
/// `processlist`: the text's `information_schema.processlist` is answered with sluice's sessions
/// (`processlist_sites`), so a CONNECTION_ID() compared with its ids is sluice's too.
pub fn rewrite_connection_id(sql: &[u8], id: u32, pseudo_thread_id: bool, processlist: bool) -> Option<Vec<u8>> {
    if !mentions_connection_id(sql) {
        return None;
    }
    // `(SELECT …) UNION (SELECT …)`: the statement's kind is its first word.
    let first = code_tokens(sql).find(|t| t.text(sql) != b"(").filter(|t| t.kind == Kind::Word).map_or(&b""[..], |t| t.text(sql));
    if !rewritable(first) {
        return None;
    }
    let toks: Vec<_> = code_tokens(sql).collect();
    let name = |t: &crate::lexer::Token| match t.kind {
        Kind::Word => t.text(sql),
        Kind::QuotedIdent => t.text(sql).get(1..t.text(sql).len().saturating_sub(1)).unwrap_or_default(),
        _ => b"",
    };
    let answered_by_sluice =
        |i: usize| processlist && i >= 2 && toks[i - 1].text(sql) == b"." && eq_ignore_case(name(&toks[i - 2]), "information_schema");
    let thread_table = toks.iter().enumerate().any(|(i, t)| {
        (names_server_threads(name(t)) && !(eq_ignore_case(name(t), "PROCESSLIST") && answered_by_sluice(i)))
            || (eq_ignore_case(name(t), "THREADS")
                && i >= 2
                && toks[i - 1].text(sql) == b"."
                && eq_ignore_case(name(&toks[i - 2]), "performance_schema"))
    });
    if thread_table {
        return None;
    }
    // (start, end, replacement) of each edit, in order.
    let literal = id.to_string().into_bytes();
    let mut edits: Vec<(usize, usize, Vec<u8>)> = Vec::new();
    let mut i = 0;
    while i < toks.len() {
        let t = toks[i];
        let call = t.kind == Kind::Word
            && eq_ignore_case(t.text(sql), "CONNECTION_ID")
            && toks.get(i + 1).is_some_and(|p| p.text(sql) == b"(")
            && toks.get(i + 2).is_some_and(|p| p.text(sql) == b")");
        let width = match () {
            _ if call => 3,
            _ if pseudo_thread_id && reads_pseudo_thread_id(&toks, i, sql) => 1,
            _ => {
                i += 1;
                continue;
            }
        };
        let end = toks[i + width - 1].end;
        let mut replacement = literal.clone();
        if sql.get(end).is_some_and(|&b| b.is_ascii_alphanumeric() || b == b'_' || b == b'$' || b >= 0x80) {
            // `CONNECTION_ID()e5` is the call followed by the alias `e5`: keep them apart.
            replacement.push(b' ');
        }
        edits.push((t.start, end, replacement));
        i += width;
    }
    if edits.is_empty() {
        return None;
    }
    // Select items that held a replaced call are named by their text, as the server names them.
    for (first, last) in select_items(sql, &toks) {
        let (start, end) = (toks[first].start, toks[last].end);
        if edits.iter().any(|e| e.0 >= start && e.1 <= end) {
            if let Some(alias) = item_alias(sql, &toks[first..=last]) {
                let at = edits.partition_point(|e| e.0 < end);
                edits.insert(at, (end, end, alias));
            }
        }
    }
    let mut out = Vec::with_capacity(sql.len() + 32);
    let mut copied = 0;
    for (start, end, replacement) in edits {
        out.extend_from_slice(&sql[copied..start]);
        out.extend_from_slice(&replacement);
        copied = end;
    }
    out.extend_from_slice(&sql[copied..]);
    Some(out)
}

/// Is token `i` a read of `@@pseudo_thread_id` (`@@session.` or `@@local.` too), not the
/// target of a SET?
fn reads_pseudo_thread_id(toks: &[Token], i: usize, sql: &[u8]) -> bool {
    let t = toks[i];
    let Some(var) = t.text(sql).strip_prefix(b"@@") else { return false };
    let var = [&b"session."[..], b"local."].iter().find_map(|scope| strip_prefix_ignore_case(var, scope)).unwrap_or(var);
    var.eq_ignore_ascii_case(b"pseudo_thread_id")
        && t.kind == Kind::Variable
        && !toks.get(i + 1).is_some_and(|n| n.text(sql) == b"=" || n.text(sql) == b":")
}

fn strip_prefix_ignore_case<'a>(s: &'a [u8], prefix: &[u8]) -> Option<&'a [u8]> {
    s.get(..prefix.len()).filter(|p| p.eq_ignore_ascii_case(prefix)).map(|_| &s[prefix.len()..])
}

/// The select items of every SELECT in `toks` (indexes of each item's first and last token):
/// from SELECT and its options to the first `FROM`, `INTO`, `;`, set operator or clause at
/// its depth, or the `)` that closes it, split at that depth's commas.
fn select_items(sql: &[u8], toks: &[Token]) -> Vec<(usize, usize)> {
    const OPTIONS: [&str; 11] = [
        "ALL",
        "DISTINCT",
        "DISTINCTROW",
        "HIGH_PRIORITY",
        "STRAIGHT_JOIN",
        "SQL_SMALL_RESULT",
        "SQL_BIG_RESULT",
        "SQL_BUFFER_RESULT",
        "SQL_CACHE",
        "SQL_NO_CACHE",
        "SQL_CALC_FOUND_ROWS",
    ];
    const ENDS: [&str; 14] = [
        "FROM",
        "INTO",
        "UNION",
        "EXCEPT",
        "INTERSECT",
        "WHERE",
        "GROUP",
        "HAVING",
        "ORDER",
        "LIMIT",
        "WINDOW",
        "FOR",
        "LOCK",
        "PROCEDURE",
    ];
    let mut items = Vec::new();
    for (s, _) in toks.iter().enumerate().filter(|(_, t)| is_word(t, sql, "SELECT")) {
        let mut i = s + 1;
        while toks.get(i).is_some_and(|t| OPTIONS.iter().any(|o| is_word(t, sql, o))) {
            i += 1;
        }
        let (mut depth, mut first) = (0usize, i);
        while let Some(t) = toks.get(i) {
            let text = t.text(sql);
            let at_top = depth == 0;
            match text {
                b"(" => depth += 1,
                b")" if depth == 0 => break,
                b")" => depth -= 1,
                _ => {}
            }
            if at_top && (text == b";" || (t.kind == Kind::Word && ENDS.iter().any(|e| is_word(t, sql, e)))) {
                break;
            }
            if at_top && text == b"," {
                if i > first {
                    items.push((first, i - 1));
                }
                first = i + 1;
            }
            i += 1;
        }
        if i > first {
            items.push((first, i - 1));
        }
    }
    items
}

/// ` AS `name`` for a select item with no alias of its own, naming it as the server does: its
/// text as written, comments left out. `None` when it has an alias, or may have one (it ends
/// in a word or string), or holds an executable comment.
fn item_alias(sql: &[u8], item: &[Token]) -> Option<Vec<u8>> {
    let last = item.last()?;
    if !(last.text(sql) == b")" || matches!(last.kind, Kind::Number | Kind::Variable | Kind::HexOrBit)) {
        return None;
    }
    let (start, end) = (item.first()?.start, last.end);
    let mut name = Vec::with_capacity(end - start);
    let mut copied = start;
    for comment in Lexer::new(&sql[..end]).filter(|t| t.kind == Kind::Comment && t.start >= start) {
        name.extend_from_slice(&sql[copied..comment.start]);
        copied = comment.end;
    }
    name.extend_from_slice(&sql[copied..end]);
    if memchr::memmem::find(&name, b"/*").is_some() {
        return None;
    }
    let mut alias = Vec::with_capacity(name.len() + 8);
    alias.extend_from_slice(b" AS `");
    for b in name {
        alias.push(b);
        if b == b'`' {
            alias.push(b'`');
        }
    }
    alias.push(b'`');
    Some(alias)
}

/// `USE db` (alone): the schema the session moves to if the server accepts it.
pub fn parse_use(sql: &[u8]) -> Option<String> {
    if !first_keyword(sql).eq_ignore_ascii_case(b"USE") {
        return None;
    }
    let mut toks = code_tokens(sql).skip(1);
    let t = toks.next()?;
    let name = match t.kind {
        Kind::Word => String::from_utf8_lossy(t.text(sql)).into_owned(),
        Kind::QuotedIdent => {
            let quoted = t.text(sql);
            if quoted.len() < 2 || !quoted.ends_with(b"`") {
                return None;
            }
            String::from_utf8_lossy(&quoted[1..quoted.len() - 1]).replace("``", "`")
        }
        _ => return None,
    };
    match toks.next() {
        None => Some(name),
        Some(t) if t.text(sql) == b";" && toks.next().is_none() => Some(name),
        _ => None,
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn connection_id_stays_the_servers_against_thread_tables() {
        let q = b"SELECT ATTR_VALUE FROM performance_schema.session_account_connect_attrs WHERE PROCESSLIST_ID = CONNECTION_ID()";
        assert_eq!(rewrite_connection_id(q, 7, true, false), None);
        assert_eq!(rewrite_connection_id(b"SELECT * FROM information_schema.PROCESSLIST WHERE ID = connection_id()", 7, true, false), None);
        assert_eq!(
            rewrite_connection_id(b"SELECT * FROM `performance_schema`.`threads` WHERE PROCESSLIST_ID = CONNECTION_ID()", 7, true, true),
            None
        );
        assert!(
            rewrite_connection_id(b"SELECT CONNECTION_ID(), threads FROM t", 7, true, false).is_none(),
            "a column named like a thread table: kept too"
        );
        assert!(rewrite_connection_id(b"DELETE FROM locks WHERE owner = CONNECTION_ID()", 7, true, false).is_some());
    }

    #[test]
    fn use_statements() {
        assert_eq!(parse_use(b"USE shop").as_deref(), Some("shop"));
        assert_eq!(parse_use(b"/* x */ use `we``ird`;").as_deref(), Some("we`ird"));
        assert_eq!(parse_use(b"USE a; SELECT 1"), None);
        assert_eq!(parse_use(b"USE `unterminated"), None);
        assert_eq!(parse_use(b"SELECT 1"), None);
    }
    use super::*;

    fn kill(scope: KillScope, hard: Option<bool>, target: KillTarget) -> Option<Intercept> {
        Some(Intercept::Kill(Kill { scope, hard, target }))
    }

    fn i(sql: &str) -> Option<Intercept> {
        intercept(sql.as_bytes())
    }

    fn user(name: Option<&str>, host: Option<&str>) -> KillTarget {
        KillTarget::User { name: name.map(Into::into), host: host.map(Into::into) }
    }

    #[test]
    fn processlist_table_is_replaced_where_it_is_read() {
        let replaced = |sql: &str| {
            processlist_sites(sql.as_bytes()).map(|s| String::from_utf8(replace_processlist(sql.as_bytes(), &s, b"D")).unwrap())
        };
        assert_eq!(
            replaced("SELECT id FROM information_schema.processlist WHERE state = 'x'").as_deref(),
            Some("SELECT id FROM (D) AS PROCESSLIST WHERE state = 'x'")
        );
        assert_eq!(
            replaced("select p.id from `INFORMATION_SCHEMA`.`PROCESSLIST` p join information_schema.PROCESSLIST as q").as_deref(),
            Some("select p.id from (D) p join (D) as q")
        );
        assert_eq!(
            replaced("SELECT COUNT(*) FROM information_schema.processlist").as_deref(),
            Some("SELECT COUNT(*) FROM (D) AS PROCESSLIST")
        );
        // Not read, or not to be rewritten.
        for kept in [
            "SELECT 1",
            "SELECT * FROM processlist",
            "SELECT 'information_schema.processlist'",
            "CREATE VIEW v AS SELECT * FROM information_schema.processlist",
            "SELECT information_schema.processlist.id FROM information_schema.processlist",
        ] {
            assert_eq!(replaced(kept), None, "{kept}");
        }
        let sql = b"select user, p.Db from information_schema.processlist p where id = 1";
        assert_eq!(spelling(sql, "USER"), Some(&b"user"[..]));
        assert_eq!(spelling(sql, "DB"), Some(&b"Db"[..]));
        assert_eq!(spelling(sql, "ID"), None, "named after FROM only");
        // CONNECTION_ID() compared with sluice's ids is sluice's id too.
        let sql = b"SELECT 1 FROM information_schema.processlist WHERE id = CONNECTION_ID()";
        assert!(rewrite_connection_id(sql, 7, true, false).is_none());
        assert_eq!(
            rewrite_connection_id(sql, 7, true, true).as_deref(),
            Some(&b"SELECT 1 FROM information_schema.processlist WHERE id = 7"[..])
        );
    }

    #[test]
    fn show_status_is_one_statement_of_that_form() {
        for yes in
            ["SHOW STATUS", "  show global status like 'Threads_connected'", "SHOW SESSION STATUS WHERE Value > 0;", "show local status"]
        {
            assert!(show_status(yes.as_bytes()), "{yes}");
        }
        for no in [
            "SHOW SLAVE STATUS",
            "SHOW TABLE STATUS",
            "SHOW ENGINE InnoDB STATUS",
            "SHOW STATUS; SELECT 1",
            "SHOW STATUS LIKE ?",
            "SELECT 'SHOW STATUS'",
            "SHOW VARIABLES",
            "SHO",
        ] {
            assert!(!show_status(no.as_bytes()), "{no}");
        }
    }

    const REFUSE_FORM: Option<Intercept> = Some(Intercept::Refuse(refusal::KILL_FORM));
    const REFUSE_TEXT: Option<Intercept> = Some(Intercept::Refuse(refusal::KILL_IN_TEXT));
    const REFUSE_PROGRAM: Option<Intercept> = Some(Intercept::Refuse(refusal::KILL_IN_PROGRAM));
    const REFUSE_DYNAMIC: Option<Intercept> = Some(Intercept::Refuse(refusal::DYNAMIC_KILL));
    const REFUSE_UNSEEN: Option<Intercept> = Some(Intercept::Refuse(refusal::DYNAMIC_UNSEEN));

    fn variable(name: &str) -> Option<Intercept> {
        Some(Intercept::Dynamic(Dynamic::Variable(name.into())))
    }

    #[test]
    fn kill_forms_sluice_resolves() {
        use KillScope::*;
        assert_eq!(i("KILL 5"), kill(Connection, None, KillTarget::Id(5)));
        assert_eq!(i("kill connection 7;"), kill(Connection, None, KillTarget::Id(7)));
        assert_eq!(i("/* x */ KILL QUERY 9"), kill(Query, None, KillTarget::Id(9)));
        assert_eq!(i("KILL HARD QUERY 9"), kill(Query, Some(true), KillTarget::Id(9)));
        assert_eq!(i("KILL SOFT 3"), kill(Connection, Some(false), KillTarget::Id(3)));
        assert_eq!(i("/*!KILL*/ 3"), kill(Connection, None, KillTarget::Id(3)));
        assert_eq!(i("KILL QUERY ID 4"), kill(Query, None, KillTarget::QueryId(4)));
        assert_eq!(i("KILL QUERY CONNECTION_ID()"), kill(Query, None, KillTarget::Own));
        assert_eq!(i("KILL ?"), kill(Connection, None, KillTarget::Parameter { query_id: false }));
        assert_eq!(i("KILL HARD QUERY ID ?"), kill(Query, Some(true), KillTarget::Parameter { query_id: true }));
        assert_eq!(i("KILL ? + 1"), Some(Intercept::Refuse(refusal::KILL_FORM)));
        let expr = |text: &str, query_id| KillTarget::Expression { text: text.into(), query_id };
        assert_eq!(i("KILL QUERY ID @id"), kill(Query, None, expr("@id", true)));
        assert_eq!(i("kill @`a b`"), kill(Connection, None, expr("@`a b`", false)));
        assert_eq!(i("KILL QUERY 37 + /* c */ 0 ;"), kill(Query, None, expr("37 + /* c */ 0", false)));
        assert_eq!(i("KILL (37)"), kill(Connection, None, expr("(37)", false)));
        assert_eq!(i("kill query id user 'foo'"), kill(Query, None, expr("user 'foo'", true)));
        assert_eq!(i("KILL USER bob"), kill(Connection, None, user(Some("bob"), None)));
        assert_eq!(i("KILL QUERY USER 'bob'@'10.0.0.1'"), kill(Query, None, user(Some("bob"), Some("10.0.0.1"))));
        assert_eq!(i("KILL HARD CONNECTION USER `b``ob`@localhost;"), kill(Connection, Some(true), user(Some("b`ob"), Some("localhost"))));
        assert_eq!(i("KILL USER bob @ '%'"), kill(Connection, None, user(Some("bob"), None)));
        assert_eq!(i("KILL USER CURRENT_USER()"), kill(Connection, None, user(None, None)));
    }

    #[test]
    fn kill_forms_sluice_refuses() {
        for sql in ["KILL", "KILL QUERY", "KILL 5;;", "KILL ? + 1", "KILL QUERY ID (?)"] {
            assert_eq!(i(sql), REFUSE_FORM, "{sql}");
        }
        assert_eq!(
            i("KILL 99999999999999999999999"),
            kill(KillScope::Connection, None, KillTarget::Expression { text: "99999999999999999999999".into(), query_id: false }),
            "beyond u64: the server's conversion decides"
        );
        assert_eq!(i("KILL USER"), REFUSE_FORM);
        assert_eq!(
            i("KILL QUERY ID CONNECTION_ID()"),
            kill(KillScope::Query, None, KillTarget::Expression { text: "CONNECTION_ID()".into(), query_id: true })
        );
        for sql in [
            "SELECT 1; KILL QUERY 37",
            "KILL 5; SELECT 1",
            "BEGIN NOT ATOMIC KILL 5; END",
            "IF 1 THEN KILL 5; END IF",
            "SET STATEMENT max_statement_time=1 FOR KILL 5",
            "SELECT 1 /*! ; KILL 5 */",
        ] {
            assert_eq!(i(sql), REFUSE_TEXT, "{sql}");
        }
        for sql in [
            "CREATE PROCEDURE p() KILL 5",
            "CREATE DEFINER = `root`@`%` PROCEDURE p() BEGIN KILL 5; END",
            "CREATE OR REPLACE DEFINER=CURRENT_USER() EVENT e ON SCHEDULE EVERY 1 DAY DO KILL 5",
            "create trigger t before insert on x for each row kill 5",
            "ALTER EVENT e DO KILL 5",
        ] {
            assert_eq!(i(sql), REFUSE_PROGRAM, "{sql}");
        }
    }

    #[test]
    fn dynamic_sql_is_seen_or_refused() {
        assert_eq!(i("EXECUTE IMMEDIATE 'KILL 5'"), REFUSE_DYNAMIC);
        assert_eq!(i("EXECUTE IMMEDIATE 'KI' 'LL 5'"), REFUSE_DYNAMIC, "adjacent literals concatenate");
        assert_eq!(i(r"EXECUTE IMMEDIATE 'K\ILL 5'"), REFUSE_DYNAMIC, "escapes undone");
        assert_eq!(i("PREPARE s FROM _utf8mb4'kill 5'"), REFUSE_DYNAMIC);
        assert_eq!(i("PREPARE s FROM 'SHOW PROCESSLIST'"), REFUSE_DYNAMIC);
        assert_eq!(i("EXECUTE IMMEDIATE 'EXECUTE IMMEDIATE ''KILL 5'''"), REFUSE_DYNAMIC);
        assert_eq!(i("EXECUTE IMMEDIATE 'SELECT 1; KILL 5'"), REFUSE_TEXT);
        // An expression is evaluated by the session, which checks its value.
        let expression = |head: &str, e: &str, tail: &str, prepare| {
            let (head, expression, tail) = (head.into(), e.into(), tail.into());
            Some(Intercept::Dynamic(Dynamic::Expression { head, expression, tail, prepare }))
        };
        assert_eq!(i("EXECUTE IMMEDIATE CONCAT('KI', 'LL 5')"), expression("EXECUTE IMMEDIATE ", "CONCAT('KI', 'LL 5')", "", false));
        assert_eq!(
            i("execute immediate CONVERT(@q USING latin1) USING 1, 2;"),
            expression("execute immediate ", "CONVERT(@q USING latin1)", " USING 1, 2;", false)
        );
        assert_eq!(i("PREPARE s FROM 'SELECT ' || @x"), expression("PREPARE s FROM ", "'SELECT ' || @x", "", true));
        assert_eq!(i("PREPARE s FROM @x + 0"), expression("PREPARE s FROM ", "@x + 0", "", true));
        assert_eq!(i("EXECUTE IMMEDIATE X'4B494C4C2035'"), expression("EXECUTE IMMEDIATE ", "X'4B494C4C2035'", "", false));
        assert_eq!(
            i("EXECUTE IMMEDIATE 'SELECT CONNECTION_ID()'"),
            expression("EXECUTE IMMEDIATE ", "'SELECT CONNECTION_ID()'", "", false),
            "the session answers the id in the text it runs"
        );
        assert_eq!(i("EXECUTE IMMEDIATE CONCAT('SELECT ', KILL)"), REFUSE_TEXT, "a KILL anywhere is seen");
        assert_eq!(i("EXECUTE IMMEDIATE 'SELECT 1', 'x'"), REFUSE_UNSEEN, "not one expression");
        assert_eq!(i("EXECUTE IMMEDIATE"), None, "the server's syntax error");
        assert_eq!(i("prepare stmt1 from "), None, "the server's syntax error");
        assert_eq!(i("EXECUTE IMMEDIATE USING 1"), None, "the server's syntax error");
        assert_eq!(i("EXECUTE IMMEDIATE 'EXECUTE IMMEDIATE CONCAT(1)'"), REFUSE_UNSEEN, "nested: not evaluated");
        assert_eq!(i("EXECUTE IMMEDIATE CONCAT('SELECT 1'); EXECUTE IMMEDIATE 'SELECT 2'"), REFUSE_UNSEEN);
        assert_eq!(i("PREPARE s FROM @a; EXECUTE s"), REFUSE_UNSEEN, "the variable may change within the text");
        assert_eq!(i("SELECT 1; EXECUTE IMMEDIATE @@init_connect"), REFUSE_UNSEEN);
        assert_eq!(i("SET STATEMENT sql_mode='' FOR EXECUTE IMMEDIATE @x"), variable("x"));
        assert_eq!(i("PREPARE s FROM @sql"), variable("sql"));
        assert_eq!(i("EXECUTE IMMEDIATE @`my var` USING 1"), variable("my var"));
        assert_eq!(i("EXECUTE IMMEDIATE 'SELECT ?' USING 1"), None);
        assert_eq!(i("PREPARE s FROM 'SELECT 1'; EXECUTE s; DEALLOCATE PREPARE s"), None);
        // A compound statement's dynamic SQL runs behind a guard the server evaluates.
        let guarded = |sql: &str| match i(sql) {
            Some(Intercept::Dynamic(Dynamic::Guarded { sql, .. })) => String::from_utf8(sql).unwrap(),
            other => panic!("not guarded: {other:?}"),
        };
        let guard = |source: &str, statement: &str| {
            format!(
                "BEGIN IF ({source}) RLIKE '{GUARD_PATTERN}' THEN SIGNAL SQLSTATE '0A000' SET MYSQL_ERRNO = 1235, \
                 MESSAGE_TEXT = '{}'; END IF; {statement}; END",
                refusal::GUARDED_DYNAMIC
            )
        };
        assert_eq!(
            guarded("BEGIN NOT ATOMIC PREPARE s FROM CONCAT('KI','LL 5'); EXECUTE s; END"),
            format!("BEGIN NOT ATOMIC {}; EXECUTE s; END", guard("CONCAT('KI','LL 5')", "PREPARE s FROM CONCAT('KI','LL 5')"))
        );
        assert_eq!(
            guarded("FOR r IN (SELECT 1 AS c) DO EXECUTE IMMEDIATE CONCAT('SET NAMES ', r.c) ; SELECT r.c; END FOR"),
            format!(
                "FOR r IN (SELECT 1 AS c) DO {} ; SELECT r.c; END FOR",
                guard("CONCAT('SET NAMES ', r.c)", "EXECUTE IMMEDIATE CONCAT('SET NAMES ', r.c)")
            )
        );
        assert_eq!(
            guarded("lbl: BEGIN NOT ATOMIC IF 1 THEN EXECUTE IMMEDIATE @q USING 1, (2); END IF; PREPARE s FROM @`a b`; END"),
            format!(
                "lbl: BEGIN NOT ATOMIC IF 1 THEN {}; END IF; {}; END",
                guard("@q", "EXECUTE IMMEDIATE @q USING 1, (2)"),
                guard("@`a b`", "PREPARE s FROM @`a b`")
            )
        );
        // Backslashes: both readings put the guards in the same places.
        assert!(guarded(r"BEGIN NOT ATOMIC SELECT 'a'; EXECUTE IMMEDIATE @q; END").contains("RLIKE"));
        // Evaluated twice (the guard, then the statement): only expressions that cannot differ.
        assert_eq!(i("BEGIN NOT ATOMIC EXECUTE IMMEDIATE CONCAT('SELECT ', RAND()); END"), REFUSE_UNSEEN);
        assert_eq!(i("BEGIN NOT ATOMIC EXECUTE IMMEDIATE (SELECT q FROM t); END"), REFUSE_UNSEEN);
        assert_eq!(i("BEGIN NOT ATOMIC EXECUTE IMMEDIATE @q := 'SELECT 1'; END"), REFUSE_UNSEEN);
        assert_eq!(i("BEGIN NOT ATOMIC EXECUTE IMMEDIATE f('x'); END"), REFUSE_UNSEEN);
        // A handler's statement does not start after a word sluice knows: refused, not missed.
        assert_eq!(i("BEGIN NOT ATOMIC DECLARE CONTINUE HANDLER FOR SQLEXCEPTION PREPARE s FROM @q; SELECT 1; END"), REFUSE_UNSEEN);
        assert_eq!(i("BEGIN NOT ATOMIC EXECUTE IMMEDIATE @q END"), REFUSE_UNSEEN, "no `;`: no statement end to guard up to");
        // A literal is read, and a KILL in it refused as before; a KILL in the text too.
        assert_eq!(i("BEGIN NOT ATOMIC EXECUTE IMMEDIATE 'KILL 5'; END"), REFUSE_DYNAMIC);
        assert_eq!(i("BEGIN NOT ATOMIC EXECUTE IMMEDIATE @q; KILL 5; END"), REFUSE_TEXT);
        // Not a compound statement: `BEGIN` starts a transaction, and other texts are refused.
        assert_eq!(i("BEGIN; EXECUTE IMMEDIATE @q"), REFUSE_UNSEEN);
        // A stored program's dynamic SQL runs later: literals are checked, the rest cannot be.
        assert_eq!(i("CREATE PROCEDURE p(q TEXT) BEGIN PREPARE s FROM q; EXECUTE s; END"), None);
        assert_eq!(i("CREATE PROCEDURE p() BEGIN EXECUTE IMMEDIATE 'KILL 5'; END"), REFUSE_DYNAMIC);
        // Not dynamic SQL: a column named prepare, and `execute` of a prepared statement.
        assert_eq!(i("SELECT prepare x FROM t"), None);
        assert_eq!(i("EXECUTE s USING @a"), None);
    }

    #[test]
    fn the_word_kill_elsewhere_is_not_a_kill() {
        for sql in [
            "SELECT 'kill 5'",
            "SELECT `kill` FROM t",
            "SELECT t.kill FROM t",
            "SELECT @kill",
            "INSERT INTO skills VALUES ('a;b')",
            "SELECT 1 -- KILL 5",
            "SELECT 1 /* ; KILL 5 */",
            "SELECT 1;",
        ] {
            assert_eq!(i(sql), None, "{sql}");
        }
    }

    #[test]
    fn backslash_readings_that_disagree_are_refused() {
        // Under NO_BACKSLASH_ESCAPES (or a GBK-style character set) the string ends at the
        // second quote and the KILL is code.
        let ambiguous = Some(Intercept::Refuse(refusal::AMBIGUOUS));
        assert_eq!(i(r"SELECT 'a\'; KILL 5; -- '"), ambiguous);
        assert_eq!(intercept(br"DESCRIBE 'a\' KILL 5 '"), ambiguous);
        assert_eq!(intercept(br"CREATE PROCEDURE p() COMMENT 'a\' KILL 5 -- '"), ambiguous);
        assert_eq!(intercept(br"SELECT 'a\' KILL 5 '"), None, "a KILL cannot hide in a single SELECT");
        assert_eq!(intercept(br"INSERT INTO t VALUES ('don\'t kill')"), None);
        // A session that reads backslashes as escapes: one statement of ASCII with no `"` has
        // the server's reading only.
        let prepare = br"prepare s from 'select * from t1 where a like \'a\\%\' escape ?'";
        assert_eq!(intercept(prepare), ambiguous);
        assert_eq!(intercept_as(prepare, true), None);
        assert_eq!(intercept_as(br"SELECT 'a\'; KILL 5; -- '", true), None, "with escapes, one statement: a string");
        assert_eq!(intercept_as(br#"DESCRIBE "a\" KILL 5 ""#, true), ambiguous, "ANSI_QUOTES may be on");
        assert_eq!(intercept_as(br"DESCRIBE 'a\' KILL 5 '", true), None, "the server reads one string");
        // mysqldump's INSERTs: `;`, `"` and KILL inside escaped strings, one statement.
        let dump = br#"INSERT INTO `help_topic` VALUES (1,'KILL','Kill a thread; say \"KILL 5\" or \'KILL QUERY 5\';'),(2,'x','y');"#;
        assert_eq!(intercept_as(dump, true), None);
        assert_eq!(intercept(dump), ambiguous);
        // Several statements: one may change the mode the next is read in.
        assert_eq!(intercept_as(br"SET sql_mode = 'NO_BACKSLASH_ESCAPES'; SELECT 'a\'; KILL 5; -- '", true), ambiguous);
        assert_eq!(intercept(br"DESCRIBE 'it\'s'"), None);
    }

    #[test]
    fn pre_check_needs_a_keyword() {
        assert!(mentions_keywords(b"select 1; KilL 5"));
        assert!(mentions_keywords(b"x PREPARE"));
        assert!(mentions_keywords(b"show processList"));
        assert!(mentions_keywords(b"execute Immediate"));
        assert!(!mentions_keywords(b"SELECT 1; SELECT 'kil', 'prep', 'immediat'"));
        assert!(!mentions_keywords(b"k"));
    }

    #[test]
    fn processlist() {
        assert_eq!(i("SHOW PROCESSLIST"), Some(Intercept::Processlist { full: false }));
        assert_eq!(i("show full processlist;"), Some(Intercept::Processlist { full: true }));
        assert_eq!(i("SHOW PROCESSLIST; SELECT 1"), Some(Intercept::Refuse(refusal::PROCESSLIST_IN_TEXT)));
        assert_eq!(i("SELECT 1; SHOW FULL PROCESSLIST"), Some(Intercept::Refuse(refusal::PROCESSLIST_IN_TEXT)));
        assert_eq!(i("SHOW TABLES"), None);
    }

    #[test]
    fn connection_id_rewrites() {
        let r = |s: &str| rewrite_connection_id(s.as_bytes(), 42, true, false).map(|v| String::from_utf8(v).unwrap());
        assert_eq!(r("SELECT CONNECTION_ID()").as_deref(), Some("SELECT 42 AS `CONNECTION_ID()`"));
        assert_eq!(r("select connection_id(), 1").as_deref(), Some("select 42 AS `connection_id()`, 1"));
        assert_eq!(r("SELECT * FROM t WHERE id = CONNECTION_ID()").as_deref(), Some("SELECT * FROM t WHERE id = 42"));
        assert_eq!(r("SELECT CONNECTION_ID() AS me").as_deref(), Some("SELECT 42 AS me"));
        assert_eq!(r("((SELECT CONNECTION_ID()))").as_deref(), Some("((SELECT 42 AS `CONNECTION_ID()`))"));
        assert_eq!(r("(CREATE PROCEDURE p() SELECT CONNECTION_ID())"), None);
        assert_eq!(r("SELECT f(1, CONNECTION_ID())").as_deref(), Some("SELECT f(1, 42) AS `f(1, CONNECTION_ID())`"));
        // A select item that holds the call is named by its own text, comments left out.
        assert_eq!(r("select @a - connection_id()").as_deref(), Some("select @a - 42 AS `@a - connection_id()`"));
        assert_eq!(
            r("SELECT DISTINCT 1 + /* c */ CONNECTION_ID(), (SELECT connection_id() x) FROM t WHERE a = CONNECTION_ID()").as_deref(),
            Some("SELECT DISTINCT 1 + /* c */ 42 AS `1 +  CONNECTION_ID()`, (SELECT 42 x) AS `(SELECT connection_id() x)` FROM t WHERE a = 42")
        );
        assert_eq!(r("SELECT connection_id() IS NULL").as_deref(), Some("SELECT 42 IS NULL"), "may be an alias: left alone");
        assert_eq!(r("SELECT connection_id() + 1 INTO @x").as_deref(), Some("SELECT 42 + 1 AS `connection_id() + 1` INTO @x"));
        // @@pseudo_thread_id is the thread id too, unless assigned.
        assert_eq!(r("select @@pseudo_thread_id    ").as_deref(), Some("select 42 AS `@@pseudo_thread_id`    "));
        assert_eq!(r("SET @t = @@SESSION.pseudo_thread_id").as_deref(), Some("SET @t = 42"));
        assert_eq!(r("SET @@pseudo_thread_id = 5"), None);
        assert_eq!(r("SELECT @@global.pseudo_thread_id"), None);
        assert_eq!(rewrite_connection_id(b"SELECT @@pseudo_thread_id", 42, false, false), None, "the session set it: the server's");
        assert_eq!(r("KILL CONNECTION_ID()").as_deref(), Some("KILL 42"));
        assert_eq!(r("SELECT CONNECTION_ID()e5").as_deref(), Some("SELECT 42 e5"));
        assert_eq!(r("SELECT CONNECTION_ID()abc, 1").as_deref(), Some("SELECT 42 abc, 1"));
        assert_eq!(r("SELECT CONNECTION_ID(/*`*/) FROM t").as_deref(), Some("SELECT 42 AS `CONNECTION_ID()` FROM t"));
        assert_eq!(r("SELECT 'CONNECTION_ID()'"), None);
        assert_eq!(r("SELECT `connection_id`"), None);
        assert_eq!(r("CREATE PROCEDURE p() SELECT CONNECTION_ID()"), None);
        assert_eq!(r("SELECT 1"), None);
    }

    #[test]
    fn pre_check_finds_every_spelling() {
        assert!(mentions_connection_id(b"select Connection_Id()"));
        assert!(mentions_connection_id(b"connection_id"));
        assert!(!mentions_connection_id(b"select _id, connection_x, connectionid"));
        assert!(!mentions_connection_id(b"_"));
    }

    #[test]
    fn first_keyword_skips_comments() {
        assert_eq!(first_keyword(b"/* hi */ -- x\n select 1"), b"select");
        assert_eq!(first_keyword(b"  "), b"");
    }
}

#[cfg(test)]
mod keyword_watch_tests {
    use super::KeywordWatch;

    fn watch(before: Option<u8>, parts: &[&[u8]]) -> bool {
        let mut w = KeywordWatch::after(before);
        parts.iter().for_each(|p| w.feed(p));
        w.found(true)
    }

    #[test]
    fn finds_whole_words_across_slices() {
        assert!(watch(None, &[b"1; KI", b"LL QUERY 5"]));
        assert!(watch(None, &[b"xx;kill"]), "at the end of the text");
        assert!(watch(Some(b' '), &[b"EXECUTE IMMEDIATE @v"]));
        assert!(watch(None, &[b"'a'/**/Prepare s FROM 'x'"]));
        assert!(watch(None, &[b"SHOW FULL PROCESSLIST"]));
        assert!(watch(None, &[b"'quoted kill counts too'"]), "no lexer over a stream");
    }

    #[test]
    fn watches_the_words_intercept_looks_for() {
        for w in super::INTERCEPT_WORDS {
            assert!(super::mentions_keywords(w), "{}", String::from_utf8_lossy(w));
            assert!(w.len() <= super::LONGEST_INTERCEPT_WORD);
            assert!(watch(None, &[w]));
        }
    }

    #[test]
    fn ignores_longer_words_and_word_continuations() {
        assert!(!watch(None, &[b"skill killer prepared killkill processlists"]));
        assert!(!watch(Some(b's'), &[b"kill more"]), "continues the head's last word: `skill`");
        assert!(!watch(None, &[b"ki", b"l", b"ls"]));
        let mut w = KeywordWatch::after(None);
        w.feed(b"x kill");
        assert!(!w.found(false), "a word still arriving may go on (`killer`)");
        w.feed(b"er");
        assert!(!w.found(true));
    }
}
