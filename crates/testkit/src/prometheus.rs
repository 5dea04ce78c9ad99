//! Checks a Prometheus text exposition (format 0.0.4) the way a scraper would, for tests of
//! `/metrics`: [`validate`] for a yes/no with the reason, [`parse`] to assert on the values.
//!
//! The grammar and the per-type rules (counters not negative, quantiles in 0..=1, histogram
//! buckets cumulative with a `+Inf` one, one label set per series) come from the
//! `openmetrics-parser` crate; the layout rules it does not check (each family's HELP/TYPE
//! once and before its samples, samples grouped, a final newline) are checked here.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::panic::{catch_unwind, AssertUnwindSafe};

use openmetrics_parser::prometheus::parse_prometheus;
use openmetrics_parser::{MetricsExposition, PrometheusType, PrometheusValue};

/// One metric family as parsed.
#[derive(Debug, Clone, PartialEq)]
pub struct Family {
    pub name: String,
    /// `counter`, `gauge`, `histogram`, `summary` or `untyped`.
    pub kind: String,
    /// Unescaped.
    pub help: String,
    pub samples: Vec<Sample>,
}

/// One sample line: full name (`_sum`, `_count`, `_bucket` included), labels (`quantile`
/// and `le` included, as the parser prints the bound back), value.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

/// Ok when `text` is an exposition Prometheus would accept; else what is wrong, with the line.
pub fn validate(text: &str) -> Result<(), String> {
    check_layout(text)?;
    parse_checked(text).map(|_| ())
}

/// Validates `text` and returns its families (in no particular order).
pub fn parse(text: &str) -> Result<Vec<Family>, String> {
    check_layout(text)?;
    let exposition = parse_checked(text)?;
    let mut families = Vec::new();
    for (_, f) in exposition.families {
        let mut samples = Vec::new();
        for s in f.iter_samples() {
            let set = s.get_labelset().map_err(|e| e.to_string())?;
            let labels: BTreeMap<String, String> = set.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
            let mut push = |suffix: &str, extra: Option<(&str, f64)>, value: f64| {
                let mut labels = labels.clone();
                if let Some((k, v)) = extra {
                    labels.insert(k.into(), float_label(v));
                }
                samples.push(Sample { name: format!("{}{suffix}", f.family_name), labels, value });
            };
            match &s.value {
                PrometheusValue::Unknown(n) | PrometheusValue::Gauge(n) => push("", None, n.as_f64()),
                PrometheusValue::Counter(c) => push("", None, c.value.as_f64()),
                PrometheusValue::Summary(v) => {
                    for q in &v.quantiles {
                        push("", Some(("quantile", q.quantile)), q.value.as_f64());
                    }
                    if let Some(sum) = v.sum {
                        push("_sum", None, sum.as_f64());
                    }
                    if let Some(count) = v.count {
                        push("_count", None, count as f64);
                    }
                }
                PrometheusValue::Histogram(v) => {
                    for b in &v.buckets {
                        push("_bucket", Some(("le", b.upper_bound)), b.count.as_f64());
                    }
                    if let Some(sum) = v.sum {
                        push("_sum", None, sum.as_f64());
                    }
                    if let Some(count) = v.count {
                        push("_count", None, count as f64);
                    }
                }
            }
        }
        families.push(Family { name: f.family_name, kind: f.family_type.to_string(), help: f.help, samples });
    }
    Ok(families)
}

fn float_label(v: f64) -> String {
    if v == f64::INFINITY {
        "+Inf".into()
    } else {
        v.to_string()
    }
}

/// The parser asserts on some inputs it does not expect; a panic is a rejection too.
fn parse_checked(text: &str) -> Result<MetricsExposition<PrometheusType, PrometheusValue>, String> {
    match catch_unwind(AssertUnwindSafe(|| parse_prometheus(text))) {
        Ok(Ok(x)) => Ok(x),
        Ok(Err(e)) => Err(format!("openmetrics-parser: {e}")),
        Err(_) => Err("openmetrics-parser panicked on this input".into()),
    }
}

fn check_layout(text: &str) -> Result<(), String> {
    if !text.is_empty() && !text.ends_with('\n') {
        return Err("the last line has no newline".into());
    }
    let mut types: HashMap<&str, &str> = HashMap::new();
    let mut helps: HashSet<&str> = HashSet::new();
    let mut sampled: HashSet<&str> = HashSet::new();
    let mut closed: HashSet<&str> = HashSet::new();
    let mut current: Option<&str> = None;
    let mut series: HashSet<&str> = HashSet::new();
    for (n, line) in text.lines().enumerate() {
        let err = |what: String| Err(format!("line {}: {what}: {line:?}", n + 1));
        let family = if let Some(rest) = line.strip_prefix("# HELP ") {
            let name = rest.split(' ').next().unwrap_or_default();
            if !helps.insert(name) {
                return err(format!("a second HELP for {name}"));
            }
            name
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let mut words = rest.split(' ');
            let name = words.next().unwrap_or_default();
            let kind = words.next().unwrap_or_default();
            if !["counter", "gauge", "histogram", "summary", "untyped"].contains(&kind) || words.next().is_some() {
                return err(format!("bad TYPE {kind:?}"));
            }
            if types.insert(name, kind).is_some() {
                return err(format!("a second TYPE for {name}"));
            }
            if sampled.contains(name) {
                return err(format!("TYPE for {name} after its samples"));
            }
            name
        } else if line.starts_with('#') || line.trim().is_empty() {
            continue;
        } else {
            let end = line.find(['{', ' ']).unwrap_or(line.len());
            let name = &line[..end];
            if !valid_name(name) {
                return err(format!("bad metric name {name:?}"));
            }
            // The series: everything before the value (no timestamps expected).
            let key = match line.rfind('}') {
                Some(i) => &line[..=i],
                None => name,
            };
            if !series.insert(key) {
                return err("a second sample of the same series".into());
            }
            let family = ["_sum", "_count", "_bucket"]
                .iter()
                .filter_map(|s| name.strip_suffix(s))
                .find(|base| matches!(types.get(base), Some(&"summary" | &"histogram")))
                .unwrap_or(name);
            sampled.insert(family);
            family
        };
        if current != Some(family) {
            if closed.contains(family) {
                return err(format!("{family} appears again after other families"));
            }
            if let Some(c) = current {
                closed.insert(c);
            }
            current = Some(family);
        }
    }
    Ok(())
}

fn valid_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}
