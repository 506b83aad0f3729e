//! Typed pools: blocks sized from `T`'s layout, handed out as owners that drop `T` in place
//! and return the memory.

use core::alloc::Layout;
use core::fmt;
use core::marker::PhantomData;
use core::ops::{Deref, DerefMut};
use core::ptr::{self, NonNull};

use super::{Error, Heap};
use crate::BlockAlloc;

/// A pool of `T`s (and arrays of `T`) over a [`Heap`]: each value gets the smallest block
/// that holds `T` at its alignment, over-aligned types included.
pub struct TypedPool<T, A> {
    heap: Heap<A>,
    // The pool hands out `T`s but owns none: no drop check or auto-trait effect of `T`.
    _values: PhantomData<fn() -> T>,
}

impl<T, A: BlockAlloc> TypedPool<T, A> {
    /// A pool over `heap`; fails if the heap cannot hold even one `T` (too large, or more
    /// aligned than the region can honour).
    ///
    /// ```
    /// use buddyfree::heap::{Heap, Region, TypedPool};
    /// use buddyfree::{buddy::Knuth, Config, Locked};
    ///
    /// let memory = vec![0u8; (64 << 10) + 64].into_boxed_slice(); // + 64 to align the start
    /// let alloc = Locked::<Knuth>::new(Knuth::new(Config::new(1 << 10, 4)).unwrap());
    /// let heap = Heap::new(Region::from_box(memory), 64, alloc).unwrap();
    /// let pool = TypedPool::<[u64; 4], _>::new(heap).unwrap();
    /// let block = pool.alloc([1, 2, 3, 4]).map_err(|(e, _)| e).unwrap();
    /// assert_eq!(block[2], 3);
    /// ```
    pub fn new(heap: Heap<A>) -> Result<Self, Error> {
        let layout = Layout::new::<T>();
        if layout.size() != 0 {
            heap.order_of(layout)?;
        }
        Ok(TypedPool {
            heap,
            _values: PhantomData,
        })
    }

    /// Moves `value` into the pool; on failure gives it back with the reason.
    pub fn alloc(&self, value: T) -> Result<PoolBox<'_, T, A>, (Error, T)> {
        let layout = Layout::new::<T>();
        let ptr = match self.heap.allocate_block(layout) {
            Ok(block) => block.cast::<T>(),
            Err(e) => return Err((e, value)),
        };
        // SAFETY: the block is fresh, at least `size_of::<T>()` bytes and aligned for `T` (or
        // a dangling aligned pointer when `T` is zero-sized).
        unsafe { ptr.write(value) };
        let heap = &self.heap;
        Ok(PoolBox { ptr, layout, heap })
    }

    /// An array of `n` values, the `i`-th being `init(i)`. If `init` panics, the values made
    /// so far are dropped and the block returned.
    pub fn alloc_slice(
        &self,
        n: usize,
        mut init: impl FnMut(usize) -> T,
    ) -> Result<PoolSlice<'_, T, A>, Error> {
        let layout = Layout::array::<T>(n).map_err(|_| Error::TooLarge)?;
        let first = self.heap.allocate_block(layout)?.cast::<T>();
        // Owns the block from here on, so a panic in `init` drops exactly the values made.
        let mut slice = PoolBox {
            ptr: NonNull::slice_from_raw_parts(first, 0),
            layout,
            heap: &self.heap,
        };
        for i in 0..n {
            // SAFETY: `i < n`, inside the block of `n` `T`s; slot `i` is uninitialised.
            unsafe { first.add(i).write(init(i)) };
            slice.ptr = NonNull::slice_from_raw_parts(first, i + 1);
        }
        Ok(slice)
    }

    /// The heap under the pool (for its statistics).
    pub fn heap(&self) -> &Heap<A> {
        &self.heap
    }
}

/// A `T` in a [`TypedPool`] (or the `[T]` of a [`PoolSlice`]); dropping it drops the value
/// and returns the block.
pub struct PoolBox<'a, T: ?Sized, A: BlockAlloc> {
    /// The value: initialised, all of it (a slice: as many values as made so far).
    ptr: NonNull<T>,
    /// What the block was allocated for (a slice's whole array, however many are made).
    layout: Layout,
    heap: &'a Heap<A>,
}

/// An array of `T`s in a [`TypedPool`]; dropping it drops them and returns the block.
pub type PoolSlice<'a, T, A> = PoolBox<'a, [T], A>;

// SAFETY: a `PoolBox` owns its value like a `Box` does; the heap reference is `Sync`.
unsafe impl<T: ?Sized + Send, A: BlockAlloc> Send for PoolBox<'_, T, A> {}
// SAFETY: `&PoolBox` gives only `&T`.
unsafe impl<T: ?Sized + Sync, A: BlockAlloc> Sync for PoolBox<'_, T, A> {}

impl<T, A: BlockAlloc> PoolBox<'_, T, A> {
    /// Takes the value out and returns the block.
    pub fn into_inner(self) -> T {
        let this = core::mem::ManuallyDrop::new(self);
        // SAFETY: the value is initialised and, `this` never being dropped, read only once.
        let value = unsafe { this.ptr.read() };
        this.heap.deallocate_block(this.ptr.cast(), this.layout);
        value
    }

    /// The value's address.
    pub fn as_ptr(&self) -> *const T {
        self.ptr.as_ptr()
    }
}

impl<T: ?Sized, A: BlockAlloc> Deref for PoolBox<'_, T, A> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: initialised by `alloc` or `alloc_slice`, owned by `self`, shared borrow of
        // `self`.
        unsafe { self.ptr.as_ref() }
    }
}

impl<T: ?Sized, A: BlockAlloc> DerefMut for PoolBox<'_, T, A> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as in `deref`, with `self` borrowed exclusively.
        unsafe { self.ptr.as_mut() }
    }
}

impl<T: ?Sized, A: BlockAlloc> Drop for PoolBox<'_, T, A> {
    fn drop(&mut self) {
        // SAFETY: the value is initialised and dropped once; the block is not used after.
        unsafe { ptr::drop_in_place(self.ptr.as_ptr()) };
        self.heap.deallocate_block(self.ptr.cast(), self.layout);
    }
}

impl<T: ?Sized + fmt::Debug, A: BlockAlloc> fmt::Debug for PoolBox<'_, T, A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        (**self).fmt(f)
    }
}
