//! A cached reply: the server's packets of one text result set, kept as they came, served
//! again with the sequence ids of the new request and the transaction bits of the session's
//! status flags as they are now.

use proto::StatusFlags as S;

/// The status bits that belong to the session, not to the result: taken from the session
/// when a reply is served.
const SESSION_BITS: u16 = S::SERVER_STATUS_IN_TRANS.bits() | S::SERVER_STATUS_AUTOCOMMIT.bits() | S::SERVER_STATUS_IN_TRANS_READONLY.bits();

/// Status bits a cacheable reply must not have: more results follow, the session's state
/// changed, a cursor or OUT parameters (none of them a plain SELECT's).
const UNCACHEABLE_BITS: u16 = S::SERVER_MORE_RESULTS_EXISTS.bits()
    | S::SERVER_SESSION_STATE_CHANGED.bits()
    | S::SERVER_STATUS_CURSOR_EXISTS.bits()
    | S::SERVER_PS_OUT_PARAMS.bits();

/// Reply bytes kept while they stream to the client, up to `limit`: past it the capture stops
/// and lets go of what it held (the reply goes on streaming), so a large result never costs
/// more than the limit.
#[derive(Debug)]
pub struct Capture {
    bytes: Vec<u8>,
    limit: usize,
    over: bool,
}

impl Capture {
    pub fn new(limit: usize) -> Capture {
        Capture { bytes: Vec::new(), limit, over: false }
    }

    pub fn feed(&mut self, bytes: &[u8]) {
        if self.over {
            return;
        }
        if self.bytes.len() + bytes.len() > self.limit {
            self.over = true;
            self.bytes = Vec::new();
            return;
        }
        self.bytes.extend_from_slice(bytes);
    }

    /// The captured reply, if it was one whole result set with no warnings (in the packet
    /// format `deprecate_eof` says) that fit the limit.
    pub fn finish(self, deprecate_eof: bool) -> Option<CachedReply> {
        if self.over {
            return None;
        }
        CachedReply::parse(self.bytes, deprecate_eof)
    }
}

/// One text result set's packets, as the server sent them.
#[derive(Debug, PartialEq, Eq)]
pub struct CachedReply {
    packets: Box<[u8]>,
    /// Offsets of the status flags in `packets` (the EOF after the columns, the last packet).
    status_at: Box<[u32]>,
    pub rows: u64,
}

/// One packet of a reply: its offset in the reply and its payload.
fn packets(bytes: &[u8]) -> impl Iterator<Item = Option<(usize, &[u8])>> + '_ {
    let mut at = 0;
    std::iter::from_fn(move || {
        if at >= bytes.len() {
            return None;
        }
        let header = bytes.get(at..at + 4);
        let packet = header.and_then(|h| {
            let len = usize::from(h[0]) | usize::from(h[1]) << 8 | usize::from(h[2]) << 16;
            // A 16 MiB chunk continues: never in a reply small enough to cache.
            (len < proto::frame::MAX_CHUNK).then_some(len)
        });
        let item = packet.and_then(|len| bytes.get(at + 4..at + 4 + len).map(|payload| (at, payload)));
        at = item.map_or(bytes.len(), |(start, p)| start + 4 + p.len());
        Some(item)
    })
}

impl CachedReply {
    fn parse(bytes: Vec<u8>, deprecate_eof: bool) -> Option<CachedReply> {
        let mut iter = packets(&bytes);
        let (_, first) = iter.next()??;
        // A result set starts with its column count (OK, ERR and LOCAL INFILE do not).
        if matches!(first.first(), None | Some(0x00 | 0xFF | 0xFB)) {
            return None;
        }
        let (columns, _) = proto::codec::read_lenenc(first)?;
        for _ in 0..columns {
            iter.next()??;
        }
        let mut status_at = Vec::with_capacity(2);
        // Offset of a status field inside a packet at `start` whose payload has it at `pos`.
        let field = |start: usize, pos: usize| u32::try_from(start + 4 + pos).ok();
        if !deprecate_eof {
            let (start, eof) = iter.next()??;
            if eof.first() != Some(&0xFE) || eof.len() != 5 || eof.get(1..3) != Some(&[0, 0]) {
                return None;
            }
            status_at.push(field(start, 3)?);
        }
        let mut rows = 0;
        loop {
            let (start, p) = iter.next()??;
            match p.first() {
                Some(0xFF) | None => return None,
                Some(0xFE) if !deprecate_eof && p.len() < 9 => {
                    // EOF: warnings, status.
                    if p.len() != 5 || p.get(1..3) != Some(&[0, 0]) {
                        return None;
                    }
                    status_at.push(field(start, 3)?);
                    break;
                }
                Some(0xFE) if deprecate_eof => {
                    // OK in EOF's place: affected rows, last insert id, status, warnings.
                    let (_, a) = proto::codec::read_lenenc(p.get(1..)?)?;
                    let (_, b) = proto::codec::read_lenenc(p.get(1 + a..)?)?;
                    let pos = 1 + a + b;
                    if p.get(pos + 2..pos + 4)? != [0, 0] {
                        return None;
                    }
                    status_at.push(field(start, pos)?);
                    break;
                }
                Some(_) => rows += 1,
            }
        }
        // The terminator ends the reply.
        if iter.next().is_some() {
            return None;
        }
        drop(iter);
        let status = |at: u32| bytes.get(at as usize..at as usize + 2).map(|b| u16::from_le_bytes([b[0], b[1]]));
        if status_at.iter().any(|&at| status(at).is_none_or(|s| s & UNCACHEABLE_BITS != 0)) {
            return None;
        }
        Some(CachedReply { packets: bytes.into_boxed_slice(), status_at: status_at.into_boxed_slice(), rows })
    }

    /// Bytes the reply holds.
    pub fn bytes(&self) -> usize {
        self.packets.len() + self.status_at.len() * 4
    }

    /// The reply, into `out`, for a request whose last sequence id was `request_seq`, with
    /// the session's status bits as `session_status` has them.
    pub fn serve_into(&self, out: &mut Vec<u8>, request_seq: u8, session_status: u16) {
        let from = out.len();
        out.extend_from_slice(&self.packets);
        let reply = &mut out[from..];
        let mut seq = request_seq;
        let mut at = 0;
        while let Some(header) = reply.get_mut(at..at + 4) {
            seq = seq.wrapping_add(1);
            header[3] = seq;
            at += 4 + (usize::from(header[0]) | usize::from(header[1]) << 8 | usize::from(header[2]) << 16);
        }
        for &at in self.status_at.iter() {
            if let Some(b) = reply.get_mut(at as usize..at as usize + 2) {
                let status = (u16::from_le_bytes([b[0], b[1]]) & !SESSION_BITS) | (session_status & SESSION_BITS);
                b.copy_from_slice(&status.to_le_bytes());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn packet(out: &mut Vec<u8>, seq: &mut u8, payload: &[u8]) {
        proto::frame::write_packet(out, seq, payload);
    }

    /// `SELECT 'hi' AS a` as a server answers it, with status `status`.
    fn reply(deprecate_eof: bool, status: u16, warnings: u16) -> Vec<u8> {
        let mut out = Vec::new();
        let mut seq = 1;
        packet(&mut out, &mut seq, &[1]);
        packet(&mut out, &mut seq, b"\x03def\x00\x00\x00\x01a\x00\x0c\x21\x00\x06\x00\x00\x00\xfd\x01\x00\x1f\x00\x00");
        let eof = |status: u16, warnings: u16| {
            let mut p = vec![0xFE];
            p.extend_from_slice(&warnings.to_le_bytes());
            p.extend_from_slice(&status.to_le_bytes());
            p
        };
        if !deprecate_eof {
            packet(&mut out, &mut seq, &eof(status, 0));
        }
        packet(&mut out, &mut seq, b"\x02hi");
        if deprecate_eof {
            let mut ok = vec![0xFE, 0, 0];
            ok.extend_from_slice(&status.to_le_bytes());
            ok.extend_from_slice(&warnings.to_le_bytes());
            packet(&mut out, &mut seq, &ok);
        } else {
            packet(&mut out, &mut seq, &eof(status, warnings));
        }
        out
    }

    fn captured(bytes: &[u8], limit: usize, deprecate_eof: bool) -> Option<CachedReply> {
        let mut c = Capture::new(limit);
        bytes.chunks(3).for_each(|b| c.feed(b));
        c.finish(deprecate_eof)
    }

    #[test]
    fn a_result_set_is_served_with_new_sequence_ids_and_the_sessions_transaction_bits() {
        let autocommit = S::SERVER_STATUS_AUTOCOMMIT.bits();
        let in_trans = S::SERVER_STATUS_IN_TRANS.bits();
        let no_index = S::SERVER_STATUS_NO_INDEX_USED.bits();
        for deprecate_eof in [false, true] {
            let original = reply(deprecate_eof, autocommit | no_index, 0);
            let cached = captured(&original, 1024, deprecate_eof).expect("cacheable");
            assert_eq!(cached.rows, 1);
            let mut same = Vec::new();
            cached.serve_into(&mut same, 0, autocommit);
            assert_eq!(same, original, "byte for byte (deprecate_eof {deprecate_eof})");
            let mut other = Vec::new();
            cached.serve_into(&mut other, 4, autocommit | in_trans);
            assert_eq!(other, {
                let mut seq = 5;
                let mut expected = reply(deprecate_eof, autocommit | in_trans | no_index, 0);
                let mut at = 0;
                while at < expected.len() {
                    expected[at + 3] = seq;
                    seq += 1;
                    at += 4 + expected[at] as usize;
                }
                expected
            });
        }
    }

    #[test]
    fn what_is_not_stored() {
        let autocommit = S::SERVER_STATUS_AUTOCOMMIT.bits();
        let full = reply(false, autocommit, 0);
        assert!(captured(&full, full.len(), false).is_some());
        assert_eq!(captured(&full, full.len() - 1, false), None, "over the limit");
        assert_eq!(captured(&reply(false, autocommit, 1), 1024, false), None, "warnings");
        assert_eq!(captured(&reply(true, autocommit, 2), 1024, true), None, "warnings");
        let more = autocommit | S::SERVER_MORE_RESULTS_EXISTS.bits();
        assert_eq!(captured(&reply(false, more, 0), 1024, false), None, "more results");
        assert_eq!(captured(&full, 1024, true), None, "another packet format");
        assert_eq!(captured(&full[..full.len() - 2], 1024, false), None, "cut short");
        let mut ok = Vec::new();
        packet(&mut ok, &mut 1, &[0, 0, 0, 2, 0, 0, 0]);
        assert_eq!(captured(&ok, 1024, false), None, "no result set");
        let mut err = full[..full.len() - 9].to_vec();
        packet(&mut err, &mut 5, b"\xff\x28\x05#HY000boom");
        assert_eq!(captured(&err, 1024, false), None, "an error mid-result");
    }
}
