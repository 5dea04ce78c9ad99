// sluice's probe: how long the server's own thread spends in each command it dispatches.
//
// Entry and return uprobes on the server's command dispatch (MariaDB and MySQL 8:
// `dispatch_command`) keep, per server thread (its OS thread id), when the call running now or
// the last one began and ended, and how many calls ended and how long they took in all. The
// slots live in one array map that sluice maps into its own memory (BPF_F_MMAPABLE): after a
// statement's reply it reads the slot of the thread that ran it with plain loads, no system
// call (docs/probe.md). Compiled by clang at build time (crates/sluice/build.rs).
//
// Only helpers open to any license are called (the thread id and the monotonic clock), so the
// program carries the project's license.

#include <linux/types.h>
#include <linux/bpf.h>
#include <linux/ptrace.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

// A power of two: a thread's slot is its thread id modulo this. Mirrored in probe/mod.rs.
#define SLOTS 65536

// One server thread's slot: 48 bytes. Mirrored in probe/mod.rs (struct Slot).
struct slot {
	__u32 tid;      // the thread that owns the slot (another thread id modulo SLOTS takes it over)
	__u32 depth;    // dispatch calls running on it now (a nested call is part of its caller's)
	__u64 entry_ns; // CLOCK_MONOTONIC at the start of the outermost call running now, or of the last one
	__u64 exit_ns;  // at the end of the last one: below entry_ns while a call runs
	__u64 calls;    // calls ended since the slot was taken
	__u64 busy_ns;  // their total time
	__u64 outer_sp; // the stack pointer at the outermost call's entry
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, SLOTS);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, struct slot);
} slots SEC(".maps");

static __always_inline struct slot *slot_of(__u32 tid)
{
	__u32 key = tid & (SLOTS - 1);
	return bpf_map_lookup_elem(&slots, &key);
}

SEC("uprobe")
int dispatch_enter(struct pt_regs *ctx)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	__u64 sp = PT_REGS_SP(ctx);
	struct slot *s = slot_of(tid);
	if (!s)
		return 0;
	if (s->tid != tid) {
		s->tid = tid;
		s->depth = 0;
		s->exit_ns = 0;
		s->calls = 0;
		s->busy_ns = 0;
	}
	// A call at the outermost call's stack depth or above is not nested in it: that one's
	// return was never seen (the probe was detached while it ran), so it is over.
	if (s->depth > 0 && sp >= s->outer_sp)
		s->depth = 0;
	if (s->depth == 0) {
		s->outer_sp = sp;
		*(volatile __u64 *)&s->entry_ns = bpf_ktime_get_ns();
	}
	if (s->depth < 64)
		s->depth += 1;
	return 0;
}

SEC("uretprobe")
int dispatch_return(struct pt_regs *ctx)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct slot *s = slot_of(tid);
	// A return without its entry (the probe came while the call ran) is left out.
	if (!s || s->tid != tid || s->depth == 0)
		return 0;
	s->depth -= 1;
	if (s->depth == 0) {
		__u64 now = bpf_ktime_get_ns();
		s->calls += 1;
		s->busy_ns += now - s->entry_ns;
		*(volatile __u64 *)&s->exit_ns = now;
	}
	return 0;
}

char LICENSE[] SEC("license") = "Apache-2.0";
