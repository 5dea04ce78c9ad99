//! MySQL/MariaDB keywords for the digest (step ③ input): which words are written upper case and
//! how each one spaces and signs what follows. Lookup is a compile-time hash table: no allocation,
//! no per-byte hash chain, no memcmp call (it runs for every word of every statement).
//!
//! The list: every reserved word of MySQL 8.0 and MariaDB 10.11, the common non-reserved keywords
//! (transactions, SHOW, DDL, types, time units) and the functions MySQL's own lexer knows by name
//! (COUNT, SUM, NOW, SUBSTRING, …). Other function names keep the spelling they were written in.

/// A `+` or `-` right after this keyword is a sign (`LIMIT -1`, `WHERE -a`).
pub(crate) const OP: u8 = 1;
/// Written against a following `(` like a function call (`COUNT(*)`, `VARCHAR(?)`).
pub(crate) const FN: u8 = 2;
/// A literal list after it folds to `(?,...)` (IN, VALUES, VALUE).
pub(crate) const FOLD: u8 = 4;
/// Further `, (literals)` rows are folded into the first (VALUES, VALUE).
pub(crate) const ROWS: u8 = 8;
/// A table or index name follows, and its column list keeps a space: `INTO t (a, b)`.
pub(crate) const NAME: u8 = 16;

// Shorthands for the table: R reserved (signs follow), F function-like, N neither.
const R: u8 = OP;
const F: u8 = FN;
const N: u8 = 0;

#[rustfmt::skip]
pub(crate) const KEYWORDS: &[(&str, u8)] = &[
    // MySQL 8.0 and MariaDB 10.11 reserved words.
    ("ACCESSIBLE", R), ("ADD", R), ("ALL", R), ("ALTER", R), ("ANALYZE", R), ("AND", R), ("AS", R), ("ASC", R),
    ("ASENSITIVE", R), ("BEFORE", R), ("BETWEEN", R), ("BIGINT", F), ("BINARY", F), ("BLOB", F), ("BOTH", R), ("BY", R),
    ("CALL", R), ("CASCADE", R), ("CASE", R), ("CHANGE", R), ("CHAR", F), ("CHARACTER", F), ("CHECK", R), ("COLLATE", R),
    ("COLUMN", R), ("CONDITION", R), ("CONSTRAINT", R), ("CONTINUE", R), ("CONVERT", F), ("CREATE", R), ("CROSS", R),
    ("CUBE", R), ("CUME_DIST", F), ("CURRENT_DATE", F), ("CURRENT_ROLE", F), ("CURRENT_TIME", F), ("CURRENT_TIMESTAMP", F),
    ("CURRENT_USER", F), ("CURSOR", R), ("DATABASE", F), ("DATABASES", R), ("DAY_HOUR", R), ("DAY_MICROSECOND", R),
    ("DAY_MINUTE", R), ("DAY_SECOND", R), ("DEC", F), ("DECIMAL", F), ("DECLARE", R), ("DEFAULT", R), ("DELAYED", R),
    ("DELETE", R), ("DELETE_DOMAIN_ID", R), ("DENSE_RANK", F), ("DESC", R), ("DESCRIBE", R), ("DETERMINISTIC", R),
    ("DISTINCT", R), ("DISTINCTROW", R), ("DIV", R), ("DO_DOMAIN_IDS", R), ("DOUBLE", F), ("DROP", R), ("DUAL", R),
    ("EACH", R), ("ELSE", R), ("ELSEIF", R), ("EMPTY", R), ("ENCLOSED", R), ("ESCAPED", R), ("EXCEPT", R), ("EXISTS", R),
    ("EXIT", R), ("EXPLAIN", R), ("FALSE", N), ("FETCH", R), ("FIRST_VALUE", F), ("FLOAT", F), ("FLOAT4", F), ("FLOAT8", F),
    ("FOR", R), ("FORCE", R), ("FOREIGN", R), ("FROM", R), ("FULLTEXT", R), ("FUNCTION", R), ("GENERAL", R),
    ("GENERATED", R), ("GET", R), ("GRANT", R), ("GROUP", R), ("GROUPING", F), ("GROUPS", R), ("HAVING", R),
    ("HIGH_PRIORITY", R), ("HOUR_MICROSECOND", R), ("HOUR_MINUTE", R), ("HOUR_SECOND", R), ("IF", F), ("IGNORE", R),
    ("IGNORE_DOMAIN_IDS", R), ("IGNORE_SERVER_IDS", R), ("IN", R | FOLD), ("INDEX", R | NAME), ("INFILE", R), ("INNER", R),
    ("INOUT", R), ("INSENSITIVE", R), ("INSERT", F | NAME), ("INT", F), ("INT1", F), ("INT2", F), ("INT3", F), ("INT4", F),
    ("INT8", F), ("INTEGER", F), ("INTERSECT", R), ("INTERVAL", R), ("INTO", R | NAME), ("IO_AFTER_GTIDS", R),
    ("IO_BEFORE_GTIDS", R), ("IS", R), ("ITERATE", R), ("JOIN", R), ("JSON_TABLE", F), ("KEY", R | NAME), ("KEYS", R),
    ("KILL", R), ("LAG", F), ("LAST_VALUE", F), ("LATERAL", R), ("LEAD", F), ("LEADING", R), ("LEAVE", R), ("LEFT", F),
    ("LIKE", R), ("LIMIT", R), ("LINEAR", R), ("LINES", R), ("LOAD", R), ("LOCALTIME", F), ("LOCALTIMESTAMP", F),
    ("LOCK", R), ("LONG", R), ("LONGBLOB", F), ("LONGTEXT", F), ("LOOP", R), ("LOW_PRIORITY", R), ("MASTER_BIND", R),
    ("MASTER_HEARTBEAT_PERIOD", R), ("MASTER_SSL_VERIFY_SERVER_CERT", R), ("MATCH", F), ("MAXVALUE", R), ("MEDIUMBLOB", F),
    ("MEDIUMINT", F), ("MEDIUMTEXT", F), ("MIDDLEINT", F), ("MINUTE_MICROSECOND", R), ("MINUTE_SECOND", R), ("MOD", F | OP),
    ("MODIFIES", R), ("NATURAL", R), ("NOT", R), ("NO_WRITE_TO_BINLOG", R), ("NTH_VALUE", F), ("NTILE", F), ("NULL", N),
    ("NUMERIC", F), ("OF", R), ("OFFSET", R), ("ON", R), ("OPTIMIZE", R), ("OPTIMIZER_COSTS", R), ("OPTION", R),
    ("OPTIONALLY", R), ("OR", R), ("ORDER", R), ("OUT", R), ("OUTER", R), ("OUTFILE", R), ("OVER", R),
    ("PAGE_CHECKSUM", R), ("PARSE_VCOL_EXPR", R), ("PARTITION", R), ("PERCENT_RANK", F), ("POSITION", F),
    ("PRECISION", R), ("PRIMARY", R), ("PROCEDURE", R), ("PURGE", R), ("RANGE", R), ("RANK", F), ("READ", R), ("READS", R),
    ("READ_WRITE", R), ("REAL", F), ("RECURSIVE", R), ("REFERENCES", R | NAME), ("REF_SYSTEM_ID", R), ("REGEXP", R),
    ("RELEASE", R), ("RENAME", R), ("REPEAT", F), ("REPLACE", F | NAME), ("REQUIRE", R), ("RESIGNAL", R), ("RESTRICT", R),
    ("RETURN", R), ("RETURNING", R), ("REVOKE", R), ("RIGHT", F), ("RLIKE", R), ("ROW", F), ("ROWS", R), ("ROW_NUMBER", F),
    ("SCHEMA", F), ("SCHEMAS", R), ("SECOND_MICROSECOND", R), ("SELECT", R), ("SENSITIVE", R), ("SEPARATOR", R), ("SET", R),
    ("SHOW", R), ("SIGNAL", R), ("SLOW", R), ("SMALLINT", F), ("SPATIAL", R), ("SPECIFIC", R), ("SQL", R),
    ("SQLEXCEPTION", R), ("SQLSTATE", R), ("SQLWARNING", R), ("SQL_BIG_RESULT", R), ("SQL_CALC_FOUND_ROWS", R),
    ("SQL_SMALL_RESULT", R), ("SSL", R), ("STARTING", R), ("STATS_AUTO_RECALC", R), ("STATS_PERSISTENT", R),
    ("STATS_SAMPLE_PAGES", R), ("STORED", R), ("STRAIGHT_JOIN", R), ("SYSTEM", R), ("TABLE", R | NAME), ("TERMINATED", R),
    ("THEN", R), ("TINYBLOB", F), ("TINYINT", F), ("TINYTEXT", F), ("TO", R), ("TRAILING", R), ("TRIGGER", R), ("TRUE", N),
    ("UNDO", R), ("UNION", R), ("UNIQUE", R | NAME), ("UNLOCK", R), ("UNSIGNED", R), ("UPDATE", R), ("USAGE", R), ("USE", R),
    ("USING", R), ("UTC_DATE", F), ("UTC_TIME", F), ("UTC_TIMESTAMP", F), ("VALUES", R | FOLD | ROWS), ("VARBINARY", F),
    ("VARCHAR", F), ("VARCHARACTER", F), ("VARYING", R), ("VIRTUAL", R), ("WHEN", R), ("WHERE", R), ("WHILE", R),
    ("WINDOW", R), ("WITH", R), ("WRITE", R), ("XOR", R), ("YEAR_MONTH", R), ("ZEROFILL", R),
    // Common non-reserved keywords.
    ("AFTER", N), ("AGAINST", N), ("ALGORITHM", N), ("ANY", N), ("AUTO_INCREMENT", N), ("BEGIN", N), ("BOOL", N),
    ("BOOLEAN", N), ("BTREE", N), ("CACHE", N), ("CASCADED", N), ("CHAIN", N), ("CHECKSUM", N), ("CLOSE", N),
    ("COLUMNS", N), ("COMMENT", N), ("COMMIT", N), ("COMMITTED", N), ("COMPACT", N), ("COMPRESSED", N), ("CONNECTION", N),
    ("CONSISTENT", N), ("DEALLOCATE", N), ("DEFINER", N), ("DIAGNOSTICS", N), ("DISABLE", N), ("DISCARD", N), ("DO", N),
    ("DUPLICATE", N), ("DYNAMIC", N), ("ENABLE", N), ("END", N), ("ENGINE", N), ("ENGINES", N), ("ERRORS", N),
    ("ESCAPE", N), ("EVENT", N), ("EVENTS", N), ("EXECUTE", N), ("EXTENDED", N), ("FIELDS", N), ("FIRST", N), ("FIXED", N),
    ("FLUSH", N), ("FOLLOWING", N), ("FULL", N), ("GLOBAL", N), ("GRANTS", N), ("HANDLER", N), ("HASH", N), ("HELP", N),
    ("HOSTS", N), ("IDENTIFIED", N), ("INDEXES", N), ("INPLACE", N), ("INSTANT", N), ("INVOKER", N), ("ISOLATION", N),
    ("JSON", N), ("LAST", N), ("LESS", N), ("LEVEL", N), ("LOCAL", N), ("LOCKED", N), ("LOGS", N), ("MASTER", N),
    ("MEMORY", N), ("MERGE", N), ("MODE", N), ("MODIFY", N), ("NAMES", N), ("NATIONAL", N), ("NEXT", N), ("NO", N),
    ("NONE", N), ("NOWAIT", N), ("ONLY", N), ("OPEN", N), ("PARTITIONS", N), ("PLUGINS", N), ("PRECEDING", N),
    ("PREPARE", N), ("PRIVILEGES", N), ("PROCESSLIST", N), ("QUERY", N), ("QUICK", N), ("REDUNDANT", N), ("REPAIR", N),
    ("REPEATABLE", N), ("REPLICA", N), ("RESET", N), ("RETURNS", N), ("ROLE", N), ("ROLLBACK", N), ("ROLLUP", N),
    ("ROUTINE", N), ("ROW_FORMAT", N), ("SAVEPOINT", N), ("SECURITY", N), ("SERIAL", N), ("SERIALIZABLE", N),
    ("SESSION", N), ("SHARE", N), ("SIGNED", N), ("SKIP", N), ("SLAVE", N), ("SNAPSHOT", N), ("SOME", N),
    ("SQL_BUFFER_RESULT", N), ("SQL_CACHE", N), ("SQL_NO_CACHE", N), ("START", N), ("STATUS", N), ("STOP", N), ("SUPER", N),
    ("TABLES", N), ("TABLESPACE", N), ("TEMPORARY", N), ("TEMPTABLE", N), ("THAN", N), ("TRANSACTION", N), ("TRIGGERS", N),
    ("UNBOUNDED", N), ("UNCOMMITTED", N), ("UNDEFINED", N), ("UNKNOWN", N), ("UNTIL", N), ("VALUE", OP | FOLD | ROWS),
    ("VARIABLES", N), ("VIEW", NAME), ("WAIT", N), ("WARNINGS", N), ("WITHOUT", N), ("WORK", N), ("XA", N), ("ZONE", N),
    // Types, time units and the functions MySQL's lexer knows by name.
    ("ADDDATE", F), ("AVG", F), ("BIT", F), ("BIT_AND", F), ("BIT_OR", F), ("BIT_XOR", F), ("CAST", F), ("CHARSET", F),
    ("COLLATION", F), ("COUNT", F), ("CURDATE", F), ("CURTIME", F), ("DATE", F), ("DATE_ADD", F), ("DATE_SUB", F),
    ("DATETIME", F), ("DAY", F), ("ENUM", F), ("EXTRACT", F), ("FORMAT", F), ("GROUP_CONCAT", F), ("HOUR", F),
    ("JSON_ARRAYAGG", F), ("JSON_OBJECTAGG", F), ("MAX", F), ("MICROSECOND", F), ("MIN", F), ("MINUTE", F), ("MONTH", F),
    ("NCHAR", F), ("NOW", F), ("PASSWORD", F), ("QUARTER", F), ("ROW_COUNT", F), ("SECOND", F), ("STD", F), ("STDDEV", F),
    ("STDDEV_POP", F), ("STDDEV_SAMP", F), ("SUBDATE", F), ("SUBSTR", F), ("SUBSTRING", F), ("SUM", F), ("SYSDATE", F),
    ("TEXT", F), ("TIME", F), ("TIMESTAMP", F), ("TIMESTAMPADD", F), ("TIMESTAMPDIFF", F), ("TRIM", F), ("TRUNCATE", F),
    ("USER", F), ("VAR_POP", F), ("VAR_SAMP", F), ("VARIANCE", F), ("WEEK", F), ("YEAR", F),
];

/// Longest keyword: longer words are never looked up.
const MAX_LEN: usize = max_len();
const SIZE: usize = 2048;
const MASK: usize = SIZE - 1;

/// Open addressing, slot = index into KEYWORDS + 1 (0 is empty). At most half full, so probes
/// stay short and always end. (Small: tried 16-byte slots holding the first chunk, slower.)
static TABLE: [u16; SIZE] = build();
/// Each keyword as four little-endian u64 chunks, zero-padded.
static CHUNKS: [[u64; 4]; KEYWORDS.len()] = all_chunks();
/// KEYWORDS' flags on their own: a short keyword's lookup never reads its 24-byte entry.
static FLAGS: [u8; KEYWORDS.len()] = {
    let mut f = [0u8; KEYWORDS.len()];
    let mut i = 0;
    while i < KEYWORDS.len() {
        f[i] = KEYWORDS[i].1;
        i += 1;
    }
    f
};

/// A keyword found in the text.
#[derive(Clone, Copy)]
pub(crate) struct Keyword {
    pub flags: u8,
    /// Its first 8 bytes upper-cased, little-endian: the whole keyword when `len` ≤ 8.
    pub head: u64,
    pub len: usize,
    index: usize,
}

impl Keyword {
    /// The upper-case text.
    pub(crate) fn text(self) -> &'static str {
        KEYWORDS.get(self.index).map_or("", |k| k.0)
    }
}

const fn max_len() -> usize {
    let mut m = 0;
    let mut i = 0;
    while i < KEYWORDS.len() {
        if KEYWORDS[i].0.len() > m {
            m = KEYWORDS[i].0.len();
        }
        i += 1;
    }
    m
}

const fn chunks_of(k: &[u8]) -> [u64; 4] {
    let mut c = [0u64; 4];
    let mut i = 0;
    while i < k.len() {
        c[i / 8] |= (k[i] as u64) << (8 * (i % 8));
        i += 1;
    }
    c
}

const fn all_chunks() -> [[u64; 4]; KEYWORDS.len()] {
    let mut t = [[0u64; 4]; KEYWORDS.len()];
    let mut i = 0;
    while i < KEYWORDS.len() {
        t[i] = chunks_of(KEYWORDS[i].0.as_bytes());
        i += 1;
    }
    t
}

/// What chunks 1–3 add to the hash (0 for words of up to 8 bytes, which skip computing it).
#[inline]
const fn tail_mix(c1: u64, c2: u64, c3: u64) -> u64 {
    c1.wrapping_mul(0xC2B2_AE3D_27D4_EB4F) ^ c2.wrapping_mul(0x1656_67B1_9E37_79F9) ^ c3.wrapping_mul(0x27D4_EB2F_1656_67C5)
}

/// Multiplicative hash: the top bits of the product depend on every bit of the key.
#[inline]
const fn hash(head: u64, tail: u64, len: usize) -> usize {
    (((head ^ tail ^ len as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)) >> 53) as usize & MASK
}

// Checked when the crate compiles.
const _: () = assert!(KEYWORDS.len() * 2 < SIZE, "keyword table more than half full");
const _: () = assert!(MAX_LEN <= 32, "keyword longer than four chunks");

const fn build() -> [u16; SIZE] {
    let all = all_chunks();
    let mut table = [0u16; SIZE];
    let mut i = 0;
    while i < KEYWORDS.len() {
        let k = KEYWORDS[i].0.as_bytes();
        let mut j = 0;
        while j < k.len() {
            assert!(!k[j].is_ascii_lowercase() && k[j] < 0x80, "keywords are written upper-case ASCII");
            j += 1;
        }
        let c = &all[i];
        let mut slot = hash(c[0], tail_mix(c[1], c[2], c[3]), k.len());
        while table[slot] != 0 {
            let o = &all[table[slot] as usize - 1];
            assert!(!(o[0] == c[0] && o[1] == c[1] && o[2] == c[2] && o[3] == c[3]), "duplicate keyword");
            slot = (slot + 1) & MASK;
        }
        table[slot] = (i + 1) as u16;
        i += 1;
    }
    table
}

const ONES: u64 = 0x0101_0101_0101_0101;
const HIGH: u64 = 0x8080_8080_8080_8080;

/// Upper-cases the ASCII letters among 8 bytes that are all below 0x80 (SWAR).
#[inline]
fn upper8(x: u64) -> u64 {
    let ge_a = x + (0x80 - u64::from(b'a')) * ONES;
    let gt_z = x + (0x80 - u64::from(b'z') - 1) * ONES;
    x - ((ge_a & !gt_z & HIGH) >> 2)
}

fn le(b: &[u8]) -> u64 {
    match b.first_chunk::<8>() {
        Some(c) => u64::from_le_bytes(*c),
        None => 0,
    }
}

/// Bytes `off..off + 8` of the word `sql[start..end]` as a little-endian u64, zero past its
/// end (0 for a range outside `sql`). Loads straight from the text (copying into a buffer and reading it back stalls on
/// store forwarding), masking off what follows the word when the text goes on that far.
#[inline]
pub(crate) fn load(sql: &[u8], start: usize, end: usize, off: usize) -> u64 {
    let from = start + off;
    if from >= end || end > sql.len() {
        return 0;
    }
    let n = end - from;
    // n ≥ 1: shifts 0..=56.
    let mask = u64::MAX >> (8 * (8 - n.min(8)));
    if let Some(b) = sql.get(from..from + 8) {
        return le(b) & mask;
    }
    // Near the end of the text: the last 8 bytes of the word, shifted down.
    if end - start >= 8 {
        return le(&sql[end - 8..end]) >> (8 * (8 - n.min(8)));
    }
    let mut x = 0;
    for (i, &b) in sql[from..end].iter().enumerate() {
        x |= u64::from(b) << (8 * i);
    }
    x
}

/// The keyword `word` spells (any case): its upper-case text and flags.
#[cfg(test)]
pub(crate) fn lookup(word: &[u8]) -> Option<(&'static str, u8)> {
    lookup_in(word, 0, word.len()).map(|k| (k.text(), k.flags))
}

/// The keyword `sql[start..end]` spells, in any case.
#[inline]
pub(crate) fn lookup_in(sql: &[u8], start: usize, end: usize) -> Option<Keyword> {
    let len = end.checked_sub(start)?;
    if !(2..=MAX_LEN).contains(&len) || end > sql.len() {
        return None;
    }
    let raw0 = load(sql, start, end, 0);
    if len <= 8 {
        // Most keywords: one chunk, one slot read per probe.
        if raw0 & HIGH != 0 {
            return None;
        }
        let head = upper8(raw0);
        let mut slot = hash(head, 0, len);
        loop {
            let e = usize::from(TABLE[slot]).checked_sub(1)?;
            let k = CHUNKS.get(e)?;
            // Same zero-padded first 8 bytes and nothing after: the same word (words hold no
            // zero bytes).
            if k[0] == head && k[1] == 0 {
                return Some(Keyword { flags: *FLAGS.get(e)?, head, len, index: e });
            }
            slot = (slot + 1) & MASK;
        }
    }
    let raw = [raw0, load(sql, start, end, 8), load(sql, start, end, 16), load(sql, start, end, 24)];
    // Keywords are ASCII.
    if (raw[0] | raw[1] | raw[2] | raw[3]) & HIGH != 0 {
        return None;
    }
    let c = [upper8(raw[0]), upper8(raw[1]), upper8(raw[2]), upper8(raw[3])];
    let mut slot = hash(c[0], tail_mix(c[1], c[2], c[3]), len);
    loop {
        let e = usize::from(TABLE[slot]).checked_sub(1)?;
        let k = CHUNKS.get(e)?;
        // Scalar compares: an array `==` was vectorized into 16-byte reloads of `c` that stall
        // on store forwarding.
        if (k[0] ^ c[0]) | (k[1] ^ c[1]) | (k[2] ^ c[2]) | (k[3] ^ c[3]) == 0 {
            return Some(Keyword { flags: *FLAGS.get(e)?, head: c[0], len, index: e });
        }
        slot = (slot + 1) & MASK;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_keyword_is_found_in_any_case() {
        for &(k, flags) in KEYWORDS {
            assert_eq!(lookup(k.as_bytes()), Some((k, flags)));
            assert_eq!(lookup(k.to_ascii_lowercase().as_bytes()), Some((k, flags)));
        }
    }

    #[test]
    fn other_words_are_not() {
        for w in
            ["a", "t", "id", "sbtest1", "SELECTS", "connection_id", "length", "coalesce", "name", "é", "MASTER_SSL_VERIFY_SERVER_CERTS"]
        {
            assert_eq!(lookup(w.as_bytes()), None, "{w}");
        }
        assert_eq!(lookup(&[b'S', b'E', b'L', b'E', b'C', b'T' | 0x80]), None);
        // Every prefix (so every length through the chunk boundaries), against a plain
        // comparison, both at the end of the text and followed by more text.
        for &(k, _) in KEYWORDS {
            for cut in 1..=k.len() {
                let w = k[..cut].to_ascii_lowercase();
                let plain = KEYWORDS.iter().find(|(o, _)| o.eq_ignore_ascii_case(&w)).copied();
                assert_eq!(lookup(w.as_bytes()), plain, "{w}");
                let text = format!("x {w} yyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyy");
                assert_eq!(lookup_in(text.as_bytes(), 2, 2 + cut).map(|k| (k.text(), k.flags)), plain, "{w} in text");
            }
        }
    }
}
