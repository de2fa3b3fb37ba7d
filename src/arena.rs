//! rlock's allocator: a fixed arena with a free list per block size, the system's after it.
//!
//! A run of `rlock exec -- true` makes about 1,300 allocations (most of them clap's description
//! of the options and what it parsed) and frees most of them again within the millisecond. With
//! glibc's malloc that was a third of the instructions the run executes (callgrind); and every
//! page of memory a run touches for the first time costs it a page fault (~2 us on a virtual
//! machine), so blocks must be used again, not only handed out.
//!
//! The arena has two halves. Small blocks (2 kB or less) are rounded up to a power of two (their
//! class) and handed out from the lower half; a freed one goes on its class's list and is the
//! next one of that class handed out, and one that grows within its class stays where it is.
//! Larger blocks, most of them vectors that keep growing (clap's list of options, 640 bytes
//! each), take the upper half as they come, and the newest of them grows where it is: a vector
//! grown eight times is neither copied eight times nor spread over as many new pages. A freed
//! large block is used again too (on the list of the largest class it can hold). A block larger
//! than a quarter of the arena, or aligned to more than a page, and every block once its half is
//! used up, comes from the system's allocator, which gets it back; so a long `exec` keeps at most
//! the arena's size.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::UnsafeCell;
use std::ptr;
use std::sync::atomic::{AtomicBool, Ordering};

/// The arena's size.
const SIZE: usize = 256 * 1024;

/// Where the half for large blocks starts.
const LARGE_START: usize = SIZE / 2;

/// The largest small block.
const SMALL_MAX: usize = 2048;

/// The smallest class: 16 bytes, 2^4.
const MIN_SHIFT: u32 = 4;

/// Classes of 16 bytes to a quarter of the arena.
const CLASSES: usize = (SIZE / 4).trailing_zeros() as usize - MIN_SHIFT as usize + 1;

/// Every block of the arena is aligned to this; a caller asking for more gets a block of its own.
const ALIGN: usize = 16;

/// The arena's memory, in the zero-filled data the kernel maps on first touch.
#[repr(C, align(4096))]
struct Memory(UnsafeCell<[u8; SIZE]>);

/// What the arena's lock guards: where each half's unused part starts (offsets in the arena),
/// and the freed blocks by class (each free block holds the address of the next one of its
/// class in its first bytes).
struct Books {
    small: usize,
    large: usize,
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
                small: 0,
                large: LARGE_START,
                free: [ptr::null_mut(); CLASSES],
            }),
            locked: AtomicBool::new(false),
        }
    }

    fn base(&self) -> usize {
        self.memory.0.get() as usize
    }

    /// The arena's offset of `ptr`, when the arena served it.
    fn offset_of(&self, ptr: *mut u8) -> Option<usize> {
        Some((ptr as usize).wrapping_sub(self.base())).filter(|&at| at < SIZE)
    }

    fn at(&self, offset: usize) -> *mut u8 {
        // SAFETY: callers pass offsets within the arena.
        unsafe { self.memory.0.get().cast::<u8>().add(offset) }
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
            let (next, end_of_half, size) = if layout.size() <= SMALL_MAX {
                (
                    &mut books.small,
                    LARGE_START,
                    1 << (class as u32 + MIN_SHIFT),
                )
            } else {
                (
                    &mut books.large,
                    SIZE,
                    layout.size().next_multiple_of(ALIGN),
                )
            };
            let start = (base + *next).next_multiple_of(align) - base;
            let end = start + size;
            if end > end_of_half {
                return None;
            }
            *next = end;
            Some(self.at(start))
        })
    }

    /// Puts `block`, at `offset` in the arena and of `size` bytes as its caller knows it, back:
    /// the newest large block gives its room back to the half; any other goes on a class's list.
    fn give_back(&self, offset: usize, size: usize) {
        self.with_books(|books| {
            let class = if offset < LARGE_START {
                // A small block has its class's room.
                class_of(size)
            } else {
                let end = offset + size.next_multiple_of(ALIGN);
                if end == books.large {
                    books.large = offset;
                    return;
                }
                // A large block has at least its own size: the largest class it holds.
                floor_class(size)
            };
            if let Some(class) = class {
                let block = self.at(offset);
                // SAFETY: the block is at least 16 bytes, aligned to 16, and nobody's now.
                unsafe { block.cast::<*mut u8>().write(books.free[class]) };
                books.free[class] = block;
            }
        });
    }

    /// Grows or shrinks the block at `offset` from `size` to `new_size` bytes where it is, when
    /// it has the room: a small block within its class, the newest large block as far as the
    /// half goes. False when it must move.
    fn resize_in_place(&self, offset: usize, size: usize, new_size: usize) -> bool {
        if offset < LARGE_START {
            return class_of(size).is_some_and(|c| new_size <= 1 << (c as u32 + MIN_SHIFT));
        }
        let (end, new_end) = (
            offset + size.next_multiple_of(ALIGN),
            offset + new_size.next_multiple_of(ALIGN),
        );
        self.with_books(|books| {
            // Never past a quarter of the arena: a block that large is the system's.
            if end == books.large && new_end <= SIZE && new_size <= SIZE / 4 {
                books.large = new_end;
                true
            } else {
                new_end <= end
            }
        })
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

/// The largest class a block of `size` bytes holds; None when it is smaller than the smallest.
fn floor_class(size: usize) -> Option<usize> {
    let shift = size.checked_ilog2()?;
    let class = shift.checked_sub(MIN_SHIFT)? as usize;
    Some(class.min(CLASSES - 1))
}

// SAFETY: every block is either the arena's, at least of the layout's size and alignment and
// handed to one caller at a time (`claim`, `give_back`, `resize_in_place`), or the system
// allocator's, which gets back exactly the blocks it served (told apart by their address).
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
        match self.offset_of(ptr) {
            Some(offset) => self.give_back(offset, layout.size()),
            // SAFETY: not the arena's, so the system allocator served it with this layout.
            None => unsafe { System.dealloc(ptr, layout) },
        }
    }

    #[inline(never)]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let Some(offset) = self.offset_of(ptr) else {
            // SAFETY: the system allocator served `ptr` with `layout`.
            return unsafe { System.realloc(ptr, layout, new_size) };
        };
        if self.resize_in_place(offset, layout.size(), new_size) {
            return ptr;
        }
        // SAFETY: `layout.align()` is a valid alignment (the caller's layout had it) and
        // `new_size`, as the caller promises, does not overflow when rounded up to it.
        let new_layout = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        // SAFETY: `new_layout` has a non-zero size (GlobalAlloc::realloc requires it).
        let block = unsafe { self.alloc(new_layout) };
        if !block.is_null() {
            // SAFETY: both blocks hold at least the smaller of the two sizes, and they are
            // apart: the new one was handed out while the old one was still in use.
            unsafe { ptr::copy_nonoverlapping(ptr, block, layout.size().min(new_size)) };
            self.give_back(offset, layout.size());
        }
        block
    }
}

#[cfg(test)]
mod tests;
