package wasmhost

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// HTTPCaller carries out the guest's proxy_http_call; the gateway implements it.
type HTTPCaller interface {
	// HasCluster reports whether cluster names an upstream; Envoy refuses a call to an unknown cluster
	// synchronously (BadArgument).
	HasCluster(cluster string) bool
	// HTTPCall sends one request. Headers include :method, :path, :authority (lower-case names, one pair per
	// value). The returned headers include :status. An error means no response (Envoy then reports the call
	// with zero headers and no body to the guest).
	HTTPCall(ctx context.Context, call HTTPCall) (*HTTPCallResponse, error)
}

// HTTPCall is one request a guest dispatched with proxy_http_call. When it has a body, Headers carry its
// content-length, as Envoy sets it.
type HTTPCall struct {
	Cluster  string
	Headers  [][2]string
	Body     []byte
	Trailers [][2]string
	// Timeout is the guest's timeout; zero means none beyond the request's context. The host also bounds the
	// context it passes to HTTPCall by it.
	Timeout time.Duration
}

// HTTPCallResponse is the upstream's answer to an HTTPCall. The host does not modify it.
type HTTPCallResponse struct {
	Headers  [][2]string
	Body     []byte
	Trailers [][2]string
}

// ErrStreamLost reports a stream paused for an HTTP call or for its body whose instance failed before the call
// returned or the body arrived: its contexts are gone, so the failure policy answers the request.
var ErrStreamLost = errors.New("the Wasm VM instance holding the paused request failed while the request waited")

// errNoResponse stands for a caller that returned neither a response nor an error.
var errNoResponse = errors.New("HTTP call returned no response")

// callResult is what became of one dispatched call.
type callResult struct {
	token uint32
	resp  *HTTPCallResponse
	err   error
}

// streamCalls are the HTTP calls a stream waits for. They run under a context derived from the request's, which
// is cancelled when the stream ends, and report to results, read by the goroutine awaiting the stream.
type streamCalls struct {
	ctx     context.Context
	cancel  context.CancelFunc
	results chan callResult
	tokens  []uint32 // dispatched and not yet delivered
}

// remove forgets a delivered token and reports whether it was outstanding.
func (c *streamCalls) remove(token uint32) bool {
	i := slices.Index(c.tokens, token)
	if i < 0 {
		return false
	}
	c.tokens = slices.Delete(c.tokens, i, i+1)
	return true
}

// callResponse is the response readable while proxy_on_http_call_response runs: map types 6 and 7 and buffer
// type 4, from the receiving root context or any context of that root (the Go SDK switches to the calling HTTP
// context). A failed call has no response object, so those reads fail as outside the callback, as in Envoy.
// The guest may edit the maps, so they are copies; the body is read-only and only referenced.
type callResponse struct {
	root     *rootContext
	present  bool
	headers  [][2]string
	body     []byte
	trailers [][2]string
}

// proxy_http_call(upstream_data, upstream_size, headers_data, headers_size, body_data, body_size,
// trailers_data, trailers_size, timeout_ms, return_token): cpp-host checks guest memory and the token slot first,
// then Envoy's Context::httpCall refuses a negative timeout, an unknown cluster and a request without :path,
// :method or :authority (BadArgument). The call belongs to the root of the effective context, which receives
// proxy_on_http_call_response.
func proxyHTTPCall(inst *instance, stack []uint64) {
	upstream, okUpstream := inst.read(u32(stack[0]), u32(stack[1]))
	headers, okHeaders := inst.read(u32(stack[2]), u32(stack[3]))
	body, okBody := inst.read(u32(stack[4]), u32(stack[5]))
	trailers, okTrailers := inst.read(u32(stack[6]), u32(stack[7]))
	tokenPtr := u32(stack[9])
	if !okUpstream || !okHeaders || !okBody || !okTrailers || !inst.writeU32(tokenPtr, 0) {
		stack[0] = uint64(statusInvalidMemoryAccess)
		return
	}
	root := inst.effective.root
	timeoutMS := int32(u32(stack[8]))
	caller := inst.host.opts.HTTPCalls
	cluster := string(upstream)
	if root == nil || timeoutMS < 0 || caller == nil || !caller.HasCluster(cluster) {
		stack[0] = uint64(statusBadArgument)
		return
	}
	call := HTTPCall{
		Cluster:  cluster,
		Headers:  lowerKeys(inst.decodeGuestPairs(headers, "proxy_http_call")),
		Trailers: lowerKeys(inst.decodeGuestPairs(trailers, "proxy_http_call")),
		Timeout:  time.Duration(timeoutMS) * time.Millisecond,
	}
	for _, required := range [...]string{":path", ":method", ":authority"} {
		if !slices.ContainsFunc(call.Headers, func(h [2]string) bool { return h[0] == required }) {
			stack[0] = uint64(statusBadArgument)
			return
		}
	}
	if len(body) > 0 {
		call.Body = append([]byte(nil), body...)
		call.Headers = slices.DeleteFunc(call.Headers, func(h [2]string) bool { return h[0] == "content-length" })
		call.Headers = append(call.Headers, [2]string{"content-length", strconv.Itoa(len(body))})
	}
	token := inst.nextCallToken()
	inst.host.counters.httpCalls.Add(1)
	if s := inst.effective.stream; s != nil && s.requestOpen {
		inst.host.startStreamCall(s, token, call)
	} else {
		inst.host.startDetachedCall(inst, root, token, call)
	}
	stack[0] = uint64(statusFor(inst.writeU32(tokenPtr, token)))
}

func lowerKeys(pairs [][2]string) [][2]string {
	for i := range pairs {
		pairs[i][0] = strings.ToLower(pairs[i][0])
	}
	return pairs
}

// nextCallToken returns the next call token, never 0.
func (inst *instance) nextCallToken() uint32 {
	inst.lastCallToken++
	if inst.lastCallToken == 0 {
		inst.lastCallToken++
	}
	return inst.lastCallToken
}

// perform runs one call with the guest's timeout.
func (h *Host) perform(ctx context.Context, call HTTPCall) (*HTTPCallResponse, error) {
	if call.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, call.Timeout)
		defer cancel()
	}
	resp, err := h.opts.HTTPCalls.HTTPCall(ctx, call)
	if err == nil && resp == nil {
		err = errNoResponse
	}
	if err != nil {
		return nil, err
	}
	return resp, nil
}

// startStreamCall runs a call for a stream whose request is still open: the goroutine handling the request waits
// for it with the instance back in the pool.
func (h *Host) startStreamCall(s *stream, token uint32, call HTTPCall) {
	c := &s.calls
	if c.results == nil {
		c.ctx, c.cancel = context.WithCancel(s.ctx)
		c.results = make(chan callResult, 1)
	}
	c.tokens = append(c.tokens, token)
	ctx, results := c.ctx, c.results
	go func() {
		resp, err := h.perform(ctx, call)
		select {
		case results <- callResult{token, resp, err}:
		case <-ctx.Done():
		}
	}()
}

// startDetachedCall runs a call no waiting request owns (dispatched from a root context or from a stream already
// answered) and delivers the result to its root on the same instance, as Envoy does; it is dropped if the instance
// or the root is gone by then.
func (h *Host) startDetachedCall(inst *instance, root *rootContext, token uint32, call HTTPCall) {
	h.goBackground(func() {
		resp, err := h.perform(h.ctx, call)
		if err != nil {
			h.counters.httpCallFailures.Add(1)
		}
		s := inst.slot
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.inst != inst || inst.failed != nil {
			return
		}
		h.runOnWorker(s, func() { _ = inst.deliverCall(root, token, resp) })
	})
}

// awaitCalls waits for the HTTP calls of a paused stream, without holding its instance, and hands each result to
// the guest on that instance until the stream has an outcome.
func (h *Host) awaitCalls(ctx context.Context, s *slot, inst *instance, st *stream, calls streamCalls, req *Request, out *Outcome) {
	defer calls.cancel()
	for {
		var r callResult
		select {
		case r = <-calls.results:
		case <-ctx.Done():
		case <-h.done:
			h.applyFailurePolicy(req, out, ErrClosed)
			return
		}
		if err := ctx.Err(); err != nil {
			// The client went away: Envoy resets the stream, which finishes its context.
			calls.cancel()
			_ = h.withInstance(s, inst, func() { inst.finishStream(st, &Outcome{}) })
			*out = clientGone(err)
			return
		}
		if r.err != nil {
			h.counters.httpCallFailures.Add(1)
		}
		var pending *stream
		if err := h.withInstance(s, inst, func() { pending = inst.resumeStream(st, r, req, out) }); err != nil {
			h.applyFailurePolicy(req, out, err)
			return
		}
		if pending == nil {
			return
		}
	}
}

// withInstance runs fn on the slot's worker if the slot still holds inst and inst has not failed; the slot may
// meanwhile sit in the pool or serve other requests, so its mutex is taken directly.
func (h *Host) withInstance(s *slot, inst *instance, fn func()) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.inst != inst || inst.failed != nil {
		if inst.failed != nil {
			return fmt.Errorf("%w: %w", ErrStreamLost, inst.failed)
		}
		return ErrStreamLost
	}
	if !h.runOnWorker(s, fn) {
		return ErrClosed
	}
	return nil
}

// resumeStream delivers one of the stream's call results and settles the stream; it returns the stream while it
// still waits for calls, nil once out holds the outcome.
func (inst *instance) resumeStream(s *stream, r callResult, req *Request, out *Outcome) *stream {
	if !s.calls.remove(r.token) {
		return s
	}
	if err := inst.deliverCall(s.root, r.token, r.resp); err != nil {
		inst.host.applyFailurePolicy(req, out, err)
		inst.releaseStream(s)
		return nil
	}
	return inst.settle(s, req, out, actionPause)
}

// deliverCall runs proxy_on_http_call_response(root, token, headers, body size, trailers) with the response
// readable; a nil response is a failed call, reported with zero counts. It is skipped if the root is gone.
func (inst *instance) deliverCall(root *rootContext, token uint32, resp *HTTPCallResponse) error {
	fn := inst.fns.onHTTPCallResponse
	if fn == nil || !slices.Contains(inst.roots, root) {
		return nil
	}
	c := &inst.callResponse
	c.root, c.present = root, resp != nil
	if resp != nil {
		c.headers = append(c.headers[:0], resp.Headers...)
		c.body = resp.Body
		c.trailers = append(c.trailers[:0], resp.Trailers...)
		lowerKeys(c.headers)
		lowerKeys(c.trailers)
	}
	inst.stack[0], inst.stack[1] = uint64(root.id), uint64(token)
	inst.stack[2], inst.stack[3], inst.stack[4] = uint64(len(c.headers)), uint64(len(c.body)), uint64(len(c.trailers))
	_, err := inst.invoke(fn, guestContext{id: root.id, root: root})
	clear(c.headers)
	clear(c.trailers)
	*c = callResponse{headers: c.headers[:0], trailers: c.trailers[:0]}
	return err
}

// cancelCalls cancels the stream's outstanding calls and delivers each to the root without a response, so that
// the guest forgets its callback (the Go SDK drops a response whose HTTP context is gone). Envoy lets such a call
// complete and delivers it to the root later; the guest sees the same either way.
func (inst *instance) cancelCalls(s *stream) {
	c := &s.calls
	if c.cancel == nil {
		return
	}
	c.cancel()
	tokens := c.tokens
	c.tokens = nil
	inst.host.counters.httpCallsCancelled.Add(uint64(len(tokens)))
	for _, token := range tokens {
		if inst.deliverCall(s.root, token, nil) != nil {
			return
		}
	}
}
