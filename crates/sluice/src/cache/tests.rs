use super::*;
use proto::StatusFlags as S;

fn cache(max_memory_bytes: usize, max_entry_bytes: usize) -> QueryCache {
    let stats = Arc::new(Stats::new(&crate::config::StatsSection::default()));
    QueryCache::new(&CacheSection { max_memory_bytes, max_entry_bytes }, stats)
}

/// A one-column, one-row result set whose value is `value` (no CLIENT_DEPRECATE_EOF).
fn result(value: &[u8]) -> CachedReply {
    let mut out = Vec::new();
    let mut seq = 1;
    let eof = [0xFE, 0, 0, S::SERVER_STATUS_AUTOCOMMIT.bits() as u8, 0];
    proto::frame::write_packet(&mut out, &mut seq, &[1]);
    proto::frame::write_packet(&mut out, &mut seq, b"\x03def\x00\x00\x00\x01a\x00\x0c\x21\x00\x06\x00\x00\x00\xfd\x01\x00\x1f\x00\x00");
    proto::frame::write_packet(&mut out, &mut seq, &eof);
    let mut row = vec![value.len() as u8];
    row.extend_from_slice(value);
    proto::frame::write_packet(&mut out, &mut seq, &row);
    proto::frame::write_packet(&mut out, &mut seq, &eof);
    let mut c = Capture::new(1 << 20);
    c.feed(&out);
    c.finish(false).expect("a result set")
}

fn key(text: &str, schema: &str) -> Key {
    Key::new(&KeyParts { user: "u", schema, hostgroup: 0, collation: 45, vars: &[], capabilities: 0, mariadb_caps: 0 }, text.as_bytes())
}

const TTL: Duration = Duration::from_secs(60);

#[test]
fn a_stored_reply_is_served_until_its_table_is_written() {
    let c = cache(1 << 20, 1 << 16);
    let slots = [tables::slot_of(&sql::tables::TableName { schema: None, name: b"t" }, b"d")];
    let k = key("SELECT a FROM t", "d");
    let miss = c.get(k, b"SELECT a FROM t", &slots, TTL).expect_err("empty");
    assert!(c.put(miss, b"SELECT a FROM t", result(b"x")));
    assert_eq!(c.entries(), 1);
    assert!(c.get(k, b"SELECT a FROM t", &slots, TTL).is_ok());
    let mut marks = WriteMarks::new(c.generations.clone());
    marks.mark(slots, false);
    let miss = c.get(k, b"SELECT a FROM t", &slots, TTL).expect_err("invalidated");
    assert_eq!(c.entries(), 0, "the stale entry was dropped");
    assert!(!c.put(miss, b"SELECT a FROM t", result(b"y")), "a write is in progress");
    marks.release();
    let miss = c.get(k, b"SELECT a FROM t", &slots, TTL).expect_err("nothing stored");
    assert!(c.put(miss, b"SELECT a FROM t", result(b"z")));
}

#[test]
fn keys_separate_settings_and_texts_are_compared() {
    let c = cache(1 << 20, 1 << 16);
    let k = key("SELECT 1", "d");
    assert_ne!(k, key("SELECT 1", "e"));
    let vars = [("sql_mode".into(), "'ANSI'".into())];
    let parts = KeyParts { user: "u", schema: "d", hostgroup: 0, collation: 45, vars: &vars, capabilities: 0, mariadb_caps: 0 };
    assert_ne!(k, Key::new(&parts, b"SELECT 1"));
    assert_ne!(k, Key::new(&KeyParts { capabilities: 1 << 24, ..parts }, b"SELECT 1"));
    let miss = c.get(k, b"SELECT 1", &[], TTL).expect_err("empty");
    assert!(c.put(miss, b"SELECT 1", result(b"1")));
    // The same hash with another text (a collision) is no hit.
    assert!(c.get(k, b"SELECT 2", &[], TTL).is_err());
}

#[test]
fn entries_expire() {
    let c = cache(1 << 20, 1 << 16);
    let k = key("SELECT 1", "d");
    let miss = c.get(k, b"SELECT 1", &[], Duration::from_millis(20)).expect_err("empty");
    assert!(c.put(miss, b"SELECT 1", result(b"1")));
    assert!(c.get(k, b"SELECT 1", &[], TTL).is_ok());
    std::thread::sleep(Duration::from_millis(30));
    assert!(c.get(k, b"SELECT 1", &[], TTL).is_err());
    assert_eq!((c.entries(), c.memory_bytes()), (0, 0));
}

#[test]
fn memory_stays_within_the_bound_and_large_replies_are_not_stored() {
    let bound = 1 << 20;
    let c = cache(bound, 2048);
    for i in 0..20_000 {
        let text = format!("SELECT {i}");
        let k = key(&text, "d");
        let miss = c.get(k, text.as_bytes(), &[], TTL).expect_err("new");
        c.put(miss, text.as_bytes(), result(&[b'v'; 200]));
        assert!(c.memory_bytes() <= bound, "{} bytes after {i}", c.memory_bytes());
    }
    assert!(c.entries() > 1000, "the bound is used: {}", c.entries());
    let small = cache(bound, 128);
    let miss = small.get(key("big", "d"), b"big", &[], TTL).expect_err("new");
    assert!(!small.put(miss, b"big", result(&[b'v'; 200])), "larger than max_entry_bytes");
    assert_eq!(small.entries(), 0);
}
