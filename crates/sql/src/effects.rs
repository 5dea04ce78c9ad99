//! What a statement may do to session state, from its text alone: part of step ② session
//! (state tracking for multiplexing). The session reads back the system and user variables a
//! statement may have set, to replay them on another backend connection later, and pins the
//! client to its backend connection for state that cannot be replayed (temporary tables, table
//! and named locks, XA, handlers, roles, prepared statements).
//!
//! Runs on every statement: a byte pre-check settles most statements without lexing further or
//! allocating; the others get one pass over the lexer's code tokens (so a keyword inside a
//! string or a comment does not count; executable comments are code).

use std::borrow::Cow;

use crate::classify::first_keyword;
use crate::lexer::{Kind, Lexer, Token};

/// `CREATE [OR REPLACE] TEMPORARY TABLE` (and MariaDB's `TEMPORARY SEQUENCE`, a temporary
/// table underneath).
pub const TEMP_TABLE: u32 = 1;
/// `LOCK TABLE(S)`, `FLUSH TABLE(S) … WITH READ LOCK | FOR EXPORT`, `LOCK INSTANCE FOR BACKUP`,
/// `BACKUP STAGE` (but `END`), `BACKUP LOCK`.
pub const LOCK_TABLES: u32 = 1 << 1;
/// `UNLOCK TABLE(S)`, `UNLOCK INSTANCE`, `BACKUP STAGE END`, `BACKUP UNLOCK`.
pub const UNLOCK_TABLES: u32 = 1 << 2;
/// A `RELEASE_ALL_LOCKS(` call.
pub const RELEASE_ALL_LOCKS: u32 = 1 << 3;
/// The `SQL_CALC_FOUND_ROWS` keyword.
pub const CALC_FOUND_ROWS: u32 = 1 << 4;
/// `XA START | BEGIN`.
pub const XA_BEGIN: u32 = 1 << 5;
/// `XA COMMIT | ROLLBACK`.
pub const XA_END: u32 = 1 << 6;
/// `HANDLER t OPEN`.
pub const HANDLER_OPEN: u32 = 1 << 7;
/// `SET TRANSACTION …` without SESSION/GLOBAL, or `SET @@tx_isolation` / `@@transaction_isolation`
/// / `@@tx_read_only` / `@@transaction_read_only` without a scope: applies to the next
/// transaction only.
pub const NEXT_TRANSACTION: u32 = 1 << 8;
/// A SET of insert_id, last_insert_id, identity, rand_seed1 or rand_seed2 (consumed by the next
/// statement; not listed in `sysvars`).
pub const ONE_SHOT: u32 = 1 << 9;
/// A `LAST_INSERT_ID(` call, or a read of `@@last_insert_id` / `@@identity`.
pub const USES_LAST_INSERT_ID: u32 = 1 << 10;
/// A USE statement anywhere in the text.
pub const USE_SCHEMA: u32 = 1 << 11;
/// `SET NAMES`, `SET CHARACTER SET`, `SET CHARSET` (`sysvars` also gets the four variables they
/// set).
pub const CHARSET: u32 = 1 << 12;
/// `SET ROLE`, `SET DEFAULT ROLE`: cannot be replayed.
pub const SET_ROLE: u32 = 1 << 13;
/// Reserved, never set: no SQL statement resets the session wholesale (that is the protocol's
/// COM_RESET_CONNECTION and COM_CHANGE_USER).
pub const SESSION_RESET: u32 = 1 << 14;
/// A SET statement the parser could not follow, or a MariaDB compound statement run directly
/// (`BEGIN NOT ATOMIC …`, `IF …`, labelled blocks), or a variable name that is not UTF-8: pin
/// conservatively.
pub const UNKNOWN_SET: u32 = 1 << 15;
/// `SAVEPOINT name`: under autocommit=0 the server keeps it before any transactional table is
/// touched, while its status flags still say "no transaction".
pub const SAVEPOINT: u32 = 1 << 16;
/// `COMMIT` or `ROLLBACK` (not `ROLLBACK TO`): the transaction and its savepoints end.
pub const TRANSACTION_END: u32 = 1 << 17;
/// Accounts or privileges change: `GRANT`, `REVOKE`, `CREATE | DROP | RENAME | ALTER USER`,
/// `CREATE | DROP ROLE`, `SET PASSWORD`, `SET DEFAULT ROLE`, `FLUSH PRIVILEGES`. A backend
/// connection that logged in before it keeps the account and global privileges it had.
pub const ACCOUNTS: u32 = 1 << 18;
/// A global variable is set (`SET GLOBAL`, `@@global.`, `PERSIST`, `SET GLOBAL TRANSACTION`):
/// a backend connection opened before it keeps the session values it took from the old globals.
pub const GLOBALS: u32 = 1 << 19;
/// `DROP DATABASE | SCHEMA`: the server unsets the session's default database when it is the
/// one dropped.
pub const DROP_SCHEMA: u32 = 1 << 20;
/// `GET DIAGNOSTICS`: reads the diagnostics area the previous statement left, and leaves it
/// for the next one (which may read it again).
pub const DIAGNOSTICS: u32 = 1 << 21;

/// What one COM_QUERY text (possibly several statements separated by `;`) may do to session
/// state.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Effects {
    /// Bit set of the consts of this module.
    pub flags: u32,
    /// Session system variables the text may set (lower-case names without @@/session. prefix),
    /// e.g. `SET sql_mode=..., @@session.time_zone=...` -> ["sql_mode", "time_zone"].
    /// Deduplicated, in order of first appearance.
    pub sysvars: Vec<Box<str>>,
    /// User variables the text may assign, as the token text to read them back with (`@x`,
    /// `` @`a b` ``, `@'q'`), plain names lower-cased (user variable names are case-insensitive).
    /// Deduplicated.
    pub user_vars: Vec<Box<str>>,
    /// Net GET_LOCK( calls minus RELEASE_LOCK( calls in the text (can be negative).
    pub named_locks: i32,
    /// Names given in `PREPARE name FROM ...` (unquoted, lower-cased). A name deallocated later
    /// in the same text is taken out again, so the session applies `deallocated` first, then
    /// `prepared`.
    pub prepared: Vec<Box<str>>,
    /// Names given in `DEALLOCATE | DROP PREPARE name` (unquoted, lower-cased).
    pub deallocated: Vec<Box<str>>,
}

impl Effects {
    /// Nothing at all.
    pub fn is_empty(&self) -> bool {
        self.flags == 0
            && self.sysvars.is_empty()
            && self.user_vars.is_empty()
            && self.named_locks == 0
            && self.prepared.is_empty()
            && self.deallocated.is_empty()
    }
}

/// What `sql` may do to session state. Never panics, any bytes accepted; allocates only for
/// names it reports.
pub fn effects(sql: &[u8]) -> Effects {
    let whole_text = mentions_effects(sql);
    if !whole_text && !opens_effect_statement(first_keyword(sql)) {
        return Effects::default();
    }
    full_pass(sql, whole_text)
}

/// First keywords whose statement may have effects by itself. Others only through a user
/// variable, one of the functions or a later statement, which `mentions_effects` finds.
fn opens_effect_statement(word: &[u8]) -> bool {
    [
        "SET",
        "CREATE",
        "LOCK",
        "UNLOCK",
        "FLUSH",
        "XA",
        "HANDLER",
        "PREPARE",
        "DEALLOCATE",
        "DROP",
        "USE",
        "BACKUP",
        "SAVEPOINT",
        "COMMIT",
        "ROLLBACK",
        "GRANT",
        "REVOKE",
        "RENAME",
        "ALTER",
        // GET DIAGNOSTICS reads what the previous statement left (DIAGNOSTICS).
        "GET",
    ]
    .iter()
    .any(|k| word.eq_ignore_ascii_case(k.as_bytes()))
}

/// Cheap pre-check: an `@`, a `;` followed by more text, or (around an `_`) a name starting
/// like GET_LOCK, RELEASE_LOCK, RELEASE_ALL_LOCKS, SQL_CALC_FOUND_ROWS or LAST_INSERT_ID,
/// anywhere (strings and comments included: the lexer settles those). False means a single
/// statement whose only possible effects come from its first keyword.
fn mentions_effects(sql: &[u8]) -> bool {
    for i in memchr::memchr3_iter(b'@', b'_', b';', sql) {
        match sql[i] {
            b'@' => return true,
            // Nothing but spacing after the first `;` means nothing after it at all.
            b';' => return sql[i + 1..].iter().any(|c| !c.is_ascii_whitespace()),
            _ => {
                let around = |before: &[u8], after: &[u8]| {
                    i >= before.len()
                        && sql[i - before.len()..i].eq_ignore_ascii_case(before)
                        && sql.get(i + 1..i + 1 + after.len()).is_some_and(|a| a.eq_ignore_ascii_case(after))
                };
                if around(b"get", b"lock") || around(b"release", b"") || around(b"sql", b"calc") || around(b"last", b"insert") {
                    return true;
                }
            }
        }
    }
    false
}

/// Variables that only feed the next statement.
const ONE_SHOT_VARS: [&str; 5] = ["insert_id", "last_insert_id", "identity", "rand_seed1", "rand_seed2"];
/// What SET NAMES and SET CHARACTER SET change.
const CHARSET_VARS: [&str; 4] = ["character_set_client", "character_set_connection", "collation_connection", "character_set_results"];
/// Set through `@@name` without a scope, these apply to the next transaction only (MySQL's
/// documented rule; MariaDB sets the session value too, so the name is listed as well).
const TRANSACTION_VARS: [&str; 4] = ["tx_isolation", "transaction_isolation", "tx_read_only", "transaction_read_only"];
/// Words that start a stored program's compound body (`;`-separated statements inside).
const COMPOUND_WORDS: [&str; 6] = ["BEGIN", "IF", "CASE", "LOOP", "WHILE", "REPEAT"];

#[derive(Clone, Copy, PartialEq, Eq)]
enum Scope {
    Session,
    /// GLOBAL, PERSIST, PERSIST_ONLY: nothing for this session.
    Global,
}

fn next_code(lexer: &mut Lexer<'_>) -> Option<Token> {
    lexer.find(|t| t.kind != Kind::Comment)
}

/// Code tokens. Lookahead lexes ahead on a copy of the lexer (cheap: a slice and a position), so
/// the hot loop (`rest_of_statement`), which never looks ahead, keeps no lookahead slot filled.
#[derive(Clone)]
struct Tokens<'a> {
    lexer: Lexer<'a>,
}

impl Tokens<'_> {
    fn peek(&self) -> Option<Token> {
        next_code(&mut self.lexer.clone())
    }

    fn peek2(&self) -> Option<Token> {
        let mut ahead = self.lexer.clone();
        next_code(&mut ahead)?;
        next_code(&mut ahead)
    }

    fn bump(&mut self) -> Option<Token> {
        next_code(&mut self.lexer)
    }
}

/// A token of interest to `note` whose meaning depends on the next one.
#[derive(Clone, Copy)]
enum Pending {
    None,
    /// A function name: a call if `(` follows.
    Call(Call),
    /// `@x`, then `@x :`: an assignment if `:=` follows.
    UserVar(Token),
    UserVarColon(Token),
    /// After INTO, or after `INTO @a,`: a user variable here is a target.
    IntoTarget,
    /// After `INTO @a`: a `,` continues the list.
    IntoListed,
}

#[derive(Clone, Copy)]
enum Call {
    GetLock,
    ReleaseLock,
    ReleaseAllLocks,
    LastInsertId,
}

fn full_pass(sql: &[u8], whole_text: bool) -> Effects {
    let mut p = Parser {
        sql,
        toks: Tokens { lexer: Lexer::new(sql) },
        out: Effects::default(),
        depth: 0,
        assigns_any_user_var: false,
        pending: Pending::None,
    };
    while p.toks.peek().is_some() {
        p.depth = 0;
        p.assigns_any_user_var = false;
        p.statement();
        if !whole_text {
            // One statement with no `@` and no function of interest: its head said it all.
            break;
        }
        p.rest_of_statement();
    }
    p.out
}

struct Parser<'a> {
    sql: &'a [u8],
    toks: Tokens<'a>,
    out: Effects,
    /// Parenthesis depth in the current statement: `,` and `;` inside parentheses separate
    /// nothing.
    depth: u32,
    /// LOAD DATA (column list), CALL (OUT parameters), GET DIAGNOSTICS: any user variable named
    /// may be a target.
    assigns_any_user_var: bool,
    pending: Pending,
}

impl Parser<'_> {
    fn is_word(&self, t: Option<Token>, kw: &str) -> bool {
        t.is_some_and(|t| t.kind == Kind::Word && t.text(self.sql).eq_ignore_ascii_case(kw.as_bytes()))
    }

    fn is_punct(&self, t: Option<Token>, c: u8) -> bool {
        t.is_some_and(|t| t.kind == Kind::Punct && t.text(self.sql) == [c])
    }

    /// The next token, consumed if `wanted`.
    fn eat_if(&mut self, wanted: impl Fn(&Self, Token) -> bool) -> Option<Token> {
        let before = self.toks.clone();
        let t = self.toks.bump().filter(|&t| wanted(self, t));
        if t.is_none() {
            self.toks = before;
        }
        t
    }

    fn eat_word(&mut self, kw: &str) -> bool {
        self.eat_if(|p, t| p.is_word(Some(t), kw)).is_some()
    }

    /// The next token if it is a name (word or `quoted`), consumed.
    fn eat_name(&mut self) -> Option<Token> {
        self.eat_if(|_, t| matches!(t.kind, Kind::Word | Kind::QuotedIdent))
    }

    fn at_statement_end(&self) -> bool {
        match self.toks.peek() {
            None => true,
            t => self.depth == 0 && self.is_punct(t, b';'),
        }
    }

    /// The next token unless it ends the statement (the `;` stays for `rest_of_statement`).
    fn next_in_statement(&mut self) -> Option<Token> {
        let before = self.toks.clone();
        let t = self.toks.bump()?;
        if self.depth == 0 && self.is_punct(Some(t), b';') {
            self.toks = before;
            return None;
        }
        Some(t)
    }

    fn flag(&mut self, f: u32) {
        self.out.flags |= f;
    }

    fn drain(&mut self) {
        while self.toks.bump().is_some() {}
    }

    /// The statement's head, by its first keyword. Whatever it leaves is scanned by
    /// `rest_of_statement`.
    fn statement(&mut self) {
        let sql = self.sql;
        // A loop for `SET STATEMENT … FOR <statement>`, nested any depth without recursion.
        loop {
            self.pending = Pending::None;
            let Some(first) = self.toks.peek().filter(|t| t.kind == Kind::Word) else { return };
            let is = |kw: &str| first.text(sql).eq_ignore_ascii_case(kw.as_bytes());
            if is("SET") {
                self.toks.bump();
                if self.set() {
                    continue;
                }
            } else if is("CREATE") {
                self.toks.bump();
                self.create();
            } else if is("LOCK") {
                self.flag(LOCK_TABLES);
            } else if is("UNLOCK") {
                self.flag(UNLOCK_TABLES);
            } else if is("FLUSH") {
                self.toks.bump();
                self.flush();
            } else if is("XA") {
                self.toks.bump();
                if self.eat_word("START") || self.eat_word("BEGIN") {
                    self.flag(XA_BEGIN);
                } else if self.eat_word("COMMIT") || self.eat_word("ROLLBACK") {
                    self.flag(XA_END);
                }
            } else if is("HANDLER") {
                self.toks.bump();
                self.handler();
            } else if is("PREPARE") {
                self.toks.bump();
                self.prepare();
            } else if is("GRANT") || is("REVOKE") {
                self.flag(ACCOUNTS);
            } else if is("RENAME") || is("ALTER") {
                self.toks.bump();
                if self.eat_word("USER") {
                    self.flag(ACCOUNTS);
                }
            } else if is("DEALLOCATE") || is("DROP") {
                self.toks.bump();
                if is("DROP") && (self.eat_word("USER") || self.eat_word("ROLE")) {
                    self.flag(ACCOUNTS);
                } else if is("DROP") && (self.eat_word("DATABASE") || self.eat_word("SCHEMA")) {
                    self.flag(DROP_SCHEMA);
                } else if self.eat_word("PREPARE") {
                    if let Some(name) = self.eat_name() {
                        let name = statement_name(name.text(sql));
                        self.out.prepared.retain(|p| **p != *name);
                        push_unique(&mut self.out.deallocated, name.as_bytes(), false);
                    }
                }
            } else if is("USE") {
                self.flag(USE_SCHEMA);
            } else if is("SAVEPOINT") {
                self.flag(SAVEPOINT);
            } else if is("COMMIT") {
                self.flag(TRANSACTION_END);
            } else if is("ROLLBACK") {
                self.toks.bump();
                self.eat_word("WORK");
                if !self.eat_word("TO") {
                    self.flag(TRANSACTION_END);
                }
            } else if is("BACKUP") {
                self.toks.bump();
                self.backup();
            } else if is("LOAD") || is("CALL") || is("GET") {
                self.assigns_any_user_var = true;
                if is("GET") {
                    self.flag(DIAGNOSTICS);
                }
            } else if self.compound_start(first) {
                self.compound();
            }
            return;
        }
    }

    /// After SET. True when an inner statement follows (`SET STATEMENT … FOR`).
    fn set(&mut self) -> bool {
        let first = self.toks.peek();
        let second = self.toks.peek2();
        if self.is_word(first, "STATEMENT") {
            // The per-statement values are undone after it; the statement after FOR counts.
            self.toks.bump();
            while let Some(t) = self.next_in_statement() {
                if self.depth == 0 && self.is_word(Some(t), "FOR") {
                    return true;
                }
                self.note(t);
            }
            self.flag(UNKNOWN_SET);
            return false;
        }
        if self.is_word(first, "PASSWORD") {
            self.flag(ACCOUNTS);
            return false;
        }
        if self.is_word(first, "ROLE") {
            self.flag(SET_ROLE);
            return false;
        }
        if self.is_word(first, "DEFAULT") && self.is_word(second, "ROLE") {
            self.flag(SET_ROLE | ACCOUNTS);
            return false;
        }
        if self.is_word(first, "TRANSACTION") {
            self.toks.bump();
            self.transaction(None);
            return false;
        }
        if let Some(scope) = self.scope_keyword(first) {
            if self.is_word(second, "TRANSACTION") {
                self.toks.bump();
                self.toks.bump();
                self.transaction(Some(scope));
                return false;
            }
        }
        self.assignments();
        false
    }

    fn scope_keyword(&self, t: Option<Token>) -> Option<Scope> {
        if self.is_word(t, "SESSION") || self.is_word(t, "LOCAL") {
            Some(Scope::Session)
        } else if self.is_word(t, "GLOBAL") || self.is_word(t, "PERSIST") || self.is_word(t, "PERSIST_ONLY") {
            Some(Scope::Global)
        } else {
            None
        }
    }

    /// `[scope] target = expr [, …]`. A scope keyword holds for the assignments after it that
    /// have none (`SET GLOBAL a=1, b=2` sets two globals); an `@@global.` prefix only for its
    /// own.
    fn assignments(&mut self) {
        let mut keyword_scope = Scope::Session;
        loop {
            let Some(mut t) = self.next_in_statement() else {
                self.flag(UNKNOWN_SET);
                return;
            };
            if let Some(scope) = self.scope_keyword(Some(t)) {
                keyword_scope = scope;
                let Some(target) = self.next_in_statement() else {
                    self.flag(UNKNOWN_SET);
                    return;
                };
                t = target;
            }
            if !self.assignment(t, keyword_scope) {
                self.flag(UNKNOWN_SET);
                return;
            }
            self.skip_value();
            if !self.is_punct(self.toks.peek(), b',') {
                return;
            }
            self.toks.bump();
        }
    }

    /// One target and its `=` / `:=` (the value is left). False if it is not one.
    fn assignment(&mut self, t: Token, keyword_scope: Scope) -> bool {
        let sql = self.sql;
        let text = t.text(sql);
        let word = |kw: &str| t.kind == Kind::Word && text.eq_ignore_ascii_case(kw.as_bytes());
        if word("NAMES") || word("CHARSET") {
            self.charset();
            return true;
        }
        if (word("CHARACTER") || word("CHAR")) && self.eat_word("SET") {
            self.charset();
            return true;
        }
        match t.kind {
            Kind::Variable if text.starts_with(b"@@") => {
                let (prefix_scope, mut name) = split_scope(&text[2..]);
                if name.is_empty() {
                    // `@@session.`name``: the name is a token of its own.
                    let Some(quoted) = self.toks.peek().filter(|q| q.kind == Kind::QuotedIdent) else { return false };
                    self.toks.bump();
                    name = quoted.text(sql);
                }
                if !self.assignment_operator() {
                    return false;
                }
                let name = unquote(name);
                if prefix_scope.is_none() && TRANSACTION_VARS.iter().any(|v| name.eq_ignore_ascii_case(v.as_bytes())) {
                    self.flag(NEXT_TRANSACTION);
                }
                self.sysvar(prefix_scope.unwrap_or(Scope::Session), &name);
                true
            }
            Kind::Variable => {
                if text.len() < 2 || !self.assignment_operator() {
                    return false;
                }
                self.user_var(t);
                true
            }
            Kind::Word | Kind::QuotedIdent => {
                let mut name = unquote(text);
                // Structured variables: `key_cache.key_buffer_size`.
                if self.is_punct(self.toks.peek(), b'.') {
                    self.toks.bump();
                    let Some(part) = self.eat_name() else { return false };
                    let mut dotted = name.into_owned();
                    dotted.push(b'.');
                    dotted.extend_from_slice(&unquote(part.text(sql)));
                    name = Cow::Owned(dotted);
                }
                if !self.assignment_operator() {
                    return false;
                }
                self.sysvar(keyword_scope, &name);
                true
            }
            _ => false,
        }
    }

    fn assignment_operator(&mut self) -> bool {
        let t = self.toks.peek();
        if self.is_punct(t, b'=') {
            self.toks.bump();
            return true;
        }
        if self.is_punct(t, b':') && self.is_punct(self.toks.peek2(), b'=') {
            self.toks.bump();
            self.toks.bump();
            return true;
        }
        false
    }

    /// `name` unquoted.
    fn sysvar(&mut self, scope: Scope, name: &[u8]) {
        if scope == Scope::Global {
            self.flag(GLOBALS);
            return;
        }
        if ONE_SHOT_VARS.iter().any(|v| name.eq_ignore_ascii_case(v.as_bytes())) {
            self.flag(ONE_SHOT);
            return;
        }
        if name.is_empty() || !push_unique(&mut self.out.sysvars, name, true) {
            self.flag(UNKNOWN_SET);
        }
    }

    fn charset(&mut self) {
        self.flag(CHARSET);
        for name in CHARSET_VARS {
            push_unique(&mut self.out.sysvars, name.as_bytes(), true);
        }
    }

    /// `[ISOLATION LEVEL level | READ ONLY | READ WRITE] [, …]` after (scope) TRANSACTION.
    fn transaction(&mut self, scope: Option<Scope>) {
        let (mut isolation, mut access) = (false, false);
        loop {
            if self.eat_word("ISOLATION") {
                if !(self.eat_word("LEVEL") && self.isolation_level()) {
                    self.flag(UNKNOWN_SET);
                    return;
                }
                isolation = true;
            } else if self.eat_word("READ") {
                if !(self.eat_word("ONLY") || self.eat_word("WRITE")) {
                    self.flag(UNKNOWN_SET);
                    return;
                }
                access = true;
            } else {
                self.flag(UNKNOWN_SET);
                return;
            }
            if !self.is_punct(self.toks.peek(), b',') {
                break;
            }
            self.toks.bump();
        }
        if !self.at_statement_end() {
            self.flag(UNKNOWN_SET);
            return;
        }
        match scope {
            None => self.flag(NEXT_TRANSACTION),
            Some(Scope::Session) => {
                if isolation {
                    push_unique(&mut self.out.sysvars, b"tx_isolation", true);
                }
                if access {
                    push_unique(&mut self.out.sysvars, b"tx_read_only", true);
                }
            }
            Some(Scope::Global) => self.flag(GLOBALS),
        }
    }

    fn isolation_level(&mut self) -> bool {
        if self.eat_word("READ") {
            return self.eat_word("COMMITTED") || self.eat_word("UNCOMMITTED");
        }
        if self.eat_word("REPEATABLE") {
            return self.eat_word("READ");
        }
        self.eat_word("SERIALIZABLE")
    }

    /// After CREATE: temporary tables, accounts, and stored programs (whose bodies run later,
    /// not now).
    fn create(&mut self) {
        if self.eat_word("OR") && !self.eat_word("REPLACE") {
            return;
        }
        if self.eat_word("USER") || self.eat_word("ROLE") {
            self.flag(ACCOUNTS);
            return;
        }
        if self.eat_word("TEMPORARY") {
            let what = self.toks.peek();
            if self.is_word(what, "TABLE") || self.is_word(what, "SEQUENCE") {
                self.flag(TEMP_TABLE);
            }
            return;
        }
        if self.eat_word("DEFINER") {
            if !self.is_punct(self.toks.peek(), b'=') {
                return;
            }
            self.toks.bump();
            self.skip_account();
        }
        self.eat_word("AGGREGATE");
        let what = self.toks.peek();
        if ["PROCEDURE", "FUNCTION", "TRIGGER", "EVENT", "PACKAGE"].iter().any(|k| self.is_word(what, k)) {
            self.stored_program();
        }
    }

    /// `user`, `'u'@'h'`, `` `u`@`h` ``, `u@h`, `CURRENT_USER[()]`.
    fn skip_account(&mut self) {
        if self.next_in_statement().is_none() {
            return;
        }
        if self.is_punct(self.toks.peek(), b'(') && self.is_punct(self.toks.peek2(), b')') {
            self.toks.bump();
            self.toks.bump();
        }
        let sql = self.sql;
        if let Some(host) = self.toks.peek().filter(|h| h.kind == Kind::Variable && !h.text(sql).starts_with(b"@@")) {
            self.toks.bump();
            if host.text(sql) == b"@" {
                // `'u' @ 'h'`, spaced.
                self.next_in_statement();
            }
        }
    }

    /// Skips a stored program's definition: its body's statements are not run now. A compound
    /// body holds `;`s, so it runs to the end of the text (what follows it, if anything, is
    /// lost: rare, and the program's own effects counted as the session's would be worse).
    fn stored_program(&mut self) {
        let sql = self.sql;
        let mut compound = false;
        while let Some(t) = self.toks.peek() {
            if !compound && self.at_statement_end() {
                return;
            }
            self.toks.bump();
            match t.kind {
                Kind::Punct => self.track_depth(t),
                Kind::Word if COMPOUND_WORDS.iter().any(|k| t.text(sql).eq_ignore_ascii_case(k.as_bytes())) => compound = true,
                _ => {}
            }
        }
    }

    /// `BEGIN NOT ATOMIC`, `IF`, `CASE`, `LOOP`, `WHILE`, `REPEAT` or `label:` heading a
    /// statement: a MariaDB compound statement run directly.
    fn compound_start(&self, first: Token) -> bool {
        let second = self.toks.peek2();
        let is = |kw: &str| first.text(self.sql).eq_ignore_ascii_case(kw.as_bytes());
        (is("BEGIN") && self.is_word(second, "NOT"))
            || ["IF", "CASE", "LOOP", "WHILE", "REPEAT"].iter().any(|k| is(k))
            || self.is_punct(second, b':')
    }

    /// A compound statement's inner statements run now but are not followed: pinned. Without
    /// any inner statement (no `;` with code after it) it runs nothing.
    fn compound(&mut self) {
        let mut ahead = self.toks.clone();
        while let Some(t) = ahead.bump() {
            if self.is_punct(Some(t), b';') && ahead.peek().is_some() {
                self.flag(UNKNOWN_SET);
                self.drain();
                return;
            }
        }
    }

    /// After FLUSH: `[LOCAL | NO_WRITE_TO_BINLOG] TABLE[S] [names] WITH READ LOCK | FOR EXPORT`,
    /// or a list of flush options that includes `PRIVILEGES`.
    fn flush(&mut self) {
        if !self.eat_word("LOCAL") {
            self.eat_word("NO_WRITE_TO_BINLOG");
        }
        if !self.is_word(self.toks.peek(), "TABLES") && !self.is_word(self.toks.peek(), "TABLE") {
            while let Some(t) = self.next_in_statement() {
                if self.is_word(Some(t), "PRIVILEGES") {
                    self.flag(ACCOUNTS);
                }
            }
            return;
        }
        if !(self.eat_word("TABLES") || self.eat_word("TABLE")) {
            return;
        }
        let mut prev = None;
        while let Some(t) = self.next_in_statement() {
            if (self.is_word(prev, "READ") && self.is_word(Some(t), "LOCK"))
                || (self.is_word(prev, "FOR") && self.is_word(Some(t), "EXPORT"))
            {
                self.flag(LOCK_TABLES);
            }
            prev = Some(t);
        }
    }

    /// After HANDLER: `[db.]table OPEN`.
    fn handler(&mut self) {
        if self.eat_name().is_none() {
            return;
        }
        if self.is_punct(self.toks.peek(), b'.') {
            self.toks.bump();
            if self.eat_name().is_none() {
                return;
            }
        }
        if self.is_word(self.toks.peek(), "OPEN") {
            self.flag(HANDLER_OPEN);
        }
    }

    /// After PREPARE: `name FROM …`.
    fn prepare(&mut self) {
        if !self.is_word(self.toks.peek2(), "FROM") {
            return;
        }
        if let Some(name) = self.eat_name() {
            push_unique(&mut self.out.prepared, statement_name(name.text(self.sql)).as_bytes(), false);
        }
    }

    /// After BACKUP (MariaDB): `STAGE name`, `LOCK table`, `UNLOCK`.
    fn backup(&mut self) {
        if self.eat_word("STAGE") {
            let lock = if self.eat_word("END") { UNLOCK_TABLES } else { LOCK_TABLES };
            self.flag(lock);
        } else if self.eat_word("LOCK") {
            self.flag(LOCK_TABLES);
        } else if self.eat_word("UNLOCK") {
            self.flag(UNLOCK_TABLES);
        }
    }

    /// Up to the `,` or `;` that ends a SET value (left in place), noting what it uses.
    fn skip_value(&mut self) {
        self.pending = Pending::None;
        loop {
            let before = self.toks.clone();
            let Some(t) = self.toks.bump() else { return };
            if self.depth == 0 && (self.is_punct(Some(t), b',') || self.is_punct(Some(t), b';')) {
                self.toks = before;
                return;
            }
            self.note(t);
        }
    }

    /// Through the `;` that ends the statement, noting what it uses.
    fn rest_of_statement(&mut self) {
        while let Some(t) = self.toks.bump() {
            if self.depth == 0 && self.is_punct(Some(t), b';') {
                return;
            }
            self.note(t);
        }
    }

    fn track_depth(&mut self, t: Token) {
        match t.text(self.sql) {
            b"(" => self.depth = self.depth.saturating_add(1),
            b")" => self.depth = self.depth.saturating_sub(1),
            _ => {}
        }
    }

    /// Effects any statement can have anywhere: lock and LAST_INSERT_ID functions,
    /// SQL_CALC_FOUND_ROWS, `@x := …`, `INTO @x`. Token by token, without lookahead: what
    /// depends on the next token waits in `pending`.
    fn note(&mut self, t: Token) {
        let text = t.text(self.sql);
        let punct = |c: u8| t.kind == Kind::Punct && text == [c];
        match std::mem::replace(&mut self.pending, Pending::None) {
            Pending::Call(call) if punct(b'(') => self.call(call),
            Pending::UserVar(v) if punct(b':') => {
                self.pending = Pending::UserVarColon(v);
                return;
            }
            Pending::UserVarColon(v) if punct(b'=') => {
                self.user_var(v);
                return;
            }
            Pending::IntoTarget if t.kind == Kind::Variable && !text.starts_with(b"@@") => {
                self.user_var(t);
                self.pending = Pending::IntoListed;
                return;
            }
            Pending::IntoListed if punct(b',') => {
                self.pending = Pending::IntoTarget;
                return;
            }
            _ => {}
        }
        match t.kind {
            Kind::Punct => self.track_depth(t),
            Kind::Word => self.note_word(text),
            Kind::Variable => self.note_variable(t),
            _ => {}
        }
    }

    fn note_word(&mut self, w: &[u8]) {
        if w.eq_ignore_ascii_case(b"INTO") {
            // INTO OUTFILE, INTO t and procedure variables are not ours: only `@` names.
            self.pending = Pending::IntoTarget;
            return;
        }
        // Every other name of interest has an underscore: most words stop here.
        if !w.contains(&b'_') {
            return;
        }
        let call = if w.eq_ignore_ascii_case(b"GET_LOCK") {
            Call::GetLock
        } else if w.eq_ignore_ascii_case(b"RELEASE_LOCK") {
            Call::ReleaseLock
        } else if w.eq_ignore_ascii_case(b"RELEASE_ALL_LOCKS") {
            Call::ReleaseAllLocks
        } else if w.eq_ignore_ascii_case(b"LAST_INSERT_ID") {
            Call::LastInsertId
        } else {
            if w.eq_ignore_ascii_case(b"SQL_CALC_FOUND_ROWS") {
                self.flag(CALC_FOUND_ROWS);
            }
            return;
        };
        self.pending = Pending::Call(call);
    }

    fn call(&mut self, call: Call) {
        match call {
            Call::GetLock => self.out.named_locks = self.out.named_locks.saturating_add(1),
            Call::ReleaseLock => self.out.named_locks = self.out.named_locks.saturating_sub(1),
            Call::ReleaseAllLocks => self.flag(RELEASE_ALL_LOCKS),
            Call::LastInsertId => self.flag(USES_LAST_INSERT_ID),
        }
    }

    fn note_variable(&mut self, t: Token) {
        let text = t.text(self.sql);
        if let Some(sysvar) = text.strip_prefix(b"@@") {
            let name = unquote(split_scope(sysvar).1);
            if name.eq_ignore_ascii_case(b"last_insert_id") || name.eq_ignore_ascii_case(b"identity") {
                self.flag(USES_LAST_INSERT_ID);
            }
        } else if self.assigns_any_user_var {
            self.user_var(t);
        } else {
            self.pending = Pending::UserVar(t);
        }
    }

    /// A single-`@` variable token: kept as written to read it back, plain names lower-cased
    /// (quoted ones kept verbatim: lower-casing could change an escape such as `\Z`).
    fn user_var(&mut self, t: Token) {
        let text = t.text(self.sql);
        let Some(&first) = text.get(1) else { return };
        let quoted = matches!(first, b'\'' | b'"' | b'`');
        if !push_unique(&mut self.out.user_vars, text, !quoted) {
            // Not UTF-8: cannot be read back by name, so pin instead.
            self.flag(UNKNOWN_SET);
        }
    }
}

/// `global.x` → (Global, `x`); `x` → (None, `x`). After `@@`.
fn split_scope(name: &[u8]) -> (Option<Scope>, &[u8]) {
    if let Some(dot) = memchr::memchr(b'.', name) {
        let prefix = &name[..dot];
        let is = |kw: &str| prefix.eq_ignore_ascii_case(kw.as_bytes());
        let scope = if is("session") || is("local") {
            Some(Scope::Session)
        } else if is("global") || is("persist") || is("persist_only") {
            Some(Scope::Global)
        } else {
            None
        };
        if scope.is_some() {
            return (scope, &name[dot + 1..]);
        }
    }
    (None, name)
}

/// `` `a``b` `` → `` a`b ``; anything else unchanged.
fn unquote(name: &[u8]) -> Cow<'_, [u8]> {
    match name {
        [b'`', inner @ .., b'`'] => {
            if memchr::memchr(b'`', inner).is_none() {
                Cow::Borrowed(inner)
            } else {
                let mut out = Vec::with_capacity(inner.len());
                let mut last_was_quote = false;
                for &c in inner {
                    // A doubled backtick is one.
                    if c == b'`' && last_was_quote {
                        last_was_quote = false;
                        continue;
                    }
                    last_was_quote = c == b'`';
                    out.push(c);
                }
                Cow::Owned(out)
            }
        }
        _ => Cow::Borrowed(name),
    }
}

/// Prepared statement names are case-insensitive: unquoted and lower-cased.
fn statement_name(name: &[u8]) -> String {
    String::from_utf8_lossy(&unquote(name)).to_ascii_lowercase()
}

/// Appends `name` (lower-cased if `lower`) unless already there. False if it is not UTF-8.
fn push_unique(list: &mut Vec<Box<str>>, name: &[u8], lower: bool) -> bool {
    let Ok(name) = std::str::from_utf8(name) else { return false };
    let present = list.iter().any(|s| if lower { s.eq_ignore_ascii_case(name) } else { s.as_ref() == name });
    if !present {
        list.push(if lower { name.to_ascii_lowercase().into() } else { name.into() });
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn fx(sql: &str) -> Effects {
        effects(sql.as_bytes())
    }

    fn names(list: &[Box<str>]) -> Vec<&str> {
        list.iter().map(|s| s.as_ref()).collect()
    }

    fn sysvars(sql: &str) -> Vec<String> {
        fx(sql).sysvars.iter().map(|s| s.to_string()).collect()
    }

    fn user_vars(sql: &str) -> Vec<String> {
        fx(sql).user_vars.iter().map(|s| s.to_string()).collect()
    }

    fn flags(sql: &str) -> u32 {
        fx(sql).flags
    }

    #[test]
    fn savepoints_and_transaction_ends() {
        assert_eq!(flags("SAVEPOINT sa_savepoint_1"), SAVEPOINT);
        assert_eq!(flags("savepoint `s 1`"), SAVEPOINT);
        assert_eq!(fx("COMMIT"), Effects { flags: TRANSACTION_END, ..Effects::default() });
        assert_eq!(flags("commit and chain"), TRANSACTION_END);
        assert_eq!(flags("ROLLBACK"), TRANSACTION_END);
        assert_eq!(flags("ROLLBACK WORK AND NO CHAIN"), TRANSACTION_END);
        assert_eq!(flags("ROLLBACK TO SAVEPOINT s1"), 0);
        assert_eq!(flags("rollback work to s1"), 0);
        assert_eq!(flags("RELEASE SAVEPOINT s1"), 0);
        assert_eq!(flags("SELECT 'SAVEPOINT'"), 0);
        assert_eq!(flags("SELECT 1; SAVEPOINT s2"), SAVEPOINT);
    }

    #[test]
    fn ordinary_statements_have_none_and_allocate_nothing() {
        for sql in [
            "SELECT c FROM sbtest1 WHERE id=5",
            "INSERT INTO t VALUES (1,'a')",
            "UPDATE user_accounts SET last_login = NOW() WHERE user_id = ?",
            "SELECT c FROM sbtest1 WHERE id = 5025 AND k BETWEEN 4990 AND 5090 ORDER BY c LIMIT 10 /* app:4242 */",
            "/* mysql-connector-java */SELECT @@session.auto_increment_increment AS auto_increment_increment, @@character_set_client",
            "INSERT INTO users (email) VALUES ('bob@example.com')",
            "SELECT * FROM t WHERE a = @x",
            "SELECT 1;",
            "SELECT ';'",
            "BEGIN",
            "DROP TABLE t",
            "DROP TEMPORARY TABLE t",
            "CREATE TABLE t (a INT)",
            "EXECUTE s USING @a",
            "SELECT FOUND_ROWS()",
            "SELECT IS_FREE_LOCK('a'), IS_USED_LOCK('a')",
            "",
            "  ",
        ] {
            let e = fx(sql);
            assert!(e.is_empty(), "{sql}: {e:?}");
            assert_eq!(e.sysvars.capacity() + e.user_vars.capacity() + e.prepared.capacity() + e.deallocated.capacity(), 0, "{sql}");
        }
    }

    #[test]
    fn connection_setup_of_orms_and_drivers() {
        let e = fx("SET NAMES utf8mb4 COLLATE utf8mb4_unicode_ci");
        assert_eq!(e.flags, CHARSET);
        assert_eq!(names(&e.sysvars), CHARSET_VARS);
        assert_eq!(
            sysvars("SET SESSION sql_mode = CONCAT(@@sql_mode, ',STRICT_TRANS_TABLES'), time_zone = '+00:00'"),
            ["sql_mode", "time_zone"]
        );
        assert_eq!(sysvars("SET autocommit=0"), ["autocommit"]);
        assert_eq!(sysvars("SET @@session.tx_isolation='READ-COMMITTED'"), ["tx_isolation"]);
        assert_eq!(flags("SET @@session.tx_isolation='READ-COMMITTED'"), 0);
        // JDBC: a plain variable, not SET CHARACTER SET.
        assert_eq!(fx("SET character_set_results = NULL"), Effects { sysvars: vec!["character_set_results".into()], ..Effects::default() });
        assert_eq!(sysvars("SET SQL_SELECT_LIMIT=DEFAULT"), ["sql_select_limit"]);
        // Rails.
        let rails = "SET  @@SESSION.sql_mode = CONCAT(REPLACE(REPLACE(REPLACE(@@sql_mode, 'STRICT_TRANS_TABLES', ''), \
                     'STRICT_ALL_TABLES', ''), 'TRADITIONAL', ''), ',NO_AUTO_VALUE_ON_ZERO'),  @@SESSION.sql_auto_is_null = 0, \
                     @@SESSION.wait_timeout = 2147483";
        assert_eq!(
            fx(rails),
            Effects { sysvars: vec!["sql_mode".into(), "sql_auto_is_null".into(), "wait_timeout".into()], ..Effects::default() }
        );
        // mysqldump's header.
        let e = fx("/*!40014 SET @OLD_UNIQUE_CHECKS=@@UNIQUE_CHECKS, UNIQUE_CHECKS=0 */;");
        assert_eq!((names(&e.user_vars), names(&e.sysvars), e.flags), (vec!["@old_unique_checks"], vec!["unique_checks"], 0));
        assert_eq!(fx("/*!40101 SET NAMES utf8mb4 */").flags, CHARSET);
    }

    #[test]
    fn set_forms_and_scopes() {
        for global in [
            "SET GLOBAL max_connections = 100",
            "SET @@global.max_connections = 100",
            "SET PERSIST max_connections = 100, PERSIST_ONLY back_log = 10",
            "SET @@persist_only.back_log = 10, @@persist.max_connections = 1",
        ] {
            assert_eq!(fx(global), Effects { flags: GLOBALS, ..Effects::default() }, "{global}");
        }
        assert_eq!(sysvars("SET GLOBAL a=1, b=2, SESSION c=3, d=4"), ["c", "d"]);
        assert_eq!(sysvars("SET @@global.a=1, b=2"), ["b"]);
        assert_eq!(sysvars("SET GLOBAL a=1, @@session.b=2, c=3"), ["b"]);
        assert_eq!(sysvars("SET LOCAL a=1, @@local.B=2, @@C=3"), ["a", "b", "c"]);
        assert_eq!(sysvars("set `sql_mode`='', @@session.`Time_Zone`='+00:00'"), ["sql_mode", "time_zone"]);
        assert_eq!(sysvars("SET sql_mode := '', max_join_size = DEFAULT"), ["sql_mode", "max_join_size"]);
        assert_eq!(sysvars("SET sql_mode = 'A', SQL_MODE = 'B', @@sql_mode = 'C'"), ["sql_mode"]);
        assert_eq!(sysvars("SET SESSION hot_cache.key_buffer_size = 0"), ["hot_cache.key_buffer_size"]);
        assert_eq!(sysvars("SET a = (SELECT x, y FROM t WHERE b IN (1, 2) LIMIT 1), c = IF(1, 'x,y', 2)"), ["a", "c"]);
        assert_eq!(flags("SET PASSWORD = PASSWORD('x')"), ACCOUNTS);
        assert_eq!(flags("SET PASSWORD FOR 'u'@'h' = 'x'"), ACCOUNTS);
        assert_eq!(flags("SET GLOBAL a=1, SESSION c=3"), GLOBALS);
        assert_eq!(flags("SET c=3"), 0);
    }

    #[test]
    fn account_and_privilege_changes() {
        for sql in [
            "GRANT SELECT ON db.* TO u",
            "grant create user on *.* to 'qux'@'%'",
            "REVOKE CREATE USER ON *.* FROM qux",
            "CREATE USER qux",
            "CREATE OR REPLACE USER 'a'@'h' IDENTIFIED BY 'x'",
            "CREATE ROLE r",
            "DROP USER IF EXISTS qux",
            "DROP ROLE r",
            "RENAME USER a TO b",
            "ALTER USER a ACCOUNT LOCK",
            "FLUSH PRIVILEGES",
            "FLUSH LOCAL PRIVILEGES",
            "FLUSH HOSTS, PRIVILEGES",
            "SELECT 1; GRANT ALL ON *.* TO a",
            "/*!GRANT SELECT ON *.* TO a */",
        ] {
            assert_eq!(flags(sql) & ACCOUNTS, ACCOUNTS, "{sql}");
        }
        for sql in [
            "ALTER TABLE t ADD c INT",
            "RENAME TABLE a TO b",
            "DROP TABLE user",
            "CREATE TABLE user (a INT)",
            "FLUSH TABLES",
            "FLUSH STATUS",
            "SELECT 'GRANT'",
            "SELECT * FROM privileges",
        ] {
            assert_eq!(flags(sql) & ACCOUNTS, 0, "{sql}");
        }
    }

    #[test]
    fn character_sets() {
        for sql in [
            "SET NAMES utf8mb4",
            "SET NAMES 'utf8'",
            "SET NAMES DEFAULT",
            "set names utf8mb4 collate utf8mb4_0900_ai_ci",
            "SET CHARACTER SET utf8mb4",
            "SET CHAR SET latin1",
            "SET CHARSET DEFAULT",
        ] {
            assert_eq!(
                fx(sql),
                Effects { flags: CHARSET, sysvars: CHARSET_VARS.iter().map(|&v| v.into()).collect(), ..Effects::default() },
                "{sql}"
            );
        }
        let e = fx("SET NAMES utf8mb4, autocommit = 1, character_set_results = NULL");
        assert_eq!(e.flags, CHARSET);
        assert_eq!(names(&e.sysvars), [&CHARSET_VARS[..], &["autocommit"]].concat());
    }

    #[test]
    fn one_shot_variables() {
        for sql in ["SET insert_id = 5", "SET @@session.last_insert_id = 7", "SET rand_seed1 = 1, RAND_SEED2 = 2", "SET IDENTITY = 3"] {
            assert_eq!(fx(sql), Effects { flags: ONE_SHOT, ..Effects::default() }, "{sql}");
        }
        let e = fx("SET insert_id = 5, autocommit = 0");
        assert_eq!((e.flags, names(&e.sysvars)), (ONE_SHOT, vec!["autocommit"]));
    }

    #[test]
    fn transaction_characteristics() {
        assert_eq!(fx("SET TRANSACTION ISOLATION LEVEL READ COMMITTED"), Effects { flags: NEXT_TRANSACTION, ..Effects::default() });
        assert_eq!(flags("set transaction read only"), NEXT_TRANSACTION);
        assert_eq!(sysvars("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ"), ["tx_isolation"]);
        assert_eq!(flags("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ"), 0);
        assert_eq!(sysvars("SET SESSION TRANSACTION READ ONLY"), ["tx_read_only"]);
        assert_eq!(sysvars("SET LOCAL TRANSACTION ISOLATION LEVEL SERIALIZABLE, READ WRITE"), ["tx_isolation", "tx_read_only"]);
        assert_eq!(sysvars("SET SESSION TRANSACTION ISOLATION LEVEL READ UNCOMMITTED;"), ["tx_isolation"]);
        assert_eq!(flags("SET GLOBAL TRANSACTION ISOLATION LEVEL READ COMMITTED"), GLOBALS);
        // `@@name` without a scope: the next transaction (MySQL), the session too (MariaDB).
        let e = fx("SET @@transaction_isolation = 'READ-COMMITTED'");
        assert_eq!((e.flags, names(&e.sysvars)), (NEXT_TRANSACTION, vec!["transaction_isolation"]));
        assert_eq!(flags("SET transaction_isolation = 'READ-COMMITTED', @@SESSION.tx_read_only = 1"), 0);
        for bad in
            ["SET TRANSACTION ISOLATION LEVEL SOMETHING", "SET TRANSACTION", "SET SESSION TRANSACTION READ", "SET TRANSACTION READ ONLY x"]
        {
            assert_eq!(flags(bad) & UNKNOWN_SET, UNKNOWN_SET, "{bad}");
        }
    }

    #[test]
    fn set_statement_for_counts_only_the_inner_statement() {
        let e = fx("SET STATEMENT max_statement_time=1, sql_mode='' FOR SELECT a INTO @x FROM t");
        assert_eq!((names(&e.sysvars), names(&e.user_vars), e.flags), (vec![], vec!["@x"], 0));
        assert_eq!(user_vars("SET STATEMENT a=1 FOR SET STATEMENT b=(2) FOR SET @z = 1"), ["@z"]);
        assert_eq!(flags("SET STATEMENT sql_mode='' FOR CREATE TEMPORARY TABLE t (a INT)"), TEMP_TABLE);
        assert!(fx("SET STATEMENT max_statement_time=1 FOR SELECT * FROM t").is_empty());
        assert_eq!(flags("SET STATEMENT max_statement_time=1"), UNKNOWN_SET);
    }

    #[test]
    fn roles_and_unknown_sets() {
        for sql in ["SET ROLE app_reader", "SET ROLE NONE", "set role all"] {
            assert_eq!(flags(sql), SET_ROLE, "{sql}");
        }
        assert_eq!(flags("SET DEFAULT ROLE app_reader FOR bob"), SET_ROLE | ACCOUNTS);
        for sql in [
            "SET",
            "SET a",
            "SET a 1",
            "SET RESOURCE GROUP g",
            "SET 5 = 1",
            "SET a = 1,",
            "SET SESSION",
            "SET @ = 1",
            "SET @@ = 1",
            "SET a. = 1",
        ] {
            assert_eq!(flags(sql) & UNKNOWN_SET, UNKNOWN_SET, "{sql}");
        }
        // Assignments before the point of confusion still count.
        assert_eq!(sysvars("SET a = 1, b c"), ["a"]);
    }

    #[test]
    fn user_variables() {
        assert_eq!(user_vars("SET @x = 1, @Y := 2, @'Q' = 3, @`a b` = 4, @\"d\" = 5, @x = 6"), ["@x", "@y", "@'Q'", "@`a b`", "@\"d\""]);
        assert_eq!(user_vars("SELECT @rownum := @rownum + 1 AS r FROM t"), ["@rownum"]);
        assert_eq!(user_vars("SET @a = @b := 5"), ["@a", "@b"]);
        assert_eq!(user_vars("SELECT a INTO @x FROM t LIMIT 1"), ["@x"]);
        assert_eq!(user_vars("SELECT a, b FROM t LIMIT 1 INTO @A, @b"), ["@a", "@b"]);
        assert_eq!(user_vars("SELECT a, b INTO @a, @b FROM t FOR UPDATE"), ["@a", "@b"]);
        assert_eq!(user_vars("SELECT a INTO @x, local_b FROM t"), ["@x"]);
        assert!(fx("SELECT a INTO OUTFILE '/tmp/x' FROM t").is_empty());
        assert!(fx("INSERT INTO t SELECT @x").is_empty());
        assert!(fx("SELECT @x, @y = 1 FROM t").is_empty());
        assert!(fx("SELECT @@x := 1").is_empty());
        assert_eq!(user_vars("CALL get_totals(@total, @count)"), ["@total", "@count"]);
        assert_eq!(user_vars("LOAD DATA INFILE 'f' INTO TABLE t (a, @b) SET c = @b * 2"), ["@b"]);
        assert_eq!(user_vars("GET DIAGNOSTICS CONDITION 1 @state = RETURNED_SQLSTATE, @msg = MESSAGE_TEXT"), ["@state", "@msg"]);
        assert_eq!(flags("GET DIAGNOSTICS @n = NUMBER, @r = ROW_COUNT"), DIAGNOSTICS);
        // Without a user variable the pre-check must still let a GET through (found by the
        // property test below).
        assert_eq!(flags("GET"), DIAGNOSTICS);
        assert_eq!(flags("get diagnostics condition 1 x = MESSAGE_TEXT"), DIAGNOSTICS);
        assert_eq!(flags("SET @\u{e9} = 1"), 0);
        assert_eq!(effects(b"SET @\xff = 1").flags, UNKNOWN_SET);
        assert_eq!(effects(b"SELECT @`\xff` := 1").flags, UNKNOWN_SET);
    }

    #[test]
    fn functions() {
        assert_eq!(fx("SELECT GET_LOCK('a', 10)").named_locks, 1);
        assert_eq!(fx("SELECT RELEASE_LOCK('a')").named_locks, -1);
        assert_eq!(fx("SELECT get_lock('a', 1), GET_LOCK ('b', 1)").named_locks, 2);
        assert!(fx("SELECT GET_LOCK('a', 1), RELEASE_LOCK('a')").is_empty());
        assert_eq!(fx("SET @got = GET_LOCK('job', 0)").named_locks, 1);
        assert_eq!(flags("DO RELEASE_ALL_LOCKS()"), RELEASE_ALL_LOCKS);
        assert!(fx("SELECT get_lock, release_lock FROM t").is_empty());
        assert_eq!(flags("SELECT SQL_CALC_FOUND_ROWS * FROM t LIMIT 10"), CALC_FOUND_ROWS);
        assert_eq!(flags("SELECT sql_calc_found_rows id FROM t"), CALC_FOUND_ROWS);
        for sql in [
            "SELECT LAST_INSERT_ID()",
            "UPDATE seq SET id = LAST_INSERT_ID(id + 1)",
            "SELECT @@identity",
            "SELECT @@session.last_insert_id",
            "INSERT INTO t2 VALUES (last_insert_id(), 'x')",
        ] {
            assert_eq!(flags(sql), USES_LAST_INSERT_ID, "{sql}");
        }
    }

    #[test]
    fn temporary_tables() {
        for sql in [
            "CREATE TEMPORARY TABLE t (a INT)",
            "CREATE OR REPLACE TEMPORARY TABLE t (a INT)",
            "CREATE TEMPORARY TABLE IF NOT EXISTS t (a INT)",
            "create temporary table t select 1",
            "CREATE TEMPORARY SEQUENCE s",
            "/* x */ CREATE TEMPORARY TABLE t LIKE u;",
        ] {
            assert_eq!(flags(sql), TEMP_TABLE, "{sql}");
        }
        for sql in ["CREATE TABLE temporary (a INT)", "CREATE TABLE t (a INT)", "DROP TEMPORARY TABLE IF EXISTS t"] {
            assert!(fx(sql).is_empty(), "{sql}");
        }
    }

    #[test]
    fn locks_xa_handlers_use() {
        for sql in [
            "LOCK TABLES t READ, u WRITE",
            "lock table t write",
            "FLUSH TABLES WITH READ LOCK",
            "FLUSH TABLES t1, t2 WITH READ LOCK",
            "FLUSH LOCAL TABLES WITH READ LOCK AND DISABLE CHECKPOINT",
            "FLUSH TABLES t FOR EXPORT",
            "LOCK INSTANCE FOR BACKUP",
            "BACKUP STAGE START",
            "BACKUP STAGE BLOCK_COMMIT",
            "BACKUP LOCK t",
        ] {
            assert_eq!(flags(sql), LOCK_TABLES, "{sql}");
        }
        for sql in ["UNLOCK TABLES", "unlock table", "UNLOCK INSTANCE", "BACKUP STAGE END", "BACKUP UNLOCK"] {
            assert_eq!(flags(sql), UNLOCK_TABLES, "{sql}");
        }
        for sql in ["FLUSH TABLES", "FLUSH TABLES t", "FLUSH STATUS"] {
            assert!(fx(sql).is_empty(), "{sql}");
        }
        for sql in ["XA START 'x'", "XA BEGIN 'x', 'b', 1", "xa start X'01' JOIN"] {
            assert_eq!(flags(sql), XA_BEGIN, "{sql}");
        }
        for sql in ["XA COMMIT 'x' ONE PHASE", "XA ROLLBACK 'x'"] {
            assert_eq!(flags(sql), XA_END, "{sql}");
        }
        assert!(fx("XA END 'x'").is_empty());
        assert!(fx("XA PREPARE 'x'").is_empty());
        for sql in ["HANDLER t OPEN", "HANDLER db.t OPEN AS h", "handler `my t` open"] {
            assert_eq!(flags(sql), HANDLER_OPEN, "{sql}");
        }
        assert!(fx("HANDLER t READ FIRST").is_empty());
        assert!(fx("HANDLER t CLOSE").is_empty());
        assert_eq!(flags("USE shop"), USE_SCHEMA);
        assert_eq!(flags("SELECT 1; use `shop`"), USE_SCHEMA);
        for sql in ["DROP DATABASE shop", "drop schema if exists `shop`", "SELECT 1; DROP DATABASE shop"] {
            assert_eq!(flags(sql), DROP_SCHEMA, "{sql}");
        }
        assert!(fx("DROP TABLE shop").is_empty());
    }

    #[test]
    fn prepared_statements() {
        let e = fx("PREPARE stmt1 FROM 'SELECT ?'");
        assert_eq!((names(&e.prepared), e.flags), (vec!["stmt1"], 0));
        assert_eq!(names(&fx("PREPARE `My``S` FROM @sql").prepared), ["my`s"]);
        assert_eq!(names(&fx("DEALLOCATE PREPARE Stmt1").deallocated), ["stmt1"]);
        assert_eq!(names(&fx("DROP PREPARE s").deallocated), ["s"]);
        assert!(fx("EXECUTE s").is_empty());
        // In the same text, the last word wins: deallocated first, then prepared.
        let e = fx("PREPARE s FROM 'SELECT 1'; EXECUTE s; DEALLOCATE PREPARE s");
        assert_eq!((names(&e.prepared), names(&e.deallocated)), (vec![], vec!["s"]));
        let e = fx("DEALLOCATE PREPARE s; PREPARE s FROM 'SELECT 2'");
        assert_eq!((names(&e.prepared), names(&e.deallocated)), (vec!["s"], vec!["s"]));
    }

    #[test]
    fn strings_and_comments_do_not_count() {
        assert!(fx("SELECT '@x := 1', \"GET_LOCK(1)\" /* SET @y := 2; LOCK TABLES t */ -- LAST_INSERT_ID()\n FROM t").is_empty());
        assert!(fx("/* SET NAMES latin1 */ SELECT 1").is_empty());
        assert!(fx("# USE db\nSELECT 'SET @a = 1; USE db'").is_empty());
        assert!(fx("SELECT `get_lock`(1), `@x` FROM t").is_empty());
    }

    #[test]
    fn several_statements() {
        let e = fx("SET autocommit=0; SELECT GET_LOCK('x', 1); CREATE TEMPORARY TABLE t (a INT); SELECT @a := 1; USE db;");
        assert_eq!(
            e,
            Effects {
                flags: TEMP_TABLE | USE_SCHEMA,
                sysvars: vec!["autocommit".into()],
                user_vars: vec!["@a".into()],
                named_locks: 1,
                ..Effects::default()
            }
        );
        assert_eq!(flags("SELECT 1; SET NAMES utf8"), CHARSET);
        assert_eq!(flags("SELECT (1; LOCK TABLES t READ"), 0, "inside parentheses `;` ends nothing");
        assert!(fx("SELECT ';'; SELECT 2; ;;").is_empty());
    }

    #[test]
    fn stored_program_bodies_run_later() {
        let body = "CREATE DEFINER=`root`@`localhost` PROCEDURE p(IN a INT) BEGIN SET @x = 1; SET SESSION sql_mode = ''; \
                    CREATE TEMPORARY TABLE t (a INT); SELECT RELEASE_LOCK('l'); PREPARE s FROM 'SELECT 1'; END";
        assert!(fx(body).is_empty());
        assert!(fx("CREATE OR REPLACE DEFINER = 'u'@'%' FUNCTION f() RETURNS INT BEGIN RETURN GET_LOCK('a', 1); END").is_empty());
        assert!(fx("CREATE DEFINER=CURRENT_USER() EVENT e ON SCHEDULE EVERY 1 DAY DO BEGIN SET @a = 1; END").is_empty());
        // A single-statement body ends at its `;`.
        assert_eq!(user_vars("CREATE TRIGGER tr BEFORE INSERT ON t FOR EACH ROW SET NEW.a = @a; SET @y = 2"), ["@y"]);
        assert_eq!(user_vars("CREATE VIEW v AS SELECT 1; SET @y := 2"), ["@y"]);
    }

    #[test]
    fn compound_statements_pin() {
        assert_eq!(flags("BEGIN NOT ATOMIC SET @x = 1; END"), UNKNOWN_SET);
        assert_eq!(flags("IF @a THEN SELECT 1; END IF"), UNKNOWN_SET);
        assert_eq!(flags("lbl: LOOP LEAVE lbl; END LOOP"), UNKNOWN_SET);
        // A transaction, not a compound statement: nothing pins it (COMMIT ends savepoints).
        assert_eq!(fx("BEGIN; SELECT 1; COMMIT"), Effects { flags: TRANSACTION_END, ..Effects::default() });
        assert!(fx("BEGIN WORK").is_empty());
    }

    #[test]
    fn is_empty_means_nothing() {
        assert!(Effects::default().is_empty());
        assert!(!Effects { named_locks: -1, ..Effects::default() }.is_empty());
        assert!(!Effects { deallocated: vec!["s".into()], ..Effects::default() }.is_empty());
    }

    /// `cargo test --release -p sluice-sql effects::tests::time_per_call -- --ignored --nocapture`
    #[test]
    #[ignore]
    fn time_per_call() {
        let cases = [
            ("select_100B", "SELECT c FROM sbtest1 WHERE id = 5025 AND k BETWEEN 4990 AND 5090 ORDER BY c LIMIT 10 /* app:4242 */"),
            ("update_underscores", "UPDATE user_accounts SET last_login = NOW() WHERE user_id = ?"),
            ("insert_with_at", "INSERT INTO users (id, email, name) VALUES (42, 'bob@example.com', 'Bob Builder')"),
            ("set_names", "SET NAMES utf8mb4 COLLATE utf8mb4_unicode_ci"),
            ("set_sql_mode", "SET SESSION sql_mode = CONCAT(@@sql_mode, ',STRICT_TRANS_TABLES'), time_zone = '+00:00'"),
        ];
        // Best of several rounds: the machine may be busy with other work.
        for (name, sql) in cases {
            let n = 200_000u32;
            let best = (0..10)
                .map(|_| {
                    let start = std::time::Instant::now();
                    for _ in 0..n {
                        std::hint::black_box(effects(std::hint::black_box(sql.as_bytes())));
                    }
                    start.elapsed().as_nanos() as f64 / f64::from(n)
                })
                .fold(f64::MAX, f64::min);
            println!("{name} ({} B): {best:.1} ns/call", sql.len());
        }
    }

    fn sqlish() -> impl Strategy<Value = Vec<u8>> {
        proptest::collection::vec(proptest::sample::select(&b" \t\n'\"`\\/*-+#!M(),.;:=@?019eExXaLsSeEtT_"[..]), 0..200)
    }

    /// Keywords and tokens the parser acts on, in any order: every path, valid or not.
    fn keyword_soup() -> impl Strategy<Value = Vec<u8>> {
        let piece = proptest::sample::select(vec![
            "SET",
            "NAMES",
            "CHARACTER",
            "GLOBAL",
            "SESSION",
            "@@session.",
            "`x`",
            "@x",
            "@@x",
            "@",
            "@@",
            ":",
            "=",
            ";",
            "(",
            ")",
            ",",
            ".",
            "a",
            "1",
            "'s'",
            "DEFAULT",
            "TRANSACTION",
            "ISOLATION",
            "LEVEL",
            "READ",
            "ONLY",
            "STATEMENT",
            "FOR",
            "ROLE",
            "LOCK",
            "UNLOCK",
            "TABLES",
            "FLUSH",
            "WITH",
            "EXPORT",
            "CREATE",
            "OR",
            "REPLACE",
            "TEMPORARY",
            "TABLE",
            "DEFINER",
            "PROCEDURE",
            "BEGIN",
            "NOT",
            "ATOMIC",
            "END",
            "IF",
            "XA",
            "START",
            "COMMIT",
            "HANDLER",
            "OPEN",
            "PREPARE",
            "DEALLOCATE",
            "DROP",
            "FROM",
            "USE",
            "BACKUP",
            "STAGE",
            "LOAD",
            "CALL",
            "GET",
            "INTO",
            "GET_LOCK",
            "RELEASE_LOCK",
            "LAST_INSERT_ID",
            "SQL_CALC_FOUND_ROWS",
            "/*",
            "*/",
            "/*!",
            "--",
            "\n",
            "#",
        ]);
        proptest::collection::vec((piece, proptest::sample::select(vec!["", " ", "\n"])), 0..40)
            .prop_map(|v| v.into_iter().flat_map(|(p, sep)| [p, sep]).collect::<String>().into_bytes())
    }

    /// Statements built from pieces that set nothing, with the dangerous words only inside
    /// strings, comments and quoted names, and SET only after the first word.
    fn harmless() -> impl Strategy<Value = String> {
        let first = proptest::sample::select(vec!["SELECT", "INSERT", "UPDATE", "DELETE", "WITH", "(SELECT", "/* SET @a := 1 */ SELECT"]);
        let piece = proptest::sample::select(vec![
            "a",
            "t",
            "user_id",
            "last_login",
            "FROM",
            "WHERE",
            "INTO",
            "t2",
            "VALUES",
            "SET",
            "=",
            "(",
            ")",
            ",",
            "1",
            "'x'",
            "NOW()",
            "@@sql_mode",
            "@@session.time_zone",
            "'SET @x := 1; GET_LOCK(1)'",
            "/* LOCK TABLES t; SET @y := 2 */",
            "-- USE db\n",
            "`SET`",
            "`get_lock`",
            "\"LAST_INSERT_ID()\"",
            "'a;b'",
            "# INTO @z\n",
            "CREATE",
            "TEMPORARY",
            "LOCK",
        ]);
        (first, proptest::collection::vec(piece, 0..30)).prop_map(|(f, rest)| format!("{f} {}", rest.join(" ")))
    }

    proptest! {
        #[test]
        fn never_panics_and_the_pre_check_misses_nothing(b in prop_oneof![sqlish(), keyword_soup(), proptest::collection::vec(any::<u8>(), 0..200)]) {
            prop_assert_eq!(effects(&b), full_pass(&b, true));
        }

        #[test]
        fn harmless_statements_have_none(sql in harmless()) {
            prop_assert!(fx(&sql).is_empty(), "{}", sql);
        }
    }
}
