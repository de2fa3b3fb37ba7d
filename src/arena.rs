//! rlock's allocator: a fixed arena with a free list per block size, the system's after it.
//!
//! A run of `rlock exec -- true` makes about 1,300 allocations (most of them clap's description
//! of the options and what it parsed) and frees most of them again within the millisecond. With
//! glibc's malloc that was a third of the instructions the run executes (callgrind); and every
//! page of memory a run touches for the first time costs it a page fault (~2 us on a virtual
//! machine), so blocks must be used again, not only handed out. Here a block's size is rounded up
//! to a power of two (its class); a freed block goes on its class's list and is the next one of
//! that class handed out; a block that grows within its class stays where it is. A run of
//! `exec -- true` touches ~100 kB. For a block larger than a quarter of the arena, or aligned
//! to more than a page, and once the arena is used up, the system's allocator serves, and frees
//! what it served; so a long `exec` keeps at most the arena's size.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::UnsafeCell;
use std::ptr;
use std::sync::atomic::{AtomicBool, Ordering};

/// The arena's size.
const SIZE: usize = 256 * 1024;

/// The smallest class: 16 bytes, 2^4.
const MIN_SHIFT: u32 = 4;

/// Classes of 16 bytes to a quarter of the arena.
const CLASSES: usize = (SIZE / 4).trailing_zeros() as usize - MIN_SHIFT as usize + 1;

/// Every block of the arena is aligned to this; a caller asking for more gets a block of its own.
const ALIGN: usize = 16;

/// The arena's memory, in the zero-filled data the kernel maps on first touch.
#[repr(C, align(4096))]
struct Memory(UnsafeCell<[u8; SIZE]>);

/// What the arena's lock guards: where its unused part starts, and the freed blocks by class
/// (each free block holds the address of the next one of its class in its first bytes).
struct Books {
    next: usize,
    free: [*mut u8; CLASSES],
}

/// An allocator that serves from its arena first (see the module's text).
pub struct Arena {
    memory: Memory,
    books: UnsafeCell<Books>,
    locked: AtomicBool,
}

// SAFETY: `books` is only read or written with `locked` taken (`Arena::with_books`), and the
// arena's bytes are handed out in disjoint blocks, each to one caller at a time.
unsafe impl Sync for Arena {}

impl Arena {
    pub const fn new() -> Self {
        Arena {
            memory: Memory(UnsafeCell::new([0; SIZE])),
            books: UnsafeCell::new(Books {
                next: 0,
                free: [ptr::null_mut(); CLASSES],
            }),
            locked: AtomicBool::new(false),
        }
    }

    fn base(&self) -> usize {
        self.memory.0.get() as usize
    }

    /// True when `ptr` was served from the arena.
    fn holds(&self, ptr: *mut u8) -> bool {
        (ptr as usize).wrapping_sub(self.base()) < SIZE
    }

    /// `f` on the books, with the lock taken: allocations are short and rlock has few threads,
    /// so the lock spins.
    fn with_books<T>(&self, f: impl FnOnce(&mut Books) -> T) -> T {
        while self
            .locked
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            std::hint::spin_loop();
        }
        // SAFETY: the lock is ours until it is released below, so nobody else uses the books.
        let out = f(unsafe { &mut *self.books.get() });
        self.locked.store(false, Ordering::Release);
        out
    }

    /// A block for `layout` from the arena, or None when the arena cannot serve it.
    fn claim(&self, layout: Layout) -> Option<*mut u8> {
        let class = class_of(layout.size())?;
        if layout.align() > 4096 {
            return None;
        }
        let base = self.base();
        self.with_books(|books| {
            let free = books.free[class];
            if !free.is_null() && layout.align() <= ALIGN {
                // SAFETY: a free block of the arena holds the next one's address in its first
                // bytes (`give_back`), and is ours now.
                books.free[class] = unsafe { free.cast::<*mut u8>().read() };
                return Some(free);
            }
            let align = layout.align().max(ALIGN);
            let start = (base + books.next).next_multiple_of(align) - base;
            let end = start + (1 << (class as u32 + MIN_SHIFT));
            if end > SIZE {
                return None;
            }
            books.next = end;
            // SAFETY: `start` is within the arena (`end` <= SIZE).
            Some(unsafe { self.memory.0.get().cast::<u8>().add(start) })
        })
    }

    /// Puts `block`, of the arena and of `size` bytes as its caller knows it, on its class's list.
    fn give_back(&self, block: *mut u8, size: usize) {
        // A block of the arena was given at most a quarter of it, so it has a class.
        let Some(class) = class_of(size) else { return };
        self.with_books(|books| {
            // SAFETY: the block is at least 16 bytes, aligned to 16, and nobody's now.
            unsafe { block.cast::<*mut u8>().write(books.free[class]) };
            books.free[class] = block;
        });
    }

    /// The bytes a block of `size` has in the arena: its class's.
    fn room(size: usize) -> Option<usize> {
        class_of(size).map(|c| 1 << (c as u32 + MIN_SHIFT))
    }
}

impl Default for Arena {
    fn default() -> Self {
        Self::new()
    }
}

/// The class of a block of `size` bytes: 0 for 16 bytes or fewer, 1 for 32, ...; None when it is
/// larger than the largest.
fn class_of(size: usize) -> Option<usize> {
    let shift = size
        .max(1 << MIN_SHIFT)
        .next_power_of_two()
        .trailing_zeros();
    let class = (shift - MIN_SHIFT) as usize;
    (class < CLASSES).then_some(class)
}

// SAFETY: every block is either the arena's, at least of the layout's size (its class's) and
// alignment and handed to one caller at a time (`claim`, `give_back`), or the system allocator's,
// which gets back exactly the blocks it served (told apart by their address).
unsafe impl GlobalAlloc for Arena {
    // These are called from every allocation site: inlined there, they would make the code much
    // larger.
    #[inline(never)]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        match self.claim(layout) {
            Some(block) => block,
            // SAFETY: `layout` is the caller's, of non-zero size as GlobalAlloc requires.
            None => unsafe { System.alloc(layout) },
        }
    }

    #[inline(never)]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        match self.claim(layout) {
            Some(block) => {
                // SAFETY: `block` holds at least `layout.size()` bytes, ours alone; they may
                // have been used and freed before.
                unsafe { ptr::write_bytes(block, 0, layout.size()) };
                block
            }
            // SAFETY: as in `alloc`.
            None => unsafe { System.alloc_zeroed(layout) },
        }
    }

    #[inline(never)]
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if self.holds(ptr) {
            self.give_back(ptr, layout.size());
        } else {
            // SAFETY: not the arena's, so the system allocator served it with this layout.
            unsafe { System.dealloc(ptr, layout) }
        }
    }

    #[inline(never)]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if !self.holds(ptr) {
            // SAFETY: the system allocator served `ptr` with `layout`.
            return unsafe { System.realloc(ptr, layout, new_size) };
        }
        // Within its class, a block grows or shrinks where it is: it has the room.
        if Self::room(layout.size()).is_some_and(|room| new_size <= room) {
            return ptr;
        }
        // SAFETY: `layout.align()` is a valid alignment (the caller's layout had it) and
        // `new_size`, as the caller promises, does not overflow when rounded up to it.
        let new_layout = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        // SAFETY: `new_layout` has a non-zero size (GlobalAlloc::realloc requires it).
        let block = unsafe { self.alloc(new_layout) };
        if !block.is_null() {
            // SAFETY: both blocks hold at least `layout.size()` bytes (new_size is larger), and
            // they are apart: the new one was handed out while the old one was still in use.
            unsafe { ptr::copy_nonoverlapping(ptr, block, layout.size().min(new_size)) };
            self.give_back(ptr, layout.size());
        }
        block
    }
}

#[cfg(test)]
mod tests;
