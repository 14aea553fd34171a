//! A strict reader of the Prometheus text exposition format (0.0.4): every
//! line a `# HELP`, a `# TYPE` or a sample; names and label names by the
//! grammar, label values with only `\\`, `\"` and `\n` escapes; every
//! sample in a family whose TYPE came first, families contiguous, no
//! sample twice; counters non-negative; histograms with `le` buckets in
//! increasing order, cumulative counts that never decrease, a `+Inf`
//! bucket equal to `_count`, and a `_sum`.
#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};

/// One sample.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

/// A parsed exposition.
#[derive(Debug, Default)]
pub struct Exposition {
    pub samples: Vec<Sample>,
    /// Family name → type.
    pub types: BTreeMap<String, String>,
    /// Family name → help text.
    pub help: BTreeMap<String, String>,
}

fn is_name(s: &str, colon: bool) -> bool {
    let mut chars = s.chars();
    let ok_first = |c: char| c.is_ascii_alphabetic() || c == '_' || (colon && c == ':');
    chars.next().is_some_and(ok_first) && chars.all(|c| ok_first(c) || c.is_ascii_digit())
}

fn value(s: &str) -> Result<f64, String> {
    match s {
        "+Inf" => Ok(f64::INFINITY),
        "-Inf" => Ok(f64::NEG_INFINITY),
        "NaN" => Ok(f64::NAN),
        _ => s.parse().map_err(|_| format!("bad value {s:?}")),
    }
}

/// Parses `{a="x",b="y"}` at the start of `s`; the labels and the rest.
fn labels(s: &str) -> Result<(BTreeMap<String, String>, &str), String> {
    let mut out = BTreeMap::new();
    let Some(mut rest) = s.strip_prefix('{') else {
        return Ok((out, s));
    };
    loop {
        if let Some(r) = rest.strip_prefix('}') {
            return Ok((out, r));
        }
        let eq = rest.find('=').ok_or("label without '='")?;
        let name = &rest[..eq];
        if !is_name(name, false) {
            return Err(format!("bad label name {name:?}"));
        }
        rest = rest[eq + 1..]
            .strip_prefix('"')
            .ok_or("label value not quoted")?;
        let mut v = String::new();
        let mut chars = rest.char_indices();
        let end = loop {
            match chars.next().ok_or("unterminated label value")? {
                (i, '"') => break i,
                (_, '\\') => match chars.next().ok_or("dangling escape")?.1 {
                    '\\' => v.push('\\'),
                    '"' => v.push('"'),
                    'n' => v.push('\n'),
                    c => return Err(format!("bad escape \\{c}")),
                },
                (_, '\n') => return Err("newline in a label value".into()),
                (_, c) => v.push(c),
            }
        };
        if out.insert(name.to_string(), v).is_some() {
            return Err(format!("label {name} twice"));
        }
        rest = &rest[end + 1..];
        rest = rest.strip_prefix(',').unwrap_or(rest);
    }
}

/// The family a sample name belongs to, given the declared types.
fn family_of<'a>(name: &'a str, types: &BTreeMap<String, String>) -> Option<&'a str> {
    if types.contains_key(name) {
        return Some(name);
    }
    for suffix in ["_bucket", "_sum", "_count"] {
        if let Some(base) = name.strip_suffix(suffix)
            && types
                .get(base)
                .is_some_and(|t| t == "histogram" || t == "summary")
        {
            return Some(base);
        }
    }
    None
}

/// Parses and checks `text`.
pub fn parse(text: &str) -> Result<Exposition, String> {
    let mut e = Exposition::default();
    let mut seen = BTreeSet::new();
    let mut done_families = BTreeSet::new();
    let mut current: Option<String> = None;
    for (i, line) in text.lines().enumerate() {
        let at = |m: String| format!("line {}: {m}: {line:?}", i + 1);
        if line.is_empty() {
            continue;
        }
        if let Some(rest) = line.strip_prefix("# ") {
            let mut parts = rest.splitn(3, ' ');
            let (kw, name, tail) = (parts.next(), parts.next(), parts.next());
            match (kw, name) {
                (Some("TYPE"), Some(name)) => {
                    let t = tail.unwrap_or("");
                    if !["counter", "gauge", "histogram", "summary", "untyped"].contains(&t) {
                        return Err(at(format!("bad type {t:?}")));
                    }
                    if !is_name(name, true) || e.types.insert(name.into(), t.into()).is_some() {
                        return Err(at("bad or repeated TYPE".into()));
                    }
                    if done_families.contains(name) || current.as_deref() == Some(name) {
                        return Err(at("TYPE after the family's samples".into()));
                    }
                }
                (Some("HELP"), Some(name))
                    if e.help
                        .insert(name.into(), tail.unwrap_or("").into())
                        .is_some() =>
                {
                    return Err(at("repeated HELP".into()));
                }
                _ => {}
            }
            continue;
        }
        if line.starts_with('#') {
            continue;
        }
        let name_end = line.find(['{', ' ']).ok_or_else(|| at("no value".into()))?;
        let name = &line[..name_end];
        if !is_name(name, true) {
            return Err(at(format!("bad metric name {name:?}")));
        }
        let (labels, rest) = labels(&line[name_end..]).map_err(at)?;
        let mut fields = rest.trim_start_matches(' ').split(' ');
        let v = value(fields.next().unwrap_or("")).map_err(at)?;
        if let Some(ts) = fields.next() {
            ts.parse::<i64>().map_err(|_| at("bad timestamp".into()))?;
        }
        if fields.next().is_some() {
            return Err(at("trailing fields".into()));
        }
        let family = family_of(name, &e.types)
            .ok_or_else(|| at("sample before its family's TYPE".into()))?
            .to_string();
        if current.as_deref() != Some(&family) {
            if let Some(c) = current.take() {
                done_families.insert(c);
            }
            if done_families.contains(&family) {
                return Err(at("family not contiguous".into()));
            }
            current = Some(family.clone());
        }
        if e.types[&family] == "counter" && (v < 0.0 || v.is_nan()) {
            return Err(at("negative counter".into()));
        }
        if !seen.insert((name.to_string(), format!("{labels:?}"))) {
            return Err(at("sample repeated".into()));
        }
        e.samples.push(Sample {
            name: name.to_string(),
            labels,
            value: v,
        });
    }
    check_histograms(&e)?;
    Ok(e)
}

fn check_histograms(e: &Exposition) -> Result<(), String> {
    for (family, t) in &e.types {
        if t != "histogram" {
            continue;
        }
        // Per label set (without `le`): the buckets in order.
        let mut series: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
        for s in e
            .samples
            .iter()
            .filter(|s| s.name == format!("{family}_bucket"))
        {
            let mut l = s.labels.clone();
            let le = l
                .remove("le")
                .ok_or(format!("{family}: bucket without le"))?;
            series
                .entry(format!("{l:?}"))
                .or_default()
                .push((value(&le)?, s.value));
        }
        for (key, buckets) in series {
            for w in buckets.windows(2) {
                let increasing = w[0].0.partial_cmp(&w[1].0) == Some(std::cmp::Ordering::Less);
                if !increasing || w[1].1 < w[0].1 {
                    return Err(format!("{family}{key}: buckets out of order or decreasing"));
                }
            }
            let last = buckets.last().ok_or("no bucket")?;
            if last.0 != f64::INFINITY {
                return Err(format!("{family}{key}: no +Inf bucket"));
            }
            let find = |suffix: &str| {
                e.samples
                    .iter()
                    .find(|s| {
                        s.name == format!("{family}{suffix}") && format!("{:?}", s.labels) == key
                    })
                    .map(|s| s.value)
            };
            if find("_count") != Some(last.1) {
                return Err(format!(
                    "{family}{key}: _count differs from the +Inf bucket"
                ));
            }
            if find("_sum").is_none() {
                return Err(format!("{family}{key}: no _sum"));
            }
        }
    }
    Ok(())
}

#[test]
fn the_reader_refuses_what_the_format_forbids() {
    let ok = "# HELP a_total A.\n# TYPE a_total counter\na_total{x=\"1\"} 2\n# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_bucket{le=\"+Inf\"} 2\nh_sum 3\nh_count 2\n";
    parse(ok).unwrap();
    for bad in [
        "a 1\n",
        "# TYPE a gauge\na{x=1} 1\n",
        "# TYPE a gauge\na 1\na 1\n",
        "# TYPE a gauge\n# TYPE b gauge\na 1\nb 1\na{x=\"\"} 1\n",
        "# TYPE a counter\na -1\n",
        "# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_bucket{le=\"+Inf\"} 1\nh_sum 3\nh_count 1\n",
        "# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_sum 3\nh_count 1\n",
        "# TYPE h histogram\nh_bucket{le=\"+Inf\"} 1\nh_sum 3\nh_count 2\n",
        "# TYPE a gauge\na{x=\"\\q\"} 1\n",
        "# TYPE 1a gauge\n",
    ] {
        assert!(parse(bad).is_err(), "{bad:?}");
    }
}
