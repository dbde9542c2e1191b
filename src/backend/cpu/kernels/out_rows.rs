//! `OutRows`: the only way a matmul writes its results, a view of a token-major output buffer restricted to a range
//! of rows, which can be split into disjoint views so that each thread of a pool writes its own rows.
//!
//! A matmul computes `n_cols × n_rows` outputs. Threads split the *rows* (each thread streams its share of the
//! weights once, for every column), so a thread's outputs are strided in memory: column `c` of rows `a..b` lies at
//! `c * stride + a .. c * stride + b`. `&mut [f32]` cannot express that partition, hence this type.

use std::marker::PhantomData;
use std::ops::Range;
use std::ptr::NonNull;

/// A mutable view of rows `rows()` of an output buffer holding `n_cols` columns of `stride` floats each
/// (token-major: element `(c, r)` at `c * stride + r`).
#[derive(Debug)]
pub struct OutRows<'a> {
    /// Start of the whole buffer (at least `n_cols * stride` floats), borrowed mutably for `'a`. Only the elements
    /// of rows `rows` are ever written through this view; the other views split from the same buffer own the others.
    base: NonNull<f32>,
    n_cols: usize,
    /// Floats from one column to the next.
    stride: usize,
    /// The rows this view may write, within `0..stride`.
    rows: Range<usize>,
    _buffer: PhantomData<&'a mut [f32]>,
}

// SAFETY: an OutRows is a unique borrow of the elements of its rows (views split from one buffer have disjoint row
// ranges, so no two views reach the same element), like a `&mut [f32]`, which is Send.
unsafe impl Send for OutRows<'_> {}

impl<'a> OutRows<'a> {
    /// A view of all rows `0..stride` of `buf`'s `n_cols` columns.
    ///
    /// # Panics
    /// When `buf` holds fewer than `n_cols * stride` floats.
    pub fn new(buf: &'a mut [f32], n_cols: usize, stride: usize) -> Self {
        let needed = n_cols.checked_mul(stride).expect("OutRows: n_cols * stride overflows");
        assert!(buf.len() >= needed, "OutRows: buffer of {} floats is too small for {n_cols} × {stride}", buf.len());
        OutRows { base: NonNull::from(buf).cast(), n_cols, stride, rows: 0..stride, _buffer: PhantomData }
    }

    /// The rows this view writes.
    pub fn rows(&self) -> Range<usize> {
        self.rows.clone()
    }

    pub fn n_cols(&self) -> usize {
        self.n_cols
    }

    /// Floats from one column to the next in the underlying buffer.
    pub fn stride(&self) -> usize {
        self.stride
    }

    /// Splits into the views of rows `rows().start..r` and `r..rows().end` (`r` is a row index, not an offset into
    /// the range), like `slice::split_at_mut`.
    ///
    /// # Panics
    /// When `r` lies outside `rows().start..=rows().end`.
    pub fn split_at(self, r: usize) -> (OutRows<'a>, OutRows<'a>) {
        assert!(self.rows.contains(&r) || r == self.rows.end, "OutRows::split_at({r}) outside rows {:?}", self.rows);
        let left = OutRows { rows: self.rows.start..r, ..self };
        let right = OutRows { rows: r..self.rows.end, ..self };
        (left, right)
    }

    /// Writes `values` to rows `r0..r0 + values.len()` of column `c`.
    ///
    /// # Panics
    /// When `c >= n_cols()` or the rows leave `rows()`.
    pub fn write(&mut self, c: usize, r0: usize, values: &[f32]) {
        assert!(c < self.n_cols, "OutRows: column {c} out of {}", self.n_cols);
        let in_range = r0 >= self.rows.start && r0.checked_add(values.len()).is_some_and(|end| end <= self.rows.end);
        assert!(in_range, "OutRows: rows {r0}..{} outside {:?}", r0.saturating_add(values.len()), self.rows);
        // SAFETY: c < n_cols and rows.end <= stride, so the destination lies inside the n_cols * stride floats that
        // `new` checked; this view uniquely borrows the rows `rows` of every column (see the Send impl), and the
        // source is a shared slice that cannot alias a unique borrow.
        unsafe {
            let dst = self.base.as_ptr().add(c * self.stride + r0);
            std::ptr::copy_nonoverlapping(values.as_ptr(), dst, values.len());
        }
    }

    /// Writes one value at `(c, r)`.
    ///
    /// # Panics
    /// When `c >= n_cols()` or `r` is outside `rows()`.
    pub fn set(&mut self, c: usize, r: usize, value: f32) {
        self.write(c, r, &[value]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_views_write_disjoint_rows() {
        let mut buf = vec![0f32; 2 * 5];
        let out = OutRows::new(&mut buf, 2, 5);
        let (mut a, mut b) = out.split_at(2);
        assert_eq!((a.rows(), b.rows()), (0..2, 2..5));
        std::thread::scope(|s| {
            s.spawn(move || a.write(1, 0, &[1.0, 2.0]));
            s.spawn(move || {
                b.write(0, 2, &[3.0, 4.0, 5.0]);
                b.set(1, 4, 6.0);
            });
        });
        assert_eq!(buf, [0.0, 0.0, 3.0, 4.0, 5.0, 1.0, 2.0, 0.0, 0.0, 6.0]);
    }

    #[test]
    #[should_panic(expected = "outside")]
    fn writing_past_the_range_panics() {
        let mut buf = vec![0f32; 8];
        let (mut a, _b) = OutRows::new(&mut buf, 1, 8).split_at(4);
        a.write(0, 3, &[1.0, 2.0]);
    }

    #[test]
    #[should_panic(expected = "column")]
    fn writing_past_the_columns_panics() {
        let mut buf = vec![0f32; 8];
        OutRows::new(&mut buf, 2, 4).set(2, 0, 1.0);
    }

    #[test]
    #[should_panic(expected = "split_at")]
    fn splitting_outside_the_range_panics() {
        let mut buf = vec![0f32; 8];
        let (a, _b) = OutRows::new(&mut buf, 1, 8).split_at(4);
        let _ = a.split_at(5);
    }
}
