//! Framing: the 4-byte packet header (3-byte length, 1-byte sequence id) and logical
//! packets of 16 MiB and more, which travel as a chain of 0xFFFFFF-byte chunks.
//!
//! Hand-written check-then-parse on a byte slice: nothing is allocated or copied until a
//! whole logical packet is present, and the caller keeps the raw bytes to forward as-is.

use crate::ProtoError;

pub const HEADER_LEN: usize = 4;
/// Payload length of a full chunk; a chunk this long is followed by another of the same packet.
pub const MAX_CHUNK: usize = 0xFF_FFFF;

/// The header at the start of `buf`: (payload length, sequence id).
#[inline]
pub fn header(buf: &[u8]) -> Option<(usize, u8)> {
    let h = buf.get(..HEADER_LEN)?;
    Some((h[0] as usize | (h[1] as usize) << 8 | (h[2] as usize) << 16, h[3]))
}

#[inline]
pub fn encode_header(len: usize, seq: u8) -> [u8; 4] {
    debug_assert!(len <= MAX_CHUNK);
    [len as u8, (len >> 8) as u8, (len >> 16) as u8, seq]
}

/// Where a complete logical packet lies at the start of a buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Frame {
    /// Bytes on the wire, headers included.
    pub wire_len: usize,
    /// Payload bytes, all chunks together.
    pub payload_len: usize,
    pub first_seq: u8,
    pub last_seq: u8,
    /// Number of chunks (1 for packets under 16 MiB).
    pub chunks: usize,
}

impl Frame {
    /// The payload of a single-chunk frame, borrowed from the buffer it was found in.
    pub fn single_payload<'a>(&self, buf: &'a [u8]) -> Option<&'a [u8]> {
        (self.chunks == 1).then(|| &buf[HEADER_LEN..self.wire_len])
    }

    /// The payload of the first chunk: the whole payload unless the packet was split.
    pub fn first_chunk<'a>(&self, buf: &'a [u8]) -> &'a [u8] {
        &buf[HEADER_LEN..HEADER_LEN + self.payload_len.min(MAX_CHUNK)]
    }

    /// The payload, joined when the packet was split (rare: ≥ 16 MiB).
    pub fn payload<'a>(&self, buf: &'a [u8]) -> std::borrow::Cow<'a, [u8]> {
        if let Some(p) = self.single_payload(buf) {
            return std::borrow::Cow::Borrowed(p);
        }
        let mut out = Vec::with_capacity(self.payload_len);
        let mut pos = 0;
        while pos < self.wire_len {
            let (len, _) = header(&buf[pos..]).unwrap_or((0, 0));
            out.extend_from_slice(&buf[pos + HEADER_LEN..pos + HEADER_LEN + len]);
            pos += HEADER_LEN + len;
        }
        std::borrow::Cow::Owned(out)
    }
}

/// Finds a complete logical packet at the start of `buf`.
/// `Ok(None)`: more bytes are needed. Errors when the payload would exceed `max_payload`.
pub fn frame(buf: &[u8], max_payload: usize) -> Result<Option<Frame>, ProtoError> {
    let mut pos = 0;
    let mut payload = 0usize;
    let mut chunks = 0;
    let mut first_seq = 0;
    loop {
        let Some((len, seq)) = header(&buf[pos..]) else {
            return Ok(None);
        };
        if chunks == 0 {
            first_seq = seq;
        }
        payload += len;
        if payload > max_payload {
            return Err(ProtoError::TooLarge { size: payload, limit: max_payload });
        }
        if buf.len() < pos + HEADER_LEN + len {
            return Ok(None);
        }
        pos += HEADER_LEN + len;
        chunks += 1;
        if len < MAX_CHUNK {
            return Ok(Some(Frame { wire_len: pos, payload_len: payload, first_seq, last_seq: seq, chunks }));
        }
    }
}

/// Appends `payload` as one logical packet starting at sequence id `*seq`, split into
/// chunks as the protocol requires; `*seq` is left at the id for the next packet.
pub fn write_packet(out: &mut Vec<u8>, seq: &mut u8, payload: &[u8]) {
    let mut rest = payload;
    loop {
        let n = rest.len().min(MAX_CHUNK);
        out.extend_from_slice(&encode_header(n, *seq));
        out.extend_from_slice(&rest[..n]);
        *seq = seq.wrapping_add(1);
        rest = &rest[n..];
        if n < MAX_CHUNK {
            return;
        }
    }
}

/// Appends a command packet: the command byte and its body, split into chunks if the
/// protocol requires.
pub fn write_command(out: &mut Vec<u8>, seq: u8, cmd: u8, body: &[u8]) {
    let packet = PacketBuilder::begin(out);
    out.push(cmd);
    out.extend_from_slice(body);
    packet.finish(out, &mut seq.clone());
}

/// Builds a packet in place: reserve the header, append the payload, then `finish`.
/// Avoids a second buffer for the common small packet.
pub struct PacketBuilder {
    start: usize,
}

impl PacketBuilder {
    pub fn begin(out: &mut Vec<u8>) -> Self {
        let start = out.len();
        out.extend_from_slice(&[0; HEADER_LEN]);
        PacketBuilder { start }
    }

    pub fn finish(self, out: &mut Vec<u8>, seq: &mut u8) {
        let len = out.len() - self.start - HEADER_LEN;
        if len < MAX_CHUNK {
            out[self.start..self.start + HEADER_LEN].copy_from_slice(&encode_header(len, *seq));
            *seq = seq.wrapping_add(1);
        } else {
            let payload = out.split_off(self.start + HEADER_LEN);
            out.truncate(self.start);
            write_packet(out, seq, &payload);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn header_byte_vectors() {
        assert_eq!(header(&[0x01, 0x00, 0x00, 0x00, 0x0E]), Some((1, 0)));
        assert_eq!(header(&[0xFF, 0xFF, 0xFF, 0x07]), Some((MAX_CHUNK, 7)));
        assert_eq!(header(&[0x01, 0x00, 0x00]), None);
        assert_eq!(encode_header(0x030201, 9), [1, 2, 3, 9]);
    }

    #[test]
    fn com_ping_frame() {
        let buf = [0x01, 0x00, 0x00, 0x00, 0x0E, 0xAA];
        let f = frame(&buf, 1 << 30).unwrap().unwrap();
        assert_eq!(f, Frame { wire_len: 5, payload_len: 1, first_seq: 0, last_seq: 0, chunks: 1 });
        assert_eq!(f.single_payload(&buf), Some(&[0x0E][..]));
        assert_eq!(f.first_chunk(&buf), &[0x0E][..]);
        assert_eq!(frame(&buf[..4], 1 << 30), Ok(None));
    }

    #[test]
    fn exact_chunk_needs_empty_trailer() {
        let payload = vec![7u8; MAX_CHUNK];
        let mut out = Vec::new();
        let mut seq = 0;
        write_packet(&mut out, &mut seq, &payload);
        assert_eq!(seq, 2);
        assert_eq!(out.len(), MAX_CHUNK + 2 * HEADER_LEN);
        assert_eq!(&out[MAX_CHUNK + 4..], &[0, 0, 0, 1]);
        let f = frame(&out, usize::MAX).unwrap().unwrap();
        assert_eq!((f.chunks, f.payload_len, f.last_seq), (2, MAX_CHUNK, 1));
        assert_eq!(f.first_chunk(&out).len(), MAX_CHUNK);
        assert_eq!(frame(&out[..out.len() - 1], usize::MAX), Ok(None));
    }

    #[test]
    fn too_large_is_rejected_before_buffering() {
        let buf = [0xFF, 0xFF, 0xFF, 0x00];
        assert!(matches!(frame(&buf, 1024), Err(ProtoError::TooLarge { .. })));
    }

    #[test]
    fn builder_splits_large_payloads() {
        let mut out = vec![0xAB];
        let mut seq = 3;
        let b = PacketBuilder::begin(&mut out);
        out.extend(std::iter::repeat_n(1u8, MAX_CHUNK + 10));
        b.finish(&mut out, &mut seq);
        assert_eq!(seq, 5);
        let f = frame(&out[1..], usize::MAX).unwrap().unwrap();
        assert_eq!((f.first_seq, f.last_seq, f.payload_len), (3, 4, MAX_CHUNK + 10));
        assert_eq!(f.first_chunk(&out[1..]), &vec![1u8; MAX_CHUNK][..]);
    }

    proptest! {
        #[test]
        fn round_trip(len in 0usize..40_000, seq0 in any::<u8>(), cut in any::<prop::sample::Index>()) {
            // Small chunks exercise the same code path as 16 MiB ones through frame().
            let payload: Vec<u8> = (0..len).map(|i| i as u8).collect();
            let mut out = Vec::new();
            let mut seq = seq0;
            write_packet(&mut out, &mut seq, &payload);
            let f = frame(&out, usize::MAX).unwrap().unwrap();
            prop_assert_eq!(f.wire_len, out.len());
            prop_assert_eq!(&f.payload(&out)[..], &payload[..]);
            prop_assert_eq!(f.first_seq, seq0);
            let at = cut.index(out.len());
            prop_assert_eq!(frame(&out[..at], usize::MAX), Ok(None));
        }

        #[test]
        fn frame_never_panics(b in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = frame(&b, 1 << 20);
        }
    }
}
