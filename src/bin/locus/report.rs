//! What a compute subcommand prints: one JSON object with `--json`, a few
//! lines of text otherwise, nothing with `--quiet`.

use std::path::{Path, PathBuf};

use locus::{BackendInfo, Kernel};
use serde_json::{Map, Value, json};

use crate::args::Output;
use crate::verify::Deviation;

/// What a subcommand says about its op; the [`Job`](crate::commands::Job)
/// adds backend, time and verification.
#[derive(Debug, Clone, Default)]
pub struct Summary {
    /// The kernel, for ops that have one.
    pub kernel: Option<Kernel>,
    /// Sizes, in the order printed: `M`, `N`, `d`, `q`, …
    pub sizes: Vec<(&'static str, usize)>,
    /// The op's results in brief (`empty_rows`, `pairs_per_second`, …).
    pub fields: Vec<(&'static str, Value)>,
    /// Files written, by option name (`output`, `labels`, …).
    pub outputs: Vec<(&'static str, PathBuf)>,
}

/// A command's outputs for [`Summary::outputs`]: each option name with its
/// path, those not given (`None`) left out, in order.
pub fn outputs(given: &[(&'static str, Option<&Path>)]) -> Vec<(&'static str, PathBuf)> {
    given
        .iter()
        .filter_map(|&(name, path)| path.map(|p| (name, p.to_path_buf())))
        .collect()
}

/// The other backend's run under `--verify`.
#[derive(Debug, Clone)]
pub struct Verification {
    /// The backend compared with.
    pub backend: BackendInfo,
    /// Its time, seconds.
    pub seconds: f64,
    /// How far the two results are apart.
    pub deviation: Deviation,
}

/// Everything printed about one run.
#[derive(Debug, Clone)]
pub struct Report {
    /// Subcommand name.
    pub command: &'static str,
    /// The backend that computed the result.
    pub backend: BackendInfo,
    /// Wall time of the op (transfers included), seconds.
    pub seconds: f64,
    /// The op's summary.
    pub summary: Summary,
    /// The `--verify` run, if any.
    pub verify: Option<Verification>,
}

impl Report {
    /// The JSON object of `--json`.
    pub fn to_json(&self) -> Value {
        let s = &self.summary;
        let mut o = Map::new();
        o.insert("command".into(), json!(self.command));
        o.extend(backend_fields(&self.backend));
        if let Some(k) = &s.kernel {
            o.insert("kernel".into(), kernel_json(k));
        }
        o.insert(
            "sizes".into(),
            object(s.sizes.iter().map(|(k, v)| (*k, json!(v)))),
        );
        o.insert("seconds".into(), json!(self.seconds));
        o.insert("summary".into(), object(s.fields.iter().cloned()));
        o.insert(
            "outputs".into(),
            object(
                s.outputs
                    .iter()
                    .map(|(k, p)| (*k, json!(p.display().to_string()))),
            ),
        );
        if let Some(v) = &self.verify {
            let mut vj = Map::new();
            vj.extend(backend_fields(&v.backend));
            vj.insert("seconds".into(), json!(v.seconds));
            if let Value::Object(d) = v.deviation.to_json() {
                vj.extend(d);
            }
            o.insert("verify".into(), Value::Object(vj));
        }
        Value::Object(o)
    }

    /// The text form.
    pub fn to_text(&self) -> String {
        let s = &self.summary;
        let sizes: Vec<String> = s.sizes.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let mut t = format!("{}: {}", self.command, sizes.join(" "));
        if let Some(k) = &s.kernel {
            t += &format!(", {k}");
        }
        t += &format!(
            "\n  backend: {}\n  time: {} s",
            self.backend,
            value_text(&json!(self.seconds))
        );
        for (k, v) in &s.fields {
            t += &format!("\n  {}: {}", k.replace('_', " "), value_text(v));
        }
        for (_, p) in &s.outputs {
            t += &format!("\n  wrote {}", p.display());
        }
        if let Some(v) = &self.verify {
            t += &format!(
                "\n  verify on {} ({} s): {}",
                v.backend,
                value_text(&json!(v.seconds)),
                v.deviation
            );
        }
        t
    }

    /// Prints the report as `out` asks.
    pub fn print(&self, out: &Output) {
        if out.json {
            println!("{}", self.to_json());
        } else if !out.quiet {
            println!("{}", self.to_text());
        }
    }
}

/// `backend` (`"gpu"` or `"cpu"`), `adapter` (the GPU adapter or null)
/// and `device` (one line describing it).
pub fn backend_fields(b: &BackendInfo) -> Map<String, Value> {
    let mut o = Map::new();
    o.insert("backend".into(), json!(b.kind()));
    o.insert("adapter".into(), adapter_json(b));
    o.insert("device".into(), json!(b.to_string()));
    o
}

/// The GPU adapter as JSON, or null on the CPU.
pub fn adapter_json(b: &BackendInfo) -> Value {
    match b {
        BackendInfo::Gpu {
            name,
            api,
            device_type,
            driver,
            software,
        } => json!({
            "name": name,
            "api": api,
            "device_type": device_type,
            "driver": driver,
            "software": software,
        }),
        _ => Value::Null,
    }
}

/// A kernel as JSON.
pub fn kernel_json(k: &Kernel) -> Value {
    match k.blocks() {
        None => json!({ "profile": k.profile().name(), "bandwidth": k.bandwidth() }),
        Some(bs) => json!({
            "blocks": bs
                .iter()
                .map(|b| json!({ "dims": b.dims, "profile": b.profile.name(), "bandwidth": b.bandwidth }))
                .collect::<Vec<_>>()
        }),
    }
}

fn object<'a>(entries: impl Iterator<Item = (&'a str, Value)>) -> Value {
    Value::Object(entries.map(|(k, v)| (k.to_string(), v)).collect())
}

/// A JSON value as printed in text: numbers compactly, strings bare.
pub fn value_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Number(n) if n.is_f64() => {
            let x = n.as_f64().unwrap_or(f64::NAN);
            if x != 0.0 && !(1e-3..1e5).contains(&x.abs()) {
                format!("{x:.3e}")
            } else {
                format!("{x:.4}")
            }
        }
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verify::Tolerance;

    #[test]
    fn json_and_text_carry_the_same_facts() {
        let r = Report {
            command: "local-mean",
            backend: locus::Engine::cpu().backend().clone(),
            seconds: 0.25,
            summary: Summary {
                kernel: Some(Kernel::gaussian(0.5).unwrap()),
                sizes: vec![("M", 3), ("N", 4)],
                fields: vec![
                    ("empty_rows", json!(0)),
                    ("pairs_per_second", json!(48.0e6)),
                ],
                outputs: vec![("output", PathBuf::from("out.npy"))],
            },
            verify: Some(Verification {
                backend: locus::Engine::cpu().backend().clone(),
                seconds: 0.5,
                deviation: Deviation {
                    max_abs: 0.0,
                    max_rel: 0.0,
                    ok: true,
                    tolerance: Tolerance::MATRIX,
                },
            }),
        };
        let j = r.to_json();
        assert_eq!(j["backend"], "cpu");
        assert_eq!(j["adapter"], Value::Null);
        assert_eq!(j["sizes"]["N"], 4);
        assert_eq!(j["kernel"]["profile"], "gaussian");
        assert_eq!(j["verify"]["ok"], true);
        let t = r.to_text();
        assert!(t.starts_with("local-mean: M=3 N=4, gaussian(h=0.5)"), "{t}");
        assert!(t.contains("pairs per second: 4.800e7"), "{t}");
        assert!(t.contains("wrote out.npy"), "{t}");
    }
}
