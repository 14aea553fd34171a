//! `locus serve`'s configuration: the flags, an optional TOML file with
//! the same fields (flags override it), and the sets named at start
//! (`--set NAME --keys K [--values V] [--labels L] [--weights W]`,
//! repeatable; `[[set]]` tables in the file).
//!
//! Imports: `super::{sets, tables}`, `crate::{args, error, io, points}`.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::ArgMatches;
use locus::{Batching, Engine, EngineOptions, Kernel, KeySetOptions, Profile};
use serde::Deserialize;

use super::sets::{Centre, SetData, check_name};
use super::tables;
use crate::args::{BackendArg, parse_bandwidth, parse_profile};
use crate::error::{CliError, CliResult};
use crate::{io, points};

/// Arguments of `locus serve`.
#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// TCP port (0: any free one). Required here or in --config.
    #[arg(long)]
    pub port: Option<u16>,
    /// Address to listen on (default 127.0.0.1). Without --api-keys only
    /// a loopback address is accepted, unless --insecure-no-auth.
    #[arg(long)]
    pub host: Option<IpAddr>,
    /// A TOML file with any of these options (kebab-case keys, e.g.
    /// `max-rows = 1000`) and `[[set]]` tables (name, keys, values,
    /// labels, weights; paths relative to the file). Flags override it.
    #[arg(long, value_name = "FILE.toml")]
    pub config: Option<PathBuf>,
    /// API keys: one `KEY ROLE` per line, ROLE `read` (queries) or `admin`
    /// (also PUT/DELETE of sets). Clients send `Authorization: Bearer KEY`.
    #[arg(long, value_name = "FILE")]
    pub api_keys: Option<PathBuf>,
    /// Serve without API keys on a non-loopback address.
    #[arg(long)]
    pub insecure_no_auth: bool,
    /// Serve HTTPS: the certificate chain (PEM, the server's first);
    /// needs --tls-key.
    #[arg(long, value_name = "PEM")]
    pub tls_cert: Option<PathBuf>,
    /// The certificate's private key (PEM: PKCS#8, PKCS#1 or SEC1).
    #[arg(long, value_name = "PEM")]
    pub tls_key: Option<PathBuf>,
    /// Print the OpenAPI description of the API (what GET /openapi.json
    /// answers) and exit.
    #[arg(long)]
    pub print_openapi: bool,
    /// A set loaded at start; the --keys, --values, --labels and --weights
    /// after it are its files (.npy or .csv). Repeatable.
    #[arg(long, value_name = "NAME")]
    pub set: Vec<String>,
    /// The keys of the last --set, N×d.
    #[arg(long, value_name = "K")]
    pub keys: Vec<PathBuf>,
    /// Its values, N×q (for local-mean and row-states).
    #[arg(long, value_name = "V")]
    pub values: Vec<PathBuf>,
    /// Its class labels, N integers (for classify).
    #[arg(long, value_name = "L")]
    pub labels: Vec<PathBuf>,
    /// Its per-key weights, N non-negative numbers (for density and log-density).
    #[arg(long, value_name = "W")]
    pub weights: Vec<PathBuf>,
    /// Kernel of requests that name none (default gaussian).
    #[arg(long, value_parser = parse_profile)]
    pub kernel: Option<Profile>,
    /// Bandwidth of requests that name none (default 1).
    #[arg(long, value_parser = parse_bandwidth)]
    pub bandwidth: Option<f32>,
    /// Backend: a hardware GPU when there is one (auto, the default), or forced.
    #[arg(long, value_enum)]
    pub backend: Option<BackendArg>,
    /// Memory limit of the engine, in MiB (sets and requests).
    #[arg(long)]
    pub memory_limit_mib: Option<u64>,
    /// CPU threads of the engine's own pool (default: every core).
    #[arg(long)]
    pub threads: Option<std::num::NonZeroUsize>,
    /// Longest a batch waits for more requests, in microseconds (default 1000).
    #[arg(long)]
    pub max_wait_us: Option<u64>,
    /// Run every request alone.
    #[arg(long)]
    pub no_batching: bool,
    /// Most query rows per request (default 65536); more: 413.
    #[arg(long)]
    pub max_rows: Option<usize>,
    /// Most requests admitted on one set at once (default 64); more: 429.
    #[arg(long)]
    pub queue_depth: Option<usize>,
    /// Largest query body, in MiB (default 64).
    #[arg(long)]
    pub max_body_mib: Option<usize>,
    /// Largest set upload (PUT /v1/sets/NAME), in MiB (default 1024).
    #[arg(long)]
    pub max_upload_mib: Option<usize>,
    /// Longest a client may take to send a request's headers (and longest
    /// an idle connection stays open), in milliseconds (default 10000).
    #[arg(long)]
    pub header_timeout_ms: Option<u64>,
    /// Longest a client may take to send a body after its headers, in
    /// milliseconds (default 10000); a slower upload is answered 408.
    #[arg(long)]
    pub body_timeout_ms: Option<u64>,
    /// Longest a request may take from its headers to its answer, in
    /// milliseconds (default 60000); its work is cancelled then.
    #[arg(long)]
    pub request_timeout_ms: Option<u64>,
    /// Most connections served at once (default 256).
    #[arg(long)]
    pub max_connections: Option<usize>,
    /// Most requests computing at once (default 64); more: 503.
    #[arg(long)]
    pub max_in_flight: Option<usize>,
    /// After SIGTERM/SIGINT: how long new connections are still accepted
    /// (with /readyz 503), in milliseconds (default 0).
    #[arg(long)]
    pub shutdown_delay_ms: Option<u64>,
    /// Longest a shutdown waits for in-flight requests, in milliseconds (default 30000).
    #[arg(long)]
    pub shutdown_grace_ms: Option<u64>,
    /// Log each request as one JSON object per line on stderr.
    #[arg(long)]
    pub log_json: bool,
    /// No per-request log lines.
    #[arg(long)]
    pub quiet: bool,
}

/// The TOML file: the flags' fields (kebab-case) and `[[set]]` tables.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct FileConfig {
    port: Option<u16>,
    host: Option<IpAddr>,
    api_keys: Option<PathBuf>,
    insecure_no_auth: Option<bool>,
    tls_cert: Option<PathBuf>,
    tls_key: Option<PathBuf>,
    kernel: Option<String>,
    bandwidth: Option<f32>,
    backend: Option<String>,
    memory_limit_mib: Option<u64>,
    threads: Option<std::num::NonZeroUsize>,
    max_wait_us: Option<u64>,
    no_batching: Option<bool>,
    max_rows: Option<usize>,
    queue_depth: Option<usize>,
    max_body_mib: Option<usize>,
    max_upload_mib: Option<usize>,
    header_timeout_ms: Option<u64>,
    body_timeout_ms: Option<u64>,
    request_timeout_ms: Option<u64>,
    max_connections: Option<usize>,
    max_in_flight: Option<usize>,
    shutdown_delay_ms: Option<u64>,
    shutdown_grace_ms: Option<u64>,
    log_json: Option<bool>,
    quiet: Option<bool>,
    #[serde(default)]
    set: Vec<SetSpec>,
}

/// A set named at start and its files.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SetSpec {
    /// Its name.
    pub name: String,
    /// Keys file.
    pub keys: PathBuf,
    /// Values file.
    pub values: Option<PathBuf>,
    /// Labels file.
    pub labels: Option<PathBuf>,
    /// Weights file.
    pub weights: Option<PathBuf>,
}

impl SetSpec {
    /// Reads the set's files (.npy or .csv, checked as every input of the
    /// tool; Arrow IPC or Parquet, read by the `tables` module).
    pub fn load(&self) -> CliResult<SetData> {
        let at = |e: CliError| CliError::input(format!("set {:?}: {}", self.name, e.message()));
        let matrix = |flag: &str, p: &Path| {
            if tables::is_table(p) {
                tables::read_matrix(flag, p, flag.trim_start_matches('-')).map_err(CliError::input)
            } else {
                io::read_matrix(flag, p)
            }
        };
        // The keys in the precision the file holds, centred where that is
        // f64 (sets::Centre) and rounded as every input of the tool (CSV
        // text correctly rounded where nothing moves, errors naming the
        // entry and its line).
        let (keys, offset) = if tables::is_table(&self.keys) {
            tables::read_points("--keys", &self.keys, "keys").map_err(CliError::input)
        } else {
            io::read_points("--keys", &self.keys, false)
        }
        .and_then(|p| {
            let offset = Centre::OwnMean.offset_for(&p);
            Ok((
                points::rounded("--keys", &self.keys, p, offset.as_ref())?,
                offset,
            ))
        })
        .map_err(at)?;
        let values = self
            .values
            .as_deref()
            .map(|p| matrix("--values", p))
            .transpose()
            .map_err(at)?;
        let labels = self
            .labels
            .as_deref()
            .map(|p| {
                if tables::is_table(p) {
                    tables::read_labels("--labels", p).map_err(CliError::input)
                } else {
                    io::read_labels("--labels", p)
                }
            })
            .transpose()
            .map_err(at)?;
        let weights = match &self.weights {
            Some(p) => {
                let w = matrix("--weights", p).map_err(at)?;
                if w.ncols() != 1 {
                    return Err(CliError::input(format!(
                        "set {:?}: --weights {} must have one column (or be 1-D)",
                        self.name,
                        p.display()
                    )));
                }
                Some(w.column(0).to_owned())
            }
            None => None,
        };
        Ok(SetData {
            keys,
            offset,
            values,
            labels,
            weights,
        })
    }
}

/// The sets the flags name, in order: each `--set` starts one, and the
/// file flags after it (before the next) are its files.
fn sets_from_flags(m: &ArgMatches) -> CliResult<Vec<SetSpec>> {
    let mut flags: Vec<(usize, &str, String)> = Vec::new();
    for id in ["set", "keys", "values", "labels", "weights"] {
        let (Some(idx), Some(vals)) = (m.indices_of(id), m.get_raw(id)) else {
            continue;
        };
        for (i, v) in idx.zip(vals) {
            flags.push((i, id, v.to_string_lossy().into_owned()));
        }
    }
    flags.sort_by_key(|f| f.0);
    let mut specs: Vec<SetSpec> = Vec::new();
    let mut keys_seen = Vec::new();
    for (_, id, v) in flags {
        if id == "set" {
            specs.push(SetSpec {
                name: v,
                keys: PathBuf::new(),
                values: None,
                labels: None,
                weights: None,
            });
            keys_seen.push(false);
            continue;
        }
        let (Some(s), Some(k)) = (specs.last_mut(), keys_seen.last_mut()) else {
            return Err(CliError::input(format!(
                "--{id} {v}: name its set first (--set NAME --keys K …)"
            )));
        };
        let twice = match id {
            "keys" => std::mem::replace(k, true),
            "values" => s.values.replace(v.clone().into()).is_some(),
            "labels" => s.labels.replace(v.clone().into()).is_some(),
            _ => s.weights.replace(v.clone().into()).is_some(),
        };
        if id == "keys" {
            s.keys = v.into();
        }
        if twice {
            return Err(CliError::input(format!(
                "set {:?}: --{id} given twice",
                s.name
            )));
        }
    }
    for (s, k) in specs.iter().zip(keys_seen) {
        if !k {
            return Err(CliError::input(format!("set {:?} has no --keys", s.name)));
        }
    }
    Ok(specs)
}

/// The settled configuration.
pub struct Config {
    /// Where to listen.
    pub host: IpAddr,
    /// Port (0: any).
    pub port: u16,
    /// `--api-keys`.
    pub api_keys: Option<PathBuf>,
    /// `--insecure-no-auth`.
    pub insecure_no_auth: bool,
    /// `--tls-cert` and `--tls-key`: serve HTTPS.
    pub tls: Option<(PathBuf, PathBuf)>,
    /// The sets loaded at start.
    pub sets: Vec<SetSpec>,
    /// The default kernel.
    pub kernel: Kernel,
    /// Backend.
    pub backend: BackendArg,
    /// Engine memory limit, bytes.
    pub memory_limit: Option<u64>,
    /// `--threads`: the engine's own CPU pool (`None`: rayon's global one).
    pub threads: Option<std::num::NonZeroUsize>,
    /// How sets are prepared.
    pub set_options: KeySetOptions,
    /// `--queue-depth`.
    pub queue_depth: usize,
    /// `--max-rows`.
    pub max_rows: usize,
    /// Largest query body, bytes.
    pub body_bytes: usize,
    /// Largest upload, bytes.
    pub upload_bytes: usize,
    /// Timeouts.
    pub header_timeout: Duration,
    /// Body timeout.
    pub body_timeout: Duration,
    /// Request timeout.
    pub request_timeout: Duration,
    /// `--max-connections`.
    pub max_connections: usize,
    /// `--max-in-flight`.
    pub max_in_flight: usize,
    /// `--shutdown-delay-ms`.
    pub shutdown_delay: Duration,
    /// `--shutdown-grace-ms`.
    pub shutdown_grace: Duration,
    /// `--log-json`.
    pub log_json: bool,
    /// `--quiet`.
    pub quiet: bool,
}

/// `v` unless it is 0: `what` must be at least 1.
fn positive<T: PartialEq + Default + std::fmt::Display>(what: &str, v: T) -> CliResult<T> {
    if v == T::default() {
        return Err(CliError::input(format!("{what} must be at least 1")));
    }
    Ok(v)
}

/// `mib` MiB in bytes.
fn mib(what: &str, mib: usize) -> CliResult<usize> {
    positive(what, mib)?
        .checked_mul(1 << 20)
        .ok_or_else(|| CliError::input(format!("{what} {mib} is too large")))
}

/// Reads the TOML file, resolving its set paths against its folder.
fn read_file(path: &Path) -> CliResult<FileConfig> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| CliError::input(format!("--config {}: {e}", path.display())))?;
    let mut f: FileConfig = toml::from_str(&text)
        .map_err(|e| CliError::input(format!("--config {}: {e}", path.display())))?;
    let base = path.parent().unwrap_or(Path::new(""));
    for s in &mut f.set {
        for p in [
            Some(&mut s.keys),
            s.values.as_mut(),
            s.labels.as_mut(),
            s.weights.as_mut(),
        ]
        .into_iter()
        .flatten()
        {
            *p = base.join(&*p);
        }
    }
    for p in [&mut f.api_keys, &mut f.tls_cert, &mut f.tls_key]
        .into_iter()
        .flatten()
    {
        *p = base.join(&*p);
    }
    Ok(f)
}

impl Config {
    /// The flags over the file over the defaults.
    pub fn settle(a: &ServeArgs, m: Option<&ArgMatches>) -> CliResult<Config> {
        let f = match &a.config {
            Some(p) => read_file(p)?,
            None => FileConfig::default(),
        };
        let port = a.port.or(f.port).ok_or_else(|| {
            CliError::input("give --port P (0: any free port), or `port` in --config")
        })?;
        let mut sets = f.set;
        if let Some(m) = m {
            sets.extend(sets_from_flags(m)?);
        }
        for (i, s) in sets.iter().enumerate() {
            check_name(&s.name).map_err(CliError::input)?;
            if sets[..i].iter().any(|o| o.name == s.name) {
                return Err(CliError::input(format!("set {:?} named twice", s.name)));
            }
        }
        let tls = match (
            a.tls_cert.clone().or(f.tls_cert),
            a.tls_key.clone().or(f.tls_key),
        ) {
            (Some(cert), Some(key)) => Some((cert, key)),
            (None, None) => None,
            (Some(_), None) => return Err(CliError::input("--tls-cert needs --tls-key")),
            (None, Some(_)) => return Err(CliError::input("--tls-key needs --tls-cert")),
        };
        let profile = match (a.kernel, &f.kernel) {
            (Some(p), _) => p,
            (None, Some(s)) => {
                parse_profile(s).map_err(|e| CliError::input(format!("--config kernel: {e}")))?
            }
            (None, None) => Profile::Gaussian,
        };
        let kernel = Kernel::new(profile, a.bandwidth.or(f.bandwidth).unwrap_or(1.0))?;
        let backend = match (a.backend, &f.backend) {
            (Some(b), _) => b,
            (None, Some(s)) => {
                <BackendArg as clap::ValueEnum>::from_str(s, true).map_err(|_| {
                    CliError::input(format!("--config backend {s:?}: auto, gpu or cpu"))
                })?
            }
            (None, None) => BackendArg::Auto,
        };
        let max_rows = positive("--max-rows", a.max_rows.or(f.max_rows).unwrap_or(65_536))?;
        let batching = if a.no_batching || f.no_batching == Some(true) {
            Batching::off()
        } else {
            Batching {
                max_wait: Duration::from_micros(a.max_wait_us.or(f.max_wait_us).unwrap_or(1000)),
                ..Batching::default()
            }
        };
        let ms = |flag: Option<u64>, file: Option<u64>, default: u64| {
            Duration::from_millis(flag.or(file).unwrap_or(default))
        };
        let positive_ms = |what: &str, flag, file, default| {
            positive(what, ms(flag, file, default).as_millis())
                .map(|v| Duration::from_millis(v as u64))
        };
        Ok(Config {
            host: a.host.or(f.host).unwrap_or(IpAddr::from([127, 0, 0, 1])),
            port,
            api_keys: a.api_keys.clone().or(f.api_keys),
            insecure_no_auth: a.insecure_no_auth || f.insecure_no_auth == Some(true),
            tls,
            sets,
            kernel,
            backend,
            threads: a.threads.or(f.threads),
            memory_limit: a
                .memory_limit_mib
                .or(f.memory_limit_mib)
                .map(|m| {
                    m.checked_mul(1 << 20).ok_or_else(|| {
                        CliError::input(format!("--memory-limit-mib {m} is too large"))
                    })
                })
                .transpose()?,
            set_options: KeySetOptions {
                batching,
                max_request_rows: max_rows,
                ..KeySetOptions::default()
            },
            queue_depth: positive(
                "--queue-depth",
                a.queue_depth.or(f.queue_depth).unwrap_or(64),
            )?,
            max_rows,
            body_bytes: mib(
                "--max-body-mib",
                a.max_body_mib.or(f.max_body_mib).unwrap_or(64),
            )?,
            upload_bytes: mib(
                "--max-upload-mib",
                a.max_upload_mib.or(f.max_upload_mib).unwrap_or(1024),
            )?,
            header_timeout: positive_ms(
                "--header-timeout-ms",
                a.header_timeout_ms,
                f.header_timeout_ms,
                10_000,
            )?,
            body_timeout: positive_ms(
                "--body-timeout-ms",
                a.body_timeout_ms,
                f.body_timeout_ms,
                10_000,
            )?,
            request_timeout: positive_ms(
                "--request-timeout-ms",
                a.request_timeout_ms,
                f.request_timeout_ms,
                60_000,
            )?,
            max_connections: positive(
                "--max-connections",
                a.max_connections.or(f.max_connections).unwrap_or(256),
            )?,
            max_in_flight: positive(
                "--max-in-flight",
                a.max_in_flight.or(f.max_in_flight).unwrap_or(64),
            )?,
            shutdown_delay: ms(a.shutdown_delay_ms, f.shutdown_delay_ms, 0),
            shutdown_grace: ms(a.shutdown_grace_ms, f.shutdown_grace_ms, 30_000),
            log_json: a.log_json || f.log_json == Some(true),
            quiet: a.quiet || f.quiet == Some(true),
        })
    }

    /// Opens the engine the configuration names (`LOCUS_ADAPTER` read as
    /// by every subcommand), under the memory limit.
    pub fn engine(&self) -> CliResult<Engine> {
        if self.memory_limit.is_none() {
            return self.backend.engine(self.threads);
        }
        let mut o = EngineOptions::from_env(self.backend.device())?;
        o.memory_limit = self.memory_limit;
        o.threads = self.threads;
        Ok(Engine::with_options(o)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{FromArgMatches, Parser};

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        serve: ServeArgs,
    }

    fn settle(args: &[&str]) -> CliResult<Config> {
        let m = <Cli as clap::CommandFactory>::command()
            .try_get_matches_from(std::iter::once("serve").chain(args.iter().copied()))
            .unwrap();
        let cli = Cli::from_arg_matches(&m).unwrap();
        Config::settle(&cli.serve, Some(&m))
    }

    #[test]
    fn set_flags_group_by_the_set_before_them() {
        let c = settle(&[
            "--port", "0", "--set", "a", "--keys", "k.npy", "--values", "v.npy", "--set", "b",
            "--labels", "l.npy", "--keys", "k2.csv",
        ])
        .unwrap();
        assert_eq!(c.sets.len(), 2);
        assert_eq!(c.sets[0].values, Some("v.npy".into()));
        assert_eq!(c.sets[1].keys, PathBuf::from("k2.csv"));
        assert_eq!(c.sets[1].labels, Some("l.npy".into()));
        assert_eq!(c.sets[1].values, None);
        for bad in [
            &["--port", "0", "--keys", "k.npy"][..],
            &["--port", "0", "--set", "a"],
            &["--port", "0", "--set", "a", "--keys", "k", "--keys", "k"],
            &[
                "--port", "0", "--set", "a", "--keys", "k", "--set", "a", "--keys", "k",
            ],
            &["--port", "0", "--set", "a/b", "--keys", "k"],
            &["--set", "a", "--keys", "k"],
            &["--port", "0", "--max-rows", "0"],
            &["--port", "0", "--tls-cert", "c.pem"],
            &["--port", "0", "--tls-key", "k.pem"],
        ] {
            assert!(settle(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn flags_override_the_file_and_set_paths_follow_it() {
        let dir = std::env::temp_dir().join(format!("locus-serve-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("c.toml");
        std::fs::write(
            &path,
            "port = 8080\nmax-rows = 7\nkernel = \"uniform\"\ntls-cert = \"c.pem\"\ntls-key = \"k.pem\"\n[[set]]\nname = \"s\"\nkeys = \"k.npy\"\n",
        )
        .unwrap();
        let p = path.to_string_lossy().into_owned();
        let c = settle(&["--config", &p, "--max-rows", "9"]).unwrap();
        assert_eq!((c.port, c.max_rows), (8080, 9));
        assert_eq!(c.kernel.profile(), Profile::Uniform);
        assert_eq!(c.sets[0].keys, dir.join("k.npy"));
        assert_eq!(c.tls, Some((dir.join("c.pem"), dir.join("k.pem"))));
        std::fs::write(&path, "port = 1\nmax_rows = 7\n").unwrap();
        let e = settle(&["--config", &p]).err().unwrap();
        assert!(e.message().contains("max_rows"), "{}", e.message());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
