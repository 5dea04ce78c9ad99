//! The `sluice` command: load the config (file or quick-start flags), run until SIGTERM/SIGINT.

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
    wait_for_signal();
    tracing::info!("shutting down: no new connections; letting in-flight statements finish");
    server.shutdown();
    tracing::info!("stopped");
    ExitCode::SUCCESS
}

fn wait_for_signal() {
    let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(_) => return,
    };
    rt.block_on(async {
        use tokio::signal::unix::{signal, SignalKind};
        let (Ok(mut term), Ok(mut int)) = (signal(SignalKind::terminate()), signal(SignalKind::interrupt())) else {
            return;
        };
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
    });
}
