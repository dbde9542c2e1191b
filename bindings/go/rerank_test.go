package ember

// Reranking on a reranker engine: a synthetic bge-small-rerank (bge-small's two layers and a cross-encoder's
// classification head, llama.cpp's real BERT vocabulary) that `ember-cli synthetic` writes into a temporary
// directory, or EMBER_RERANKER_MODEL.

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
)

var rerankQuery = "What is the capital of France?"

var rerankDocuments = []string{"Paris is the capital and largest city of France.",
	"Berlin is the capital of Germany.", "The quick brown fox jumps over the lazy dog.",
	"France is a country in Western Europe.", "x", "Capital letters start sentences.",
	"The Eiffel Tower stands in Paris, on the Seine."}

// rerankerEngine starts an engine on the reranker file, closed when the test ends.
func rerankerEngine(t *testing.T, config Config) *Engine {
	t.Helper()
	config.Model = rerankerFile.get(t, "EMBER_RERANKER_MODEL", "bge-small-rerank")
	config.Threads, config.ServedModelName = 2, "rerank-test"
	engine, err := NewEngine(config)
	if err != nil {
		t.Fatalf("NewEngine on the reranker: %v", err)
	}
	t.Cleanup(engine.Close)
	return engine
}

func TestRerankOrdersByScore(t *testing.T) {
	engine := rerankerEngine(t, Config{})
	r, err := engine.Rerank(rerankQuery, rerankDocuments, RerankOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if r.Model != "rerank-test" || len(r.Results) != len(rerankDocuments) || len(r.Scores) != len(rerankDocuments) {
		t.Fatalf("reranking %+v", r)
	}
	// [CLS] query [SEP] document [SEP]: the query's 9 tokens and 2 more at least, per document.
	if r.PromptTokens < 11*len(rerankDocuments) || r.TotalTokens != r.PromptTokens {
		t.Errorf("usage %d, %d", r.PromptTokens, r.TotalTokens)
	}
	indices := make([]int, len(r.Results))
	for i, result := range r.Results {
		indices[i] = result.Index
		if i > 0 && result.Score > r.Results[i-1].Score {
			t.Errorf("results[%d] scores %v, above results[%d]'s %v", i, result.Score, i-1, r.Results[i-1].Score)
		}
		if r.Scores[result.Index] != result.Score || result.Document != "" {
			t.Errorf("results[%d] = %+v, Scores[%d] = %v", i, result, result.Index, r.Scores[result.Index])
		}
	}
	slices.Sort(indices)
	for i, index := range indices {
		if i != index {
			t.Fatalf("the results' indices are not a permutation: %v", indices)
		}
	}
	if slices.Min(r.Scores) == slices.Max(r.Scores) {
		t.Errorf("every pair scores %v", r.Scores[0])
	}
	// The raw call answers the same, in the same order; each relevance_score is its float32's shortest text.
	request, _ := json.Marshal(map[string]any{"query": rerankQuery, "documents": rerankDocuments, "top_n": 3,
		"return_documents": true})
	body, err := engine.RerankJSON(string(request))
	if err != nil {
		t.Fatal(err)
	}
	raw, err := DecodeRerank([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	if len(raw.Results) != 3 || raw.Scores != nil || raw.Model != "rerank-test" {
		t.Fatalf("top_n 3: %+v", raw)
	}
	for i, result := range raw.Results {
		want := r.Results[i]
		if result.Index != want.Index || result.Score != want.Score || result.Document != rerankDocuments[want.Index] {
			t.Errorf("raw results[%d] = %+v, want %+v with its document", i, result, want)
		}
	}
	// A document's score is the same alone as among others.
	for _, i := range []int{0, 4} {
		alone, err := engine.Rerank(rerankQuery, rerankDocuments[i:i+1], RerankOptions{})
		if err != nil || len(alone.Scores) != 1 || alone.Scores[0] != r.Scores[i] {
			t.Errorf("document %d alone: %+v (%v), among others %v", i, alone, err, r.Scores[i])
		}
	}
}

func TestRerankOptions(t *testing.T) {
	engine := rerankerEngine(t, Config{})
	full, err := engine.Rerank(rerankQuery, rerankDocuments, RerankOptions{})
	if err != nil {
		t.Fatal(err)
	}
	best, err := engine.Rerank(rerankQuery, rerankDocuments, RerankOptions{TopN: 2, ReturnDocuments: true,
		Priority: 5})
	if err != nil {
		t.Fatal(err)
	}
	if len(best.Results) != 2 || !slices.Equal(best.Scores, full.Scores) {
		t.Fatalf("top 2: %+v", best)
	}
	for i, result := range best.Results {
		if result.Index != full.Results[i].Index || result.Score != full.Results[i].Score ||
			result.Document != rerankDocuments[result.Index] {
			t.Errorf("top 2 results[%d] = %+v, want %+v with its document", i, result, full.Results[i])
		}
	}
	more, err := engine.Rerank(rerankQuery, rerankDocuments, RerankOptions{TopN: 100})
	if err != nil || len(more.Results) != len(rerankDocuments) {
		t.Errorf("top 100 of %d: %+v (%v)", len(rerankDocuments), more, err)
	}
}

func TestRerankRefusalsAreTyped(t *testing.T) {
	engine := rerankerEngine(t, Config{})
	check := func(what string, err error, field string) {
		t.Helper()
		var e *Error
		if !errors.As(err, &e) || e.Status != StatusInvalidRequest || e.Op != "engine_rerank" {
			t.Errorf("%.50s: err = %v, want an *Error of engine_rerank with StatusInvalidRequest", what, err)
		} else if !strings.Contains(e.Message, field) {
			t.Errorf("%.50s: message %q does not name %s", what, e.Message, field)
		}
	}
	for body, field := range map[string]string{
		`{"query": "q", "documents": ["a"], "top_n": 0}`:            "top_n",
		`{"documents": ["a"]}`:                                      "query",
		`{"query": "q", "documents": [1]}`:                          "documents",
		`{"query": "q", "documents": ["a"], "rank_fields": []}`:     "rank_fields",
		`{"query": "q", "documents": ["a"], "return_documents": 1}`: "return_documents",
		"{\"query\": \"q\"}\x00":                                    "NUL",
	} {
		_, err := engine.RerankJSON(body)
		check(body, err, field)
	}
	for _, c := range []struct {
		documents []string
		options   RerankOptions
		field     string
	}{
		{nil, RerankOptions{}, "documents"},
		{[]string{"a"}, RerankOptions{TopN: -1}, "top_n"},
		{make([]string, 2049), RerankOptions{}, "documents"},
		// The engine's sentence names documents[1]'s pair input[1].
		{[]string{"a", strings.Repeat("word ", 600)}, RerankOptions{}, "[1]"},
	} {
		_, err := engine.Rerank(rerankQuery, c.documents, c.options)
		check(fmt.Sprintf("%d documents, %+v", len(c.documents), c.options), err, c.field)
	}
	// A reranker gives vectors only when asked for a pooling of its encoder.
	if _, err := engine.EmbedTexts([]string{"a"}); !errors.Is(err, StatusInvalidRequest) ||
		!strings.Contains(err.Error(), "reranker") {
		t.Errorf("EmbedTexts on a reranker: %v", err)
	}
	engine.Close()
	if _, err := engine.Rerank("q", []string{"a"}, RerankOptions{}); !errors.Is(err, StatusInvalidHandle) {
		t.Errorf("Rerank on a closed engine: err = %v, want StatusInvalidHandle", err)
	}
}

func TestOtherModelsRefuseRerank(t *testing.T) {
	// An embedding model has no classification head to score pairs with.
	_, err := encoderEngine(t, Config{}).Rerank("q", []string{"a"}, RerankOptions{})
	var e *Error
	if !errors.As(err, &e) || e.Status != StatusInvalidRequest || e.Op != "engine_rerank" {
		t.Errorf("Rerank on an embedding model: err = %v", err)
	}
	_, err = shared.RerankJSON(`{"query": "q", "documents": ["a"]}`)
	if !errors.As(err, &e) || e.Status != StatusInvalidRequest || !strings.Contains(e.Message, "generates text") {
		t.Errorf("RerankJSON on a generating engine: err = %v", err)
	}
}

func TestRerankFromManyGoroutines(t *testing.T) {
	engine := rerankerEngine(t, Config{})
	want, err := engine.Rerank(rerankQuery, rerankDocuments, RerankOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 32)
	for g := 0; g < 32; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			i := g % len(rerankDocuments)
			r, err := engine.Rerank(rerankQuery, rerankDocuments[i:i+1], RerankOptions{})
			switch {
			case err != nil:
				errs <- err
			case r.Scores[0] != want.Scores[i]:
				errs <- fmt.Errorf("document %d: %v in goroutine %d, %v alone", i, r.Scores[0], g, want.Scores[i])
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestDecodeRerank(t *testing.T) {
	r, err := DecodeRerank([]byte(`{"model": "m", "object": "list", "usage": {"prompt_tokens": 7, "total_tokens": 7},
		"results": [{"index": 1, "relevance_score": 2.5, "document": {"text": "b"}}, {"index": 0, "relevance_score": -1}]}`))
	if err != nil || r.Model != "m" || r.PromptTokens != 7 || len(r.Results) != 2 ||
		r.Results[0] != (RankedDocument{1, 2.5, "b"}) || r.Results[1] != (RankedDocument{0, -1, ""}) ||
		!slices.Equal(r.Scores, []float32{-1, 2.5}) {
		t.Errorf("%+v, %v", r, err)
	}
	// A body trimmed by top_n has no score for every document.
	r, err = DecodeRerank([]byte(`{"results": [{"index": 3, "relevance_score": 0.125}]}`))
	if err != nil || r.Scores != nil || r.Results[0].Score != 0.125 {
		t.Errorf("%+v, %v", r, err)
	}
	// 0.1 as JSON is rounded once, to the float32 nearest it.
	r, _ = DecodeRerank([]byte(`{"results": [{"index": 0, "relevance_score": 0.1}]}`))
	if r.Scores[0] != float32(0.1) || math.Float32bits(r.Scores[0]) != 0x3dcccccd {
		t.Errorf("0.1 decoded as %v", r.Scores[0])
	}
	for _, bad := range []string{
		`{"results": [{"index": 0, "relevance_score": 1}, {"index": 0, "relevance_score": 1}]}`,
		`{"results": [{"index": -1, "relevance_score": 1}]}`,
		`{"results": [{"relevance_score": 1}]}`,
		`{"results": [{"index": 0}]}`,
		`[]`,
	} {
		if _, err := DecodeRerank([]byte(bad)); err == nil {
			t.Errorf("%s: no error", bad)
		}
	}
}
