//! The streaming reply scanner: arbitrary bytes, for each kind of `Reply` and both EOF modes,
//! fed in arbitrary splits, with `after_infile` called whenever it reports `Event::LocalInfile`.
//!
//! The same stream is fed twice: once cut into many small pieces and once in as few pieces as
//! possible. The scanner keeps no bytes, so both runs must report the same events at the same
//! stream offsets, end in the same state, and fail (if they fail) at the same packet.
//!
//! Input: byte 0 chooses the reply kind (low 3 bits), the EOF mode (0x08), the MariaDB
//! capabilities (0x10 progress reports, 0x20 metadata caching) and the sequence id handed to
//! `after_infile` (top 2 bits). Byte 1's low 5 bits count the cut bytes that follow;
//! the rest is the stream. A cut byte under 0x80 takes that many stream bytes (0: 128) as one
//! segment; from 0x80 it inserts a filler segment (a run of one byte value, up to 16 MiB + 4,
//! so packets of 16 MiB and more, split into chunks, are reached without a 16 MiB input).
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_proto::frame::MAX_CHUNK;
use sluice_proto::response::{Event, Reply, Scanner, MARIADB_CLIENT_CACHE_METADATA, MARIADB_CLIENT_PROGRESS};
use sluice_proto::ProtoError;
use std::sync::OnceLock;

const KINDS: [Reply; 8] = [
    Reply::Query,
    Reply::Execute { cursor: false },
    Reply::Execute { cursor: true },
    Reply::Prepare,
    Reply::Fetch,
    Reply::FieldList,
    Reply::Single,
    Reply::Query,
];

const FILL_LENS: [usize; 16] =
    [1, 2, 3, 4, 5, 9, 24, 25, 255, 4096, 65_535, MAX_CHUNK - 4, MAX_CHUNK - 1, MAX_CHUNK, MAX_CHUNK + 3, MAX_CHUNK + 4];
/// 0xFF runs read as 16 MiB chunk headers, 0xFE as terminators, 0x00 as empty packets (so a
/// run of zeros is kept to 4 KiB: each 4 of its bytes are a packet).
const FILL_BYTES: [u8; 8] = [0xFF, 0xFE, 0x00, 0x01, 0xFB, 0x03, 0x0A, 0x08];
const ZERO_FILL_MAX: usize = 4096;

fn filler(byte_index: usize) -> &'static [u8] {
    static FILLS: OnceLock<Vec<Vec<u8>>> = OnceLock::new();
    &FILLS.get_or_init(|| FILL_BYTES.iter().map(|&b| vec![b; MAX_CHUNK + 4]).collect())[byte_index]
}

#[derive(Clone, Copy)]
enum Seg {
    /// A range of the stream bytes.
    Data(usize, usize),
    Fill {
        byte: usize,
        len: usize,
    },
}

#[derive(Debug, PartialEq)]
struct Seen {
    /// Stream offset just after the packet that caused the event.
    offset: u64,
    event: Event,
    status: u16,
    warnings: u16,
    last_seq: u8,
    packets: u64,
}

#[derive(Debug, PartialEq)]
enum End {
    /// All bytes were fed and the reply is not over.
    Open {
        status: u16,
        warnings: u16,
        last_seq: u8,
        packets: u64,
        boundary: bool,
    },
    /// The reply ended, and that many bytes were left over (refused by the scanner).
    Done {
        trailing: u64,
    },
    Failed {
        error: ProtoError,
        packets: u64,
    },
}

fn drive<'a>(
    reply: Reply,
    deprecate_eof: bool,
    mariadb_caps: u32,
    infile_seq: u8,
    pieces: impl Iterator<Item = &'a [u8]>,
) -> (Vec<Seen>, End) {
    let mut s = Scanner::new(reply, deprecate_eof).with_mariadb_capabilities(mariadb_caps);
    let mut seen = Vec::new();
    let mut offset = 0u64;
    let mut finished = false;
    let mut trailing = 0u64;
    for piece in pieces {
        if finished {
            if !piece.is_empty() {
                assert!(s.feed(piece).is_err(), "bytes accepted after the end");
            }
            trailing += piece.len() as u64;
            continue;
        }
        assert_eq!(s.feed(&[]), Ok((0, Event::More)));
        let mut rest = piece;
        while !rest.is_empty() {
            let packets_before = s.packets();
            let (used, event) = match s.feed(rest) {
                Ok(r) => r,
                Err(error) => {
                    let packets = s.packets();
                    return (seen, End::Failed { error, packets });
                }
            };
            assert!(used <= rest.len());
            assert!(s.packets() >= packets_before);
            offset += used as u64;
            rest = &rest[used..];
            if event == Event::More {
                assert!(rest.is_empty(), "More with bytes left unconsumed");
                assert!(!s.is_done());
                continue;
            }
            assert!(used > 0, "an event without a packet");
            assert!(s.at_packet_boundary());
            seen.push(Seen { offset, event, status: s.status(), warnings: s.warnings(), last_seq: s.last_seq(), packets: s.packets() });
            match event {
                Event::Done { .. } => {
                    assert!(s.is_done());
                    finished = true;
                    if !rest.is_empty() {
                        assert!(s.feed(rest).is_err(), "bytes accepted after the end");
                    }
                    trailing += rest.len() as u64;
                    rest = &[];
                }
                Event::LocalInfile => {
                    assert_eq!(reply, Reply::Query, "LOCAL INFILE outside COM_QUERY");
                    assert!(!s.is_done());
                    s.after_infile(s.last_seq().wrapping_add(infile_seq));
                }
                Event::More => unreachable!(),
            }
        }
    }
    if finished {
        return (seen, End::Done { trailing });
    }
    (
        seen,
        End::Open {
            status: s.status(),
            warnings: s.warnings(),
            last_seq: s.last_seq(),
            packets: s.packets(),
            boundary: s.at_packet_boundary(),
        },
    )
}

fuzz_target!(|data: &[u8]| {
    let [cfg, ncuts, rest @ ..] = data else {
        return;
    };
    let reply = KINDS[(cfg & 7) as usize];
    let deprecate_eof = cfg & 0x08 != 0;
    let mut mariadb_caps = 0;
    if cfg & 0x10 != 0 {
        mariadb_caps |= MARIADB_CLIENT_PROGRESS;
    }
    if cfg & 0x20 != 0 {
        mariadb_caps |= MARIADB_CLIENT_CACHE_METADATA;
    }
    let infile_seq = cfg >> 6;
    let ncuts = ((ncuts & 31) as usize).min(rest.len());
    let (cuts, body) = rest.split_at(ncuts);

    let mut segs = Vec::new();
    let mut at = 0;
    for &c in cuts {
        if c < 0x80 {
            let n = if c == 0 { 128 } else { c as usize }.min(body.len() - at);
            segs.push(Seg::Data(at, at + n));
            at += n;
        } else {
            let byte = ((c >> 4) & 7) as usize;
            let mut len = FILL_LENS[(c & 15) as usize];
            if FILL_BYTES[byte] == 0 {
                len = len.min(ZERO_FILL_MAX);
            }
            segs.push(Seg::Fill { byte, len });
        }
    }
    segs.push(Seg::Data(at, body.len()));

    // Many pieces: every segment alone, fillers cut after their first and before their last byte.
    let mut small: Vec<&[u8]> = Vec::new();
    for seg in &segs {
        match *seg {
            Seg::Data(from, to) => small.push(&body[from..to]),
            Seg::Fill { byte, len } => {
                let f = &filler(byte)[..len];
                if len >= 2 {
                    small.extend([&f[..1], &f[1..len - 1], &f[len - 1..]]);
                } else {
                    small.push(f);
                }
            }
        }
    }
    // Few pieces: adjacent data segments are adjacent in the input, so they are fed as one.
    let mut large: Vec<&[u8]> = Vec::new();
    let mut run: Option<(usize, usize)> = None;
    for seg in &segs {
        match *seg {
            Seg::Data(from, to) => {
                run = Some(match run {
                    Some((r, _)) => (r, to),
                    None => (from, to),
                });
            }
            Seg::Fill { byte, len } => {
                large.extend(run.take().map(|(f, t)| &body[f..t]));
                large.push(&filler(byte)[..len]);
            }
        }
    }
    large.extend(run.take().map(|(f, t)| &body[f..t]));

    let a = drive(reply, deprecate_eof, mariadb_caps, infile_seq, small.into_iter());
    let b = drive(reply, deprecate_eof, mariadb_caps, infile_seq, large.into_iter());
    assert_eq!(a, b, "split-dependent result for {reply:?} deprecate_eof={deprecate_eof} mariadb_caps={mariadb_caps:#x}");
});
