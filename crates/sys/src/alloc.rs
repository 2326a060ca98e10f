//! A global allocator that counts allocations, for tests that prove a path allocates
//! nothing (tcpip's steady-state test). Implementing `GlobalAlloc` needs `unsafe`; using the
//! type does not:
//!
//! ```ignore
//! #[global_allocator]
//! static ALLOC: wirespeed_sys::alloc::CountingAlloc = wirespeed_sys::alloc::CountingAlloc::new();
//! let before = ALLOC.allocations();
//! ```

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};

/// The system allocator, counting every `alloc` and `realloc` (frees are not counted).
pub struct CountingAlloc {
    allocations: AtomicU64,
}

impl CountingAlloc {
    pub const fn new() -> CountingAlloc {
        CountingAlloc {
            allocations: AtomicU64::new(0),
        }
    }

    /// Allocations (and reallocations) made through this allocator so far, all threads.
    pub fn allocations(&self) -> u64 {
        self.allocations.load(Ordering::Relaxed)
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
        self.allocations.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller upholds `GlobalAlloc::alloc`'s contract, which is System's.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from this allocator, hence from System, with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        self.allocations.fetch_add(1, Ordering::Relaxed);
        // SAFETY: `ptr` came from System with `layout`; the caller upholds realloc's contract.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}
