// sluice's probe: how long the server's own thread spends on each command.
//
// Two ways to see a command, into the same per-thread slots (docs/probe.md, "Two methods"):
// - socket: the kernel's `sock_recv_length` and `sock_send_length` tracepoints (Linux 6.3+),
//   in the server's processes only (`servers`): a command runs on a thread from the receive of
//   its bytes to its reply's last send. No breakpoint in the server: a tracepoint run costs
//   about 0.15 µs, a uprobe pair 1.4 µs and more (docs/probe.md, "Cost").
// - dispatch: entry and return uprobes on the server's command dispatch (MariaDB and MySQL 8:
//   `dispatch_command`), for kernels without those tracepoints.
// Per server thread (its OS thread id) a slot keeps when the command running now or the last
// one began and ended, and how many commands ended and how long they took in all. The slots
// live in one array map that sluice maps into its own memory (BPF_F_MMAPABLE): after a
// statement's reply it reads the slot of the thread that ran it with plain loads, no system
// call. Compiled by clang at build time (crates/sluice/build.rs).
//
// Only helpers open to any license are called (the thread id, the monotonic clock and map
// lookups), so the program carries the project's license.

#include <linux/types.h>
#include <linux/bpf.h>
#include <linux/ptrace.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

// A power of two: a thread's slot is its thread id modulo this. Mirrored in probe/slots.rs.
#define SLOTS 65536
// Nested dispatch calls counted; the socket method's states lie above, so that a slot the
// other method left (the method switched live) is seen as such and started afresh.
#define MAX_DEPTH 64
#define RECEIVED 0x100
#define REPLYING 0x101

// One server thread's slot: 48 bytes. Mirrored in probe/mod.rs (struct Slot).
struct slot {
	__u32 tid;      // the thread that owns the slot (another thread id modulo SLOTS takes it over)
	__u32 depth;    // dispatch: calls running on it now (a nested call is part of its caller's),
	                // at most MAX_DEPTH; socket: RECEIVED or REPLYING
	__u64 entry_ns; // CLOCK_MONOTONIC at the start of the outermost call running now, or of the last one
	__u64 exit_ns;  // at the end of the last one: below entry_ns while a call runs
	__u64 calls;    // calls ended since the slot was taken
	__u64 busy_ns;  // their total time
	__u64 mark;     // dispatch: the stack pointer at the outermost call's entry;
	                // socket: the socket (struct sock *) the command came on
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, SLOTS);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, struct slot);
} slots SEC(".maps");

// The server processes the socket programs follow, by pid; sluice adds and removes them.
// Mirrored in probe/attach.rs.
#define MAX_SERVERS 256

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_SERVERS);
	__type(key, __u32);
	__type(value, __u8);
} servers SEC(".maps");

static __always_inline struct slot *slot_of(__u32 tid)
{
	__u32 key = tid & (SLOTS - 1);
	return bpf_map_lookup_elem(&slots, &key);
}

// The calling thread's slot, taken over if another thread held it.
static __always_inline struct slot *own_slot(__u32 tid)
{
	struct slot *s = slot_of(tid);
	if (s && s->tid != tid) {
		s->tid = tid;
		s->depth = 0;
		s->exit_ns = 0;
		s->calls = 0;
		s->busy_ns = 0;
		s->mark = 0;
	}
	return s;
}

SEC("uprobe")
int dispatch_enter(struct pt_regs *ctx)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	__u64 sp = PT_REGS_SP(ctx);
	struct slot *s = own_slot(tid);
	if (!s)
		return 0;
	// A call at the outermost call's stack depth or above is not nested in it: that one's
	// return was never seen (the probe was detached while it ran), so it is over. A slot in a
	// socket state was the other method's.
	if (s->depth > MAX_DEPTH || (s->depth > 0 && sp >= s->mark))
		s->depth = 0;
	if (s->depth == 0) {
		s->mark = sp;
		*(volatile __u64 *)&s->entry_ns = bpf_ktime_get_ns();
	}
	if (s->depth < MAX_DEPTH)
		s->depth += 1;
	return 0;
}

SEC("uretprobe")
int dispatch_return(struct pt_regs *ctx)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct slot *s = slot_of(tid);
	// A return without its entry (the probe came while the call ran) is left out.
	if (!s || s->tid != tid || s->depth == 0 || s->depth > MAX_DEPTH)
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

// The socket method's two states of a slot (in `depth`, defined above): RECEIVED, the
// command's bytes came and no reply went yet; REPLYING, the reply is going (or went). A slot
// the dispatch method left has its stack pointer as `mark`, never a socket.
#define MSG_PEEK 2

// The slot of the calling thread when it belongs to a server process, else NULL: the
// tracepoints fire for every process's sockets, and the others are left at one hash lookup.
static __always_inline struct slot *server_slot(void)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u32 pid = pid_tgid >> 32;
	if (!bpf_map_lookup_elem(&servers, &pid))
		return 0;
	return own_slot((__u32)pid_tgid);
}

// sock_recv_length(struct sock *sk, int ret, int flags): after each receive on any socket.
// Bytes on a socket whose command is not still arriving begin a new command.
SEC("raw_tracepoint/sock_recv_length")
int socket_received(struct bpf_raw_tracepoint_args *ctx)
{
	__u64 sk = ctx->args[0];
	int ret = (int)ctx->args[1];
	int flags = (int)ctx->args[2];
	if (ret <= 0 || (flags & MSG_PEEK))
		return 0;
	struct slot *s = server_slot();
	if (!s)
		return 0;
	if (s->depth != RECEIVED || s->mark != sk) {
		s->mark = sk;
		s->depth = RECEIVED;
		*(volatile __u64 *)&s->entry_ns = bpf_ktime_get_ns();
	}
	return 0;
}

// sock_send_length(struct sock *sk, int ret, int flags): after each send on any socket. The
// first send on the command's socket ends the command; later ones (a large result written in
// parts) move its end. A send on another socket (a new connection's greeting on a thread the
// server took from its cache, a replica's binlog) is not this command's.
SEC("raw_tracepoint/sock_send_length")
int socket_sent(struct bpf_raw_tracepoint_args *ctx)
{
	__u64 sk = ctx->args[0];
	int ret = (int)ctx->args[1];
	if (ret <= 0)
		return 0;
	struct slot *s = server_slot();
	if (!s || s->mark != sk)
		return 0;
	__u64 now = bpf_ktime_get_ns();
	if (s->depth == RECEIVED) {
		s->depth = REPLYING;
		s->calls += 1;
		s->busy_ns += now - s->entry_ns;
	} else if (s->depth == REPLYING) {
		s->busy_ns += now - s->exit_ns;
	} else {
		return 0;
	}
	*(volatile __u64 *)&s->exit_ns = now;
	return 0;
}

char LICENSE[] SEC("license") = "Apache-2.0";
