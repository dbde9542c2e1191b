package main

// POST /tokenize and POST /detokenize, in vLLM's shapes and llama-server's, so that a client can count a
// prompt's tokens, cut it to the context or bill before it submits, with the very tokenization the engine
// applies (engine_tokenize, engine_apply_chat_template, engine_detokenize, engine_token_bytes). A /tokenize
// body with `content` is llama-server's, one with `prompt` or `messages` vLLM's; /detokenize answers both
// servers' field. docs/go.md ("Routes") documents both.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	ember "ember.invalid/ember/bindings/go"
)

// tokenizeFields are the fields /tokenize reads; any other is refused by name.
var tokenizeFields = map[string]bool{
	"model": true, "prompt": true, "messages": true, "tools": true, "add_special_tokens": true,
	"add_generation_prompt": true,
}

// detokenizeFields are the fields /detokenize reads.
var detokenizeFields = map[string]bool{"model": true, "tokens": true, "skip_special_tokens": true}

// tokenizeRequest is a /tokenize body: a completion's `prompt` or a chat's `messages` (with its `tools`).
type tokenizeRequest struct {
	Prompt              *string         `json:"prompt"`
	Messages            json.RawMessage `json:"messages"`
	Tools               json.RawMessage `json:"tools"`
	AddSpecialTokens    *bool           `json:"add_special_tokens"`
	AddGenerationPrompt *bool           `json:"add_generation_prompt"`
}

// tokenize answers `{"count", "max_model_len", "tokens"}`: a prompt's tokens as a completion request would have
// them (control tokens' texts parsed, BOS first unless add_special_tokens is false), or a chat's as a chat
// completion would (the chat template, ending with the assistant's turn). A body with `content` is
// llama-server's, answered by llamaTokenize.
func (s *server) tokenize(w http.ResponseWriter, r *http.Request) int {
	var hold byteHold
	defer hold.release()
	body, bad := s.readJSONObject(w, r, &hold)
	if bad != nil {
		return bad.write(w)
	}
	var shape struct{ Content present }
	_ = json.Unmarshal(body, &shape) // readJSONObject has parsed it
	if shape.Content {
		return s.llamaTokenize(w, r, body)
	}
	if bad := checkFields(body, tokenizeFields); bad != nil {
		return bad.write(w)
	}
	var req tokenizeRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return invalidRequest("the request body does not fit /tokenize: "+err.Error(), "").write(w)
	}
	// Checked before the engine work, which takes a slot (limits.go).
	switch {
	case (req.Prompt == nil) == (req.Messages == nil):
		return invalidRequest("send either 'prompt' (a text) or 'messages' (a chat)", "prompt").write(w)
	case req.Prompt != nil && (req.Tools != nil || req.AddGenerationPrompt != nil):
		field := "tools"
		if req.Tools == nil {
			field = "add_generation_prompt"
		}
		return invalidRequest("'"+field+"' goes with 'messages', not 'prompt'", field).write(w)
	case req.Messages != nil && req.AddSpecialTokens != nil:
		// A chat's special tokens are the chat template's to write: the tokens are exactly a chat completion's.
		return invalidRequest("with 'messages' the tokens are those of a chat completion's prompt, whose "+
			"special tokens the chat template writes: leave add_special_tokens out", "add_special_tokens").write(w)
	case req.Messages != nil && req.AddGenerationPrompt != nil && !*req.AddGenerationPrompt:
		return invalidRequest("the chat template is always rendered up to the assistant's turn, as a chat "+
			"completion's prompt is: add_generation_prompt false is not supported", "add_generation_prompt").write(w)
	}
	// The body's bytes count as engine work until the answer is written: the tokens and the answer are a
	// multiple of their size.
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
	var err error
	if req.Prompt != nil {
		addSpecial := req.AddSpecialTokens == nil || *req.AddSpecialTokens
		tokens, err = s.engine.Tokenize(*req.Prompt, addSpecial, true)
	} else {
		chat := map[string]json.RawMessage{"messages": req.Messages}
		if req.Tools != nil {
			chat["tools"] = req.Tools
		}
		chatBody, _ := json.Marshal(chat) // cannot fail: raw JSON already parsed
		var prompt ember.ChatPrompt
		prompt, err = s.engine.ApplyChatTemplate(chatBody)
		tokens = prompt.TokenIDs
	}
	if err != nil {
		return engineError(err).write(w)
	}
	maxModelLen, err := s.maxModelLen()
	if err != nil {
		return engineError(err).write(w)
	}
	return writeTokens(w, tokens, maxModelLen)
}

// answerBuffer is how much of a /tokenize or /detokenize answer is encoded before it is written.
const answerBuffer = 32 << 10

// writeTokens writes /tokenize's answer, `{"count", "max_model_len", "tokens"}`, encoding the ids a buffer at a
// time: encoding/json would first build the whole answer in memory, up to six bytes per id, in a buffer that
// doubles as it grows, and a body of a few megabytes can hold millions of ids.
func writeTokens(w http.ResponseWriter, tokens []uint32, maxModelLen int) int {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	buffer := make([]byte, 0, answerBuffer)
	buffer = fmt.Appendf(buffer, `{"count":%d,"max_model_len":%d,"tokens":[`, len(tokens), maxModelLen)
	for i, id := range tokens {
		if i > 0 {
			buffer = append(buffer, ',')
		}
		buffer = strconv.AppendUint(buffer, uint64(id), 10)
		if len(buffer) > answerBuffer-16 {
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

// writeText writes /detokenize's answer, `{"prompt": text, "content": text}`: vLLM's clients read `prompt`,
// llama-server's `content`, and each ignores the other's (both send the same `{"tokens": [...]}`, so the
// request cannot tell them apart). The text is escaped a piece at a time rather than all of it in one more
// copy: a token's text can be 80 bytes, so a text can be ten times its request's body.
func writeText(w http.ResponseWriter, text string) int {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	for _, field := range []string{`{"prompt":"`, `","content":"`} {
		if _, err := io.WriteString(w, field); err != nil {
			return statusClientClosed
		}
		for rest := text; len(rest) > 0; {
			n := min(len(rest), answerBuffer)
			for n < len(rest) && !utf8.RuneStart(rest[n]) {
				n-- // cut between two characters, never inside one
			}
			quoted, _ := json.Marshal(rest[:n]) // cannot fail: a string; escapes as encoding/json always does
			if _, err := w.Write(quoted[1 : len(quoted)-1]); err != nil {
				return statusClientClosed
			}
			rest = rest[n:]
		}
	}
	if _, err := io.WriteString(w, "\"}\n"); err != nil {
		return statusClientClosed
	}
	return http.StatusOK
}

// detokenize answers `{"prompt": text, "content": text}` for `{"tokens": [...]}`: control tokens' texts
// included unless skip_special_tokens is true, so that detokenizing /tokenize's answer gives the text back.
func (s *server) detokenize(w http.ResponseWriter, r *http.Request) int {
	var hold byteHold
	defer hold.release()
	body, bad := s.readFields(w, r, detokenizeFields, &hold)
	if bad != nil {
		return bad.write(w)
	}
	var req struct {
		Tokens            *tokenIDs `json:"tokens"`
		SkipSpecialTokens bool      `json:"skip_special_tokens"`
	}
	err := json.Unmarshal(body, &req)
	var notID *notATokenID
	if errors.As(err, &notID) && notID.index < 0 {
		return invalidRequest("'tokens' must be an array of token ids, not "+notID.value, "tokens").write(w)
	}
	if errors.As(err, &notID) {
		param := fmt.Sprintf("tokens[%d]", notID.index)
		return invalidRequest(fmt.Sprintf("%s is %s, not a token id", param, notID.value), param).write(w)
	}
	if err != nil {
		return invalidRequest("the request body does not fit /detokenize: "+err.Error(), "").write(w)
	}
	if req.Tokens == nil {
		return invalidRequest("missing required parameter: 'tokens'", "tokens").write(w)
	}
	// The answer can be far larger than the body (a token's text can be 80 bytes, its id 6 bytes of JSON), and
	// the engine builds it whole: it counts as engine work with the body, at the largest it can be.
	longest, err := s.longestToken()
	if err != nil {
		return engineError(err).write(w)
	}
	ids := *req.Tokens
	answer := int64(len(ids)) * int64(longest)
	admitted, tooMuch, bad := s.admit(r, int64(len(body))+answer)
	switch {
	case tooMuch:
		return invalidRequest(fmt.Sprintf("the text of %d token ids can take up to %d bytes (%d for the longest "+
			"token), more than the %d bytes that the engine works on at once (--max-engine-work-bytes): send "+
			"fewer ids at once", len(ids), answer, longest, s.workBytes.limit), "tokens").write(w)
	case bad != nil:
		return bad.write(w)
	}
	defer admitted.done()
	if clientGone(r.Context()) {
		return statusClientClosed
	}
	text, err := s.engine.Detokenize(ids, !req.SkipSpecialTokens)
	var emberErr *ember.Error
	if errors.As(err, &emberErr) && emberErr.Status == ember.StatusInvalidArgument {
		// An id outside the vocabulary, which the message names.
		return invalidRequest(emberErr.Message, "tokens").write(w)
	}
	if err != nil {
		return engineError(err).write(w)
	}
	return writeText(w, text)
}

// tokenIDs is /detokenize's `tokens`, read straight into ids: decoded as []json.Number, each id would keep a
// string of its own, six times the body's size in all (a body of 8 MiB held 125 MB), and json.Decoder's tokens
// take a microsecond each.
type tokenIDs []uint32

// notATokenID is an element of `tokens` that is not an id: what it is, and where (index -1: `tokens` itself is
// not an array).
type notATokenID struct {
	index int
	value string
}

func (e *notATokenID) Error() string { return fmt.Sprintf("tokens[%d] is %s", e.index, e.value) }

// UnmarshalJSON reads an array of ids. encoding/json has checked that data is one valid JSON value before it
// calls this, so a scan that tells elements apart by their first byte is enough.
func (t *tokenIDs) UnmarshalJSON(data []byte) error {
	const space = " \t\r\n"
	data = bytes.TrimLeft(data, space)
	if data[0] != '[' {
		kind := jsonKind(data[0])
		if kind == "" {
			kind = "a number"
		}
		return &notATokenID{index: -1, value: kind}
	}
	// Room for every id at once (one per comma, and one more), rather than growing by copies.
	ids := make([]uint32, 0, bytes.Count(data, []byte{','})+1)
	rest := bytes.TrimLeft(data[1:], space)
	for rest[0] != ']' {
		if kind := jsonKind(rest[0]); kind != "" {
			return &notATokenID{index: len(ids), value: kind}
		}
		// A number ends at a comma, a space or the array's end.
		end := bytes.IndexAny(rest, ","+space+"]")
		id, err := strconv.ParseUint(string(rest[:end]), 10, 32)
		if err != nil {
			return &notATokenID{index: len(ids), value: string(rest[:end])}
		}
		ids = append(ids, uint32(id))
		rest = bytes.TrimLeft(rest[end:], space)
		if rest[0] == ',' {
			rest = bytes.TrimLeft(rest[1:], space)
		}
	}
	*t = ids
	return nil
}

// jsonKind names the kind of the JSON value that starts with first ("a string", "an array", ...); "" for a
// number.
func jsonKind(first byte) string {
	switch first {
	case '"':
		return "a string"
	case '[':
		return "an array"
	case '{':
		return "an object"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	}
	return ""
}

// readFields reads a JSON object and refuses, by name, a field that the route does not read. The caller
// releases the hold (readJSONObject).
func (s *server) readFields(w http.ResponseWriter, r *http.Request, known map[string]bool, hold *byteHold) ([]byte,
	*apiError) {
	body, bad := s.readJSONObject(w, r, hold)
	if bad != nil {
		return nil, bad
	}
	if bad := checkFields(body, known); bad != nil {
		return nil, bad
	}
	return body, nil
}

// checkFields refuses, by name, a field of body (a JSON object) that the route does not read.
func checkFields(body []byte, known map[string]bool) *apiError {
	var fields map[string]json.RawMessage
	_ = json.Unmarshal(body, &fields) // readJSONObject has parsed it
	var unknown []string
	for name := range fields {
		if !known[name] {
			unknown = append(unknown, name)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		var names []string
		for name := range known {
			names = append(names, name)
		}
		sort.Strings(names)
		e := invalidRequest(fmt.Sprintf("unsupported parameter: '%s' (this route reads %s)", unknown[0],
			strings.Join(names, ", ")), unknown[0])
		return &e
	}
	return nil
}

// modelInfo is what the gateway reads of engine_model_info_json, once.
type modelInfo struct {
	MaxModelLen int `json:"max_model_len"`
	VocabSize   int `json:"vocab_size"`
	// What GET /props shows (llamaserver.go); absent from an embedding engine's description.
	MaxNumSeqs         int    `json:"max_num_seqs"`
	ChatTemplateSource string `json:"chat_template_source"`
	File               struct {
		Path string `json:"path"`
	} `json:"file"`
	SpecialTokens map[string]struct {
		Text string `json:"text"`
	} `json:"special_tokens"`
}

// maxModelLen is the longest request the engine takes (prompt and output tokens together).
func (s *server) maxModelLen() (int, error) {
	info, err := s.info()
	return info.MaxModelLen, err
}

// info reads the model's description on first use (it hashes the model file: a fraction of a second).
func (s *server) info() (modelInfo, error) {
	s.infoOnce.Do(func() {
		s.infoRaw, s.infoErr = s.engine.ModelInfo()
		if s.infoErr == nil {
			s.infoErr = json.Unmarshal(s.infoRaw, &s.infoValue)
		}
	})
	return s.infoValue, s.infoErr
}

// longestToken is the most bytes one token's text has (control tokens' included), found on first use by
// detokenizing each token of the vocabulary alone (27 ms for SmolLM2's 49,152).
func (s *server) longestToken() (int, error) {
	s.longestOnce.Do(func() {
		var info modelInfo
		if info, s.longestErr = s.info(); s.longestErr != nil {
			return
		}
		for id := 0; id < info.VocabSize; id++ {
			text, err := s.engine.Detokenize([]uint32{uint32(id)}, true)
			if err != nil {
				s.longestErr = err
				return
			}
			s.longestValue = max(s.longestValue, len(text))
		}
	})
	return s.longestValue, s.longestErr
}

// infoCache holds the model's description for info (and as the engine wrote it, for the Ollama routes: ollama.go),
// and its longest token for longestToken.
type infoCache struct {
	infoOnce  sync.Once
	infoValue modelInfo
	infoRaw   json.RawMessage
	infoErr   error

	longestOnce  sync.Once
	longestValue int
	longestErr   error
}
