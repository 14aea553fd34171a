//! Which GPU adapter an engine opens: the adapter policy (an explicit
//! choice by index or name, hardware first, software adapters only when
//! allowed, refused when hardware is required).

use crate::backend::BackendInfo;
use crate::error::{Error, Result};

use super::context;

/// Which GPU adapter to open: by its index in [`Engine::adapters`](crate::Engine::adapters) or by a
/// case-insensitive substring of its name. Parsed from `LOCUS_ADAPTER`:
/// digits are an index, anything else a name.
///
/// ```
/// use locus::AdapterChoice;
/// assert_eq!("1".parse::<AdapterChoice>(), Ok(AdapterChoice::Index(1)));
/// assert_eq!("H200".parse::<AdapterChoice>(), Ok(AdapterChoice::Name("H200".into())));
/// assert!(" ".parse::<AdapterChoice>().is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AdapterChoice {
    /// Position in the list of [`Engine::adapters`](crate::Engine::adapters), from 0.
    Index(usize),
    /// A substring of the adapter's name, compared case-insensitively.
    Name(String),
}

impl std::str::FromStr for AdapterChoice {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        let t = s.trim();
        if t.is_empty() {
            return Err(Error::InvalidParameter {
                name: "adapter",
                reason: "empty; give an index from `locus info` or part of an adapter's name"
                    .into(),
            });
        }
        if t.bytes().all(|b| b.is_ascii_digit()) {
            return t
                .parse()
                .map(AdapterChoice::Index)
                .map_err(|_| Error::InvalidParameter {
                    name: "adapter",
                    reason: format!("index {t} is too large"),
                });
        }
        Ok(AdapterChoice::Name(t.to_string()))
    }
}

impl std::fmt::Display for AdapterChoice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AdapterChoice::Index(i) => write!(f, "index {i}"),
            AdapterChoice::Name(n) => write!(f, "name containing {n:?}"),
        }
    }
}

/// What [`choose`] may open.
#[derive(Debug, Clone, Copy)]
pub(crate) struct AdapterPolicy<'a> {
    /// The adapter asked for (`None`: the best one).
    pub choice: Option<&'a AdapterChoice>,
    /// Refuse software adapters, even when asked for by name or index.
    pub require_hardware: bool,
    /// Without a choice, take a software adapter when it is the best there is.
    pub accept_software: bool,
    /// Finding nothing is an error (rather than `None`, "use the CPU").
    pub required: bool,
}

/// The adapter `policy` selects among those wgpu lists (best first), or
/// `None` when there is none to take and none is required.
///
/// # Errors
/// [`Error::AdapterNotFound`] when the choice matches nothing;
/// [`Error::SoftwareAdapter`] when hardware is required and only software
/// is there (or chosen); [`Error::NoAdapter`] when one is required and
/// wgpu finds none.
pub(crate) fn choose(policy: &AdapterPolicy<'_>) -> Result<Option<wgpu::Adapter>> {
    let adapters = context::list_adapters();
    let chosen = match policy.choice {
        Some(choice) => Some(pick_adapter(&adapters, choice)?),
        None => adapters.iter().find(|a| {
            !context::is_software(&a.get_info())
                || (!policy.require_hardware && policy.accept_software)
        }),
    };
    let Some(adapter) = chosen else {
        if policy.required {
            if let (true, Some(a)) = (policy.require_hardware, adapters.first()) {
                return Err(Error::SoftwareAdapter {
                    adapter: a.get_info().name,
                });
            }
            return Err(Error::NoAdapter {
                backends: format!("{:?}", context::BACKENDS),
            });
        }
        return Ok(None);
    };
    let info = adapter.get_info();
    if policy.require_hardware && context::is_software(&info) {
        return Err(Error::SoftwareAdapter { adapter: info.name });
    }
    Ok(Some(adapter.clone()))
}

/// Every adapter wgpu can see, best first.
pub(crate) fn describe_all() -> Vec<BackendInfo> {
    context::list_adapters()
        .iter()
        .map(|a| context::describe(&a.get_info()))
        .collect()
}

/// The adapter `choice` names among `adapters` (best first).
fn pick_adapter<'a>(
    adapters: &'a [wgpu::Adapter],
    choice: &AdapterChoice,
) -> Result<&'a wgpu::Adapter> {
    let found = match choice {
        AdapterChoice::Index(i) => adapters.get(*i),
        AdapterChoice::Name(n) => {
            let n = n.to_lowercase();
            adapters
                .iter()
                .find(|a| a.get_info().name.to_lowercase().contains(&n))
        }
    };
    found.ok_or_else(|| Error::AdapterNotFound {
        wanted: choice.to_string(),
        available: if adapters.is_empty() {
            "none".into()
        } else {
            adapters
                .iter()
                .enumerate()
                .map(|(i, a)| format!("{i}: {}", a.get_info().name))
                .collect::<Vec<_>>()
                .join(", ")
        },
    })
}

/// A context on any adapter (lavapipe included) for the GPU module's
/// tests, its pipeline cache in `cache_dir` (none: in memory only, cold
/// whatever other tests compiled); `None` (skipped) when there is no
/// adapter, except under `CI=true`, where that fails.
#[cfg(test)]
pub(crate) fn test_context(
    cache_dir: Option<&std::path::Path>,
) -> Option<crate::gpu::context::GpuContext> {
    use crate::gpu::context::GpuContext;
    use crate::gpu::plan::TileLimits;
    let policy = AdapterPolicy {
        choice: None,
        require_hardware: false,
        accept_software: true,
        required: true,
    };
    let adapter = match choose(&policy) {
        Ok(a) => a.expect("required"),
        Err(Error::NoAdapter { .. }) if std::env::var("CI").as_deref() != Ok("true") => {
            eprintln!("SKIPPED: no GPU adapter; GPU module tests not run");
            return None;
        }
        Err(e) => panic!("GPU adapter required (CI=true) but unavailable: {e}"),
    };
    Some(
        GpuContext::open(
            &adapter,
            TileLimits::default(),
            None,
            16 << 20,
            false,
            cache_dir,
        )
        .expect("device opens"),
    )
}
