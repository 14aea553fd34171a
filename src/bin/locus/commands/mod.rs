//! One file per subcommand, and the [`Job`] every compute subcommand runs
//! through.
//!
//! A compute subcommand is four steps, in this order so that bad input
//! never costs a computation and a failed run never leaves a file:
//! 1. check the output paths ([`io::check_output`](crate::io::check_output))
//!    and load and cross-check the inputs (points through
//!    [`points::load`](crate::points::load), which centres float64 ones;
//!    [`Input`](crate::io::Input), [`same_rows`](crate::io::same_rows), …)
//!    — errors exit 2;
//! 2. [`Job::open`] the engine and [`Job::run`] the library call;
//! 3. [`Job::verify`] (does nothing without `--verify`);
//! 4. [`Job::finish`] with a [`Summary`] and a closure that writes the
//!    outputs: it prints the report and writes only if verification passed.

pub mod bench;
pub mod classify;
pub mod demo;
pub mod generate;
pub mod impute;
pub mod info;
pub mod kde;
pub mod kernel_matrix;
pub mod knn;
pub mod local_mean;
pub mod local_pca;
pub mod mean_shift;
pub mod medoid_shift;
pub mod select_bandwidth;
pub mod softmax;
pub mod variable;

use std::time::Instant;

use locus::Engine;

use crate::args::Compute;
use crate::error::{CliError, CliResult};
use crate::progress::Progress;
use crate::report::{Report, Summary, Verification};
use crate::verify::Deviation;

/// One run of a compute subcommand: its engine, options, time and
/// verification.
pub struct Job<'a> {
    command: &'static str,
    args: &'a Compute,
    engine: Engine,
    seconds: f64,
    verification: Option<Verification>,
}

impl<'a> Job<'a> {
    /// Opens the engine `--backend` names.
    pub fn open(command: &'static str, args: &'a Compute) -> CliResult<Job<'a>> {
        Ok(Job {
            command,
            args,
            engine: args.backend.engine(args.threads)?,
            seconds: 0.0,
            verification: None,
        })
    }

    /// Runs `op` on the job's engine, timed, with a progress bar of
    /// `steps` steps that `op` advances (iterations of an iterative op).
    pub fn run_observed<T>(
        &mut self,
        steps: u64,
        op: impl Fn(&Engine, &Progress) -> locus::Result<T>,
    ) -> CliResult<T> {
        let bar = Progress::bar(
            self.args.output.progress(),
            steps,
            format!("{} on {}", self.command, self.engine.backend().kind()),
        );
        let t = Instant::now();
        let out = op(&self.engine, &bar)?;
        self.seconds = t.elapsed().as_secs_f64();
        Ok(out)
    }

    /// The engine the job runs on.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// Runs `op` on the job's engine, timed, with a progress spinner.
    pub fn run<T>(&mut self, op: impl Fn(&Engine) -> locus::Result<T>) -> CliResult<T> {
        let (out, seconds) = timed(&self.engine, self.command, self.args, &op)?;
        self.seconds = seconds;
        Ok(out)
    }

    /// Seconds the last [`run`](Self::run) took.
    pub fn seconds(&self) -> f64 {
        self.seconds
    }

    /// With `--verify`: runs `op` on the other backend (the CPU for a GPU
    /// job, any GPU adapter for a CPU job) and keeps `compare`'s verdict on
    /// the two results. Without it, does nothing.
    pub fn verify<T>(
        &mut self,
        op: impl Fn(&Engine) -> locus::Result<T>,
        compare: impl FnOnce(&T) -> Deviation,
    ) -> CliResult<()> {
        if !self.args.verify {
            return Ok(());
        }
        let other = if self.engine.backend().is_gpu() {
            Engine::cpu()
        } else {
            Engine::gpu().map_err(|e| {
                CliError::compute(format!(
                    "--verify: no GPU to compare the CPU result with: {e}"
                ))
            })?
        };
        let (result, seconds) = timed(&other, self.command, self.args, &op)?;
        self.verification = Some(Verification {
            backend: other.backend().clone(),
            seconds,
            deviation: compare(&result),
        });
        Ok(())
    }

    /// Writes the outputs with `write` (unless verification failed), then
    /// prints the report. A failed verification is an error (exit 1) and
    /// writes nothing.
    pub fn finish(
        self,
        mut summary: Summary,
        write: impl FnOnce() -> CliResult<()>,
    ) -> CliResult<()> {
        if let Some(why) = self.engine.fallback_reason() {
            summary
                .fields
                .push(("gpu_fallback_reason", serde_json::json!(why)));
        }
        let failed = self
            .verification
            .as_ref()
            .filter(|v| !v.deviation.ok)
            .cloned();
        if failed.is_some() {
            summary.outputs.clear();
        } else {
            crate::atomic::write_all_or_nothing(write)?;
        }
        let report = Report {
            command: self.command,
            backend: self.engine.backend().clone(),
            seconds: self.seconds,
            summary,
            verify: self.verification,
        };
        report.print(&self.args.output);
        match failed {
            Some(v) => Err(CliError::compute(format!(
                "--verify: {} and {} disagree beyond the tolerance: {}; no output written",
                report.backend.kind(),
                v.backend.kind(),
                v.deviation
            ))),
            None => Ok(()),
        }
    }
}

/// Runs `op` on `engine` under a spinner; returns its result and seconds.
fn timed<T>(
    engine: &Engine,
    command: &str,
    args: &Compute,
    op: &impl Fn(&Engine) -> locus::Result<T>,
) -> CliResult<(T, f64)> {
    let _spinner = Progress::spinner(
        args.output.progress(),
        format!("{command} on {}", engine.backend().kind()),
    );
    let t = Instant::now();
    let out = op(engine)?;
    Ok((out, t.elapsed().as_secs_f64()))
}

/// Pair evaluations per second (`M·N / seconds`), for reports.
pub fn pairs_per_second(m: usize, n: usize, seconds: f64) -> f64 {
    m as f64 * n as f64 / seconds.max(1e-9)
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use super::*;
    use crate::args::{BackendArg, Output};
    use crate::error::EXIT_COMPUTE;
    use crate::verify::Tolerance;

    fn args(verify: bool) -> Compute {
        Compute {
            backend: BackendArg::Cpu,
            verify,
            threads: None,
            output: Output {
                json: false,
                quiet: true,
            },
        }
    }

    #[test]
    fn failed_verification_exits_1_and_writes_nothing() {
        let a = args(true);
        let mut job = Job::open("test", &a).unwrap();
        job.verification = Some(Verification {
            backend: Engine::cpu().backend().clone(),
            seconds: 0.0,
            deviation: Deviation {
                max_abs: 1.0,
                max_rel: 1.0,
                ok: false,
                tolerance: Tolerance::MATRIX,
            },
        });
        let wrote = Cell::new(false);
        let err = job
            .finish(Summary::default(), || {
                wrote.set(true);
                Ok(())
            })
            .unwrap_err();
        assert_eq!(err.code(), EXIT_COMPUTE);
        assert!(!wrote.get());
    }

    #[test]
    fn without_verify_the_job_runs_and_writes() {
        let a = args(false);
        let mut job = Job::open("test", &a).unwrap();
        assert_eq!(job.run(|e| Ok(e.backend().kind())).unwrap(), "cpu");
        job.verify(|_| Ok(()), |_| unreachable!("--verify was not given"))
            .unwrap();
        let wrote = Cell::new(false);
        job.finish(Summary::default(), || {
            wrote.set(true);
            Ok(())
        })
        .unwrap();
        assert!(wrote.get());
    }
}
