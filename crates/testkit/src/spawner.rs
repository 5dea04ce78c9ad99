//! A dedicated, never-exiting thread that spawns long-lived child processes.
//!
//! Children get `PR_SET_PDEATHSIG = SIGKILL`, so they die with the test process even when no
//! destructor runs. The kernel sends that signal when the *thread* that forked the child exits,
//! and test threads come and go, so all forks happen on this one thread, which lives as long as
//! the process.

use std::io;
use std::os::unix::process::CommandExt as _;
use std::process::{Child, Command};
use std::sync::mpsc::{self, Sender};
use std::sync::Mutex;

use anyhow::Context as _;

struct Request {
    cmd: Command,
    reply: Sender<io::Result<Child>>,
}

static SPAWNER: Mutex<Option<Sender<Request>>> = Mutex::new(None);

/// Spawns `cmd` from the spawner thread; the child is SIGKILLed when this process exits.
pub(crate) fn spawn(mut cmd: Command) -> anyhow::Result<Child> {
    let parent = std::process::id() as libc::pid_t;
    // SAFETY: the closure only makes async-signal-safe syscalls and does not allocate.
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong, 0, 0, 0) != 0 {
                return Err(io::Error::last_os_error());
            }
            // The parent may have died between fork and prctl.
            if libc::getppid() != parent {
                return Err(io::Error::from_raw_os_error(libc::ESRCH));
            }
            Ok(())
        });
    }
    let (reply, answer) = mpsc::channel();
    sender()?.send(Request { cmd, reply }).map_err(|_| anyhow::anyhow!("spawner thread is gone"))?;
    let child = answer.recv().map_err(|_| anyhow::anyhow!("spawner thread dropped the request"))?;
    Ok(child?)
}

/// The request channel, starting the thread on first use.
fn sender() -> anyhow::Result<Sender<Request>> {
    let mut guard = SPAWNER.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(tx) = guard.as_ref() {
        return Ok(tx.clone());
    }
    let (tx, rx) = mpsc::channel::<Request>();
    std::thread::Builder::new()
        .name("sluice-testkit-spawner".into())
        .spawn(move || {
            // Never returns: the static keeps a Sender alive for the life of the process.
            for mut req in rx {
                let _ = req.reply.send(req.cmd.spawn());
            }
        })
        .context("starting the spawner thread")?;
    *guard = Some(tx.clone());
    Ok(tx)
}
