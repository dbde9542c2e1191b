package main

// The embeddings routes over an encoder engine: a synthetic bge-small (two layers, 384-wide vectors, llama.cpp's
// real BERT vocabulary) that `ember-cli synthetic` writes into a temporary directory, or EMBER_ENCODER_MODEL.
// tests/e2e/test_gateway_embeddings.py drives the built binary with the official OpenAI client.

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	ember "ember.invalid/ember/bindings/go"
)

// bgeWidth is bge-small's hidden size: every vector's length.
const bgeWidth = 384

var encoder struct {
	fileOnce sync.Once
	dir      string // the temporary directory of the synthetic file; "" for none
	path     string
	fileErr  error

	once   sync.Once
	engine *ember.Engine
	server *httptest.Server
	err    error
}

// encoderModel is the encoder file, written on first use.
func encoderModel(t *testing.T) string {
	t.Helper()
	encoder.fileOnce.Do(func() { encoder.path, encoder.fileErr = encoderModelPath() })
	if encoder.fileErr != nil {
		t.Fatal(encoder.fileErr)
	}
	return encoder.path
}

// encoderModelPath is EMBER_ENCODER_MODEL, else a synthetic bge-small (writeSynthetic).
func encoderModelPath() (string, error) {
	if path := os.Getenv("EMBER_ENCODER_MODEL"); path != "" {
		return path, nil
	}
	path, dir, err := writeSynthetic("bge-small", "EMBER_ENCODER_MODEL")
	encoder.dir = dir
	return path, err
}

// writeSynthetic writes a synthetic file of the family into a new temporary directory (dir, for the caller to
// remove) with ember-cli (EMBER_CLI, else target/release/ember-cli) and llama.cpp's BERT vocabulary
// (EMBER_LLAMACPP_VOCABS, else .cache/llamacpp/vocab; `make vocabs` fetches it); env names the variable that
// would name a file instead.
func writeSynthetic(family, env string) (path, dir string, err error) {
	cli := os.Getenv("EMBER_CLI")
	if cli == "" {
		cli = filepath.Join("..", "..", "target", "release", "ember-cli")
	}
	vocabs := os.Getenv("EMBER_LLAMACPP_VOCABS")
	if vocabs == "" {
		vocabs = filepath.Join("..", "..", ".cache", "llamacpp", "vocab")
	}
	if dir, err = os.MkdirTemp("", "ember-gateway-embed-"); err != nil {
		return "", "", err
	}
	path = filepath.Join(dir, family+"-synthetic.gguf")
	out, err := exec.Command(cli, "synthetic", path, "--family", family, "--layers", "2", "--seed", "1",
		"--vocab", filepath.Join(vocabs, "ggml-vocab-bert-bge.gguf")).CombinedOutput()
	if err != nil {
		return "", dir, fmt.Errorf("%s synthetic: %v: %s (build it with `cargo build --release --bin ember-cli`, "+
			"fetch the vocabulary with `make vocabs`, or set %s)", cli, err, out, env)
	}
	return path, dir, nil
}

// encoderServer is a gateway over an encoder engine, started once, with the tests' limits.
func encoderServer(t *testing.T) *httptest.Server {
	t.Helper()
	path := encoderModel(t)
	encoder.once.Do(func() {
		encoder.engine, encoder.err = ember.NewEngine(ember.Config{Model: path, Threads: 2,
			ServedModelName: "bge-test"})
		if encoder.err != nil {
			return
		}
		encoder.server = httptest.NewServer(newServer(encoder.engine, "bge-test", false, defaultLimits()).routes())
	})
	if encoder.err != nil {
		t.Fatal(encoder.err)
	}
	return encoder.server
}

// stopEncoder closes what encoderServer and rerankerServer started (TestMain calls it).
func stopEncoder() {
	if encoder.server != nil {
		encoder.server.Close()
	}
	if encoder.engine != nil {
		encoder.engine.Close()
	}
	if encoder.dir != "" {
		_ = os.RemoveAll(encoder.dir)
	}
	stopReranker()
}

func postOn(t *testing.T, server *httptest.Server, path, body string) *http.Response {
	t.Helper()
	resp, err := http.Post(server.URL+path, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

func decodeJSON(t *testing.T, resp *http.Response, status int, value any) {
	t.Helper()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != status {
		t.Fatalf("status %d, want %d: %.300s", resp.StatusCode, status, body)
	}
	if err := json.Unmarshal(body, value); err != nil {
		t.Fatalf("body %.300s: %v", body, err)
	}
}

type embeddingsResponse struct {
	Object string `json:"object"`
	Model  string `json:"model"`
	Data   []struct {
		Object    string          `json:"object"`
		Index     int             `json:"index"`
		Embedding json.RawMessage `json:"embedding"`
	} `json:"data"`
	Usage struct {
		PromptTokens int `json:"prompt_tokens"`
		TotalTokens  int `json:"total_tokens"`
	} `json:"usage"`
}

func norm(v []float32) float64 {
	var sum float64
	for _, x := range v {
		sum += float64(x) * float64(x)
	}
	return math.Sqrt(sum)
}

func TestEmbeddingsInOpenAIShape(t *testing.T) {
	server := encoderServer(t)
	var floats embeddingsResponse
	decodeJSON(t, postOn(t, server, "/v1/embeddings", `{"model": "bge-test", "input": ["Hello, world!", "Second"]}`),
		http.StatusOK, &floats)
	if floats.Object != "list" || floats.Model != "bge-test" || len(floats.Data) != 2 || floats.Data[1].Index != 1 ||
		floats.Data[0].Object != "embedding" || floats.Usage.PromptTokens < 6 ||
		floats.Usage.TotalTokens != floats.Usage.PromptTokens {
		t.Fatalf("response %+v", floats)
	}
	var b64 embeddingsResponse
	decodeJSON(t, postOn(t, server, "/v1/embeddings",
		`{"model": "bge-test", "input": ["Hello, world!", "Second"], "encoding_format": "base64"}`), http.StatusOK, &b64)
	for i := range floats.Data {
		var vector []float32
		if err := json.Unmarshal(floats.Data[i].Embedding, &vector); err != nil {
			t.Fatal(err)
		}
		var encoded string
		if err := json.Unmarshal(b64.Data[i].Embedding, &encoded); err != nil {
			t.Fatal(err)
		}
		raw, err := base64.StdEncoding.DecodeString(encoded)
		if err != nil || len(raw) != 4*bgeWidth || len(vector) != bgeWidth {
			t.Fatalf("vector %d: %d floats, %d base64 bytes (%v)", i, len(vector), len(raw), err)
		}
		for j, x := range vector {
			if math.Float32frombits(binary.LittleEndian.Uint32(raw[4*j:])) != x {
				t.Fatalf("vector %d[%d]: base64 and float differ", i, j)
			}
		}
		if math.Abs(norm(vector)-1) > 1e-5 {
			t.Errorf("vector %d: norm %v", i, norm(vector))
		}
	}
}

func TestEmbeddingsRefusalsAreOpenAIErrors(t *testing.T) {
	server := encoderServer(t)
	cases := []struct {
		body   string
		status int
		param  string
	}{
		{`{"input": "a", "dimensions": 1000}`, 400, "dimensions"},
		{`{"input": "a", "temperature": 0}`, 400, "temperature"},
		{`{}`, 400, "input"},
		{`{"input": []}`, 400, "input"},
		{`{"input": [1, "a"]}`, 400, "input"},
		{`{"input": "` + strings.Repeat("word ", 600) + `"}`, 400, "input[0]"},
		{`{"input": "a", "encoding_format": "hex"}`, 400, "encoding_format"},
		{`{"input": "a", "pooling": "none"}`, 400, "pooling"},
		{`{"input": "a", "deadline_ms": -1}`, 400, "deadline_ms"},
		{`{"input": "a", "include_metrics": "yes"}`, 400, "include_metrics"},
		{`{"input": "a"`, 400, ""},
	}
	for _, c := range cases {
		resp := postOn(t, server, "/v1/embeddings", c.body)
		e := openAIError(t, resp, c.status)
		if got := e.Error.Param; (got == nil) != (c.param == "") || (got != nil && *got != c.param) {
			t.Errorf("%.50s: param %v, want %q (%s)", c.body, got, c.param, e.Error.Message)
		}
		if e.Error.Type != "invalid_request_error" || strings.HasPrefix(e.Error.Message, "engine_") {
			t.Errorf("%.50s: error %+v", c.body, e.Error)
		}
	}
	resp, err := http.Get(server.URL + "/v1/embeddings")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	openAIError(t, resp, http.StatusMethodNotAllowed)
}

func TestEmbedParam(t *testing.T) {
	for message, want := range map[string]string{
		"dimensions: 1000 is not in 1..=384 (the model's width)":      "dimensions",
		"input[3] has 600 tokens, more than the 512 this model takes": "input[3]",
		"input is required": "input",
		"temperature: not a field of an embeddings request":                "temperature",
		`pooling "none" gives no vector per input (use mean, cls or last)`: "pooling",
		"the body is not JSON: EOF":                                        "",
		"this engine's model generates text; embeddings need an encoder":   "",
	} {
		if got := embedParam(message); got != want {
			t.Errorf("embedParam(%q) = %q, want %q", message, got, want)
		}
	}
}

// The embedder's backpressure reaches the client as the completions' does: 503, Retry-After, code "overloaded".
func TestEmbeddingsOverloadedIs503(t *testing.T) {
	engine, err := ember.NewEngine(ember.Config{Model: encoderModel(t), Threads: 2, MaxWaitingRequests: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer engine.Close()
	server := httptest.NewServer(newServer(engine, "bge-test", false, defaultLimits()).routes())
	defer server.Close()
	large := make([]string, 2048)
	for i := range large {
		large[i] = fmt.Sprintf("sentence %d of a large batch", i)
	}
	largeBody, _ := json.Marshal(map[string]any{"input": large})
	for attempt := 0; attempt < 5; attempt++ {
		done := make(chan int, 1)
		go func() {
			resp, err := http.Post(server.URL+"/v1/embeddings", "application/json", strings.NewReader(string(largeBody)))
			if err != nil {
				done <- 0
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			done <- resp.StatusCode
		}()
		// A head start, so that the large request is queued first.
		time.Sleep(time.Duration(20*(attempt+1)) * time.Millisecond)
		for refused := false; !refused; {
			select {
			case status := <-done:
				if status != http.StatusOK && status != http.StatusServiceUnavailable {
					t.Fatalf("the large request: status %d", status)
				}
			default:
				resp := postOn(t, server, "/v1/embeddings", `{"input": "small"}`)
				if resp.StatusCode == http.StatusOK {
					continue
				}
				e := openAIError(t, resp, http.StatusServiceUnavailable)
				if resp.Header.Get("Retry-After") == "" || e.Error.Code == nil || *e.Error.Code != "overloaded" ||
					e.Error.Type != "server_error" {
					t.Fatalf("Retry-After %q, error %+v", resp.Header.Get("Retry-After"), e.Error)
				}
				// Ollama's route answers the same status, in Ollama's shape.
				resp = postOn(t, server, "/api/embed", `{"model": "bge-test", "input": "small"}`)
				if resp.StatusCode == http.StatusServiceUnavailable {
					var o struct{ Error string }
					decodeJSON(t, resp, http.StatusServiceUnavailable, &o)
					if !strings.Contains(o.Error, "waiting") || resp.Header.Get("Retry-After") == "" {
						t.Errorf("/api/embed overloaded: %+v, Retry-After %q", o, resp.Header.Get("Retry-After"))
					}
				}
				<-done
				return
			}
			break // the large request ended before a small one was refused: try again
		}
	}
	t.Fatal("no request was refused as overloaded in 5 attempts")
}

type ollamaResponse struct {
	Model           string      `json:"model"`
	Embeddings      [][]float32 `json:"embeddings"`
	TotalDuration   *int64      `json:"total_duration"`
	LoadDuration    *int64      `json:"load_duration"`
	PromptEvalCount *int        `json:"prompt_eval_count"`
}

func TestOllamaEmbed(t *testing.T) {
	server := encoderServer(t)
	var openai embeddingsResponse
	decodeJSON(t, postOn(t, server, "/v1/embeddings", `{"input": ["Why is the sky blue?", "Why is grass green?"]}`),
		http.StatusOK, &openai)
	var o ollamaResponse
	decodeJSON(t, postOn(t, server, "/api/embed",
		`{"model": "all-minilm", "input": ["Why is the sky blue?", "Why is grass green?"], "truncate": true,
		  "keep_alive": "5m", "options": {"num_ctx": 512}}`), http.StatusOK, &o)
	if o.Model != "bge-test" || len(o.Embeddings) != 2 || o.TotalDuration == nil || *o.TotalDuration <= 0 ||
		o.LoadDuration == nil || *o.LoadDuration != 0 || o.PromptEvalCount == nil ||
		*o.PromptEvalCount != openai.Usage.PromptTokens {
		t.Fatalf("response %+v (OpenAI usage %+v)", o, openai.Usage)
	}
	// The same vectors as /v1/embeddings gives, bit for bit.
	for i := range o.Embeddings {
		var vector []float32
		if err := json.Unmarshal(openai.Data[i].Embedding, &vector); err != nil {
			t.Fatal(err)
		}
		if len(o.Embeddings[i]) != bgeWidth {
			t.Fatalf("vector %d: %d wide", i, len(o.Embeddings[i]))
		}
		for j := range vector {
			if vector[j] != o.Embeddings[i][j] {
				t.Fatalf("vector %d[%d]: /api/embed %v, /v1/embeddings %v", i, j, o.Embeddings[i][j], vector[j])
			}
		}
	}
	// A string is one input; dimensions truncates and normalizes again.
	decodeJSON(t, postOn(t, server, "/api/embed", `{"model": "m", "input": "Why is the sky blue?", "dimensions": 128}`),
		http.StatusOK, &o)
	if len(o.Embeddings) != 1 || len(o.Embeddings[0]) != 128 || math.Abs(norm(o.Embeddings[0])-1) > 1e-5 {
		t.Errorf("dimensions 128: %d vectors", len(o.Embeddings))
	}
	// No input: no vectors (Ollama's clients send this to load a model).
	for _, body := range []string{`{"model": "m"}`, `{"model": "m", "input": ""}`, `{"model": "m", "input": []}`} {
		var empty map[string]any
		decodeJSON(t, postOn(t, server, "/api/embed", body), http.StatusOK, &empty)
		if vectors, ok := empty["embeddings"].([]any); !ok || len(vectors) != 0 || empty["prompt_eval_count"] != 0.0 {
			t.Errorf("%s: %v", body, empty)
		}
	}
	// Errors in Ollama's shape.
	for body, want := range map[string]string{
		`{"model": "m", "input": 7}`:                                      "input",
		`{"model": "m", "input": ["a", 1]}`:                               "input",
		`{"model": "m", "input": "a", "truncate": "yes"}`:                 "truncate",
		`{"model": "m", "input": "a", "dimensions": 1000}`:                "dimensions",
		`{"model": "m", "input": "a", "prompt": "b"}`:                     "prompt",
		`{"model": "m", "input": "` + strings.Repeat("word ", 600) + `"}`: "input[0]",
	} {
		var e struct{ Error string }
		decodeJSON(t, postOn(t, server, "/api/embed", body), http.StatusBadRequest, &e)
		if !strings.Contains(e.Error, want) || strings.HasPrefix(e.Error, "engine_") {
			t.Errorf("%.50s: error %q does not name %s", body, e.Error, want)
		}
	}
}

// On an encoder, the completion endpoints give the engine's refusal (400); the routes about the gateway and its
// model still answer.
func TestEncoderGatewayRefusesGeneration(t *testing.T) {
	server := encoderServer(t)
	for path, body := range map[string]string{
		"/v1/chat/completions": `{"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}`,
		"/v1/completions":      `{"prompt": "Hi", "max_tokens": 2}`,
	} {
		e := openAIError(t, postOn(t, server, path, body), http.StatusBadRequest)
		if !strings.Contains(e.Error.Message, "embedding model") || !strings.Contains(e.Error.Message, "serves embeddings") {
			t.Errorf("%s: %q", path, e.Error.Message)
		}
	}
	var models struct {
		Data []map[string]any `json:"data"`
	}
	resp, err := http.Get(server.URL + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	decodeJSON(t, resp, http.StatusOK, &models)
	if len(models.Data) != 1 || models.Data[0]["id"] != "bge-test" || models.Data[0]["object"] != "model" {
		t.Errorf("/v1/models: %+v", models)
	}
	for _, path := range []string{"/health", "/metrics"} {
		resp, err := http.Get(server.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		text, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("%s: status %d: %s", path, resp.StatusCode, text)
		}
		if path == "/metrics" && !strings.Contains(string(text),
			`ember_gateway_requests_total{model_name="bge-test",endpoint="models",code="200"}`) {
			t.Errorf("/metrics lacks the gateway's counters:\n%s", text)
		}
	}
}

// On an engine that generates text, the embeddings routes give the engine's refusal (400).
func TestGeneratingGatewayRefusesEmbeddings(t *testing.T) {
	e := openAIError(t, post(t, "/v1/embeddings", `{"input": "a"}`), http.StatusBadRequest)
	if !strings.Contains(e.Error.Message, "encoder model") {
		t.Errorf("/v1/embeddings: %q", e.Error.Message)
	}
	var o struct{ Error string }
	decodeJSON(t, post(t, "/api/embed", `{"model": "m", "input": "a"}`), http.StatusBadRequest, &o)
	if !strings.Contains(o.Error, "encoder model") {
		t.Errorf("/api/embed: %q", o.Error)
	}
}
