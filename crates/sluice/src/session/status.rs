//! `SHOW STATUS` through sluice: the server's answer, except Threads_connected, which counts
//! sluice's client sessions. The server counts sluice's pooled connections instead, which stay
//! open after their clients leave: a client waiting for Threads_connected to drop back after
//! its connections closed (as MariaDB's own tests do) would wait for ever. sluice's count is
//! the one its clients can act on, and it matches the rows of SHOW PROCESSLIST (sluice's
//! sessions too).

use super::kill::ResultShape;
use super::{Flow, Session};
use crate::pool::BackendError;

impl Session {
    /// Runs the client's `SHOW [GLOBAL | SESSION] STATUS …` (`text`) on a connection of
    /// `hostgroup` and answers with its result, Threads_connected put right. `binary`: rows in
    /// the binary protocol (the reply to an execute).
    pub(super) async fn show_status(&mut self, text: &[u8], hostgroup: u32, retries: u32, binary: bool, seq: u8) -> Flow {
        let answered = self.answer_status(text, hostgroup, retries, binary, seq).await;
        self.handle.end();
        match answered {
            Ok(written) => Flow::written(written),
            Err(e) => self.reply_backend_error(seq, &e).await,
        }
    }

    async fn answer_status(&mut self, text: &[u8], hostgroup: u32, retries: u32, binary: bool, seq: u8) -> Result<bool, BackendError> {
        let run = self.run_for_client(hostgroup, retries, binary, |_| text.to_vec()).await?;
        let mut server = run.result;
        let sessions = self.data.registry.len().to_string().into_bytes();
        let name_col = column(&server.columns, "Variable_name");
        let value_col = column(&server.columns, "Value");
        if let (Some(n), Some(v)) = (name_col, value_col) {
            for row in &mut server.rows {
                let is_threads_connected =
                    row.get(n).and_then(|x| x.as_deref()).is_some_and(|x| x.eq_ignore_ascii_case(b"Threads_connected"));
                if let (true, Some(value)) = (is_threads_connected, row.get_mut(v)) {
                    *value = Some(sessions.clone());
                }
            }
        }
        let shape = ResultShape { deprecate_eof: run.deprecate_eof, binary, types: &run.types };
        Ok(self.send_result(&server.columns, &server.rows, server.status, &shape, seq).await)
    }
}

/// The position of the column named `name` (as the server names it, any case).
fn column(columns: &[Vec<u8>], name: &str) -> Option<usize> {
    columns.iter().position(|c| proto::resultset::column_name(c).is_some_and(|n| n.eq_ignore_ascii_case(name.as_bytes())))
}
