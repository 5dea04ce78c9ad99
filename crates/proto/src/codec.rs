//! Length-encoded integers and strings: the primitive encodings every packet is made of.
//!
//! Hand-written because the response scanner reads them on the hot path from a few
//! prefix bytes; `mysql_common`'s `ParseBuf` needs a whole packet.

/// Reads a length-encoded integer at the start of `buf`: (value, bytes used).
/// `None` when `buf` is too short or starts with a byte that is not a valid prefix (0xFB, 0xFF).
pub fn read_lenenc(buf: &[u8]) -> Option<(u64, usize)> {
    let first = *buf.first()?;
    match first {
        0..=0xFA => Some((first as u64, 1)),
        0xFC => Some((u16::from_le_bytes(buf.get(1..3)?.try_into().ok()?) as u64, 3)),
        0xFD => {
            let b = buf.get(1..4)?;
            Some((b[0] as u64 | (b[1] as u64) << 8 | (b[2] as u64) << 16, 4))
        }
        0xFE => Some((u64::from_le_bytes(buf.get(1..9)?.try_into().ok()?), 9)),
        _ => None,
    }
}

/// Appends `v` as a length-encoded integer.
pub fn write_lenenc(out: &mut Vec<u8>, v: u64) {
    if v < 0xFB {
        out.push(v as u8);
    } else if v <= 0xFFFF {
        out.push(0xFC);
        out.extend_from_slice(&(v as u16).to_le_bytes());
    } else if v <= 0xFF_FFFF {
        out.push(0xFD);
        out.extend_from_slice(&(v as u32).to_le_bytes()[..3]);
    } else {
        out.push(0xFE);
        out.extend_from_slice(&v.to_le_bytes());
    }
}

/// Appends a length-encoded string.
pub fn write_lenenc_str(out: &mut Vec<u8>, s: &[u8]) {
    write_lenenc(out, s.len() as u64);
    out.extend_from_slice(s);
}

/// Reads a length-encoded string: (bytes, total bytes used).
pub fn read_lenenc_str(buf: &[u8]) -> Option<(&[u8], usize)> {
    let (len, used) = read_lenenc(buf)?;
    let len = usize::try_from(len).ok()?;
    let end = used.checked_add(len)?;
    Some((buf.get(used..end)?, end))
}

/// Reads a NUL-terminated string: (bytes without the NUL, total bytes used).
pub fn read_null_str(buf: &[u8]) -> Option<(&[u8], usize)> {
    let end = buf.iter().position(|&b| b == 0)?;
    Some((&buf[..end], end + 1))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn lenenc_byte_vectors() {
        assert_eq!(read_lenenc(&[0xFA]), Some((250, 1)));
        assert_eq!(read_lenenc(&[0xFC, 0xFB, 0x00]), Some((251, 3)));
        assert_eq!(read_lenenc(&[0xFD, 0x01, 0x02, 0x03]), Some((0x030201, 4)));
        assert_eq!(read_lenenc(&[0xFE, 1, 0, 0, 0, 0, 0, 0, 0]), Some((1, 9)));
        assert_eq!(read_lenenc(&[0xFB]), None);
        assert_eq!(read_lenenc(&[0xFF]), None);
        assert_eq!(read_lenenc(&[0xFC, 0x01]), None);
        let mut v = Vec::new();
        write_lenenc(&mut v, 251);
        assert_eq!(v, [0xFC, 0xFB, 0x00]);
    }

    proptest! {
        #[test]
        fn lenenc_round_trip(v in any::<u64>()) {
            let mut buf = Vec::new();
            write_lenenc(&mut buf, v);
            prop_assert_eq!(read_lenenc(&buf), Some((v, buf.len())));
        }

        #[test]
        fn lenenc_str_round_trip(s in proptest::collection::vec(any::<u8>(), 0..300)) {
            let mut buf = Vec::new();
            write_lenenc_str(&mut buf, &s);
            prop_assert_eq!(read_lenenc_str(&buf), Some((&s[..], buf.len())));
        }

        #[test]
        fn readers_never_panic(b in proptest::collection::vec(any::<u8>(), 0..20)) {
            let _ = read_lenenc(&b);
            let _ = read_lenenc_str(&b);
            let _ = read_null_str(&b);
        }
    }
}
