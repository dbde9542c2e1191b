//! `engine_get_token_logprobs`: a choice's sampled tokens with their log probabilities, for hosts that want the
//! numbers without parsing the response JSON (which has the alternatives too: `docs/protocol.md`).

use super::args::{copy_to_buffer, Out};
use super::boundary::{boundary, Failure};
use super::metrics::request_and_choice;
use super::request::EmberRequest;
use super::status::EmberStatus;

/// A sampled token and its log probability: the log-softmax of the model's raw logits over the whole vocabulary
/// (before bias, penalties, temperature and filters; `docs/protocol.md`, "Log probabilities").
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct EmberTokenLogprob {
    pub token: u32,
    pub logprob: f32,
}

/// Copies choice `choice`'s sampled tokens whose text is in its output, in order, with their log probabilities,
/// into `buffer`, and writes their number to `*out_count`. Empty unless the request asked for log probabilities
/// (`"logprobs"`); an end-of-generation or stop token has no entry.
///
/// Returns `EMBER_STATUS_OK`; `EMBER_STATUS_BUFFER_TOO_SMALL` when `capacity` is below their number: then
/// `*out_count` is the capacity needed and `buffer` is untouched (pass `capacity` 0 and a NULL `buffer` to ask for
/// the size); other failures write nothing: `EMBER_STATUS_INVALID_HANDLE`, `EMBER_STATUS_CHOICE_OUT_OF_RANGE`,
/// `EMBER_STATUS_INVALID_ARGUMENT` (NULL `out_count`, NULL `buffer` with a non-zero `capacity`). While the
/// request runs, more tokens may come between a size query and the copy.
///
/// Thread safety: any thread, concurrently with polls.
///
/// # Safety
/// `buffer` is NULL or points to `capacity` writable `EmberTokenLogprob`s; `out_count` is NULL or points to a
/// writable `size_t`.
#[no_mangle]
pub unsafe extern "C" fn engine_get_token_logprobs(
    request: *const EmberRequest,
    choice: u32,
    buffer: *mut EmberTokenLogprob,
    capacity: usize,
    out_count: *mut usize,
) -> EmberStatus {
    boundary("engine_get_token_logprobs", || {
        let out_count = Out::new(out_count, "out_count")?;
        if buffer.is_null() && capacity > 0 {
            return Err(Failure::invalid_argument(format!("buffer is NULL but capacity is {capacity}")));
        }
        let object = request_and_choice(request, choice)?;
        let items: Vec<EmberTokenLogprob> = object
            .handle
            .token_logprobs(choice as usize)
            .into_iter()
            .map(|(token, logprob)| EmberTokenLogprob { token, logprob })
            .collect();
        // SAFETY: `buffer` and `out_count` as this function's contract says, which is `copy_to_buffer`'s.
        unsafe { copy_to_buffer(&items, buffer, capacity, out_count, "log probabilities") }
    })
}
