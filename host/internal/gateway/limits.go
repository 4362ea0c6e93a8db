package gateway

import (
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// Defaults of the request body buffer budget (Options.MaxBufferedRequestBytes
// and MaxBufferedRequestBytesPerClient).
const (
	DefaultMaxBufferedRequestBytes          = 64 << 20
	DefaultMaxBufferedRequestBytesPerClient = 8 << 20
)

// Defaults of the in-flight limits, kube-apiserver's --max-requests-inflight
// and --max-mutating-requests-inflight.
const (
	DefaultMaxRequestsInFlight         = 400
	DefaultMaxMutatingRequestsInFlight = 200
)

// inFlightLimit counts the requests of one kind being proxied; a limit of 0
// admits every request.
type inFlightLimit struct {
	limit int64
	n     atomic.Int64
}

func (l *inFlightLimit) acquire() bool {
	if l.limit == 0 {
		l.n.Add(1)
		return true
	}
	if l.n.Add(1) > l.limit {
		l.n.Add(-1)
		return false
	}
	return true
}

func (l *inFlightLimit) release() { l.n.Add(-1) }

// bodyBudget bounds the request bodies held in memory for retries: all of
// them together, and those of one client, which is the connection's source
// address, the only one the gateway knows to be true. A client behind a
// shared proxy address gets one share for all of them; what it loses is only
// that more of its bodies stream without a retry.
type bodyBudget struct {
	total, perClient int64

	mu       sync.Mutex
	held     int64
	byClient map[string]int64
}

// Why a body is streamed instead of buffered; the values label
// skewgate_gateway_unbuffered_request_bodies_total.
const (
	unbufferedBudget      = "budget"
	unbufferedClientShare = "client_share"
)

func newBodyBudget(total, perClient int64) *bodyBudget {
	return &bodyBudget{total: total, perClient: perClient, byClient: map[string]int64{}}
}

// reserve takes n bytes for client, or says why it cannot.
func (b *bodyBudget) reserve(client string, n int64) (ok bool, why string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case b.byClient[client]+n > b.perClient:
		return false, unbufferedClientShare
	case b.held+n > b.total:
		return false, unbufferedBudget
	}
	b.held += n
	b.byClient[client] += n
	return true, ""
}

func (b *bodyBudget) release(client string, n int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.held -= n
	if left := b.byClient[client] - n; left > 0 {
		b.byClient[client] = left
	} else {
		delete(b.byClient, client)
	}
}

func (b *bodyBudget) bytesHeld() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.held
}

// writeTooManyRequests answers 429 with Retry-After, as kube-apiserver's
// max-in-flight filter does, and with a Status body a client can decode.
func (g *Gateway) writeTooManyRequests(w http.ResponseWriter, message string) {
	w.Header().Set("Retry-After", fmt.Sprint(g.opts.RetryAfterSeconds))
	writeStatus(w, &apierrors.NewTooManyRequests(message, g.opts.RetryAfterSeconds).ErrStatus)
}
