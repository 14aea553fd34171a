//! Progress on stderr for work that takes more than about a second.
//!
//! A [`Progress`] stays invisible for its first second, so quick runs
//! print nothing; it is never drawn with `--quiet` or `--json`, or when
//! stderr is not a terminal (see [`Output::progress`](crate::args::Output::progress)).

use std::borrow::Cow;
use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// How long work runs before its progress appears.
const DELAY: Duration = Duration::from_secs(1);
/// Redraw interval of a visible bar or spinner.
const TICK: Duration = Duration::from_millis(120);

/// A spinner (work of unknown length) or a bar (`n` steps) on stderr,
/// cleared when dropped.
pub struct Progress {
    bar: ProgressBar,
    reveal: Option<(Sender<()>, JoinHandle<()>)>,
}

impl Progress {
    /// A spinner with a message and the elapsed time, for one long call.
    pub fn spinner(enabled: bool, message: impl Into<Cow<'static, str>>) -> Progress {
        let style = ProgressStyle::with_template("{spinner} {msg} ({elapsed})")
            .unwrap_or_else(|_| ProgressStyle::default_spinner());
        Progress::start(enabled, ProgressBar::new_spinner(), style, message)
    }

    /// A bar of `steps` steps, advanced with [`inc`](Self::inc).
    pub fn bar(enabled: bool, steps: u64, message: impl Into<Cow<'static, str>>) -> Progress {
        let style =
            ProgressStyle::with_template("{msg} [{bar:30}] {pos}/{len} ({elapsed}, ~{eta} left)")
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> ");
        Progress::start(enabled, ProgressBar::new(steps), style, message)
    }

    fn start(
        enabled: bool,
        bar: ProgressBar,
        style: ProgressStyle,
        message: impl Into<Cow<'static, str>>,
    ) -> Progress {
        bar.set_draw_target(ProgressDrawTarget::hidden());
        bar.set_style(style);
        bar.set_message(message);
        if !enabled {
            return Progress { bar, reveal: None };
        }
        // Shown only if the work is still running after DELAY.
        let (tx, rx) = mpsc::channel::<()>();
        let shown = bar.clone();
        // No thread (a memory cap): the bar stays hidden.
        let waiter = thread::Builder::new().spawn(move || {
            if let Err(RecvTimeoutError::Timeout) = rx.recv_timeout(DELAY) {
                shown.set_draw_target(ProgressDrawTarget::stderr());
                shown.enable_steady_tick(TICK);
            }
        });
        Progress {
            bar,
            reveal: waiter.ok().map(|w| (tx, w)),
        }
    }

    /// Advances a bar by `n` steps.
    pub fn inc(&self, n: u64) {
        self.bar.inc(n);
    }

    /// Replaces the message.
    pub fn set_message(&self, message: impl Into<Cow<'static, str>>) {
        self.bar.set_message(message);
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        if let Some((tx, waiter)) = self.reveal.take() {
            let _ = tx.send(());
            let _ = waiter.join();
        }
        self.bar.finish_and_clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hidden_progress_costs_nothing_and_drops_cleanly() {
        let p = Progress::bar(false, 3, "work");
        p.inc(2);
        p.set_message("more work");
        drop(p);
        // Enabled but finished before the delay: never drawn, no wait.
        let t = std::time::Instant::now();
        drop(Progress::spinner(true, "quick"));
        assert!(t.elapsed() < DELAY);
    }
}
