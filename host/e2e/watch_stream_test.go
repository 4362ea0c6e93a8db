package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"
)

// watchStream is a watch kept open in the background, its events delivered as they arrive.
type watchStream struct {
	events chan watchEvent
	done   chan struct{}
	// Valid once done is closed: how the stream ended (nil for the server's own end) and when.
	err   error
	ended time.Time
}

// openWatchStream opens a watch with client at url and requires it to be accepted (200); the
// stream then runs until it ends or ctx does.
func openWatchStream(ctx context.Context, t *testing.T, client *http.Client, url string) *watchStream {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("opening the watch %s: %v", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		t.Fatalf("opening the watch %s: HTTP %d: %s", url, resp.StatusCode, body)
	}
	return newWatchStream(resp)
}

// newWatchStream delivers the events of an accepted watch's response until it ends.
func newWatchStream(resp *http.Response) *watchStream {
	w := &watchStream{events: make(chan watchEvent, 1024), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		defer resp.Body.Close()
		dec := json.NewDecoder(resp.Body)
		for {
			var ev watchEvent
			if err := dec.Decode(&ev); err != nil {
				if !errors.Is(err, io.EOF) {
					w.err = err
				}
				w.ended = time.Now()
				return
			}
			if ev.Type == "ERROR" {
				w.err, w.ended = errors.New("watch ERROR event"), time.Now()
				return
			}
			select {
			case w.events <- ev:
			default:
				w.err, w.ended = errors.New("the test did not keep up with the watch"), time.Now()
				return
			}
		}
	}()
	return w
}

// expect waits for an event of eventType for the object called name, skipping others.
func (w *watchStream) expect(eventType, name string, timeout time.Duration) error {
	deadline := time.After(timeout)
	for {
		select {
		case ev := <-w.events:
			if ev.Type == eventType && ev.Object.Metadata.Name == name {
				return nil
			}
		case <-w.done:
			return fmt.Errorf("the watch ended (%v) before %s %s", w.err, eventType, name)
		case <-deadline:
			return fmt.Errorf("no %s %s within %s", eventType, name, timeout)
		}
	}
}

// running reports whether the stream is still open.
func (w *watchStream) running() bool {
	select {
	case <-w.done:
		return false
	default:
		return true
	}
}
