//! Structs versioned by their caller: the first field is `uint32_t struct_size`, set by the host to `sizeof` the
//! struct as its header declares it, and ember writes only the whole fields that end within that size. This is
//! the convention of Win32's `cbSize` fields (e.g. `OSVERSIONINFOW.dwOSVersionInfoSize`): fields can be appended
//! in later versions without breaking hosts built against older headers, and a newer host on an older library
//! gets the fields the library knows, the rest of its struct untouched. The second field, `present`, is a bit
//! mask of the data fields present; it sits where padding would be, so every version of every host receives it.

use std::ptr;

use super::boundary::Failure;

/// A C struct versioned by its leading `struct_size`, then a `present` mask whose bit `i` marks data field `i`.
pub(crate) trait Versioned: Copy {
    /// The end offset (bytes) of every field in declaration order: `struct_size`, `present`, then the data
    /// fields. Fields are contiguous (each impl asserts it with [`contiguous`]), so copying up to an end writes
    /// exactly whole fields.
    const FIELD_ENDS: &'static [usize];
    fn set_present(&mut self, present: u32);
    fn present(&self) -> u32;
}

/// Implements [`Versioned`] for `$ty`, a `#[repr(C)]` struct of `struct_size: u32`, `present: u32`, then the
/// data fields listed, in declaration order, each with its type; gives it `FIELD_NAMES`, their names in order
/// (field `i` has presence bit `1 << i`). This list is the one the others are checked against: at compile time
/// the struct's layout (each field's type, contiguous fields in this order, nothing after the last but the
/// alignment's padding, at most 32 presence bits); in `tests/c_struct_fields.rs` the header's struct and
/// presence bits, the Go binding and the docs.
macro_rules! versioned_fields {
    ($ty:ident { $($field:ident: $field_ty:ty),+ $(,)? }) => {
        impl $crate::ffi::versioned::Versioned for $ty {
            const FIELD_ENDS: &'static [usize] =
                &[4, 8, $(::std::mem::offset_of!($ty, $field) + ::std::mem::size_of::<$field_ty>()),+];
            fn set_present(&mut self, present: u32) {
                self.present = present;
            }
            fn present(&self) -> u32 {
                self.present
            }
        }

        impl $ty {
            /// The data fields' names, in declaration order: field `i` has presence bit `1 << i`.
            pub const FIELD_NAMES: &'static [&'static str] = &[$(stringify!($field)),+];
        }

        $(const _: fn(&$ty) -> &$field_ty = |s| &s.$field;)+

        const _: () = {
            let ends = <$ty as $crate::ffi::versioned::Versioned>::FIELD_ENDS;
            let next_offsets = [::std::mem::offset_of!($ty, present), $(::std::mem::offset_of!($ty, $field)),+];
            assert!($crate::ffi::versioned::contiguous(ends, &next_offsets));
            let (end, align) = (ends[ends.len() - 1], ::std::mem::align_of::<$ty>());
            assert!(end.div_ceil(align) * align == ::std::mem::size_of::<$ty>());
            assert!(ends.len() - 2 <= 32);
        };
    };
}
pub(super) use versioned_fields;

/// Bytes of `struct_size` and `present`: the least a caller may declare.
const MIN_STRUCT_SIZE: usize = 8;

/// Whether consecutive fields touch (no interior padding that a prefix copy would write as garbage).
pub(crate) const fn contiguous(ends: &[usize], offsets_of_next: &[usize]) -> bool {
    let mut i = 0;
    while i < offsets_of_next.len() {
        if ends[i] != offsets_of_next[i] {
            return false;
        }
        i += 1;
    }
    true
}

/// The caller's declared size of the struct at `out`.
///
/// # Safety
/// `out` is non-NULL and points to at least 4 readable bytes.
pub(super) unsafe fn declared_size<T: Versioned>(out: *const T) -> Result<usize, Failure> {
    // SAFETY: by this function's contract; unaligned, since a host may pack its structs.
    let declared = unsafe { ptr::read_unaligned(out.cast::<u32>()) } as usize;
    if declared < MIN_STRUCT_SIZE {
        return Err(Failure::invalid_argument(format!(
            "out->struct_size = {declared}: set it to sizeof the struct (at least {MIN_STRUCT_SIZE})"
        )));
    }
    Ok(declared)
}

/// Writes the fields of `value` that end within `declared` bytes (a size checked by [`declared_size`]), leaving
/// `struct_size` and everything beyond untouched; `present` keeps only the bits of the data fields written.
///
/// # Safety
/// `out` is non-NULL and points to at least `declared` writable bytes.
pub(super) unsafe fn write_within<T: Versioned>(out: *mut T, mut value: T, declared: usize) {
    let fields_written = T::FIELD_ENDS.iter().take_while(|&&end| end <= declared).count();
    let data_fields_written = fields_written.saturating_sub(2);
    let mask = if data_fields_written >= 32 { u32::MAX } else { (1u32 << data_fields_written) - 1 };
    value.set_present(value.present() & mask);
    let end = T::FIELD_ENDS[fields_written - 1];
    let skip = T::FIELD_ENDS[0];
    // SAFETY: source and destination are distinct objects; the source is a whole `T`, and `end` ≤ both
    // `size_of::<T>()` and `declared`, which the host made writable; byte copies need no alignment.
    unsafe {
        ptr::copy_nonoverlapping((&value as *const T).cast::<u8>().add(skip), out.cast::<u8>().add(skip), end - skip)
    };
}
