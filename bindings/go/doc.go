// Package ember runs ember, an LLM inference engine written in Rust, from Go through its C API
// (include/ember.h, docs/c_api.md).
//
//	engine, err := ember.NewEngine(ember.Config{Threads: 2, EnablePerRequestMetrics: true})
//	if err != nil { ... }
//	defer engine.Close()
//	req, err := engine.Submit(ctx, []byte(`{"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 32, "temperature": 0}`))
//	if err != nil { ... } // an *ember.Error; StatusInvalidRequest carries the OpenAI error body
//	defer req.Close()
//	for event, err := range req.Events() { ... } // text deltas, then each choice's end
//	metrics, _ := req.TimingMetrics()            // absent fields are nil
//	body, _ := req.ResponseJSON()                 // the chat.completion object
//
// Linking: by default the installed library, through pkg-config (`make install PREFIX=...` writes ember.pc);
// inside ember's repository, -tags ember_in_repo links the static target/release/libember.a, and -tags
// ember_in_repo,ember_shared the shared one (docs/go.md, "Building").
//
// Every Go object that owns a C handle has a Close method; a finalizer closes a forgotten one, but only when
// the garbage collector gets to it, so close explicitly. Engine and request handles never enter Go memory as
// pointers (handles.h says why); every string ember returns is copied and freed at once.
package ember
