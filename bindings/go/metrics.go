package ember

// #include "handles.h"
import "C"

import (
	"fmt"
	"math"
	"runtime"
)

// TimingMetrics are the five per-request timing metrics of one choice (docs/per_request_metrics.md has the
// definitions). A nil field is absent: the event it measures has not happened yet, or the engine records no
// stats (Config.DisableLogStats). The JSON names are those of a response body's `metrics`.
type TimingMetrics struct {
	// TimeToFirstTokenMs runs from the request's first scheduling to its first generated token (queueing
	// excluded), in milliseconds.
	TimeToFirstTokenMs *float64 `json:"time_to_first_token_ms"`
	// GenerationTimeMs runs from the first to the last generated token, in milliseconds.
	GenerationTimeMs *float64 `json:"generation_time_ms"`
	// QueueTimeMs runs from queueing to first scheduling, in milliseconds.
	QueueTimeMs *float64 `json:"queue_time_ms"`
	// MeanITLMs is GenerationTimeMs / (generated tokens - 1), in milliseconds (needs 2 tokens).
	MeanITLMs *float64 `json:"mean_itl_ms"`
	// TokensPerSecond is generated tokens per second from first scheduling to the last token (prefill included).
	TokensPerSecond *float64 `json:"tokens_per_second"`
}

// ExtendedMetrics are the metrics beyond the five, of one choice, for latency debugging and billing
// (docs/per_request_metrics.md, "Extended metrics"). A nil field is absent. Durations are milliseconds.
type ExtendedMetrics struct {
	// E2ELatencyMs runs from submission to the end of the choice (absent until it has ended).
	E2ELatencyMs *float64
	// TTFTFromArrivalMs runs from submission to the first generated token (queueing included).
	TTFTFromArrivalMs *float64
	// PrefillTimeMs sums the engine steps that computed the prompt.
	PrefillTimeMs *float64
	// PrefillTokensPerSecond is prompt tokens computed per second of prefill.
	PrefillTokensPerSecond *float64
	// ITLP50Ms, ITLP90Ms, ITLP99Ms are nearest-rank percentiles of the gaps between consecutive tokens.
	ITLP50Ms *float64
	ITLP90Ms *float64
	ITLP99Ms *float64
	// ITLMaxMs is the largest gap between consecutive tokens.
	ITLMaxMs *float64
	// ComputeShareMs is the engine compute attributed to the choice (each step's time split by tokens).
	ComputeShareMs *float64
	// OutputWaitMs is the mean time a generated token waited for the host to read it.
	OutputWaitMs *float64
	// NumPromptTokens counts the prompt's tokens.
	NumPromptTokens *uint32
	// NumCachedPromptTokens counts the prompt tokens whose keys and values were reused rather than computed.
	NumCachedPromptTokens *uint32
	// NumPreemptions counts the times the choice was preempted (its KV cache released and later recomputed).
	NumPreemptions *uint32
	// NumDraftTokens counts the speculative draft tokens verified for the choice (0 when the engine does not
	// speculate), NumAcceptedTokens those accepted.
	NumDraftTokens    *uint32
	NumAcceptedTokens *uint32
}

// TimingMetrics reads the five timing metrics of choice 0. It may be called at any time: while the request
// runs, the fields measured so far are present. They do not depend on the request's `include_metrics`.
func (r *Request) TimingMetrics() (TimingMetrics, error) {
	return r.ChoiceTimingMetrics(0)
}

// ChoiceTimingMetrics reads the five timing metrics of one choice (StatusChoiceOutOfRange beyond `n`).
func (r *Request) ChoiceTimingMetrics(choice int) (TimingMetrics, error) {
	defer runtime.KeepAlive(r)
	index, err := choiceIndex("engine_get_choice_timing_metrics", choice)
	if err != nil {
		return TimingMetrics{}, err
	}
	out := C.EmberPerRequestTimingMetrics{struct_size: C.uint32_t(C.sizeof_EmberPerRequestTimingMetrics)}
	_, err = call("engine_get_choice_timing_metrics", func() C.EmberStatus {
		return C.ember_go_timing_metrics(r.handle, index, &out)
	})
	if err != nil {
		return TimingMetrics{}, err
	}
	return TimingMetrics{
		TimeToFirstTokenMs: presentFloat(out.present, C.EMBER_TIMING_TIME_TO_FIRST_TOKEN_MS, out.time_to_first_token_ms),
		GenerationTimeMs:   presentFloat(out.present, C.EMBER_TIMING_GENERATION_TIME_MS, out.generation_time_ms),
		QueueTimeMs:        presentFloat(out.present, C.EMBER_TIMING_QUEUE_TIME_MS, out.queue_time_ms),
		MeanITLMs:          presentFloat(out.present, C.EMBER_TIMING_MEAN_ITL_MS, out.mean_itl_ms),
		TokensPerSecond:    presentFloat(out.present, C.EMBER_TIMING_TOKENS_PER_SECOND, out.tokens_per_second),
	}, nil
}

// ExtendedMetrics reads the extended metrics of one choice, at any time, like ChoiceTimingMetrics.
func (r *Request) ExtendedMetrics(choice int) (ExtendedMetrics, error) {
	defer runtime.KeepAlive(r)
	index, err := choiceIndex("engine_get_extended_metrics", choice)
	if err != nil {
		return ExtendedMetrics{}, err
	}
	out := C.EmberExtendedTimingMetrics{struct_size: C.uint32_t(C.sizeof_EmberExtendedTimingMetrics)}
	_, err = call("engine_get_extended_metrics", func() C.EmberStatus {
		return C.ember_go_extended_metrics(r.handle, index, &out)
	})
	if err != nil {
		return ExtendedMetrics{}, err
	}
	p := out.present
	return ExtendedMetrics{
		E2ELatencyMs:           presentFloat(p, C.EMBER_EXTENDED_E2E_LATENCY_MS, out.e2e_latency_ms),
		TTFTFromArrivalMs:      presentFloat(p, C.EMBER_EXTENDED_TTFT_FROM_ARRIVAL_MS, out.ttft_from_arrival_ms),
		PrefillTimeMs:          presentFloat(p, C.EMBER_EXTENDED_PREFILL_TIME_MS, out.prefill_time_ms),
		PrefillTokensPerSecond: presentFloat(p, C.EMBER_EXTENDED_PREFILL_TOKENS_PER_SECOND, out.prefill_tokens_per_second),
		ITLP50Ms:               presentFloat(p, C.EMBER_EXTENDED_ITL_P50_MS, out.itl_p50_ms),
		ITLP90Ms:               presentFloat(p, C.EMBER_EXTENDED_ITL_P90_MS, out.itl_p90_ms),
		ITLP99Ms:               presentFloat(p, C.EMBER_EXTENDED_ITL_P99_MS, out.itl_p99_ms),
		ITLMaxMs:               presentFloat(p, C.EMBER_EXTENDED_ITL_MAX_MS, out.itl_max_ms),
		ComputeShareMs:         presentFloat(p, C.EMBER_EXTENDED_COMPUTE_SHARE_MS, out.compute_share_ms),
		OutputWaitMs:           presentFloat(p, C.EMBER_EXTENDED_OUTPUT_WAIT_MS, out.output_wait_ms),
		NumPromptTokens:        presentCount(p, C.EMBER_EXTENDED_NUM_PROMPT_TOKENS, out.num_prompt_tokens),
		NumCachedPromptTokens:  presentCount(p, C.EMBER_EXTENDED_NUM_CACHED_PROMPT_TOKENS, out.num_cached_prompt_tokens),
		NumPreemptions:         presentCount(p, C.EMBER_EXTENDED_NUM_PREEMPTIONS, out.num_preemptions),
		NumDraftTokens:         presentCount(p, C.EMBER_EXTENDED_NUM_DRAFT_TOKENS, out.num_draft_tokens),
		NumAcceptedTokens:      presentCount(p, C.EMBER_EXTENDED_NUM_ACCEPTED_TOKENS, out.num_accepted_tokens),
	}, nil
}

// TokenTimestamps returns, for each token choice `choice` has generated so far, the milliseconds from the
// request's submission to that token (monotonic clock), in generation order. Empty when the engine records no
// stats.
func (r *Request) TokenTimestamps(choice int) ([]float64, error) {
	defer runtime.KeepAlive(r)
	const op = "engine_get_token_timestamps"
	index, err := choiceIndex(op, choice)
	if err != nil {
		return nil, err
	}
	var times []float64 // [tokens] milliseconds since submission
	for {
		var count C.size_t
		var buffer *C.double
		if len(times) > 0 {
			buffer = (*C.double)(&times[0])
		}
		status, err := call(op, func() C.EmberStatus {
			return C.ember_go_token_timestamps(r.handle, index, buffer, C.size_t(len(times)), &count)
		}, StatusBufferTooSmall)
		if err != nil {
			return nil, err
		}
		if status == StatusOK {
			return times[:count], nil
		}
		// StatusBufferTooSmall wrote the size needed; more tokens may come before the next try, so loop.
		times = make([]float64, count)
	}
}

// choiceIndex checks a choice index before it becomes a uint32_t.
func choiceIndex(op string, choice int) (C.uint32_t, error) {
	if choice < 0 || choice > math.MaxUint32 {
		return 0, &Error{Op: op, Status: StatusChoiceOutOfRange, Message: fmt.Sprintf("choice %d is not an index", choice)}
	}
	return C.uint32_t(choice), nil
}

func presentFloat(present C.uint32_t, bit C.uint32_t, value C.double) *float64 {
	if present&bit == 0 {
		return nil
	}
	v := float64(value)
	return &v
}

func presentCount(present C.uint32_t, bit C.uint32_t, value C.uint32_t) *uint32 {
	if present&bit == 0 {
		return nil
	}
	v := uint32(value)
	return &v
}
