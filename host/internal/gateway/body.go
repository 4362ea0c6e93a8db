package gateway

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// maxPluginBody is the largest request body the plugin may read, Envoy's
// default buffer limit (per_connection_buffer_limit_bytes, 1 MiB): a larger
// one is answered 413, as Envoy answers a body beyond what a filter that
// buffers it may hold.
const maxPluginBody = 1 << 20

// errBodyTooLarge: the body the plugin asked for is larger than maxPluginBody.
var errBodyTooLarge = errors.New("the request body is larger than the 1 MiB the gateway buffers")

// bodyBudgetError: holding the body the plugin asked for would exceed the
// buffer budget, or the client's share of it.
type bodyBudgetError struct{ perClient bool }

func (e *bodyBudgetError) Error() string {
	if e.perClient {
		return "the client's share of the request body buffer is taken"
	}
	return "the request body buffer is full"
}

// pluginBody reads a request's body when the plugin asks for it
// (wasmhost.BodyReader), on the handler's goroutine: at most maxPluginBody
// bytes (one more tells that the body is larger), within the request
// timeout as every buffered body, and held against the buffer budget and the
// client's share of it (Options.MaxBufferedRequestBytes) until the request
// ends, since a retry sends it again. It lives in the pooled plugin request,
// so that offering the body costs a request whose body the plugin does not
// read nothing.
type pluginBody struct {
	g       *Gateway
	w       *statusRecorder
	r       *http.Request
	arrived time.Time
	// read: the plugin asked for the body, so the client's stream is
	// consumed and what the plugin left replaces it.
	read bool
	// client and reserved are what the body holds of the budget.
	client   string
	reserved int64
}

// offerBody lets the plugin read r's body (none for a request without one).
func (p *pooledRequest) offerBody(g *Gateway, w *statusRecorder, r *http.Request, arrived time.Time) {
	if r.ContentLength == 0 {
		return
	}
	p.body = pluginBody{g: g, w: w, r: r, arrived: arrived}
	p.Request.Body = &p.body
}

func (b *pluginBody) ReadBody() ([]byte, error) {
	b.read = true
	r := b.r
	if r.ContentLength > maxPluginBody {
		return nil, errBodyTooLarge
	}
	// A body of unknown length may be as large as the bound.
	size := r.ContentLength
	if size < 0 {
		size = maxPluginBody
	}
	client := peerIP(r.RemoteAddr)
	if ok, why := b.g.bodies.reserve(client, size); !ok {
		return nil, &bodyBudgetError{perClient: why == b.g.bodies.overShare}
	}
	b.client, b.reserved = client, size
	rc := http.NewResponseController(b.w)
	_ = rc.SetReadDeadline(b.arrived.Add(b.g.opts.RequestTimeout))
	var body []byte
	var err error
	if r.ContentLength > 0 {
		body, err = readBody(r.Body, r.ContentLength)
	} else {
		body, err = readAtMost(r.Body, maxPluginBody)
	}
	if err != nil {
		return nil, err
	}
	// Only a body read whole may lift the deadline (bufferBody).
	_ = rc.SetReadDeadline(time.Time{})
	if held := int64(len(body)); held < b.reserved {
		b.g.bodies.release(client, b.reserved-held)
		b.reserved = held
	}
	return body, nil
}

// release gives back what the body held of the budget, once the request
// ends.
func (b *pluginBody) release() {
	if b.reserved > 0 {
		b.g.bodies.release(b.client, b.reserved)
	}
	*b = pluginBody{}
}

// readAtMost reads r to its end, which must come within limit bytes.
func readAtMost(r io.Reader, limit int64) ([]byte, error) {
	body, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err == nil && int64(len(body)) > limit {
		return nil, errBodyTooLarge
	}
	return body, err
}

// replayable makes body the request's body, sent with its Content-Length
// and again on a retry.
func replayable(r *http.Request, body []byte) {
	r.Body = io.NopCloser(bytes.NewReader(body))
	r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	r.ContentLength = int64(len(body))
	r.TransferEncoding = nil
}

// answerBodyFailure answers a request whose body the plugin asked for and
// could not have: 413 for a body over maxPluginBody, as Envoy answers it; 429
// with Retry-After when the buffer budget is taken, as for the gateway's
// other bounds; 504 for a body that did not arrive within the request
// timeout, and 400 for one the client broke off or framed wrongly, as for a
// body that breaks off on its way to a server; also when Go's server counts
// the client gone, as it does an HTTP/1.x client that ended its side of the
// connection and still reads. No server saw the request, so none is marked.
func (g *Gateway) answerBodyFailure(w *statusRecorder, r *http.Request, err error) {
	var budget *bodyBudgetError
	switch {
	case errors.Is(err, errBodyTooLarge):
		writeStatus(w, &apierrors.NewRequestEntityTooLargeError(fmt.Sprintf("limit is %d", maxPluginBody)).ErrStatus)
	case errors.As(err, &budget):
		why := "max_buffered_request_bytes"
		if budget.perClient {
			why += "_per_client"
		}
		g.refuse(w, why, "request bodies held in memory")
	case errors.Is(err, os.ErrDeadlineExceeded):
		writeRequestTimeout(w)
	default:
		g.log.Info("the client's request body broke off while the plugin waited for it", "method", r.Method, "path", r.URL.Path, "error", err)
		writeStatus(w, &apierrors.NewBadRequest("the request body could not be read to its end").ErrStatus)
	}
}
