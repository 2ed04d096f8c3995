//! Counting the heap in a test: [`CountingAllocator`], a global allocator that counts
//! the bytes the whole process has allocated and not yet freed ([`live_bytes`]), so
//! that a test asserts a memory bound in bytes, never in seconds.
//!
//! It counts the whole process: install it in a test binary of its own
//! (`tests/flow_control.rs`, `tests/sleep_memory.rs`), whose tests measure one at a
//! time or with slack for each other:
//!
//! ```ignore
//! #[global_allocator]
//! static ALLOCATOR: ebb::test_util::heap::CountingAllocator =
//!     ebb::test_util::heap::CountingAllocator;
//! ```

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

/// The system allocator, counting (see the module documentation).
pub struct CountingAllocator;

static LIVE_BYTES: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call goes to the system allocator unchanged; only the sizes are added
// up on the side.
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            LIVE_BYTES.fetch_add(layout.size(), Ordering::Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        LIVE_BYTES.fetch_sub(layout.size(), Ordering::Relaxed);
    }
}

/// Bytes allocated and not yet freed through [`CountingAllocator`] (0 when it is not
/// the process's global allocator).
pub fn live_bytes() -> usize {
    LIVE_BYTES.load(Ordering::Relaxed)
}
