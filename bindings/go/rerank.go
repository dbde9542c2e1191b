package ember

// #include "handles.h"
import "C"

import (
	"encoding/json"
	"fmt"
)

// RerankJSON reranks documents for a query (engine_rerank): requestJSON is the body of POST /v1/rerank in the shape
// llama-server, vLLM, Jina and Cohere share (`query`; `documents`, strings or {"text"} objects, 1 to 2,048;
// `top_n`; `return_documents`; ember's `priority`; docs/embeddings.md, "Reranking"), and the result is its
// response body, `{"model", "object": "list", "usage", "results": [{"index", "relevance_score", "document"}]}`,
// most relevant first. The engine's model must be a reranker: a bert file with a classification head. The call
// blocks until every pair is scored (it takes no context: engine_rerank cannot be interrupted); many goroutines
// may call at once, and their pairs share forward passes.
//
// Failures are Embed's, with Op "engine_rerank": StatusInvalidRequest for a refused request (the Message, a
// sentence, names the field at fault) or a model that is not a reranker; StatusOverloaded; StatusInvalidHandle.
func (e *Engine) RerankJSON(requestJSON string) (string, error) {
	return e.encoderCall("engine_rerank", requestJSON, func(request *C.char, out **C.char) C.EmberStatus {
		return C.ember_go_rerank(e.handle, request, out)
	})
}

// RerankOptions are Rerank's optional fields; the zero value asks for every document, without their texts.
type RerankOptions struct {
	// TopN keeps the N most relevant in Results (0: all of them); Scores keeps every document's either way. A
	// negative N is sent to the engine, which refuses it.
	TopN int
	// ReturnDocuments puts each document's text in its result.
	ReturnDocuments bool
	// Priority: a lower value first, as chat requests' (vLLM's order).
	Priority int
}

// RankedDocument is one document's place in a Reranking.
type RankedDocument struct {
	// Index is the document's position in the documents given.
	Index int
	// Score is the classification head's raw score (a logit: higher is more relevant), the engine's float32.
	Score float32
	// Document is the document's text when ReturnDocuments was asked, else "".
	Document string
}

// Reranking is a rerank response body, decoded.
type Reranking struct {
	// Model is the model's name (Config.ServedModelName, else the file's name without .gguf).
	Model string
	// Results are the documents most relevant first (equal scores keep the documents' order), the TopN best.
	Results []RankedDocument
	// Scores[i] is documents[i]'s score: every document's, in the documents' order. nil when the body ranks only
	// some documents (one that asked for top_n, through RerankJSON).
	Scores []float32
	// PromptTokens and TotalTokens are the body's usage: every [CLS] query [SEP] document [SEP] pair's tokens.
	PromptTokens, TotalTokens int
}

// Rerank scores each document's relevance to query and returns them most relevant first, with every document's
// score in the documents' order. It is RerankJSON with `{"query", "documents", "return_documents", "priority"}`;
// a positive TopN trims Results here rather than in the engine, which scores every document whatever top_n says,
// so that Scores has them all. Failures are RerankJSON's.
func (e *Engine) Rerank(query string, documents []string, options RerankOptions) (*Reranking, error) {
	request := map[string]any{"query": query, "documents": documents, "return_documents": options.ReturnDocuments}
	if options.TopN < 0 {
		request["top_n"] = options.TopN // for the engine to refuse by name
	}
	if options.Priority != 0 {
		request["priority"] = options.Priority
	}
	requestJSON, err := json.Marshal(request)
	if err != nil {
		return nil, err
	}
	body, err := e.RerankJSON(string(requestJSON))
	if err != nil {
		return nil, err
	}
	reranking, err := DecodeRerank([]byte(body))
	if err != nil {
		return nil, err
	}
	if len(reranking.Scores) != len(documents) {
		return nil, fmt.Errorf("ember: engine_rerank answered %d scores for %d documents", len(reranking.Scores),
			len(documents))
	}
	if options.TopN > 0 && options.TopN < len(reranking.Results) {
		reranking.Results = reranking.Results[:options.TopN]
	}
	return reranking, nil
}

// DecodeRerank reads a rerank response body (RerankJSON's): its results in the body's order (most relevant
// first), and, when they rank every document, each document's score in the documents' order.
func DecodeRerank(responseJSON []byte) (*Reranking, error) {
	var response struct {
		Model   string `json:"model"`
		Results []struct {
			Index          *int     `json:"index"`
			RelevanceScore *float32 `json:"relevance_score"`
			Document       *struct {
				Text string `json:"text"`
			} `json:"document"`
		} `json:"results"`
		Usage struct {
			PromptTokens int `json:"prompt_tokens"`
			TotalTokens  int `json:"total_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(responseJSON, &response); err != nil {
		return nil, fmt.Errorf("ember: a rerank response body: %w", err)
	}
	r := &Reranking{Model: response.Model, Results: make([]RankedDocument, len(response.Results)),
		PromptTokens: response.Usage.PromptTokens, TotalTokens: response.Usage.TotalTokens}
	seen := make(map[int]bool, len(response.Results))
	complete := true
	for i, result := range response.Results {
		if result.Index == nil || result.RelevanceScore == nil {
			return nil, fmt.Errorf("ember: a rerank response body: results[%d] lacks its index or score", i)
		}
		index := *result.Index
		if index < 0 || seen[index] {
			return nil, fmt.Errorf("ember: a rerank response body: index %d out of place", index)
		}
		seen[index] = true
		complete = complete && index < len(response.Results)
		// encoding/json parses a number into a float32 by rounding its text once: each relevance_score is its
		// float32's shortest text, so this is the engine's float32.
		r.Results[i] = RankedDocument{Index: index, Score: *result.RelevanceScore}
		if result.Document != nil {
			r.Results[i].Document = result.Document.Text
		}
	}
	if complete {
		r.Scores = make([]float32, len(r.Results))
		for _, result := range r.Results {
			r.Scores[result.Index] = result.Score
		}
	}
	return r, nil
}
