//! The BPF map of per-thread slots, mapped read-only into sluice's memory: reading a slot is
//! a few loads, no system call.

use std::os::fd::AsFd;
use std::ptr::{addr_of, read_volatile};
use std::sync::OnceLock;
use std::time::Instant;

/// Mirrors `SLOTS` in probe.bpf.c.
pub const SLOTS: usize = 65536;

/// Mirrors `struct slot` in probe.bpf.c.
#[repr(C)]
struct Slot {
    tid: u32,
    depth: u32,
    entry_ns: u64,
    exit_ns: u64,
    calls: u64,
    busy_ns: u64,
    mark: u64,
}

const _: () = assert!(std::mem::size_of::<Slot>() == 48);

/// One server thread's totals, as the BPF map keeps them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct ThreadTotals {
    pub tid: u32,
    pub calls: u64,
    pub busy_us: u64,
}

/// The mapping; unmapped on drop (the map itself lives as long as its file descriptor, which
/// the mapping keeps too).
pub struct Slots {
    base: *const Slot,
    len: usize,
}

// Read-only shared memory that only the kernel writes: any thread may read it.
unsafe impl Send for Slots {}
unsafe impl Sync for Slots {}

impl Slots {
    /// Maps the array map `fd` (BPF_F_MMAPABLE, SLOTS slots of 48 bytes).
    pub fn map(fd: impl AsFd) -> std::io::Result<Slots> {
        use std::os::fd::AsRawFd;
        let len = SLOTS * std::mem::size_of::<Slot>();
        // SAFETY: a fresh shared read-only mapping of a map the caller owns; checked below.
        let p = unsafe { libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ, libc::MAP_SHARED, fd.as_fd().as_raw_fd(), 0) };
        if p == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        Ok(Slots { base: p.cast(), len })
    }

    fn slot(&self, tid: u32) -> *const Slot {
        // SAFETY: the index is below SLOTS, inside the mapping.
        unsafe { self.base.add(tid as usize & (SLOTS - 1)) }
    }

    /// The duration in ns of the outermost dispatch call thread `tid` began within
    /// [`from`, `to`] (CLOCK_MONOTONIC ns), counted up to `to` if it has not returned yet.
    pub fn command(&self, tid: u32, from: u64, to: u64) -> Option<u64> {
        let s = self.slot(tid);
        // SAFETY: inside the mapping; the kernel writes these aligned words whole, so each
        // load sees an old or a new value. entry is read before exit: a return that lands
        // between the two makes exit newer, never older, than the entry read.
        let (owner, entry, exit) = unsafe {
            let owner = read_volatile(addr_of!((*s).tid));
            let entry = read_volatile(addr_of!((*s).entry_ns));
            std::sync::atomic::compiler_fence(std::sync::atomic::Ordering::Acquire);
            let exit = read_volatile(addr_of!((*s).exit_ns));
            (owner, entry, exit)
        };
        if owner != tid || entry < from || entry > to {
            return None;
        }
        let end = if exit >= entry { exit } else { to };
        Some(end - entry)
    }

    /// Every slot that counted calls, for the threads `keep` accepts.
    pub fn threads(&self, keep: impl Fn(u32) -> bool) -> Vec<ThreadTotals> {
        let mut out = Vec::new();
        for i in 0..SLOTS {
            // SAFETY: i < SLOTS.
            let (tid, calls, busy) = unsafe {
                let s = self.base.add(i);
                (read_volatile(addr_of!((*s).tid)), read_volatile(addr_of!((*s).calls)), read_volatile(addr_of!((*s).busy_ns)))
            };
            if calls > 0 && keep(tid) {
                out.push(ThreadTotals { tid, calls, busy_us: busy / 1000 });
            }
        }
        out
    }
}

impl Drop for Slots {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `map`, unmapped once.
        unsafe {
            libc::munmap(self.base as *mut libc::c_void, self.len);
        }
    }
}

/// CLOCK_MONOTONIC at `t`, in ns: the clock `bpf_ktime_get_ns` reads and `Instant` is made of
/// on Linux, so an instant and a BPF time stamp compare directly.
pub fn mono_ns(t: Instant) -> u64 {
    static ANCHOR: OnceLock<(Instant, u64)> = OnceLock::new();
    let &(at, ns) = ANCHOR.get_or_init(|| {
        let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        // SAFETY: a valid timespec to fill.
        unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
        (Instant::now(), ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64)
    });
    if t >= at {
        ns + t.duration_since(at).as_nanos() as u64
    } else {
        ns.saturating_sub(at.duration_since(t).as_nanos() as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_instant_and_the_monotonic_clock_agree() {
        let before = mono_ns(Instant::now());
        let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
        let raw = ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64;
        let after = mono_ns(Instant::now());
        assert!(before <= raw + 1_000 && raw <= after + 1_000, "{before} {raw} {after}");
    }

    #[test]
    fn a_slot_is_read_for_its_thread_and_its_window() {
        let mut mem = vec![0u64; SLOTS * 6];
        let view = |mem: &[u64]| std::mem::ManuallyDrop::new(Slots { base: mem.as_ptr().cast(), len: 0 });
        let tid = 70_000u32;
        let i = tid as usize & (SLOTS - 1);
        let write = |mem: &mut Vec<u64>, owner: u32, entry: u64, exit: u64| {
            mem[i * 6] = u64::from(owner);
            mem[i * 6 + 1] = entry;
            mem[i * 6 + 2] = exit;
        };
        write(&mut mem, tid, 1_000, 201_000);
        let slots = view(&mem);
        assert_eq!(slots.command(tid, 900, 300_000), Some(200_000));
        assert_eq!(slots.command(tid + 1, 900, 300_000), None, "another thread's slot");
        assert_eq!(slots.command(tid, 1_100, 300_000), None, "began before the request was sent: an earlier command");
        // Still in its cleanup when the reply ended: counted up to then.
        write(&mut mem, tid, 1_000, 500);
        assert_eq!(view(&mem).command(tid, 900, 5_000), Some(4_000));
        write(&mut mem, tid, 7, 9);
        mem[i * 6 + 3] = 3;
        mem[i * 6 + 4] = 5_000;
        assert_eq!(view(&mem).threads(|t| t == tid), vec![ThreadTotals { tid, calls: 3, busy_us: 5 }]);
        assert!(view(&mem).threads(|_| false).is_empty());
    }
}
