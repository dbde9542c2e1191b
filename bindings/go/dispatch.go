package ember

// #include "handles.h"
import "C"

import (
	"sync"
	"unsafe"
)

// recordsPerWait is the most records one engine_wait_events call takes.
const recordsPerWait = 64

// dispatcher is an engine's one reader: a goroutine that takes the events of every request from the engine's
// waiting point (engine_wait_events) and hands each to its request's inbox. It blocks in C between batches, on
// one OS thread for the engine, however many requests are open: a request's reader waits on its inbox, in Go,
// with no thread of its own (docs/c_api.md, "One thread for every request").
type dispatcher struct {
	engine C.uintptr_t
	mu     sync.Mutex
	// inboxes are the open requests' inboxes by user_data; nextID numbers the next request.
	inboxes map[uint64]*inbox
	nextID  uint64
	// closed is set when the engine is freed: no request registers after it.
	closed bool
	done   chan struct{}
}

func newDispatcher(engine C.uintptr_t) *dispatcher {
	d := &dispatcher{engine: engine, inboxes: make(map[uint64]*inbox), nextID: 1, done: make(chan struct{})}
	go d.run()
	return d
}

// register opens an inbox for a request about to be submitted: its user_data and the inbox; false once the
// engine is closed.
func (d *dispatcher) register() (uint64, *inbox, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return 0, nil, false
	}
	id := d.nextID
	d.nextID++
	box := newInbox()
	d.inboxes[id] = box
	return id, box, true
}

// forget drops the inbox of `id` (its request was refused, ended or closed).
func (d *dispatcher) forget(id uint64) {
	d.mu.Lock()
	delete(d.inboxes, id)
	d.mu.Unlock()
}

// run takes batches until the engine is freed, then fails the inboxes still open.
func (d *dispatcher) run() {
	defer close(d.done)
	size := C.size_t(unsafe.Sizeof(C.EmberEventRecord{}))
	records := (*[recordsPerWait]C.EmberEventRecord)(C.malloc(size * recordsPerWait))
	defer C.free(unsafe.Pointer(records))
	var batch []record
	for {
		batch = batch[:0]
		var count C.size_t
		// The texts are copied before this thread can wait again: ember keeps them until then.
		_, err := call("engine_wait_events", func() C.EmberStatus {
			status := C.ember_go_wait_events(d.engine, -1, &records[0], recordsPerWait, &count)
			for i := 0; i < int(count); i++ {
				batch = append(batch, copyRecord(&records[i]))
			}
			return status
		})
		if err != nil {
			// StatusInvalidHandle: the engine was freed (engine_free ends the wait).
			d.failAll(&Error{Op: "engine_wait_events", Status: StatusInvalidHandle, Message: "the engine is closed"})
			return
		}
		d.mu.Lock()
		for _, r := range batch {
			if box := d.inboxes[r.userData]; box != nil {
				box.put(r.item)
				if r.item.last {
					delete(d.inboxes, r.userData)
				}
			}
		}
		d.mu.Unlock()
	}
}

// failAll ends every open request with `err`, dropping what its reader had not taken, and refuses new ones.
func (d *dispatcher) failAll(err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.closed = true
	for id, box := range d.inboxes {
		box.fail(err)
		delete(d.inboxes, id)
	}
}

// record is one EmberEventRecord in Go memory.
type record struct {
	userData uint64
	item     item
}

// item is what a request's reader takes: an event, or a chunk body (kind CHUNK), or the end of a chunk stream
// (kind STREAM_DONE); `last` marks the request's last. `failure` ends the reader with an error instead.
type item struct {
	event   Event
	chunk   []byte
	last    bool
	failure error
}

func copyRecord(r *C.EmberEventRecord) record {
	e := r.event
	it := item{
		event: Event{
			Kind:         EventKind(e.kind),
			Choice:       int(e.choice),
			NumTokens:    int(e.num_tokens),
			FinishReason: FinishReason(e.finish_reason),
		},
		last: bool(r.last),
	}
	if e.text != nil {
		if it.event.Kind == eventChunk {
			it.chunk = C.GoBytes(unsafe.Pointer(e.text), C.int(e.text_len))
		} else {
			it.event.Text = C.GoStringN(e.text, C.int(e.text_len))
		}
	}
	return record{userData: uint64(r.user_data), item: it}
}

// inbox is a request's queue of items: unbounded, so that the dispatcher never waits for a slow reader (which
// would hold up every other request), with a signal the reader waits on.
type inbox struct {
	mu     sync.Mutex
	items  []item
	signal chan struct{}
}

func newInbox() *inbox {
	return &inbox{signal: make(chan struct{}, 1)}
}

func (b *inbox) put(it item) {
	b.mu.Lock()
	b.items = append(b.items, it)
	b.mu.Unlock()
	select {
	case b.signal <- struct{}{}:
	default:
	}
}

// fail replaces what waits with `err`.
func (b *inbox) fail(err error) {
	b.mu.Lock()
	b.items = append(b.items[:0], item{failure: err, last: true})
	b.mu.Unlock()
	select {
	case b.signal <- struct{}{}:
	default:
	}
}

// take pops the oldest item, if any.
func (b *inbox) take() (item, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.items) == 0 {
		return item{}, false
	}
	it := b.items[0]
	b.items[0] = item{}
	b.items = b.items[1:]
	return it, true
}
