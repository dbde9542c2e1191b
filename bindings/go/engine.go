package ember

// #include "handles.h"
import "C"

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"runtime/cgo"
	"sync"
	"sync/atomic"
	"unsafe"
)

// Config is an engine's configuration: the keys of engine_new's JSON (docs/c_api.md, src/engine/api/config.rs).
// A zero field keeps ember's default.
type Config struct {
	// Model is the GGUF file, or a Hugging Face hub name ("org/repo:Q4_K_M", "hf://org/repo/file.gguf") that the
	// library takes from the hub cache, downloading it first when missing (docs/models.md); "" takes EMBER_MODEL,
	// else the default model from the hub cache, else models/SmolLM2-135M-Instruct.Q4_1.gguf relative to the
	// current directory.
	Model string `json:"model,omitempty"`
	// Load is how the model file is brought in: "read", "mmap" or "auto" (default: "read" below 1 GiB).
	Load string `json:"load,omitempty"`
	// ChatTemplate replaces the model's chat template: the Jinja text itself (it contains "{{" or "{%"), or
	// the path of a file holding it; "" keeps the model's.
	ChatTemplate string `json:"chat_template,omitempty"`
	// ChatTemplateLimits sets some of the limits on compiling and rendering the chat template, by name ("fuel",
	// "max_depth", "time_ms", ...: docs/c_api.md); the others keep their defaults.
	ChatTemplateLimits map[string]uint64 `json:"chat_template_limits,omitempty"`
	// Backend is "auto" (default), "cpu" or "cuda".
	Backend string `json:"backend,omitempty"`
	// Threads is the number of CPU threads; 0 uses every core.
	Threads int `json:"threads,omitempty"`
	// MaxNumSeqs is the most sequences in one engine step (default 64).
	MaxNumSeqs int `json:"max_num_seqs,omitempty"`
	// MaxWaitingRequests is the most requests waiting to start; a Submit beyond it fails at once with
	// StatusOverloaded (default: one per KV cache block, at least 4 × MaxNumSeqs).
	MaxWaitingRequests int `json:"max_waiting_requests,omitempty"`
	// ServedModelName is the model_name label of the Prometheus metrics (default: the file's name without .gguf).
	ServedModelName string `json:"served_model_name,omitempty"`
	// Pooling serves the model as an embedding model pooling this way ("mean", "cls", "last", "rank").
	Pooling string `json:"pooling,omitempty"`
	// MetricsVLLMNames also writes the metrics the inference gateway's endpoint picker reads under vLLM's names.
	MetricsVLLMNames bool `json:"metrics_vllm_names,omitempty"`
	// MaxNumBatchedTokens is the most tokens in one engine step (default: 128 on the CPU, 2048 on a GPU).
	MaxNumBatchedTokens int `json:"max_num_batched_tokens,omitempty"`
	// StepBudget is how many prompt tokens may join an engine step that carries decodes (docs/c_api.md): "auto"
	// (the default, nil) lets such a step cost 1.25× its decodes alone, as the engine measures them; a number
	// (float64 or int) is a target step time in milliseconds; "throughput" lets prefill take whatever
	// MaxNumBatchedTokens leaves, as before the option, at the cost of the streams' inter-token latency.
	StepBudget any `json:"step_budget,omitempty"`
	// KVCacheTokens is the KV cache capacity in positions over all sequences (default 16384).
	KVCacheTokens int `json:"kv_cache_tokens,omitempty"`
	// KVBlockSize is the positions per KV cache block (default 16).
	KVBlockSize int `json:"kv_block_size,omitempty"`
	// Seed seeds requests that set no `seed` (default 0).
	Seed uint64 `json:"seed,omitempty"`
	// EnablePerRequestMetrics lets response bodies carry `metrics` for requests that set `include_metrics`.
	EnablePerRequestMetrics bool `json:"enable_per_request_metrics,omitempty"`
	// DisableLogStats records no timing at all (every metric absent); it conflicts with EnablePerRequestMetrics.
	DisableLogStats bool `json:"disable_log_stats,omitempty"`
	// ForceIncludeUsage ends every stream with a usage chunk.
	ForceIncludeUsage bool `json:"force_include_usage,omitempty"`
	// ActivationPrecision is "auto" (default: f32 activations for a model whose matmul weights are all float, 8-bit
	// ones otherwise, as llama.cpp pairs them), "q8" or "f32".
	ActivationPrecision string `json:"activation_precision,omitempty"`
	// KVCacheTypeK is the KV cache's key type: "f16" (default), "q8_0" or "q4_0" (CPU, 8-bit activations).
	KVCacheTypeK string `json:"kv_cache_type_k,omitempty"`
	// KVCacheTypeV is the KV cache's value type: "f16" (default), "q8_0" or "q4_0".
	KVCacheTypeV string `json:"kv_cache_type_v,omitempty"`
	// EnablePrefixCaching keeps full KV blocks for later prompts with the same start; nil keeps the default
	// (true).
	EnablePrefixCaching *bool `json:"enable_prefix_caching,omitempty"`
	// KVWindowPool keeps only the windows' KV blocks of a model's sliding-window layers (CPU), which turns prefix
	// caching and speculation off for such a model; nil keeps the default (true).
	KVWindowPool *bool `json:"kv_window_pool,omitempty"`
	// Speculative turns n-gram speculative decoding on (docs/c_api.md, "Speculative decoding"); nil: off.
	Speculative *SpeculativeConfig `json:"speculative,omitempty"`
	// GrammarLimits sets some of the limits on compiling a request's structured-output constraint, by name
	// ("max_bytes", "max_compile_cpu_ms", ...: docs/c_api.md); the others keep their defaults.
	GrammarLimits map[string]uint64 `json:"grammar_limits,omitempty"`
	// Log receives the engine's log lines; nil discards them.
	Log LogFunc `json:"-"`
	// LoadProgress receives the load's progress during NewEngine, and may cancel it; nil: no reports.
	LoadProgress LoadProgressFunc `json:"-"`
}

// SpeculativeConfig is the engine's `speculative` option: a decoding sequence drafts up to NumSpeculativeTokens
// (1..16) tokens from its own earlier text, found by its last PromptLookupMax down to PromptLookupMin tokens
// (0: the defaults, 4 and 2). DraftPolicy is "adaptive" (the default, ""): each step verifies the draft tokens
// that pay, or "always": every draft whole. Outputs are the same as without; only their timing changes.
type SpeculativeConfig struct {
	// Method is "ngram" (the only one); "" means "ngram".
	Method               string `json:"method"`
	NumSpeculativeTokens int    `json:"num_speculative_tokens"`
	PromptLookupMin      int    `json:"prompt_lookup_min,omitempty"`
	PromptLookupMax      int    `json:"prompt_lookup_max,omitempty"`
	DraftPolicy          string `json:"draft_policy,omitempty"`
}

// Engine is a model loaded in memory with the thread that serves its requests. Its methods are safe for
// concurrent use. Close it when done; a finalizer closes a forgotten one.
type Engine struct {
	// handle is the Engine* of ember.h as a number (handles.h says why).
	handle C.uintptr_t
	// logHandle holds the Log function while the engine may call it; 0 without one.
	logHandle cgo.Handle
	closed    atomic.Bool
	// dispatch hands every request's events to its reader (dispatch.go).
	dispatch *dispatcher
	// submitting holds a slot for each engine_submit call in progress. engine_submit parses, renders and
	// tokenizes on the caller's thread, and the Go runtime gives every goroutine blocked in a cgo call a thread
	// of its own: without a bound, a burst of a thousand Submits briefly makes dozens of threads (76 in CI
	// on a 2-core machine) that compete for the same cores. Goroutines waiting for a slot wait in Go.
	submitting chan struct{}
}

// submitSlots is how many engine_submit calls run at once: two per P, since far more than the CPUs Go runs on adds
// threads, not throughput, and at least 4, so that a few slow submissions (a large prompt, a grammar to compile,
// up to grammar_limits.max_compile_cpu_ms each) leave slots for the rest.
func submitSlots() int {
	return max(4, 2*runtime.GOMAXPROCS(0))
}

// logSetup serializes engine creation: the C log callback is process-wide state read by engine_new, so setting
// it and creating the engine must not interleave with another NewEngine.
var logSetup sync.Mutex

// NewEngine loads the model and starts an engine (this takes as long as loading the model). Failures are
// *Error: StatusInvalidConfig (conflicting or out-of-range options), StatusModelLoadFailed, ...
func NewEngine(config Config) (*Engine, error) {
	if s := config.Speculative; s != nil && s.Method == "" {
		speculative := *s
		speculative.Method = "ngram"
		config.Speculative = &speculative
	}
	configJSON, err := json.Marshal(config)
	if err != nil {
		return nil, err
	}
	cConfig := C.CString(string(configJSON))
	defer C.free(unsafe.Pointer(cConfig))

	var logHandle cgo.Handle
	if config.Log != nil {
		logHandle = cgo.NewHandle(config.Log)
	}
	var handle C.uintptr_t
	var progress *progressCall
	logSetup.Lock()
	C.ember_go_set_log(C.uintptr_t(logHandle))
	if config.LoadProgress == nil {
		_, err = call("engine_new", func() C.EmberStatus { return C.ember_go_new(cConfig, &handle) })
	} else {
		progress = &progressCall{report: config.LoadProgress}
		progressHandle := cgo.NewHandle(progress)
		_, err = call("engine_new_with_progress", func() C.EmberStatus {
			return C.ember_go_new_with_progress(cConfig, C.uintptr_t(progressHandle), &handle)
		})
		progressHandle.Delete()
	}
	// Engines made later, also by other code in this process, must not inherit this engine's callback.
	C.ember_go_set_log(0)
	logSetup.Unlock()
	if progress != nil && progress.panicked != nil {
		// The load was cancelled by the panic: nothing to free. Raise it where the caller can see it.
		if logHandle != 0 {
			logHandle.Delete()
		}
		panic(progress.panicked)
	}
	if err != nil {
		if logHandle != 0 {
			logHandle.Delete()
		}
		return nil, err
	}
	engine := &Engine{
		handle: handle, logHandle: logHandle, dispatch: newDispatcher(handle),
		submitting: make(chan struct{}, submitSlots()),
	}
	runtime.SetFinalizer(engine, (*Engine).Close)
	return engine, nil
}

// Close stops the engine: its unfinished requests end as cancelled, its thread is joined and the model released.
// Requests of a closed engine still answer their metrics and ResponseJSON, and must still be closed. Calling
// Close again does nothing.
func (e *Engine) Close() {
	if !e.closed.CompareAndSwap(false, true) {
		return
	}
	runtime.SetFinalizer(e, nil)
	// engine_free returns once the engine thread has been joined, so nothing can log after it. It also ends the
	// dispatcher's wait; once the dispatcher is done, every open request's reader returns StatusInvalidHandle.
	C.ember_go_free(e.handle)
	<-e.dispatch.done
	if e.logHandle != 0 {
		e.logHandle.Delete()
	}
}

// Stats are an engine's counters (engine_get_stats): sequences (choices) running and waiting, KV cache blocks
// free and in all, forward steps run. A request whose end has been read is already gone from them. On the CPU
// backend, CPUKernels names the kernel path ("scalar", "avx2", "avx512", "amx") and CPUThreads its threads; both are
// zero values on a GPU. Every kernel path computes the same results; the path decides speed only. A model with
// sliding-window layers (Gemma 3) keeps them in a block pool of their own, which KVWindowBlocksFree and
// KVWindowBlocksTotal count (zero values when the engine has no such pool); KVBlocks* count the other pool.
// PrefixCache is nil when the engine caches no prefixes; Preemptions counts sequences preempted since start.
// SpecDecode is nil when the engine does not speculate (no `speculative` option). ModelLoadTimeMs is how long
// NewEngine took to start it.
type Stats struct {
	Running, Waiting                        uint32
	KVBlocksFree, KVBlocksTotal             uint32
	KVWindowBlocksFree, KVWindowBlocksTotal uint32
	Steps                                   uint64
	Preemptions                             uint32
	CPUKernels                              string
	CPUThreads                              uint32
	PrefixCache                             *PrefixCacheStats
	SpecDecode                              *SpecDecodeStats
	ModelLoadTimeMs                         float64
}

// SpecDecodeStats are speculative decoding's counters since the engine started: draft tokens verified
// (NumDraftTokens) and accepted (NumAcceptedTokens).
type SpecDecodeStats struct {
	NumDraftTokens, NumAcceptedTokens uint64
}

// PrefixCacheStats are the prefix cache's counters: prompt tokens looked up when sequences were admitted
// (Queries) and found cached (Hits), since the engine started, and the blocks findable now (Blocks, counted in
// KVBlocksFree when no sequence holds them).
type PrefixCacheStats struct {
	Queries, Hits uint64
	Blocks        uint32
}

// cpuKernelNames maps EMBER_CPU_KERNELS_* values to the paths' names.
var cpuKernelNames = map[C.uint32_t]string{
	C.EMBER_CPU_KERNELS_SCALAR: "scalar",
	C.EMBER_CPU_KERNELS_AVX2:   "avx2",
	C.EMBER_CPU_KERNELS_AVX512: "avx512",
	C.EMBER_CPU_KERNELS_AMX:    "amx",
}

// Stats reads the engine's counters; StatusInvalidHandle once the engine is closed.
func (e *Engine) Stats() (Stats, error) {
	defer runtime.KeepAlive(e)
	if e.closed.Load() {
		return Stats{}, &Error{Op: "engine_get_stats", Status: StatusInvalidHandle, Message: "the engine is closed"}
	}
	out := C.EmberStats{struct_size: C.uint32_t(C.sizeof_EmberStats)}
	if _, err := call("engine_get_stats", func() C.EmberStatus { return C.ember_go_stats(e.handle, &out) }); err != nil {
		return Stats{}, err
	}
	stats := Stats{
		Running:       uint32(out.num_running),
		Waiting:       uint32(out.num_waiting),
		KVBlocksFree:  uint32(out.kv_blocks_free),
		KVBlocksTotal: uint32(out.kv_blocks_total),
		Steps:         uint64(out.num_steps),
		Preemptions:   uint32(out.num_preemptions),
	}
	if out.present&C.EMBER_STATS_MODEL_LOAD_TIME_MS != 0 {
		stats.ModelLoadTimeMs = float64(out.model_load_time_ms)
	}
	if out.present&C.EMBER_STATS_CPU_KERNELS != 0 {
		stats.CPUKernels = cpuKernelNames[out.cpu_kernels]
		if stats.CPUKernels == "" {
			stats.CPUKernels = fmt.Sprintf("unknown (%d)", uint32(out.cpu_kernels))
		}
	}
	if out.present&C.EMBER_STATS_CPU_THREADS != 0 {
		stats.CPUThreads = uint32(out.cpu_threads)
	}
	if out.present&C.EMBER_STATS_KV_WINDOW_BLOCKS_TOTAL != 0 {
		stats.KVWindowBlocksFree = uint32(out.kv_window_blocks_free)
		stats.KVWindowBlocksTotal = uint32(out.kv_window_blocks_total)
	}
	if out.present&C.EMBER_STATS_PREFIX_CACHE_HITS != 0 {
		stats.PrefixCache = &PrefixCacheStats{
			Queries: uint64(out.prefix_cache_queries),
			Hits:    uint64(out.prefix_cache_hits),
			Blocks:  uint32(out.prefix_cache_blocks),
		}
	}
	if out.present&C.EMBER_STATS_SPEC_DECODE_NUM_ACCEPTED_TOKENS != 0 {
		stats.SpecDecode = &SpecDecodeStats{
			NumDraftTokens:    uint64(out.spec_decode_num_draft_tokens),
			NumAcceptedTokens: uint64(out.spec_decode_num_accepted_tokens),
		}
	}
	return stats, nil
}

// MetricsText is the engine's metrics in the Prometheus text exposition format (engine_metrics_text): what a
// host's /metrics serves, with `Content-Type: text/plain; version=0.0.4`. docs/c_api.md lists the metrics.
func (e *Engine) MetricsText() (string, error) {
	defer runtime.KeepAlive(e)
	if e.closed.Load() {
		return "", &Error{Op: "engine_metrics_text", Status: StatusInvalidHandle, Message: "the engine is closed"}
	}
	var out *C.char
	if _, err := call("engine_metrics_text", func() C.EmberStatus { return C.ember_go_metrics_text(e.handle, &out) }); err != nil {
		return "", err
	}
	return string(takeString(out)), nil
}

// Submit hands an OpenAI request body to the engine and returns at once; the engine works on it in the
// background, and Next / Events / Wait read its text deltas. The body is a Chat Completions request (it has
// `messages`) or a Completions request (it has `prompt`); docs/protocol.md lists the fields. When ctx ends before
// the request, the engine cancels it (engine_cancel), and the request's readers return ctx.Err().
//
// A refused request is an *Error with StatusInvalidRequest whose Message is the OpenAI error body;
// errors.Is(err, StatusOverloaded) says the engine is full (retry later).
func (e *Engine) Submit(ctx context.Context, requestJSON []byte) (*Request, error) {
	return e.submit(ctx, requestJSON, false)
}

// SubmitStream is Submit for a request read as OpenAI streaming chunk bodies (NextChunk / Chunks / Wait): what
// an HTTP server forwards to a `"stream": true` client.
func (e *Engine) SubmitStream(ctx context.Context, requestJSON []byte) (*Request, error) {
	return e.submit(ctx, requestJSON, true)
}

// API is a request body's API (engine_submit_api's EMBER_API_* values): each is read into the engine's one
// request, and answered in its own shape.
type API uint32

const (
	// APIOpenAI is Chat Completions or Completions, by which of `messages` and `prompt` the body has.
	APIOpenAI API = C.EMBER_API_OPENAI
	// APIChatCompletions is OpenAI's POST /v1/chat/completions.
	APIChatCompletions API = C.EMBER_API_CHAT_COMPLETIONS
	// APICompletions is OpenAI's POST /v1/completions.
	APICompletions API = C.EMBER_API_COMPLETIONS
	// APIResponses is OpenAI's POST /v1/responses; chunks are its stream events.
	APIResponses API = C.EMBER_API_RESPONSES
	// APIAnthropicMessages is Anthropic's POST /v1/messages; chunks are its stream events.
	APIAnthropicMessages API = C.EMBER_API_ANTHROPIC_MESSAGES
	// APIOllamaChat is Ollama's POST /api/chat; chunks are its NDJSON objects.
	APIOllamaChat API = C.EMBER_API_OLLAMA_CHAT
	// APIOllamaGenerate is Ollama's POST /api/generate; chunks are its NDJSON objects.
	APIOllamaGenerate API = C.EMBER_API_OLLAMA_GENERATE
	// APILlamaCompletion is llama-server's POST /completion; chunks are its stream objects.
	APILlamaCompletion API = C.EMBER_API_LLAMA_COMPLETION
)

// SubmitAPI is Submit (stream false) or SubmitStream (stream true) for a body of the given API: ResponseJSON is
// then that API's response body and NextChunk its stream chunks, one JSON object each (docs/c_api.md, "Other
// APIs", says how each API frames them). A refusal's Message is an OpenAI error body naming the field as the
// API names it.
func (e *Engine) SubmitAPI(ctx context.Context, api API, requestJSON []byte, stream bool) (*Request, error) {
	return e.submitAPI(ctx, api, requestJSON, stream)
}

func (e *Engine) submit(ctx context.Context, requestJSON []byte, chunks bool) (*Request, error) {
	return e.submitAPI(ctx, APIOpenAI, requestJSON, chunks)
}

func (e *Engine) submitAPI(ctx context.Context, api API, requestJSON []byte, chunks bool) (*Request, error) {
	op := "engine_submit_with_user_data"
	if api != APIOpenAI {
		op = "engine_submit_api"
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if e.closed.Load() {
		return nil, &Error{Op: op, Status: StatusInvalidHandle, Message: "the engine is closed"}
	}
	// C strings end at the first NUL byte: ember would parse only the part before it. JSON never contains a
	// raw NUL (RFC 8259 section 7: control characters must be escaped), so such a body is refused here.
	if bytes.IndexByte(requestJSON, 0) >= 0 {
		return nil, &Error{Op: op, Status: StatusInvalidRequest, Message: nulBodyError}
	}
	select {
	case e.submitting <- struct{}{}:
		defer func() { <-e.submitting }()
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	id, box, open := e.dispatch.register()
	if !open {
		return nil, &Error{Op: op, Status: StatusInvalidHandle, Message: "the engine is closed"}
	}
	cRequest := C.CString(string(requestJSON))
	defer C.free(unsafe.Pointer(cRequest))
	delivery := C.uint32_t(C.EMBER_DELIVERY_EVENTS)
	if chunks {
		delivery = C.EMBER_DELIVERY_CHUNKS
	}
	var handle C.uintptr_t
	_, err := call(op, func() C.EmberStatus {
		if api == APIOpenAI {
			return C.ember_go_submit_with_user_data(e.handle, cRequest, C.uint64_t(id), delivery, &handle)
		}
		return C.ember_go_submit_api(e.handle, C.uint32_t(api), cRequest, C.uint64_t(id), delivery, &handle)
	})
	runtime.KeepAlive(e)
	if err != nil {
		e.dispatch.forget(id)
		return nil, err
	}
	return newRequest(ctx, e, handle, id, box, chunks), nil
}

// nulBodyError is the OpenAI error body for a request body with a NUL byte, shaped like ember's own refusals.
const nulBodyError = `{"error": {"message": "the request body contains a NUL byte, which JSON does not allow ` +
	`unescaped", "type": "invalid_request_error", "param": null, "code": null}}`
