//! Text-protocol rows as binary-protocol rows (the reply to COM_STMT_EXECUTE), from the column
//! definitions: what a server sends for the same values. A statement sluice runs on shards for
//! a prepared statement is sent to them as text (so the text merge applies); its rows are
//! converted as they go out.

use proto::codec::{read_lenenc_str, write_lenenc_str};
use proto::resultset::*;

/// What the conversion needs of a column definition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BinColumn {
    pub type_id: u8,
    pub unsigned: bool,
}

const UNSIGNED_FLAG: u16 = 0x20;
const MARIADB_CLIENT_EXTENDED_METADATA: u32 = 1 << 3;

impl BinColumn {
    /// From a column definition packet (with MariaDB's extended metadata when negotiated).
    pub fn of(def: &[u8], mariadb_caps: u32) -> Option<BinColumn> {
        let mut rest = def;
        let strings = if mariadb_caps & MARIADB_CLIENT_EXTENDED_METADATA != 0 { 7 } else { 6 };
        for _ in 0..strings {
            let (_, n) = read_lenenc_str(rest)?;
            rest = rest.get(n..)?;
        }
        // 0x0c, character set (2), length (4), type, flags (2), decimals.
        let flags = u16::from_le_bytes([*rest.get(8)?, *rest.get(9)?]);
        Some(BinColumn { type_id: *rest.get(7)?, unsigned: flags & UNSIGNED_FLAG != 0 })
    }
}

/// The binary row for a text row of `columns`; `None` when a value does not read as its
/// column's type.
pub fn row(text: &[u8], columns: &[BinColumn]) -> Option<Vec<u8>> {
    let bitmap_len = (columns.len() + 7 + 2) / 8;
    let mut out = Vec::with_capacity(1 + bitmap_len + text.len() + 8);
    out.push(0x00);
    out.resize(1 + bitmap_len, 0);
    let mut rest = text;
    for (i, c) in columns.iter().enumerate() {
        if rest.first() == Some(&0xFB) {
            rest = &rest[1..];
            let bit = i + 2;
            out[1 + bit / 8] |= 1 << (bit % 8);
            continue;
        }
        let (v, n) = read_lenenc_str(rest)?;
        rest = rest.get(n..)?;
        value(&mut out, v, *c)?;
    }
    Some(out)
}

fn parse<T: std::str::FromStr>(v: &[u8]) -> Option<T> {
    std::str::from_utf8(v).ok()?.parse().ok()
}

fn value(out: &mut Vec<u8>, v: &[u8], c: BinColumn) -> Option<()> {
    let int = |out: &mut Vec<u8>, n: usize| -> Option<()> {
        let bits: u64 = if c.unsigned { parse::<u64>(v)? } else { parse::<i64>(v)? as u64 };
        out.extend_from_slice(&bits.to_le_bytes()[..n]);
        Some(())
    };
    match c.type_id {
        TYPE_TINY => int(out, 1)?,
        TYPE_SHORT | TYPE_YEAR => int(out, 2)?,
        TYPE_LONG | TYPE_INT24 => int(out, 4)?,
        TYPE_LONGLONG => int(out, 8)?,
        TYPE_FLOAT => out.extend_from_slice(&parse::<f32>(v)?.to_le_bytes()),
        TYPE_DOUBLE => out.extend_from_slice(&parse::<f64>(v)?.to_le_bytes()),
        // The shortest struct that holds the value, as the server.
        TYPE_DATE | TYPE_TIMESTAMP | TYPE_DATETIME => datetime(out, v)?,
        TYPE_TIME => time(out, v)?,
        // DECIMAL, strings, blobs, BIT, ENUM, SET, JSON, GEOMETRY: the same bytes.
        _ => write_lenenc_str(out, v),
    }
    Some(())
}

fn digits(s: &[u8]) -> Option<u32> {
    if s.is_empty() || s.len() > 9 || !s.iter().all(u8::is_ascii_digit) {
        return None;
    }
    parse(s)
}

/// Microseconds from a fraction's digits (`.5` is 500000).
fn micros(frac: &[u8]) -> Option<u32> {
    if frac.len() > 6 {
        return None;
    }
    Some(digits(frac)? * 10u32.pow(6 - frac.len() as u32))
}

/// `YYYY-MM-DD[ HH:MM:SS[.ffffff]]`.
fn datetime(out: &mut Vec<u8>, v: &[u8]) -> Option<()> {
    let (date, time) = match v.iter().position(|&b| b == b' ') {
        Some(p) => (&v[..p], Some(&v[p + 1..])),
        None => (v, None),
    };
    let mut d = date.split(|&b| b == b'-');
    let (y, m, day) = (digits(d.next()?)?, digits(d.next()?)?, digits(d.next()?)?);
    let (mut h, mut mi, mut s, mut us) = (0, 0, 0, 0);
    if let Some(t) = time {
        let (hms, frac) = match t.iter().position(|&b| b == b'.') {
            Some(p) => (&t[..p], Some(&t[p + 1..])),
            None => (t, None),
        };
        let mut p = hms.split(|&b| b == b':');
        (h, mi, s) = (digits(p.next()?)?, digits(p.next()?)?, digits(p.next()?)?);
        us = frac.map_or(Some(0), micros)?;
    }
    let len: u8 = if us != 0 {
        11
    } else if h != 0 || mi != 0 || s != 0 {
        7
    } else if y != 0 || m != 0 || day != 0 {
        4
    } else {
        0
    };
    out.push(len);
    let mut b = Vec::with_capacity(11);
    b.extend_from_slice(&(y as u16).to_le_bytes());
    b.extend_from_slice(&[m as u8, day as u8, h as u8, mi as u8, s as u8]);
    b.extend_from_slice(&us.to_le_bytes());
    out.extend_from_slice(&b[..usize::from(len)]);
    Some(())
}

/// A TIME's text: (negative, hours, minutes, seconds, microseconds).
fn time_parts(v: &[u8]) -> Option<(bool, u32, u32, u32, u32)> {
    let (neg, t) = match v.strip_prefix(b"-") {
        Some(t) => (true, t),
        None => (false, v),
    };
    let (hms, frac) = match t.iter().position(|&b| b == b'.') {
        Some(p) => (&t[..p], Some(&t[p + 1..])),
        None => (t, None),
    };
    let mut p = hms.split(|&b| b == b':');
    let (hours, mi, s) = (digits(p.next()?)?, digits(p.next()?)?, digits(p.next()?)?);
    Some((neg, hours, mi, s, frac.map_or(Some(0), micros)?))
}

/// A TIME's text as signed microseconds, for ordering.
pub fn time_micros(v: &[u8]) -> Option<i64> {
    let (neg, h, m, s, us) = time_parts(v)?;
    let total = ((i64::from(h) * 60 + i64::from(m)) * 60 + i64::from(s)) * 1_000_000 + i64::from(us);
    Some(if neg { -total } else { total })
}

/// `[-]H…H:MM:SS[.ffffff]`: days split off the hours, as the server sends it.
fn time(out: &mut Vec<u8>, v: &[u8]) -> Option<()> {
    let (neg, hours, mi, s, us) = time_parts(v)?;
    let (days, h) = (hours / 24, hours % 24);
    let len: u8 = if us != 0 {
        12
    } else if days != 0 || h != 0 || mi != 0 || s != 0 {
        8
    } else {
        0
    };
    out.push(len);
    let mut b = Vec::with_capacity(12);
    b.push(u8::from(neg));
    b.extend_from_slice(&days.to_le_bytes());
    b.extend_from_slice(&[h as u8, mi as u8, s as u8]);
    b.extend_from_slice(&us.to_le_bytes());
    out.extend_from_slice(&b[..usize::from(len)]);
    Some(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(values: &[Option<&[u8]>]) -> Vec<u8> {
        let mut out = Vec::new();
        for v in values {
            match v {
                Some(v) => write_lenenc_str(&mut out, v),
                None => out.push(0xFB),
            }
        }
        out
    }

    fn col(type_id: u8, unsigned: bool) -> BinColumn {
        BinColumn { type_id, unsigned }
    }

    #[test]
    fn rows_convert_as_the_server_encodes() {
        let cols = [col(8, false), col(3, true), col(0xF6, false), col(5, false), col(0xFD, false), col(0x0C, false), col(1, false)];
        let t = text(&[Some(b"-2"), Some(b"4294967295"), Some(b"1.50"), None, Some(b"ab"), Some(b"2024-02-29 13:05:09"), Some(b"-1")]);
        let b = row(&t, &cols).unwrap();
        let mut want = vec![0x00, 0b0010_0000, 0x00];
        want.extend_from_slice(&(-2i64).to_le_bytes());
        want.extend_from_slice(&u32::MAX.to_le_bytes());
        want.extend_from_slice(b"\x041.50");
        want.extend_from_slice(b"\x02ab");
        want.extend_from_slice(b"\x07\xe8\x07\x02\x1d\x0d\x05\x09");
        want.push(0xFF);
        assert_eq!(b, want);
        // A value that is not its column's type: no row.
        assert_eq!(row(&text(&[Some(b"x")]), &[col(8, false)]), None);
        assert_eq!(row(&text(&[Some(b"300")]), &[col(1, true)]), Some(vec![0, 0, 0x2C]));
    }

    #[test]
    fn dates_and_times_are_shortest() {
        let mut out = Vec::new();
        datetime(&mut out, b"2024-01-02").unwrap();
        datetime(&mut out, b"0000-00-00 00:00:00").unwrap();
        datetime(&mut out, b"2024-01-02 00:00:00.5").unwrap();
        assert_eq!(out, [&b"\x04\xe8\x07\x01\x02"[..], b"\x00", b"\x0b\xe8\x07\x01\x02\x00\x00\x00\x20\xa1\x07\x00"].concat());
        let mut out = Vec::new();
        time(&mut out, b"-51:04:05").unwrap();
        time(&mut out, b"00:00:00").unwrap();
        assert_eq!(out, [&b"\x08\x01\x02\x00\x00\x00\x03\x04\x05"[..], b"\x00"].concat());
        assert!(datetime(&mut out, b"2024-01").is_none());
        assert!(time_micros(b"-39:30:48") > time_micros(b"-68:01:00"));
        assert!(time_micros(b"-00:00:01") < time_micros(b"00:00:00.5"));
    }
}
