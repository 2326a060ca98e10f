//! A global allocator that counts allocations, for tests that prove a path allocates
//! nothing (tcpip's steady-state test). Implementing `GlobalAlloc` needs `unsafe`; using the
//! type does not:
//!
//! ```ignore
//! #[global_allocator]
//! static ALLOC: wirespeed_sys::alloc::CountingAlloc = wirespeed_sys::alloc::CountingAlloc::new();
//! let before = ALLOC.allocations_on_this_thread();
//! ```
//!
//! Tests read the calling thread's count: the test harness's own threads allocate at times
//! of their choosing (output, timers), and a process-wide count made such a test flaky.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

thread_local! {
    // Const-initialised and without a destructor, so reading it never allocates and stays
    // valid while a thread is torn down.
    static THIS_THREAD: Cell<u64> = const { Cell::new(0) };
}

/// The system allocator, counting every `alloc` and `realloc` per thread (frees are not
/// counted).
pub struct CountingAlloc {
    _private: (),
}

impl CountingAlloc {
    pub const fn new() -> CountingAlloc {
        CountingAlloc { _private: () }
    }

    /// Allocations (and reallocations) the calling thread has made so far.
    pub fn allocations_on_this_thread(&self) -> u64 {
        THIS_THREAD.with(Cell::get)
    }

    fn count(&self) {
        THIS_THREAD.with(|n| n.set(n.get() + 1));
    }
}

impl Default for CountingAlloc {
    fn default() -> Self {
        CountingAlloc::new()
    }
}

// SAFETY: every call forwards to the system allocator unchanged; the counter is a side
// effect that neither allocates nor touches the memory handed out.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        self.count();
        // SAFETY: the caller upholds `GlobalAlloc::alloc`'s contract, which is System's.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from this allocator, hence from System, with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        self.count();
        // SAFETY: `ptr` came from System with `layout`; the caller upholds realloc's contract.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}
