use std::alloc::{GlobalAlloc, Layout};

use super::{Arena, LARGE_START, SIZE};

// The tests call the allocator as Rust's collections do; these wrappers carry the one promise
// each call needs.

fn alloc(arena: &Arena, size: usize, align: usize) -> *mut u8 {
    // SAFETY: every size asked for below is non-zero.
    unsafe { arena.alloc(Layout::from_size_align(size, align).unwrap()) }
}

fn alloc_zeroed(arena: &Arena, size: usize) -> *mut u8 {
    // SAFETY: as in `alloc`.
    unsafe { arena.alloc_zeroed(Layout::from_size_align(size, 8).unwrap()) }
}

fn dealloc(arena: &Arena, block: *mut u8, size: usize) {
    // SAFETY: `block` was served by `arena` with this layout and is not used again.
    unsafe { arena.dealloc(block, Layout::from_size_align(size, 8).unwrap()) }
}

fn realloc(arena: &Arena, block: *mut u8, size: usize, new_size: usize) -> *mut u8 {
    // SAFETY: `block` was served by `arena` with this layout; `new_size` is non-zero.
    unsafe { arena.realloc(block, Layout::from_size_align(size, 8).unwrap(), new_size) }
}

fn holds(arena: &Arena, block: *mut u8) -> bool {
    arena.offset_of(block).is_some()
}

fn fill(block: *mut u8, byte: u8, len: usize) {
    // SAFETY: `block` holds at least `len` bytes that are the caller's.
    unsafe { block.write_bytes(byte, len) }
}

fn bytes<'a>(block: *const u8, len: usize) -> &'a [u8] {
    // SAFETY: `block` holds at least `len` initialised bytes, not written while this is read.
    unsafe { std::slice::from_raw_parts(block, len) }
}

#[test]
fn blocks_come_from_the_arena_aligned_and_apart() {
    let arena = Box::new(Arena::new());
    let a = alloc(&arena, 3, 1);
    let b = alloc(&arena, 16, 64);
    let c = alloc(&arena, 17, 8);
    assert!(holds(&arena, a) && holds(&arena, b) && holds(&arena, c));
    assert_eq!(a as usize % 16, 0);
    assert_eq!(b as usize % 64, 0);
    assert!(b as usize >= a as usize + 16);
    assert!(c as usize >= b as usize + 16);
}

#[test]
fn a_freed_block_is_the_next_of_its_size_handed_out() {
    let arena = Box::new(Arena::new());
    let a = alloc(&arena, 24, 8);
    let b = alloc(&arena, 100, 8);
    dealloc(&arena, a, 24);
    dealloc(&arena, b, 100);
    assert_eq!(
        alloc(&arena, 30, 8),
        a,
        "24 and 30 bytes are both of the 32-byte class"
    );
    assert_eq!(alloc(&arena, 128, 8), b);
    let c = alloc(&arena, 30, 8);
    assert!(c != a && c != b, "a block in use is not handed out twice");
}

#[test]
fn a_block_grows_in_its_class_where_it_is_and_moves_with_its_bytes_beyond() {
    let arena = Box::new(Arena::new());
    let a = alloc(&arena, 40, 8);
    fill(a, 7, 40);
    assert_eq!(
        realloc(&arena, a, 40, 64),
        a,
        "40 and 64 bytes are both of the 64-byte class"
    );
    let moved = realloc(&arena, a, 64, 65);
    assert_ne!(moved, a);
    assert_eq!(bytes(moved, 40), [7; 40]);
    assert_eq!(alloc(&arena, 64, 8), a, "the block it left is used again");
    let shrunk = realloc(&arena, moved, 65, 8);
    assert_eq!(shrunk, moved, "a block shrinks where it is");
}

#[test]
fn the_newest_large_block_grows_and_is_taken_back_where_it_is() {
    let arena = Box::new(Arena::new());
    let small = alloc(&arena, 100, 8);
    let v = alloc(&arena, 2560, 8);
    assert!(arena.offset_of(small).unwrap() < LARGE_START);
    assert!(
        arena.offset_of(v).unwrap() >= LARGE_START,
        "large blocks take the upper half"
    );
    fill(v, 3, 2560);
    // Small blocks between its growths do not move it: it is still the newest large one.
    for size in [5120, 10240, 20480] {
        let _between = alloc(&arena, 24, 8);
        assert_eq!(
            realloc(&arena, v, size / 2, size),
            v,
            "grown to {size} where it is"
        );
    }
    assert_eq!(bytes(v, 2560), [3; 2560]);
    // Not past a quarter of the arena, though the newest: a block that large is the system's.
    let big = alloc(&arena, 40960, 8);
    let moved_big = realloc(&arena, big, 40960, SIZE / 4 + 16);
    assert!(!holds(&arena, moved_big));
    dealloc(&arena, moved_big, SIZE / 4 + 16);
    let w = alloc(&arena, 3000, 8);
    assert_eq!(
        w as usize,
        v as usize + 20480,
        "the next large block starts where it ends"
    );
    // An older large block moves when it grows; the newest, freed, gives its room back.
    let moved = realloc(&arena, v, 20480, 40960);
    assert_ne!(moved, v);
    assert_eq!(bytes(moved, 2560), [3; 2560]);
    dealloc(&arena, moved, 40960);
    assert_eq!(
        alloc(&arena, 8192, 8),
        moved,
        "the newest block's room was given back"
    );
    // A freed older large block is used again for a block of a class it holds.
    assert_eq!(
        alloc(&arena, 16384, 8),
        v,
        "20480 bytes hold a block of 16384"
    );
}

#[test]
fn a_used_up_arena_and_large_blocks_are_left_to_the_system() {
    let arena = Box::new(Arena::new());
    let large = alloc(&arena, SIZE / 4 + 1, 8);
    assert!(!large.is_null() && !holds(&arena, large));
    let mut blocks = Vec::new();
    let outside = loop {
        let block = alloc(&arena, SIZE / 8, 8);
        assert!(!block.is_null());
        if !holds(&arena, block) {
            break block;
        }
        blocks.push(block);
    };
    assert_eq!(blocks.len(), 4, "the upper half holds four eighths");
    // An arena block grown past the arena moves to the system's, its bytes with it.
    fill(blocks[0], 9, 4);
    let moved = realloc(&arena, blocks[0], SIZE / 8, SIZE);
    assert!(!holds(&arena, moved));
    assert_eq!(bytes(moved, 4), [9; 4]);
    // What it left is the arena's again.
    assert_eq!(alloc(&arena, SIZE / 8, 8), blocks[0]);
    dealloc(&arena, moved, SIZE);
    dealloc(&arena, outside, SIZE / 8);
    dealloc(&arena, large, SIZE / 4 + 1);
    // The lower half still serves small blocks.
    assert!(holds(&arena, alloc(&arena, 2048, 8)));
}

#[test]
fn zeroed_blocks_are_zero_even_where_the_arena_was_used_before() {
    let arena = Box::new(Arena::new());
    let a = alloc(&arena, 32, 8);
    fill(a, 0xff, 32);
    dealloc(&arena, a, 32);
    let b = alloc_zeroed(&arena, 32);
    assert_eq!(a, b);
    assert_eq!(bytes(b, 32), [0; 32]);
}

#[test]
fn threads_are_given_blocks_of_their_own() {
    let arena: &'static Arena = Box::leak(Box::new(Arena::new()));
    let threads: Vec<_> = (0..4u8)
        .map(|t| {
            std::thread::spawn(move || {
                let mut kept = Vec::new();
                for round in 0..500 {
                    let block = alloc(arena, 24, 8);
                    fill(block, t, 24);
                    // Every other block goes back at once, to be handed out again.
                    if round % 2 == 0 {
                        dealloc(arena, block, 24);
                    } else {
                        kept.push(block as usize);
                    }
                }
                for &block in &kept {
                    let held = bytes(block as *const u8, 24);
                    assert!(
                        held.iter().all(|&b| b == t),
                        "a block of thread {t} was overwritten"
                    );
                }
                kept
            })
        })
        .collect();
    let mut all: Vec<usize> = threads
        .into_iter()
        .flat_map(|t| t.join().unwrap())
        .collect();
    all.sort_unstable();
    assert!(
        all.windows(2).all(|w| w[1] - w[0] >= 24),
        "two blocks overlap"
    );
}
