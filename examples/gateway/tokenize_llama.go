package main

// POST /tokenize in llama-server's shape: `{"content", "add_special", "parse_special", "with_pieces"}` answered
// with `{"tokens": [ids]}`, or with `with_pieces` `{"tokens": [{"id", "piece"}]}`, a piece being its token's
// text, or its bytes when they are not valid UTF-8 (a byte-level token can be part of a character).

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"unicode/utf8"

	ember "ember.invalid/ember/bindings/go"
)

// llamaTokenizeFields are the fields of llama-server's /tokenize body.
var llamaTokenizeFields = map[string]bool{"content": true, "add_special": true, "parse_special": true,
	"with_pieces": true}

// llamaTokenize answers a /tokenize body with `content`: a text, or ids and texts mixed (each text tokenized in
// place, BOS only before a first one), as llama-server's tokenize_mixed reads it. add_special (BOS first when
// the model asks for one) is off by default and parse_special (control tokens' texts become those tokens) on,
// as in llama-server.
func (s *server) llamaTokenize(w http.ResponseWriter, r *http.Request, body []byte) int {
	if bad := checkFields(body, llamaTokenizeFields); bad != nil {
		return bad.write(w)
	}
	var req struct {
		Content      json.RawMessage `json:"content"`
		AddSpecial   *bool           `json:"add_special"`
		ParseSpecial *bool           `json:"parse_special"`
		WithPieces   bool            `json:"with_pieces"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		return invalidRequest("the request body does not fit llama-server's /tokenize: "+err.Error(), "").write(w)
	}
	parts, bad := contentParts(req.Content)
	if bad != nil {
		return bad.write(w)
	}
	addSpecial := req.AddSpecial != nil && *req.AddSpecial
	parseSpecial := req.ParseSpecial == nil || *req.ParseSpecial
	// As vLLM's shape: the body's bytes count as engine work until the answer is written.
	admitted, tooMuch, bad := s.admit(r, int64(len(body)))
	switch {
	case tooMuch:
		return s.bodyTooLargeForWork().write(w)
	case bad != nil:
		return bad.write(w)
	}
	defer admitted.done()
	if clientGone(r.Context()) {
		return statusClientClosed
	}
	var tokens []uint32
	for i, part := range parts {
		if part.text == nil {
			tokens = append(tokens, part.id)
			continue
		}
		ids, err := s.engine.Tokenize(*part.text, addSpecial && i == 0, parseSpecial)
		if err != nil {
			return engineError(err).write(w)
		}
		tokens = append(tokens, ids...)
	}
	if !req.WithPieces {
		return writeLlamaTokens(w, tokens, nil)
	}
	pieces := make([][]byte, len(tokens))
	for i, id := range tokens {
		piece, err := s.engine.TokenBytes(id)
		var emberErr *ember.Error
		if errors.As(err, &emberErr) && emberErr.Status == ember.StatusInvalidArgument {
			return invalidRequest(emberErr.Message, "content").write(w)
		}
		if err != nil {
			return engineError(err).write(w)
		}
		pieces[i] = piece
	}
	return writeLlamaTokens(w, tokens, pieces)
}

// contentPart is a text of `content`, or one of its ids.
type contentPart struct {
	text *string
	id   uint32
}

// contentParts reads `content`: a string, or an array of strings and ids.
func contentParts(raw json.RawMessage) ([]contentPart, *apiError) {
	var text string
	if json.Unmarshal(raw, &text) == nil {
		return []contentPart{{text: &text}}, nil
	}
	var list []json.RawMessage
	if json.Unmarshal(raw, &list) != nil {
		e := invalidRequest("'content' must be a string, or an array of strings and token ids", "content")
		return nil, &e
	}
	parts := make([]contentPart, len(list))
	for i, item := range list {
		var s string
		if json.Unmarshal(item, &s) == nil {
			parts[i].text = &s
			continue
		}
		id, err := strconv.ParseUint(string(item), 10, 32)
		if err != nil {
			param := fmt.Sprintf("content[%d]", i)
			e := invalidRequest(param+" is neither a string nor a token id", param)
			return nil, &e
		}
		parts[i].id = uint32(id)
	}
	return parts, nil
}

// writeLlamaTokens writes `{"tokens": [...]}`: the ids, or with pieces `{"id", "piece"}` objects, a buffer at a
// time as writeTokens does.
func writeLlamaTokens(w http.ResponseWriter, tokens []uint32, pieces [][]byte) int {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	buffer := make([]byte, 0, answerBuffer)
	buffer = append(buffer, `{"tokens":[`...)
	for i, id := range tokens {
		if i > 0 {
			buffer = append(buffer, ',')
		}
		if pieces == nil {
			buffer = strconv.AppendUint(buffer, uint64(id), 10)
		} else {
			buffer = appendPiece(buffer, id, pieces[i])
		}
		if len(buffer) > answerBuffer-512 {
			if _, err := w.Write(buffer); err != nil {
				return statusClientClosed
			}
			buffer = buffer[:0]
		}
	}
	if _, err := w.Write(append(buffer, "]}\n"...)); err != nil {
		return statusClientClosed
	}
	return http.StatusOK
}

// appendPiece appends `{"id": id, "piece": piece}`: the piece as a string when it is valid UTF-8, else as its
// bytes (llama-server's shape; encoding/json would write bytes as base64).
func appendPiece(buffer []byte, id uint32, piece []byte) []byte {
	buffer = append(buffer, `{"id":`...)
	buffer = strconv.AppendUint(buffer, uint64(id), 10)
	buffer = append(buffer, `,"piece":`...)
	if utf8.Valid(piece) {
		quoted, _ := json.Marshal(string(piece)) // cannot fail: a valid string
		buffer = append(buffer, quoted...)
	} else {
		buffer = append(buffer, '[')
		for j, b := range piece {
			if j > 0 {
				buffer = append(buffer, ',')
			}
			buffer = strconv.AppendUint(buffer, uint64(b), 10)
		}
		buffer = append(buffer, ']')
	}
	return append(buffer, '}')
}
