//! The registry of everything ember has handed to C: engine, request and embeddings handles, and strings. This is the
//! C API's one piece of process-wide state (besides the log callback of `log.rs`): a C pointer cannot carry
//! ownership or liveness, so the registry is what tells a live handle from a freed, stale or random one.
//!
//! A handle is not an address. Its pointer value encodes a slot index and a serial number, and the slot stores
//! the exact value it issued; a lookup that finds a different value (freed slot, reused slot, another type's
//! handle, a random pointer) is refused with `EMBER_STATUS_INVALID_HANDLE`. Nothing the host passes as a handle
//! is ever dereferenced, so no misuse of a handle is undefined behaviour.
//!
//! Bit layout of a handle value (64-bit targets only):
//! - bits 0..24: slot index + 1 (so a handle is never NULL), at most 2^24 - 1 live handles per type;
//! - bits 24..32: the type tag (engine, request or embeddings), so one type's handle is never taken for another's;
//! - bits 32..64: a serial number, per type, never 0, incremented on every issue. A freed handle stays invalid
//!   until 2^32 later handles of its type have been issued *and* one of them lands in its old slot.
//!
//! Fork: a handle belongs to the process that created it. A child forked from that process inherits the tables
//! but not the engine threads (fork copies only the calling thread), so its submissions would never run and
//! freeing its engines would join threads that do not exist. Each slot records its creator's pid; a lookup from
//! another process is refused with `EMBER_STATUS_FORKED`, and nothing of the object is touched or dropped in
//! the child (its memory stays as fork copied it).
//!
//! Locking: each table is an `RwLock` held only to find, insert or remove an entry and clone its `Arc`; all
//! work on an object happens after the lock is released, on the cloned `Arc`, so a handle freed by one thread
//! while another uses it is never freed under it (the object lives until the last user drops its `Arc`).

use std::collections::BTreeMap;
use std::ffi::{c_char, CString};
use std::ptr::NonNull;
use std::sync::{Arc, Mutex, RwLock};

use super::boundary::Failure;
use super::embeddings::EmbeddingsObject;
use super::engine::EngineObject;
use super::request::RequestObject;
use super::status::EmberStatus;

const _: () = assert!(usize::BITS == 64, "handle values pack 64 bits into a pointer");

/// Live engine handles.
pub(super) static ENGINES: HandleTable<EngineObject> = HandleTable::new(HandleKind::ENGINE);
/// Live request handles.
pub(super) static REQUESTS: HandleTable<RequestObject> = HandleTable::new(HandleKind::REQUEST);
/// Live embeddings handles (the results of `engine_embed_vectors` and `engine_rerank_scores`).
pub(super) static EMBEDDINGS: HandleTable<EmbeddingsObject> = HandleTable::new(HandleKind::EMBEDDINGS);
/// The strings handed out and not yet freed with `engine_string_free`.
pub(super) static STRINGS: StringTable = StringTable::new();

const INDEX_BITS: u32 = 24;
const INDEX_MASK: usize = (1 << INDEX_BITS) - 1;
/// Slots per table; one index value (0) is kept so that handles are never NULL.
const MAX_SLOTS: usize = INDEX_MASK;

/// Which type of handle a table issues.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct HandleKind {
    tag: u8,
    /// The type's name, for messages.
    name: &'static str,
    /// The name with its article ("an engine").
    a_name: &'static str,
}

impl HandleKind {
    const ENGINE: HandleKind = HandleKind { tag: 0xE1, name: "engine", a_name: "an engine" };
    const REQUEST: HandleKind = HandleKind { tag: 0xE2, name: "request", a_name: "a request" };
    const EMBEDDINGS: HandleKind = HandleKind { tag: 0xE3, name: "embeddings", a_name: "an embeddings" };

    fn of_tag(tag: u8) -> Option<HandleKind> {
        [HandleKind::ENGINE, HandleKind::REQUEST, HandleKind::EMBEDDINGS].into_iter().find(|k| k.tag == tag)
    }
}

/// One table of handles, safe to share between threads.
pub(super) struct HandleTable<T> {
    inner: RwLock<Slots<T>>,
}

struct Slots<T> {
    kind: HandleKind,
    /// Slot `i` is named by handles whose index bits are `i + 1`.
    slots: Vec<Slot<T>>,
    /// Indices of vacant slots, reused last-in first-out.
    vacant: Vec<usize>,
    /// The serial of the last handle issued.
    serial: u32,
}

struct Slot<T> {
    /// The handle value issued for this slot's object; 0 while vacant.
    handle: usize,
    /// The process that created the object.
    pid: u32,
    object: Option<Arc<T>>,
}

impl<T> Slot<T> {
    const VACANT: Slot<T> = Slot { handle: 0, pid: 0, object: None };
}

impl<T> HandleTable<T> {
    const fn new(kind: HandleKind) -> Self {
        HandleTable { inner: RwLock::new(Slots { kind, slots: Vec::new(), vacant: Vec::new(), serial: 0 }) }
    }

    /// Registers `object` and returns its new handle value.
    pub fn insert(&self, object: Arc<T>) -> Result<usize, Failure> {
        let mut t = self.inner.write().unwrap_or_else(|e| e.into_inner());
        let index = match t.vacant.pop() {
            Some(i) => i,
            None if t.slots.len() < MAX_SLOTS => {
                t.slots.push(Slot::VACANT);
                t.slots.len() - 1
            }
            None => {
                return Err(Failure::new(
                    EmberStatus::TooManyHandles,
                    format!("{MAX_SLOTS} {} handles are live; free some first", t.kind.name),
                ))
            }
        };
        t.serial = t.serial.wrapping_add(1).max(1);
        let handle = (t.serial as usize) << 32 | usize::from(t.kind.tag) << INDEX_BITS | (index + 1);
        t.slots[index] = Slot { handle, pid: std::process::id(), object: Some(object) };
        Ok(handle)
    }

    /// The object of a live handle.
    pub fn get(&self, handle: usize) -> Result<Arc<T>, Failure> {
        let t = self.inner.read().unwrap_or_else(|e| e.into_inner());
        let index = t.find_here(handle)?;
        Ok(Arc::clone(t.slots[index].object.as_ref().expect("a slot holding a handle holds its object")))
    }

    /// Unregisters a live handle and returns its object; the handle is invalid from now on. In a forked child
    /// the handle of a parent's object is refused and stays registered, so that its object is never dropped there.
    pub fn remove(&self, handle: usize) -> Result<Arc<T>, Failure> {
        let mut t = self.inner.write().unwrap_or_else(|e| e.into_inner());
        let index = t.find_here(handle)?;
        let slot = std::mem::replace(&mut t.slots[index], Slot::VACANT);
        t.vacant.push(index);
        Ok(slot.object.expect("a slot holding a handle holds its object"))
    }
}

impl<T> Slots<T> {
    /// The slot index of the live handle `handle`, created by this process.
    fn find_here(&self, handle: usize) -> Result<usize, Failure> {
        let index = self.find(handle)?;
        let (creator, here) = (self.slots[index].pid, std::process::id());
        if creator != here {
            return Err(Failure::new(
                EmberStatus::Forked,
                format!(
                    "this {} handle was created by process {creator}, and this is process {here}, forked from it: \
                     ember's engine threads do not survive fork(), so a forked child cannot use its parent's engines \
                     or requests; create engines after fork (docs/c_api.md, \"Processes and fork\")",
                    self.kind.name
                ),
            ));
        }
        Ok(index)
    }

    /// The slot index of the live handle `handle`, or why it is not one.
    fn find(&self, handle: usize) -> Result<usize, Failure> {
        let (kind, a_kind) = (self.kind.name, self.kind.a_name);
        if handle == 0 {
            return Err(Failure::invalid_argument(format!("the {kind} handle is NULL")));
        }
        let tag = (handle >> INDEX_BITS) as u8;
        if tag != self.kind.tag {
            return Err(Failure::invalid_handle(match HandleKind::of_tag(tag) {
                Some(other) => format!("{} handle was passed where {a_kind} handle is expected", other.a_name),
                None => format!("{handle:#x} is not {a_kind} handle (never issued by ember, or corrupted)"),
            }));
        }
        let index = (handle & INDEX_MASK).wrapping_sub(1);
        match self.slots.get(index) {
            Some(slot) if slot.handle == handle => Ok(index),
            _ => Err(Failure::invalid_handle(format!(
                "{handle:#x} is not a live {kind} handle (already freed, or never issued)"
            ))),
        }
    }
}

/// The strings ember handed to the host and the host has not freed: `engine_string_free` frees only these,
/// once. Keyed by address; the pointer used to free is the one stored here, never the host's argument.
pub(super) struct StringTable {
    live: Mutex<BTreeMap<usize, HostString>>,
}

/// A string owned by the host until `engine_string_free`; frees itself when dropped.
struct HostString(NonNull<c_char>);

// SAFETY: a `HostString` is the unique owner of its allocation (from `CString::into_raw`); moving that ownership
// between threads is what `CString: Send` allows too.
unsafe impl Send for HostString {}

impl Drop for HostString {
    fn drop(&mut self) {
        // SAFETY: the pointer came from `CString::into_raw` (in `StringTable::give`) and this is its only owner,
        // dropped once.
        drop(unsafe { CString::from_raw(self.0.as_ptr()) });
    }
}

impl StringTable {
    const fn new() -> Self {
        StringTable { live: Mutex::new(BTreeMap::new()) }
    }

    /// Hands `string` to the host: returns the pointer it reads (and frees with `engine_string_free`).
    pub fn give(&self, string: CString) -> *mut c_char {
        let ptr = string.into_raw();
        // `into_raw` never returns NULL.
        let owned = HostString(NonNull::new(ptr).expect("CString::into_raw is never NULL"));
        self.live.lock().unwrap_or_else(|e| e.into_inner()).insert(ptr.addr(), owned);
        ptr
    }

    /// Frees the string at `ptr` if it is a live one of ours; says whether it was.
    pub fn free(&self, ptr: *mut c_char) -> bool {
        let owned = self.live.lock().unwrap_or_else(|e| e.into_inner()).remove(&ptr.addr());
        // Dropped (freed) here, after the lock is released.
        owned.is_some()
    }
}

/// The C pointer that carries handle value `handle`. Never dereferenced by anyone: it has no provenance.
pub(super) fn to_pointer<T>(handle: usize) -> *mut T {
    std::ptr::without_provenance_mut(handle)
}

#[cfg(test)]
mod tests {
    use super::*;

    const KIND: HandleKind = HandleKind::ENGINE;

    #[test]
    fn insert_get_remove_and_stale_handles() {
        let table: HandleTable<u32> = HandleTable::new(KIND);
        let a = table.insert(Arc::new(1)).unwrap();
        let b = table.insert(Arc::new(2)).unwrap();
        assert_ne!(a, b);
        assert_eq!(*table.get(a).unwrap(), 1);
        assert_eq!(*table.remove(a).unwrap(), 1);
        assert_eq!(table.get(a).unwrap_err().status, EmberStatus::InvalidHandle);
        assert_eq!(table.remove(a).unwrap_err().status, EmberStatus::InvalidHandle, "double free");
        // The freed slot is reused with a new serial: the old handle stays invalid.
        let c = table.insert(Arc::new(3)).unwrap();
        assert_eq!(c & INDEX_MASK, a & INDEX_MASK);
        assert_ne!(c, a);
        assert_eq!(table.get(a).unwrap_err().status, EmberStatus::InvalidHandle);
        assert_eq!(*table.get(c).unwrap(), 3);
        assert_eq!(*table.get(b).unwrap(), 2);
    }

    #[test]
    fn null_foreign_and_wrong_type_values_are_refused() {
        let table: HandleTable<u32> = HandleTable::new(KIND);
        let a = table.insert(Arc::new(1)).unwrap();
        assert_eq!(table.get(0).unwrap_err().status, EmberStatus::InvalidArgument);
        for value in [1, 0xdead_beef, a + 1, a ^ (1 << 40), usize::MAX, 0x7fff_1234_5670] {
            assert_eq!(table.get(value).unwrap_err().status, EmberStatus::InvalidHandle, "{value:#x}");
        }
        let request_like = (a & !(0xff << INDEX_BITS)) | usize::from(HandleKind::REQUEST.tag) << INDEX_BITS;
        let e = table.get(request_like).unwrap_err();
        let expected = "a request handle was passed where an engine handle is expected";
        assert!(matches!(e.detail, super::super::boundary::Detail::Text(ref m) if m == expected));
    }

    #[test]
    fn a_handle_of_another_process_is_refused_and_kept() {
        let table: HandleTable<u32> = HandleTable::new(KIND);
        let h = table.insert(Arc::new(1)).unwrap();
        // What a forked child sees: the slot says another process created it.
        table.inner.write().unwrap().slots[(h & INDEX_MASK) - 1].pid = std::process::id() + 1;
        assert_eq!(table.get(h).unwrap_err().status, EmberStatus::Forked);
        assert_eq!(table.remove(h).unwrap_err().status, EmberStatus::Forked);
        table.inner.write().unwrap().slots[(h & INDEX_MASK) - 1].pid = std::process::id();
        assert_eq!(*table.get(h).unwrap(), 1, "still registered: nothing was dropped");
    }

    #[test]
    fn an_object_outlives_its_handle_while_in_use() {
        let table: HandleTable<String> = HandleTable::new(KIND);
        let h = table.insert(Arc::new("alive".to_owned())).unwrap();
        let in_use = table.get(h).unwrap();
        drop(table.remove(h).unwrap());
        assert_eq!(*in_use, "alive");
    }

    #[test]
    fn strings_are_freed_once() {
        let strings = StringTable::new();
        let p = strings.give(CString::new("body").unwrap());
        // SAFETY: `p` is a live NUL-terminated string until freed.
        assert_eq!(unsafe { std::ffi::CStr::from_ptr(p) }.to_str(), Ok("body"));
        assert!(strings.free(p));
        assert!(!strings.free(p), "double free");
        assert!(!strings.free(0x2000 as *mut c_char), "foreign pointer");
    }
}
