//! Length-encoded integers and strings, NUL-terminated strings: the primitives every packet
//! reader is built on. Checks bounds of what is returned and the round trip through the writers.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_proto::codec::{read_lenenc, read_lenenc_str, read_null_str, write_lenenc, write_lenenc_str};

fuzz_target!(|data: &[u8]| {
    match read_lenenc(data) {
        Some((v, used)) => {
            assert!(matches!(used, 1 | 3 | 4 | 9), "lenenc used {used} bytes");
            assert!(used <= data.len());
            assert!(!matches!(data[0], 0xFB | 0xFF), "0xFB/0xFF are not lenenc prefixes");
            // The writer's (shortest) encoding reads back to the same value and is no longer.
            let mut out = Vec::new();
            write_lenenc(&mut out, v);
            assert!(out.len() <= used);
            assert_eq!(read_lenenc(&out), Some((v, out.len())));
        }
        None => {
            assert!(
                data.is_empty()
                    || matches!(data[0], 0xFB | 0xFF)
                    || (data[0] == 0xFC && data.len() < 3)
                    || (data[0] == 0xFD && data.len() < 4)
                    || (data[0] == 0xFE && data.len() < 9),
                "read_lenenc refused a valid prefix"
            );
        }
    }

    if let Some((s, used)) = read_lenenc_str(data) {
        assert!(used <= data.len());
        let (len, prefix) = read_lenenc(data).expect("string without a length");
        assert_eq!(s.len() as u64, len);
        assert_eq!(prefix + s.len(), used);
        assert_eq!(s, &data[prefix..used]);
        let mut out = Vec::new();
        write_lenenc_str(&mut out, s);
        assert_eq!(read_lenenc_str(&out), Some((s, out.len())));
    } else if let Some((len, prefix)) = read_lenenc(data) {
        // Only a string running past the end may be refused.
        assert!(len > (data.len() - prefix) as u64);
    }

    match read_null_str(data) {
        Some((s, used)) => {
            assert!(used <= data.len());
            assert_eq!(used, s.len() + 1);
            assert_eq!(data[s.len()], 0);
            assert!(!s.contains(&0));
            assert_eq!(s, &data[..s.len()]);
        }
        None => assert!(!data.contains(&0)),
    }
});
