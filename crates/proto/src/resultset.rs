//! Text-protocol result sets written by sluice itself (side path: the admin port answers its
//! SQL with them): column count, column definitions, rows of length-encoded strings, and the
//! EOF or OK terminator that CLIENT_DEPRECATE_EOF asks for; and binary-protocol rows for the
//! result sets sluice answers a COM_STMT_EXECUTE with.
//!
//! Every packet goes through `PacketBuilder`, so a row of 16 MiB or more is split into chunks
//! as the protocol requires.

use crate::codec::{write_lenenc, write_lenenc_str};
use crate::frame::PacketBuilder;
use crate::packet::{write_eof, write_ok, Ok, EOF_HEADER};

/// The name (alias) of a column definition (Protocol::ColumnDefinition41): its fifth string,
/// after catalog, schema, table and original table. `None` when the packet is too short.
pub fn column_name(def: &[u8]) -> Option<&[u8]> {
    let mut rest = def;
    for _ in 0..4 {
        let (_, n) = crate::codec::read_lenenc_str(rest)?;
        rest = rest.get(n..)?;
    }
    crate::codec::read_lenenc_str(rest).map(|(name, _)| name)
}

/// `MYSQL_TYPE_*`: the types the binary protocol encodes as numbers.
pub const TYPE_TINY: u8 = 0x01;
pub const TYPE_SHORT: u8 = 0x02;
pub const TYPE_LONG: u8 = 0x03;
pub const TYPE_FLOAT: u8 = 0x04;
pub const TYPE_DOUBLE: u8 = 0x05;
pub const TYPE_LONGLONG: u8 = 0x08;
pub const TYPE_INT24: u8 = 0x09;
pub const TYPE_YEAR: u8 = 0x0D;
/// `MYSQL_TYPE_*` of the other values a prepared statement binds or a row carries.
pub const TYPE_DECIMAL: u8 = 0x00;
pub const TYPE_NULL: u8 = 0x06;
pub const TYPE_TIMESTAMP: u8 = 0x07;
pub const TYPE_DATE: u8 = 0x0A;
pub const TYPE_TIME: u8 = 0x0B;
pub const TYPE_DATETIME: u8 = 0x0C;
pub const TYPE_NEWDECIMAL: u8 = 0xF6;
/// TINY_BLOB, MEDIUM_BLOB, LONG_BLOB, BLOB.
pub const TYPE_BLOBS: std::ops::RangeInclusive<u8> = 0xF9..=0xFC;
/// `MYSQL_TYPE_VAR_STRING`.
pub const TYPE_VAR_STRING: u8 = 0xFD;
/// utf8_general_ci.
pub const CHARSET_UTF8: u16 = 33;
/// binary: what MySQL announces for numeric columns.
pub const CHARSET_BINARY: u16 = 63;
/// Column flags (the manual's `NOT_NULL_FLAG`, `BINARY_FLAG`, `NUM_FLAG`).
pub const NOT_NULL_FLAG: u16 = 1;
pub const BINARY_FLAG: u16 = 128;
pub const NUM_FLAG: u16 = 32768;
/// A text row's NULL value.
pub const NULL_VALUE: u8 = 0xFB;

/// One column of a result set, as its definition packet (Protocol::ColumnDefinition41) says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Column<'a> {
    pub schema: &'a str,
    pub table: &'a str,
    pub name: &'a str,
    pub charset: u16,
    /// Largest value length in bytes (a display hint for clients).
    pub length: u32,
    pub column_type: u8,
    pub flags: u16,
    pub decimals: u8,
}

impl<'a> Column<'a> {
    /// A VAR_STRING column in utf8: what the admin port answers everything with.
    pub fn text(name: &'a str) -> Self {
        Column { schema: "", table: "", name, charset: CHARSET_UTF8, length: 1024, column_type: TYPE_VAR_STRING, flags: 0, decimals: 0 }
    }

    /// A LONGLONG column.
    pub fn int(name: &'a str) -> Self {
        Column {
            schema: "",
            table: "",
            name,
            charset: CHARSET_BINARY,
            length: 20,
            column_type: TYPE_LONGLONG,
            flags: BINARY_FLAG | NUM_FLAG,
            decimals: 0,
        }
    }

    pub fn in_table(mut self, schema: &'a str, table: &'a str) -> Self {
        self.schema = schema;
        self.table = table;
        self
    }
}

/// Appends one column definition packet.
pub fn write_column_definition(out: &mut Vec<u8>, seq: &mut u8, c: &Column<'_>) {
    let b = PacketBuilder::begin(out);
    write_lenenc_str(out, b"def");
    write_lenenc_str(out, c.schema.as_bytes());
    write_lenenc_str(out, c.table.as_bytes());
    write_lenenc_str(out, c.table.as_bytes()); // org_table
    write_lenenc_str(out, c.name.as_bytes());
    write_lenenc_str(out, c.name.as_bytes()); // org_name
    out.push(0x0C); // length of the fixed-length fields that follow
    out.extend_from_slice(&c.charset.to_le_bytes());
    out.extend_from_slice(&c.length.to_le_bytes());
    out.push(c.column_type);
    out.extend_from_slice(&c.flags.to_le_bytes());
    out.push(c.decimals);
    out.extend_from_slice(&[0, 0]);
    b.finish(out, seq);
}

/// Appends one text row: each value length-encoded, NULL as 0xFB.
pub fn write_text_row<'r>(out: &mut Vec<u8>, seq: &mut u8, values: impl IntoIterator<Item = Option<&'r [u8]>>) {
    let b = PacketBuilder::begin(out);
    for v in values {
        match v {
            Some(v) => write_lenenc_str(out, v),
            None => out.push(NULL_VALUE),
        }
    }
    b.finish(out, seq);
}

/// Appends a whole text result set answering a COM_QUERY: the column count, the definitions,
/// an EOF unless `deprecate_eof`, the rows, and the terminator (EOF, or OK with header 0xFE
/// under CLIENT_DEPRECATE_EOF) carrying `status`. `*seq` is the sequence id of the first packet
/// (1 after a client command) and is left at the next one.
///
/// A result set needs at least one column; with none, an OK packet carrying `status` is
/// written instead, so the reply is always well formed.
pub fn write_text_resultset<'r, R, V>(out: &mut Vec<u8>, seq: &mut u8, columns: &[Column<'_>], rows: R, status: u16, deprecate_eof: bool)
where
    R: IntoIterator<Item = V>,
    V: IntoIterator<Item = Option<&'r [u8]>>,
{
    if columns.is_empty() {
        write_ok(out, seq, crate::packet::OK_HEADER, &Ok { status, ..Default::default() }, b"");
        return;
    }
    let b = PacketBuilder::begin(out);
    write_lenenc(out, columns.len() as u64);
    b.finish(out, seq);
    for c in columns {
        write_column_definition(out, seq, c);
    }
    if !deprecate_eof {
        write_eof(out, seq, 0, status);
    }
    for row in rows {
        write_text_row(out, seq, row);
    }
    if deprecate_eof {
        write_ok(out, seq, EOF_HEADER, &Ok { status, ..Default::default() }, b"");
    } else {
        write_eof(out, seq, 0, status);
    }
}

/// Appends one binary-protocol row (the reply to COM_STMT_EXECUTE) from values in their text
/// form, each encoded as its column's type says: the integer types, FLOAT and DOUBLE in their
/// binary forms; every other type (strings, DECIMAL, BLOB…) as a length-encoded string, which
/// is their binary form too. Date and time types are not converted (sluice's own result sets
/// have none). A number that does not parse is sent as 0, as the server converts it.
pub fn write_binary_row_from_text<'r>(out: &mut Vec<u8>, seq: &mut u8, types: &[u8], values: impl IntoIterator<Item = Option<&'r [u8]>>) {
    let b = PacketBuilder::begin(out);
    out.push(0x00);
    // The NULL bitmap starts at bit 2.
    let bitmap_at = out.len();
    out.resize(bitmap_at + (types.len() + 9) / 8, 0);
    for (i, v) in values.into_iter().enumerate() {
        let Some(v) = v else {
            out[bitmap_at + (i + 2) / 8] |= 1 << ((i + 2) % 8);
            continue;
        };
        let text = std::str::from_utf8(v).unwrap_or("").trim();
        let int = || text.parse::<i64>().ok().or_else(|| text.parse::<u64>().ok().map(|u| u as i64)).unwrap_or(0);
        match types.get(i).copied().unwrap_or(TYPE_VAR_STRING) {
            TYPE_TINY => out.push(int() as u8),
            TYPE_SHORT | TYPE_YEAR => out.extend_from_slice(&(int() as u16).to_le_bytes()),
            TYPE_LONG | TYPE_INT24 => out.extend_from_slice(&(int() as u32).to_le_bytes()),
            TYPE_LONGLONG => out.extend_from_slice(&int().to_le_bytes()),
            TYPE_FLOAT => out.extend_from_slice(&text.parse::<f32>().unwrap_or(0.0).to_le_bytes()),
            TYPE_DOUBLE => out.extend_from_slice(&text.parse::<f64>().unwrap_or(0.0).to_le_bytes()),
            _ => write_lenenc_str(out, v),
        }
    }
    b.finish(out, seq);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::{frame, MAX_CHUNK};
    use crate::response::{Event, Reply, Scanner};

    const AUTOCOMMIT: u16 = 0x0002;

    #[test]
    fn column_names_from_definitions() {
        let mut def = Vec::new();
        write_column_definition(&mut def, &mut 0, &Column::text("Progress"));
        assert_eq!(column_name(&def[4..]), Some(&b"Progress"[..]));
        assert_eq!(column_name(&[1, b'd']), None);
    }

    fn one_row(deprecate_eof: bool) -> Vec<u8> {
        let mut out = Vec::new();
        let mut seq = 1;
        let cols = [Column::text("a"), Column::int("n")];
        let rows: Vec<Vec<Option<&[u8]>>> = vec![vec![Some(b"x"), None]];
        write_text_resultset(&mut out, &mut seq, &cols, rows, AUTOCOMMIT, deprecate_eof);
        out
    }

    #[test]
    fn byte_vector_with_eof() {
        let out = one_row(false);
        #[rustfmt::skip]
        let want: Vec<u8> = [
            &[1, 0, 0, 1, 2][..],
            // def, "", "", "", "a", "a", 0x0c, utf8, 1024, VAR_STRING, flags 0, decimals 0, filler
            &[24, 0, 0, 2, 3, b'd', b'e', b'f', 0, 0, 0, 1, b'a', 1, b'a', 0x0C, 33, 0, 0, 4, 0, 0, 0xFD, 0, 0, 0, 0, 0],
            &[24, 0, 0, 3, 3, b'd', b'e', b'f', 0, 0, 0, 1, b'n', 1, b'n', 0x0C, 63, 0, 20, 0, 0, 0, 0x08, 0x80, 0x80, 0, 0, 0],
            &[5, 0, 0, 4, 0xFE, 0, 0, 2, 0],
            &[3, 0, 0, 5, 1, b'x', 0xFB],
            &[5, 0, 0, 6, 0xFE, 0, 0, 2, 0],
        ]
        .concat();
        assert_eq!(out, want);
    }

    #[test]
    fn byte_vector_deprecate_eof() {
        let out = one_row(true);
        // No EOF after the definitions; the terminator is an OK with header 0xFE.
        let tail = [&[3u8, 0, 0, 4, 1, b'x', 0xFB][..], &[7, 0, 0, 5, 0xFE, 0, 0, 2, 0, 0, 0]].concat();
        assert!(out.ends_with(&tail), "{out:x?}");
        assert_eq!(out.len(), 5 + 2 * 28 + tail.len());
    }

    #[test]
    fn scanner_sees_a_complete_reply_with_its_status() {
        for dep in [false, true] {
            for status in [AUTOCOMMIT, AUTOCOMMIT | 0x0001] {
                let mut out = Vec::new();
                let mut seq = 1;
                let cols = [Column::text("variable_name"), Column::text("variable_value")];
                let rows = (0..300).map(|i| {
                    let v: &[u8] = if i % 2 == 0 { b"mysql-threads" } else { b"admin-mysql_ifaces" };
                    [Some(v), if i % 3 == 0 { None } else { Some(&b"4"[..]) }]
                });
                write_text_resultset(&mut out, &mut seq, &cols, rows, status, dep);
                let mut s = Scanner::new(Reply::Query, dep);
                assert_eq!(s.feed(&out).unwrap(), (out.len(), Event::Done { error: false }), "deprecate_eof={dep}");
                assert_eq!(s.status(), status);
                assert_eq!(s.last_seq(), seq.wrapping_sub(1));
            }
        }
    }

    #[test]
    fn empty_result_and_no_columns() {
        for dep in [false, true] {
            let mut out = Vec::new();
            let mut seq = 1;
            write_text_resultset(&mut out, &mut seq, &[Column::text("a")], Vec::<Vec<Option<&[u8]>>>::new(), AUTOCOMMIT, dep);
            let mut s = Scanner::new(Reply::Query, dep);
            assert_eq!(s.feed(&out).unwrap(), (out.len(), Event::Done { error: false }));
            let mut out = Vec::new();
            let mut seq = 1;
            write_text_resultset(&mut out, &mut seq, &[], Vec::<Vec<Option<&[u8]>>>::new(), AUTOCOMMIT, dep);
            assert_eq!(out, [7, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0]);
        }
    }

    #[test]
    fn huge_row_is_split_into_chunks() {
        let big = vec![b'z'; MAX_CHUNK + 10];
        let mut out = Vec::new();
        let mut seq = 1;
        write_text_resultset(&mut out, &mut seq, &[Column::text("blob")], [[Some(&big[..])]], AUTOCOMMIT, true);
        let mut s = Scanner::new(Reply::Query, true);
        assert_eq!(s.feed(&out).unwrap(), (out.len(), Event::Done { error: false }));
        // Column count (1), definition (2), row chunks (3, 4), OK (5).
        assert_eq!(seq, 6);
        let mut pos = 0;
        let mut payloads = Vec::new();
        while pos < out.len() {
            let f = frame(&out[pos..], usize::MAX).unwrap().unwrap();
            payloads.push(f.payload(&out[pos..]).into_owned());
            pos += f.wire_len;
        }
        assert_eq!(payloads.len(), 4);
        let row = &payloads[2];
        // 0xFFFFFF + 10 needs the 8-byte length form, so the row starts with 0xFE.
        assert_eq!(&row[..9], &[0xFE, 0x09, 0x00, 0x00, 0x01, 0, 0, 0, 0]);
        assert_eq!(row.len(), 9 + big.len());
    }

    #[test]
    fn binary_rows_encode_numbers_by_type_and_nulls_in_the_bitmap() {
        let mut out = Vec::new();
        let mut seq = 1;
        let types = [TYPE_LONGLONG, TYPE_VAR_STRING, TYPE_VAR_STRING, TYPE_LONG, TYPE_DOUBLE, TYPE_TINY];
        let row: [Option<&[u8]>; 6] = [Some(b"7"), Some(b"root"), None, Some(b"12"), Some(b"0.000"), Some(b"x")];
        write_binary_row_from_text(&mut out, &mut seq, &types, row);
        let mut expected = vec![0x00, 0b0001_0000];
        expected.extend_from_slice(&7i64.to_le_bytes());
        expected.extend_from_slice(b"\x04root");
        expected.extend_from_slice(&12u32.to_le_bytes());
        expected.extend_from_slice(&0f64.to_le_bytes());
        expected.push(0);
        assert_eq!(&out[4..], &expected[..]);
        assert_eq!(out[3], 1, "sequence id");
        assert_eq!(seq, 2);
    }
}
