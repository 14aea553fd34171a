//! The variable-bandwidth options of `locus kde` and `locus local-mean`
//! (`--bandwidths`, `--adaptive-k`, `--alpha`, `--abramson`, `--balloon`):
//! their checks before any work, and the bandwidths they give.

use std::path::PathBuf;

use locus::{Engine, Kernel, Profile, VariableBandwidth};
use ndarray::ArrayView2;
use serde_json::json;

use crate::args::{kernel_from, parse_bandwidth, parse_profile};
use crate::error::{CliError, CliResult};
use crate::io::{self, Input};

/// `--kernel`, `--bandwidth`, `--blocks` and the variable-bandwidth options
/// of a command that takes either: the fixed kernel, or with
/// `--bandwidths`, `--adaptive-k` or `--abramson` variable bandwidths of
/// one radial profile (`--bandwidth` then absent, or the pilot's).
#[derive(Debug, clap::Args)]
pub struct KernelArgs {
    /// Kernel profile: gaussian, epanechnikov, uniform, triangular,
    /// biweight, laplacian, cauchy, cosine; with --blocks, one per block
    /// (k1,k2,…) or one for all.
    #[arg(long, value_name = "K", default_value = "gaussian", value_parser = parse_profile, value_delimiter = ',')]
    pub kernel: Vec<Profile>,
    /// Bandwidth h > 0 (distances are divided by h); with --blocks, one
    /// per block (h1,h2,…); with --abramson, the pilot's.
    #[arg(long, value_name = "H", value_parser = parse_bandwidth, allow_hyphen_values = true, value_delimiter = ',', required_unless_present_any = ["bandwidths", "adaptive_k"])]
    pub bandwidth: Option<Vec<f32>>,
    /// A product (joint, bilateral) kernel over consecutive coordinate
    /// blocks of these sizes (d1,d2,… summing to the data's columns), each
    /// with its own --kernel and --bandwidth.
    #[arg(long, value_name = "D", value_delimiter = ',')]
    pub blocks: Option<Vec<usize>>,
    #[command(flatten)]
    pub variable: VariableArgs,
}

impl KernelArgs {
    /// Whether variable bandwidths are asked for.
    pub fn variable(&self) -> bool {
        self.variable.given()
    }

    /// The fixed kernel (bandwidths and profiles already validated by the
    /// parsers).
    pub fn fixed(&self) -> CliResult<Kernel> {
        if self.variable.balloon {
            return Err(CliError::input(
                "--balloon needs --bandwidths or --adaptive-k (one bandwidth per query)",
            ));
        }
        let bandwidth = self.bandwidth.as_deref().unwrap_or(&[]);
        kernel_from(&self.kernel, bandwidth, self.blocks.as_deref())
    }

    /// The variable-bandwidth rule, checked ([`VariableArgs::rule`]).
    pub fn rule(&self, refused: &[(&str, bool)]) -> CliResult<Rule> {
        self.variable.rule(
            &self.kernel,
            self.bandwidth.as_deref(),
            self.blocks.is_some(),
            refused,
        )
    }
}

/// Variable bandwidths, one per key (sample-point) or with `--balloon`
/// one per query; the command's `--bandwidth` is then absent, or with
/// `--abramson` the pilot's.
#[derive(Debug, clap::Args)]
pub struct VariableArgs {
    /// Variable bandwidths from a file: one per key (N values; each key's
    /// kernel normalized by its own h_j), or with --balloon one per query
    /// (M values).
    #[arg(long, value_name = "B", conflicts_with_all = ["bandwidth", "adaptive_k", "abramson"])]
    pub bandwidths: Option<PathBuf>,
    /// Variable bandwidths by the k-NN rule: h_j = alpha × the distance
    /// from key j to its K-th nearest other key (with --balloon: from
    /// query i to its K-th nearest key).
    #[arg(long, value_name = "K", conflicts_with_all = ["bandwidth", "abramson"])]
    pub adaptive_k: Option<usize>,
    /// The factor of --adaptive-k.
    #[arg(
        long,
        value_name = "A",
        default_value_t = 1.0,
        allow_hyphen_values = true,
        requires = "adaptive_k"
    )]
    pub alpha: f32,
    /// Per-key bandwidths by Abramson's square-root law from a pilot
    /// density of --kernel and --bandwidth: h_j = h·(f̂(x_j)/g)^(−1/2).
    #[arg(long, requires = "bandwidth")]
    pub abramson: bool,
    /// --bandwidths and --adaptive-k give one bandwidth per query (balloon).
    #[arg(long)]
    pub balloon: bool,
}

/// The rule of a run, checked, with its bandwidths file loaded.
pub struct Rule {
    profile: Profile,
    pilot: Option<Kernel>,
    given: Option<Input>,
    adaptive_k: Option<usize>,
    alpha: f32,
    balloon: bool,
}

impl VariableArgs {
    /// Whether any variable-bandwidth option is given.
    pub fn given(&self) -> bool {
        self.bandwidths.is_some() || self.adaptive_k.is_some() || self.abramson
    }

    /// Checks the options against the command's kernel (`profiles`,
    /// `bandwidth`; `blocks` and `refused`, options that cannot be
    /// combined with variable bandwidths, must be absent) and loads the
    /// bandwidths file.
    pub fn rule(
        &self,
        profiles: &[Profile],
        bandwidth: Option<&[f32]>,
        blocks: bool,
        refused: &[(&str, bool)],
    ) -> CliResult<Rule> {
        let profile = match profiles {
            [p] => *p,
            ps => {
                return Err(CliError::input(format!(
                    "--kernel gives {} profiles; variable bandwidths take one radial profile",
                    ps.len()
                )));
            }
        };
        let refuse = |what: &str| {
            Err(CliError::input(format!(
                "{what} cannot be combined with variable bandwidths (--bandwidths, --adaptive-k, --abramson)"
            )))
        };
        if blocks {
            return refuse("--blocks");
        }
        if let Some((what, _)) = refused.iter().find(|(_, on)| *on) {
            return refuse(what);
        }
        if self.abramson && self.balloon {
            return refuse("--balloon with --abramson (per-key bandwidths)");
        }
        let pilot = match (self.abramson, bandwidth) {
            (true, Some([h])) => Some(Kernel::new(profile, *h)?),
            (true, _) => return Err(CliError::input("--abramson takes one pilot --bandwidth")),
            (false, _) => None,
        };
        let given = self
            .bandwidths
            .as_deref()
            .map(|p| Input::load("--bandwidths", p))
            .transpose()?;
        if let Some(g) = &given {
            io::one_column(g)?;
        }
        Ok(Rule {
            profile,
            pilot,
            given,
            adaptive_k: self.adaptive_k,
            alpha: self.alpha,
            balloon: self.balloon,
        })
    }
}

impl Rule {
    /// The one radial profile.
    pub fn profile(&self) -> Profile {
        self.profile
    }

    /// The pilot kernel of `--abramson`.
    pub fn pilot(&self) -> Option<&Kernel> {
        self.pilot.as_ref()
    }

    /// Checks a bandwidths file against `m` queries and `n` keys.
    pub fn check_rows(&self, m: usize, n: usize) -> CliResult<()> {
        if let Some(g) = &self.given {
            let (want, of) = if self.balloon {
                (m, "query")
            } else {
                (n, "key")
            };
            if g.data.nrows() != want {
                return Err(CliError::input(format!(
                    "--bandwidths has {} values; one per {of} ({want}) expected",
                    g.data.nrows()
                )));
            }
        }
        Ok(())
    }

    /// The bandwidths of queries `q` and keys `x` on `e`.
    pub fn bandwidths(
        &self,
        e: &Engine,
        q: ArrayView2<'_, f32>,
        x: ArrayView2<'_, f32>,
    ) -> locus::Result<VariableBandwidth> {
        let h = match (&self.given, self.adaptive_k, &self.pilot) {
            (Some(g), _, _) => g.data.column(0).to_vec(),
            (None, Some(k), _) if self.balloon => e.balloon_bandwidths(q, x, k, self.alpha)?,
            (None, Some(k), _) => e.knn_bandwidths(x, k, self.alpha)?,
            (None, None, Some(pilot)) => e.abramson_bandwidths(pilot, x)?,
            (None, None, None) => {
                return Err(locus::Error::InvalidParameter {
                    name: "bandwidths",
                    reason: "no variable-bandwidth rule given".into(),
                });
            }
        };
        Ok(if self.balloon {
            VariableBandwidth::PerQuery(h)
        } else {
            VariableBandwidth::PerKey(h)
        })
    }

    /// The report's fields: the rule, balloon or not, the profile.
    pub fn fields(&self) -> Vec<(&'static str, serde_json::Value)> {
        let rule = match (&self.given, self.adaptive_k) {
            (Some(_), _) => json!("file"),
            (None, Some(k)) => json!(format!("knn k={k} alpha={}", self.alpha)),
            (None, None) => json!("abramson"),
        };
        vec![
            ("variable_bandwidths", rule),
            ("balloon", json!(self.balloon)),
            ("profile", json!(self.profile.name())),
        ]
    }
}
