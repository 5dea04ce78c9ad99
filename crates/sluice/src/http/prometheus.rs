//! Beside the data path: a writer for the Prometheus text exposition format 0.0.4 (`/metrics`).
//!
//! ```
//! use sluice::http::prometheus::{Exposition, Kind};
//! let mut x = Exposition::new();
//! x.family("sluice_queries_total", "Statements run.", Kind::Counter);
//! x.sample("", &[("hostgroup", "0")], 42.0);
//! x.family("sluice_query_seconds", "Statement latency.", Kind::Summary);
//! x.summary(&[], &[(0.5, 0.0015), (0.99, 0.02)], 3.5, 42);
//! assert!(x.finish().starts_with("# HELP sluice_queries_total Statements run.\n"));
//! ```
//!
//! Names are sanitized rather than refused (a bad character becomes `_`), so a scrape never
//! fails over a name; each family's HELP and TYPE are written once with all its samples
//! grouped beneath, whatever order the samples came in.

use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt::Write;

/// The `Content-Type` of a text exposition.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// A metric family's TYPE.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
    Histogram,
    Summary,
    Untyped,
}

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
            Kind::Summary => "summary",
            Kind::Untyped => "untyped",
        }
    }
}

struct Family {
    name: String,
    kind: Kind,
    /// The HELP and TYPE lines.
    head: String,
    /// Its sample lines.
    body: String,
}

/// An exposition being built; [`finish`](Self::finish) returns the text.
#[derive(Default)]
pub struct Exposition {
    families: Vec<Family>,
    by_name: HashMap<String, usize>,
    current: Option<usize>,
}

impl Exposition {
    pub fn new() -> Self {
        Self::default()
    }

    /// Starts (or returns to) the family `name`; later samples with a relative name belong to it.
    /// Calling it again for a known name keeps the first HELP and kind.
    pub fn family(&mut self, name: &str, help: &str, kind: Kind) -> &mut Self {
        let name = metric_name(name);
        let i = match self.by_name.get(name.as_ref()) {
            Some(&i) => i,
            None => {
                let mut head = format!("# HELP {name} ");
                escape_into(&mut head, help, false);
                let _ = writeln!(head, "\n# TYPE {name} {}", kind.as_str());
                self.push_family(name.into_owned(), kind, head)
            }
        };
        self.current = Some(i);
        self
    }

    /// Adds a sample. `name` is relative to the current family when empty or starting with
    /// `_` (`""` is the family itself, `"_sum"`, `"_count"`, `"_bucket"`…), else a full
    /// name: the family of that name (or, for `_sum`/`_count`/`_bucket`, of its base name)
    /// if known, else a new untyped one (with a TYPE line, no HELP).
    pub fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: f64) -> &mut Self {
        self.sample_with(name, labels, None, value)
    }

    /// The samples of a summary in the current family: one per quantile (`quantile` label),
    /// then `_sum` and `_count`.
    pub fn summary(&mut self, labels: &[(&str, &str)], quantiles: &[(f64, f64)], sum: f64, count: u64) -> &mut Self {
        for &(q, v) in quantiles {
            self.sample_with("", labels, Some(("quantile", q)), v);
        }
        self.sample_with("_sum", labels, None, sum);
        self.sample_with("_count", labels, None, count as f64)
    }

    /// The samples of a histogram in the current family: `_bucket` per cumulative
    /// (upper bound, count), a `+Inf` bucket holding `count` unless given, `_sum`, `_count`.
    pub fn histogram(&mut self, labels: &[(&str, &str)], buckets: &[(f64, u64)], sum: f64, count: u64) -> &mut Self {
        for &(le, n) in buckets {
            self.sample_with("_bucket", labels, Some(("le", le)), n as f64);
        }
        if !buckets.iter().any(|&(le, _)| le == f64::INFINITY) {
            self.sample_with("_bucket", labels, Some(("le", f64::INFINITY)), count as f64);
        }
        self.sample_with("_sum", labels, None, sum);
        self.sample_with("_count", labels, None, count as f64)
    }

    /// The exposition text (every line newline-terminated).
    pub fn finish(self) -> String {
        let len = self.families.iter().map(|f| f.head.len() + f.body.len()).sum();
        let mut out = String::with_capacity(len);
        for f in &self.families {
            out.push_str(&f.head);
            out.push_str(&f.body);
        }
        out
    }

    fn push_family(&mut self, name: String, kind: Kind, head: String) -> usize {
        let i = self.families.len();
        self.by_name.insert(name.clone(), i);
        self.families.push(Family { name, kind, head, body: String::new() });
        i
    }

    fn sample_with(&mut self, name: &str, labels: &[(&str, &str)], extra: Option<(&str, f64)>, value: f64) -> &mut Self {
        let relative = name.is_empty() || name.starts_with('_');
        let (i, full) = match self.current {
            Some(i) if relative => (i, metric_name(&format!("{}{name}", self.families[i].name)).into_owned()),
            _ => {
                let full = metric_name(name).into_owned();
                let i = match self.owner(&full) {
                    Some(i) => i,
                    // A sample of no declared family: its own untyped one. The TYPE line keeps
                    // parsers that group by position from filing it under the family before.
                    None => self.push_family(full.clone(), Kind::Untyped, format!("# TYPE {full} untyped\n")),
                };
                (i, full)
            }
        };
        let body = &mut self.families[i].body;
        body.push_str(&full);
        let mut sep = '{';
        let extra_value = extra.map(|(n, v)| (n, format_value(v)));
        let all = labels.iter().copied().chain(extra_value.as_ref().map(|(n, v)| (*n, v.as_str())));
        for (k, v) in all {
            body.push(sep);
            sep = ',';
            body.push_str(&label_name(k));
            body.push_str("=\"");
            escape_into(body, v, true);
            body.push('"');
        }
        if sep == ',' {
            body.push('}');
        }
        body.push(' ');
        body.push_str(&format_value(value));
        body.push('\n');
        self
    }

    /// The family a full sample name belongs to.
    fn owner(&self, full: &str) -> Option<usize> {
        if let Some(&i) = self.by_name.get(full) {
            return Some(i);
        }
        ["_sum", "_count", "_bucket"].iter().find_map(|suffix| {
            let &i = self.by_name.get(full.strip_suffix(suffix)?)?;
            matches!(self.families[i].kind, Kind::Summary | Kind::Histogram).then_some(i)
        })
    }
}

/// `[a-zA-Z_:][a-zA-Z0-9_:]*`, bad characters replaced by `_`.
fn metric_name(name: &str) -> Cow<'_, str> {
    sanitize(name, true)
}

/// `[a-zA-Z_][a-zA-Z0-9_]*` (no colons in label names), bad characters replaced by `_`.
fn label_name(name: &str) -> Cow<'_, str> {
    sanitize(name, false)
}

fn sanitize(name: &str, colon: bool) -> Cow<'_, str> {
    let ok = |i: usize, c: char| c.is_ascii_alphabetic() || c == '_' || (colon && c == ':') || (i > 0 && c.is_ascii_digit());
    if !name.is_empty() && name.chars().enumerate().all(|(i, c)| ok(i, c)) {
        return Cow::Borrowed(name);
    }
    if name.is_empty() {
        return Cow::Borrowed("_");
    }
    Cow::Owned(name.chars().enumerate().map(|(i, c)| if ok(i, c) { c } else { '_' }).collect())
}

/// Escapes `\` and newline (HELP text), and `"` too in label values.
fn escape_into(out: &mut String, s: &str, quote: bool) {
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '"' if quote => out.push_str("\\\""),
            c => out.push(c),
        }
    }
}

/// Integers without a fraction, `NaN`, `+Inf`/`-Inf`, exponent form only for very large or
/// small magnitudes; every form parses with Go's `strconv.ParseFloat`.
fn format_value(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v.is_infinite() {
        if v > 0.0 { "+Inf" } else { "-Inf" }.into()
    } else if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else if v.abs() >= 1e15 || v.abs() < 1e-4 {
        format!("{v:e}")
    } else {
        format!("{v}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;
    use testkit::prometheus::{parse, validate};

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn values() {
        let cases = [
            (0.0, "0"),
            (-0.0, "0"),
            (42.0, "42"),
            (-7.0, "-7"),
            (0.5, "0.5"),
            (1.25e-7, "1.25e-7"),
            (1e20, "1e20"),
            (123456.789, "123456.789"),
            (f64::NAN, "NaN"),
            (f64::INFINITY, "+Inf"),
            (f64::NEG_INFINITY, "-Inf"),
        ];
        for (v, want) in cases {
            assert_eq!(format_value(v), want);
            if !v.is_nan() {
                assert_eq!(want.replace("Inf", "inf").parse::<f64>().unwrap(), v, "{want}");
            }
        }
    }

    #[test]
    fn names() {
        assert_eq!(metric_name("sluice:queries_total"), "sluice:queries_total");
        assert!(matches!(metric_name("ok_1"), Cow::Borrowed(_)));
        assert_eq!(metric_name("9lives-per.sec"), "_lives_per_sec");
        assert_eq!(metric_name(""), "_");
        assert_eq!(label_name("a:b"), "a_b");
        assert_eq!(label_name("é"), "_");
    }

    #[test]
    fn exposition_parses_back() {
        let mut x = Exposition::new();
        x.family("sluice_queries_total", "Statements run,\nby hostgroup. A \\ and \"quotes\".", Kind::Counter);
        x.sample("", &[("hostgroup", "0"), ("server", "127.0.0.1:3306")], 42.0);
        x.family("sluice_connections", "Open client connections.", Kind::Gauge);
        x.sample("sluice_connections", &[], 3.0);
        x.family("sluice_query_seconds", "Statement latency.", Kind::Summary);
        x.summary(&[("user", "a\"b\\c\nd")], &[(0.5, 0.0015), (0.99, 0.25)], 12.5, 1000);
        // Back to the first family: its samples stay grouped under one HELP/TYPE.
        x.family("sluice_queries_total", "ignored", Kind::Counter);
        x.sample("", &[("hostgroup", "1"), ("server", "127.0.0.1:3307")], 7.0);
        x.family("sluice_ratio", "NaN and infinities.", Kind::Gauge);
        x.sample("", &[("which", "nan")], f64::NAN);
        x.sample("", &[("which", "inf")], f64::INFINITY);
        x.family("sluice_backend_seconds", "Backend latency.", Kind::Histogram);
        x.histogram(&[], &[(0.001, 5), (0.01, 9)], 0.05, 10);
        x.sample("stray-metric", &[("bad label", "x")], 1.5);
        let text = x.finish();

        assert_eq!(text.matches("# TYPE sluice_queries_total counter").count(), 1, "{text}");
        assert!(text.contains("# HELP sluice_queries_total Statements run,\\nby hostgroup. A \\\\ and \"quotes\".\n"), "{text}");
        assert!(text.contains(r#"sluice_query_seconds{user="a\"b\\c\nd",quantile="0.5"} 0.0015"#), "{text}");
        assert!(text.contains("stray_metric{bad_label=\"x\"} 1.5\n"), "{text}");
        validate(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));

        let families = parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
        let fam = |name: &str| families.iter().find(|f| f.name == name).unwrap_or_else(|| panic!("no {name}"));
        let value = |name: &str, sample: &str, l: &[(&str, &str)]| {
            let f = fam(name);
            let s = f.samples.iter().find(|s| s.name == sample && s.labels == labels(l));
            s.unwrap_or_else(|| panic!("no {sample} {l:?} in {:?}", f.samples)).value
        };

        let q = fam("sluice_queries_total");
        assert_eq!((q.kind.as_str(), q.help.as_str()), ("counter", "Statements run,\nby hostgroup. A \\ and \"quotes\"."));
        assert_eq!(q.samples.len(), 2);
        assert_eq!(value("sluice_queries_total", "sluice_queries_total", &[("hostgroup", "0"), ("server", "127.0.0.1:3306")]), 42.0);
        assert_eq!(value("sluice_queries_total", "sluice_queries_total", &[("hostgroup", "1"), ("server", "127.0.0.1:3307")]), 7.0);
        assert_eq!(fam("sluice_connections").kind, "gauge");
        assert_eq!(value("sluice_connections", "sluice_connections", &[]), 3.0);

        let user = ("user", "a\"b\\c\nd");
        assert_eq!(fam("sluice_query_seconds").kind, "summary");
        assert_eq!(value("sluice_query_seconds", "sluice_query_seconds", &[user, ("quantile", "0.5")]), 0.0015);
        assert_eq!(value("sluice_query_seconds", "sluice_query_seconds", &[user, ("quantile", "0.99")]), 0.25);
        assert_eq!(value("sluice_query_seconds", "sluice_query_seconds_sum", &[user]), 12.5);
        assert_eq!(value("sluice_query_seconds", "sluice_query_seconds_count", &[user]), 1000.0);

        assert!(value("sluice_ratio", "sluice_ratio", &[("which", "nan")]).is_nan());
        assert_eq!(value("sluice_ratio", "sluice_ratio", &[("which", "inf")]), f64::INFINITY);

        assert_eq!(fam("sluice_backend_seconds").kind, "histogram");
        assert_eq!(value("sluice_backend_seconds", "sluice_backend_seconds_bucket", &[("le", "0.01")]), 9.0);
        assert_eq!(value("sluice_backend_seconds", "sluice_backend_seconds_bucket", &[("le", "+Inf")]), 10.0);
        assert_eq!(value("sluice_backend_seconds", "sluice_backend_seconds_count", &[]), 10.0);
        assert_eq!(value("stray_metric", "stray_metric", &[("bad_label", "x")]), 1.5);
    }

    #[test]
    fn validate_rejects_broken_text() {
        let good = "# HELP a A.\n# TYPE a counter\na{x=\"1\"} 1\n";
        assert_eq!(validate(good), Ok(()));
        for bad in [
            "# HELP a A.\n# TYPE a counter\na{x=\"1\"} 1",              // no final newline
            "# TYPE a counter\na 1\n# TYPE a counter\n",                // TYPE twice
            "# TYPE a gauge\na 1\n# TYPE b gauge\nb 1\na{x=\"2\"} 2\n", // a's samples split
            "# TYPE a gauge\na{x=\"1\"} 1\na{x=\"1\"} 2\n",             // duplicate series
            "# TYPE a gauge\na{x=\"1} 1\n",                             // unterminated label value
            "# TYPE a gauge\na{x=\"\\q\"} 1\n",                         // bad escape
            "# TYPE a counter\na -1\n",                                 // negative counter
            "# TYPE a gauge\na one\n",                                  // not a number
            "# TYPE a summary\na{quantile=\"2\"} 1\n",                  // quantile out of range
            "# TYPE a gauge\n9a 1\n",                                   // bad name
        ] {
            assert!(validate(bad).is_err(), "accepted {bad:?}");
        }
    }
}
