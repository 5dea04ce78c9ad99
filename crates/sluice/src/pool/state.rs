//! ⑤ pool: the session state a backend connection carries, and how to bring a connection in
//! line with a client's state by sending only the differences (one `SET`, plus COM_INIT_DB
//! for the schema). The session keeps its state here after each statement that may change
//! it, from the server's own answer to a read-back (`readback_sql`).

/// Replayable session state: what a client may change without pinning its connection.
/// Compared by value; sessions and connections share it behind an `Arc` so the common case
/// (the connection last served this very state) is a pointer comparison.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct State {
    pub schema: Option<Box<str>>,
    /// The collation id the character set variables come from (the login's, or 0 after
    /// COM_RESET_CONNECTION: the server's global defaults). Variables set since override it.
    pub collation: u16,
    /// Session system variables the client set: (name, SQL literal), sorted by name.
    pub vars: Vec<(Box<str>, Box<str>)>,
    /// User variables: (`@name` as written, SQL literal), sorted.
    pub user_vars: Vec<(Box<str>, Box<str>)>,
}

/// The variables a login collation (or SET NAMES) decides.
const CHARSET_VARS: [&str; 4] = ["character_set_client", "character_set_connection", "character_set_results", "collation_connection"];

impl State {
    pub fn new(schema: Option<&str>, collation: u16) -> State {
        State { schema: schema.map(Into::into), collation, vars: Vec::new(), user_vars: Vec::new() }
    }

    /// The `SET` that turns a connection in state `from` into `self` (schema aside), with
    /// `last_insert_id` appended when given. `None` when nothing differs.
    pub fn set_statement(&self, from: &State, last_insert_id: Option<u64>) -> Option<String> {
        let mut parts: Vec<String> = Vec::new();
        let mut charset_reset = self.collation != from.collation;
        for (name, _) in &from.vars {
            if find(&self.vars, name).is_none() {
                charset_reset |= CHARSET_VARS.contains(&&**name);
                parts.push(format!("{name} = DEFAULT"));
            }
        }
        if charset_reset {
            match self.collation {
                0 => parts
                    .extend(["character_set_client", "character_set_results", "collation_connection"].map(|v| format!("{v} = DEFAULT"))),
                n => parts.extend(["character_set_client", "character_set_results", "collation_connection"].map(|v| format!("{v} = {n}"))),
            }
        }
        for (name, value) in &self.vars {
            let forced = charset_reset && CHARSET_VARS.contains(&&**name);
            if forced || find(&from.vars, name) != Some(&**value) {
                parts.push(format!("{name} = {value}"));
            }
        }
        for (name, _) in &from.user_vars {
            if find(&self.user_vars, name).is_none() {
                parts.push(format!("{name} = NULL"));
            }
        }
        for (name, value) in &self.user_vars {
            if find(&from.user_vars, name) != Some(&**value) {
                parts.push(format!("{name} = {value}"));
            }
        }
        if let Some(id) = last_insert_id {
            parts.push(format!("last_insert_id = {id}"));
        }
        (!parts.is_empty()).then(|| format!("SET {}", parts.join(", ")))
    }

    /// True when turning `from` into `self` means going back to the login character set after
    /// a SET NAMES: only a reset can do that by name (the server may have mapped the login's
    /// collation id, such as MySQL 8's 255, to a default of its own).
    pub fn needs_login_charset(&self, from: &State) -> bool {
        self.collation != 0
            && self.collation == from.collation
            && from.vars.iter().any(|(n, _)| CHARSET_VARS.contains(&&**n) && find(&self.vars, n).is_none())
    }

    /// The literal a session variable was set to, if the client set it.
    pub fn var(&self, name: &str) -> Option<&str> {
        find(&self.vars, name)
    }

    /// Records what a read-back returned (`readback_sql`'s columns, in order).
    pub fn apply_readback(&mut self, sysvars: &[Box<str>], user_vars: &[Box<str>], row: &[Column]) -> Result<(), String> {
        let mut cols = row.iter();
        for name in sysvars {
            let c = cols.next().ok_or("read-back returned too few columns")?;
            upsert(&mut self.vars, name, sysvar_literal(c));
        }
        for name in user_vars {
            let (value, hex, charset, collation) = match (cols.next(), cols.next(), cols.next(), cols.next()) {
                (Some(a), Some(b), Some(c), Some(d)) => (a, b, c, d),
                _ => return Err("read-back returned too few columns".into()),
            };
            match user_var_literal(value, hex, charset, collation) {
                Some(lit) => upsert(&mut self.user_vars, name, lit),
                None => remove(&mut self.user_vars, name),
            }
        }
        Ok(())
    }
}

/// `SELECT` reading back the session values of `sysvars` and, for each user variable, its
/// value (for the type), raw bytes, character set and collation.
pub fn readback_sql(sysvars: &[Box<str>], user_vars: &[Box<str>]) -> Option<String> {
    let mut cols: Vec<String> = sysvars.iter().map(|v| format!("@@session.{v}")).collect();
    for u in user_vars {
        cols.push(format!("{u}, HEX({u}), CHARSET({u}), COLLATION({u})"));
    }
    (!cols.is_empty()).then(|| format!("SELECT {}", cols.join(", ")))
}

/// A column of a read-back row: its protocol type and text value (`None` for NULL).
#[derive(Debug, Clone)]
pub struct Column {
    pub type_id: u8,
    pub value: Option<Vec<u8>>,
}

fn is_numeric_type(t: u8) -> bool {
    // DECIMAL, TINY, SHORT, LONG, FLOAT, DOUBLE, LONGLONG, INT24, NEWDECIMAL
    matches!(t, 0 | 1 | 2 | 3 | 4 | 5 | 8 | 9 | 246)
}

fn is_plain_number(v: &[u8]) -> bool {
    !v.is_empty() && v.iter().all(|b| b.is_ascii_digit() || matches!(b, b'-' | b'+' | b'.' | b'e' | b'E'))
}

/// `bytes` as upper-case hex digits (for `X'…'` literals).
pub(crate) fn hex(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push_str(&format!("{b:02X}"));
    }
    s
}

/// A system variable's value as a literal `SET` accepts: numbers bare, text as a hex
/// literal (no quoting or escaping that sql_mode could change).
fn sysvar_literal(c: &Column) -> Box<str> {
    match &c.value {
        None => "NULL".into(),
        Some(v) if is_numeric_type(c.type_id) && is_plain_number(v) => String::from_utf8_lossy(v).into(),
        Some(v) if v.is_empty() => "''".into(),
        Some(v) => format!("_utf8mb4 X'{}'", hex(v)).into(),
    }
}

/// A user variable's value as a literal of the same type, character set and collation.
/// `None` when the variable is NULL (or unset).
fn user_var_literal(value: &Column, hex_col: &Column, charset: &Column, collation: &Column) -> Option<Box<str>> {
    let v = value.value.as_deref()?;
    let lit = match value.type_id {
        // LONGLONG and NEWDECIMAL print as literals of their own type.
        8 | 246 if is_plain_number(v) => String::from_utf8_lossy(v).into_owned(),
        // A DOUBLE stays one with an exponent.
        5 if is_plain_number(v) => {
            let s = String::from_utf8_lossy(v);
            if s.contains(['e', 'E']) {
                s.into_owned()
            } else {
                format!("{s}e0")
            }
        }
        _ => {
            let raw = String::from_utf8_lossy(hex_col.value.as_deref().unwrap_or_default()).into_owned();
            let cs = charset.value.as_deref().map(String::from_utf8_lossy).unwrap_or_default();
            let coll = collation.value.as_deref().map(String::from_utf8_lossy).unwrap_or_default();
            let ident = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
            if !ident(&cs) || cs == "binary" || !ident(&coll) {
                format!("_binary X'{raw}'")
            } else {
                format!("_{cs} X'{raw}' COLLATE {coll}")
            }
        }
    };
    Some(lit.into())
}

fn find<'a>(list: &'a [(Box<str>, Box<str>)], name: &str) -> Option<&'a str> {
    list.binary_search_by(|(k, _)| (**k).cmp(name)).ok().map(|i| &*list[i].1)
}

fn upsert(list: &mut Vec<(Box<str>, Box<str>)>, name: &str, value: Box<str>) {
    match list.binary_search_by(|(k, _)| (**k).cmp(name)) {
        Ok(i) => list[i].1 = value,
        Err(i) => list.insert(i, (name.into(), value)),
    }
}

fn remove(list: &mut Vec<(Box<str>, Box<str>)>, name: &str) {
    if let Ok(i) = list.binary_search_by(|(k, _)| (**k).cmp(name)) {
        list.remove(i);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn col(t: u8, v: Option<&str>) -> Column {
        Column { type_id: t, value: v.map(|s| s.as_bytes().to_vec()) }
    }

    #[test]
    fn only_differences_are_sent() {
        let base = State::new(Some("app"), 45);
        assert_eq!(base.set_statement(&base, None), None);
        let mut a = base.clone();
        a.vars = vec![("sql_mode".into(), "_utf8mb4 X'414E5349'".into()), ("time_zone".into(), "_utf8mb4 X'2B30303A3030'".into())];
        let mut b = base.clone();
        b.vars = vec![("sql_mode".into(), "_utf8mb4 X'414E5349'".into()), ("wait_timeout".into(), "30".into())];
        assert_eq!(a.set_statement(&b, None).as_deref(), Some("SET wait_timeout = DEFAULT, time_zone = _utf8mb4 X'2B30303A3030'"));
        b.user_vars = vec![("@x".into(), "5".into())];
        a.collation = 8;
        assert_eq!(
            a.set_statement(&b, Some(7)).as_deref(),
            Some(
                "SET wait_timeout = DEFAULT, character_set_client = 8, character_set_results = 8, collation_connection = 8, \
                 time_zone = _utf8mb4 X'2B30303A3030', @x = NULL, last_insert_id = 7"
            )
        );
    }

    #[test]
    fn dropping_set_names_restores_the_login_charset() {
        let login = State::new(None, 45);
        let mut names = login.clone();
        names.vars = vec![("character_set_client".into(), "_utf8mb4 X'6C6174696E31'".into())];
        let back = login.set_statement(&names, None).unwrap_or_default();
        assert!(back.starts_with("SET character_set_client = DEFAULT, character_set_client = 45"), "{back}");
    }

    #[test]
    fn readback_values_become_typed_literals() {
        let mut s = State::default();
        let sysvars: Vec<Box<str>> = vec!["sql_mode".into(), "wait_timeout".into(), "character_set_results".into()];
        let users: Vec<Box<str>> = vec!["@n".into(), "@s".into(), "@d".into(), "@z".into()];
        let row = vec![
            col(253, Some("ANSI")),
            col(8, Some("30")),
            col(253, None),
            col(8, Some("42")),
            col(253, Some("2A")),
            col(253, Some("binary")),
            col(253, Some("binary")),
            col(253, Some("é")),
            col(253, Some("E9")),
            col(253, Some("latin1")),
            col(253, Some("latin1_swedish_ci")),
            col(5, Some("1.5")),
            col(253, Some("")),
            col(253, Some("binary")),
            col(253, Some("binary")),
        ];
        let mut row = row;
        row.extend([col(6, None), col(253, None), col(253, None), col(253, None)]);
        s.apply_readback(&sysvars, &users, &row).unwrap();
        assert_eq!(find(&s.vars, "sql_mode"), Some("_utf8mb4 X'414E5349'"));
        assert_eq!(find(&s.vars, "wait_timeout"), Some("30"));
        assert_eq!(find(&s.vars, "character_set_results"), Some("NULL"));
        assert_eq!(find(&s.user_vars, "@n"), Some("42"));
        assert_eq!(find(&s.user_vars, "@s"), Some("_latin1 X'E9' COLLATE latin1_swedish_ci"));
        assert_eq!(find(&s.user_vars, "@d"), Some("1.5e0"));
        assert_eq!(find(&s.user_vars, "@z"), None);
        assert!(s.apply_readback(&sysvars, &[], &row[..1]).is_err());
        assert_eq!(
            readback_sql(&sysvars[..1], &users[..1]).as_deref(),
            Some("SELECT @@session.sql_mode, @n, HEX(@n), CHARSET(@n), COLLATION(@n)")
        );
    }
}
