//! The generic response packets: `parse_ok`, `parse_eof`, `parse_err` (and `terminator_status`)
//! on arbitrary payloads. What they accept must be well-formed as documented and must survive a
//! round trip through the matching writer.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_proto::frame::frame;
use sluice_proto::packet::{
    parse_eof, parse_err, parse_ok, terminator_status, write_eof, write_err_bytes, write_ok, EOF_HEADER, ERR_HEADER,
    OK_HEADER,
};

/// The payload of the single packet a writer appended.
fn payload(out: &[u8]) -> &[u8] {
    let f = frame(out, usize::MAX).unwrap().expect("a whole packet");
    assert_eq!(f.wire_len, out.len());
    f.single_payload(out).expect("small packet")
}

fuzz_target!(|data: &[u8]| {
    let ok = parse_ok(data);
    if let Ok(ok) = ok {
        assert!(matches!(data[0], OK_HEADER | EOF_HEADER));
        let header = data[0];
        let mut out = Vec::new();
        let mut seq = 7;
        write_ok(&mut out, &mut seq, header, &ok, b"");
        assert_eq!(seq, 8);
        assert_eq!(parse_ok(payload(&out)), Ok(ok));
        assert_eq!(payload(&out)[0], header);
    }

    let eof = parse_eof(data);
    if let Ok((warnings, status)) = eof {
        assert_eq!(data[0], EOF_HEADER);
        assert!(data.len() < 9);
        let mut out = Vec::new();
        let mut seq = 0;
        write_eof(&mut out, &mut seq, warnings, status);
        assert_eq!(parse_eof(payload(&out)), Ok((warnings, status)));
    }

    assert_eq!(terminator_status(data, true), ok.map(|o| o.status));
    assert_eq!(terminator_status(data, false), eof.map(|(_, s)| s));

    if let Ok(e) = parse_err(data) {
        assert_eq!(data[0], ERR_HEADER);
        assert_eq!(e.code, u16::from_le_bytes([data[1], data[2]]));
        // The message is the payload's tail, after the code and the optional #SQLSTATE.
        assert!(data.ends_with(e.message));
        assert!(data.len() - e.message.len() == 3 || data.len() - e.message.len() == 9);
        // Any message bytes; never a client library's code (write_err refuses those).
        if !sluice_proto::errors::CLIENT_CODES.contains(&e.code) {
            let mut out = Vec::new();
            let mut seq = 0;
            write_err_bytes(&mut out, &mut seq, e.code, &e.sqlstate, e.message);
            let back = parse_err(payload(&out)).expect("written ERR parses");
            assert_eq!(back, e);
        }
    } else {
        assert!(data.first() != Some(&ERR_HEADER) || data.len() < 3);
    }
});
