//! The `sluice` command: load the config (file or quick-start flags), run until SIGTERM/SIGINT;
//! SIGHUP re-reads the file's query rules (a bad file is rejected and the running rules stay).

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
    if let Some(w) = args.workers {
        if w == 0 {
            eprintln!("sluice: bad configuration: --workers must be at least 1");
            return ExitCode::from(2);
        }
        config.workers = w;
    }
    if let Some(r) = args.runtime {
        config.proxy.runtime = r;
    }
    if args.check {
        println!("configuration OK");
        return ExitCode::SUCCESS;
    }
    let server = match sluice::Server::start(config) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("sluice: cannot start: {e:#}");
            return ExitCode::from(1);
        }
    };
    wait_for_signal(|| {
        if let Some(path) = &args.config {
            reload_rules(&server, path);
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

/// SIGHUP: the file's `[[mysql_query_rules]]` go live if the whole file is valid and the rules
/// compile against the running hostgroups; otherwise the error is logged and nothing changes.
/// Other sections need a restart until the admin port lands (issue 5).
fn reload_rules(server: &sluice::Server, path: &std::path::Path) {
    let config = match config::load_file(path) {
        Ok(c) => c,
        Err(e) => return tracing::error!("reload rejected, running configuration kept: {e}"),
    };
    match server.shared.load_rules(&config.query_rules) {
        Ok(n) => tracing::info!(rules = n, "reload: query rules in force"),
        Err(e) => tracing::error!("reload rejected, running rules kept: {}: mysql_query_rules[{}]: {e}", path.display(), e.index),
    }
    if !server.shared.config.same_except_rules(&config) {
        tracing::warn!("reload: only [[mysql_query_rules]] change live; other sections of {} need a restart", path.display());
    }
}
