package main

// POST /v1/rerank over a reranker engine: a synthetic bge-small-rerank (bge-small's two layers and a
// cross-encoder's classification head, llama.cpp's real BERT vocabulary) that `ember-cli synthetic` writes into a
// temporary directory, or EMBER_RERANKER_MODEL. tests/e2e/test_gateway_rerank.py drives the built binary.

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"

	ember "ember.invalid/ember/bindings/go"
)

var reranker struct {
	once   sync.Once
	dir    string // the temporary directory of the synthetic file; "" for none
	engine *ember.Engine
	server *httptest.Server
	err    error
}

// rerankerServer is a gateway over a reranker engine, started once, with the tests' limits.
func rerankerServer(t *testing.T) *httptest.Server {
	t.Helper()
	reranker.once.Do(func() {
		path := os.Getenv("EMBER_RERANKER_MODEL")
		if path == "" {
			if path, reranker.dir, reranker.err = writeSynthetic("bge-small-rerank", "EMBER_RERANKER_MODEL"); reranker.err != nil {
				return
			}
		}
		reranker.engine, reranker.err = ember.NewEngine(ember.Config{Model: path, Threads: 2,
			ServedModelName: "rerank-test"})
		if reranker.err != nil {
			return
		}
		reranker.server = httptest.NewServer(newServer(reranker.engine, "rerank-test", false, defaultLimits()).routes())
	})
	if reranker.err != nil {
		t.Fatal(reranker.err)
	}
	return reranker.server
}

// stopReranker closes what rerankerServer started (stopEncoder calls it).
func stopReranker() {
	if reranker.server != nil {
		reranker.server.Close()
	}
	if reranker.engine != nil {
		reranker.engine.Close()
	}
	if reranker.dir != "" {
		_ = os.RemoveAll(reranker.dir)
	}
}

type rerankResponse struct {
	Model   string `json:"model"`
	Object  string `json:"object"`
	Results []struct {
		Index          int     `json:"index"`
		RelevanceScore float32 `json:"relevance_score"`
		Document       *struct {
			Text string `json:"text"`
		} `json:"document"`
	} `json:"results"`
	Usage struct {
		PromptTokens int `json:"prompt_tokens"`
		TotalTokens  int `json:"total_tokens"`
	} `json:"usage"`
}

var gatewayDocuments = []string{"Paris is the capital of France.", "Berlin is the capital of Germany.",
	"The quick brown fox jumps over the lazy dog.", "France is in Western Europe.", "x"}

func TestRerankInLlamaServerShape(t *testing.T) {
	server := rerankerServer(t)
	request, _ := json.Marshal(map[string]any{"model": "any", "query": "What is the capital of France?",
		"documents": gatewayDocuments})
	var full rerankResponse
	decodeJSON(t, postOn(t, server, "/v1/rerank", string(request)), http.StatusOK, &full)
	if full.Object != "list" || full.Model != "rerank-test" || len(full.Results) != len(gatewayDocuments) ||
		full.Usage.PromptTokens < 11*len(gatewayDocuments) || full.Usage.TotalTokens != full.Usage.PromptTokens {
		t.Fatalf("response %+v", full)
	}
	seen := map[int]bool{}
	for i, result := range full.Results {
		seen[result.Index] = true
		if i > 0 && result.RelevanceScore > full.Results[i-1].RelevanceScore || result.Document != nil {
			t.Errorf("results[%d] = %+v after %+v", i, result, full.Results[i-1])
		}
	}
	if len(seen) != len(gatewayDocuments) {
		t.Errorf("indices %v", seen)
	}
	// top_n and return_documents, documents as {"text"} objects; llama-server's other paths answer the same.
	objects := make([]map[string]string, len(gatewayDocuments))
	for i, d := range gatewayDocuments {
		objects[i] = map[string]string{"text": d}
	}
	request, _ = json.Marshal(map[string]any{"query": "What is the capital of France?", "documents": objects,
		"top_n": 2, "return_documents": true})
	for _, path := range rerankPaths {
		var best rerankResponse
		decodeJSON(t, postOn(t, server, path, string(request)), http.StatusOK, &best)
		if len(best.Results) != 2 {
			t.Fatalf("%s: %d results for top_n 2", path, len(best.Results))
		}
		for i, result := range best.Results {
			if result.Index != full.Results[i].Index || result.RelevanceScore != full.Results[i].RelevanceScore ||
				result.Document == nil || result.Document.Text != gatewayDocuments[result.Index] {
				t.Errorf("%s: results[%d] = %+v, want %+v with its document", path, i, result, full.Results[i])
			}
		}
	}
}

func TestRerankRefusalsAreOpenAIErrors(t *testing.T) {
	server := rerankerServer(t)
	for _, c := range []struct{ body, param string }{
		{`{"documents": ["a"]}`, "query"},
		{`{"query": "q"}`, "documents"},
		{`{"query": "q", "documents": []}`, "documents"},
		{`{"query": "q", "documents": [{"title": "t"}]}`, "documents"},
		{`{"query": "q", "documents": ["a"], "top_n": 0}`, "top_n"},
		{`{"query": "q", "documents": ["a"], "return_documents": "yes"}`, "return_documents"},
		{`{"query": "q", "documents": ["a"], "rank_fields": ["text"]}`, "rank_fields"},
		{`{"query": "q", "documents": ["a", "` + strings.Repeat("word ", 600) + `"]}`, "documents[1]"},
		{`{"query": "q", "documents": ["a"]`, ""},
	} {
		e := openAIError(t, postOn(t, server, "/v1/rerank", c.body), http.StatusBadRequest)
		if got := e.Error.Param; (got == nil) != (c.param == "") || (got != nil && *got != c.param) {
			t.Errorf("%.50s: param %v, want %q (%s)", c.body, got, c.param, e.Error.Message)
		}
		if e.Error.Type != "invalid_request_error" || strings.HasPrefix(e.Error.Message, "engine_") {
			t.Errorf("%.50s: error %+v", c.body, e.Error)
		}
	}
	resp, err := http.Get(server.URL + "/v1/rerank")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	openAIError(t, resp, http.StatusMethodNotAllowed)
	// A reranker gives vectors only when asked for a pooling of its encoder. (The engine's sentence starts with
	// "this model", so it carries no param: engine_embed gives the gateway the sentence alone.)
	e := openAIError(t, postOn(t, server, "/v1/embeddings", `{"input": "a"}`), http.StatusBadRequest)
	if !strings.Contains(e.Error.Message, "reranker") || e.Error.Type != "invalid_request_error" {
		t.Errorf("/v1/embeddings on a reranker: %+v", e.Error)
	}
}

// A model that is not a reranker answers 400 with the engine's refusal.
func TestOtherModelsRefuseRerank(t *testing.T) {
	body := `{"query": "q", "documents": ["a"]}`
	e := openAIError(t, postOn(t, encoderServer(t), "/v1/rerank", body), http.StatusBadRequest)
	if e.Error.Param != nil || e.Error.Type != "invalid_request_error" || !strings.Contains(e.Error.Message, "rank") ||
		strings.HasPrefix(e.Error.Message, "engine_") {
		t.Errorf("/v1/rerank on an embedding model: %+v", e.Error)
	}
	e = openAIError(t, post(t, "/v1/rerank", body), http.StatusBadRequest)
	if !strings.Contains(e.Error.Message, "generates text") {
		t.Errorf("/v1/rerank on a generating model: %+v", e.Error)
	}
}

func TestRerankErrorMapping(t *testing.T) {
	for message, want := range map[string]string{
		"top_n: a positive integer":                                        "top_n",
		"input[3] has 600 tokens, more than the 512 this model takes":      "documents[3]",
		"documents: 2049, at most 2048":                                    "documents",
		"rank_fields: not a field of a rerank request":                     "rank_fields",
		`pooling "rank" gives no vector per input (use mean, cls or last)`: "",
		"this engine's model generates text; embeddings need an encoder":   "",
		"the body is not JSON: EOF":                                        "",
	} {
		if got := rerankParam(message); got != want {
			t.Errorf("rerankParam(%q) = %q, want %q", message, got, want)
		}
	}
	// A request still waiting at its deadline_ms: 504, code "deadline".
	late := encoderError(&ember.Error{Op: "engine_rerank", Status: ember.StatusTimeout,
		Message: "engine_rerank: the request's deadline passed before it started"}, rerankParam)
	var lateBody errorObject
	if err := json.Unmarshal(late.body, &lateBody); err != nil || late.status != http.StatusGatewayTimeout ||
		lateBody.Error.Code == nil || *lateBody.Error.Code != "deadline" {
		t.Errorf("deadline: status %d, body %s (%v)", late.status, late.body, err)
	}
	// Backpressure is the embeddings' answer: 503, Retry-After, code "overloaded".
	e := encoderError(&ember.Error{Op: "engine_rerank", Status: ember.StatusOverloaded,
		Message: "engine_rerank: 1 embedding requests are waiting already"}, rerankParam)
	var body errorObject
	if err := json.Unmarshal(e.body, &body); err != nil || e.status != http.StatusServiceUnavailable ||
		!e.retryAfter || body.Error.Code == nil || *body.Error.Code != "overloaded" ||
		body.Error.Message != "1 embedding requests are waiting already" {
		t.Errorf("overloaded: status %d, Retry-After %v, body %s (%v)", e.status, e.retryAfter, e.body, err)
	}
}

// Many clients at once: each gets the scores it would get alone.
func TestRerankConcurrentClients(t *testing.T) {
	server := rerankerServer(t)
	alone := make([]float32, len(gatewayDocuments))
	for i, d := range gatewayDocuments {
		var r rerankResponse
		decodeJSON(t, postOn(t, server, "/v1/rerank", fmt.Sprintf(`{"query": "capital?", "documents": [%q]}`, d)),
			http.StatusOK, &r)
		alone[i] = r.Results[0].RelevanceScore
	}
	request, _ := json.Marshal(map[string]any{"query": "capital?", "documents": gatewayDocuments})
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for c := 0; c < 16; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := http.Post(server.URL+"/v1/rerank", "application/json", strings.NewReader(string(request)))
			if err != nil {
				errs <- err
				return
			}
			defer resp.Body.Close()
			var r rerankResponse
			text, _ := io.ReadAll(resp.Body)
			if err := json.Unmarshal(text, &r); err != nil || resp.StatusCode != http.StatusOK {
				errs <- fmt.Errorf("status %d: %.200s", resp.StatusCode, text)
				return
			}
			for _, result := range r.Results {
				if result.RelevanceScore != alone[result.Index] {
					errs <- fmt.Errorf("document %d: %v, alone %v", result.Index, result.RelevanceScore,
						alone[result.Index])
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
