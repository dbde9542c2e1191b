//! Engine-wide counters as a C struct, versioned by `struct_size` like the metrics structs: how many sequences
//! run and wait, how full the KV cache is (both block pools), what the prefix cache holds and found, which CPU
//! kernel path serves it. What a host shows on a health page, or checks to know that a
//! cancelled request really left the engine.

use super::boundary::{boundary, Failure};
use super::engine::EmberEngine;
use super::registry::ENGINES;
use super::status::EmberStatus;
use super::versioned::{declared_size, versioned_fields, write_within};

/// Presence bit of `EmberStats.num_running`.
pub const EMBER_STATS_NUM_RUNNING: u32 = 1 << 0;
/// Presence bit of `EmberStats.num_waiting`.
pub const EMBER_STATS_NUM_WAITING: u32 = 1 << 1;
/// Presence bit of `EmberStats.kv_blocks_free`.
pub const EMBER_STATS_KV_BLOCKS_FREE: u32 = 1 << 2;
/// Presence bit of `EmberStats.kv_blocks_total`.
pub const EMBER_STATS_KV_BLOCKS_TOTAL: u32 = 1 << 3;
/// Presence bit of `EmberStats.num_steps`.
pub const EMBER_STATS_NUM_STEPS: u32 = 1 << 4;
/// Presence bit of `EmberStats.cpu_kernels` (set when the engine runs on the CPU).
pub const EMBER_STATS_CPU_KERNELS: u32 = 1 << 5;
/// Presence bit of `EmberStats.cpu_threads` (set when the engine runs on the CPU).
pub const EMBER_STATS_CPU_THREADS: u32 = 1 << 6;
/// Presence bit of `EmberStats.kv_window_blocks_free` (set when the engine has a sliding-window pool).
pub const EMBER_STATS_KV_WINDOW_BLOCKS_FREE: u32 = 1 << 7;
/// Presence bit of `EmberStats.kv_window_blocks_total` (set when the engine has a sliding-window pool).
pub const EMBER_STATS_KV_WINDOW_BLOCKS_TOTAL: u32 = 1 << 8;
/// Presence bit of `EmberStats.prefix_cache_blocks` (set when the engine caches prefixes).
pub const EMBER_STATS_PREFIX_CACHE_BLOCKS: u32 = 1 << 9;
/// Presence bit of `EmberStats.num_preemptions`.
pub const EMBER_STATS_NUM_PREEMPTIONS: u32 = 1 << 10;
/// Presence bit of `EmberStats.prefix_cache_queries` (set when the engine caches prefixes).
pub const EMBER_STATS_PREFIX_CACHE_QUERIES: u32 = 1 << 11;
/// Presence bit of `EmberStats.prefix_cache_hits` (set when the engine caches prefixes).
pub const EMBER_STATS_PREFIX_CACHE_HITS: u32 = 1 << 12;
/// Presence bit of `EmberStats.spec_decode_num_draft_tokens` (set when the engine speculates).
pub const EMBER_STATS_SPEC_DECODE_NUM_DRAFT_TOKENS: u32 = 1 << 13;
/// Presence bit of `EmberStats.spec_decode_num_accepted_tokens` (set when the engine speculates).
pub const EMBER_STATS_SPEC_DECODE_NUM_ACCEPTED_TOKENS: u32 = 1 << 14;

/// Presence bit of `EmberStats.model_load_time_ms`.
pub const EMBER_STATS_MODEL_LOAD_TIME_MS: u32 = 1 << 15;
/// `EmberStats.cpu_kernels`: the portable scalar path.
pub const EMBER_CPU_KERNELS_SCALAR: u32 = 1;
/// `EmberStats.cpu_kernels`: the AVX2 (with FMA and F16C) path.
pub const EMBER_CPU_KERNELS_AVX2: u32 = 2;
/// `EmberStats.cpu_kernels`: the AVX-512 (F, BW, VL, VNNI) path.
pub const EMBER_CPU_KERNELS_AVX512: u32 = 3;
/// `EmberStats.cpu_kernels`: the AVX-512 path with the batch matmuls on AMX-INT8 tiles (Intel since Sapphire Rapids).
pub const EMBER_CPU_KERNELS_AMX: u32 = 4;

/// The `EMBER_CPU_KERNELS_*` value of a kernel path's name (0 for a name this version does not know).
fn cpu_kernels_code(name: &str) -> u32 {
    match name {
        "scalar" => EMBER_CPU_KERNELS_SCALAR,
        "avx2" => EMBER_CPU_KERNELS_AVX2,
        "avx512" => EMBER_CPU_KERNELS_AVX512,
        "amx" => EMBER_CPU_KERNELS_AMX,
        _ => 0,
    }
}

/// Counters of one engine, as of its last step. The engine thread updates them when it has scheduled a step
/// (before any of the step's tokens reach a host), after the step, and whenever a request finishes: a host that
/// has seen a request's token also sees it counted, and one that has seen it finish sees it gone.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct EmberStats {
    /// Set by the caller to `sizeof(EmberStats)` before the call; never written by ember.
    pub struct_size: u32,
    /// `EMBER_STATS_*` bits of the fields present (and written).
    pub present: u32,
    /// Sequences (choices) admitted and not finished.
    pub num_running: u32,
    /// Sequences waiting for admission (new, or preempted and waiting to be recomputed).
    pub num_waiting: u32,
    /// KV cache blocks free (of the global pool, which holds every layer's keys and values but those of
    /// sliding-window layers when the engine gives them a pool of their own).
    pub kv_blocks_free: u32,
    /// KV cache blocks in all (of the global pool).
    pub kv_blocks_total: u32,
    /// Forward steps run since the engine started.
    pub num_steps: u64,
    /// The CPU kernel path serving the engine, an `EMBER_CPU_KERNELS_*` value (every path computes the same
    /// results; the path decides speed only).
    pub cpu_kernels: u32,
    /// Threads computing each CPU operation, the engine thread included.
    pub cpu_threads: u32,
    /// Blocks free in the sliding-window layers' own pool (a model with such layers, e.g. Gemma 3, on the CPU):
    /// a sequence holds there only the blocks of positions its windows still reach, so the pool needs fewer
    /// blocks than the global one. All free again once no request runs.
    pub kv_window_blocks_free: u32,
    /// Blocks of the sliding-window layers' pool in all.
    pub kv_window_blocks_total: u32,
    /// Blocks of the global pool findable in the prefix cache now, held by running sequences or free (counted in
    /// `kv_blocks_free`: a free cached block is evicted, least recently used first, when a block is needed).
    pub prefix_cache_blocks: u32,
    /// Sequences preempted since the engine started (their KV blocks taken back for others, to be recomputed).
    pub num_preemptions: u32,
    /// Prompt tokens looked up in the prefix cache when sequences were admitted, since the engine started.
    pub prefix_cache_queries: u64,
    /// Of those, the tokens found cached (not computed): `hits / queries` is the cache's hit rate.
    pub prefix_cache_hits: u64,
    /// Speculative decoding: draft tokens verified since the engine started (vLLM's
    /// `spec_decode_num_draft_tokens`).
    pub spec_decode_num_draft_tokens: u64,
    /// Of those, the tokens accepted: `accepted / draft` is the engine's acceptance rate.
    pub spec_decode_num_accepted_tokens: u64,
    /// How long `engine_new` took, in milliseconds: from the call to the engine ready to serve (the model read
    /// or mapped and validated, the backend built).
    pub model_load_time_ms: f64,
}

versioned_fields!(EmberStats {
    num_running: u32,
    num_waiting: u32,
    kv_blocks_free: u32,
    kv_blocks_total: u32,
    num_steps: u64,
    cpu_kernels: u32,
    cpu_threads: u32,
    kv_window_blocks_free: u32,
    kv_window_blocks_total: u32,
    prefix_cache_blocks: u32,
    num_preemptions: u32,
    prefix_cache_queries: u64,
    prefix_cache_hits: u64,
    spec_decode_num_draft_tokens: u64,
    spec_decode_num_accepted_tokens: u64,
    model_load_time_ms: f64,
});

/// Writes the engine's counters into `*out`, as far as `out->struct_size` (set by the caller, at least 8) reaches.
///
/// Returns `EMBER_STATUS_OK`; on failure nothing is written: `EMBER_STATUS_INVALID_HANDLE` (a freed, stale or
/// foreign engine), `EMBER_STATUS_INVALID_ARGUMENT` (NULL `out`, `struct_size` < 8).
///
/// Thread safety: any thread, at any time; reads atomic counters only (no lock, no allocation).
///
/// # Safety
/// `out` is NULL or points to `out->struct_size` writable bytes whose first 4 hold `struct_size`.
#[no_mangle]
pub unsafe extern "C" fn engine_get_stats(engine: *const EmberEngine, out: *mut EmberStats) -> EmberStatus {
    boundary("engine_get_stats", || {
        if out.is_null() {
            return Err(Failure::invalid_argument("out is NULL"));
        }
        // SAFETY: non-NULL; readable by this function's contract.
        let declared = unsafe { declared_size(out) }?;
        let object = ENGINES.get(engine.addr())?;
        let stats = object.with_engine(|e| {
            let (free, total) = e.kv_blocks();
            let clamp = |v: usize| u32::try_from(v).unwrap_or(u32::MAX);
            let cpu = e.cpu_serving();
            let cpu_bits = if cpu.is_some() { EMBER_STATS_CPU_KERNELS | EMBER_STATS_CPU_THREADS } else { 0 };
            let window = e.kv_window_blocks();
            let window_bits = match window {
                Some(_) => EMBER_STATS_KV_WINDOW_BLOCKS_FREE | EMBER_STATS_KV_WINDOW_BLOCKS_TOTAL,
                None => 0,
            };
            let speculation = e.speculation();
            let speculation_bits = match speculation {
                Some(_) => EMBER_STATS_SPEC_DECODE_NUM_DRAFT_TOKENS | EMBER_STATS_SPEC_DECODE_NUM_ACCEPTED_TOKENS,
                None => 0,
            };
            let prefix = e.prefix_cache();
            let prefix_bits = match prefix {
                Some(_) => {
                    EMBER_STATS_PREFIX_CACHE_BLOCKS | EMBER_STATS_PREFIX_CACHE_QUERIES | EMBER_STATS_PREFIX_CACHE_HITS
                }
                None => 0,
            };
            EmberStats {
                struct_size: 0,
                present: EMBER_STATS_NUM_RUNNING
                    | EMBER_STATS_NUM_WAITING
                    | EMBER_STATS_KV_BLOCKS_FREE
                    | EMBER_STATS_KV_BLOCKS_TOTAL
                    | EMBER_STATS_NUM_STEPS
                    | EMBER_STATS_NUM_PREEMPTIONS
                    | EMBER_STATS_MODEL_LOAD_TIME_MS
                    | cpu_bits
                    | window_bits
                    | prefix_bits
                    | speculation_bits,
                num_running: clamp(e.num_running()),
                num_waiting: clamp(e.num_waiting()),
                kv_blocks_free: clamp(free),
                kv_blocks_total: clamp(total),
                num_steps: e.num_steps() as u64,
                cpu_kernels: cpu.map_or(0, |c| cpu_kernels_code(c.kernels)),
                cpu_threads: cpu.map_or(0, |c| clamp(c.threads)),
                kv_window_blocks_free: window.map_or(0, |(free, _)| clamp(free)),
                kv_window_blocks_total: window.map_or(0, |(_, total)| clamp(total)),
                prefix_cache_blocks: prefix.map_or(0, |p| clamp(p.cached_blocks)),
                num_preemptions: u32::try_from(e.num_preemptions()).unwrap_or(u32::MAX),
                prefix_cache_queries: prefix.map_or(0, |p| p.queries),
                prefix_cache_hits: prefix.map_or(0, |p| p.hits),
                spec_decode_num_draft_tokens: speculation.map_or(0, |s| s.draft_tokens),
                spec_decode_num_accepted_tokens: speculation.map_or(0, |s| s.accepted_tokens),
                model_load_time_ms: e.load_time().as_secs_f64() * 1e3,
            }
        })?;
        // SAFETY: `declared` bytes at `out` are writable by this function's contract.
        unsafe { write_within(out, stats, declared) };
        Ok(())
    })
}
