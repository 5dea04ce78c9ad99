//! The `sluice` command: load the config (file or quick-start flags), run until SIGTERM/SIGINT;
//! SIGHUP re-reads the file and puts it in force (a bad file is rejected and the running
//! configuration stays); the admin tables then show it.

#[cfg(feature = "jemalloc")]
#[global_allocator]
static ALLOC: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// jemalloc returns freed pages to the system from a background thread, a second after they fall
/// free (a burst of connections leaves nothing resident behind).
#[cfg(feature = "jemalloc")]
#[allow(non_upper_case_globals)]
#[export_name = "_rjem_malloc_conf"]
pub static malloc_conf: &[u8] = b"background_thread:true,dirty_decay_ms:1000,muzzy_decay_ms:0\0";

#[cfg(feature = "mimalloc")]
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

use clap::Parser;
use sluice::config::{self, RuntimeKind};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser, Debug)]
#[command(name = "sluice", version, about = "A MySQL/MariaDB-protocol database proxy")]
struct Args {
    /// TOML configuration file.
    #[arg(long, short = 'c')]
    config: Option<PathBuf>,
    /// Quick start: address to listen on (repeatable).
    #[arg(long)]
    listen: Vec<String>,
    /// Quick start: the backend server, host:port.
    #[arg(long)]
    backend: Option<String>,
    /// Quick start: the login clients use, and sluice uses on the backend.
    #[arg(long)]
    user: Option<String>,
    /// Quick start: that login's password.
    #[arg(long, default_value = "")]
    password: String,
    /// Worker threads (default: config, else the number of cores).
    #[arg(long)]
    workers: Option<usize>,
    /// Runtime kind (default: config, else per-core).
    #[arg(long, value_enum)]
    runtime: Option<RuntimeKind>,
    /// The admin SQL port (overrides the config; "" turns it off).
    #[arg(long)]
    admin_listen: Option<String>,
    /// The HTTP port: metrics, health, dashboard (overrides the config; "" turns it off).
    #[arg(long)]
    http_listen: Option<String>,
    /// Replace the configuration saved in the datadir (SAVE … TO DISK) with the file's; without
    /// it, a saved configuration wins over the file (docs/admin.md).
    #[arg(long)]
    initial: bool,
    /// Check the configuration and exit.
    #[arg(long)]
    check: bool,
}

fn main() -> ExitCode {
    let args = Args::parse();
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_env("SLUICE_LOG").unwrap_or_else(|_| "info".into()))
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let loaded = match (&args.config, &args.backend) {
        (Some(path), _) => config::load_file(path),
        (None, Some(backend)) => config::quick_start(args.listen.clone(), backend, args.user.as_deref().unwrap_or("root"), &args.password),
        (None, None) => {
            eprintln!("sluice: give --config FILE, or --backend HOST:PORT --user NAME [--password PW] [--listen ADDR]");
            return ExitCode::from(2);
        }
    };
    let mut config = match loaded {
        Ok(c) => c,
        Err(e) => {
            eprintln!("sluice: bad configuration: {e}");
            return ExitCode::from(2);
        }
    };
    if args.workers == Some(0) {
        eprintln!("sluice: bad configuration: --workers must be at least 1");
        return ExitCode::from(2);
    }
    for (flag, given) in [("--admin-listen", &args.admin_listen), ("--http-listen", &args.http_listen)] {
        if let Some(addr) = given.as_deref().filter(|a| !a.is_empty() && a.parse::<std::net::SocketAddr>().is_err()) {
            eprintln!("sluice: bad configuration: {flag}: `{addr}` is not an IP:port address (\"\" turns it off)");
            return ExitCode::from(2);
        }
    }
    let overrides = config::Overrides {
        workers: args.workers,
        runtime: args.runtime,
        admin_listen: args.admin_listen.clone(),
        http_listen: args.http_listen.clone(),
    };
    overrides.apply(&mut config);
    if args.check {
        println!("configuration OK");
        return ExitCode::SUCCESS;
    }
    let options =
        sluice::admin::startup::StartOptions { initial: args.initial, config_file: args.config.clone(), overrides: overrides.clone() };
    let server = match sluice::Server::start_with(config, &options) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("sluice: cannot start: {e:#}");
            return ExitCode::from(1);
        }
    };
    wait_for_signal(|| {
        if let Some(path) = &args.config {
            reload(&server, path, &overrides);
        }
    });
    tracing::info!("shutting down: no new connections; letting in-flight statements finish");
    server.shutdown();
    tracing::info!("stopped");
    ExitCode::SUCCESS
}

/// Waits for SIGTERM or SIGINT, calling `on_hup` at each SIGHUP meanwhile.
fn wait_for_signal(mut on_hup: impl FnMut()) {
    let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(_) => return,
    };
    rt.block_on(async {
        use tokio::signal::unix::{signal, SignalKind};
        let (Ok(mut term), Ok(mut int), Ok(mut hup)) =
            (signal(SignalKind::terminate()), signal(SignalKind::interrupt()), signal(SignalKind::hangup()))
        else {
            return;
        };
        loop {
            tokio::select! {
                _ = term.recv() => return,
                _ = int.recv() => return,
                _ = hup.recv() => on_hup(),
            }
        }
    });
}

/// SIGHUP: the whole file goes live if it is valid and can be put in force (its ports bound);
/// otherwise the error is logged and the running configuration stays.
fn reload(server: &sluice::Server, path: &std::path::Path, overrides: &config::Overrides) {
    let mut config = match config::load_file(path) {
        Ok(c) => c,
        Err(e) => return tracing::error!("reload rejected, running configuration kept: {e}"),
    };
    overrides.apply(&mut config);
    match sluice::admin::startup::apply_file(&server.admin, config) {
        Ok(applied) => {
            tracing::info!(file = %path.display(), "reload: configuration in force");
            for setting in applied.need_restart {
                tracing::warn!("reload: {setting} changes at the next start");
            }
        }
        Err(e) => tracing::error!("reload rejected, running configuration kept: {}: {e}", path.display()),
    }
}
