//! The generic response packets: OK (0x00, or 0xFE under CLIENT_DEPRECATE_EOF), ERR (0xFF)
//! and the old EOF (0xFE, under 9 bytes). Readers take payloads (headers stripped);
//! writers append a whole packet with its header.

use crate::codec::{read_lenenc, read_lenenc_str, write_lenenc, write_lenenc_str};
use crate::frame::PacketBuilder;
use crate::ProtoError;

pub const OK_HEADER: u8 = 0x00;
pub const EOF_HEADER: u8 = 0xFE;
pub const ERR_HEADER: u8 = 0xFF;
pub const LOCAL_INFILE_HEADER: u8 = 0xFB;

/// The fields of an OK packet that sluice acts on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Ok {
    pub affected_rows: u64,
    pub last_insert_id: u64,
    pub status: u16,
    pub warnings: u16,
}

/// Reads an OK packet (either header byte). The info and session-state tail is not decoded.
pub fn parse_ok(payload: &[u8]) -> Result<Ok, ProtoError> {
    let bad = ProtoError::Malformed("OK");
    match payload.first() {
        Some(&OK_HEADER) | Some(&EOF_HEADER) => {}
        _ => return Err(bad),
    }
    let (affected_rows, a) = read_lenenc(&payload[1..]).ok_or(bad.clone())?;
    let (last_insert_id, b) = read_lenenc(&payload[1 + a..]).ok_or(bad.clone())?;
    let p = 1 + a + b;
    let status = payload.get(p..p + 2).ok_or(bad.clone())?;
    let warnings = payload.get(p + 2..p + 4).unwrap_or(&[0, 0]);
    Ok(Ok {
        affected_rows,
        last_insert_id,
        status: u16::from_le_bytes([status[0], status[1]]),
        warnings: u16::from_le_bytes([warnings[0], warnings[1]]),
    })
}

/// Reads an old-style EOF packet: (warnings, status).
pub fn parse_eof(payload: &[u8]) -> Result<(u16, u16), ProtoError> {
    match payload {
        [EOF_HEADER, w0, w1, s0, s1, ..] if payload.len() < 9 => Ok((u16::from_le_bytes([*w0, *w1]), u16::from_le_bytes([*s0, *s1]))),
        [EOF_HEADER] => Ok((0, 0)),
        _ => Err(ProtoError::Malformed("EOF")),
    }
}

/// Status flags of a result-set terminator: EOF (`deprecate_eof` off) or OK-with-0xFE (on).
pub fn terminator_status(payload: &[u8], deprecate_eof: bool) -> Result<u16, ProtoError> {
    if deprecate_eof {
        parse_ok(payload).map(|ok| ok.status)
    } else {
        parse_eof(payload).map(|(_, status)| status)
    }
}

/// A server error as carried by an ERR packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Err<'a> {
    pub code: u16,
    pub sqlstate: [u8; 5],
    pub message: &'a [u8],
}

pub fn parse_err(payload: &[u8]) -> Result<Err<'_>, ProtoError> {
    let bad = ProtoError::Malformed("ERR");
    if payload.first() != Some(&ERR_HEADER) || payload.len() < 3 {
        return Err(bad);
    }
    let code = u16::from_le_bytes([payload[1], payload[2]]);
    let rest = &payload[3..];
    if rest.first() == Some(&b'#') && rest.len() >= 6 {
        let mut sqlstate = [0; 5];
        sqlstate.copy_from_slice(&rest[1..6]);
        Ok(Err { code, sqlstate, message: &rest[6..] })
    } else {
        Ok(Err { code, sqlstate: *b"HY000", message: rest })
    }
}

/// Appends an ERR packet (protocol 4.1 form, with SQLSTATE). `code` must be a server's (never
/// a client library's 2000–2999: libmariadb takes those for a malformed packet).
pub fn write_err(out: &mut Vec<u8>, seq: &mut u8, code: u16, sqlstate: &[u8; 5], message: &str) {
    write_err_bytes(out, seq, code, sqlstate, message.as_bytes());
}

/// `write_err` with the message as bytes: a server's is in the connection's character set
/// (latin1, sjis…), not always UTF-8, and is relayed as it came.
pub fn write_err_bytes(out: &mut Vec<u8>, seq: &mut u8, code: u16, sqlstate: &[u8; 5], message: &[u8]) {
    debug_assert!(!crate::errors::CLIENT_CODES.contains(&code), "client-library error code {code} in an ERR packet");
    let b = PacketBuilder::begin(out);
    out.push(ERR_HEADER);
    out.extend_from_slice(&code.to_le_bytes());
    out.push(b'#');
    out.extend_from_slice(sqlstate);
    out.extend_from_slice(message);
    b.finish(out, seq);
}

/// Appends an OK packet. `header` is 0x00, or 0xFE when it ends a result set under DEPRECATE_EOF.
/// An OK packet carrying a human-readable message (the "info" field). Servers send it
/// length-prefixed whatever the capabilities (MySQL's net_send_ok), and clients read it so.
pub fn write_ok_message(out: &mut Vec<u8>, seq: &mut u8, status: u16, message: &[u8]) {
    write_ok(out, seq, OK_HEADER, &Ok { status, ..Default::default() }, message);
}

pub fn write_ok(out: &mut Vec<u8>, seq: &mut u8, header: u8, ok: &Ok, info: &[u8]) {
    let b = PacketBuilder::begin(out);
    out.push(header);
    write_lenenc(out, ok.affected_rows);
    write_lenenc(out, ok.last_insert_id);
    out.extend_from_slice(&ok.status.to_le_bytes());
    out.extend_from_slice(&ok.warnings.to_le_bytes());
    if !info.is_empty() {
        write_lenenc_str(out, info);
    }
    b.finish(out, seq);
}

/// Session-state change types in an OK packet (CLIENT_SESSION_TRACK).
pub const SESSION_TRACK_SCHEMA: u8 = 1;

/// The payload of a login OK (with session-state information, CLIENT_SESSION_TRACK) made to
/// report `schema` as the default database instead of the one it named. `None` if malformed.
pub fn ok_with_schema(payload: &[u8], schema: Option<&str>) -> Option<Vec<u8>> {
    let ok = parse_ok(payload).ok()?;
    let changed = crate::StatusFlags::SERVER_SESSION_STATE_CHANGED.bits();
    let (_, a) = read_lenenc(payload.get(1..)?)?;
    let (_, b) = read_lenenc(payload.get(1 + a..)?)?;
    let fixed = 1 + a + b + 4;
    let mut rest = payload.get(fixed..)?;
    let info = if rest.is_empty() {
        &[][..]
    } else {
        let (info, n) = read_lenenc_str(rest)?;
        rest = &rest[n..];
        info
    };
    let mut entries = Vec::new();
    if ok.status & changed != 0 {
        let (state, _) = read_lenenc_str(rest)?;
        let mut s = state;
        while !s.is_empty() {
            let kind = s[0];
            let (data, n) = read_lenenc_str(&s[1..])?;
            if kind != SESSION_TRACK_SCHEMA {
                entries.push(kind);
                write_lenenc_str(&mut entries, data);
            }
            s = &s[1 + n..];
        }
    }
    if let Some(db) = schema {
        let mut data = Vec::new();
        write_lenenc_str(&mut data, db.as_bytes());
        entries.push(SESSION_TRACK_SCHEMA);
        write_lenenc_str(&mut entries, &data);
    }
    let mut out = payload[..fixed].to_vec();
    let status = if entries.is_empty() { ok.status & !changed } else { ok.status | changed };
    out[1 + a + b..1 + a + b + 2].copy_from_slice(&status.to_le_bytes());
    if !entries.is_empty() || !info.is_empty() {
        write_lenenc_str(&mut out, info);
    }
    if !entries.is_empty() {
        write_lenenc_str(&mut out, &entries);
    }
    Some(out)
}

/// Appends an old-style EOF packet.
pub fn write_eof(out: &mut Vec<u8>, seq: &mut u8, warnings: u16, status: u16) {
    let b = PacketBuilder::begin(out);
    out.push(EOF_HEADER);
    out.extend_from_slice(&warnings.to_le_bytes());
    out.extend_from_slice(&status.to_le_bytes());
    b.finish(out, seq);
}

#[cfg(test)]
mod session_state_tests {
    use super::*;

    #[test]
    fn login_ok_schema_is_replaced() {
        // OK, 0 rows, id 0, status AUTOCOMMIT|STATE_CHANGED, no warnings, empty info, state:
        // system variable (0) autocommit=ON, schema (1) "a".
        let login_ok = |schema_entry: &[u8]| {
            let mut state = vec![0u8];
            write_lenenc_str(&mut state, b"\x0aautocommit\x02ON");
            state.push(1);
            write_lenenc_str(&mut state, schema_entry);
            let mut p = vec![0, 0, 0, 0x02, 0x40, 0, 0, 0];
            write_lenenc_str(&mut p, &state);
            p
        };
        let out = ok_with_schema(&login_ok(b"\x01a"), Some("shop")).unwrap();
        assert_eq!(out, login_ok(b"\x04shop"));
        let plain = ok_with_schema(&[0, 0, 0, 2, 0, 0, 0], None).unwrap();
        assert_eq!(plain, vec![0, 0, 0, 2, 0, 0, 0]);
        assert!(ok_with_schema(&[0, 0], None).is_none());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::frame;
    use proptest::prelude::*;

    #[test]
    fn ok_byte_vector() {
        // OK: 1 row affected, last insert id 2, autocommit, 0 warnings (from the MySQL manual).
        let p = [0x00, 0x01, 0x02, 0x02, 0x00, 0x00, 0x00];
        assert_eq!(parse_ok(&p), Ok(Ok { affected_rows: 1, last_insert_id: 2, status: 2, warnings: 0 }));
        let mut out = Vec::new();
        let mut seq = 1;
        write_ok(&mut out, &mut seq, OK_HEADER, &parse_ok(&p).unwrap(), b"");
        assert_eq!(out, [7, 0, 0, 1, 0x00, 0x01, 0x02, 0x02, 0x00, 0x00, 0x00]);
        assert_eq!(seq, 2);
        assert!(parse_ok(&[0x00, 0x01]).is_err());
        assert!(parse_ok(&[]).is_err());
    }

    #[test]
    fn err_byte_vector() {
        let p = b"\xff\x15\x04#28000Access denied";
        let e = parse_err(p).unwrap();
        assert_eq!((e.code, &e.sqlstate, e.message), (1045, b"28000", &b"Access denied"[..]));
        let mut out = Vec::new();
        let mut seq = 2;
        write_err(&mut out, &mut seq, 1045, b"28000", "Access denied");
        assert_eq!(&out[4..], &p[..]);
        assert_eq!(out[3], 2);
        // Pre-4.1 form without SQLSTATE.
        assert_eq!(parse_err(b"\xff\x15\x04Nope").unwrap().sqlstate, *b"HY000");
        assert!(parse_err(b"\xff\x15").is_err());
    }

    #[test]
    fn err_message_bytes_go_unchanged() {
        let mut out = Vec::new();
        write_err_bytes(&mut out, &mut 0, 1064, b"42000", b"near '\xe9t\xe9' at line 1");
        assert_eq!(parse_err(&out[4..]).unwrap().message, b"near '\xe9t\xe9' at line 1");
    }

    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "client-library error code 2013")]
    fn err_with_a_client_library_code_is_refused() {
        write_err(&mut Vec::new(), &mut 0, 2013, b"HY000", "Lost connection");
    }

    #[test]
    fn eof_byte_vector() {
        assert_eq!(parse_eof(&[0xFE, 0x01, 0x00, 0x22, 0x00]), Ok((1, 0x22)));
        let mut out = Vec::new();
        let mut seq = 5;
        write_eof(&mut out, &mut seq, 1, 0x22);
        assert_eq!(out, [5, 0, 0, 5, 0xFE, 0x01, 0x00, 0x22, 0x00]);
        assert_eq!(terminator_status(&[0xFE, 0, 0, 0x0A, 0, 0, 0], true), Ok(0x0A));
        assert!(parse_eof(&[0xFE; 10]).is_err());
    }

    proptest! {
        #[test]
        fn ok_round_trip(a in any::<u64>(), l in any::<u64>(), s in any::<u16>(), w in any::<u16>()) {
            let ok = Ok { affected_rows: a, last_insert_id: l, status: s, warnings: w };
            let mut out = Vec::new();
            let mut seq = 0;
            write_ok(&mut out, &mut seq, OK_HEADER, &ok, b"info");
            let f = frame(&out, usize::MAX).unwrap().unwrap();
            prop_assert_eq!(parse_ok(&f.payload(&out)), Ok(ok));
        }

        #[test]
        fn err_round_trip(code in (1u16..2000).prop_union(3000..u16::MAX), msg in "[ -~]{0,100}") {
            let mut out = Vec::new();
            let mut seq = 0;
            write_err(&mut out, &mut seq, code, b"42S02", &msg);
            let e = parse_err(&out[4..]).unwrap();
            prop_assert_eq!(e.code, code);
            prop_assert_eq!(e.message, msg.as_bytes());
        }

        #[test]
        fn parsers_never_panic(b in proptest::collection::vec(any::<u8>(), 0..40)) {
            let _ = parse_ok(&b);
            let _ = parse_eof(&b);
            let _ = parse_err(&b);
        }
    }
}
