//! Read or write, from a statement's text alone (step ④ route's read/write split): may a
//! replica answer it as the primary would?
//!
//! A read is a single SELECT (or WITH … SELECT, VALUES, TABLE, a parenthesized SELECT) that
//! takes no locks, writes nothing (no `INTO`), assigns no user variable and calls no function
//! whose effect or answer belongs to the primary's session (named locks, LAST_INSERT_ID,
//! sequences, FOUND_ROWS/ROW_COUNT of a statement that ran there, server files). Everything
//! else is a write and goes to the writer, including what sluice cannot tell (several
//! statements, SHOW, EXPLAIN, CALL): a wrong "write" costs a little load on the primary, a
//! wrong "read" a wrong answer.
//!
//! A byte pre-check settles most reads (none of the words that could make one a write appear
//! anywhere); the others get one pass over the lexer's code tokens (keywords in strings and
//! comments do not count; executable comments are code). No allocation
//! (`cargo bench -p sluice-sql --bench rw`; the budget is 0.5 µs a statement).

use crate::classify::is_word;
use crate::lexer::{Kind, Lexer, Token};

/// Where a statement may run under a read/write split.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// Reads only: a replica that has applied what the session must see may answer it.
    Read,
    /// Everything else: the writer.
    Write,
    /// `START TRANSACTION READ ONLY`: a reader may run the transaction it opens.
    ReadOnlyTransaction,
}

/// Functions whose effect or answer belongs to the primary's session or files.
const WRITER_FUNCTIONS: [&str; 12] = [
    "GET_LOCK",
    "RELEASE_LOCK",
    "RELEASE_ALL_LOCKS",
    "IS_FREE_LOCK",
    "IS_USED_LOCK",
    "LAST_INSERT_ID",
    "NEXTVAL",
    "SETVAL",
    "LASTVAL",
    "FOUND_ROWS",
    "ROW_COUNT",
    "LOAD_FILE",
];

/// The class of one COM_QUERY text.
pub fn class(sql: &[u8]) -> Class {
    let mut toks = Lexer::new(sql).filter(|t| t.kind != Kind::Comment);
    let Some(first) = toks.next() else { return Class::Write };
    let opens_read = ["SELECT", "WITH", "VALUES", "TABLE"].iter().any(|k| is_word(&first, sql, k)) || first.text(sql) == b"(";
    if !opens_read {
        return if is_word(&first, sql, "START") { start_transaction(toks, sql) } else { Class::Write };
    }
    if !may_write(sql) {
        return Class::Read;
    }
    // The two tokens before the current one, for `FOR UPDATE`, `LOCK IN`, `@v :=`, `f (`,
    // `NEXT VALUE FOR`.
    let mut before: [Option<Token>; 2] = [None, None];
    let mut ended = false;
    for t in toks {
        if ended {
            // Something after `;`: several statements.
            return Class::Write;
        }
        let text = t.text(sql);
        let [older, prev] = before;
        match t.kind {
            Kind::Word => {
                if is_word(&t, sql, "INTO") {
                    return Class::Write;
                }
                if let Some(p) = prev {
                    if (is_word(&p, sql, "FOR") && (is_word(&t, sql, "UPDATE") || is_word(&t, sql, "SHARE")))
                        || (is_word(&p, sql, "LOCK") && is_word(&t, sql, "IN"))
                        || (is_word(&p, sql, "VALUE")
                            && is_word(&t, sql, "FOR")
                            && older.is_some_and(|o| is_word(&o, sql, "NEXT") || is_word(&o, sql, "PREVIOUS")))
                    {
                        return Class::Write;
                    }
                }
            }
            Kind::Punct => match text {
                b";" => ended = true,
                b"(" if prev.is_some_and(|p| p.kind == Kind::Word && WRITER_FUNCTIONS.iter().any(|f| is_word(&p, sql, f))) => {
                    return Class::Write;
                }
                // `@v := …` (`:` and `=` are separate tokens).
                b"=" if prev.is_some_and(|p| p.text(sql) == b":") => return Class::Write,
                _ => {}
            },
            _ => {}
        }
        before = [prev, Some(t)];
    }
    Class::Read
}

/// Whether the bytes hold anything that could make a SELECT a write: `;`, `:=`, or (in any
/// case) "into", "for", "lock", "val", "last_insert_id", "found_rows", "row_count", "load_file".
/// Most reads hold none of them, and are settled without the lexer; a word inside a string or a
/// comment only costs the full pass.
fn may_write(sql: &[u8]) -> bool {
    // The bytes that start one of them: a table lookup per byte in a tight loop, the word
    // compared only there.
    const CANDIDATE: [bool; 256] = {
        let mut t = [false; 256];
        let starts = b"iIfFlLvVrR;:";
        let mut k = 0;
        while k < starts.len() {
            t[starts[k] as usize] = true;
            k += 1;
        }
        t
    };
    let at = |i: usize, w: &[u8]| sql.get(i..i + w.len()).is_some_and(|s| s.eq_ignore_ascii_case(w));
    let mut from = 0;
    while let Some(offset) = sql.get(from..).and_then(|rest| rest.iter().position(|&b| CANDIDATE[b as usize])) {
        let i = from + offset;
        let hit = match sql[i] | 0x20 {
            b';' => true,
            // `:=` only (`app:42` in a comment is no assignment).
            b':' => sql.get(i + 1) == Some(&b'='),
            b'i' => at(i, b"into"),
            b'f' => at(i, b"for") || at(i, b"found_rows"),
            b'l' => at(i, b"lock") || at(i, b"last_insert_id") || at(i, b"load_file"),
            b'v' => at(i, b"val"),
            _ => at(i, b"row_count"),
        };
        if hit {
            return true;
        }
        from = i + 1;
    }
    false
}

/// `START TRANSACTION [characteristic, …]`: READ ONLY among them (and not READ WRITE).
/// Whether a statement reads what the session's previous statement left on its connection
/// (SHOW WARNINGS, SHOW ERRORS, their COUNT(*), GET DIAGNOSTICS, FOUND_ROWS(), ROW_COUNT()):
/// the split sends it where that statement ran, though it is no read a replica may answer.
pub fn reads_last_statement(sql: &[u8]) -> bool {
    let mut toks = Lexer::new(sql).filter(|t| t.kind != Kind::Comment);
    let Some(first) = toks.next() else { return false };
    if is_word(&first, sql, "SHOW") {
        return toks.next().is_some_and(|t| ["WARNINGS", "ERRORS", "COUNT"].iter().any(|w| is_word(&t, sql, w)));
    }
    if is_word(&first, sql, "GET") {
        // GET [CURRENT | STACKED] DIAGNOSTICS
        return toks.take(2).any(|t| is_word(&t, sql, "DIAGNOSTICS"));
    }
    if !is_word(&first, sql, "SELECT") {
        return false;
    }
    let mut prev: Option<Token> = None;
    for t in toks {
        if t.text(sql) == b"(" && prev.is_some_and(|p| is_word(&p, sql, "FOUND_ROWS") || is_word(&p, sql, "ROW_COUNT")) {
            return true;
        }
        prev = Some(t);
    }
    false
}

fn start_transaction(mut toks: impl Iterator<Item = Token>, sql: &[u8]) -> Class {
    if !toks.next().is_some_and(|t| is_word(&t, sql, "TRANSACTION")) {
        return Class::Write;
    }
    let mut read_only = false;
    let mut prev: Option<Token> = None;
    let mut ended = false;
    for t in toks {
        if ended {
            // Several statements: only the first is known.
            return Class::Write;
        }
        if t.text(sql) == b";" {
            ended = true;
            continue;
        }
        if prev.is_some_and(|p| is_word(&p, sql, "READ")) {
            if is_word(&t, sql, "ONLY") {
                read_only = true;
            } else if is_word(&t, sql, "WRITE") {
                return Class::Write;
            }
        }
        prev = Some(t);
    }
    if read_only {
        Class::ReadOnlyTransaction
    } else {
        Class::Write
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(sql: &str) -> Class {
        class(sql.as_bytes())
    }

    #[test]
    fn reads() {
        for sql in [
            "SELECT 1",
            "select c from sbtest1 where id = 5",
            "  /* app */ SELECT * FROM t WHERE a = 'FOR UPDATE' -- INTO\n",
            "WITH x AS (SELECT 1) SELECT * FROM x",
            "(SELECT a FROM t) UNION (SELECT b FROM u)",
            "VALUES (1, 2)",
            "TABLE t",
            "SELECT @a, @@server_id, `into` FROM t",
            "SELECT COUNT(*) FROM t WHERE name = 'x' ;",
            "SELECT sleep_time, last_insert_id_col FROM t",
            "SELECT * FROM t FOR SYSTEM_TIME ALL",
            "SELECT SLEEP(1)",
        ] {
            assert_eq!(c(sql), Class::Read, "{sql}");
        }
    }

    #[test]
    fn writes() {
        for sql in [
            "INSERT INTO t VALUES (1)",
            "UPDATE t SET a = 1",
            "SELECT * FROM t WHERE id = 1 FOR UPDATE",
            "SELECT * FROM t WHERE id = 1 FOR UPDATE SKIP LOCKED",
            "SELECT * FROM t LOCK IN SHARE MODE",
            "SELECT * FROM t FOR SHARE",
            "SELECT a INTO @x FROM t",
            "SELECT a FROM t INTO OUTFILE '/tmp/x'",
            "SELECT @x := a FROM t",
            "SELECT GET_LOCK('x', 1)",
            "select release_lock ('x')",
            "SELECT LAST_INSERT_ID()",
            "SELECT NEXTVAL(s)",
            "SELECT NEXT VALUE FOR s",
            "SELECT PREVIOUS VALUE FOR s",
            "SELECT FOUND_ROWS()",
            "SELECT LOAD_FILE('/etc/passwd')",
            "SELECT 1; SELECT 2",
            "SELECT 1; DELETE FROM t",
            "/*!SELECT*/ 1 /*!FOR UPDATE*/",
            "SHOW TABLES",
            "EXPLAIN SELECT 1",
            "CALL p()",
            "DO 1",
            "BEGIN",
            "START TRANSACTION",
            "START TRANSACTION READ WRITE",
            "START TRANSACTION READ ONLY; DELETE FROM t",
            "SET @a = 1",
            "",
            "   ",
        ] {
            assert_eq!(c(sql), Class::Write, "{sql}");
        }
    }

    #[test]
    fn the_pre_check_only_shortcuts_reads() {
        // Every write above holds a word the pre-check looks for (or is not a SELECT).
        assert!(may_write(b"SELECT a FROM t INTO OUTFILE 'x'"));
        assert!(may_write(b"select get_lock('x', 1)"));
        assert!(may_write(b"SELECT NEXT VALUE FOR s"));
        assert!(may_write(b"SELECT @x := 1"));
        assert!(!may_write(b"SELECT c FROM sbtest1 WHERE id = 5025 AND k BETWEEN 4990 AND 5090 ORDER BY c LIMIT 10 /* app:4242 */"));
        // A word in a string: the full pass decides, and it is still a read.
        assert!(may_write(b"SELECT 'for update'"));
        assert_eq!(c("SELECT 'for update'"), Class::Read);
    }

    #[test]
    fn what_reads_the_last_statement() {
        for sql in [
            "SHOW WARNINGS",
            "show errors limit 1",
            "SHOW COUNT(*) WARNINGS",
            "GET DIAGNOSTICS @n = NUMBER",
            "GET CURRENT DIAGNOSTICS CONDITION 1 @m = MESSAGE_TEXT",
            "SELECT FOUND_ROWS()",
            "/* app */ select row_count ( ), 1",
        ] {
            assert!(reads_last_statement(sql.as_bytes()), "{sql}");
        }
        for sql in ["SHOW TABLES", "SELECT found_rows_col FROM t", "INSERT INTO t SELECT FOUND_ROWS()", "GET_LOCK", "", "SELECT 1"] {
            assert!(!reads_last_statement(sql.as_bytes()), "{sql}");
        }
    }

    #[test]
    fn read_only_transactions() {
        assert_eq!(c("START TRANSACTION READ ONLY"), Class::ReadOnlyTransaction);
        assert_eq!(c("start transaction with consistent snapshot, read only;"), Class::ReadOnlyTransaction);
        assert_eq!(c("START TRANSACTION READ ONLY, READ WRITE"), Class::Write);
    }
}
