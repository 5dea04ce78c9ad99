//! Follows a backend's reply to one command, packet by packet, as its bytes stream past, so
//! sluice can forward them unchanged and still know where the reply ends (step ⑥).
//!
//! Only packet headers and the first bytes of each packet are looked at; rows are never decoded
//! and nothing is buffered. The scanner reports the reply's end, a LOCAL INFILE request, and the
//! status flags of the last OK/EOF (transaction state, more results, open cursor).

use crate::codec::read_lenenc;
use crate::frame::{HEADER_LEN, MAX_CHUNK};
use crate::packet::{parse_ok, terminator_status, EOF_HEADER, ERR_HEADER, LOCAL_INFILE_HEADER, OK_HEADER};
use crate::{ProtoError, StatusFlags};

/// The shape of reply a command gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reply {
    /// COM_QUERY: OK, ERR, LOCAL INFILE request or text result sets, possibly several.
    Query,
    /// COM_STMT_EXECUTE: like Query with binary rows; `cursor` when a read-only cursor was asked for.
    Execute { cursor: bool },
    /// COM_STMT_PREPARE: PREPARE_OK and its parameter and column definitions, or ERR.
    Prepare,
    /// COM_STMT_FETCH: binary rows and a terminator, or ERR.
    Fetch,
    /// COM_FIELD_LIST: column definitions and a terminator, or ERR.
    FieldList,
    /// Everything else that answers: exactly one packet (OK, ERR, EOF or a string).
    Single,
}

/// What a packet told the scanner.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// The reply is not over yet.
    More,
    /// The reply is complete.
    Done { error: bool },
    /// The server asked the client for a local file (0xFB). The client's file packets go to the
    /// backend next; then call `after_infile` and scan the rest of the reply.
    LocalInfile,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Start of a result: OK, ERR, 0xFB or a column count.
    First,
    Columns {
        left: u64,
    },
    ColumnsEof,
    Rows,
    PrepareOk,
    Params {
        left: u16,
        columns: u16,
    },
    ParamsEof {
        columns: u16,
    },
    PrepColumns {
        left: u16,
    },
    PrepColumnsEof,
    FieldList,
    Single,
    Finished,
}

/// Bytes of a packet's start kept to classify it (the longest thing read is an OK header).
const PREFIX: usize = 24;

/// What every state's handler is told about a finished packet.
#[derive(Debug, Clone, Copy)]
struct Head {
    /// The payload's first byte (None: empty packet).
    first: Option<u8>,
    /// Payload length of the packet's first chunk.
    len: usize,
    /// An ERR packet (progress reports never get this far).
    is_err: bool,
    /// An EOF, or an OK ending a result set (deprecate_eof), rather than a row starting with 0xFE.
    is_terminator: bool,
}

/// MariaDB extended capabilities that change the shape of replies.
pub const MARIADB_CLIENT_PROGRESS: u32 = 1 << 0;
pub const MARIADB_CLIENT_CACHE_METADATA: u32 = 1 << 4;

#[derive(Debug, Clone)]
pub struct Scanner {
    reply: Reply,
    deprecate_eof: bool,
    /// MARIADB_CLIENT_CACHE_METADATA: an execute's column count is followed by a
    /// "metadata follows" byte, and the definitions are skipped when it is 0.
    cache_metadata: bool,
    /// MARIADB_CLIENT_PROGRESS: ERR packets with code 0xFFFF are progress reports, not errors.
    progress: bool,
    state: State,
    header: [u8; HEADER_LEN],
    header_len: usize,
    /// Payload bytes of the current chunk still to come; meaningful when `header_len == 4`.
    remaining: usize,
    /// The current chunk continues a packet of 16 MiB or more.
    continuation: bool,
    prefix: [u8; PREFIX],
    prefix_len: usize,
    /// Payload length of the current logical packet's first chunk.
    first_len: usize,
    last_seq: u8,
    status: u16,
    warnings: u16,
    last_insert_id: u64,
    packets: u64,
    /// Rows of the reply's result sets, and rows its OK packets report as affected (statistics).
    rows: u64,
    affected_rows: u64,
    /// The ERR packet's code, when the reply ended with one.
    error_code: u16,
}

impl Scanner {
    pub fn new(reply: Reply, deprecate_eof: bool) -> Self {
        let state = match reply {
            Reply::Query | Reply::Execute { .. } => State::First,
            Reply::Prepare => State::PrepareOk,
            Reply::Fetch => State::Rows,
            Reply::FieldList => State::FieldList,
            Reply::Single => State::Single,
        };
        Scanner {
            reply,
            deprecate_eof,
            cache_metadata: false,
            progress: false,
            state,
            header: [0; HEADER_LEN],
            header_len: 0,
            remaining: 0,
            continuation: false,
            prefix: [0; PREFIX],
            prefix_len: 0,
            first_len: 0,
            last_seq: 0,
            status: 0,
            warnings: 0,
            last_insert_id: 0,
            packets: 0,
            rows: 0,
            affected_rows: 0,
            error_code: 0,
        }
    }

    /// Applies the MariaDB extended capabilities negotiated on the connection.
    pub fn with_mariadb_capabilities(mut self, caps: u32) -> Self {
        self.cache_metadata = caps & MARIADB_CLIENT_CACHE_METADATA != 0;
        self.progress = caps & MARIADB_CLIENT_PROGRESS != 0;
        self
    }

    /// The status flags to report until the reply carries its own (a lone ERR carries none:
    /// the server's state did not change).
    /// Only the flags of the session's state are kept (transaction, autocommit, backslash
    /// escapes), not those of the last reply (more results, cursor, session state changed).
    pub fn with_status(mut self, status: u16) -> Self {
        let session = StatusFlags::SERVER_STATUS_IN_TRANS
            | StatusFlags::SERVER_STATUS_AUTOCOMMIT
            | StatusFlags::SERVER_STATUS_NO_BACKSLASH_ESCAPES
            | StatusFlags::SERVER_STATUS_IN_TRANS_READONLY;
        self.status = status & session.bits();
        self
    }

    /// Resumes after the client's LOCAL INFILE data: the server's OK or ERR comes next.
    pub fn after_infile(&mut self, last_client_seq: u8) {
        self.state = State::First;
        self.last_seq = last_client_seq;
    }

    /// Status flags of the last OK or EOF seen (SERVER_STATUS_IN_TRANS, …).
    pub fn status(&self) -> u16 {
        self.status
    }

    pub fn warnings(&self) -> u16 {
        self.warnings
    }

    /// The last insert id of the last OK that reported one (0 if none did).
    pub fn last_insert_id(&self) -> u64 {
        self.last_insert_id
    }

    /// Rows sent in result sets so far.
    pub fn rows(&self) -> u64 {
        self.rows
    }

    /// Rows affected, summed over the reply's OK packets.
    pub fn affected_rows(&self) -> u64 {
        self.affected_rows
    }

    /// The error code of the ERR that ended the reply (0: none).
    pub fn error_code(&self) -> u16 {
        self.error_code
    }

    /// Sequence id of the last packet header seen.
    pub fn last_seq(&self) -> u8 {
        self.last_seq
    }

    /// Whole packets seen so far.
    pub fn packets(&self) -> u64 {
        self.packets
    }

    /// True between packets: an ERR packet could be injected here without corrupting the stream.
    pub fn at_packet_boundary(&self) -> bool {
        self.header_len == 0 && !self.continuation
    }

    /// Where the reply can be cut short cleanly, now that the bytes fed so far are all there
    /// will be: how many of them (at their end) belong to a packet not yet complete, which the
    /// client must not get, and the sequence id of an ERR packet put in their place.
    /// `request_seq` is the request's last sequence id. `None` inside a packet split into 16 MiB
    /// chunks (its first chunks may be with the client already).
    pub fn cut(&self, request_seq: u8) -> Option<(usize, u8)> {
        if self.continuation {
            return None;
        }
        let after_last = if self.packets == 0 { request_seq } else { self.last_seq }.wrapping_add(1);
        Some(match self.header_len {
            n if n < HEADER_LEN => (n, after_last),
            // The packet in progress's header is complete: the ERR takes its sequence id.
            _ => (HEADER_LEN + self.first_len - self.remaining, self.last_seq),
        })
    }

    pub fn is_done(&self) -> bool {
        self.state == State::Finished
    }

    /// Consumes bytes of the reply. Returns how many were consumed and what happened: scanning
    /// stops right after a packet that ends the reply or asks for a local file, so any bytes
    /// after `consumed` were not part of this reply.
    pub fn feed(&mut self, data: &[u8]) -> Result<(usize, Event), ProtoError> {
        let mut i = 0;
        while i < data.len() {
            if self.state == State::Finished {
                return Err(ProtoError::Unexpected("bytes after the end of a reply"));
            }
            if self.state == State::Rows && self.header_len == 0 && !self.continuation {
                i = self.skip_whole_rows(data, i);
                if i == data.len() {
                    break;
                }
            }
            if self.header_len < HEADER_LEN {
                let take = (HEADER_LEN - self.header_len).min(data.len() - i);
                self.header[self.header_len..self.header_len + take].copy_from_slice(&data[i..i + take]);
                self.header_len += take;
                i += take;
                if self.header_len < HEADER_LEN {
                    break;
                }
                let len = self.header[0] as usize | (self.header[1] as usize) << 8 | (self.header[2] as usize) << 16;
                self.last_seq = self.header[3];
                self.remaining = len;
                if !self.continuation {
                    self.prefix_len = 0;
                    self.first_len = len;
                }
            }
            let take = self.remaining.min(data.len() - i);
            if !self.continuation && self.prefix_len < PREFIX {
                let keep = take.min(PREFIX - self.prefix_len);
                self.prefix[self.prefix_len..self.prefix_len + keep].copy_from_slice(&data[i..i + keep]);
                self.prefix_len += keep;
            }
            i += take;
            self.remaining -= take;
            if self.remaining == 0 {
                let chunk_len = self.header[0] as usize | (self.header[1] as usize) << 8 | (self.header[2] as usize) << 16;
                self.header_len = 0;
                if chunk_len == MAX_CHUNK {
                    self.continuation = true;
                    continue;
                }
                self.continuation = false;
                self.packets += 1;
                let event = self.on_packet()?;
                if event != Event::More {
                    return Ok((i, event));
                }
            }
        }
        Ok((i, Event::More))
    }

    /// The bulk of a result set: rows lying whole in `data` from `i` on are counted from their
    /// header and first byte, with nothing copied (the general path copies each packet's header
    /// and first bytes aside, in case it is cut). Stops before anything else (a terminator, an
    /// ERR, an empty or 16 MiB packet, a cut one), which the general path then takes. Returns
    /// where it stopped.
    fn skip_whole_rows(&mut self, data: &[u8], mut i: usize) -> usize {
        while let Some(&[l0, l1, l2, seq, first]) = data.get(i..i + HEADER_LEN + 1) {
            let len = l0 as usize | (l1 as usize) << 8 | (l2 as usize) << 16;
            if len == 0 || len >= MAX_CHUNK || first == EOF_HEADER || first == ERR_HEADER || data.len() - i - HEADER_LEN < len {
                break;
            }
            self.last_seq = seq;
            self.packets += 1;
            self.rows += 1;
            i += HEADER_LEN + len;
        }
        i
    }

    /// A whole packet has passed: looks at its first bytes and hands it to the current state.
    fn on_packet(&mut self) -> Result<Event, ProtoError> {
        let p = &self.prefix[..self.prefix_len];
        let first = p.first().copied();
        let len = self.first_len;
        let is_err = first == Some(ERR_HEADER);
        if is_err && self.progress && p.get(1..3) == Some(&[0xFF, 0xFF]) {
            // A progress report (MariaDB): informational, the reply goes on.
            return Ok(Event::More);
        }
        if is_err {
            self.error_code = p.get(1..3).map_or(0, |c| u16::from_le_bytes([c[0], c[1]]));
        }
        // 0xFE opens a terminator unless the packet is 16 MiB or more (a row whose first value is huge).
        let head = Head { first, len, is_err, is_terminator: first == Some(EOF_HEADER) && len < MAX_CHUNK };
        match self.state {
            State::First => self.on_first(head),
            State::Columns { left } => Ok(self.on_column(head, left)),
            State::ColumnsEof => self.on_columns_eof(head),
            State::Rows => self.on_row(head),
            State::PrepareOk => self.on_prepare_ok(head),
            State::Params { left, columns } => Ok(self.on_param(left, columns)),
            State::ParamsEof { columns } => Ok(self.on_params_eof(columns)),
            State::PrepColumns { left } => Ok(self.on_prep_column(left)),
            State::PrepColumnsEof => Ok(self.finish(false)),
            State::FieldList => Ok(self.on_field_list(head)),
            State::Single => Ok(self.on_single(head)),
            State::Finished => Err(ProtoError::Unexpected("packet after the end of a reply")),
        }
    }

    /// The reply is over.
    fn finish(&mut self, error: bool) -> Event {
        self.state = State::Finished;
        Event::Done { error }
    }

    /// Start of a result: OK, ERR, a LOCAL INFILE request (COM_QUERY only) or a column count.
    fn on_first(&mut self, head: Head) -> Result<Event, ProtoError> {
        if head.is_err {
            return Ok(self.finish(true));
        }
        let p = &self.prefix[..self.prefix_len];
        match head.first {
            Some(OK_HEADER) => {
                let ok = parse_ok(p).map_err(|_| ProtoError::Malformed("OK"))?;
                self.status = ok.status;
                self.warnings = ok.warnings;
                self.affected_rows += ok.affected_rows;
                if ok.last_insert_id != 0 {
                    self.last_insert_id = ok.last_insert_id;
                }
                Ok(self.more_results_or_done())
            }
            // A prepared LOAD DATA LOCAL asks for the file in its execute reply, as COM_QUERY
            // does (0xFB is no column count: as a length-encoded integer it means NULL).
            Some(LOCAL_INFILE_HEADER) if matches!(self.reply, Reply::Query | Reply::Execute { .. }) => Ok(Event::LocalInfile),
            _ => {
                let (n, used) = read_lenenc(p).ok_or(ProtoError::Malformed("column count"))?;
                if n == 0 {
                    return Err(ProtoError::Malformed("column count"));
                }
                let metadata_skipped = self.cache_metadata && matches!(self.reply, Reply::Execute { .. }) && p.get(used) == Some(&0);
                self.state = if !metadata_skipped {
                    State::Columns { left: n }
                } else if self.deprecate_eof {
                    State::Rows
                } else {
                    State::ColumnsEof
                };
                Ok(Event::More)
            }
        }
    }

    /// A column definition of a result set; `left` counts this one.
    fn on_column(&mut self, head: Head, left: u64) -> Event {
        if head.is_err {
            return self.finish(true);
        }
        self.state = if left > 1 {
            State::Columns { left: left - 1 }
        } else if self.deprecate_eof {
            State::Rows
        } else {
            State::ColumnsEof
        };
        Event::More
    }

    /// The EOF after the column definitions (deprecate_eof off). An execute that opened a
    /// cursor ends here; its rows come with COM_STMT_FETCH.
    fn on_columns_eof(&mut self, head: Head) -> Result<Event, ProtoError> {
        if head.is_err {
            return Ok(self.finish(true));
        }
        self.status = terminator_status(&self.prefix[..self.prefix_len], false)?;
        let cursor = matches!(self.reply, Reply::Execute { cursor: true });
        if cursor && self.status & StatusFlags::SERVER_STATUS_CURSOR_EXISTS.bits() != 0 {
            return Ok(self.finish(false));
        }
        self.state = State::Rows;
        Ok(Event::More)
    }

    /// A row, or the terminator that ends the result set.
    fn on_row(&mut self, head: Head) -> Result<Event, ProtoError> {
        if head.is_err {
            return Ok(self.finish(true));
        }
        if head.is_terminator {
            let p = &self.prefix[..self.prefix_len];
            self.status = terminator_status(p, self.deprecate_eof)?;
            if !self.deprecate_eof {
                if let Ok((w, _)) = crate::packet::parse_eof(p) {
                    self.warnings = w;
                }
            } else if let Ok(ok) = parse_ok(p) {
                self.warnings = ok.warnings;
            }
            return Ok(self.more_results_or_done());
        }
        self.rows += 1;
        Ok(Event::More)
    }

    /// COM_STMT_PREPARE's first packet: its counts of columns and parameters say what follows.
    fn on_prepare_ok(&mut self, head: Head) -> Result<Event, ProtoError> {
        if head.is_err {
            return Ok(self.finish(true));
        }
        let p = &self.prefix[..self.prefix_len];
        if head.first != Some(OK_HEADER) || p.len() < 9 {
            return Err(ProtoError::Malformed("COM_STMT_PREPARE OK"));
        }
        let columns = u16::from_le_bytes([p[5], p[6]]);
        let params = u16::from_le_bytes([p[7], p[8]]);
        self.state = match (params, columns) {
            (0, 0) => return Ok(self.finish(false)),
            (0, c) => State::PrepColumns { left: c },
            (n, c) => State::Params { left: n, columns: c },
        };
        Ok(Event::More)
    }

    /// A prepared statement's parameter definition; `left` counts this one.
    fn on_param(&mut self, left: u16, columns: u16) -> Event {
        self.state = if left > 1 {
            State::Params { left: left - 1, columns }
        } else if !self.deprecate_eof {
            State::ParamsEof { columns }
        } else if columns > 0 {
            State::PrepColumns { left: columns }
        } else {
            return self.finish(false);
        };
        Event::More
    }

    /// The EOF after the parameter definitions (deprecate_eof off).
    fn on_params_eof(&mut self, columns: u16) -> Event {
        if columns == 0 {
            return self.finish(false);
        }
        self.state = State::PrepColumns { left: columns };
        Event::More
    }

    /// A prepared statement's column definition; `left` counts this one.
    fn on_prep_column(&mut self, left: u16) -> Event {
        if left > 1 {
            self.state = State::PrepColumns { left: left - 1 };
        } else if !self.deprecate_eof {
            self.state = State::PrepColumnsEof;
        } else {
            return self.finish(false);
        }
        Event::More
    }

    /// COM_FIELD_LIST: a column definition, or the terminator that ends the reply.
    fn on_field_list(&mut self, head: Head) -> Event {
        if head.is_err {
            return self.finish(true);
        }
        if head.is_terminator {
            if let Ok(s) = terminator_status(&self.prefix[..self.prefix_len], self.deprecate_eof) {
                self.status = s;
            }
            return self.finish(false);
        }
        Event::More
    }

    /// The one packet of a command that answers with one: it ends the reply, keeping the
    /// status and warnings of an OK or EOF.
    fn on_single(&mut self, head: Head) -> Event {
        if head.first == Some(OK_HEADER) || (head.first == Some(EOF_HEADER) && head.len < 9) {
            let p = &self.prefix[..self.prefix_len];
            if let Ok(ok) = parse_ok(p) {
                self.status = ok.status;
                self.warnings = ok.warnings;
            } else if let Ok((w, s)) = crate::packet::parse_eof(p) {
                self.status = s;
                self.warnings = w;
            }
        }
        self.finish(head.is_err)
    }

    /// After an OK or a result set's terminator: another result follows when the server says so.
    fn more_results_or_done(&mut self) -> Event {
        if self.status & StatusFlags::SERVER_MORE_RESULTS_EXISTS.bits() != 0 {
            self.state = State::First;
            Event::More
        } else {
            self.finish(false)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::write_packet;
    use crate::packet::{write_eof, write_err, write_ok, Ok as OkP};
    use proptest::prelude::*;

    const MORE: u16 = 0x0008;

    /// Appends a text result set: column count, definitions, optional EOF, rows, terminator.
    fn result_set(out: &mut Vec<u8>, seq: &mut u8, cols: usize, rows: &[Vec<u8>], deprecate_eof: bool, status: u16) {
        write_packet(out, seq, &[cols as u8]);
        for _ in 0..cols {
            write_packet(out, seq, b"\x03def\x00\x00\x00\x01a\x00\x0c\x21\x00\x0b\x00\x00\x00\x03\x00\x00\x00\x00\x00");
        }
        if !deprecate_eof {
            write_eof(out, seq, 0, 2);
        }
        for r in rows {
            write_packet(out, seq, r);
        }
        if deprecate_eof {
            write_ok(out, seq, 0xFE, &OkP { status, ..Default::default() }, b"");
        } else {
            write_eof(out, seq, 0, status);
        }
    }

    fn scan_all(s: &mut Scanner, bytes: &[u8]) -> (usize, Event) {
        s.feed(bytes).unwrap()
    }

    #[test]
    fn ok_reply() {
        let mut out = Vec::new();
        let mut seq = 1;
        write_ok(&mut out, &mut seq, 0, &OkP { affected_rows: 3, status: 3, ..Default::default() }, b"");
        let mut s = Scanner::new(Reply::Query, true);
        assert_eq!(scan_all(&mut s, &out), (out.len(), Event::Done { error: false }));
        assert_eq!(s.status(), 3);
        assert_eq!((s.affected_rows(), s.rows(), s.error_code()), (3, 0, 0));
        assert!(s.is_done());
    }

    #[test]
    fn err_reply() {
        let mut out = Vec::new();
        let mut seq = 1;
        write_err(&mut out, &mut seq, 1064, b"42000", "syntax");
        let mut s = Scanner::new(Reply::Query, false);
        assert_eq!(scan_all(&mut s, &out), (out.len(), Event::Done { error: true }));
        assert_eq!(s.error_code(), 1064);
    }

    #[test]
    fn text_result_both_eof_modes() {
        for dep in [false, true] {
            let mut out = Vec::new();
            let mut seq = 1;
            result_set(&mut out, &mut seq, 2, &[b"\x011\x012".to_vec(), vec![0xFB, 0xFB]], dep, 2);
            let mut s = Scanner::new(Reply::Query, dep);
            assert_eq!(scan_all(&mut s, &out), (out.len(), Event::Done { error: false }), "deprecate_eof={dep}");
            assert_eq!(s.rows(), 2, "deprecate_eof={dep}");
        }
    }

    #[test]
    fn multi_results_then_ok() {
        let mut out = Vec::new();
        let mut seq = 1;
        result_set(&mut out, &mut seq, 1, &[b"\x01x".to_vec()], false, 2 | MORE);
        write_ok(&mut out, &mut seq, 0, &OkP { affected_rows: 1, status: 2 | MORE, ..Default::default() }, b"");
        result_set(&mut out, &mut seq, 1, &[], false, 2 | MORE);
        write_ok(&mut out, &mut seq, 0, &OkP { status: 2, ..Default::default() }, b"");
        let mut s = Scanner::new(Reply::Query, false);
        assert_eq!(scan_all(&mut s, &out), (out.len(), Event::Done { error: false }));
    }

    #[test]
    fn error_mid_rows_ends_reply() {
        let mut out = Vec::new();
        let mut seq = 1;
        write_packet(&mut out, &mut seq, &[1]);
        write_packet(&mut out, &mut seq, b"\x03def");
        write_eof(&mut out, &mut seq, 0, 2);
        write_packet(&mut out, &mut seq, b"\x01x");
        write_err(&mut out, &mut seq, 1317, b"70100", "Query execution was interrupted");
        let mut s = Scanner::new(Reply::Query, false);
        assert_eq!(scan_all(&mut s, &out), (out.len(), Event::Done { error: true }));
    }

    #[test]
    fn local_infile_round() {
        let mut s = Scanner::new(Reply::Query, true);
        let req = [9, 0, 0, 1, 0xFB, b'/', b't', b'm', b'p', b'/', b'x', b'.', b'c'];
        assert_eq!(s.feed(&req).unwrap(), (req.len(), Event::LocalInfile));
        // The client sent data with seq 2 and the empty packet with seq 3; the server answers seq 4.
        s.after_infile(3);
        let mut out = Vec::new();
        let mut seq = 4;
        write_ok(&mut out, &mut seq, 0, &OkP { affected_rows: 10, status: 2, ..Default::default() }, b"");
        assert_eq!(s.feed(&out).unwrap(), (out.len(), Event::Done { error: false }));
        // COM_STMT_EXECUTE of LOAD DATA LOCAL asks the same way.
        let mut e = Scanner::new(Reply::Execute { cursor: false }, true);
        assert_eq!(e.feed(&req).unwrap(), (req.len(), Event::LocalInfile));
        e.after_infile(3);
        assert_eq!(e.feed(&out).unwrap(), (out.len(), Event::Done { error: false }));
        // Nothing else reads 0xFB as an infile request.
        for reply in [Reply::Fetch, Reply::FieldList, Reply::Single] {
            assert_ne!(Scanner::new(reply, true).feed(&req).ok(), Some((req.len(), Event::LocalInfile)), "{reply:?}");
        }
    }

    #[test]
    fn prepare_reply_shapes() {
        for dep in [false, true] {
            for (params, cols) in [(0u16, 0u16), (2, 0), (0, 3), (2, 3)] {
                let mut out = Vec::new();
                let mut seq = 1;
                let mut ok = vec![0, 1, 0, 0, 0];
                ok.extend_from_slice(&cols.to_le_bytes());
                ok.extend_from_slice(&params.to_le_bytes());
                ok.extend_from_slice(&[0, 0, 0]);
                write_packet(&mut out, &mut seq, &ok);
                for n in [params, cols] {
                    for _ in 0..n {
                        write_packet(&mut out, &mut seq, b"\x03def");
                    }
                    if n > 0 && !dep {
                        write_eof(&mut out, &mut seq, 0, 2);
                    }
                }
                let mut s = Scanner::new(Reply::Prepare, dep);
                assert_eq!(s.feed(&out).unwrap(), (out.len(), Event::Done { error: false }), "{dep} {params} {cols}");
            }
        }
    }

    #[test]
    fn execute_with_cursor_stops_after_metadata() {
        let mut out = Vec::new();
        let mut seq = 1;
        write_packet(&mut out, &mut seq, &[1]);
        write_packet(&mut out, &mut seq, b"\x03def");
        write_eof(&mut out, &mut seq, 0, 2 | 0x40);
        let mut s = Scanner::new(Reply::Execute { cursor: true }, false);
        assert_eq!(s.feed(&out).unwrap(), (out.len(), Event::Done { error: false }));
        // Then COM_STMT_FETCH: binary rows and an EOF with LAST_ROW_SENT.
        let mut out = Vec::new();
        let mut seq = 1;
        write_packet(&mut out, &mut seq, &[0x00, 0x00, 0x01]);
        write_eof(&mut out, &mut seq, 0, 2 | 0x80);
        let mut f = Scanner::new(Reply::Fetch, false);
        assert_eq!(f.feed(&out).unwrap(), (out.len(), Event::Done { error: false }));
        assert_eq!(f.status() & 0x80, 0x80);
    }

    #[test]
    fn mariadb_metadata_skipping_and_progress_reports() {
        for dep in [false, true] {
            let mut out = Vec::new();
            let mut seq = 1;
            // Progress report, then a column count of 2 with "metadata follows" = 0.
            write_packet(&mut out, &mut seq, &[0xFF, 0xFF, 0xFF, 1, 1, 0, 0, 0, 0, 0]);
            write_packet(&mut out, &mut seq, &[2, 0]);
            if !dep {
                write_eof(&mut out, &mut seq, 0, 2);
            }
            write_packet(&mut out, &mut seq, &[0x00, 0x00, 1, 2]);
            if dep {
                write_ok(&mut out, &mut seq, 0xFE, &OkP { status: 2, ..Default::default() }, b"");
            } else {
                write_eof(&mut out, &mut seq, 0, 2);
            }
            let mut s = Scanner::new(Reply::Execute { cursor: false }, dep)
                .with_mariadb_capabilities(MARIADB_CLIENT_CACHE_METADATA | MARIADB_CLIENT_PROGRESS);
            assert_eq!(s.feed(&out).unwrap(), (out.len(), Event::Done { error: false }), "deprecate_eof={dep}");
            // Without the capabilities the same bytes end at the "error".
            let mut plain = Scanner::new(Reply::Execute { cursor: false }, dep);
            assert_eq!(plain.feed(&out).unwrap().1, Event::Done { error: true });
        }
    }

    #[test]
    fn field_list_and_single() {
        let mut out = Vec::new();
        let mut seq = 1;
        write_packet(&mut out, &mut seq, b"\x03def\x04test");
        write_eof(&mut out, &mut seq, 0, 2);
        let mut s = Scanner::new(Reply::FieldList, false);
        assert_eq!(s.feed(&out).unwrap(), (out.len(), Event::Done { error: false }));
        let mut out = Vec::new();
        let mut seq = 1;
        write_packet(&mut out, &mut seq, b"Uptime: 5  Threads: 1");
        let mut s = Scanner::new(Reply::Single, true);
        assert_eq!(s.feed(&out).unwrap(), (out.len(), Event::Done { error: false }));
    }

    #[test]
    fn huge_row_starting_with_fe_is_a_row() {
        // A text row whose first value is ≥ 16 MiB starts with 0xFE and spans chunks.
        let mut row = vec![0xFE];
        row.extend_from_slice(&(MAX_CHUNK as u64 + 5).to_le_bytes());
        row.resize(row.len() + MAX_CHUNK + 5, b'x');
        let mut out = Vec::new();
        let mut seq = 1;
        result_set(&mut out, &mut seq, 1, &[row], true, 2);
        let mut s = Scanner::new(Reply::Query, true);
        assert_eq!(s.feed(&out).unwrap(), (out.len(), Event::Done { error: false }));
    }

    #[test]
    fn cut_points() {
        let mut out = Vec::new();
        let mut seq = 1;
        result_set(&mut out, &mut seq, 1, &[b"\x03abc".to_vec(), b"\x03def".to_vec()], true, 2);
        // Column count (5 bytes), definition (4 + 23), rows of 8 bytes each (seq 3 and 4).
        let rows_at = 5 + 4 + 23;
        let cases = [
            (0, (0, 1)),
            (5, (0, 2)),
            (rows_at, (0, 3)),
            (rows_at + 2, (2, 3)),
            (rows_at + 4, (4, 3)),
            (rows_at + 6, (6, 3)),
            (rows_at + 8, (0, 4)),
            (rows_at + 11, (3, 4)),
        ];
        for (fed, want) in cases {
            let mut s = Scanner::new(Reply::Query, true);
            assert_eq!(s.feed(&out[..fed]).unwrap().1, Event::More);
            assert_eq!(s.cut(0), Some(want), "after {fed} bytes");
        }
        // Inside a packet split into chunks there is no clean cut.
        let mut big = vec![0x03];
        big.resize(MAX_CHUNK + 10, b'x');
        let mut out = Vec::new();
        let mut seq = 1;
        result_set(&mut out, &mut seq, 1, &[big], true, 2);
        let mut s = Scanner::new(Reply::Query, true);
        s.feed(&out[..rows_at + 4 + MAX_CHUNK + 6]).unwrap();
        assert_eq!(s.cut(0), None);
    }

    #[test]
    fn stops_at_reply_end() {
        let mut out = Vec::new();
        let mut seq = 1;
        write_ok(&mut out, &mut seq, 0, &OkP::default(), b"");
        let n = out.len();
        out.extend_from_slice(&[1, 0, 0, 0, 0]);
        let mut s = Scanner::new(Reply::Single, false);
        assert_eq!(s.feed(&out).unwrap(), (n, Event::Done { error: false }));
        assert!(s.feed(&out[n..]).is_err());
    }

    fn arb_reply() -> impl Strategy<Value = (Vec<u8>, bool)> {
        (
            any::<bool>(),
            proptest::collection::vec(
                (1usize..4, proptest::collection::vec(proptest::collection::vec(any::<u8>(), 1..300), 0..20), any::<bool>()),
                1..4,
            ),
        )
            .prop_map(|(dep, sets)| {
                let mut out = Vec::new();
                let mut seq = 1;
                let n = sets.len();
                for (i, (cols, rows, as_ok)) in sets.into_iter().enumerate() {
                    let status = if i + 1 < n { 2 | MORE } else { 2 };
                    let rows: Vec<Vec<u8>> = rows
                        .into_iter()
                        .map(|mut r| {
                            // A text row never starts with 0xFF or (short) 0xFE.
                            if r[0] >= 0xFB {
                                r[0] = 0x01;
                            }
                            r
                        })
                        .collect();
                    if as_ok {
                        write_ok(&mut out, &mut seq, 0, &OkP { status, ..Default::default() }, b"");
                    } else {
                        result_set(&mut out, &mut seq, cols, &rows, dep, status);
                    }
                }
                (out, dep)
            })
    }

    proptest! {
        #[test]
        fn any_split_finds_the_end((bytes, dep) in arb_reply(), cuts in proptest::collection::vec(any::<prop::sample::Index>(), 0..8)) {
            let mut points: Vec<usize> = cuts.iter().map(|c| c.index(bytes.len() + 1)).collect();
            points.push(0);
            points.push(bytes.len());
            points.sort();
            points.dedup();
            let mut s = Scanner::new(Reply::Query, dep);
            let mut last = Event::More;
            for w in points.windows(2) {
                let (used, ev) = s.feed(&bytes[w[0]..w[1]]).unwrap();
                prop_assert_eq!(used, w[1] - w[0]);
                last = ev;
                if w[1] < bytes.len() {
                    prop_assert_eq!(ev, Event::More);
                }
            }
            prop_assert_eq!(last, Event::Done { error: false });
            // What it learned is what a byte-at-a-time feed learns (rows the fast path counts
            // from whole packets, the general path from pieces).
            let mut one = Scanner::new(Reply::Query, dep);
            for b in bytes.chunks(1) {
                one.feed(b).unwrap();
            }
            prop_assert_eq!(
                (s.rows(), s.packets(), s.last_seq(), s.status(), s.warnings()),
                (one.rows(), one.packets(), one.last_seq(), one.status(), one.warnings())
            );
        }

        #[test]
        fn never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200), kind in 0u8..6, dep in any::<bool>()) {
            let reply = [Reply::Query, Reply::Execute { cursor: true }, Reply::Prepare, Reply::Fetch, Reply::FieldList, Reply::Single][kind as usize];
            let mut s = Scanner::new(reply, dep);
            let mut rest = &bytes[..];
            while !rest.is_empty() {
                match s.feed(rest) {
                    Ok((used, Event::More)) => { rest = &rest[used..]; if used == 0 { break; } }
                    Ok((used, Event::LocalInfile)) => { rest = &rest[used..]; s.after_infile(0); }
                    _ => break,
                }
            }
        }
    }
}
