//! `digest_into` allocates nothing once `out` has room: counted with a global allocator, which
//! is why this test is a binary of its own. Only the test's own thread is counted: the test
//! harness allocates on its main thread meanwhile.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};

use sluice_sql::digest::{digest_into, MAX_DIGEST_LEN};

struct Counting;

static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    static COUNTING: Cell<bool> = const { Cell::new(false) };
}

fn note_allocation() {
    if COUNTING.try_with(Cell::get).unwrap_or(false) {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
    }
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note_allocation();
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note_allocation();
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

#[test]
fn no_allocation_with_a_buffer_that_has_room() {
    let statements: Vec<Vec<u8>> = vec![
        b"SELECT c FROM sbtest1 WHERE id = 5025 AND k BETWEEN 4990 AND 5090 ORDER BY c LIMIT 10 /* app:42 */".to_vec(),
        b"INSERT INTO t (a, b) VALUES (1, 'a'), (2, _utf8mb4'b'), (3, N'c') ON DUPLICATE KEY UPDATE a = VALUES(a)".to_vec(),
        b"/*!40101 SET NAMES utf8mb4 */; select CURRENT_TIMESTAMP(6), x->>'$.a' from `t` where a in (1,2,NULL) -- x".to_vec(),
        format!("SELECT {} FROM t", "a, ".repeat(2000)).into_bytes(),
        vec![0xff; 100],
    ];
    let mut out = Vec::with_capacity(MAX_DIGEST_LEN + 8);
    COUNTING.with(|c| c.set(true));
    for sql in &statements {
        digest_into(sql, &mut out);
    }
    COUNTING.with(|c| c.set(false));
    assert_eq!(ALLOCATIONS.load(Ordering::Relaxed), 0);
    // The counter works: an allocation on this thread is seen.
    COUNTING.with(|c| c.set(true));
    let grown = vec![0u8; out.capacity() + 1];
    COUNTING.with(|c| c.set(false));
    assert_eq!(ALLOCATIONS.load(Ordering::Relaxed), 1, "{}", grown.len());
}
