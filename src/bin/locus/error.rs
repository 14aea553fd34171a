//! What can go wrong in the tool, and the exit status each kind maps to.
//!
//! The contract: one line on stderr; exit 2 for bad usage or bad input
//! (nothing was computed), 1 for a failure while computing or writing
//! (including a `--verify` that found the backends disagreeing).

use std::fmt;
use std::process::ExitCode;

use locus::Error;

/// Exit status of bad usage or bad input.
pub const EXIT_INPUT: u8 = 2;
/// Exit status of a failure while computing, verifying or writing.
pub const EXIT_COMPUTE: u8 = 1;

/// An error the tool reports: a one-line message and an exit status.
#[derive(Debug)]
pub struct CliError {
    code: u8,
    message: String,
}

/// Result of the tool's steps.
pub type CliResult<T> = Result<T, CliError>;

impl CliError {
    /// Bad usage or input (exit 2).
    pub fn input(message: impl fmt::Display) -> Self {
        CliError {
            code: EXIT_INPUT,
            message: message.to_string(),
        }
    }

    /// A failure while computing, verifying or writing (exit 1).
    pub fn compute(message: impl fmt::Display) -> Self {
        CliError {
            code: EXIT_COMPUTE,
            message: message.to_string(),
        }
    }

    /// The message.
    #[cfg(any(test, feature = "serve"))]
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The exit status: [`EXIT_INPUT`] or [`EXIT_COMPUTE`].
    pub fn code(&self) -> u8 {
        self.code
    }

    /// Prints the message (one line) and returns the exit status.
    pub fn report(&self) -> ExitCode {
        eprintln!("error: {}", one_line(&self.message));
        ExitCode::from(self.code())
    }
}

impl From<Error> for CliError {
    /// Invalid data or parameters are input errors; everything that
    /// happens on a device (or an allocation that fails) is a compute error.
    fn from(e: Error) -> Self {
        match e {
            Error::InvalidBandwidth { .. }
            | Error::UnknownProfile { .. }
            | Error::DimensionMismatch { .. }
            | Error::KernelDimension { .. }
            | Error::RowMismatch { .. }
            | Error::EmptyInput { .. }
            | Error::NonFinite { .. }
            | Error::InvalidParameter { .. }
            | Error::Rank { .. }
            | Error::BatchMismatch { .. }
            | Error::CausalShape { .. }
            | Error::NegativeFeature { .. }
            | Error::LogitOverflow { .. }
            | Error::AdapterNotFound { .. }
            | Error::Cluster(_) => CliError::input(e),
            _ => CliError::compute(e),
        }
    }
}

/// Joins a multi-line message into one line.
pub fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Prints a command-line parsing error as one line (exit 2), or help and
/// version text as clap renders it (exit 0).
pub fn clap_exit(e: clap::Error) -> ExitCode {
    if !e.use_stderr() {
        // --help, --version: not errors.
        let _ = e.print();
        return ExitCode::SUCCESS;
    }
    if e.kind() == clap::error::ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
        // Bare `locus`: the help, on stderr, as a usage error.
        let _ = e.print();
        return ExitCode::from(EXIT_INPUT);
    }
    // clap renders "error: …", details, a blank line, then usage; keep the
    // first paragraph, joined.
    let text = e.render().to_string();
    let first = text.split("\n\n").next().unwrap_or_default();
    let msg = one_line(first.trim_start_matches("error:"));
    eprintln!("error: {msg} (see --help)");
    ExitCode::from(EXIT_INPUT)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn library_errors_map_to_exit_codes() {
        let input: CliError = Error::InvalidBandwidth { value: -1.0 }.into();
        assert_eq!(input.code, EXIT_INPUT);
        let compute: CliError = Error::DeviceLost {
            reason: "gone".into(),
        }
        .into();
        assert_eq!(compute.code, EXIT_COMPUTE);
    }

    #[test]
    fn messages_become_one_line() {
        assert_eq!(one_line("a\n  b\tc\n"), "a b c");
    }
}
