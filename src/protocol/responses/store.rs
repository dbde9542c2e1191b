//! The responses `previous_response_id` continues: each stored response's whole conversation (its input
//! messages and its output, as Chat Completions messages), kept in memory, bounded in count, bytes and age, the
//! oldest evicted first. Nothing is written to disk; a restart forgets them, as an engine's KV cache.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

/// Most responses kept.
pub const MAX_STORED_RESPONSES: usize = 1024;
/// Most bytes of conversation kept (their JSON text), all responses together.
pub const MAX_STORED_BYTES: usize = 64 << 20;
/// How long a response stays after it was stored.
pub const STORED_RESPONSE_TTL: Duration = Duration::from_secs(3600);

/// Stored responses, oldest first.
#[derive(Debug, Default)]
pub struct ResponseStore {
    entries: Mutex<VecDeque<Entry>>,
}

#[derive(Debug)]
struct Entry {
    id: String,
    stored_at: Instant,
    bytes: usize,
    conversation: Arc<Vec<Value>>,
}

impl ResponseStore {
    pub fn new() -> Self {
        ResponseStore::default()
    }

    /// Keeps `conversation` under `id` (replacing an earlier one of that id), evicting what the bounds require.
    /// A conversation larger than all the store may hold is not kept.
    pub fn insert(&self, id: &str, conversation: Vec<Value>) {
        let bytes = conversation.iter().map(|m| m.to_string().len()).sum::<usize>() + id.len();
        if bytes > MAX_STORED_BYTES {
            return;
        }
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        entries.retain(|e| e.id != id);
        Self::evict_expired(&mut entries, Instant::now());
        let mut total: usize = entries.iter().map(|e| e.bytes).sum();
        while entries.len() >= MAX_STORED_RESPONSES || total + bytes > MAX_STORED_BYTES {
            let Some(oldest) = entries.pop_front() else { break };
            total -= oldest.bytes;
        }
        entries.push_back(Entry {
            id: id.to_owned(),
            stored_at: Instant::now(),
            bytes,
            conversation: Arc::new(conversation),
        });
    }

    /// The conversation stored under `id`, if it is still kept.
    pub fn get(&self, id: &str) -> Option<Arc<Vec<Value>>> {
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        Self::evict_expired(&mut entries, Instant::now());
        entries.iter().find(|e| e.id == id).map(|e| Arc::clone(&e.conversation))
    }

    /// How many responses are kept now.
    pub fn len(&self) -> usize {
        self.entries.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// The bytes of conversation kept now (their JSON text and ids), at most [`MAX_STORED_BYTES`].
    pub fn bytes(&self) -> usize {
        self.entries.lock().unwrap_or_else(|e| e.into_inner()).iter().map(|e| e.bytes).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn evict_expired(entries: &mut VecDeque<Entry>, now: Instant) {
        while entries.front().is_some_and(|e| now.duration_since(e.stored_at) > STORED_RESPONSE_TTL) {
            entries.pop_front();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn keeps_at_most_the_newest_responses() {
        let store = ResponseStore::new();
        for i in 0..MAX_STORED_RESPONSES + 3 {
            store.insert(&format!("resp_{i}"), vec![json!({"role": "user", "content": "hi"})]);
        }
        assert_eq!(store.len(), MAX_STORED_RESPONSES);
        assert!(store.get("resp_0").is_none() && store.get("resp_2").is_none());
        assert!(store.get("resp_3").is_some());
        assert!(store.get(&format!("resp_{}", MAX_STORED_RESPONSES + 2)).is_some());
    }

    #[test]
    fn bytes_are_bounded_and_a_too_large_conversation_is_not_kept() {
        let store = ResponseStore::new();
        let big = "x".repeat(MAX_STORED_BYTES / 3);
        for i in 0..4 {
            store.insert(&format!("r{i}"), vec![json!(big)]);
        }
        assert_eq!(store.len(), 2, "two thirds of the bound fit beside a third: the oldest two went");
        store.insert("huge", vec![json!("y".repeat(MAX_STORED_BYTES + 1))]);
        assert!(store.get("huge").is_none());
        assert_eq!(store.len(), 2);
    }

    /// A hostile mix of sizes and ids, many times the bounds over: after every insertion both bounds hold, and
    /// the newest response that fits is kept.
    #[test]
    fn the_bounds_hold_under_a_hostile_loop() {
        let store = ResponseStore::new();
        // Mostly small conversations, which the count bounds, and now and then ones the bytes bound.
        let size_of = |i: usize| match i % 300 {
            7 => MAX_STORED_BYTES / 2 + 1,
            150 => MAX_STORED_BYTES + 1,
            200..=202 => MAX_STORED_BYTES / 7,
            n => n,
        };
        for i in 0..3 * MAX_STORED_RESPONSES {
            let size = size_of(i);
            // Every fifth reuses an older id; the rest are new.
            let id = if i % 5 == 0 { format!("resp_{}", i / 2) } else { format!("resp_{i}") };
            store.insert(&id, vec![json!("z".repeat(size))]);
            assert!(store.len() <= MAX_STORED_RESPONSES, "{} entries after {i}", store.len());
            assert!(store.bytes() <= MAX_STORED_BYTES, "{} bytes after {i}", store.bytes());
            let fits = size + id.len() + 2 <= MAX_STORED_BYTES;
            let kept = store.get(&id).map(|c| c[0].as_str().map(str::len));
            if fits {
                assert_eq!(kept, Some(Some(size)), "the newest is kept, {i}");
            } else {
                assert_ne!(kept, Some(Some(size)), "one past every bound is not, {i}");
            }
        }
    }

    #[test]
    fn storing_an_id_again_replaces_it() {
        let store = ResponseStore::new();
        store.insert("a", vec![json!(1)]);
        store.insert("a", vec![json!(2)]);
        assert_eq!((store.len(), store.get("a").unwrap()[0].clone()), (1, json!(2)));
    }
}
