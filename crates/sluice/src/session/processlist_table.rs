//! `INFORMATION_SCHEMA.PROCESSLIST` through sluice: the rows are sluice's sessions, as in its
//! SHOW PROCESSLIST, so the ids a client reads there are the ones CONNECTION_ID() returns and
//! KILL takes (the server's own rows are its backend threads, each serving many clients over
//! time). The statement still runs on the server: the table's name in its text becomes a derived
//! table of the sessions' rows, joined with the server's processlist for what only the server
//! knows of a running statement (State, Progress, memory, rows examined).

use super::kill::{Privileges, ResultShape, SessionRow};
use super::{Flow, Session};
use crate::pool::BackendError;
use std::fmt::Write;

/// Longest statement text a row carries (the server's Info holds the whole text; sluice keeps
/// the rewritten statement bounded).
const MAX_INFO: usize = 4096;

impl Session {
    /// The sessions a statement reading INFORMATION_SCHEMA.PROCESSLIST shows, read before it is
    /// sent (the privilege check runs a statement of its own).
    pub(super) async fn processlist_rows(&mut self) -> Result<Vec<SessionRow>, BackendError> {
        let privileges = match self.privileges().await {
            Ok(p) => p,
            // SHOW GRANTS refused (the account was dropped while this session lives on, 1141):
            // the session still reads the table, as on the server, and sees its own sessions.
            Err(BackendError::Rejected { .. }) => Privileges::default(),
            Err(e) => return Err(e),
        };
        Ok(self.visible_sessions(privileges, "Query", true))
    }

    /// An execute of a prepared SELECT that reads INFORMATION_SCHEMA.PROCESSLIST (no `?`): its
    /// text, rewritten with the sessions of the moment, runs as a query, and the rows go back in
    /// the binary protocol (a statement prepared on the server would keep the server's table).
    pub(super) async fn execute_processlist_select(&mut self, text: &[u8], seq: u8) -> Flow {
        let answered = self.answer_processlist_select(text, seq).await;
        self.handle.end();
        match answered {
            Ok(written) => Flow::written(written),
            Err(e) => self.reply_backend_error(seq, &e).await,
        }
    }

    async fn answer_processlist_select(&mut self, text: &[u8], seq: u8) -> Result<bool, BackendError> {
        let rows = self.processlist_rows().await?;
        let with_id = crate::plan::rewrite_connection_id(text, self.id, !self.pseudo_thread_id_set(), true);
        let text = with_id.as_deref().unwrap_or(text);
        let own = self.id;
        let sent = |b: &crate::pool::Backend| with_sessions(text, &rows, b, own).unwrap_or_else(|| text.to_vec());
        let run = self.run_for_client(self.unrouted_hostgroup(), 1, true, sent).await?;
        let server = run.result;
        let shape = ResultShape { deprecate_eof: run.deprecate_eof, binary: true, types: &run.types };
        Ok(self.send_result(&server.columns, &server.rows, server.status, &shape, seq).await)
    }
}

/// A prepared statement sluice answers at each execute because it reads
/// INFORMATION_SCHEMA.PROCESSLIST: a SELECT (one result set) with no `?`.
pub(super) fn prepared_processlist_select(text: &[u8]) -> bool {
    let first = sql::lexer::code_tokens(text).find(|t| t.text(text) != b"(");
    first.is_some_and(|t| sql::classify::is_word(&t, text, "SELECT"))
        && sql::classify::processlist_sites(text).is_some()
        && !sql::lexer::code_tokens(text).any(|t| t.text(text) == b"?" || t.text(text) == b";")
}

/// `text` with each `information_schema.processlist` it reads replaced by the derived table of
/// `rows` (`derived_table`), for backend connection `b`, session `own` sending it; `None` when
/// it reads none that can be replaced.
pub(super) fn with_sessions(text: &[u8], rows: &[SessionRow], b: &crate::pool::Backend, own: u32) -> Option<Vec<u8>> {
    let sites = sql::classify::processlist_sites(text)?;
    let spelling = |name: &str| sql::classify::spelling(text, name);
    let derived = derived_table(rows, b.server.pool.id, own, b.thread_id, b.is_mariadb(), spelling);
    Some(sql::classify::replace_processlist(text, &sites, &derived))
}

/// The derived table that stands for INFORMATION_SCHEMA.PROCESSLIST: `rows`, with the server's
/// columns for the statements running on `pool` (whose threads the server can see), the session
/// itself (`own`) on thread `own_thread` there. `mariadb`: MariaDB's columns (10.5 to 11.x; MySQL
/// has the first eight only).
fn derived_table<'a>(
    rows: &[SessionRow],
    pool: u32,
    own: u32,
    own_thread: u32,
    mariadb: bool,
    spelling: impl Fn(&str) -> Option<&'a [u8]>,
) -> Vec<u8> {
    let mut sessions = String::with_capacity(rows.len() * 200);
    for (i, r) in rows.iter().enumerate() {
        let thread = if r.id == own { Some(own_thread) } else { r.running_on.filter(|&(p, _)| p == pool).map(|(_, t)| t) };
        let as_ = |name: &str| if i == 0 { format!(" AS `{name}`") } else { String::new() };
        if i > 0 {
            sessions.push_str(" UNION ALL ");
        }
        let info = r.info.as_deref().map(|t| {
            let mut end = t.len().min(MAX_INFO);
            // Not inside a UTF-8 character.
            while end < t.len() && end > 0 && t[end] & 0xC0 == 0x80 {
                end -= 1;
            }
            &t[..end]
        });
        let _ = write!(
            sessions,
            "SELECT {}{}, {}{}, {}{}, {}{}, {}{}, {}{}, {}{}, {}{}",
            r.id,
            as_("ID"),
            text(Some(r.user.as_bytes())),
            as_("USER"),
            text(Some(r.host.as_bytes())),
            as_("HOST"),
            text(r.db.as_deref().map(str::as_bytes)),
            as_("DB"),
            text(Some(r.command.as_bytes())),
            as_("COMMAND"),
            r.time,
            as_("TIME"),
            text(info),
            as_("INFO"),
            thread.map_or("NULL".to_string(), |t| t.to_string()),
            as_("THREAD"),
        );
    }
    // What the server's table has, as (name, value): the session's own row shows its own text
    // (the server's is this rewrite); another running session's shows the server's, which
    // names the statement a CALL is running and drops a trailing `;`, as the server does.
    let info = format!("CASE WHEN s.ID = {own} THEN s.INFO ELSE IFNULL(p.INFO, s.INFO) END");
    let info_binary = format!("CAST({info} AS BINARY)");
    let mut columns: Vec<(&str, &str)> = vec![
        ("ID", "s.ID"),
        ("USER", "s.USER"),
        ("HOST", "s.HOST"),
        ("DB", "s.DB"),
        ("COMMAND", "s.COMMAND"),
        ("TIME", "s.TIME"),
        ("STATE", if mariadb { "IFNULL(p.STATE, '')" } else { "p.STATE" }),
        ("INFO", &info),
    ];
    if mariadb {
        columns.extend([
            ("TIME_MS", "IFNULL(p.TIME_MS, s.TIME * 1000)"),
            ("STAGE", "IFNULL(p.STAGE, 0)"),
            ("MAX_STAGE", "IFNULL(p.MAX_STAGE, 0)"),
            ("PROGRESS", "IFNULL(p.PROGRESS, 0)"),
            ("MEMORY_USED", "IFNULL(p.MEMORY_USED, 0)"),
            ("MAX_MEMORY_USED", "IFNULL(p.MAX_MEMORY_USED, 0)"),
            ("EXAMINED_ROWS", "IFNULL(p.EXAMINED_ROWS, 0)"),
            ("QUERY_ID", "IFNULL(p.QUERY_ID, 0)"),
            ("INFO_BINARY", &info_binary),
            ("TID", "IFNULL(p.TID, 0)"),
        ]);
    }
    let mut out = String::with_capacity(sessions.len() + 1200);
    out.push_str("SELECT ");
    for (i, (name, value)) in columns.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        // A column is named as the client's text spells it, as the server names a column of
        // its own table (`SELECT user …` shows `user`); else as the server's table does.
        let spelled = spelling(name).unwrap_or(name.as_bytes());
        let _ = write!(out, "{value} AS `{}`", String::from_utf8_lossy(spelled).replace('`', "``"));
    }
    let _ = write!(out, " FROM ({sessions}) AS s LEFT JOIN information_schema.PROCESSLIST AS p ON p.ID = s.THREAD");
    out.into_bytes()
}

/// A string value as a literal no session setting can read differently (NO_BACKSLASH_ESCAPES,
/// ANSI_QUOTES, the connection's character set): hex bytes converted from utf8mb4.
fn text(value: Option<&[u8]>) -> String {
    let Some(bytes) = value else { return "NULL".into() };
    let mut out = String::with_capacity(bytes.len() * 2 + 30);
    out.push_str("CONVERT(X'");
    for b in bytes {
        let _ = write!(out, "{b:02X}");
    }
    out.push_str("' USING utf8mb4)");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literals_cannot_be_read_two_ways() {
        assert_eq!(text(Some(b"a'\\")), "CONVERT(X'61275C' USING utf8mb4)");
        assert_eq!(text(None), "NULL");
        assert_eq!(text(Some(b"")), "CONVERT(X'' USING utf8mb4)");
    }
}
