package gateway

import (
	"context"
	"net"
	"net/http"
	"sync"
	"time"
)

// DefaultStalledStreamTimeout is how long a long-running response (a watch,
// a log, an exec session) may wait for its client to take the next bytes;
// Options.StalledStreamTimeout.
const DefaultStalledStreamTimeout = time.Minute

// answerWriteTimeout bounds how long the gateway's own answers (its 400s,
// 429s, 503s and 504s) may wait for the client to read them.
const answerWriteTimeout = 10 * time.Second

// A response is written to a client that may not read it: a zero HTTP/2
// window or a full TCP buffer blocks the handler in Write or Flush, where Go's
// servers watch no context, and its in-flight place and memory with it. The
// write deadline is what ends such a write (Go's HTTP/2 server resets the
// stream, its HTTP/1.x server closes the connection). It is set from another
// goroutine when the request's time is up (giveUpAtTimeout) or a write has
// waited too long (watchForStalls), only while the handler runs: once it
// returns, the writer is no longer the request's, and an HTTP/1.x
// connection's deadline would fall on its next request.
type responseWrites struct {
	rc *http.ResponseController

	mu    sync.Mutex
	ended bool
	// stall, for a long-running response, gives up a write that waits
	// longer than stallTimeout.
	stall        *time.Timer
	stallTimeout time.Duration
}

// giveUpAt sets the write deadline of the response, unless its handler has
// returned.
func (w *responseWrites) giveUpAt(at time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.ended {
		_ = w.rc.SetWriteDeadline(at)
	}
}

// end is called as the handler returns; no deadline is set after it.
func (w *responseWrites) end() {
	if w.stall != nil {
		w.stall.Stop()
	}
	w.mu.Lock()
	w.ended = true
	w.mu.Unlock()
}

// writes are the response's bounded writes, made on first use.
func (r *statusRecorder) writes() *responseWrites {
	if r.bounded == nil {
		r.bounded = &responseWrites{rc: http.NewResponseController(r.ResponseWriter)}
	}
	return r.bounded
}

// giveUpAtTimeout makes the response end when ctx's request timeout passes:
// at once if it has started (its client is not reading it fast enough), or
// after answerWriteTimeout, the time the 504 then written has to go out. The
// returned function, called before ctx is cancelled, undoes it.
func (r *statusRecorder) giveUpAtTimeout(ctx context.Context) (stop func() bool) {
	w := r.writes()
	started := &r.started
	return context.AfterFunc(ctx, func() {
		if context.Cause(ctx) != errRequestTimeout {
			return
		}
		at := time.Now().Add(answerWriteTimeout)
		if started.Load() {
			// A deadline already passed, not "now": Go's HTTP/2 server acts
			// at once only on one in the past.
			at = time.Unix(1, 0)
		}
		w.giveUpAt(at)
	})
}

// watchForStalls ends a long-running response whose client takes no bytes
// for timeout; a stream that is quiet, with nothing to write, is never cut.
func (r *statusRecorder) watchForStalls(timeout time.Duration) {
	w := r.writes()
	w.stallTimeout = timeout
	w.stall = time.AfterFunc(time.Hour, func() { w.giveUpAt(time.Unix(1, 0)) })
	w.stall.Stop()
}

// stallTimer is the timer a write or a flush runs under (Reset before, Stop
// after), nil for a response that is not long-running.
func (r *statusRecorder) stallTimer() *time.Timer {
	if r.bounded == nil {
		return nil
	}
	return r.bounded.stall
}

// FlushError is what http.ResponseController's Flush calls: the reverse
// proxy flushes every write of a long-running response, and a flush is where
// an HTTP/2 write waits for the client's window.
func (r *statusRecorder) FlushError() error {
	if stall := r.stallTimer(); stall != nil {
		stall.Reset(r.bounded.stallTimeout)
		defer stall.Stop()
	}
	switch f := r.ResponseWriter.(type) {
	case interface{ FlushError() error }:
		return f.FlushError()
	case http.Flusher:
		f.Flush()
		return nil
	}
	return http.ErrNotSupported
}

// endWrites is deferred by the handler: from then on no deadline is set.
func (r *statusRecorder) endWrites() {
	if r.bounded != nil {
		r.bounded.end()
	}
}

// boundAnswer gives the gateway's own answer answerWriteTimeout to reach
// its client.
func boundAnswer(w http.ResponseWriter) {
	_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(answerWriteTimeout))
}

// clearConnectionWriteDeadline lifts the deadline an earlier request on the
// same HTTP/1.x connection may have left on it.
func clearConnectionWriteDeadline(w http.ResponseWriter) {
	_ = http.NewResponseController(w).SetWriteDeadline(time.Time{})
}

// stallBoundConn is an upgraded session's client connection: each write
// must complete within timeout, so a client that stops reading its exec or
// port-forward stream ends the session instead of holding it.
type stallBoundConn struct {
	net.Conn
	timeout time.Duration
}

func (c *stallBoundConn) Write(p []byte) (int, error) {
	_ = c.Conn.SetWriteDeadline(time.Now().Add(c.timeout))
	return c.Conn.Write(p)
}
