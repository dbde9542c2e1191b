package ember

import (
	"context"
	"encoding/json"
	"testing"
)

// TestPromptProgressComesBeforeTheFirstToken: a request with `return_progress` reads EventPromptProgress events
// first, from the cached prefix to the whole prompt, each decoded into Progress; one without reads none.
func TestPromptProgressComesBeforeTheFirstToken(t *testing.T) {
	for _, asked := range []bool{true, false} {
		extra := ""
		if asked {
			extra = `, "return_progress": true`
		}
		req := submit(t, shared, context.Background(), chat("Name three primary colors.", 4, extra))
		var progress []PromptProgress
		deltas := 0
		for event, err := range req.Events() {
			if err != nil {
				t.Fatalf("Events: %v", err)
			}
			switch event.Kind {
			case EventDelta:
				deltas++
			case EventPromptProgress:
				if deltas > 0 || event.Progress == nil || event.Choice != 0 {
					t.Fatalf("progress after %d deltas, or undecoded: %+v", deltas, event)
				}
				if event.NumTokens != event.Progress.Processed {
					t.Errorf("NumTokens %d, Processed %d", event.NumTokens, event.Progress.Processed)
				}
				progress = append(progress, *event.Progress)
			}
		}
		if !asked {
			if len(progress) != 0 {
				t.Errorf("progress without return_progress: %+v", progress)
			}
			continue
		}
		if len(progress) < 2 {
			t.Fatalf("the admission and at least one chunk: %+v", progress)
		}
		first, last := progress[0], progress[len(progress)-1]
		if first.Processed != first.Cached || first.TimeMs != 0 || last.Processed != last.Total || last.Total == 0 {
			t.Errorf("from the cached prefix to the whole prompt: %+v", progress)
		}
	}
}

// TestPromptProgressChunksAreLlamaServers: a stream with `return_progress` opens with chunks carrying
// llama-server's `prompt_progress`, then the stream's own.
func TestPromptProgressChunksAreLlamaServers(t *testing.T) {
	body := chat("Name three primary colors.", 4, `, "stream": true, "return_progress": true`)
	req := submitStream(t, shared, context.Background(), body)
	progress, others := 0, 0
	for chunk, err := range req.Chunks() {
		if err != nil {
			t.Fatalf("Chunks: %v", err)
		}
		var c struct {
			Progress *PromptProgress `json:"prompt_progress"`
			Choices  []struct {
				Delta map[string]any `json:"delta"`
			} `json:"choices"`
		}
		if err := json.Unmarshal(chunk, &c); err != nil {
			t.Fatalf("chunk %s: %v", chunk, err)
		}
		if c.Progress == nil {
			others++
			continue
		}
		role, content := c.Choices[0].Delta["role"], c.Choices[0].Delta["content"]
		if others > 0 || role != "assistant" || content != nil {
			t.Errorf("a progress chunk after the stream began, or not llama-server's delta: %s", chunk)
		}
		progress++
	}
	if progress < 2 || others == 0 {
		t.Errorf("%d progress chunks, %d others", progress, others)
	}
}
