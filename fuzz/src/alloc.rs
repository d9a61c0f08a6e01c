//! The fuzz binaries' allocator: the system one, refusing any single request above a limit.

use std::alloc::{GlobalAlloc, Layout, System};

/// Forwards to [`System`], except that a request above `limit` bytes gets a null pointer, which
/// ends the process through `handle_alloc_error` ("memory allocation of N bytes failed") before
/// any memory is touched. A loader that trusts a length or count read from a small fuzz input
/// stops here instead of taking the machine's memory; the input that did it is the runner's
/// in-flight file (printed when the run starts). Stateless: the limit is a constant.
pub struct Capped {
    pub limit: usize,
}

// SAFETY: every call is forwarded unchanged to the system allocator, or refused with null
// (which `GlobalAlloc` allows for any request).
unsafe impl GlobalAlloc for Capped {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        if l.size() > self.limit {
            return std::ptr::null_mut();
        }
        System.alloc(l)
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        if l.size() > self.limit {
            return std::ptr::null_mut();
        }
        System.alloc_zeroed(l)
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        System.dealloc(p, l)
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        if n > self.limit {
            return std::ptr::null_mut();
        }
        System.realloc(p, l, n)
    }
}
