//! `locus serve`: an HTTP service over named key sets (feature `serve`).
//!
//! Layout: `config` (flags, TOML file, the sets named at start), `sets`
//! (the registry of prepared sets), `wire` (JSON and `.npy` requests and
//! answers), `handlers` (the routes), `app` (shared state, errors, the
//! compute permits), `auth` (API keys), `metrics` (counters and the
//! request log), `http` (connections, bodies, the layers), `protocol`
//! (JSON bodies on hyper's own error answers), `tls` (HTTPS), `schema`
//! (each op's parameters and answer fields), `openapi` (the API's
//! OpenAPI description, from `schema`). docs/serve.md describes
//! the API.
//!
//! Start-up: the address is bound and printed (`listening on
//! http://ADDR`, the first line on stdout), `/livez` answers at once and
//! `/readyz` 503 until the sets named at start are prepared (a set that
//! fails to load stops the service, exit 2). SIGTERM or SIGINT: `/readyz`
//! turns 503, new connections are still taken for `--shutdown-delay-ms`,
//! then none; the requests in flight finish (up to
//! `--shutdown-grace-ms`) and the process exits 0.
//!
//! Imports: `super::{app, auth, config, handlers, http, openapi, sets, tls}` (its
//! children), `crate::error`.

mod app;
mod arrow;
mod auth;
pub mod config;
mod field;
mod handlers;
mod http;
mod metrics;
mod openapi;
mod protocol;
mod schema;
mod sets;
mod tables;
mod tls;
mod wire;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::middleware;
use axum::routing::{get, post, put};
use clap::ArgMatches;

use crate::error::{CliError, CliResult, EXIT_INPUT};
use app::{App, AppParts, Phase};
use auth::Keys;
pub use config::ServeArgs;
use config::{Config, SetSpec};
use http::{Connections, Limits};
use metrics::Metrics;

/// Runs `locus serve` until a shutdown signal; `m` holds the flags'
/// positions, which group the set flags by `--set`.
pub fn run(a: &ServeArgs, m: Option<&ArgMatches>) -> CliResult<()> {
    if a.print_openapi {
        println!("{}", openapi::pretty());
        return Ok(());
    }
    let c = Config::settle(a, m)?;
    let env = std::env::var_os("LOCUS_API_KEYS")
        .map(|v| {
            v.into_string()
                .map_err(|_| CliError::input("LOCUS_API_KEYS is not UTF-8"))
        })
        .transpose()?;
    let keys = Keys::configured(c.api_keys.as_deref(), env.as_deref()).map_err(CliError::input)?;
    if !keys.enabled() {
        if !c.host.is_loopback() && !c.insecure_no_auth {
            return Err(CliError::input(format!(
                "no --api-keys or LOCUS_API_KEYS: refusing to serve on {}, which is not a \
                 loopback address (give --api-keys FILE, or --insecure-no-auth)",
                c.host
            )));
        }
        eprintln!(
            "warning: no API keys (--api-keys, LOCUS_API_KEYS): whoever reaches {} may query and change the sets",
            c.host
        );
    }
    let tls = match &c.tls {
        Some((cert, key)) => Some(tls::acceptor(cert, key).map_err(CliError::input)?),
        None => None,
    };
    let engine = c.engine()?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| CliError::compute(format!("cannot start the runtime: {e}")))?;
    rt.block_on(serve(c, keys, tls, engine))
}

/// The routes and their layers (outermost last: every answer is counted,
/// every error has a JSON body, the key is checked before the body is read).
fn router(app: Arc<App>, keys: Keys, limits: Limits) -> Router {
    Router::new()
        .route("/v1/sets", get(handlers::list_sets))
        .route(
            "/v1/sets/{name}",
            put(handlers::put_set)
                .delete(handlers::delete_set)
                .get(handlers::get_set),
        )
        .route("/v1/sets/{name}/{op}", post(handlers::query))
        .route("/v1/mean-shift", post(handlers::mean_shift))
        .route("/livez", get(handlers::livez))
        .route("/readyz", get(handlers::readyz))
        .route("/metrics", get(handlers::metrics))
        .route("/openapi.json", get(handlers::openapi))
        .with_state(Arc::clone(&app))
        // The guard reads every body under its limit itself.
        .layer(DefaultBodyLimit::disable())
        .layer(middleware::from_fn_with_state(limits, http::guard))
        .layer(middleware::from_fn_with_state(
            Arc::new(keys),
            auth::require,
        ))
        .layer(middleware::from_fn(http::json_errors))
        .layer(middleware::from_fn_with_state(app, http::observe))
}

/// `e` about set `name`, with `e`'s exit status.
fn set_error(name: &str, e: locus::Error) -> CliError {
    let message = format!("set {name:?}: {e}");
    if CliError::from(e).code() == EXIT_INPUT {
        CliError::input(message)
    } else {
        CliError::compute(message)
    }
}

/// Prepares the sets named at start, then marks the service ready.
fn load_sets(app: &App, specs: &[SetSpec]) -> CliResult<()> {
    for s in specs {
        let entry = s
            .load()?
            .build(&app.engine, app.set_options, app.queue_depth)
            .map_err(|e| set_error(&s.name, e))?;
        eprintln!(
            "set {:?}: {} keys (d = {}){}{}{}",
            s.name,
            entry.set.rows(),
            entry.set.dim(),
            entry
                .set
                .value_cols()
                .map_or(String::new(), |q| format!(", {q} value columns")),
            entry
                .set
                .classes()
                .map_or(String::new(), |c| format!(", {c} classes")),
            if entry.weighted.is_some() {
                ", weighted"
            } else {
                ""
            },
        );
        app.sets.insert(s.name.clone(), entry);
    }
    app.set_phase(Phase::Ready);
    Ok(())
}

async fn serve(
    c: Config,
    keys: Keys,
    tls: Option<tokio_rustls::TlsAcceptor>,
    engine: locus::Engine,
) -> CliResult<()> {
    let addr = SocketAddr::new(c.host, c.port);
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| CliError::input(format!("cannot listen on {addr}: {e}")))?;
    let local = listener.local_addr().unwrap_or(addr);
    eprintln!("backend: {}", engine.backend());
    let app = Arc::new(App::new(AppParts {
        engine,
        kernel: c.kernel,
        set_options: c.set_options,
        queue_depth: c.queue_depth,
        max_rows: c.max_rows,
        max_in_flight: c.max_in_flight,
        request_timeout: c.request_timeout,
        metrics: Metrics::new(c.log_json, c.quiet),
    }));
    let limits = Limits {
        request_timeout: c.request_timeout,
        body_timeout: c.body_timeout,
        max_rows: c.max_rows,
        body_bytes: c.body_bytes,
        upload_bytes: c.upload_bytes,
    };
    let router = router(Arc::clone(&app), keys, limits);
    let scheme = if tls.is_some() { "https" } else { "http" };
    println!("listening on {scheme}://{local}");
    use std::io::Write;
    let _ = std::io::stdout().flush();

    let failed: Arc<Mutex<Option<CliError>>> = Arc::default();
    let load = {
        let (app, specs) = (Arc::clone(&app), c.sets.clone());
        tokio::task::spawn_blocking(move || load_sets(&app, &specs))
    };
    let stop = {
        let (app, failed) = (Arc::clone(&app), Arc::clone(&failed));
        let delay = c.shutdown_delay;
        async move {
            let load_failed = async {
                let e = match load.await {
                    Ok(Ok(())) => return std::future::pending().await,
                    Ok(Err(e)) => e,
                    Err(e) => CliError::compute(format!("loading the sets: {e}")),
                };
                *failed.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
            };
            tokio::select! {
                _ = http::shutdown_signal() => {},
                _ = load_failed => return,
            }
            app.set_phase(Phase::Draining);
            eprintln!(
                "shutting down: /readyz answers 503; new connections taken for {} ms more",
                delay.as_millis()
            );
            tokio::time::sleep(delay).await;
        }
    };
    let connections = Connections {
        header_timeout: c.header_timeout,
        max_connections: c.max_connections,
        grace: c.shutdown_grace,
        tls,
    };
    http::serve(listener, router, connections, stop).await;
    if let Some(e) = failed.lock().unwrap_or_else(|p| p.into_inner()).take() {
        return Err(e);
    }
    eprintln!("stopped");
    Ok(())
}
