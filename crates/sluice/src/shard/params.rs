//! A prepared statement on sharded tables as a template: its text cut at each `?` placeholder
//! (found by the lexer, so a `?` in a string or comment is not one), and the parameters an
//! execute binds, turned into SQL literals that read back as the same values whatever the
//! sql_mode or character set. At each execute the template with its literals is planned like a
//! text statement (`plan::plan`): routing, rewriting and merging are the text path's.

use proto::resultset::*;
use sql::lexer::{code_tokens, Kind};
use std::fmt::Write;

/// The parameter type's flag byte: an unsigned integer.
const UNSIGNED: u8 = 0x80;

/// A statement's text cut at its placeholders: `pieces.len() == params + 1`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    pieces: Vec<Vec<u8>>,
}

impl Template {
    pub fn new(sql: &[u8]) -> Template {
        let mut pieces = Vec::new();
        let mut from = 0;
        for t in code_tokens(sql).filter(|t| t.kind == Kind::Placeholder) {
            pieces.push(sql[from..t.start].to_vec());
            from = t.end;
        }
        pieces.push(sql[from..].to_vec());
        Template { pieces }
    }

    /// The text it was cut from, `?` in the placeholders' places.
    pub fn text(&self) -> Vec<u8> {
        self.pieces.join(&b'?')
    }

    pub fn params(&self) -> usize {
        self.pieces.len() - 1
    }

    /// The text with `literals` in place of the placeholders (as many as `params()`).
    pub fn fill(&self, literals: &[String]) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.pieces.iter().map(Vec::len).sum::<usize>() + literals.iter().map(String::len).sum::<usize>());
        for (i, piece) in self.pieces.iter().enumerate() {
            out.extend_from_slice(piece);
            if let Some(l) = literals.get(i) {
                out.extend_from_slice(l.as_bytes());
            }
        }
        out
    }
}

/// The parameters of one COM_STMT_EXECUTE, as SQL literals.
#[derive(Debug, PartialEq, Eq)]
pub struct Bound {
    pub literals: Vec<String>,
    /// The types this execute sent (to keep for the next that sends none).
    pub sent_types: Option<Vec<u8>>,
    /// CURSOR_TYPE_* flags of the execute.
    pub flags: u8,
}

/// Why an execute's parameters could not be read: the message of ER_WRONG_ARGUMENTS.
pub type BadParams = String;

/// Reads a COM_STMT_EXECUTE `payload` (command byte first) of a statement with `params`
/// parameters. `types`: those the client sent last (an execute may send none); `long`: data
/// sent by COM_STMT_SEND_LONG_DATA, per parameter. `backslash_escapes`: the session's sql_mode
/// reads `\` in strings as an escape.
pub fn bind(
    payload: &[u8],
    params: usize,
    types: Option<&[u8]>,
    long: &[Option<Vec<u8>>],
    backslash_escapes: bool,
) -> Result<Bound, BadParams> {
    let bad = || "Incorrect arguments to mysqld_stmt_execute".to_string();
    let flags = *payload.get(5).ok_or_else(bad)?;
    if params == 0 {
        return Ok(Bound { literals: Vec::new(), sent_types: None, flags });
    }
    let nulls_at = 10;
    let bitmap = payload.get(nulls_at..nulls_at + params.div_ceil(8)).ok_or_else(bad)?;
    let mut at = nulls_at + bitmap.len();
    let bound = *payload.get(at).ok_or_else(bad)?;
    at += 1;
    let sent_types = if bound == 1 { Some(sent_types(payload, &mut at, params).ok_or_else(bad)?) } else { None };
    let types = sent_types.as_deref().or(types).filter(|t| t.len() == 2 * params).ok_or_else(bad)?;
    let mut literals = Vec::with_capacity(params);
    for i in 0..params {
        let (ty, flag) = (types[2 * i], types[2 * i + 1]);
        if bitmap[i / 8] & (1 << (i % 8)) != 0 || ty == TYPE_NULL {
            literals.push("NULL".into());
            continue;
        }
        if let Some(Some(data)) = long.get(i) {
            literals.push(string_literal(data, ty, backslash_escapes));
            continue;
        }
        let rest = payload.get(at..).ok_or_else(bad)?;
        let (literal, used) = value_literal(rest, ty, flag & UNSIGNED != 0, backslash_escapes).ok_or_else(bad)?;
        at += used;
        literals.push(literal);
    }
    Ok(Bound { literals, sent_types, flags })
}

/// COM_STMT_BULK_EXECUTE's flags: the client sends the parameter types; it wants a result per
/// row (MariaDB 11.5's unit results).
pub const BULK_SEND_TYPES: u16 = 128;
pub const BULK_UNIT_RESULTS: u16 = 64;

/// Per-value indicators of a bulk row: a value follows; NULL; the column's DEFAULT; leave it
/// (IGNORE, which an INSERT reads as DEFAULT).
const INDICATOR_NONE: u8 = 0;
const INDICATOR_NULL: u8 = 1;
const INDICATOR_DEFAULT: u8 = 2;
const INDICATOR_IGNORE: u8 = 3;

/// A bulk execute's rows of literals, and the parameter types it sent.
pub type BulkRows = (Vec<Vec<String>>, Option<Vec<u8>>);

/// Why a bulk execute's rows were not bound.
#[derive(Debug, PartialEq, Eq)]
pub enum BulkError {
    /// Malformed: ER_WRONG_ARGUMENTS's message.
    Bad(String),
    /// More text than sluice parses: a refusal's message.
    TooLarge(String),
}

/// Reads a COM_STMT_BULK_EXECUTE `payload` (command byte first) of a statement with `params`
/// parameters: each row's parameters as SQL literals (`DEFAULT` where the client says so), and
/// the types it sent. `types`: those the client sent last, when this one sends none.
/// `max_text`: the most literal text the rows may make (past it: an error).
pub fn bind_bulk(
    payload: &[u8],
    params: usize,
    types: Option<&[u8]>,
    backslash_escapes: bool,
    max_text: usize,
) -> Result<BulkRows, BulkError> {
    let bad = || BulkError::Bad("Incorrect arguments to mysqld_stmt_bulk_execute".to_string());
    let flags = u16::from_le_bytes([*payload.get(5).ok_or_else(bad)?, *payload.get(6).ok_or_else(bad)?]);
    let mut at = 7;
    let sent_types = if flags & BULK_SEND_TYPES != 0 { Some(sent_types(payload, &mut at, params).ok_or_else(bad)?) } else { None };
    let types = sent_types.as_deref().or(types).filter(|t| t.len() == 2 * params && params > 0).ok_or_else(bad)?;
    let mut rows = Vec::new();
    let mut text = 0usize;
    while at < payload.len() {
        let mut row = Vec::with_capacity(params);
        for i in 0..params {
            let (ty, flag) = (types[2 * i], types[2 * i + 1]);
            let indicator = *payload.get(at).ok_or_else(bad)?;
            at += 1;
            let literal = match indicator {
                INDICATOR_NONE if ty == TYPE_NULL => "NULL".to_string(),
                INDICATOR_NONE => {
                    let rest = payload.get(at..).ok_or_else(bad)?;
                    let (literal, used) = value_literal(rest, ty, flag & UNSIGNED != 0, backslash_escapes).ok_or_else(bad)?;
                    at += used;
                    literal
                }
                INDICATOR_NULL => "NULL".to_string(),
                INDICATOR_DEFAULT | INDICATOR_IGNORE => "DEFAULT".to_string(),
                _ => return Err(bad()),
            };
            text += literal.len() + 2;
            if text > max_text {
                return Err(BulkError::TooLarge(format!(
                    "this batch's rows make {text}+ bytes of statement text, past the {max_text} sluice parses on sharded tables \
                     (shard_databases.max_statement_bytes): send fewer rows at once"
                )));
            }
            row.push(literal);
        }
        rows.push(row);
    }
    if rows.is_empty() {
        return Err(bad());
    }
    Ok((rows, sent_types))
}

/// The parameter types an execute sends (two bytes each), at `at`, which moves past them.
fn sent_types(payload: &[u8], at: &mut usize, params: usize) -> Option<Vec<u8>> {
    let t = payload.get(*at..*at + 2 * params)?.to_vec();
    *at += 2 * params;
    Some(t)
}

fn le(bytes: &[u8]) -> u64 {
    bytes.iter().rev().fold(0u64, |v, &b| v << 8 | u64::from(b))
}

/// One bound value as a literal, and the bytes it took.
fn value_literal(v: &[u8], ty: u8, unsigned: bool, backslash_escapes: bool) -> Option<(String, usize)> {
    let int = |n: usize| -> Option<(String, usize)> {
        let raw = le(v.get(..n)?);
        let text = if unsigned {
            raw.to_string()
        } else {
            let shift = 64 - 8 * n as u32;
            (((raw << shift) as i64) >> shift).to_string()
        };
        Some((text, n))
    };
    match ty {
        TYPE_TINY => int(1),
        TYPE_SHORT | TYPE_YEAR => int(2),
        TYPE_LONG | TYPE_INT24 => int(4),
        TYPE_LONGLONG => int(8),
        // Doubles as the shortest text that reads back as the same value, with an exponent so
        // the server reads a DOUBLE (a FLOAT parameter is a DOUBLE to the server too).
        TYPE_FLOAT => double(f64::from(f32::from_le_bytes(v.get(..4)?.try_into().ok()?))).map(|s| (s, 4)),
        TYPE_DOUBLE => double(f64::from_le_bytes(v.get(..8)?.try_into().ok()?)).map(|s| (s, 8)),
        TYPE_DATE | TYPE_DATETIME | TYPE_TIMESTAMP => {
            let len = usize::from(*v.first()?);
            let b = v.get(1..1 + len)?;
            let text = match len {
                0 => "0000-00-00".to_string(),
                4 | 7 | 11 => {
                    let mut s = format!("{:04}-{:02}-{:02}", le(&b[0..2]), b[2], b[3]);
                    if len >= 7 {
                        let _ = write!(s, " {:02}:{:02}:{:02}", b[4], b[5], b[6]);
                    }
                    if len == 11 {
                        let _ = write!(s, ".{:06}", le(&b[7..11]));
                    }
                    s
                }
                _ => return None,
            };
            Some((format!("'{text}'"), 1 + len))
        }
        TYPE_TIME => {
            let len = usize::from(*v.first()?);
            let b = v.get(1..1 + len)?;
            let text = match len {
                0 => "00:00:00".to_string(),
                8 | 12 => {
                    let hours = le(&b[1..5]) * 24 + u64::from(b[5]);
                    let mut s = format!("{}{:02}:{:02}:{:02}", if b[0] == 1 { "-" } else { "" }, hours, b[6], b[7]);
                    if len == 12 {
                        let _ = write!(s, ".{:06}", le(&b[8..12]));
                    }
                    s
                }
                _ => return None,
            };
            Some((format!("'{text}'"), 1 + len))
        }
        _ => {
            let (bytes, used) = proto::codec::read_lenenc_str(v)?;
            let literal = match ty {
                // A decimal's digits are a decimal literal (exact), anything else a string.
                TYPE_DECIMAL | TYPE_NEWDECIMAL if is_decimal(bytes) => String::from_utf8_lossy(bytes).into_owned(),
                _ => string_literal(bytes, ty, backslash_escapes),
            };
            Some((literal, used))
        }
    }
}

fn double(f: f64) -> Option<String> {
    f.is_finite().then(|| format!("{f:e}"))
}

fn is_decimal(s: &[u8]) -> bool {
    let digits = s.strip_prefix(b"-").unwrap_or(s);
    let mut dots = 0;
    !digits.is_empty()
        && digits.iter().all(|&c| {
            dots += usize::from(c == b'.');
            c.is_ascii_digit() || c == b'.'
        })
        && dots <= 1
        && digits.first().is_some_and(u8::is_ascii_digit)
}

/// A string parameter as a literal the server reads as the same bytes in the connection's
/// character set: quoted (`'` doubled, `\` escaped). Bytes that are not UTF-8 (the statement
/// text must be, to be planned), blobs, and `\` under NO_BACKSLASH_ESCAPES are a hex literal.
fn string_literal(bytes: &[u8], ty: u8, backslash_escapes: bool) -> String {
    // Without backslash escapes a `\` is itself, which the planner's parser (escapes on) would
    // misread: such text goes as hex too.
    let text = std::str::from_utf8(bytes)
        .ok()
        .filter(|s| !TYPE_BLOBS.contains(&ty) && !s.contains('\0') && (backslash_escapes || !s.contains('\\')));
    let Some(text) = text else {
        let mut hex = String::with_capacity(3 + 2 * bytes.len());
        hex.push_str("X'");
        for b in bytes {
            let _ = write!(hex, "{b:02X}");
        }
        hex.push('\'');
        return hex;
    };
    let mut out = String::with_capacity(text.len() + 2);
    out.push('\'');
    for c in text.chars() {
        match c {
            '\'' => out.push_str("''"),
            '\\' => out.push_str("\\\\"),
            c => out.push(c),
        }
    }
    out.push('\'');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bulk_rows_bind_with_their_indicators() {
        // Statement 7, types sent: LONGLONG, VAR_STRING; rows (1, 'a'), (NULL, DEFAULT), (-2, 'b').
        let mut p = vec![0xFA, 7, 0, 0, 0, 128, 0, TYPE_LONGLONG, 0, 0xFD, 0];
        p.extend_from_slice(&[0]);
        p.extend_from_slice(&1i64.to_le_bytes());
        p.extend_from_slice(&[0, 1, b'a']);
        p.extend_from_slice(&[1, 2]);
        p.extend_from_slice(&[0]);
        p.extend_from_slice(&(-2i64).to_le_bytes());
        p.extend_from_slice(&[0, 1, b'b']);
        let (rows, types) = bind_bulk(&p, 2, None, true, 1 << 20).unwrap();
        assert_eq!(rows, [vec!["1", "'a'"], vec!["NULL", "DEFAULT"], vec!["-2", "'b'"]]);
        assert_eq!(types.as_deref(), Some(&[TYPE_LONGLONG, 0, 0xFD, 0][..]));
        // Without types: those of an earlier execute; none known is an error.
        let mut q = vec![0xFA, 7, 0, 0, 0, 0, 0];
        q.extend_from_slice(&[1, 1]);
        assert_eq!(bind_bulk(&q, 2, Some(&[TYPE_LONGLONG, 0, 0xFD, 0]), true, 1 << 20).unwrap().0, [vec!["NULL", "NULL"]]);
        assert!(matches!(bind_bulk(&q, 2, None, true, 1 << 20), Err(BulkError::Bad(_))));
        // A row cut short, an unknown indicator, too much text.
        assert!(matches!(bind_bulk(&p[..p.len() - 1], 2, None, true, 1 << 20), Err(BulkError::Bad(_))));
        let mut r = q.clone();
        r[8] = 9;
        assert!(matches!(bind_bulk(&r, 2, Some(&[TYPE_LONGLONG, 0, 0xFD, 0]), true, 1 << 20), Err(BulkError::Bad(_))));
        assert!(matches!(bind_bulk(&p, 2, None, true, 12), Err(BulkError::TooLarge(_))));
    }

    #[test]
    fn placeholders_outside_strings_and_comments() {
        let t = Template::new(b"SELECT '?', c FROM t /* ? */ WHERE id = ? AND b IN (?,?)");
        assert_eq!(t.params(), 3);
        let filled = t.fill(&["1".into(), "'x'".into(), "NULL".into()]);
        assert_eq!(filled, b"SELECT '?', c FROM t /* ? */ WHERE id = 1 AND b IN ('x',NULL)");
        assert_eq!(Template::new(b"SELECT 1").params(), 0);
    }

    /// An execute payload: id 1, no cursor, one iteration, the bitmap, types sent.
    fn execute(nulls: u8, types: &[u8], values: &[u8]) -> Vec<u8> {
        let mut p = vec![0x17, 1, 0, 0, 0, 0, 1, 0, 0, 0, nulls, 1];
        p.extend_from_slice(types);
        p.extend_from_slice(values);
        p
    }

    #[test]
    fn values_become_literals() {
        let mut values = Vec::new();
        values.extend_from_slice(&(-5i64).to_le_bytes());
        values.extend_from_slice(&u64::MAX.to_le_bytes());
        values.extend_from_slice(&0.1f64.to_le_bytes());
        values.extend_from_slice(b"\x04it's");
        values.extend_from_slice(b"\x07\xe8\x07\x02\x1d\x0d\x05\x09");
        values.extend_from_slice(b"\x04-1.5");
        values.extend_from_slice(&[0xFF]); // TINY -1
        let types = [8, 0, 8, 0x80, 5, 0, 0xFD, 0, 0x0C, 0, 0xF6, 0, 1, 0, 6, 0];
        let p = execute(0, &types, &values);
        let b = bind(&p, 8, None, &[], true).unwrap();
        assert_eq!(b.literals, ["-5", "18446744073709551615", "1e-1", "'it''s'", "'2024-02-29 13:05:09'", "-1.5", "-1", "NULL"]);
        assert_eq!(b.sent_types.as_deref(), Some(&types[..]));
        // Types not sent again: the last ones are used; NULL by the bitmap takes no bytes.
        let mut again = vec![0x17, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0b10, 0];
        again.extend_from_slice(&7i64.to_le_bytes());
        let b = bind(&again, 2, Some(&[8, 0, 8, 0]), &[], true).unwrap();
        assert_eq!(b.literals, ["7", "NULL"]);
        assert_eq!(b.sent_types, None);
        // No types at all, or a value cut short: the server's error.
        assert!(bind(&again, 2, None, &[], true).is_err());
        assert!(bind(&again[..14], 1, Some(&[8, 0]), &[], true).is_err());
    }

    #[test]
    fn strings_read_back_the_same() {
        assert_eq!(string_literal(b"a\\b'", 0xFD, true), "'a\\\\b'''");
        assert_eq!(string_literal(b"a\\b", 0xFD, false), "X'615C62'");
        assert_eq!(string_literal(b"\xff\x00", 0xFD, true), "X'FF00'");
        assert_eq!(string_literal(b"ab", 0xFC, true), "X'6162'");
        let (t, n) = value_literal(b"\x08\x01\x02\x00\x00\x00\x03\x04\x05", TYPE_TIME, false, true).unwrap();
        assert_eq!((t.as_str(), n), ("'-51:04:05'", 9));
        assert_eq!(double(1e300).as_deref(), Some("1e300"));
        assert_eq!(double(f64::NAN), None);
        assert!(is_decimal(b"-12.50") && !is_decimal(b"1e5") && !is_decimal(b"1.2.3") && !is_decimal(b"-"));
    }
}
