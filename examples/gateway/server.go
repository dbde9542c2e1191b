package main

// The gateway's HTTP routes, except the generation endpoints (completions.go, apis.go), Anthropic's token
// counting (count_tokens.go), /tokenize and /detokenize (tokenize.go), the embeddings routes (embeddings.go),
// reranking (rerank.go), llama-server's /props and /slots (llamaserver.go) and Ollama's others (ollama.go,
// ollama_models.go); and what every route does around its handler (counted): CORS (cors.go), API keys (auth.go),
// counting, the access log (accesslog.go).

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	ember "ember.invalid/ember/bindings/go"
)

// server answers the gateway's routes with one engine.
type server struct {
	engine *ember.Engine
	// modelID is what /v1/models lists.
	modelID string
	// started is when the gateway started (Unix seconds, wall clock), the model's `created`.
	started int64
	// metricsHeaders returns the timing metrics as headers of non-streaming responses.
	metricsHeaders bool
	// limits bound what one client can hold (limits.go).
	limits limits
	// slots holds one token per request doing engine work (admit), up to limits.maxConcurrentRequests; nil: no
	// bound.
	slots chan struct{}
	// bodyBytes counts the bytes of the request bodies held now, against limits.maxBodyBytesInFlight;
	// workBytes those the engine works on, against limits.maxEngineWorkBytes.
	bodyBytes, workBytes byteBudget
	metrics              *gatewayMetrics
	// draining is set once shutdown has begun: /health then answers 503 so that load balancers stop sending.
	draining atomic.Bool
	// active counts the requests holding a slot, so that a forced shutdown can wait for their engine work.
	active sync.WaitGroup
	// onAdmit, when set (by tests only), is called once a request holds its slot, before its engine work.
	onAdmit func(*http.Request)
	// infoCache holds the model's description (tokenize.go).
	infoCache
	// What run sets from the flags after newServer, each nil when off: the API keys every route but /health asks
	// for (auth.go), the origins browsers may call from (cors.go), the access log (accesslog.go).
	keys      *apiKeys
	cors      *corsPolicy
	accessLog *accessLog
}

// newServer starts counting from now.
func newServer(engine *ember.Engine, modelID string, metricsHeaders bool, l limits) *server {
	s := &server{
		engine: engine, modelID: modelID, started: time.Now().Unix(), metricsHeaders: metricsHeaders,
		limits: l, metrics: newGatewayMetrics(modelID),
	}
	if l.maxConcurrentRequests > 0 {
		s.slots = make(chan struct{}, l.maxConcurrentRequests)
	}
	s.bodyBytes.limit, s.workBytes.limit = l.maxBodyBytesInFlight, l.maxEngineWorkBytes
	return s
}

func (s *server) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/chat/completions", s.counted("chat", http.MethodPost, s.completions(endpointChat)))
	mux.HandleFunc("/v1/completions", s.counted("completions", http.MethodPost, s.completions(endpointCompletions)))
	mux.HandleFunc("/v1/responses", s.counted("responses", http.MethodPost, s.completions(endpointResponses)))
	mux.HandleFunc("/v1/messages", s.counted("messages", http.MethodPost, s.completions(endpointMessages)))
	mux.HandleFunc("/v1/messages/count_tokens", s.counted("count_tokens", http.MethodPost, s.countTokens))
	for _, path := range llamaServerPaths {
		mux.HandleFunc(path, s.counted("completion", http.MethodPost, s.completions(endpointLlamaCompletion)))
	}
	mux.HandleFunc("/props", s.counted("props", http.MethodGet, s.props))
	mux.HandleFunc("/slots", s.counted("slots", http.MethodGet, s.llamaSlots))
	mux.HandleFunc("/v1/embeddings", s.counted("embeddings", http.MethodPost, s.embeddings))
	mux.HandleFunc("/api/embed", s.counted("api_embed", http.MethodPost, s.ollamaEmbed))
	mux.HandleFunc("/api/chat", s.counted("api_chat", http.MethodPost, s.completions(endpointOllamaChat)))
	mux.HandleFunc("/api/generate", s.counted("api_generate", http.MethodPost, s.completions(endpointOllamaGenerate)))
	mux.HandleFunc("/api/tags", s.counted("api_tags", http.MethodGet, s.ollamaTags))
	mux.HandleFunc("/api/show", s.counted("api_show", http.MethodPost, s.ollamaShow))
	mux.HandleFunc("/api/ps", s.counted("api_ps", http.MethodGet, s.ollamaPs))
	mux.HandleFunc("/api/version", s.counted("api_version", http.MethodGet, s.ollamaVersion))
	// Only `/` itself: every other path falls to the 404 below.
	mux.HandleFunc("/{$}", s.counted("root", "", s.ollamaRoot))
	for _, path := range rerankPaths {
		mux.HandleFunc(path, s.counted("rerank", http.MethodPost, s.rerankRoute))
	}
	mux.HandleFunc("/v1/models", s.counted("models", http.MethodGet, s.models))
	mux.HandleFunc("/v1/models/{id...}", s.counted("models", http.MethodGet, s.model))
	mux.HandleFunc("/tokenize", s.counted("tokenize", http.MethodPost, s.tokenize))
	mux.HandleFunc("/detokenize", s.counted("detokenize", http.MethodPost, s.detokenize))
	mux.HandleFunc("/health", s.counted("health", http.MethodGet, s.health))
	mux.HandleFunc("/metrics", s.counted("metrics", http.MethodGet, s.prometheus))
	mux.HandleFunc("/", s.counted("other", "", func(w http.ResponseWriter, r *http.Request) int {
		e := newAPIError(http.StatusNotFound, "invalid_request_error", "no route "+r.URL.Path, "")
		return inShapeOf(apiOfPath(r.URL.Path), e).write(w)
	}))
	return mux
}

// counted answers a route's one method (any, for "") and counts the answer's status by endpoint, under which
// the access log also names it.
func (s *server) counted(endpoint, method string, handle func(http.ResponseWriter, *http.Request) int) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		record := s.accessLog.begin(w, r)
		if record != nil {
			r = r.WithContext(withAccessRecord(r.Context(), record))
		}
		w = s.guard(w, r)
		status := s.answer(w, r, method, handle)
		s.metrics.countRequest(endpoint, status)
		s.accessLog.write(record, endpoint, status)
	}
}

// answer runs what every route does before its handler: CORS (a preflight is answered here, before any key is
// asked for), the API key, the route's method.
func (s *server) answer(w http.ResponseWriter, r *http.Request, method string,
	handle func(http.ResponseWriter, *http.Request) int) int {
	if s.cors != nil {
		allowOrigin := s.cors.allowedOrigin(r)
		if allowOrigin != "" && isPreflight(r) {
			return s.cors.preflight(w, r, allowOrigin)
		}
		s.cors.addHeaders(w.Header(), allowOrigin)
	}
	if s.keys != nil && needsKey(r) {
		if refused := s.keys.check(r); refused != nil {
			return refused.write(w)
		}
	}
	if method != "" && r.Method != method {
		w.Header().Set("Allow", method)
		e := newAPIError(http.StatusMethodNotAllowed, "invalid_request_error",
			r.Method+" is not allowed here; use "+method, "")
		return inShapeOf(apiOfPath(r.URL.Path), e).write(w)
	}
	return handle(w, r)
}

func writeJSON(w http.ResponseWriter, status int, value any) int {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(value)
	return status
}

// models lists the one model this gateway serves, as OpenAI's GET /v1/models does, with vLLM's max_model_len
// (the longest request the engine takes, prompt and output tokens together; for an embedding model the longest
// input).
func (s *server) models(w http.ResponseWriter, _ *http.Request) int {
	model, bad := s.modelObject()
	if bad != nil {
		return bad.write(w)
	}
	return writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": []any{model}})
}

// model answers GET /v1/models/{id} (OpenAI's "retrieve model"): the object /v1/models lists for its id, a 404
// with code "model_not_found" for any other.
func (s *server) model(w http.ResponseWriter, r *http.Request) int {
	if id := r.PathValue("id"); id != s.modelID {
		e := newAPIError(http.StatusNotFound, "invalid_request_error",
			fmt.Sprintf("the model %q does not exist: this gateway serves %q", id, s.modelID), "model")
		e.body = withCode(e.body, "model_not_found")
		return e.write(w)
	}
	model, bad := s.modelObject()
	if bad != nil {
		return bad.write(w)
	}
	return writeJSON(w, http.StatusOK, model)
}

// modelObject is the served model as OpenAI describes a model.
func (s *server) modelObject() (map[string]any, *apiError) {
	model := map[string]any{"id": s.modelID, "object": "model", "created": s.started, "owned_by": "ember"}
	maxModelLen, err := s.maxModelLen()
	switch {
	case err == nil:
		model["max_model_len"] = maxModelLen
	case servesEmbeddingsOnly(err):
		// An engine whose model information is refused (an older library): no max_model_len.
	default:
		e := engineError(err)
		return nil, &e
	}
	return model, nil
}

// servesEmbeddingsOnly says whether err, from a call that reads no request (ModelInfo, MetricsText, Stats), is
// its refusal by an engine that serves embeddings: the one StatusInvalidRequest such a call returns.
func servesEmbeddingsOnly(err error) bool {
	return errors.Is(err, ember.StatusInvalidRequest)
}

// health says whether the gateway takes requests, how many it has in flight, and what the engine itself holds
// (engine_get_stats: sequences running and waiting, KV cache blocks free and in all, those of the sliding-window
// layers' pool when the model has one, preemptions, the prefix cache's counters when it has one, and on the CPU
// the kernel path and threads serving it).
func (s *server) health(w http.ResponseWriter, _ *http.Request) int {
	status, state := http.StatusOK, "ok"
	if s.draining.Load() {
		status, state = http.StatusServiceUnavailable, "draining"
	}
	body := map[string]any{"status": state, "model": s.modelID, "requests_in_flight": s.metrics.inFlight.Load()}
	if stats, err := s.engine.Stats(); err == nil {
		engine := map[string]any{
			"running": stats.Running, "waiting": stats.Waiting,
			"kv_blocks_free": stats.KVBlocksFree, "kv_blocks_total": stats.KVBlocksTotal,
		}
		if stats.KVWindowBlocksTotal > 0 {
			engine["kv_window_blocks_free"] = stats.KVWindowBlocksFree
			engine["kv_window_blocks_total"] = stats.KVWindowBlocksTotal
		}
		if stats.CPUKernels != "" {
			engine["cpu_kernels"], engine["cpu_threads"] = stats.CPUKernels, stats.CPUThreads
		}
		engine["preemptions"] = stats.Preemptions
		engine["model_load_time_ms"] = stats.ModelLoadTimeMs
		if p := stats.PrefixCache; p != nil {
			engine["prefix_cache_queries"], engine["prefix_cache_hits"] = p.Queries, p.Hits
			engine["prefix_cache_blocks"] = p.Blocks
		}
		if d := stats.SpecDecode; d != nil {
			engine["spec_decode_num_draft_tokens"] = d.NumDraftTokens
			engine["spec_decode_num_accepted_tokens"] = d.NumAcceptedTokens
		}
		body["engine"] = engine
	}
	return writeJSON(w, status, body)
}

// prometheus serves the gateway's own counters, then the engine's metrics (engine_metrics_text).
func (s *server) prometheus(w http.ResponseWriter, _ *http.Request) int {
	engineText, err := s.engine.MetricsText()
	if err != nil && !servesEmbeddingsOnly(err) {
		return engineError(err).write(w)
	}
	// An encoder engine has no generation metrics: the gateway's own follow alone.
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	s.metrics.write(w)
	s.writeLimitGauges(w)
	_, _ = io.WriteString(w, engineText)
	return http.StatusOK
}
