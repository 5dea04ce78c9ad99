//! Framing: `frame(buf, max)` on arbitrary bytes, and on chains of 16 MiB chunks built from a
//! short description (a logical packet of 16 MiB or more, split as the protocol requires).
//!
//! Input: byte 0 chooses the limit (low nibble) and whether the rest is raw bytes or a chain
//! description (0x80). Every result is checked against a straightforward reference walk of the
//! headers.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_proto::frame::{frame, header, write_packet, Frame, HEADER_LEN, MAX_CHUNK};
use sluice_proto::ProtoError;

const LIMITS: [usize; 16] =
    [0, 1, 3, 4, 5, 100, 255, 256, 4096, MAX_CHUNK - 1, MAX_CHUNK, MAX_CHUNK + 1, 2 * MAX_CHUNK, 3 * MAX_CHUNK + 7, 1 << 30, usize::MAX];

/// At most this many full chunks in a built chain (each is 16 MiB of address space).
const MAX_FULL_CHUNKS: usize = 3;

/// What `frame` should say, computed without shortcuts and in u128 so nothing overflows.
fn reference(buf: &[u8], max: usize) -> Result<Option<Frame>, ProtoError> {
    let mut pos: u128 = 0;
    let mut payload: u128 = 0;
    let mut chunks = 0;
    let mut first_seq = None;
    loop {
        if (buf.len() as u128) < pos + HEADER_LEN as u128 {
            return Ok(None);
        }
        let p = pos as usize;
        let len = buf[p] as u128 | (buf[p + 1] as u128) << 8 | (buf[p + 2] as u128) << 16;
        let seq = buf[p + 3];
        first_seq.get_or_insert(seq);
        payload += len;
        if payload > max as u128 {
            return Err(ProtoError::TooLarge { size: payload as usize, limit: max });
        }
        if (buf.len() as u128) < pos + HEADER_LEN as u128 + len {
            return Ok(None);
        }
        pos += HEADER_LEN as u128 + len;
        chunks += 1;
        if len < MAX_CHUNK as u128 {
            return Ok(Some(Frame {
                wire_len: pos as usize,
                payload_len: payload as usize,
                first_seq: first_seq.unwrap(),
                last_seq: seq,
                chunks,
            }));
        }
    }
}

fn check(buf: &[u8], max: usize) {
    let got = frame(buf, max);
    assert_eq!(got, reference(buf, max), "frame disagrees with the reference");
    match got {
        Ok(Some(f)) => {
            assert!(f.chunks >= 1);
            assert!(f.wire_len <= buf.len());
            assert!(f.payload_len <= max);
            assert_eq!(f.wire_len, f.payload_len + HEADER_LEN * f.chunks);
            assert_eq!(f.first_seq, buf[3]);
            // A frame is found on exactly its own bytes, and not on fewer.
            assert_eq!(frame(&buf[..f.wire_len], max), Ok(Some(f)));
            assert_eq!(frame(&buf[..f.wire_len - 1], max), Ok(None));
            if f.chunks == 1 {
                let p = f.single_payload(buf).expect("single chunk");
                assert_eq!(p, &buf[HEADER_LEN..f.wire_len]);
                assert_eq!(&f.payload(buf)[..], p);
            } else {
                assert!(f.single_payload(buf).is_none());
                assert!(f.payload_len >= MAX_CHUNK);
                // The chunks: all full but the last. (`Frame::payload` is not called on split
                // packets: copying 16 MiB or more per run made the target ten times slower.)
                let mut pos = 0;
                let mut chunks = 0;
                let mut last = None;
                while pos < f.wire_len {
                    let (len, seq) = header(&buf[pos..]).unwrap();
                    chunks += 1;
                    last = Some((len, seq));
                    pos += HEADER_LEN + len;
                    assert!(len == MAX_CHUNK || pos == f.wire_len);
                }
                assert_eq!(pos, f.wire_len);
                assert_eq!(chunks, f.chunks);
                let (len, seq) = last.unwrap();
                assert!(len < MAX_CHUNK);
                assert_eq!(seq, f.last_seq);
            }
        }
        Ok(None) => {}
        Err(ProtoError::TooLarge { size, limit }) => {
            assert_eq!(limit, max);
            assert!(size > max);
        }
        Err(e) => panic!("unexpected error {e:?}"),
    }
}

/// Room for the largest chain `build_chain` makes from an input of up to 64 KiB.
const CHAIN_ROOM: usize = MAX_FULL_CHUNKS * (HEADER_LEN + MAX_CHUNK) + (1 << 16) * 34;

/// Builds a chain of chunks from 2-byte descriptions (kind, seq) into `buf`, which is all zeros,
/// and returns its length; every range written is added to `touched`. Kind, low 2 bits:
/// 0 a full 16 MiB chunk, 1 a short chunk of `kind >> 2` bytes, 2 a chunk whose 3-byte length
/// follows (may claim more than is present), 3 cut the last `kind >> 2` bytes and stop.
/// Whatever input is left after the descriptions is appended as it is.
fn build_chain(mut d: &[u8], buf: &mut [u8], touched: &mut Vec<(usize, usize)>) -> usize {
    let mut pos = 0;
    let mut full = 0;
    let mut cut = 0;
    while let [kind, seq, rest @ ..] = d {
        d = rest;
        let len = match kind & 3 {
            0 if full < MAX_FULL_CHUNKS => {
                full += 1;
                MAX_CHUNK
            }
            0 => 0,
            1 => (kind >> 2) as usize,
            2 => match d {
                [a, b, c, rest @ ..] => {
                    d = rest;
                    let len = *a as usize | (*b as usize) << 8 | (*c as usize) << 16;
                    if len == MAX_CHUNK && full >= MAX_FULL_CHUNKS {
                        0
                    } else {
                        full += (len == MAX_CHUNK) as usize;
                        len
                    }
                }
                _ => break,
            },
            _ => {
                cut = (kind >> 2) as usize;
                break;
            }
        };
        buf[pos..pos + HEADER_LEN].copy_from_slice(&[len as u8, (len >> 8) as u8, (len >> 16) as u8, *seq]);
        touched.push((pos, pos + HEADER_LEN));
        pos += HEADER_LEN;
        // A short chunk claiming more than 32 bytes holds only 32 (the packet is incomplete,
        // unless the bytes appended at the end make up for it).
        let stored = if len < MAX_CHUNK { len.min(32) } else { len };
        if stored > 0 {
            let mark = kind ^ seq;
            buf[pos] = mark;
            buf[pos + stored - 1] = mark.wrapping_add(1);
            touched.push((pos, pos + 1));
            touched.push((pos + stored - 1, pos + stored));
        }
        pos += stored;
    }
    buf[pos..pos + d.len()].copy_from_slice(d);
    touched.push((pos, pos + d.len()));
    (pos + d.len()).saturating_sub(cut)
}

/// The buffer chains are built in, and the ranges written to it (zeroed again after each run).
struct Chain {
    buf: Vec<u8>,
    touched: Vec<(usize, usize)>,
}

thread_local! {
    /// Allocated once, so a 16 MiB chunk costs nothing to "build".
    static CHAIN: std::cell::RefCell<Chain> = std::cell::RefCell::new(Chain {
        buf: vec![0; CHAIN_ROOM],
        touched: Vec::new(),
    });
}

fuzz_target!(|data: &[u8]| {
    let Some((&cfg, rest)) = data.split_first() else {
        return;
    };
    let max = LIMITS[(cfg & 0x0F) as usize];
    if cfg & 0x80 == 0 {
        check(rest, max);
        // Writing the bytes as a payload frames back to exactly that payload.
        let mut out = Vec::new();
        let mut seq = cfg;
        write_packet(&mut out, &mut seq, rest);
        assert_eq!(seq, cfg.wrapping_add(1));
        let f = frame(&out, usize::MAX).unwrap().expect("whole packet");
        assert_eq!((f.wire_len, f.first_seq, f.last_seq), (out.len(), cfg, cfg));
        assert_eq!(&f.payload(&out)[..], rest);
    } else if rest.len() <= 1 << 16 {
        CHAIN.with(|c| {
            let Chain { buf, touched } = &mut *c.borrow_mut();
            let len = build_chain(rest, buf, touched);
            check(&buf[..len], max);
            for (from, to) in touched.drain(..) {
                buf[from..to].fill(0);
            }
        });
    }
});
