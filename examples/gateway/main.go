// ember-gateway: an OpenAI-compatible HTTP server over one ember engine, with the standard library only.
//
//	ember-gateway [--model PATH] [--listen 127.0.0.1:8080] [--threads N] [--enable-per-request-metrics]
//	              [--disable-log-stats] [--metrics-headers] [--metrics-names ember|vllm] [--served-model-name NAME]
//	              [--pooling mean|cls|last|rank] [--shutdown-timeout 30s]
//	              [--max-body-bytes 8388608] [--max-body-bytes-in-flight 134217728]
//	              [--max-engine-work-bytes 16777216] [--max-concurrent-requests 256] [--read-header-timeout 10s]
//	              [--read-body-timeout 30s] [--write-timeout 30s] [--idle-timeout 2m]
//	              [--api-key KEY]... [--api-key-file PATH] [--cors-origin ORIGIN]... [--access-log PATH|-]
//	ember-gateway --health-probe http://127.0.0.1:8080/health   (exit 0 when it answers 200: for HEALTHCHECK)
//
// Routes: POST /v1/chat/completions, POST /v1/completions (JSON, or server-sent events with "stream": true),
// POST /v1/responses, Ollama's POST /api/chat and POST /api/generate (NDJSON unless "stream": false), GET
// /api/tags, POST /api/show, GET /api/ps, GET /api/version and GET / ("Ollama is running"), POST /v1/embeddings
// and Ollama's POST /api/embed (for an encoder model: docs/embeddings.md), POST /v1/rerank (for a reranker; also
// /rerank, /v1/reranking, /reranking), POST /tokenize, POST /detokenize, GET /v1/models, GET /v1/models/{id},
// GET /health, GET /metrics (Prometheus). With --api-key or --api-key-file, every route but
// GET /health (and CORS preflights) asks for a key: `Authorization: Bearer KEY` or `x-api-key: KEY`, else 401.
// --cors-origin lets web pages of those origins call it (* for any); --access-log writes a JSON line per
// request (- for stdout, after the address line). SIGTERM or SIGINT
// stops accepting connections, lets the requests in progress finish (up to --shutdown-timeout, then cancels
// them), and exits; a second signal ends it at once. docs/go.md has more.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	ember "ember.invalid/ember/bindings/go"
)

type options struct {
	model                   string
	chatTemplate            string
	listen                  string
	threads                 int
	enablePerRequestMetrics bool
	disableLogStats         bool
	metricsHeaders          bool
	metricsNames            string
	speculativeTokens       int
	stepBudget              string
	maxWaitingRequests      int
	servedModelName         string
	pooling                 string
	shutdownTimeout         time.Duration
	limits                  limits
	healthProbe             string
	apiKeys                 stringList
	apiKeyFile              string
	corsOrigins             stringList
	accessLog               string
}

// stringList is a flag that may be given several times, each adding a value.
type stringList []string

func (l *stringList) String() string { return strings.Join(*l, ",") }

func (l *stringList) Set(value string) error {
	*l = append(*l, value)
	return nil
}

func parseOptions() options {
	var o options
	flag.StringVar(&o.model, "model", "",
		"GGUF model file, or a Hugging Face hub name (org/repo:QUANT, hf://org/repo/file.gguf) resolved through the "+
			"hub cache (docs/models.md); default: $EMBER_MODEL, else the default model (docs/c_api.md, \"model\")")
	flag.StringVar(&o.chatTemplate, "chat-template", "",
		"chat template replacing the model's: a Jinja file's path, or the template text itself (the engine's chat_template)")
	flag.StringVar(&o.listen, "listen", "127.0.0.1:8080", "address to listen on (port 0: any free port)")
	flag.IntVar(&o.threads, "threads", 0, "CPU threads of the engine (0: every core)")
	flag.BoolVar(&o.enablePerRequestMetrics, "enable-per-request-metrics", false,
		`let responses carry "metrics" for requests that set "include_metrics": true`)
	flag.BoolVar(&o.disableLogStats, "disable-log-stats", false,
		"record no timing stats (no metrics anywhere; conflicts with --enable-per-request-metrics)")
	flag.StringVar(&o.metricsNames, "metrics-names", "ember",
		"\"vllm\" also writes the metrics the inference gateway's endpoint picker reads under vLLM's names "+
			"(vllm:num_requests_waiting, ...); \"ember\": ember's names only")
	flag.BoolVar(&o.metricsHeaders, "metrics-headers", false,
		"also return the timing metrics as X-Ember-* and Server-Timing headers of non-streaming responses")
	flag.IntVar(&o.speculativeTokens, "speculative-tokens", 0,
		"n-gram speculative decoding with drafts of up to this many tokens (1..16; 0: off; docs/c_api.md)")
	flag.StringVar(&o.stepBudget, "step-budget", "",
		"how many prompt tokens may join an engine step of decodes: auto, throughput, or a target step time in ms (the engine's step_budget; default auto)")
	flag.IntVar(&o.maxWaitingRequests, "max-waiting-requests", 0,
		"requests waiting to start at most; more are answered 503 with Retry-After at once (0: the engine's default)")
	flag.StringVar(&o.servedModelName, "served-model-name", "", "model id of /v1/models (default: the file's name)")
	flag.StringVar(&o.pooling, "pooling", "",
		"serve the model as an embedding model pooling this way: mean, cls, last or rank (default: the file's)")
	flag.DurationVar(&o.shutdownTimeout, "shutdown-timeout", 30*time.Second,
		"on SIGTERM, how long requests in progress may take before they are cancelled")
	o.limits = defaultLimits()
	flag.Int64Var(&o.limits.maxBodyBytes, "max-body-bytes", o.limits.maxBodyBytes,
		"largest request body accepted, in bytes (413 beyond; 0: no limit)")
	flag.Int64Var(&o.limits.maxBodyBytesInFlight, "max-body-bytes-in-flight", o.limits.maxBodyBytesInFlight,
		"bytes of request bodies held at once, summed over every request whose body is being read or not yet "+
			"taken by the engine; more are answered 503 with Retry-After at once (0: no limit)")
	flag.Int64Var(&o.limits.maxEngineWorkBytes, "max-engine-work-bytes", o.limits.maxEngineWorkBytes,
		"bytes of request bodies (and /detokenize answers, at their largest) that the engine checks, parses or "+
			"tokenizes at once; more are answered 503 with Retry-After at once (0: no limit)")
	flag.IntVar(&o.limits.maxConcurrentRequests, "max-concurrent-requests", o.limits.maxConcurrentRequests,
		"requests doing engine work at once (completions, embeddings, reranking, /tokenize, /detokenize), "+
			"counted once their body is in; more are answered 503 with Retry-After at once (0: no limit)")
	flag.DurationVar(&o.limits.readHeaderTimeout, "read-header-timeout", o.limits.readHeaderTimeout,
		"how long a client may take to send a request's headers (0: no limit)")
	flag.DurationVar(&o.limits.readBodyTimeout, "read-body-timeout", o.limits.readBodyTimeout,
		"how long a request's body may take to arrive after its headers (408 beyond; 0: no limit)")
	flag.DurationVar(&o.limits.writeTimeout, "write-timeout", o.limits.writeTimeout,
		"how long one write may block; a client that reads nothing for this long is dropped, and its request "+
			"cancelled (a stream may last any time while its client reads; 0: no limit)")
	flag.DurationVar(&o.limits.idleTimeout, "idle-timeout", o.limits.idleTimeout,
		"how long a keep-alive connection may wait for its next request (0: no limit)")
	flag.Var(&o.apiKeys, "api-key",
		"an API key every request but GET /health must present (Authorization: Bearer KEY or x-api-key: KEY); "+
			"repeat for several (a command line is visible to other users: prefer --api-key-file)")
	flag.StringVar(&o.apiKeyFile, "api-key-file", "",
		"a file of API keys, one a line (blank lines and lines starting with # skipped), as --api-key")
	flag.Var(&o.corsOrigins, "cors-origin",
		"an origin (scheme://host[:port]) whose web pages may call the gateway, or * for any; repeat for several")
	flag.StringVar(&o.accessLog, "access-log", "",
		"append one JSON line per request to this file (- for stdout)")
	flag.StringVar(&o.healthProbe, "health-probe", "",
		"only ask this URL (the /health of a running gateway) and exit 0 if it answers 200, 1 otherwise")
	flag.Parse()
	return o
}

func main() {
	o := parseOptions()
	if o.healthProbe != "" {
		if err := healthProbe(o.healthProbe, 3*time.Second); err != nil {
			fmt.Fprintln(os.Stderr, "ember-gateway: health probe:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(o); err != nil {
		slog.Error(err.Error())
		os.Exit(1)
	}
}

func run(o options) error {
	if o.metricsNames != "ember" && o.metricsNames != "vllm" {
		return fmt.Errorf("--metrics-names %q: use ember or vllm", o.metricsNames)
	}
	if err := o.limits.check(); err != nil {
		return err
	}
	// The flags of operations first: a mistake in them stops the gateway before it loads a model.
	keys, err := loadAPIKeys(o.apiKeys, o.apiKeyFile)
	if err != nil {
		return err
	}
	cors, err := newCORSPolicy(o.corsOrigins)
	if err != nil {
		return err
	}
	accessLog, err := openAccessLog(o.accessLog)
	if err != nil {
		return fmt.Errorf("--access-log: %w", err)
	}
	defer accessLog.Close()
	var speculative *ember.SpeculativeConfig
	if o.speculativeTokens > 0 {
		speculative = &ember.SpeculativeConfig{NumSpeculativeTokens: o.speculativeTokens}
	}
	engine, err := ember.NewEngine(ember.Config{
		Model:                   o.model,
		StepBudget:              stepBudget(o.stepBudget),
		ChatTemplate:            o.chatTemplate,
		Threads:                 o.threads,
		EnablePerRequestMetrics: o.enablePerRequestMetrics,
		DisableLogStats:         o.disableLogStats,
		Speculative:             speculative,
		MaxWaitingRequests:      o.maxWaitingRequests,
		ServedModelName:         modelID(o),
		Pooling:                 o.pooling,
		MetricsVLLMNames:        o.metricsNames == "vllm",
		Log:                     logEngineLine,
	})
	if err != nil {
		return err
	}
	defer engine.Close()

	listener, err := net.Listen("tcp", o.listen)
	if err != nil {
		return err
	}
	s := newServer(engine, modelID(o), o.metricsHeaders, o.limits)
	s.keys, s.cors, s.accessLog = keys, cors, accessLog
	httpServer := &http.Server{}
	s.configure(httpServer)
	// The one line on stdout: scripts read the address from it (useful with port 0).
	fmt.Printf("ember-gateway listening on http://%s\n", listener.Addr())

	signals, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	served := make(chan error, 1)
	go func() { served <- httpServer.Serve(listener) }()
	select {
	case err := <-served:
		return err
	case <-signals.Done():
	}
	// From here a second signal has its default effect: it ends the gateway at once, without draining.
	stop()

	slog.Info("shutting down: finishing the requests in progress", "timeout", o.shutdownTimeout)
	s.draining.Store(true)
	ctx, cancel := context.WithTimeout(context.Background(), o.shutdownTimeout)
	defer cancel()
	if err := httpServer.Shutdown(ctx); errors.Is(err, context.DeadlineExceeded) {
		// Closing the connections ends the handlers' contexts, which cancels their requests.
		slog.Warn("shutdown timeout: cancelling the requests still running")
		_ = httpServer.Close()
		// Close does not wait for handlers; each returns once the engine has ended its cancelled request.
		s.active.Wait()
	}
	return nil
}

// modelID is the id /v1/models lists: --served-model-name, else the model file's name without .gguf.
func modelID(o options) string {
	if o.servedModelName != "" {
		return o.servedModelName
	}
	path := o.model
	if path == "" {
		path = os.Getenv("EMBER_MODEL")
	}
	if path == "" {
		path = "SmolLM2-135M-Instruct.Q4_1.gguf"
	}
	return strings.TrimSuffix(filepath.Base(path), ".gguf")
}

// logEngineLine passes the engine's log lines to the gateway's log.
func logEngineLine(level ember.LogLevel, message string) {
	slogLevel := slog.LevelDebug
	switch level {
	case ember.LogError:
		slogLevel = slog.LevelError
	case ember.LogWarn:
		slogLevel = slog.LevelWarn
	case ember.LogInfo:
		slogLevel = slog.LevelInfo
	}
	slog.Log(context.Background(), slogLevel, message, "source", "engine")
}

// stepBudget is --step-budget as the engine's step_budget: a number of milliseconds, a policy's name, or nil
// (the engine's default) when the flag is not set. The engine checks the value.
func stepBudget(flagValue string) any {
	if flagValue == "" {
		return nil
	}
	if ms, err := strconv.ParseFloat(flagValue, 64); err == nil {
		return ms
	}
	return flagValue
}
