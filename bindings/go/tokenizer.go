package ember

// #include "handles.h"
import "C"

import (
	"bytes"
	"encoding/json"
	"runtime"
	"unsafe"
)

// closedEngine is the error of a call on a closed engine.
func closedEngine(op string) error {
	return &Error{Op: op, Status: StatusInvalidHandle, Message: "the engine is closed"}
}

// Tokenize returns the token ids the engine computes for text (engine_tokenize). parseSpecial: the texts of
// control tokens (`<|im_start|>`) become those tokens, as the engine reads every prompt; otherwise they are
// plain text (a user's text that must not inject them). addSpecial: BOS first when the model asks for one, as
// the engine adds it to a prompt.
func (e *Engine) Tokenize(text string, addSpecial, parseSpecial bool) ([]uint32, error) {
	defer runtime.KeepAlive(e)
	const op = "engine_tokenize"
	if e.closed.Load() {
		return nil, closedEngine(op)
	}
	// The text's bytes are read during the call only, and hold no Go pointer.
	data := (*C.char)(unsafe.Pointer(unsafe.StringData(text)))
	var ids []uint32
	for {
		var count C.size_t
		var buffer *C.uint32_t
		if len(ids) > 0 {
			buffer = (*C.uint32_t)(&ids[0])
		}
		status, err := call(op, func() C.EmberStatus {
			return C.ember_go_tokenize(e.handle, data, C.size_t(len(text)), C.bool(addSpecial), C.bool(parseSpecial),
				buffer, C.size_t(len(ids)), &count)
		}, StatusBufferTooSmall)
		if err != nil {
			return nil, err
		}
		if status == StatusOK {
			return ids[:count], nil
		}
		ids = make([]uint32, count)
	}
}

// Detokenize returns the text of ids (engine_detokenize): invalid UTF-8 replaced by U+FFFD, control tokens'
// text written only when includeSpecial. An id outside the vocabulary is a StatusInvalidArgument error.
func (e *Engine) Detokenize(ids []uint32, includeSpecial bool) (string, error) {
	defer runtime.KeepAlive(e)
	const op = "engine_detokenize"
	if e.closed.Load() {
		return "", closedEngine(op)
	}
	var data *C.uint32_t
	if len(ids) > 0 {
		data = (*C.uint32_t)(&ids[0])
	}
	var out *C.char
	if _, err := call(op, func() C.EmberStatus {
		return C.ember_go_detokenize(e.handle, data, C.size_t(len(ids)), C.bool(includeSpecial), &out)
	}); err != nil {
		return "", err
	}
	return string(takeString(out)), nil
}

// TokenBytes returns the bytes of token id's text (engine_token_bytes) exactly as the tokenizer has them: a
// byte-level token can be part of a UTF-8 character, which Detokenize would replace with U+FFFD. A control
// token gives its text. An id outside the vocabulary is a StatusInvalidArgument error.
func (e *Engine) TokenBytes(id uint32) ([]byte, error) {
	defer runtime.KeepAlive(e)
	const op = "engine_token_bytes"
	if e.closed.Load() {
		return nil, closedEngine(op)
	}
	// Most tokens are a few bytes: one call, into a buffer the size of a long one.
	bytes := make([]byte, 32)
	for {
		var count C.size_t
		status, err := call(op, func() C.EmberStatus {
			return C.ember_go_token_bytes(e.handle, C.uint32_t(id), (*C.uint8_t)(&bytes[0]), C.size_t(len(bytes)),
				&count)
		}, StatusBufferTooSmall)
		if err != nil {
			return nil, err
		}
		if status == StatusOK {
			return bytes[:count], nil
		}
		bytes = make([]byte, count)
	}
}

// ChatPrompt is the prompt of a chat request as the engine computes it.
type ChatPrompt struct {
	Prompt   string   `json:"prompt"`
	TokenIDs []uint32 `json:"prompt_token_ids"`
}

// ApplyChatTemplate renders a Chat Completions request body's messages (and tools) with the model's chat
// template and tokenizes the result as Submit would (engine_apply_chat_template). A refused body is a
// StatusInvalidRequest error whose Message is the OpenAI error body.
func (e *Engine) ApplyChatTemplate(body []byte) (ChatPrompt, error) {
	defer runtime.KeepAlive(e)
	const op = "engine_apply_chat_template"
	if e.closed.Load() {
		return ChatPrompt{}, closedEngine(op)
	}
	cBody := C.CString(string(body))
	defer C.free(unsafe.Pointer(cBody))
	var out *C.char
	if _, err := call(op, func() C.EmberStatus { return C.ember_go_apply_chat_template(e.handle, cBody, &out) }); err != nil {
		return ChatPrompt{}, err
	}
	var prompt ChatPrompt
	err := json.Unmarshal(takeString(out), &prompt)
	return prompt, err
}

// CountPromptTokens is the number of prompt tokens a request body of the given API would have, without submitting
// it (engine_count_prompt_tokens): exactly the prompt tokens its answer would bill, after the API's translation,
// the chat template and the tools' description. Anthropic's body may leave out max_tokens (its count_tokens
// body has none). A refused body is a StatusInvalidRequest error whose Message is the OpenAI error body naming
// the field as the API names it; an unknown api is StatusInvalidArgument.
func (e *Engine) CountPromptTokens(api API, requestJSON []byte) (int, error) {
	defer runtime.KeepAlive(e)
	const op = "engine_count_prompt_tokens"
	if e.closed.Load() {
		return 0, closedEngine(op)
	}
	// As submitAPI: a C string would end at a NUL byte, which JSON never holds unescaped.
	if bytes.IndexByte(requestJSON, 0) >= 0 {
		return 0, &Error{Op: op, Status: StatusInvalidRequest, Message: nulBodyError}
	}
	cBody := C.CString(string(requestJSON))
	defer C.free(unsafe.Pointer(cBody))
	var tokens C.size_t
	if _, err := call(op, func() C.EmberStatus {
		return C.ember_go_count_prompt_tokens(e.handle, C.uint32_t(api), cBody, &tokens)
	}); err != nil {
		return 0, err
	}
	return int(tokens), nil
}

// ModelInfo is the JSON description of the served model (engine_model_info_json; docs/c_api.md lists its
// fields): architecture, sizes, max_model_len, vocabulary and special tokens, weight types, file and backend.
// The first call computes the file's SHA-256.
func (e *Engine) ModelInfo() (json.RawMessage, error) {
	defer runtime.KeepAlive(e)
	const op = "engine_model_info_json"
	if e.closed.Load() {
		return nil, closedEngine(op)
	}
	var out *C.char
	if _, err := call(op, func() C.EmberStatus { return C.ember_go_model_info(e.handle, &out) }); err != nil {
		return nil, err
	}
	return json.RawMessage(takeString(out)), nil
}
