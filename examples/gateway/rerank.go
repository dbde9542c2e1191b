package main

// POST /v1/rerank, served by an engine whose model is a reranker (a bert file with a classification head:
// docs/embeddings.md, "Reranking"), in the shape llama-server, vLLM, Jina and Cohere share. The body goes to the
// engine as it is (engine_rerank checks every field) and the answer is the engine's response body, as
// /v1/embeddings does; llama-server's other paths for it (/rerank, /v1/reranking, /reranking) answer the same.
// On an engine whose model is not a reranker it is a 400 with the engine's refusal. docs/go.md ("Routes")
// documents it.

import (
	"net/http"
	"strings"
)

// rerankPaths are the paths of the route: vLLM's and Jina's /v1/rerank, and the three llama-server also takes.
var rerankPaths = []string{"/v1/rerank", "/rerank", "/v1/reranking", "/reranking"}

// rerankFields are the fields of a rerank request (docs/embeddings.md): the engine's refusals start with the name
// of the one at fault, which becomes the error's `param`.
var rerankFields = map[string]bool{
	"query": true, "documents": true, "top_n": true, "return_documents": true, "model": true, "user": true,
	"priority": true, "deadline_ms": true, "include_metrics": true,
}

// unknownRerankFieldSuffix ends the engine's refusal of a field that rerank requests do not have.
const unknownRerankFieldSuffix = ": not a field of a rerank request"

// rerankRoute answers POST /v1/rerank with the engine's response body.
func (s *server) rerankRoute(w http.ResponseWriter, r *http.Request) int {
	return s.encoderRoute(w, r, s.rerank)
}

// rerank runs a rerank request body on the engine (encoderWork).
func (s *server) rerank(r *http.Request, request []byte, hold *byteHold) (response string, bad *apiError, gone bool) {
	return s.encoderWork(r, request, hold, s.engine.RerankJSON, func(err error) apiError {
		return encoderError(err, rerankParam)
	})
}

// rerankParam is the rerank request field an engine refusal names first ("top_n: ...", "foo: not a field of a
// rerank request"), "" when it names none. The engine scores document i as its input i, and its sentences name
// that input so ("input[3] has 600 tokens, ..."): the field is then documents[3].
func rerankParam(message string) string {
	if rest, ok := strings.CutPrefix(message, "input["); ok {
		message = "documents[" + rest
	}
	return fieldParam(message, rerankFields, unknownRerankFieldSuffix)
}
