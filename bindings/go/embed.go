package ember

// #include "handles.h"
import "C"

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"runtime"
	"strings"
	"unsafe"
)

// Embed computes embeddings (engine_embed): requestJSON is the body of OpenAI's POST /v1/embeddings (`input`: a
// string, an array of strings, an array of token ids or an array of such arrays, 1 to 2,048 inputs;
// `encoding_format` "float" or "base64"; `dimensions`; ember's `pooling`, `normalize` and `priority`;
// docs/embeddings.md), and the result is its response body, `{"object": "list", "data": [{"object":
// "embedding", "index", "embedding"}], "model", "usage"}`. The engine's model must be an encoder (bert,
// nomic-bert): NewEngine on such a file starts an engine that serves embeddings only. The call blocks until the
// vectors are computed; many goroutines may call at once, and their inputs share forward passes.
//
// Failures are *Error. StatusInvalidRequest: a refused request (the Message, a sentence, names the field at
// fault) or an engine whose model generates text; errors.Is(err, StatusOverloaded): max_waiting_requests
// requests wait already (retry later); StatusInvalidHandle once the engine is closed. Unlike Submit's, these
// messages are plain text, not OpenAI error bodies.
func (e *Engine) Embed(requestJSON string) (string, error) {
	return e.encoderCall("engine_embed", requestJSON, func(request *C.char, out **C.char) C.EmberStatus {
		return C.ember_go_embed(e.handle, request, out)
	})
}

// encoderCall runs one of the encoder's calls (engine_embed, engine_rerank): a request body in, the response body
// out, or an *Error whose Message is the engine's sentence.
func (e *Engine) encoderCall(op, requestJSON string, f func(request *C.char, out **C.char) C.EmberStatus) (string,
	error) {
	defer runtime.KeepAlive(e)
	if e.closed.Load() {
		return "", closedEngine(op)
	}
	// A C string ends at its first NUL byte, and JSON never holds a raw one (submit says more).
	if strings.IndexByte(requestJSON, 0) >= 0 {
		return "", &Error{Op: op, Status: StatusInvalidRequest,
			Message: op + ": the request body contains a NUL byte, which JSON does not allow unescaped"}
	}
	cRequest := C.CString(requestJSON)
	defer C.free(unsafe.Pointer(cRequest))
	var out *C.char
	if _, err := call(op, func() C.EmberStatus { return f(cRequest, &out) }); err != nil {
		return "", err
	}
	defer C.engine_string_free(out)
	return C.GoString(out), nil
}

// EmbedTexts returns one vector per text, in order, as the engine computes them by default: the model's pooling,
// its full width, unit length. It is Embed with `{"input": texts}` (1 to 2,048 texts), the vectors read back
// exactly (the request asks for base64, each vector's little-endian float32 bytes); failures are Embed's.
func (e *Engine) EmbedTexts(texts []string) ([][]float32, error) {
	request, err := json.Marshal(map[string]any{"input": texts, "encoding_format": "base64"})
	if err != nil {
		return nil, err
	}
	body, err := e.Embed(string(request))
	if err != nil {
		return nil, err
	}
	vectors, err := DecodeEmbeddings([]byte(body))
	if err != nil {
		return nil, err
	}
	if len(vectors) != len(texts) {
		return nil, fmt.Errorf("ember: engine_embed answered %d vectors for %d texts", len(vectors), len(texts))
	}
	return vectors, nil
}

// DecodeEmbeddings reads the vectors of an embeddings response body (Embed's), in index order, whether they are
// JSON numbers (encoding_format "float") or base64 strings of little-endian float32 bytes ("base64").
func DecodeEmbeddings(responseJSON []byte) ([][]float32, error) {
	var response struct {
		Data []struct {
			Index     int             `json:"index"`
			Embedding json.RawMessage `json:"embedding"`
		} `json:"data"`
	}
	if err := json.Unmarshal(responseJSON, &response); err != nil {
		return nil, fmt.Errorf("ember: an embeddings response body: %w", err)
	}
	vectors := make([][]float32, len(response.Data))
	for _, datum := range response.Data {
		if datum.Index < 0 || datum.Index >= len(vectors) || vectors[datum.Index] != nil {
			return nil, fmt.Errorf("ember: an embeddings response body: index %d out of place", datum.Index)
		}
		vector, err := decodeVector(datum.Embedding)
		if err != nil {
			return nil, fmt.Errorf("ember: an embeddings response body: data[%d]: %w", datum.Index, err)
		}
		vectors[datum.Index] = vector
	}
	return vectors, nil
}

// decodeVector reads one `embedding`: an array of numbers, or a base64 string of little-endian float32 bytes.
func decodeVector(raw json.RawMessage) ([]float32, error) {
	var encoded string
	if json.Unmarshal(raw, &encoded) != nil {
		vector := []float32{}
		err := json.Unmarshal(raw, &vector)
		return vector, err
	}
	bytes, err := base64.StdEncoding.DecodeString(encoded)
	if err != nil {
		return nil, err
	}
	if len(bytes)%4 != 0 {
		return nil, fmt.Errorf("%d bytes of base64 are not float32 values", len(bytes))
	}
	vector := make([]float32, len(bytes)/4)
	for i := range vector {
		vector[i] = math.Float32frombits(binary.LittleEndian.Uint32(bytes[4*i:]))
	}
	return vector, nil
}
