//! The `inline` sharding algorithm's expressions (docs/sharding.md), apart from `shard` so that
//! `config` can check them without a module cycle: ShardingSphere-style templates such as
//! `ds_${user_id % 2}` and `t_order_${user_id / 2 % 2}`, whose rendered names pick a node and a
//! physical table. Parsed and checked once, at configuration load: the `${…}` expression is
//! integer arithmetic on the sharding column, and each value it gives is mapped to a node or a
//! table by matching the configured names against the template, so a statement evaluates the
//! expression and looks the value up, with no allocation and no text rendered.

/// The physical table names of `table` with `tables_per_node` tables on each node: its own
/// name, or `table_0` … `table_{n-1}`.
pub fn physical_names(table: &str, tables_per_node: usize) -> Vec<String> {
    match tables_per_node {
        0 | 1 => vec![table.to_string()],
        n => (0..n).map(|i| format!("{table}_{i}")).collect(),
    }
}

/// A parse or load problem, located in the template (a character offset).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExprError {
    /// Where in the template, when the problem has a place.
    pub at: Option<usize>,
    pub message: String,
}

impl std::fmt::Display for ExprError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.at {
            Some(at) => write!(f, "at character {at}: {}", self.message),
            None => f.write_str(&self.message),
        }
    }
}

/// Integer arithmetic on the sharding column.
#[derive(Debug, Clone, PartialEq)]
pub enum Expr {
    Lit(i128),
    Column,
    Neg(Box<Expr>),
    Bin(Op, Box<Expr>, Box<Expr>),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Add,
    Sub,
    Mul,
    /// Euclidean division: `a == (a / b) * b + a % b` with `a % b` never negative.
    Div,
    /// Euclidean remainder: never negative.
    Rem,
}

/// Deeper nesting is refused at load: evaluation recurses.
const MAX_DEPTH: usize = 64;

/// A longer expression is refused at load: a chain of operators is a deep tree too.
const MAX_EXPRESSION_BYTES: usize = 512;

impl Expr {
    /// `Err` names what failed: a division by zero, an overflow.
    pub fn eval(&self, column: i128) -> Result<i128, &'static str> {
        Ok(match self {
            Expr::Lit(n) => *n,
            Expr::Column => column,
            Expr::Neg(e) => e.eval(column)?.checked_neg().ok_or("overflow")?,
            Expr::Bin(op, a, b) => {
                let (a, b) = (a.eval(column)?, b.eval(column)?);
                match op {
                    Op::Add => a.checked_add(b).ok_or("overflow")?,
                    Op::Sub => a.checked_sub(b).ok_or("overflow")?,
                    Op::Mul => a.checked_mul(b).ok_or("overflow")?,
                    Op::Div if b == 0 => return Err("division by zero"),
                    Op::Rem if b == 0 => return Err("division by zero"),
                    Op::Div => a.checked_div_euclid(b).ok_or("overflow")?,
                    Op::Rem => a.checked_rem_euclid(b).ok_or("overflow")?,
                }
            }
        })
    }

    /// The values it can give, when bounded whatever the column holds (`user_id % 4` gives
    /// 0..=3); `None` when unbounded or unknown.
    pub fn bounds(&self) -> Option<(i128, i128)> {
        match self {
            Expr::Lit(n) => Some((*n, *n)),
            Expr::Column => None,
            Expr::Neg(e) => e.bounds().and_then(|(lo, hi)| Some((hi.checked_neg()?, lo.checked_neg()?))),
            Expr::Bin(op, a, b) => {
                // `x % n` is in 0..|n| whatever x is.
                if let (Op::Rem, Expr::Lit(n)) = (op, b.as_ref()) {
                    let m = n.checked_abs()?.checked_sub(1)?;
                    return match a.bounds() {
                        Some((lo, hi)) if lo >= 0 && hi <= m => Some((lo, hi)),
                        _ => Some((0, m)),
                    };
                }
                let ((alo, ahi), (blo, bhi)) = (a.bounds()?, b.bounds()?);
                match op {
                    Op::Add => Some((alo.checked_add(blo)?, ahi.checked_add(bhi)?)),
                    Op::Sub => Some((alo.checked_sub(bhi)?, ahi.checked_sub(blo)?)),
                    Op::Mul | Op::Div => {
                        // Division by a range holding 0 is not bounded here.
                        if *op == Op::Div && blo <= 0 && bhi >= 0 {
                            return None;
                        }
                        let f = |x: i128, y: i128| if *op == Op::Mul { x.checked_mul(y) } else { x.checked_div_euclid(y) };
                        let v = [f(alo, blo)?, f(alo, bhi)?, f(ahi, blo)?, f(ahi, bhi)?];
                        Some((*v.iter().min()?, *v.iter().max()?))
                    }
                    Op::Rem => None,
                }
            }
        }
    }
}

/// A parsed template: `prefix${expr}suffix`, or a constant name without `${…}`.
#[derive(Debug, Clone, PartialEq)]
pub struct Template {
    pub prefix: String,
    pub expr: Option<Expr>,
    pub suffix: String,
}

impl Template {
    /// Parses `text`, whose one `${…}` (or `$->{…}`, ShardingSphere's Spring form) may name
    /// only `column` (case-insensitive).
    pub fn parse(text: &str, column: &str) -> Result<Template, ExprError> {
        let opening = |t: &str| match (t.find("${"), t.find("$->{")) {
            (Some(a), Some(b)) if b < a => Some((b, 4)),
            (Some(a), _) => Some((a, 2)),
            (None, Some(b)) => Some((b, 4)),
            (None, None) => None,
        };
        let Some((open, opener)) = opening(text) else {
            if text.is_empty() {
                return Err(ExprError { at: None, message: "must not be empty".into() });
            }
            if let Some(at) = text.find(['$', '{', '}']) {
                return Err(ExprError { at: Some(at), message: format!("`{}` outside a `${{…}}`", &text[at..at + 1]) });
            }
            return Ok(Template { prefix: text.to_string(), expr: None, suffix: String::new() });
        };
        let body_start = open + opener;
        let close = text[body_start..]
            .find('}')
            .map(|i| body_start + i)
            .ok_or_else(|| ExprError { at: Some(open), message: "`${` without its closing `}`".into() })?;
        // Bounded so that evaluating (which recurses) stays shallow.
        if close - body_start > MAX_EXPRESSION_BYTES {
            return Err(ExprError { at: Some(body_start), message: format!("longer than {MAX_EXPRESSION_BYTES} characters") });
        }
        let (prefix, suffix) = (&text[..open], &text[close + 1..]);
        if let Some((at, _)) = opening(suffix) {
            return Err(ExprError { at: Some(close + 1 + at), message: "only one `${…}` is supported".into() });
        }
        for (base, part) in [(0, prefix), (close + 1, suffix)] {
            if let Some(at) = part.find(['$', '{', '}']) {
                return Err(ExprError { at: Some(base + at), message: format!("`{}` outside a `${{…}}`", &part[at..at + 1]) });
            }
        }
        let mut p = Parser { text: &text[..close], pos: body_start, column, depth: 0 };
        let expr = p.expr()?;
        p.skip_spaces();
        if p.pos < close {
            let c = text[p.pos..].chars().next().unwrap_or(' ');
            return Err(p.error(format!("unexpected `{c}`: expected an operator (+ - * / %) or the end of the expression")));
        }
        Ok(Template { prefix: prefix.to_string(), expr: Some(expr), suffix: suffix.to_string() })
    }

    /// The value `name` renders from (`ds_3` from `ds_${…}` is 3), `Some(None)` for a constant
    /// template equal to `name`, `None` when `name` is not of this template's form. Only the
    /// canonical decimal text of an integer counts (`ds_03` is no value).
    pub fn value_of(&self, name: &str) -> Option<Option<i128>> {
        let Some(_) = &self.expr else { return (name == self.prefix).then_some(None) };
        let middle = name.strip_prefix(self.prefix.as_str())?.strip_suffix(self.suffix.as_str())?;
        let v: i128 = middle.parse().ok()?;
        (v.to_string() == middle).then_some(Some(v))
    }

    /// The name `value` renders (for messages).
    pub fn render(&self, value: i128) -> String {
        match &self.expr {
            Some(_) => format!("{}{value}{}", self.prefix, self.suffix),
            None => self.prefix.clone(),
        }
    }
}

/// A template compiled against the names it may render: node databases or physical tables.
#[derive(Debug, Clone, PartialEq)]
pub struct Picker {
    pub source: String,
    pub template: Template,
    /// (value, index) sorted by value; a constant template has one entry with value 0.
    map: Vec<(i128, usize)>,
}

impl Picker {
    /// `names[i]` is what index `i` is called. A value the expression can give (when its
    /// bounds are known) that names none of them is an error here, at load.
    pub fn compile(source: &str, column: &str, names: &[String], what: &str) -> Result<Picker, ExprError> {
        let template = Template::parse(source, column)?;
        let mut map: Vec<(i128, usize)> = Vec::new();
        for (i, n) in names.iter().enumerate() {
            if let Some(v) = template.value_of(n) {
                let v = v.unwrap_or(0);
                if let Some(&(_, j)) = map.iter().find(|(w, _)| *w == v) {
                    let message = format!("`{}` names two {what}s ({} and {i})", n, j);
                    return Err(ExprError { at: None, message });
                }
                map.push((v, i));
            }
        }
        map.sort_unstable();
        let picker = Picker { source: source.to_string(), template, map };
        match &picker.template.expr {
            None if picker.map.is_empty() => {
                return Err(ExprError { at: None, message: format!("`{source}` is no {what} ({})", names.join(", ")) });
            }
            None => {}
            Some(e) => {
                if picker.map.is_empty() {
                    return Err(ExprError { at: None, message: format!("renders no {what} of {}", names.join(", ")) });
                }
                if let Some((lo, hi)) = e.bounds() {
                    // Among any len + 1 values one names nothing: no need to look further.
                    let missing = (lo..=hi).take(picker.map.len() + 1).find(|v| picker.lookup(*v).is_none());
                    if let Some(v) = missing {
                        let message =
                            format!("gives values {lo} to {hi}, and `{}` is no {what} ({})", picker.template.render(v), names.join(", "));
                        return Err(ExprError { at: None, message });
                    }
                }
            }
        }
        Ok(picker)
    }

    fn lookup(&self, v: i128) -> Option<usize> {
        self.map.binary_search_by_key(&v, |&(w, _)| w).ok().map(|i| self.map[i].1)
    }

    /// The index the key's value names; `Err` says why there is none.
    pub fn pick(&self, key: i128) -> Result<usize, PickError> {
        let v = match &self.template.expr {
            None => return self.map.first().map(|&(_, i)| i).ok_or(PickError::Nothing(0)),
            Some(e) => e.eval(key).map_err(PickError::Eval)?,
        };
        self.lookup(v).ok_or(PickError::Nothing(v))
    }
}

/// Why a key picks nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PickError {
    Eval(&'static str),
    /// The rendered value names no configured node or table.
    Nothing(i128),
}

struct Parser<'a> {
    /// The template up to the closing `}`.
    text: &'a str,
    pos: usize,
    column: &'a str,
    depth: usize,
}

impl Parser<'_> {
    fn error(&self, message: impl Into<String>) -> ExprError {
        ExprError { at: Some(self.pos), message: message.into() }
    }

    fn skip_spaces(&mut self) {
        while self.text.as_bytes().get(self.pos).is_some_and(u8::is_ascii_whitespace) {
            self.pos += 1;
        }
    }

    fn peek(&mut self) -> Option<u8> {
        self.skip_spaces();
        self.text.as_bytes().get(self.pos).copied()
    }

    /// sum := term (('+' | '-') term)*
    fn expr(&mut self) -> Result<Expr, ExprError> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(self.error(format!("nested more than {MAX_DEPTH} deep")));
        }
        let mut left = self.term()?;
        while let Some(c @ (b'+' | b'-')) = self.peek() {
            self.pos += 1;
            let right = self.term()?;
            left = Expr::Bin(if c == b'+' { Op::Add } else { Op::Sub }, Box::new(left), Box::new(right));
        }
        self.depth -= 1;
        Ok(left)
    }

    /// term := unary (('*' | '/' | '%') unary)*
    fn term(&mut self) -> Result<Expr, ExprError> {
        let mut left = self.unary()?;
        while let Some(c @ (b'*' | b'/' | b'%')) = self.peek() {
            let at = self.pos;
            self.pos += 1;
            let right = self.unary()?;
            let op = match c {
                b'*' => Op::Mul,
                b'/' => Op::Div,
                _ => Op::Rem,
            };
            if op != Op::Mul && right.bounds() == Some((0, 0)) {
                return Err(ExprError { at: Some(at), message: "division by zero".into() });
            }
            left = Expr::Bin(op, Box::new(left), Box::new(right));
        }
        Ok(left)
    }

    /// unary := '-' unary | atom
    fn unary(&mut self) -> Result<Expr, ExprError> {
        if self.peek() == Some(b'-') {
            self.pos += 1;
            self.depth += 1;
            if self.depth > MAX_DEPTH {
                return Err(self.error(format!("nested more than {MAX_DEPTH} deep")));
            }
            let inner = self.unary()?;
            self.depth -= 1;
            return Ok(match inner {
                Expr::Lit(n) => Expr::Lit(-n),
                e => Expr::Neg(Box::new(e)),
            });
        }
        self.atom()
    }

    /// atom := integer | column | '(' sum ')'
    fn atom(&mut self) -> Result<Expr, ExprError> {
        match self.peek() {
            None => Err(self.error("expected a number, the sharding column or `(`")),
            Some(b'(') => {
                self.pos += 1;
                let e = self.expr()?;
                if self.peek() != Some(b')') {
                    return Err(self.error("expected `)`"));
                }
                self.pos += 1;
                Ok(e)
            }
            Some(c) if c.is_ascii_digit() => {
                let start = self.pos;
                let bytes = self.text.as_bytes();
                while bytes.get(self.pos).is_some_and(u8::is_ascii_digit) {
                    self.pos += 1;
                }
                let digits = &self.text[start..self.pos];
                let n: i64 = digits.parse().map_err(|_| ExprError { at: Some(start), message: format!("`{digits}` is too large") })?;
                Ok(Expr::Lit(i128::from(n)))
            }
            Some(c) if c.is_ascii_alphabetic() || c == b'_' => {
                let start = self.pos;
                let bytes = self.text.as_bytes();
                while bytes.get(self.pos).is_some_and(|b| b.is_ascii_alphanumeric() || *b == b'_') {
                    self.pos += 1;
                }
                let word = &self.text[start..self.pos];
                if word.eq_ignore_ascii_case(self.column) {
                    Ok(Expr::Column)
                } else {
                    Err(ExprError {
                        at: Some(start),
                        message: format!("unknown column `{word}`: only the sharding column `{}` may appear", self.column),
                    })
                }
            }
            Some(_) => {
                let c = self.text[self.pos..].chars().next().unwrap_or(' ');
                Err(self.error(format!("unexpected `{c}`: expected a number, the sharding column or `(`")))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    fn eval(src: &str, k: i128) -> Result<i128, &'static str> {
        let t = Template::parse(&format!("${{{src}}}"), "user_id").unwrap();
        t.expr.unwrap().eval(k)
    }

    #[test]
    fn arithmetic_follows_precedence_and_is_euclidean() {
        assert_eq!(eval("user_id % 4", 7), Ok(3));
        assert_eq!(eval("user_id % 4", -1), Ok(3), "never negative");
        assert_eq!(eval("user_id / 2 % 2", 6), Ok(1));
        assert_eq!(eval("user_id % 4 / 2", 3), Ok(1));
        assert_eq!(eval("-7 / 2", 0), Ok(-4), "Euclidean: -7 = -4 * 2 + 1");
        assert_eq!(eval("1 + 2 * 3 - (4 - 1)", 0), Ok(4));
        assert_eq!(eval(" ( USER_ID + 1 ) * 2 ", 5), Ok(12), "case and spaces");
        let spring = Template::parse("ds_$->{user_id % 2}_x", "user_id").unwrap();
        assert_eq!((spring.prefix.as_str(), spring.suffix.as_str(), spring.value_of("ds_1_x")), ("ds_", "_x", Some(Some(1))));
        assert_eq!(eval("10 / (user_id - 3)", 3), Err("division by zero"));
        assert_eq!(eval("user_id * user_id", i128::MAX), Err("overflow"));
    }

    #[test]
    fn bad_expressions_are_located() {
        let err = |src: &str| Template::parse(src, "user_id").unwrap_err();
        assert_eq!(
            err("ds_${order_id % 2}"),
            ExprError { at: Some(5), message: "unknown column `order_id`: only the sharding column `user_id` may appear".into() }
        );
        assert_eq!(err("ds_${user_id % 0}").message, "division by zero");
        assert_eq!(err("ds_${user_id % 0}").at, Some(13));
        assert_eq!(err("ds_${user_id / (1 - 1)}").message, "division by zero");
        assert_eq!(err("ds_${user_id %}").at, Some(14));
        assert!(err("ds_${user_id % 2").message.contains("without its closing"));
        assert!(err("ds_${(user_id % 2}").message.contains("expected `)`"));
        assert!(err("ds_${user_id 2}").message.contains("expected an operator"));
        assert!(err("ds_${user_id % 2}_${user_id}").message.contains("only one"));
        assert!(err("ds_${user_id ^ 2}").message.contains("unexpected `^`"));
        assert!(err("ds_}").message.contains("outside"));
        assert!(err(&format!("${{{}user_id{}}}", "(".repeat(100), ")".repeat(100))).message.contains("nested"));
        assert!(err(&format!("${{user_id{}}}", "+1".repeat(300))).message.contains("longer than 512"));
    }

    #[test]
    fn pickers_map_values_to_names_and_check_what_they_can() {
        let nodes = names(&["ds_0", "ds_1", "ds_2", "ds_3"]);
        let p = Picker::compile("ds_${user_id % 4}", "user_id", &nodes, "node").unwrap();
        assert_eq!((p.pick(6), p.pick(-1)), (Ok(2), Ok(3)));
        let p = Picker::compile("ds_${user_id % 4 / 2 + 2}", "user_id", &nodes, "node").unwrap();
        assert_eq!((p.pick(0), p.pick(3)), (Ok(2), Ok(3)));
        // Bounded and too wide: refused at load, naming the first missing node.
        let e = Picker::compile("ds_${user_id % 5}", "user_id", &nodes, "node").unwrap_err();
        assert_eq!(e.message, "gives values 0 to 4, and `ds_4` is no node (ds_0, ds_1, ds_2, ds_3)");
        let e = Picker::compile("db_${user_id % 2}", "user_id", &nodes, "node").unwrap_err();
        assert!(e.message.contains("renders no node"), "{e}");
        // Unbounded: checked per key.
        let p = Picker::compile("ds_${user_id + 1}", "user_id", &nodes, "node").unwrap();
        assert_eq!((p.pick(2), p.pick(3)), (Ok(3), Err(PickError::Nothing(4))));
        assert_eq!(p.template.render(4), "ds_4");
        // A constant template; `ds_03` is not the value 3.
        let p = Picker::compile("ds_2", "user_id", &nodes, "node").unwrap();
        assert_eq!(p.pick(99), Ok(2));
        assert_eq!(Template::parse("ds_${user_id}", "user_id").unwrap().value_of("ds_03"), None);
        let e = Picker::compile("ds_${user_id % 2}", "user_id", &names(&["ds_0", "ds_0"]), "node").unwrap_err();
        assert!(e.message.contains("names two nodes"), "{e}");
    }
}
