//! Per-request timing metrics as C structs, versioned by `struct_size`, and the raw token timestamps.
//!
//! Both structs are versioned by their leading `struct_size` (see `versioned.rs`): fields are only ever
//! appended, each with the next presence bit.
//!
//! The definitions of the fields are the engine's (`src/engine/observe/metrics.rs`, `docs/per_request_metrics.md`).

use super::boundary::{boundary, Failure};
use super::registry::REQUESTS;
use super::request::{EmberRequest, RequestObject};
use super::status::EmberStatus;
use super::versioned::{declared_size, versioned_fields, write_within};
use crate::engine::metrics as engine_metrics;

/// Presence bit of `EmberPerRequestTimingMetrics.time_to_first_token_ms`.
pub const EMBER_TIMING_TIME_TO_FIRST_TOKEN_MS: u32 = 1 << 0;
/// Presence bit of `EmberPerRequestTimingMetrics.generation_time_ms`.
pub const EMBER_TIMING_GENERATION_TIME_MS: u32 = 1 << 1;
/// Presence bit of `EmberPerRequestTimingMetrics.queue_time_ms`.
pub const EMBER_TIMING_QUEUE_TIME_MS: u32 = 1 << 2;
/// Presence bit of `EmberPerRequestTimingMetrics.mean_itl_ms`.
pub const EMBER_TIMING_MEAN_ITL_MS: u32 = 1 << 3;
/// Presence bit of `EmberPerRequestTimingMetrics.tokens_per_second`.
pub const EMBER_TIMING_TOKENS_PER_SECOND: u32 = 1 << 4;

/// The five per-request timing metrics of one choice. Every field is present (its bit set in `present`) or
/// absent (NaN, bit clear): absent until the event it measures has happened, and always absent when the engine
/// records no stats (`disable_log_stats`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct EmberPerRequestTimingMetrics {
    /// Set by the caller to `sizeof(EmberPerRequestTimingMetrics)` before the call; never written by ember.
    pub struct_size: u32,
    /// `EMBER_TIMING_*` bits of the fields present (and written).
    pub present: u32,
    /// Milliseconds from the request's first scheduling to its first generated token (queueing excluded).
    pub time_to_first_token_ms: f64,
    /// Milliseconds from the first to the last generated token.
    pub generation_time_ms: f64,
    /// Milliseconds from queueing to first scheduling.
    pub queue_time_ms: f64,
    /// Mean milliseconds between consecutive generated tokens (needs 2 tokens).
    pub mean_itl_ms: f64,
    /// Generated tokens per second from first scheduling to the last token (prefill included).
    pub tokens_per_second: f64,
}

/// Presence bit of `EmberExtendedTimingMetrics.e2e_latency_ms`.
pub const EMBER_EXTENDED_E2E_LATENCY_MS: u32 = 1 << 0;
/// Presence bit of `EmberExtendedTimingMetrics.ttft_from_arrival_ms`.
pub const EMBER_EXTENDED_TTFT_FROM_ARRIVAL_MS: u32 = 1 << 1;
/// Presence bit of `EmberExtendedTimingMetrics.prefill_time_ms`.
pub const EMBER_EXTENDED_PREFILL_TIME_MS: u32 = 1 << 2;
/// Presence bit of `EmberExtendedTimingMetrics.prefill_tokens_per_second`.
pub const EMBER_EXTENDED_PREFILL_TOKENS_PER_SECOND: u32 = 1 << 3;
/// Presence bit of `EmberExtendedTimingMetrics.itl_p50_ms`.
pub const EMBER_EXTENDED_ITL_P50_MS: u32 = 1 << 4;
/// Presence bit of `EmberExtendedTimingMetrics.itl_p90_ms`.
pub const EMBER_EXTENDED_ITL_P90_MS: u32 = 1 << 5;
/// Presence bit of `EmberExtendedTimingMetrics.itl_p99_ms`.
pub const EMBER_EXTENDED_ITL_P99_MS: u32 = 1 << 6;
/// Presence bit of `EmberExtendedTimingMetrics.itl_max_ms`.
pub const EMBER_EXTENDED_ITL_MAX_MS: u32 = 1 << 7;
/// Presence bit of `EmberExtendedTimingMetrics.compute_share_ms`.
pub const EMBER_EXTENDED_COMPUTE_SHARE_MS: u32 = 1 << 8;
/// Presence bit of `EmberExtendedTimingMetrics.output_wait_ms`.
pub const EMBER_EXTENDED_OUTPUT_WAIT_MS: u32 = 1 << 9;
/// Presence bit of `EmberExtendedTimingMetrics.num_prompt_tokens`.
pub const EMBER_EXTENDED_NUM_PROMPT_TOKENS: u32 = 1 << 10;
/// Presence bit of `EmberExtendedTimingMetrics.num_cached_prompt_tokens`.
pub const EMBER_EXTENDED_NUM_CACHED_PROMPT_TOKENS: u32 = 1 << 11;
/// Presence bit of `EmberExtendedTimingMetrics.num_preemptions`.
pub const EMBER_EXTENDED_NUM_PREEMPTIONS: u32 = 1 << 12;
/// Presence bit of `EmberExtendedTimingMetrics.num_draft_tokens`.
pub const EMBER_EXTENDED_NUM_DRAFT_TOKENS: u32 = 1 << 13;
/// Presence bit of `EmberExtendedTimingMetrics.num_accepted_tokens`.
pub const EMBER_EXTENDED_NUM_ACCEPTED_TOKENS: u32 = 1 << 14;

/// Metrics beyond the five, of one choice, for latency debugging and billing. Absent fields are NaN (0 for the
/// counts) with their bit clear in `present`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct EmberExtendedTimingMetrics {
    /// Set by the caller to `sizeof(EmberExtendedTimingMetrics)` before the call; never written by ember.
    pub struct_size: u32,
    /// `EMBER_EXTENDED_*` bits of the fields present (and written).
    pub present: u32,
    /// Milliseconds from submission to the end of the choice (absent until it has ended).
    pub e2e_latency_ms: f64,
    /// Milliseconds from submission to the first generated token (queueing included).
    pub ttft_from_arrival_ms: f64,
    /// Milliseconds of the engine steps that computed the prompt.
    pub prefill_time_ms: f64,
    /// Prompt tokens computed per second of prefill.
    pub prefill_tokens_per_second: f64,
    /// Median gap between consecutive generated tokens, milliseconds (nearest rank; needs 2 tokens).
    pub itl_p50_ms: f64,
    /// 90th percentile of the gaps between consecutive generated tokens, milliseconds.
    pub itl_p90_ms: f64,
    /// 99th percentile of the gaps between consecutive generated tokens, milliseconds.
    pub itl_p99_ms: f64,
    /// Largest gap between consecutive generated tokens, milliseconds.
    pub itl_max_ms: f64,
    /// Engine compute attributed to this choice, milliseconds (each step's time split by tokens).
    pub compute_share_ms: f64,
    /// Mean milliseconds a generated token waited for the host to poll it.
    pub output_wait_ms: f64,
    /// Prompt tokens.
    pub num_prompt_tokens: u32,
    /// Prompt tokens whose keys and values were reused rather than computed.
    pub num_cached_prompt_tokens: u32,
    /// Times the choice was preempted (its KV cache released and later recomputed).
    pub num_preemptions: u32,
    /// Speculative decoding: draft tokens verified for the choice (0 when the engine does not speculate).
    pub num_draft_tokens: u32,
    /// Of those, the tokens accepted: `num_accepted_tokens / num_draft_tokens` is the choice's acceptance rate.
    pub num_accepted_tokens: u32,
}

versioned_fields!(EmberPerRequestTimingMetrics {
    time_to_first_token_ms: f64,
    generation_time_ms: f64,
    queue_time_ms: f64,
    mean_itl_ms: f64,
    tokens_per_second: f64,
});

versioned_fields!(EmberExtendedTimingMetrics {
    e2e_latency_ms: f64,
    ttft_from_arrival_ms: f64,
    prefill_time_ms: f64,
    prefill_tokens_per_second: f64,
    itl_p50_ms: f64,
    itl_p90_ms: f64,
    itl_p99_ms: f64,
    itl_max_ms: f64,
    compute_share_ms: f64,
    output_wait_ms: f64,
    num_prompt_tokens: u32,
    num_cached_prompt_tokens: u32,
    num_preemptions: u32,
    num_draft_tokens: u32,
    num_accepted_tokens: u32,
});

/// The request behind `request`, and its choice `choice` checked to exist.
pub(super) fn request_and_choice(
    request: *const EmberRequest,
    choice: u32,
) -> Result<std::sync::Arc<RequestObject>, Failure> {
    let object = REQUESTS.get(request.addr())?;
    let n = object.handle.num_choices();
    if choice as usize >= n {
        return Err(Failure::new(
            EmberStatus::ChoiceOutOfRange,
            format!("choice {choice} does not exist: the request has {n} choice(s)"),
        ));
    }
    Ok(object)
}

fn bit(value: Option<f64>, mask: u32) -> (f64, u32) {
    match value {
        Some(v) => (v, mask),
        None => (f64::NAN, 0),
    }
}

fn count_bit(value: Option<u32>, mask: u32) -> (u32, u32) {
    match value {
        Some(v) => (v, mask),
        None => (0, 0),
    }
}

pub(super) fn timing_to_c(m: engine_metrics::PerRequestTimingMetrics) -> EmberPerRequestTimingMetrics {
    let (ttft, b0) = bit(m.time_to_first_token_ms, EMBER_TIMING_TIME_TO_FIRST_TOKEN_MS);
    let (generation, b1) = bit(m.generation_time_ms, EMBER_TIMING_GENERATION_TIME_MS);
    let (queue, b2) = bit(m.queue_time_ms, EMBER_TIMING_QUEUE_TIME_MS);
    let (itl, b3) = bit(m.mean_itl_ms, EMBER_TIMING_MEAN_ITL_MS);
    let (tps, b4) = bit(m.tokens_per_second, EMBER_TIMING_TOKENS_PER_SECOND);
    EmberPerRequestTimingMetrics {
        struct_size: 0,
        present: b0 | b1 | b2 | b3 | b4,
        time_to_first_token_ms: ttft,
        generation_time_ms: generation,
        queue_time_ms: queue,
        mean_itl_ms: itl,
        tokens_per_second: tps,
    }
}

fn extended_to_c(m: engine_metrics::ExtendedTimingMetrics) -> EmberExtendedTimingMetrics {
    let fields = [
        bit(m.e2e_latency_ms, EMBER_EXTENDED_E2E_LATENCY_MS),
        bit(m.ttft_from_arrival_ms, EMBER_EXTENDED_TTFT_FROM_ARRIVAL_MS),
        bit(m.prefill_time_ms, EMBER_EXTENDED_PREFILL_TIME_MS),
        bit(m.prefill_tokens_per_second, EMBER_EXTENDED_PREFILL_TOKENS_PER_SECOND),
        bit(m.itl_p50_ms, EMBER_EXTENDED_ITL_P50_MS),
        bit(m.itl_p90_ms, EMBER_EXTENDED_ITL_P90_MS),
        bit(m.itl_p99_ms, EMBER_EXTENDED_ITL_P99_MS),
        bit(m.itl_max_ms, EMBER_EXTENDED_ITL_MAX_MS),
        bit(m.compute_share_ms, EMBER_EXTENDED_COMPUTE_SHARE_MS),
        bit(m.output_wait_ms, EMBER_EXTENDED_OUTPUT_WAIT_MS),
    ];
    let counts = [
        count_bit(m.num_prompt_tokens, EMBER_EXTENDED_NUM_PROMPT_TOKENS),
        count_bit(m.num_cached_prompt_tokens, EMBER_EXTENDED_NUM_CACHED_PROMPT_TOKENS),
        count_bit(m.num_preemptions, EMBER_EXTENDED_NUM_PREEMPTIONS),
        count_bit(m.num_draft_tokens, EMBER_EXTENDED_NUM_DRAFT_TOKENS),
        count_bit(m.num_accepted_tokens, EMBER_EXTENDED_NUM_ACCEPTED_TOKENS),
    ];
    let present = fields.iter().map(|f| f.1).chain(counts.iter().map(|c| c.1)).fold(0, |a, b| a | b);
    EmberExtendedTimingMetrics {
        struct_size: 0,
        present,
        e2e_latency_ms: fields[0].0,
        ttft_from_arrival_ms: fields[1].0,
        prefill_time_ms: fields[2].0,
        prefill_tokens_per_second: fields[3].0,
        itl_p50_ms: fields[4].0,
        itl_p90_ms: fields[5].0,
        itl_p99_ms: fields[6].0,
        itl_max_ms: fields[7].0,
        compute_share_ms: fields[8].0,
        output_wait_ms: fields[9].0,
        num_prompt_tokens: counts[0].0,
        num_cached_prompt_tokens: counts[1].0,
        num_preemptions: counts[2].0,
        num_draft_tokens: counts[3].0,
        num_accepted_tokens: counts[4].0,
    }
}

/// The five timing metrics of choice 0 (see `engine_get_choice_timing_metrics`).
///
/// # Safety
/// As `engine_get_choice_timing_metrics`.
#[no_mangle]
pub unsafe extern "C" fn engine_get_timing_metrics(
    request: *const EmberRequest,
    out: *mut EmberPerRequestTimingMetrics,
) -> EmberStatus {
    // Its own boundary, not a call of `engine_get_choice_timing_metrics`, so that errors name this function.
    // SAFETY: same contract as `write_timing_metrics`.
    boundary("engine_get_timing_metrics", || unsafe { write_timing_metrics(request, 0, out) })
}

/// The body of both timing-metrics functions.
///
/// # Safety
/// As `engine_get_choice_timing_metrics`.
unsafe fn write_timing_metrics(
    request: *const EmberRequest,
    choice: u32,
    out: *mut EmberPerRequestTimingMetrics,
) -> Result<(), Failure> {
    if out.is_null() {
        return Err(Failure::invalid_argument("out is NULL"));
    }
    // SAFETY: non-NULL; readable by this function's contract.
    let declared = unsafe { declared_size(out) }?;
    let object = request_and_choice(request, choice)?;
    let metrics = timing_to_c(object.handle.timing_metrics(choice as usize));
    // SAFETY: `declared` bytes at `out` are writable by this function's contract.
    unsafe { write_within(out, metrics, declared) };
    Ok(())
}

/// Writes the five timing metrics of choice `choice` of a request into `*out`, as far as `out->struct_size`
/// (set by the caller, at least 8) reaches. Callable at any time: while the request runs, the fields measured
/// so far are present; after `engine_free` of its engine, the final values.
///
/// Returns `EMBER_STATUS_OK`; on failure nothing is written: `EMBER_STATUS_INVALID_HANDLE`,
/// `EMBER_STATUS_CHOICE_OUT_OF_RANGE`, `EMBER_STATUS_INVALID_ARGUMENT` (NULL `out`, `struct_size` < 8).
///
/// Thread safety: any thread, concurrently with polls. It allocates nothing and takes only the choice's stats
/// lock, which the engine holds for a few field updates at a time, never across a model step.
///
/// # Safety
/// `out` is NULL or points to `out->struct_size` writable bytes whose first 4 hold `struct_size`.
#[no_mangle]
pub unsafe extern "C" fn engine_get_choice_timing_metrics(
    request: *const EmberRequest,
    choice: u32,
    out: *mut EmberPerRequestTimingMetrics,
) -> EmberStatus {
    // SAFETY: this function's contract is `write_timing_metrics`'s.
    boundary("engine_get_choice_timing_metrics", || unsafe { write_timing_metrics(request, choice, out) })
}

/// Writes the extended metrics of choice `choice` into `*out`, as far as `out->struct_size` (set by the caller,
/// at least 8) reaches. Callable at any time, like `engine_get_choice_timing_metrics`.
///
/// Returns `EMBER_STATUS_OK`; on failure nothing is written: `EMBER_STATUS_INVALID_HANDLE`,
/// `EMBER_STATUS_CHOICE_OUT_OF_RANGE`, `EMBER_STATUS_INVALID_ARGUMENT` (NULL `out`, `struct_size` < 8).
///
/// Thread safety: any thread, concurrently with polls; takes only the choice's stats lock, briefly.
///
/// # Safety
/// `out` is NULL or points to `out->struct_size` writable bytes whose first 4 hold `struct_size`.
#[no_mangle]
pub unsafe extern "C" fn engine_get_extended_metrics(
    request: *const EmberRequest,
    choice: u32,
    out: *mut EmberExtendedTimingMetrics,
) -> EmberStatus {
    boundary("engine_get_extended_metrics", || {
        if out.is_null() {
            return Err(Failure::invalid_argument("out is NULL"));
        }
        // SAFETY: non-NULL; readable by this function's contract.
        let declared = unsafe { declared_size(out) }?;
        let object = request_and_choice(request, choice)?;
        let metrics = extended_to_c(object.handle.extended_metrics(choice as usize));
        // SAFETY: `declared` bytes at `out` are writable by this function's contract.
        unsafe { write_within(out, metrics, declared) };
        Ok(())
    })
}

/// Copies the timestamps of choice `choice`'s generated tokens, in milliseconds since the request was submitted
/// (monotonic clock), one per token in generation order, into `buffer`, and writes their number to
/// `*out_count`. Empty when the engine records no stats.
///
/// Returns `EMBER_STATUS_OK`; `EMBER_STATUS_BUFFER_TOO_SMALL` when `capacity` is below the number of tokens:
/// then `*out_count` is the capacity needed and `buffer` is untouched (pass `capacity` 0 and a NULL `buffer` to
/// ask for the size); other failures write nothing: `EMBER_STATUS_INVALID_HANDLE`,
/// `EMBER_STATUS_CHOICE_OUT_OF_RANGE`, `EMBER_STATUS_INVALID_ARGUMENT` (NULL `out_count`, NULL `buffer` with
/// a non-zero `capacity`). While the request runs, more tokens may come between a size query and the copy.
///
/// Thread safety: any thread, concurrently with polls.
///
/// # Safety
/// `buffer` is NULL or points to `capacity` writable doubles; `out_count` is NULL or points to a writable
/// `size_t`.
#[no_mangle]
pub unsafe extern "C" fn engine_get_token_timestamps(
    request: *const EmberRequest,
    choice: u32,
    buffer: *mut f64,
    capacity: usize,
    out_count: *mut usize,
) -> EmberStatus {
    boundary("engine_get_token_timestamps", || {
        let out_count = super::args::Out::new(out_count, "out_count")?;
        if buffer.is_null() && capacity > 0 {
            return Err(Failure::invalid_argument(format!("buffer is NULL but capacity is {capacity}")));
        }
        let object = request_and_choice(request, choice)?;
        let times = object.handle.token_times_ms(choice as usize);
        // SAFETY: `buffer` and `out_count` as this function's contract says, which is `copy_to_buffer`'s.
        unsafe { super::args::copy_to_buffer(&times, buffer, capacity, out_count, "timestamps") }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> EmberPerRequestTimingMetrics {
        timing_to_c(engine_metrics::PerRequestTimingMetrics {
            time_to_first_token_ms: Some(1.0),
            generation_time_ms: Some(2.0),
            queue_time_ms: None,
            mean_itl_ms: Some(4.0),
            tokens_per_second: Some(5.0),
        })
    }

    #[test]
    fn absent_fields_are_nan_with_their_bit_clear() {
        let m = sample();
        assert!(m.queue_time_ms.is_nan());
        assert_eq!(
            m.present,
            EMBER_TIMING_TIME_TO_FIRST_TOKEN_MS
                | EMBER_TIMING_GENERATION_TIME_MS
                | EMBER_TIMING_MEAN_ITL_MS
                | EMBER_TIMING_TOKENS_PER_SECOND
        );
        let e = extended_to_c(engine_metrics::ExtendedTimingMetrics {
            num_preemptions: Some(2),
            itl_max_ms: Some(9.0),
            ..Default::default()
        });
        assert_eq!(e.present, EMBER_EXTENDED_NUM_PREEMPTIONS | EMBER_EXTENDED_ITL_MAX_MS);
        assert_eq!((e.num_preemptions, e.num_prompt_tokens), (2, 0));
        assert!(e.e2e_latency_ms.is_nan());
    }

    /// A caller struct of `size` bytes, filled with 0xAB, with `struct_size = size`.
    fn caller_bytes(size: usize) -> Vec<u8> {
        let mut bytes = vec![0xAB; 64];
        bytes[..4].copy_from_slice(&(size as u32).to_ne_bytes());
        bytes
    }

    #[test]
    fn struct_size_limits_the_fields_written() {
        for (declared, data_fields) in [(8, 0), (15, 0), (16, 1), (24, 2), (31, 2), (40, 4), (48, 5), (64, 5)] {
            let mut bytes = caller_bytes(declared);
            let out = bytes.as_mut_ptr().cast::<EmberPerRequestTimingMetrics>();
            // SAFETY: 64 writable bytes, at least `declared` and the struct's 48.
            let read = unsafe { declared_size(out) }.unwrap();
            // SAFETY: as above.
            unsafe { write_within(out, sample(), read) };
            let end = 8 + 8 * data_fields;
            assert_eq!(u32::from_ne_bytes(bytes[..4].try_into().unwrap()), declared as u32, "struct_size kept");
            let present = u32::from_ne_bytes(bytes[4..8].try_into().unwrap());
            assert_eq!(present, sample().present & ((1 << data_fields) - 1), "declared {declared}");
            assert!(bytes[end..].iter().all(|&b| b == 0xAB), "declared {declared}: nothing past {end} written");
            if data_fields >= 2 {
                assert_eq!(f64::from_ne_bytes(bytes[16..24].try_into().unwrap()), 2.0);
            }
        }
    }

    #[test]
    fn a_struct_size_below_the_minimum_is_refused() {
        for declared in [0, 4, 7] {
            let mut bytes = caller_bytes(declared);
            // SAFETY: 64 readable bytes.
            let e = unsafe { declared_size(bytes.as_mut_ptr().cast::<EmberPerRequestTimingMetrics>()) }.unwrap_err();
            assert_eq!(e.status, EmberStatus::InvalidArgument);
        }
    }

    #[test]
    fn extended_prefixes_stop_at_whole_fields() {
        let full = size_of::<EmberExtendedTimingMetrics>();
        let value = extended_to_c(engine_metrics::ExtendedTimingMetrics {
            num_prompt_tokens: Some(7),
            num_cached_prompt_tokens: Some(0),
            num_preemptions: Some(1),
            num_draft_tokens: Some(3),
            num_accepted_tokens: Some(2),
            ..Default::default()
        });
        let mut bytes = vec![0xAB; 128];
        bytes[..4].copy_from_slice(&((full - 6) as u32).to_ne_bytes());
        let out = bytes.as_mut_ptr().cast::<EmberExtendedTimingMetrics>();
        // SAFETY: 128 writable bytes.
        unsafe { write_within(out, value, full - 6) };
        // The last count (ends at full - 4) is cut: it and the padding are untouched, the other counts written.
        assert!(bytes[full - 8..].iter().all(|&b| b == 0xAB));
        assert_eq!(u32::from_ne_bytes(bytes[88..92].try_into().unwrap()), 7);
        assert_eq!(u32::from_ne_bytes(bytes[100..104].try_into().unwrap()), 3);
        let present = u32::from_ne_bytes(bytes[4..8].try_into().unwrap());
        let counts = EMBER_EXTENDED_NUM_PROMPT_TOKENS | EMBER_EXTENDED_NUM_CACHED_PROMPT_TOKENS;
        assert_eq!(present, counts | EMBER_EXTENDED_NUM_PREEMPTIONS | EMBER_EXTENDED_NUM_DRAFT_TOKENS);
    }

    #[test]
    fn null_and_stale_requests() {
        let mut m =
            EmberPerRequestTimingMetrics { struct_size: size_of::<EmberPerRequestTimingMetrics>() as u32, ..sample() };
        // SAFETY: a valid out struct; the handle is never dereferenced.
        let status = unsafe { engine_get_timing_metrics(std::ptr::null(), &mut m) };
        assert_eq!(status, EmberStatus::InvalidArgument);
        let message = super::super::last_error::get();
        assert!(message.starts_with("engine_get_timing_metrics: "), "each function names itself: {message}");
        // SAFETY: as above.
        let status = unsafe { engine_get_choice_timing_metrics(std::ptr::null(), 0, &mut m) };
        assert_eq!(status, EmberStatus::InvalidArgument);
        assert!(super::super::last_error::get().starts_with("engine_get_choice_timing_metrics: "));
        // SAFETY: as above.
        let status = unsafe { engine_get_timing_metrics(super::super::registry::to_pointer(0x1234_5678), &mut m) };
        assert_eq!(status, EmberStatus::InvalidHandle);
        // SAFETY: NULL out is refused.
        let status = unsafe { engine_get_timing_metrics(std::ptr::null(), std::ptr::null_mut()) };
        assert_eq!(status, EmberStatus::InvalidArgument);
    }
}
