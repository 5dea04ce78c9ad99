//! Loading the BPF programs and keeping them on the backends' processes (`Probe::tick`): the
//! socket method (kernel tracepoints, one set for the whole machine, and the server pids in
//! the `servers` map) where the kernel has it, else the dispatch method (uprobes per process).

use super::slots::Slots;
use super::{BUILD, OBJECT};
use crate::config::{ProbeMethod, ProbeSection};
use aya::programs::raw_trace_point::RawTracePointLinkId;
use aya::programs::uprobe::{UProbeLinkId, UProbeScope};
use aya::programs::{RawTracePoint, UProbe};
use std::collections::HashMap;
use std::num::NonZeroU32;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The dispatch method's entry and return programs in probe.bpf.c.
const PROGRAMS: [&str; 2] = ["dispatch_enter", "dispatch_return"];
/// The socket method's programs in probe.bpf.c, and the kernel tracepoint each follows.
const TRACEPOINTS: [(&str, &str); 2] = [("socket_received", "sock_recv_length"), ("socket_sent", "sock_send_length")];
/// Mirrors `MAX_SERVERS` in probe.bpf.c: server processes the socket method follows at once.
const MAX_SERVERS: usize = 256;
/// How the C++ compiler names `dispatch_command(...)`, whatever its arguments: MariaDB's
/// `_Z16dispatch_command19enum_server_commandP3THDPcjb`, MySQL 8's
/// `_Z16dispatch_commandP3THDPK8COM_DATA19enum_server_command`.
const MANGLED_PREFIX: &str = "_Z16dispatch_command";
/// Ticks (seconds) between looks for a server process not found yet.
const RESCAN_TICKS: u32 = 5;

/// One backend process the programs are attached to.
struct Attached {
    hook: Hook,
    what: String,
}

enum Hook {
    /// The dispatch method: this process's uprobes.
    Uprobes(Vec<(usize, UProbeLinkId)>),
    /// The socket method: the pid is in the `servers` map.
    Sockets,
}

#[derive(Default)]
pub struct State {
    ebpf: Option<aya::Ebpf>,
    /// Why the program could not be loaded; not tried again until the settings change.
    load_error: Option<String>,
    /// The settings the attachments were made with.
    settings: Option<ProbeSection>,
    /// By pid.
    attached: HashMap<u32, Attached>,
    /// A server's process, as last found: (host, port) → pid (None: not on this machine).
    found: HashMap<(String, u16), Option<u32>>,
    /// Why attaching to a pid failed (not tried again while it runs).
    failed: HashMap<u32, String>,
    /// The socket method's tracepoint links, while some process is followed by them.
    tracepoints: Vec<(usize, RawTracePointLinkId)>,
    /// Why this kernel does not allow the socket method (`auto` then takes the dispatch one).
    no_sockets: Option<String>,
    since_scan: u32,
    /// The state in one line, as last logged.
    pub said: String,
}

impl State {
    pub fn pids(&self) -> Vec<u32> {
        let mut pids: Vec<u32> = self.attached.keys().copied().collect();
        pids.sort_unstable();
        pids
    }

    pub fn any_attached(&self) -> bool {
        !self.attached.is_empty()
    }

    /// Whether the process found for `host:port` is attached.
    pub fn covers(&self, host: &str, port: u16) -> bool {
        self.found.iter().any(|((h, p), pid)| h == host && *p == port && pid.is_some_and(|pid| self.attached.contains_key(&pid)))
    }

    pub fn tick(&mut self, settings: &ProbeSection, servers: &[(String, u16)], slots: &OnceLock<Slots>) {
        if self.settings.as_ref() != Some(settings) {
            // Another method, binary or symbol: attach again from scratch (and try what failed again).
            self.detach_all();
            self.load_error = None;
            self.no_sockets = None;
            self.failed.clear();
            self.found.clear();
            self.settings = Some(settings.clone());
        }
        if !settings.enabled {
            self.say("probe: off".into(), false);
            return;
        }
        if self.ebpf.is_none() && self.load_error.is_none() {
            if let Err(e) = self.load(slots) {
                self.load_error = Some(e);
            }
        }
        if let Some(e) = &self.load_error {
            let line = format!("probe: not running, sluice goes on without server time: {e}");
            self.say(line, true);
            return;
        }
        self.follow(settings, servers);
    }

    fn load(&mut self, slots: &OnceLock<Slots>) -> Result<(), String> {
        if OBJECT.is_empty() {
            return Err(format!("this build has no BPF program ({BUILD})"));
        }
        // The ELF parser wants the object aligned as a u64 array is.
        let mut aligned = vec![0u64; OBJECT.len().div_ceil(8)];
        // SAFETY: the u64 buffer holds at least OBJECT.len() bytes.
        let bytes = unsafe { std::slice::from_raw_parts_mut(aligned.as_mut_ptr().cast::<u8>(), OBJECT.len()) };
        bytes.copy_from_slice(OBJECT);
        let mut ebpf = aya::Ebpf::load(bytes).map_err(|e| privileges(format!("loading the BPF object: {}", chain(&e))))?;
        let loading = |name: &str, e: aya::programs::ProgramError| privileges(format!("loading {name}: {}", chain(&e)));
        for name in PROGRAMS {
            program::<UProbe>(&mut ebpf, name)?.load().map_err(|e| loading(name, e))?;
        }
        for (name, _) in TRACEPOINTS {
            program::<RawTracePoint>(&mut ebpf, name)?.load().map_err(|e| loading(name, e))?;
        }
        if slots.get().is_none() {
            let map = ebpf.map("slots").ok_or("the BPF object has no map `slots`")?;
            let aya::maps::Map::Array(data) = map else { return Err("the map `slots` is not an array".into()) };
            let mapped = Slots::map(data.fd()).map_err(|e| format!("mapping the slots: {e}"))?;
            let _ = slots.set(mapped);
        }
        self.ebpf = Some(ebpf);
        Ok(())
    }

    /// Attaches to every server process found on this machine, detaches from those gone.
    fn follow(&mut self, settings: &ProbeSection, servers: &[(String, u16)]) {
        self.since_scan += 1;
        let gone = self.found.values().flatten().any(|&pid| !alive(pid));
        let unknown = servers.iter().any(|s| !self.found.contains_key(s));
        let missing = self.found.values().any(Option::is_none);
        if gone || unknown || (missing && self.since_scan >= RESCAN_TICKS) {
            self.since_scan = 0;
            self.found = servers.iter().map(|(host, port)| ((host.clone(), *port), server_pid(host, *port))).collect();
        }
        let wanted: Vec<u32> = {
            let mut w: Vec<u32> = self.found.values().flatten().copied().collect();
            w.sort_unstable();
            w.dedup();
            w
        };
        let stale: Vec<u32> = self.attached.keys().copied().filter(|p| !wanted.contains(p)).collect();
        for pid in stale {
            self.detach(pid);
        }
        self.failed.retain(|pid, _| wanted.contains(pid));
        for &pid in &wanted {
            if self.attached.contains_key(&pid) || self.failed.contains_key(&pid) {
                continue;
            }
            match self.attach(settings, pid) {
                Ok(a) => {
                    self.attached.insert(pid, a);
                }
                Err(e) => {
                    self.failed.insert(pid, e);
                }
            }
        }
        let mut parts: Vec<String> = self.attached.values().map(|a| a.what.clone()).collect();
        parts.sort();
        let mut problems: Vec<String> = self.failed.iter().map(|(pid, e)| format!("pid {pid}: {e}")).collect();
        let mut absent: Vec<String> =
            self.found.iter().filter(|(_, p)| p.is_none()).map(|((h, p), _)| crate::config::server_address(h, *p)).collect();
        absent.sort();
        if !absent.is_empty() {
            problems.push(format!("no process on this machine listens for {} (their statements get no server time)", absent.join(", ")));
        }
        problems.sort();
        let line = match (parts.is_empty(), problems.is_empty()) {
            (false, true) => format!("probe: attached to {}", parts.join("; ")),
            (false, false) => format!("probe: attached to {}; not to: {}", parts.join("; "), problems.join("; ")),
            (true, _) if servers.is_empty() => "probe: no backend servers configured".into(),
            (true, _) => format!("probe: not attached, sluice goes on without server time: {}", problems.join("; ")),
        };
        let bad = !problems.is_empty();
        self.say(line, bad);
    }

    /// Attaches to `pid` by the configured method; `auto` takes the socket one unless this
    /// kernel refused its tracepoints.
    fn attach(&mut self, settings: &ProbeSection, pid: u32) -> Result<Attached, String> {
        if settings.method != ProbeMethod::Dispatch {
            match self.attach_sockets(pid) {
                Ok(()) => {
                    let exe = std::fs::read_link(format!("/proc/{pid}/exe")).map(|p| p.display().to_string()).unwrap_or_default();
                    return Ok(Attached { hook: Hook::Sockets, what: format!("the sockets of pid {pid} ({exe})") });
                }
                Err(e) if settings.method == ProbeMethod::Socket || self.no_sockets.is_none() => return Err(e),
                Err(_) => {}
            }
        }
        let mut attached = self.attach_uprobes(settings, pid)?;
        if let Some(why) = &self.no_sockets {
            attached.what.push_str(&format!(" (the socket method is not available: {why})"));
        }
        Ok(attached)
    }

    /// The socket method: the tracepoints (once for all processes) and `pid` in `servers`.
    fn attach_sockets(&mut self, pid: u32) -> Result<(), String> {
        if let Some(why) = &self.no_sockets {
            return Err(why.clone());
        }
        if self.tracepoints.is_empty() {
            if let Err(why) = self.attach_tracepoints() {
                self.no_sockets = Some(why.clone());
                self.release_tracepoints();
                return Err(why);
            }
        }
        let ebpf = self.ebpf.as_mut().ok_or("not loaded")?;
        let added = servers(ebpf).and_then(|mut servers| {
            servers.insert(pid, 1, 0).map_err(|e| format!("adding pid {pid} to the map `servers` (at most {MAX_SERVERS}): {}", chain(&e)))
        });
        if added.is_err() {
            self.release_tracepoints();
        }
        added
    }

    fn attach_tracepoints(&mut self) -> Result<(), String> {
        let ebpf = self.ebpf.as_mut().ok_or("not loaded")?;
        for (i, (name, tracepoint)) in TRACEPOINTS.iter().enumerate() {
            let id = program::<RawTracePoint>(ebpf, name)?
                .attach(tracepoint)
                .map_err(|e| privileges(format!("the kernel's tracepoint {tracepoint} (Linux 6.3 or later): {}", chain(&e))))?;
            self.tracepoints.push((i, id));
        }
        Ok(())
    }

    /// The tracepoints cost every process's socket calls a lookup: detached once no server is
    /// followed by them.
    fn release_tracepoints(&mut self) {
        if self.attached.values().any(|a| matches!(a.hook, Hook::Sockets)) {
            return;
        }
        if let Some(ebpf) = self.ebpf.as_mut() {
            detach_tracepoints(ebpf, std::mem::take(&mut self.tracepoints));
        }
    }

    /// The dispatch method: entry and return uprobes on `pid`'s command dispatch.
    fn attach_uprobes(&mut self, settings: &ProbeSection, pid: u32) -> Result<Attached, String> {
        let ebpf = self.ebpf.as_mut().ok_or("not loaded")?;
        let binary = match &settings.binary {
            Some(b) => PathBuf::from(b),
            None => PathBuf::from(format!("/proc/{pid}/exe")),
        };
        let shown = std::fs::read_link(&binary).unwrap_or_else(|_| binary.clone());
        let symbol = resolve_symbol(&binary, settings.symbol.as_deref())?;
        let scope = UProbeScope::OneProcess(NonZeroU32::new(pid).ok_or("pid 0")?);
        let mut links = Vec::new();
        for (i, name) in PROGRAMS.iter().enumerate() {
            match program::<UProbe>(ebpf, name)?.attach(symbol.as_str(), &binary, scope) {
                Ok(id) => links.push((i, id)),
                Err(e) => {
                    detach_links(ebpf, links);
                    return Err(privileges(format!("attaching to {symbol} in {}: {}", shown.display(), chain(&e))));
                }
            }
        }
        let what = format!("{symbol} in pid {pid} ({})", shown.display());
        Ok(Attached { hook: Hook::Uprobes(links), what })
    }

    fn detach(&mut self, pid: u32) {
        let (Some(a), Some(ebpf)) = (self.attached.remove(&pid), self.ebpf.as_mut()) else { return };
        match a.hook {
            Hook::Uprobes(links) => detach_links(ebpf, links),
            Hook::Sockets => {
                if let Ok(mut servers) = servers(ebpf) {
                    let _ = servers.remove(&pid);
                }
                self.release_tracepoints();
            }
        }
    }

    fn detach_all(&mut self) {
        let pids: Vec<u32> = self.attached.keys().copied().collect();
        for pid in pids {
            self.detach(pid);
        }
    }

    /// Logs `line` if it is news.
    fn say(&mut self, line: String, bad: bool) {
        if line == self.said {
            return;
        }
        if bad {
            tracing::warn!("{line}");
        } else if !(self.said.is_empty() && line == "probe: off") {
            tracing::info!("{line}");
        }
        self.said = line;
    }
}

fn detach_links(ebpf: &mut aya::Ebpf, links: Vec<(usize, UProbeLinkId)>) {
    for (i, id) in links {
        if let Some(prog) = PROGRAMS.get(i).and_then(|n| program::<UProbe>(ebpf, n).ok()) {
            let _ = prog.detach(id);
        }
    }
}

/// The BPF object's program `name`, as its type (`UProbe`, `RawTracePoint`).
fn program<'a, T>(ebpf: &'a mut aya::Ebpf, name: &str) -> Result<&'a mut T, String>
where
    &'a mut T: TryFrom<&'a mut aya::programs::Program, Error = aya::programs::ProgramError>,
{
    ebpf.program_mut(name).ok_or_else(|| format!("the BPF object has no program {name}"))?.try_into().map_err(|e| format!("{name}: {e}"))
}

/// The socket method's map of the server processes it follows, by pid.
fn servers(ebpf: &mut aya::Ebpf) -> Result<aya::maps::HashMap<&mut aya::maps::MapData, u32, u8>, String> {
    let map = ebpf.map_mut("servers").ok_or("the BPF object has no map `servers`")?;
    aya::maps::HashMap::try_from(map).map_err(|e| format!("the map `servers`: {e}"))
}

fn detach_tracepoints(ebpf: &mut aya::Ebpf, links: Vec<(usize, RawTracePointLinkId)>) {
    for (i, id) in links {
        if let Some(prog) = TRACEPOINTS.get(i).and_then(|(n, _)| program::<RawTracePoint>(ebpf, n).ok()) {
            let _ = prog.detach(id);
        }
    }
}

/// An error and its causes, on one line.
fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let more = c.to_string();
        if !s.contains(&more) {
            s.push_str(": ");
            s.push_str(&more);
        }
        cause = c.source();
    }
    s
}

/// `what`, with the likely reason when the kernel refused for want of privileges.
fn privileges(what: String) -> String {
    let refused = what.contains("Operation not permitted") || what.contains("Permission denied");
    // SAFETY: geteuid has no preconditions.
    if refused && unsafe { libc::geteuid() } != 0 {
        format!("{what} (needs root, or CAP_BPF, CAP_PERFMON and CAP_SYS_RESOURCE)")
    } else {
        what
    }
}

/// The server's command dispatch in `binary`: `configured` if given, else the function named
/// `dispatch_command` (any signature), from the symbol table or the dynamic one.
pub fn resolve_symbol(binary: &Path, configured: Option<&str>) -> Result<String, String> {
    use object::{Object, ObjectSymbol};
    let data = std::fs::read(binary).map_err(|e| format!("reading {}: {e}", binary.display()))?;
    let file = object::File::parse(&*data).map_err(|e| format!("{}: {e}", binary.display()))?;
    let found = file.symbols().chain(file.dynamic_symbols()).filter(|s| s.is_definition()).filter_map(|s| s.name().ok()).find(|name| {
        match configured {
            Some(c) => *name == c,
            None => name.starts_with(MANGLED_PREFIX) || *name == "dispatch_command",
        }
    });
    match (found, configured) {
        (Some(name), _) => Ok(name.to_string()),
        (None, Some(c)) => Err(format!("no symbol {c} in {}", binary.display())),
        (None, None) => Err(format!("no dispatch_command symbol in {} (stripped? set [probe] symbol)", binary.display())),
    }
}

/// The process serving `host:port` (or the Unix socket `host`) on this machine.
fn server_pid(host: &str, port: u16) -> Option<u32> {
    match crate::config::socket_path(host) {
        Some(path) => listening_unix_pid(path),
        None => local(host).then(|| listening_pid(port)).flatten(),
    }
}

/// Whether `host` names this machine (a loopback address, or one of its own).
fn local(host: &str) -> bool {
    use std::net::ToSocketAddrs;
    let Ok(addrs) = (host, 0).to_socket_addrs() else { return false };
    addrs.into_iter().any(|a| a.ip().is_loopback() || std::net::UdpSocket::bind((a.ip(), 0)).is_ok())
}

fn alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

/// Whether `tid` is a thread of process `pid`.
pub fn thread_of(pid: u32, tid: u32) -> bool {
    Path::new(&format!("/proc/{pid}/task/{tid}")).exists()
}

/// The process that listens on TCP `port` on this machine (its network namespace), from
/// /proc/net/tcp{,6} and the processes' open sockets.
pub fn listening_pid(port: u16) -> Option<u32> {
    let mut inodes = Vec::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(table) else { continue };
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            let (Some(local), Some(&state), Some(inode)) = (f.get(1), f.get(3), f.get(9)) else { continue };
            let lport = local.rsplit(':').next().and_then(|p| u16::from_str_radix(p, 16).ok());
            // 0A: LISTEN.
            if state == "0A" && lport == Some(port) && *inode != "0" {
                inodes.push(format!("socket:[{inode}]"));
            }
        }
    }
    pid_holding(&inodes)
}

/// The process that listens on the Unix socket `path`, from /proc/net/unix and the processes'
/// open sockets.
pub fn listening_unix_pid(path: &Path) -> Option<u32> {
    let text = std::fs::read_to_string("/proc/net/unix").ok()?;
    let mut inodes = Vec::new();
    for line in text.lines().skip(1) {
        // Num RefCount Protocol Flags Type St Inode Path; flag 00010000: accepting (listening).
        let f: Vec<&str> = line.split_whitespace().collect();
        let (Some(flags), Some(inode), Some(p)) = (f.get(3), f.get(6), f.get(7)) else { continue };
        let listening = u32::from_str_radix(flags, 16).is_ok_and(|fl| fl & 0x0001_0000 != 0);
        if listening && Path::new(p) == path {
            inodes.push(format!("socket:[{inode}]"));
        }
    }
    pid_holding(&inodes)
}

/// The first process holding one of `inodes` (`socket:[n]`) open.
fn pid_holding(inodes: &[String]) -> Option<u32> {
    if inodes.is_empty() {
        return None;
    }
    for proc_entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Some(pid) = proc_entry.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else { continue };
        let Ok(fds) = std::fs::read_dir(proc_entry.path().join("fd")) else { continue };
        for fd in fds.flatten() {
            if let Ok(target) = std::fs::read_link(fd.path()) {
                if inodes.iter().any(|i| target.as_os_str() == i.as_str()) {
                    return Some(pid);
                }
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_listening_process_of_a_port_is_found() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        assert_eq!(listening_pid(port), Some(std::process::id()));
        drop(l);
        assert_eq!(listening_pid(port), None);
    }

    #[test]
    fn the_listening_process_of_a_unix_socket_is_found() {
        let dir = std::env::temp_dir().join(format!("sluice-probe-unix-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("mysqld.sock");
        let l = std::os::unix::net::UnixListener::bind(&path).unwrap();
        assert_eq!(listening_unix_pid(&path), Some(std::process::id()));
        assert_eq!(listening_unix_pid(&dir.join("other.sock")), None);
        // A connected socket is not a listener.
        let _client = std::os::unix::net::UnixStream::connect(&path).unwrap();
        drop(l);
        assert_eq!(listening_unix_pid(&path), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn local_hosts() {
        assert!(local("127.0.0.1") && local("localhost") && local("::1"));
        assert!(!local("192.0.2.1"), "TEST-NET-1 is nobody's");
    }

    #[test]
    fn symbols_are_found_in_an_elf_file() {
        let me = std::env::current_exe().unwrap();
        // Rust symbols are mangled too; a C one is in every Rust test binary.
        assert_eq!(resolve_symbol(&me, Some("main")).as_deref(), Ok("main"));
        assert!(resolve_symbol(&me, Some("no_such_symbol_here")).unwrap_err().contains("no symbol no_such_symbol_here"));
        assert!(resolve_symbol(&me, None).unwrap_err().contains("no dispatch_command symbol"));
        assert!(resolve_symbol(Path::new("/nonexistent"), None).unwrap_err().contains("reading /nonexistent"));
    }
}
