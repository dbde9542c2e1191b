package ember

import "encoding/json"

// PromptProgress is how far a prompt has been computed: an EventPromptProgress's Progress, only for a request
// whose body has `"return_progress": true` (docs/protocol.md, "Prompt progress"). The figures are llama-server's
// `prompt_progress` object, which the event's Text holds as JSON.
type PromptProgress struct {
	// Total is the prompt's tokens.
	Total int `json:"total"`
	// Cached is the prompt tokens the prefix cache supplied when the engine admitted the prompt.
	Cached int `json:"cache"`
	// Processed is the prompt tokens computed so far, the cached ones included: from Cached up to Total.
	Processed int `json:"processed"`
	// TimeMs is the whole milliseconds since the engine admitted the prompt.
	TimeMs int64 `json:"time_ms"`
}

// parsePromptProgress reads a PROMPT_PROGRESS event's text (ember's own JSON: it does not fail). It runs in the
// reader's goroutine, not the dispatcher's, which serves every request.
func parsePromptProgress(text string) *PromptProgress {
	var p PromptProgress
	if json.Unmarshal([]byte(text), &p) != nil {
		return nil
	}
	return &p
}
