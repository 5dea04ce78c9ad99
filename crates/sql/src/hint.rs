//! Routing hints in a statement's first comment (step ④ route, router 2):
//! `/* sluice:route=writer */`, `/* sluice:route=reader */`, `/* sluice:route=hostgroup:N */`,
//! and ProxySQL's annotation `/* hostgroup=N */`. Items may share the comment with others,
//! separated by spaces, `,` or `;` (`/* app:42 hostgroup=2 */`).
//!
//! The first comment is the first one that is not code: executable comments (`/*! … */`) are
//! code to the server and optimizer hints (`/*+ … */`) are the server's, so neither counts
//! (as the digest's `first_comment`).

use crate::lexer::{Kind, Lexer};

/// Where a hint sends a statement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hint {
    /// The writer of the session's replication hostgroups.
    Writer,
    /// A reader of the session's replication hostgroups.
    Reader,
    Hostgroup(u32),
}

/// The routing hint of `sql`'s first comment, if it has one.
pub fn routing_hint(sql: &[u8]) -> Option<Hint> {
    // Most statements have no comment at all: settled without the lexer.
    if !memchr::memchr3_iter(b'/', b'#', b'-', sql).any(|i| sql[i] != b'-' || sql.get(i + 1) == Some(&b'-')) {
        return None;
    }
    let comment = Lexer::new(sql).find(|t| {
        let text = t.text(sql);
        t.kind == Kind::Comment && !text.starts_with(b"/*+")
    })?;
    let text = comment.text(sql);
    let inner = if let Some(body) = text.strip_prefix(b"/*") {
        body.strip_suffix(b"*/").unwrap_or(body)
    } else if let Some(body) = text.strip_prefix(b"--") {
        body
    } else {
        text.strip_prefix(b"#").unwrap_or(text)
    };
    inner.split(|b| b.is_ascii_whitespace() || *b == b',' || *b == b';').find_map(item)
}

fn item(item: &[u8]) -> Option<Hint> {
    let (key, value) = item.iter().position(|&b| b == b'=').map(|i| (&item[..i], &item[i + 1..]))?;
    let number = |v: &[u8]| std::str::from_utf8(v).ok()?.parse::<u32>().ok();
    if key.eq_ignore_ascii_case(b"hostgroup") {
        return number(value).map(Hint::Hostgroup);
    }
    if !key.eq_ignore_ascii_case(b"sluice:route") {
        return None;
    }
    if value.eq_ignore_ascii_case(b"writer") {
        Some(Hint::Writer)
    } else if value.eq_ignore_ascii_case(b"reader") {
        Some(Hint::Reader)
    } else {
        let n = value.get(..10).filter(|p| p.eq_ignore_ascii_case(b"hostgroup:")).and(value.get(10..))?;
        number(n).map(Hint::Hostgroup)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(sql: &str) -> Option<Hint> {
        routing_hint(sql.as_bytes())
    }

    #[test]
    fn hints_in_the_first_comment() {
        assert_eq!(h("SELECT 1 /* sluice:route=writer */"), Some(Hint::Writer));
        assert_eq!(h("/* sluice:route=READER */ SELECT 1"), Some(Hint::Reader));
        assert_eq!(h("SELECT 1 /*sluice:route=hostgroup:7*/"), Some(Hint::Hostgroup(7)));
        assert_eq!(h("SELECT 1 /* hostgroup=2 */"), Some(Hint::Hostgroup(2)));
        assert_eq!(h("SELECT 1 /* app:42, hostgroup=3; x=1 */"), Some(Hint::Hostgroup(3)));
        assert_eq!(h("SELECT 1 -- sluice:route=writer\n"), Some(Hint::Writer));
        assert_eq!(h("SELECT 1 # hostgroup=4"), Some(Hint::Hostgroup(4)));
        // Executable comments are code and optimizer hints the server's: the next one counts.
        assert_eq!(h("SELECT /*! STRAIGHT_JOIN */ /*+ BKA(t) */ 1 /* hostgroup=5 */"), Some(Hint::Hostgroup(5)));
    }

    #[test]
    fn no_hint() {
        for sql in [
            "SELECT 1",
            "SELECT 'sluice:route=writer'",
            "SELECT 1 /* app */ /* hostgroup=2 */",
            "SELECT 1 /* hostgroup=x */",
            "SELECT 1 /* hostgroup=-1 */",
            "SELECT 1 /* sluice:route=primary */",
            "SELECT 1 /* sluice:route=hostgroup: */",
            "SELECT 10/2",
            "SELECT 1 /* unterminated hostgroup=2",
        ] {
            let expected = if sql.ends_with("hostgroup=2") { Some(Hint::Hostgroup(2)) } else { None };
            assert_eq!(h(sql), expected, "{sql}");
        }
    }
}
