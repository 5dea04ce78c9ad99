//! ⑥ exec for several shards: sends each shard its statement, reads the replies as streams and
//! merges them into one reply for the client, as one server would have sent it.
//!
//! Result sets: the column definitions are the first shard's; rows are concatenated, or
//! merged in ORDER BY order (k-way: each shard's next row is the only one held, and only the
//! sort columns are decoded), with OFFSET and LIMIT applied as rows go out; aggregates without
//! GROUP BY combine one row per shard. Rows go to the client as they are merged, through a
//! buffer flushed at `FLUSH_AT`: memory is one row per shard plus that buffer.
//!
//! OK replies (writes, DDL) are combined: affected rows summed (or the first's, for copies).
//!
//! A shard that fails or is lost gives the client an error packet, never a result that looks
//! complete: before the result set starts, in place of it; after, in place of its terminator.

use crate::net::Conn;
use crate::shard::plan::{Aggregate, HavingTest, Merge, SortColumn, SortKey};
use proto::codec::{read_lenenc, read_lenenc_str, write_lenenc, write_lenenc_str};
use proto::errors::*;
use proto::frame::{write_packet, MAX_CHUNK};
use proto::packet::{self, EOF_HEADER, ERR_HEADER};
use std::cmp::Ordering;
use std::future::Future;
use std::pin::Pin;
use std::sync::Mutex;
use std::task::Poll;
use tokio::io::AsyncWrite;

use super::Outcome;

/// Reply bytes held for the client before they are written.
const FLUSH_AT: usize = 64 << 10;

/// The largest packet read from a shard.
const MAX_PACKET: usize = 1 << 30;

/// Where a shard's reply is read from.
pub enum Source<'a> {
    /// Its connection: the request is sent and the reply streams.
    Live(&'a mut Conn),
    /// Its whole reply, read earlier (`read_whole`): a shard of an earlier batch, past the
    /// per-query connection budget. Packets missing at its end are a lost connection.
    Held(std::collections::VecDeque<Vec<u8>>),
}

/// One shard's reply and how messages name it.
pub struct Shard<'a> {
    pub source: Source<'a>,
    pub format: super::Format,
    /// `ds_2 (hostgroup 2)`.
    pub label: String,
    /// Server status flags of its last reply (updated by the merge).
    pub status: u16,
    /// Its reply was read to its end: the connection can be reused (set by the merge).
    pub finished: bool,
}

impl Shard<'_> {
    fn deprecate_eof(&self) -> bool {
        self.format.deprecate_eof
    }
}

/// The client went away: the session ends.
#[derive(Debug)]
pub struct ClientGone;

/// Why a shard's reply could not be merged.
enum Failure {
    /// Its connection failed or closed.
    Lost(usize),
    /// It answered with an error (the ERR payload).
    Error(usize, Vec<u8>),
    /// Its reply does not fit the others' (another column count, an OK beside rows…), or a
    /// value could not be merged.
    Mismatch(String),
}

/// The first packet of a shard's reply, and what follows it up to the rows.
enum Head {
    /// The OK and its packet.
    Ok(packet::Ok, Vec<u8>),
    Rows {
        columns: Vec<Vec<u8>>,
    },
}

/// What the merge writes and counts.
struct Out<'c, 'k> {
    client: &'c Mutex<&'k mut Conn>,
    buf: Vec<u8>,
    seq: u8,
    rows: u64,
    /// The sequence id after the last packet written to the client.
    sent_seq: &'c std::sync::atomic::AtomicU8,
    /// Rows go out in the binary protocol (a prepared statement's execute): the columns' types,
    /// set once the column definitions are known.
    binary: Option<Vec<super::binary::BinColumn>>,
    /// The first shard's names, given back their logical ones in the column definitions.
    rename: Option<super::RenameColumns<'c>>,
}

impl Out<'_, '_> {
    fn packet(&mut self, payload: &[u8]) {
        write_packet(&mut self.buf, &mut self.seq, payload);
    }

    async fn flush_if_full(&mut self) -> Result<(), ClientGone> {
        if self.buf.len() >= FLUSH_AT {
            self.flush().await?;
        }
        Ok(())
    }

    async fn flush(&mut self) -> Result<(), ClientGone> {
        if !self.buf.is_empty() {
            write_client(self.client, &self.buf).await.map_err(|_| ClientGone)?;
            self.buf.clear();
            self.sent_seq.store(self.seq, std::sync::atomic::Ordering::Relaxed);
        }
        Ok(())
    }

    /// A text row, as the client's protocol wants it.
    fn row(&mut self, row: &[u8]) -> Result<(), Failure> {
        match &self.binary {
            None => self.packet(row),
            Some(columns) => {
                let Some(b) = super::binary::row(row, columns) else {
                    return Err(Failure::Mismatch("a value does not read as its column's type for the binary protocol".into()));
                };
                self.packet(&b);
            }
        }
        self.rows += 1;
        Ok(())
    }

    fn error(&mut self, code: u16, sqlstate: &[u8; 5], message: &[u8]) {
        packet::write_err_bytes(&mut self.buf, &mut self.seq, code, sqlstate, message);
    }
}

/// Writes `bytes` to the client (and flushes them), holding it only while each step is polled.
async fn write_client(client: &Mutex<&mut Conn>, bytes: &[u8]) -> std::io::Result<()> {
    let take = || client.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let mut written = 0;
    while written < bytes.len() {
        let n = std::future::poll_fn(|cx| Pin::new(&mut take().stream).poll_write(cx, &bytes[written..])).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        written += n;
    }
    std::future::poll_fn(|cx| Pin::new(&mut take().stream).poll_flush(cx)).await
}

/// Reads one packet from a shard, skipping MariaDB progress reports.
async fn read_packet(shards: &mut [Shard<'_>], i: usize) -> Result<Vec<u8>, Failure> {
    match &mut shards[i].source {
        Source::Live(conn) => next_packet(conn).await.ok_or(Failure::Lost(i)),
        Source::Held(packets) => packets.pop_front().ok_or(Failure::Lost(i)),
    }
}

/// A shard connection's next packet, MariaDB progress reports skipped; `None` when the
/// connection failed or closed.
async fn next_packet(conn: &mut Conn) -> Option<Vec<u8>> {
    loop {
        let frame = conn.read_frame(MAX_PACKET).await.ok().flatten()?;
        let payload = frame.payload(&conn.rbuf).into_owned();
        conn.consume(frame.wire_len);
        // A progress report: ERR header with error code 0xFFFF.
        if !payload.starts_with(&[ERR_HEADER, 0xFF, 0xFF]) {
            return Some(payload);
        }
    }
}

/// Whether a packet in a row stream is its terminator (EOF, or OK with 0xFE).
fn is_terminator(p: &[u8]) -> bool {
    p.first() == Some(&EOF_HEADER) && p.len() < MAX_CHUNK
}

async fn read_head(shards: &mut [Shard<'_>], i: usize) -> Result<Head, Failure> {
    let first = read_packet(shards, i).await?;
    match first.first() {
        Some(&packet::OK_HEADER) => {
            let ok = packet::parse_ok(&first).map_err(|_| Failure::Mismatch(format!("{} sent a malformed OK", shards[i].label)))?;
            shards[i].status = ok.status;
            Ok(Head::Ok(ok, first))
        }
        Some(&ERR_HEADER) => Err(Failure::Error(i, first)),
        Some(&packet::LOCAL_INFILE_HEADER) => Err(Failure::Mismatch("sluice cannot run LOAD DATA LOCAL on shards".into())),
        _ => {
            let (count, _) = read_lenenc(&first).ok_or_else(|| Failure::Mismatch(format!("{} sent a malformed reply", shards[i].label)))?;
            let mut columns = Vec::with_capacity(count.min(4096) as usize);
            for _ in 0..count {
                columns.push(read_packet(shards, i).await?);
            }
            if !shards[i].deprecate_eof() {
                read_packet(shards, i).await?;
            }
            Ok(Head::Rows { columns })
        }
    }
}

/// The next row of a shard's result set, `None` at its end (its status kept).
async fn next_row(shards: &mut [Shard<'_>], i: usize, ended: &mut [bool]) -> Result<Option<Vec<u8>>, Failure> {
    if ended[i] {
        return Ok(None);
    }
    let p = read_packet(shards, i).await?;
    if is_terminator(&p) {
        ended[i] = true;
        let deprecate_eof = shards[i].deprecate_eof();
        if let Ok(status) = packet::terminator_status(&p, deprecate_eof) {
            shards[i].status = status;
        }
        return Ok(None);
    }
    if p.first() == Some(&ERR_HEADER) {
        ended[i] = true;
        return Err(Failure::Error(i, p));
    }
    Ok(Some(p))
}

/// What a fan-out sends and how its merged reply goes out.
pub struct Fanout<'r> {
    /// One COM_QUERY packet per shard (a `Source::Held` shard's was sent already).
    pub requests: &'r [Vec<u8>],
    pub merge: &'r Merge,
    /// The reply's first sequence id.
    pub seq: u8,
    /// At each moment, the sequence id of the next packet the client expects (what it was sent
    /// so far): if the merge is abandoned (KILL, a timeout), an error packet with that id ends
    /// the reply cleanly.
    pub sent_seq: &'r std::sync::atomic::AtomicU8,
    /// Rows in the binary protocol (a prepared statement's execute).
    pub binary: bool,
    /// The first shard's names, given back their logical ones in the column definitions.
    pub rename: Option<super::RenameColumns<'r>>,
}

/// Sends each shard its request and writes the merged reply. A shard whose reply was not read
/// to its end is left `finished == false`: its connection must be closed.
///
/// A client that goes away while the merge waits for its shards is noticed then, not at the
/// merge's next write: the merge ends with `ClientGone` (its shards' replies unfinished).
pub async fn run(client: &mut Conn, shards: &mut [Shard<'_>], fanout: Fanout<'_>) -> Result<Outcome, ClientGone> {
    // The merge takes the client only while a write of it is polled (`write_client`), so that
    // between writes the client's side can be watched. One task uses both: never contended.
    let client = Mutex::new(client);
    let mut merging = std::pin::pin!(merge_replies(&client, shards, fanout));
    let mut watching = true;
    std::future::poll_fn(|cx| {
        if let Poll::Ready(r) = merging.as_mut().poll(cx) {
            return Poll::Ready(r);
        }
        if watching {
            if let Ok(mut c) = client.try_lock() {
                match super::watch_client_side(&mut c, cx) {
                    super::Watch::Quiet => {}
                    super::Watch::Gone => return Poll::Ready(Err(ClientGone)),
                    super::Watch::Stop => watching = false,
                }
            }
        }
        Poll::Pending
    })
    .await
}

async fn merge_replies(client: &Mutex<&mut Conn>, shards: &mut [Shard<'_>], fanout: Fanout<'_>) -> Result<Outcome, ClientGone> {
    let Fanout { requests, merge, seq, sent_seq, binary, rename } = fanout;
    sent_seq.store(seq, std::sync::atomic::Ordering::Relaxed);
    let mut out = Out { client, buf: Vec::new(), seq, rows: 0, sent_seq, binary: None, rename };
    let mut outcome = Outcome::default();
    // Replies read to their end; the others are closed, not pooled.
    let mut ended = vec![false; shards.len()];
    let result = async {
        if shards.is_empty() || requests.len() != shards.len() {
            return Err(Failure::Mismatch("a cross-shard statement without one request per shard".into()));
        }
        for (i, request) in requests.iter().enumerate() {
            if let Source::Live(conn) = &mut shards[i].source {
                if conn.write_all(request).await.is_err() {
                    return Err(Failure::Lost(i));
                }
            }
        }
        match merge {
            Merge::Ok { sum } => merge_ok(shards, &mut ended, *sum, None, &mut out, &mut outcome).await,
            Merge::Inserted { first_key } => merge_ok(shards, &mut ended, true, Some(*first_key), &mut out, &mut outcome).await,
            Merge::One => {
                let rows = RowMerge {
                    one: true,
                    order: &[],
                    then_order: &[],
                    max_buffered: 0,
                    offset: 0,
                    limit: None,
                    aggregates: None,
                    having: &[],
                    hidden: 0,
                };
                merge_rows(shards, &mut ended, &rows, &mut out, &mut outcome, binary).await
            }
            Merge::Rows { order, then_order, max_buffered, offset, limit, aggregates, grouped: _, having, hidden } => {
                let rows = RowMerge {
                    one: false,
                    order,
                    then_order,
                    max_buffered: *max_buffered,
                    offset: *offset,
                    limit: *limit,
                    aggregates: aggregates.as_deref(),
                    having,
                    hidden: *hidden,
                };
                merge_rows(shards, &mut ended, &rows, &mut out, &mut outcome, binary).await
            }
        }
    }
    .await;
    let result = match result {
        Ok(Ok(())) => Ok(()),
        Ok(Err(ClientGone)) => Err(ClientGone),
        Err(failure) => {
            outcome.error = true;
            let (code, sqlstate, message) = describe(shards, &failure, &ended, matches!(merge, Merge::Ok { .. } | Merge::Inserted { .. }));
            outcome.error_code = code;
            out.error(code, &sqlstate, message.as_bytes());
            Ok(())
        }
    };
    for (s, done) in shards.iter_mut().zip(&ended) {
        s.finished = *done;
    }
    result?;
    out.flush().await?;
    outcome.rows = out.rows;
    Ok(outcome)
}

/// A reply read whole by `read_whole`.
pub struct HeldReply {
    pub packets: std::collections::VecDeque<Vec<u8>>,
    /// It was read to its end: the connection can be reused.
    pub complete: bool,
}

/// The shard's replies held so far need more than the query's memory budget.
#[derive(Debug)]
pub struct OverBudget;

/// Reads the whole reply to a request sent on `conn` into memory, as `Source::Held` gives it
/// back to the merge, taking each packet's size from `budget` (bytes left of the query's). A
/// lost connection ends the packets early (`complete == false`); the merge reports it.
pub async fn read_whole(conn: &mut Conn, format: super::Format, budget: &mut usize) -> Result<HeldReply, OverBudget> {
    let mut reply = HeldReply { packets: std::collections::VecDeque::new(), complete: false };
    let Some(first) = hold_next(conn, budget, &mut reply).await? else { return Ok(reply) };
    match first {
        packet::OK_HEADER | ERR_HEADER => {
            reply.complete = true;
            return Ok(reply);
        }
        // A LOCAL INFILE request (the merge refuses it) leaves the server waiting: not reusable.
        packet::LOCAL_INFILE_HEADER => return Ok(reply),
        _ => {}
    }
    let Some((count, _)) = reply.packets.back().and_then(|p| read_lenenc(p)) else { return Ok(reply) };
    let head = count.saturating_add(u64::from(!format.deprecate_eof));
    for _ in 0..head {
        if hold_next(conn, budget, &mut reply).await?.is_none() {
            return Ok(reply);
        }
    }
    while let Some(first) = hold_next(conn, budget, &mut reply).await? {
        if first == ERR_HEADER || reply.packets.back().is_some_and(|p| is_terminator(p)) {
            reply.complete = true;
            break;
        }
    }
    Ok(reply)
}

/// Reads the reply's next packet (progress reports skipped) onto `reply`, its cost taken from
/// `budget`: its first byte, `None` when the connection is gone.
async fn hold_next(conn: &mut Conn, budget: &mut usize, reply: &mut HeldReply) -> Result<Option<u8>, OverBudget> {
    let Some(payload) = next_packet(conn).await else { return Ok(None) };
    // What a held packet costs: its bytes and its place in the queue.
    let cost = payload.len() + 2 * std::mem::size_of::<Vec<u8>>();
    *budget = budget.checked_sub(cost).ok_or(OverBudget)?;
    let first = payload.first().copied().unwrap_or(0);
    reply.packets.push_back(payload);
    Ok(Some(first))
}

/// The error a failure gives the client: the shard's own error, with which shard said it.
fn describe(shards: &[Shard<'_>], failure: &Failure, ended: &[bool], write: bool) -> (u16, [u8; 5], String) {
    // A write that other shards completed has applied there.
    let applied = ended.iter().filter(|&&e| e).count();
    let partial = if write && applied > 0 {
        format!("; {applied} other shard(s) applied it (writes across shards are not atomic yet)")
    } else {
        String::new()
    };
    match failure {
        Failure::Lost(i) => (
            ER_CONNECTION_KILLED,
            *SQLSTATE_CONNECTION_KILLED,
            format!("sluice lost shard {} during a cross-shard statement: its result is incomplete{partial}", shards[*i].label),
        ),
        Failure::Error(i, payload) => match packet::parse_err(payload) {
            Ok(e) => (e.code, e.sqlstate, format!("{} (shard {}){partial}", String::from_utf8_lossy(e.message), shards[*i].label)),
            Err(_) => (ER_PROXY_NO_BACKEND, *SQLSTATE_GENERAL, format!("shard {} sent a malformed error{partial}", shards[*i].label)),
        },
        Failure::Mismatch(why) => {
            (ER_PROXY_NO_BACKEND, *SQLSTATE_GENERAL, format!("sluice cannot merge the shards' replies: {why}{partial}"))
        }
    }
}

async fn merge_ok(
    shards: &mut [Shard<'_>],
    ended: &mut [bool],
    sum: bool,
    generated: Option<u64>,
    out: &mut Out<'_, '_>,
    outcome: &mut Outcome,
) -> Result<Result<(), ClientGone>, Failure> {
    let mut combined: Option<packet::Ok> = None;
    let mut first_failure = None;
    for i in 0..shards.len() {
        // Every shard's reply is read, so a failure on one leaves the others reusable.
        match read_head(shards, i).await {
            Ok(Head::Ok(ok, _)) => {
                ended[i] = true;
                let c = combined.get_or_insert(packet::Ok { status: ok.status, ..Default::default() });
                if sum || i == 0 {
                    c.affected_rows = c.affected_rows.saturating_add(ok.affected_rows);
                }
                if c.last_insert_id == 0 {
                    c.last_insert_id = ok.last_insert_id;
                }
                c.warnings = c.warnings.saturating_add(ok.warnings);
            }
            Ok(Head::Rows { .. }) => {
                first_failure.get_or_insert(Failure::Mismatch("a shard answered a write with rows".into()));
            }
            Err(Failure::Error(i, p)) => {
                ended[i] = true;
                first_failure.get_or_insert(Failure::Error(i, p));
            }
            Err(f) => {
                first_failure.get_or_insert(f);
            }
        }
    }
    if let Some(f) = first_failure {
        return Err(f);
    }
    let mut ok = combined.unwrap_or_default();
    if let Some(key) = generated {
        ok.last_insert_id = key;
    }
    outcome.affected_rows = ok.affected_rows;
    outcome.last_insert_id = ok.last_insert_id;
    outcome.status = ok.status & !proto::StatusFlags::SERVER_MORE_RESULTS_EXISTS.bits();
    outcome.warnings = ok.warnings;
    packet::write_ok(&mut out.buf, &mut out.seq, packet::OK_HEADER, &packet::Ok { status: outcome.status, ..ok }, b"");
    Ok(Ok(()))
}

/// How a sort or aggregate column's text values compare.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ValueKind {
    /// Integers, decimals, floating point, YEAR: by value.
    Numeric,
    /// The binary character set: bytewise.
    Binary,
    /// Other character sets: ASCII letters without case, trailing spaces ignored (as `_ci`
    /// PAD SPACE collations compare ASCII text); dates and times compare bytewise this way too.
    Text,
    /// TIME: by its signed duration (`-39:30:48` is after `-68:01:00`).
    Time,
}

/// What the merge reads of a column definition.
#[derive(Debug, Clone, Copy)]
struct ColumnInfo {
    kind: ValueKind,
    type_id: u8,
    decimals: u8,
}

impl Default for ColumnInfo {
    fn default() -> Self {
        ColumnInfo { kind: ValueKind::Binary, type_id: 0xFD, decimals: 0 }
    }
}

/// (name, character set, type, decimals) of a column definition.
fn column_info(def: &[u8], mariadb_caps: u32) -> Option<(&[u8], u16, u8, u8)> {
    let mut rest = def;
    let mut name: &[u8] = b"";
    for i in 0..6 {
        let (s, n) = read_lenenc_str(rest)?;
        if i == 4 {
            name = s;
        }
        rest = rest.get(n..)?;
    }
    if mariadb_caps & MARIADB_CLIENT_EXTENDED_METADATA != 0 {
        let (_, n) = read_lenenc_str(rest)?;
        rest = rest.get(n..)?;
    }
    // 0x0c, character set (2), column length (4), type, flags (2), decimals.
    let charset = u16::from_le_bytes([*rest.get(1)?, *rest.get(2)?]);
    Some((name, charset, *rest.get(7)?, *rest.get(10)?))
}

const MARIADB_CLIENT_EXTENDED_METADATA: u32 = 1 << 3;

fn kind_of(charset: u16, type_id: u8) -> ValueKind {
    match type_id {
        0x00..=0x05 | 0x08 | 0x09 | 0x0D | 0xF6 => ValueKind::Numeric,
        0x0B => ValueKind::Time,
        _ if charset == 63 => ValueKind::Binary,
        _ => ValueKind::Text,
    }
}

/// The `index`th value of a text-protocol row: `Some(None)` for NULL.
fn field(row: &[u8], index: usize) -> Option<Option<&[u8]>> {
    let mut rest = row;
    for i in 0.. {
        let value = if rest.first() == Some(&0xFB) {
            rest = &rest[1..];
            None
        } else {
            let (v, n) = read_lenenc_str(rest)?;
            rest = rest.get(n..)?;
            Some(v)
        };
        if i == index {
            return Some(value);
        }
    }
    None
}

/// Numbers as text: by sign, then integer digits, then fraction; exponents through f64.
fn cmp_numeric(a: &[u8], b: &[u8]) -> Ordering {
    let has_exp = |s: &[u8]| s.iter().any(|c| matches!(c, b'e' | b'E'));
    if has_exp(a) || has_exp(b) {
        let f = |s: &[u8]| std::str::from_utf8(s).ok().and_then(|s| s.parse::<f64>().ok()).unwrap_or(0.0);
        return f(a).total_cmp(&f(b));
    }
    let split = |s: &[u8]| -> (bool, Vec<u8>, Vec<u8>) {
        let (neg, s) = match s.first() {
            Some(b'-') => (true, &s[1..]),
            Some(b'+') => (false, &s[1..]),
            _ => (false, s),
        };
        let dot = s.iter().position(|&c| c == b'.').unwrap_or(s.len());
        let int: Vec<u8> = s[..dot].iter().copied().skip_while(|&c| c == b'0').collect();
        let mut frac: Vec<u8> = s.get(dot + 1..).unwrap_or_default().to_vec();
        while frac.last() == Some(&b'0') {
            frac.pop();
        }
        let zero = int.is_empty() && frac.is_empty();
        (neg && !zero, int, frac)
    };
    let (an, ai, af) = split(a);
    let (bn, bi, bf) = split(b);
    let magnitude = ai.len().cmp(&bi.len()).then_with(|| ai.cmp(&bi)).then_with(|| af.cmp(&bf));
    match (an, bn) {
        (false, false) => magnitude,
        (true, true) => magnitude.reverse(),
        (true, false) => Ordering::Less,
        (false, true) => Ordering::Greater,
    }
}

fn trim_spaces(s: &[u8]) -> &[u8] {
    let end = s.iter().rposition(|&c| c != b' ').map_or(0, |p| p + 1);
    &s[..end]
}

fn cmp_text(a: &[u8], b: &[u8]) -> Ordering {
    let (a, b) = (trim_spaces(a), trim_spaces(b));
    a.iter().map(u8::to_ascii_lowercase).cmp(b.iter().map(u8::to_ascii_lowercase))
}

/// NULL sorts first, as on the server.
fn cmp_values(a: Option<&[u8]>, b: Option<&[u8]>, kind: ValueKind) -> Ordering {
    match (a, b) {
        (None, None) => Ordering::Equal,
        (None, Some(_)) => Ordering::Less,
        (Some(_), None) => Ordering::Greater,
        (Some(a), Some(b)) => match kind {
            ValueKind::Numeric => cmp_numeric(a, b),
            ValueKind::Binary => a.cmp(b),
            ValueKind::Text => cmp_text(a, b),
            ValueKind::Time => super::binary::time_micros(a).cmp(&super::binary::time_micros(b)),
        },
    }
}

/// A sort key resolved against the column definitions.
struct Resolved {
    index: usize,
    descending: bool,
    kind: ValueKind,
}

fn cmp_rows(a: &[u8], b: &[u8], keys: &[Resolved]) -> Ordering {
    for k in keys {
        let va = field(a, k.index).flatten();
        let vb = field(b, k.index).flatten();
        let o = cmp_values(va, vb, k.kind);
        let o = if k.descending { o.reverse() } else { o };
        if o != Ordering::Equal {
            return o;
        }
    }
    Ordering::Equal
}

/// `Merge::Rows`, borrowed.
struct RowMerge<'m> {
    /// One shard's reply as it is: an OK passes through.
    one: bool,
    order: &'m [SortKey],
    then_order: &'m [SortKey],
    max_buffered: usize,
    offset: u64,
    limit: Option<u64>,
    aggregates: Option<&'m [Aggregate]>,
    having: &'m [HavingTest],
    hidden: usize,
}

/// Whether a merged group's row passes HAVING (NULL passes no comparison).
fn passes(row: &[u8], having: &[HavingTest]) -> bool {
    having.iter().all(|h| match field(row, h.column).flatten() {
        Some(v) => h.passes.contains(&cmp_numeric(v, h.value.as_bytes())),
        None => false,
    })
}

/// The first `visible` values of a row (the rest are hidden sort columns).
fn visible_part(row: &[u8], visible: usize) -> &[u8] {
    let mut at = 0;
    for _ in 0..visible {
        let Some(rest) = row.get(at..) else { return row };
        at += if rest.first() == Some(&0xFB) { 1 } else { read_lenenc_str(rest).map_or(rest.len(), |(_, n)| n) };
    }
    row.get(..at).unwrap_or(row)
}

async fn merge_rows(
    shards: &mut [Shard<'_>],
    ended: &mut [bool],
    merge: &RowMerge<'_>,
    out: &mut Out<'_, '_>,
    outcome: &mut Outcome,
    binary: bool,
) -> Result<Result<(), ClientGone>, Failure> {
    let RowMerge { one, order, then_order, max_buffered, offset, limit, aggregates, having, hidden } = *merge;
    // Every shard's head first: they must agree before anything reaches the client.
    let mut columns = None;
    let mut first_failure = None;
    for i in 0..shards.len() {
        match read_head(shards, i).await {
            Ok(Head::Rows { columns: c }) => match &columns {
                None => columns = Some(c),
                Some(first) if first.len() != c.len() => {
                    first_failure.get_or_insert(Failure::Mismatch("the shards returned different column counts".into()));
                }
                Some(_) => {}
            },
            Ok(Head::Ok(ok, packet)) if one => {
                // A write or a statement without rows: the shard's OK as it is.
                ended[i] = true;
                outcome.affected_rows = ok.affected_rows;
                outcome.last_insert_id = ok.last_insert_id;
                outcome.status = ok.status;
                outcome.warnings = ok.warnings;
                out.packet(&packet);
                return Ok(Ok(()));
            }
            Ok(Head::Ok(..)) => {
                ended[i] = true;
                first_failure.get_or_insert(Failure::Mismatch("a shard answered a query with no rows".into()));
            }
            Err(Failure::Error(i, p)) => {
                ended[i] = true;
                first_failure.get_or_insert(Failure::Error(i, p));
            }
            Err(f) => {
                first_failure.get_or_insert(f);
            }
        }
    }
    if let Some(f) = first_failure {
        return Err(f);
    }
    let Some(columns) = columns else { return Err(Failure::Mismatch("no shard answered".into())) };
    if hidden > columns.len() {
        return Err(Failure::Mismatch("fewer columns than sluice added for ORDER BY".into()));
    }
    let visible = columns.len() - hidden;
    let caps = shards[0].format.mariadb_caps;
    let names: Vec<Vec<u8>> = columns.iter().map(|def| column_info(def, caps).map_or(Vec::new(), |(n, ..)| n.to_vec())).collect();
    let info: Vec<ColumnInfo> = columns
        .iter()
        .map(|def| {
            column_info(def, caps).map_or_else(ColumnInfo::default, |(_, cs, t, d)| ColumnInfo {
                kind: kind_of(cs, t),
                type_id: t,
                decimals: d,
            })
        })
        .collect();
    let mut keys = Vec::with_capacity(order.len());
    for k in order {
        let index = match &k.column {
            SortColumn::Position(p) => *p,
            SortColumn::Hidden(k) => (info.len() - hidden) + k,
            SortColumn::Name(n) => names
                .iter()
                .position(|name| name.eq_ignore_ascii_case(n.as_bytes()))
                .ok_or_else(|| Failure::Mismatch(format!("ORDER BY `{n}` is not a column of the result")))?,
        };
        let Some(column) = info.get(index) else {
            return Err(Failure::Mismatch(format!("ORDER BY position {} is past the result's columns", index + 1)));
        };
        keys.push(Resolved { index, descending: k.descending, kind: column.kind });
    }
    if binary {
        let mut types = Vec::with_capacity(visible);
        for def in &columns[..visible] {
            types.push(super::binary::BinColumn::of(def, caps).ok_or_else(|| Failure::Mismatch("a malformed column definition".into()))?);
        }
        out.binary = Some(types);
    }
    // The result set's head: column count, definitions, and EOF unless DEPRECATE_EOF.
    let deprecate_eof = shards[0].deprecate_eof();
    let mut head = Vec::with_capacity(9);
    write_lenenc(&mut head, visible as u64);
    out.packet(&head);
    for def in &columns[..visible] {
        match out.rename {
            Some(rename) => out.packet(&rename.column(def)),
            None => out.packet(def),
        }
    }
    if !deprecate_eof {
        packet::write_eof(&mut out.buf, &mut out.seq, 0, shards[0].status);
    }
    let mut window = Window { skip: offset, room: limit.unwrap_or(u64::MAX) };
    if aggregates.is_none() && keys.is_empty() {
        // Concatenated, shard after shard.
        for i in 0..shards.len() {
            while window.room > 0 {
                let Some(row) = next_row(shards, i, ended).await? else { break };
                if window.take() {
                    out.row(visible_part(&row, visible))?;
                    if let Err(e) = out.flush_if_full().await {
                        return Ok(Err(e));
                    }
                }
            }
        }
    } else {
        // k-way: the smallest of each shard's next row; ties go to the lower shard. With
        // aggregates, a run of rows with equal keys (all rows, without keys) is one group.
        let mut next: Vec<Option<Vec<u8>>> = Vec::with_capacity(shards.len());
        for i in 0..shards.len() {
            next.push(next_row(shards, i, ended).await?);
        }
        let mut group: Option<Group> = None;
        let counting = aggregates == Some(&[Aggregate::CountDistinct][..]);
        let mut distinct = 0u64;
        // Merged groups to sort again (ORDER BY an aggregate), within the query's budget.
        let mut held = (!then_order.is_empty()).then(|| HeldRows { rows: Vec::new(), bytes: 0, max: max_buffered });
        while window.room > 0 {
            let mut best: Option<usize> = None;
            for (i, row) in next.iter().enumerate() {
                let Some(row) = row else { continue };
                let better = match best.and_then(|b| next[b].as_deref()) {
                    None => true,
                    Some(current) => cmp_rows(row, current, &keys) == Ordering::Less,
                };
                if better {
                    best = Some(i);
                }
            }
            let Some(i) = best else { break };
            let row = next[i].take().unwrap_or_default();
            next[i] = next_row(shards, i, ended).await?;
            let done = match aggregates {
                None => Some(visible_part(&row, visible).to_vec()),
                Some(aggs) => match &mut group {
                    Some(g) if cmp_rows(&row, &g.first, &keys) == Ordering::Equal => {
                        g.fold(&row, aggs, &info, visible)?;
                        None
                    }
                    _ => {
                        let mut g = Group::new(row, aggs.len());
                        g.fold_own(aggs, &info, visible)?;
                        group.replace(g).map(|g| g.finish(aggs, &info)).transpose()?
                    }
                },
            };
            if let (Some(row), true) = (&done, counting) {
                // One distinct x over all shards: counted unless NULL (its count is 0).
                distinct += u64::from(field(row, 0).flatten().is_some_and(|v| v != b"0"));
                continue;
            }
            if let Some(row) = done.filter(|r| passes(r, having)) {
                if let Some(h) = held.as_mut() {
                    h.push(row)?;
                } else if window.take() {
                    out.row(&row)?;
                    if let Err(e) = out.flush_if_full().await {
                        return Ok(Err(e));
                    }
                }
            }
        }
        if let (Some(g), Some(aggs)) = (group, aggregates) {
            let row = g.finish(aggs, &info)?;
            if counting {
                distinct += u64::from(field(&row, 0).flatten().is_some_and(|v| v != b"0"));
                let mut total = Vec::new();
                write_lenenc_str(&mut total, distinct.to_string().as_bytes());
                if window.take() {
                    out.row(&total)?;
                }
            } else if passes(&row, having) {
                match held.as_mut() {
                    Some(h) => h.push(row)?,
                    None if window.take() => out.row(&row)?,
                    None => {}
                }
            }
        } else if counting {
            // No rows at all: COUNT(DISTINCT x) is 0.
            if window.take() {
                out.row(&[1, b'0'])?;
            }
        }
        if let Some(mut h) = held {
            let mut then = Vec::with_capacity(then_order.len());
            for k in then_order {
                let SortColumn::Position(index) = k.column else {
                    return Err(Failure::Mismatch("merged groups sort on selected columns only".into()));
                };
                let kind = info.get(index).map_or(ValueKind::Binary, |c| c.kind);
                then.push(Resolved { index, descending: k.descending, kind });
            }
            // Stable: groups equal in the ORDER BY keep their group-key order.
            h.rows.sort_by(|a, b| cmp_rows(a, b, &then));
            for row in h.rows {
                if window.room == 0 {
                    break;
                }
                if window.take() {
                    out.row(&row)?;
                    if let Err(e) = out.flush_if_full().await {
                        return Ok(Err(e));
                    }
                }
            }
        }
    }
    // Past the LIMIT: each shard's rest (bounded by the LIMIT pushed down) is read and
    // dropped, so its connection can be reused.
    for i in 0..shards.len() {
        while next_row(shards, i, ended).await?.is_some() {}
    }
    let status = shards[0].status & !proto::StatusFlags::SERVER_MORE_RESULTS_EXISTS.bits();
    outcome.status = status;
    if deprecate_eof {
        packet::write_ok(&mut out.buf, &mut out.seq, EOF_HEADER, &packet::Ok { status, ..Default::default() }, b"");
    } else {
        packet::write_eof(&mut out.buf, &mut out.seq, 0, status);
    }
    Ok(Ok(()))
}

/// Rows a merge must hold, bounded by the query's memory budget.
struct HeldRows {
    rows: Vec<Vec<u8>>,
    bytes: usize,
    max: usize,
}

impl HeldRows {
    fn push(&mut self, row: Vec<u8>) -> Result<(), Failure> {
        self.bytes += row.len() + std::mem::size_of::<Vec<u8>>();
        if self.bytes > self.max {
            return Err(Failure::Mismatch(format!(
                "the merged groups to sort exceed max_merge_buffer_bytes ({} bytes); narrow the statement with the sharding key or a WHERE clause",
                self.max
            )));
        }
        self.rows.push(row);
        Ok(())
    }
}

/// OFFSET and LIMIT over the rows (or groups) the merge produces.
struct Window {
    skip: u64,
    room: u64,
}

impl Window {
    /// Whether the next row goes to the client.
    fn take(&mut self) -> bool {
        if self.skip > 0 {
            self.skip -= 1;
            false
        } else if self.room > 0 {
            self.room -= 1;
            true
        } else {
            false
        }
    }
}

/// A running value: NULL until a shard gives one.
type Running = Option<Vec<u8>>;

/// A group being combined: its first row (GROUP BY columns), each aggregate's running value,
/// and AVG's running SUM and COUNT.
struct Group {
    first: Vec<u8>,
    values: Vec<Running>,
    avg: Vec<(Running, Running)>,
}

fn malformed() -> Failure {
    Failure::Mismatch("a shard sent a malformed row".into())
}

impl Group {
    fn new(first: Vec<u8>, columns: usize) -> Group {
        Group { first, values: vec![None; columns], avg: vec![(None, None); columns] }
    }

    /// Folds in the group's first row.
    fn fold_own(&mut self, aggs: &[Aggregate], info: &[ColumnInfo], visible: usize) -> Result<(), Failure> {
        let first = std::mem::take(&mut self.first);
        let r = self.fold(&first, aggs, info, visible);
        self.first = first;
        r
    }

    fn fold(&mut self, row: &[u8], aggs: &[Aggregate], info: &[ColumnInfo], visible: usize) -> Result<(), Failure> {
        let add = |acc: &mut Option<Vec<u8>>, v: Option<&[u8]>, what: &str| -> Result<(), Failure> {
            let Some(v) = v else { return Ok(()) };
            *acc = Some(match acc.take() {
                None => v.to_vec(),
                Some(a) => {
                    add_decimal(&a, v).ok_or_else(|| Failure::Mismatch(format!("the shards' {what} values cannot be added exactly")))?
                }
            });
            Ok(())
        };
        for (c, agg) in aggs.iter().enumerate() {
            let kind = info.get(c).map_or(ValueKind::Numeric, |i| i.kind);
            match *agg {
                Aggregate::Value | Aggregate::CountDistinct => {}
                Aggregate::Count => add(&mut self.values[c], field(row, c).ok_or_else(malformed)?, "COUNT")?,
                Aggregate::Sum => add(&mut self.values[c], field(row, c).ok_or_else(malformed)?, "SUM")?,
                Aggregate::Min | Aggregate::Max => {
                    let Some(v) = field(row, c).ok_or_else(malformed)? else { continue };
                    let wanted = if *agg == Aggregate::Min { Ordering::Less } else { Ordering::Greater };
                    let replace = match &self.values[c] {
                        None => true,
                        Some(a) => cmp_values(Some(v), Some(a), kind) == wanted,
                    };
                    if replace {
                        self.values[c] = Some(v.to_vec());
                    }
                }
                Aggregate::Avg { sum, count } => {
                    let (s, n) = &mut self.avg[c];
                    add(s, field(row, visible + sum).ok_or_else(malformed)?, "SUM")?;
                    add(n, field(row, visible + count).ok_or_else(malformed)?, "COUNT")?;
                }
            }
        }
        Ok(())
    }

    /// The group's row, as the client gets it.
    fn finish(&self, aggs: &[Aggregate], info: &[ColumnInfo]) -> Result<Vec<u8>, Failure> {
        let mut row = Vec::new();
        for (c, agg) in aggs.iter().enumerate() {
            let value: Option<Vec<u8>> = match agg {
                // Each shard's count for one x: 1, or 0 for NULL.
                Aggregate::Value | Aggregate::CountDistinct => field(&self.first, c).ok_or_else(malformed)?.map(<[u8]>::to_vec),
                // COUNT of no rows is 0; the others are NULL.
                Aggregate::Count => Some(self.values[c].clone().unwrap_or_else(|| b"0".to_vec())),
                Aggregate::Sum | Aggregate::Min | Aggregate::Max => self.values[c].clone(),
                Aggregate::Avg { .. } => match &self.avg[c] {
                    (Some(sum), Some(count)) if count.as_slice() != b"0" => {
                        let column = info.get(c).copied().unwrap_or_default();
                        Some(average(sum, count, column).ok_or_else(|| Failure::Mismatch("AVG could not be computed exactly".into()))?)
                    }
                    _ => None,
                },
            };
            match value {
                Some(v) => write_lenenc_str(&mut row, &v),
                None => row.push(0xFB),
            }
        }
        Ok(row)
    }
}

/// `sum / count` as the server writes an AVG column: to its decimals, rounded half away
/// from zero; floating point for FLOAT and DOUBLE columns.
fn average(sum: &[u8], count: &[u8], column: ColumnInfo) -> Option<Vec<u8>> {
    let (n, count_scale) = parse_decimal(count)?;
    if n <= 0 || count_scale != 0 {
        return None;
    }
    if matches!(column.type_id, 0x04 | 0x05) {
        let s: f64 = std::str::from_utf8(sum).ok()?.parse().ok()?;
        return Some(format!("{}", s / n as f64).into_bytes());
    }
    let (m, scale) = parse_decimal(sum)?;
    let target = u32::from(column.decimals);
    let numerator =
        if target >= scale { m.checked_mul(10i128.checked_pow(target - scale)?)? } else { m / 10i128.checked_pow(scale - target)? };
    let (q, r) = (numerator / n, numerator % n);
    let q = if r.unsigned_abs() * 2 >= n.unsigned_abs() { q + numerator.signum() } else { q };
    Some(format_decimal(q, target))
}

/// A decimal number as the server writes it (no exponent): (mantissa, scale).
fn parse_decimal(s: &[u8]) -> Option<(i128, u32)> {
    let s = std::str::from_utf8(s).ok()?;
    let (int, frac) = s.split_once('.').unwrap_or((s, ""));
    let neg = int.starts_with('-');
    let digits = format!("{}{frac}", int.trim_start_matches(['-', '+']));
    if digits.is_empty() || !digits.bytes().all(|c| c.is_ascii_digit()) {
        return None;
    }
    let m: i128 = digits.parse().ok()?;
    Some((if neg { -m } else { m }, u32::try_from(frac.len()).ok()?))
}

fn format_decimal(m: i128, scale: u32) -> Vec<u8> {
    let digits = m.unsigned_abs().to_string();
    let scale = scale as usize;
    let padded = if digits.len() <= scale { format!("{}{digits}", "0".repeat(scale + 1 - digits.len())) } else { digits };
    let (int, frac) = padded.split_at(padded.len() - scale);
    let sign = if m < 0 { "-" } else { "" };
    if scale == 0 { format!("{sign}{int}") } else { format!("{sign}{int}.{frac}") }.into_bytes()
}

/// `a + b` for decimal numbers as the server writes them, exactly; `None` if either is not
/// such a number or the sum needs more than 38 digits.
fn add_decimal(a: &[u8], b: &[u8]) -> Option<Vec<u8>> {
    let (ma, sa) = parse_decimal(a)?;
    let (mb, sb) = parse_decimal(b)?;
    let scale = sa.max(sb);
    let ma = ma.checked_mul(10i128.checked_pow(scale - sa)?)?;
    let mb = mb.checked_mul(10i128.checked_pow(scale - sb)?)?;
    Some(format_decimal(ma.checked_add(mb)?, scale))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_compare_by_value() {
        assert_eq!(cmp_numeric(b"10", b"9"), Ordering::Greater);
        assert_eq!(cmp_numeric(b"-10", b"-9"), Ordering::Less);
        assert_eq!(cmp_numeric(b"1.50", b"1.5"), Ordering::Equal);
        assert_eq!(cmp_numeric(b"-0.00", b"0"), Ordering::Equal);
        assert_eq!(cmp_numeric(b"0.1", b"-5"), Ordering::Greater);
        assert_eq!(cmp_numeric(b"1e3", b"999"), Ordering::Greater);
        assert_eq!(cmp_text(b"abc  ", b"ABC"), Ordering::Equal);
        assert_eq!(cmp_values(None, Some(b"0"), ValueKind::Numeric), Ordering::Less, "NULL first");
    }

    #[test]
    fn decimals_add_exactly() {
        assert_eq!(add_decimal(b"1.25", b"2.5").as_deref(), Some(&b"3.75"[..]));
        assert_eq!(add_decimal(b"-1.25", b"1").as_deref(), Some(&b"-0.25"[..]));
        assert_eq!(add_decimal(b"99999999999999999999", b"1").as_deref(), Some(&b"100000000000000000000"[..]));
        assert_eq!(add_decimal(b"0.001", b"0.002").as_deref(), Some(&b"0.003"[..]));
        assert_eq!(add_decimal(b"1e3", b"1"), None);
    }

    #[test]
    fn fields_of_a_text_row() {
        let mut row = Vec::new();
        write_lenenc_str(&mut row, b"a");
        row.push(0xFB);
        write_lenenc_str(&mut row, b"ccc");
        assert_eq!(field(&row, 0), Some(Some(&b"a"[..])));
        assert_eq!(field(&row, 1), Some(None));
        assert_eq!(field(&row, 2), Some(Some(&b"ccc"[..])));
        assert_eq!(field(&row, 3), None);
    }
}
