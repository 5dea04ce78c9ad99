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
    /// Quick start: address to listen on, IP:port (repeatable) [default: 127.0.0.1:6033].
    #[arg(long)]
    listen: Vec<String>,
    /// Quick start: the backend server, host:port (port 3306 when left out), or the path of its
    /// Unix socket.
    #[arg(long)]
    backend: Option<String>,
    /// Quick start: the login clients use, and sluice uses on the backend [default: root].
    #[arg(long)]
    user: Option<String>,
    /// Quick start: that login's password.
    #[arg(long, default_value = "")]
    password: String,
    /// Worker threads (default: config, else the number of cores).
    #[arg(long)]
    workers: Option<usize>,
    /// Runtime kind (default: config, else steal).
    #[arg(long, value_enum)]
    runtime: Option<RuntimeKind>,
    /// Socket I/O: auto (io_uring on per-core workers where the kernel allows it) or epoll
    /// (default: config, else auto).
    #[arg(long, value_enum)]
    io: Option<config::IoEngine>,
    /// The admin SQL port, IP:port (overrides the config, default 127.0.0.1:6032; "" turns it off).
    #[arg(long)]
    admin_listen: Option<String>,
    /// The HTTP port: metrics, health, dashboard (overrides the config, default 127.0.0.1:6070;
    /// "" turns it off).
    #[arg(long)]
    http_listen: Option<String>,
    /// Replace the configuration saved in the datadir (SAVE … TO DISK) with the file's; without
    /// it, a saved configuration wins over the file (docs/admin.md).
    #[arg(long)]
    initial: bool,
    /// Check the configuration as start-up does (files, certificates, datadir; no ports bound)
    /// and exit: 0 if it is good, 2 if not.
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
    let overrides = config::Overrides {
        workers: args.workers,
        runtime: args.runtime,
        io: args.io,
        admin_listen: args.admin_listen.clone(),
        http_listen: args.http_listen.clone(),
    };
    // Whatever its source, the configuration is checked with the command line over it.
    let loaded = match (&args.config, &args.backend) {
        (Some(path), _) => config::load_file(path, &overrides),
        (None, Some(backend)) => config::quick_start(args.listen.clone(), backend, args.user.as_deref().unwrap_or("root"), &args.password)
            .and_then(|c| c.to_file().resolve(&overrides, None, None)),
        (None, None) => {
            eprintln!("sluice: give --config FILE, or --backend HOST:PORT --user NAME [--password PW] [--listen ADDR]");
            return ExitCode::from(2);
        }
    };
    let config = match loaded {
        Ok(c) => c,
        Err(e) => {
            eprintln!("sluice: bad configuration: {e}");
            return ExitCode::from(2);
        }
    };
    if args.check {
        if let Some(db) = config.proxy.datadir.as_ref().map(|d| d.join("sluice.db")).filter(|db| db.exists() && !args.initial) {
            eprintln!(
                "sluice: note: a configuration saved in {} (SAVE … TO DISK) wins over the file at start-up; --check does not read it",
                db.display()
            );
        }
        println!("configuration OK");
        return ExitCode::SUCCESS;
    }
    // Caught from here on: a SIGHUP while starting would otherwise end the process.
    let signals = match Signals::install() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("sluice: cannot start: signal handlers: {e}");
            return ExitCode::from(1);
        }
    };
    let options =
        sluice::admin::startup::StartOptions { initial: args.initial, config_file: args.config.clone(), overrides: overrides.clone() };
    let server = match sluice::Server::start_with(config, &options) {
        Ok(s) => s,
        Err(e) => {
            // A configuration problem found at start-up (the one saved in the datadir) exits as a
            // bad file does; anything else (a port in use) is a failure to start.
            if let Some(bad) = e.downcast_ref::<config::ConfigError>() {
                eprintln!("sluice: bad configuration: {bad}");
                return ExitCode::from(2);
            }
            eprintln!("sluice: cannot start: {e:#}");
            return ExitCode::from(1);
        }
    };
    signals.wait(|| {
        if let Some(path) = &args.config {
            reload(&server, path, &overrides);
        }
    });
    tracing::info!("shutting down: no new connections; letting in-flight statements finish");
    server.shutdown();
    tracing::info!("stopped");
    ExitCode::SUCCESS
}

/// SIGTERM, SIGINT and SIGHUP, on a small runtime of their own.
struct Signals {
    rt: tokio::runtime::Runtime,
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
    hup: tokio::signal::unix::Signal,
}

impl Signals {
    fn install() -> std::io::Result<Signals> {
        use tokio::signal::unix::{signal, SignalKind};
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        let (term, int, hup) = {
            let _in_rt = rt.enter();
            (signal(SignalKind::terminate())?, signal(SignalKind::interrupt())?, signal(SignalKind::hangup())?)
        };
        Ok(Signals { rt, term, int, hup })
    }

    /// Waits for SIGTERM or SIGINT, calling `on_hup` at each SIGHUP meanwhile.
    fn wait(self, mut on_hup: impl FnMut()) {
        let Signals { rt, mut term, mut int, mut hup } = self;
        rt.block_on(async {
            loop {
                tokio::select! {
                    _ = term.recv() => return,
                    _ = int.recv() => return,
                    _ = hup.recv() => on_hup(),
                }
            }
        });
    }
}

/// SIGHUP: the whole file goes live if it is valid and can be put in force (its ports bound);
/// otherwise the error is logged and the running configuration stays.
fn reload(server: &sluice::Server, path: &std::path::Path, overrides: &config::Overrides) {
    let config = match config::load_file(path, overrides) {
        Ok(c) => c,
        Err(e) => return tracing::error!("reload rejected, running configuration kept: {e}"),
    };
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
