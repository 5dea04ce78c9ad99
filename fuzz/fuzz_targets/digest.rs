//! Query digests (`sql::digest`) on arbitrary bytes: no panic, the text stays within
//! MAX_DIGEST_LEN, reusing a dirty buffer changes nothing, the `&str` entry point agrees with the
//! byte one, `first_comment` points inside a comment of the input, and the memo
//! (`sql::memo`) gives every statement exactly the digest `digest_into` does.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_sql::digest::{digest, digest_into, format_id, parse_id, MAX_DIGEST_LEN};
use sluice_sql::memo::DigestMemo;

fuzz_target!(|sql: &[u8]| {
    let mut out = Vec::new();
    let d = digest_into(sql, &mut out);
    assert!(out.len() <= MAX_DIGEST_LEN, "digest text of {} bytes", out.len());
    assert!(!out.starts_with(b" "), "leading space");
    assert_eq!(parse_id(&format_id(d.id)), Some(d.id));

    // The same again into a buffer holding something else.
    let mut dirty = b"stale digest text".to_vec();
    assert_eq!(digest_into(sql, &mut dirty), d);
    assert_eq!(dirty, out);

    if let Ok(s) = std::str::from_utf8(sql) {
        let (text, d2) = digest(s);
        assert_eq!(d2, d);
        assert_eq!(text.as_bytes(), &out[..], "valid UTF-8 in, same bytes out");
    }

    if let Some(r) = d.first_comment {
        assert!(r.start <= r.end && r.end <= sql.len(), "comment range {r:?} outside {} bytes", sql.len());
        // Its opener sits right before it: `/*`, `#`, or `--` and at most one whitespace byte.
        let before = &sql[..r.start];
        let dashes = before.ends_with(b"--") || before.split_last().is_some_and(|(_, rest)| rest.ends_with(b"--"));
        assert!(before.ends_with(b"/*") || before.ends_with(b"#") || dashes, "no comment opener before {r:?}");
    }

    // The input as statements split at NUL bytes, each twice (so templates get built), and all
    // of them once more: whatever the memo holds, its answer is digest_into's.
    let mut memo = DigestMemo::new();
    let mut want = Vec::new();
    let parts = || sql.split(|&b| b == 0);
    for part in parts().flat_map(|p| [p, p]).chain(parts()) {
        let got = memo.digest(part, &mut dirty);
        let d = digest_into(part, &mut want);
        assert_eq!(got, d, "memo digest of {part:?}");
        assert_eq!(dirty, want, "memo digest text of {part:?}");
    }
});
