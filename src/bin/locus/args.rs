//! Options shared by the subcommands, their parsers, and the engine they
//! select.

use std::io::IsTerminal;

use std::num::NonZeroUsize;

use clap::ValueEnum;
use locus::{Device, Engine, EngineOptions, Kernel, Metric, Profile};

use crate::error::{CliError, CliResult};

/// `--backend`: where the op runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum BackendArg {
    /// A hardware GPU if present, else the CPU.
    Auto,
    /// Any GPU adapter (a software one if it is all there is).
    Gpu,
    /// The rayon CPU path.
    Cpu,
}

impl BackendArg {
    /// Opens the engine this choice names, its CPU work on `threads`
    /// threads of its own (`None`: rayon's global pool).
    pub fn engine(self, threads: Option<NonZeroUsize>) -> CliResult<Engine> {
        let Some(n) = threads else {
            return self.engine_on_global_pool();
        };
        let device = self.device();
        let with_threads = |mut o: EngineOptions| {
            o.threads = Some(n);
            Engine::with_options(o)
        };
        let opened = match device {
            Device::Cpu => with_threads(EngineOptions::new(Device::Cpu)),
            _ => EngineOptions::from_env(device).and_then(with_threads),
        };
        match opened {
            // As without --threads: "auto" takes the CPU when the GPU it
            // found cannot be opened.
            Err(locus::Error::DeviceRequest { .. }) if device == Device::Auto => {
                with_threads(EngineOptions::new(Device::Cpu))
            }
            r => r,
        }
        .map_err(|e| match e {
            locus::Error::ThreadPool { .. }
            | locus::Error::InvalidParameter {
                name: "threads", ..
            } => with_context("--threads", e),
            e => with_context(self.flag(), e),
        })
    }

    /// The device this choice names.
    pub fn device(self) -> Device {
        match self {
            BackendArg::Auto => Device::Auto,
            BackendArg::Gpu => Device::Gpu,
            BackendArg::Cpu => Device::Cpu,
        }
    }

    /// The option as given, for error messages.
    fn flag(self) -> &'static str {
        match self {
            BackendArg::Auto => "--backend auto",
            BackendArg::Gpu => "--backend gpu",
            BackendArg::Cpu => "--backend cpu",
        }
    }

    /// [`engine`](Self::engine) on rayon's global pool.
    fn engine_on_global_pool(self) -> CliResult<Engine> {
        match self {
            // The environment's adapter choice is checked: a misspelt
            // LOCUS_ADAPTER is an error, not a silent CPU run.
            BackendArg::Auto => {
                Engine::from_env(Device::Auto).map_err(|e| with_context(self.flag(), e))
            }
            BackendArg::Cpu => Ok(Engine::cpu()),
            BackendArg::Gpu => Engine::gpu().map_err(|e| with_context(self.flag(), e)),
        }
    }
}

/// `e` prefixed with the option it came from, with `e`'s exit status.
fn with_context(option: &str, e: locus::Error) -> CliError {
    let message = format!("{option}: {e}");
    if CliError::from(e).code() == crate::error::EXIT_INPUT {
        CliError::input(message)
    } else {
        CliError::compute(message)
    }
}

/// How results are shown: `--json`, `--quiet`.
#[derive(Debug, Clone, clap::Args)]
pub struct Output {
    /// Print one JSON object on stdout (backend, adapter, sizes, seconds,
    /// the op's summary) instead of text.
    #[arg(long)]
    pub json: bool,
    /// Print nothing but errors (and the JSON object with --json); no progress bar.
    #[arg(long, short)]
    pub quiet: bool,
}

impl Output {
    /// Whether a progress bar may be drawn: not with `--quiet` or `--json`,
    /// and only when stderr is a terminal.
    pub fn progress(&self) -> bool {
        !self.quiet && !self.json && std::io::stderr().is_terminal()
    }
}

/// Options of every compute subcommand: `--backend`, `--verify`,
/// `--threads`, and the
/// [`Output`] options.
#[derive(Debug, Clone, clap::Args)]
pub struct Compute {
    /// Backend to run on.
    #[arg(long, value_enum, default_value_t = BackendArg::Auto)]
    pub backend: BackendArg,
    /// Also run the other backend (CPU for a GPU run, any GPU for a CPU
    /// run) and report the largest absolute and relative deviation; exit 1,
    /// writing nothing, if it exceeds the op's tolerance.
    #[arg(long)]
    pub verify: bool,
    /// CPU threads the op runs on, in a pool of its own (default: every
    /// core, or RAYON_NUM_THREADS).
    #[arg(long, value_name = "N")]
    pub threads: Option<NonZeroUsize>,
    #[command(flatten)]
    pub output: Output,
}

/// `--kernel` and `--bandwidth` for subcommands whose kernel defaults to
/// gaussian and whose bandwidth is required. Subcommands with other
/// defaults declare their own arguments with [`parse_profile`] and
/// [`parse_bandwidth`].
#[derive(Debug, Clone, clap::Args)]
pub struct KernelArgs {
    /// Kernel profile: gaussian, epanechnikov, uniform, triangular,
    /// biweight, laplacian, cauchy, cosine; with --blocks, one per block
    /// (k1,k2,…) or one for all.
    #[arg(long, value_name = "K", default_value = "gaussian", value_parser = parse_profile, value_delimiter = ',')]
    pub kernel: Vec<Profile>,
    /// Bandwidth h > 0 (distances are divided by h); with --blocks, one
    /// per block (h1,h2,…).
    #[arg(long, value_name = "H", value_parser = parse_bandwidth, allow_hyphen_values = true, value_delimiter = ',', required = true)]
    pub bandwidth: Vec<f32>,
    /// A product (joint, bilateral) kernel over consecutive coordinate
    /// blocks of these sizes (d1,d2,… summing to the data's columns), each
    /// with its own --kernel and --bandwidth.
    #[arg(long, value_name = "D", value_delimiter = ',')]
    pub blocks: Option<Vec<usize>>,
}

impl KernelArgs {
    /// The kernel (bandwidths and profiles already validated by the
    /// parsers).
    pub fn kernel(&self) -> CliResult<Kernel> {
        kernel_from(&self.kernel, &self.bandwidth, self.blocks.as_deref())
    }
}

/// The distance metric of `knn` and `kde`.
#[derive(Debug, Clone, clap::Args)]
pub struct MetricArgs {
    /// Distance metric: euclidean (l2), manhattan (cityblock, l1),
    /// chebyshev (infinity), minkowski (with --p), haversine (2 columns:
    /// latitude, longitude in radians).
    #[arg(long, value_name = "NAME", default_value = "euclidean")]
    pub metric: String,
    /// Minkowski's exponent p ≥ 1 (for --metric minkowski; default 2).
    #[arg(long, value_name = "P", allow_hyphen_values = true)]
    pub p: Option<f64>,
}

impl MetricArgs {
    /// The metric, checked (unknown names and bad exponents are input
    /// errors).
    pub fn metric(&self) -> CliResult<Metric> {
        Ok(Metric::from_name(&self.metric, self.p)?)
    }
}

/// A radial kernel from one profile and one bandwidth, or with `blocks` a
/// product kernel: one bandwidth per block, one profile per block or one
/// for all.
pub fn kernel_from(
    profiles: &[Profile],
    bandwidths: &[f32],
    blocks: Option<&[usize]>,
) -> CliResult<Kernel> {
    let Some(dims) = blocks else {
        return match (profiles, bandwidths) {
            ([p], [h]) => Ok(Kernel::new(*p, *h)?),
            _ => Err(CliError::input(format!(
                "{} profiles and {} bandwidths given without --blocks: a radial kernel takes one of each; \
                 for a product kernel give --blocks d1,d2,… with one bandwidth per block",
                profiles.len(),
                bandwidths.len()
            ))),
        };
    };
    if bandwidths.len() != dims.len() {
        return Err(CliError::input(format!(
            "--blocks names {} blocks but --bandwidth gives {} bandwidths; give one per block",
            dims.len(),
            bandwidths.len()
        )));
    }
    let profile = |i: usize| match profiles {
        [p] => Ok(*p),
        ps if ps.len() == dims.len() => Ok(ps[i]),
        ps => Err(CliError::input(format!(
            "--blocks names {} blocks but --kernel gives {} profiles; give one, or one per block",
            dims.len(),
            ps.len()
        ))),
    };
    let spec = (0..dims.len())
        .map(|i| Ok((dims[i], profile(i)?, bandwidths[i])))
        .collect::<CliResult<Vec<_>>>()?;
    Ok(Kernel::product(spec)?)
}

/// Parses a kernel profile name (aliases such as `tophat` accepted).
pub fn parse_profile(s: &str) -> Result<Profile, String> {
    s.parse::<Profile>().map_err(|e| e.to_string())
}

/// Parses a bandwidth and checks it as the library would.
pub fn parse_bandwidth(s: &str) -> Result<f32, String> {
    let h: f32 = s
        .trim()
        .parse()
        .map_err(|_| format!("bandwidth {s:?} is not a number"))?;
    Kernel::new(Profile::Gaussian, h).map_err(|e| e.to_string())?;
    Ok(h)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bandwidths_are_checked() {
        assert_eq!(parse_bandwidth("0.5"), Ok(0.5));
        for bad in ["0", "-1", "nan", "inf", "1e40", "abc", ""] {
            assert!(parse_bandwidth(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn profiles_parse_with_aliases() {
        assert_eq!(parse_profile("tophat"), Ok(Profile::Uniform));
        assert!(parse_profile("boxcar").unwrap_err().contains("gaussian"));
    }
}
