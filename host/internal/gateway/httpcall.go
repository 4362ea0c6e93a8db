package gateway

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/textproto"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/skewgate/skewgate/host/internal/wasmhost"
)

// maxCallResponseBody bounds the body of an answer to the plugin's HTTP call;
// a larger one fails the call, as Envoy's buffer limit resets it.
const maxCallResponseBody = 1 << 20

var _ wasmhost.HTTPCaller = (*Gateway)(nil)

// HasCluster reports whether cluster names an API server of the current (or
// the previous) routing, with or without discovery.FrontProxyClusterSuffix;
// the suffixed name exists only with a front-proxy client certificate.
func (g *Gateway) HasCluster(cluster string) bool {
	s := g.state.Load()
	if s == nil {
		return false
	}
	_, _, err := g.resolve(s, cluster)
	return err == nil
}

// HTTPCall sends the plugin's request to the API server the cluster names,
// with the credential the name carries, within the call's timeout (the
// request timeout when it has none). It is never retried: the plugin decides
// what a failure means.
func (g *Gateway) HTTPCall(caller context.Context, call wasmhost.HTTPCall) (*wasmhost.HTTPCallResponse, error) {
	s := g.state.Load()
	if s == nil {
		return nil, errors.New("the gateway has no discovery snapshot yet")
	}
	b, frontProxy, err := g.resolve(s, call.Cluster)
	if err != nil {
		return nil, err
	}
	timeout := call.Timeout
	if timeout <= 0 {
		timeout = g.opts.RequestTimeout
	}
	ctx, cancel := context.WithTimeout(caller, timeout)
	defer cancel()
	req, err := callRequest(ctx, b.address, call)
	if err != nil {
		return nil, err
	}
	rt, err := g.transports.load().pick(frontProxy, false)
	if err != nil {
		return nil, err
	}
	resp, err := rt.RoundTrip(req)
	if err != nil {
		g.callFailed(caller, b, err)
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxCallResponseBody+1))
	if err != nil {
		g.callFailed(caller, b, err)
		return nil, err
	}
	if len(body) > maxCallResponseBody {
		return nil, fmt.Errorf("the answer of %s to %s %s exceeds %d bytes", b.cluster, req.Method, req.URL.Path, maxCallResponseBody)
	}
	headers := append([][2]string{{":status", strconv.Itoa(resp.StatusCode)}}, headerPairs(resp.Header)...)
	return &wasmhost.HTTPCallResponse{Headers: headers, Body: body, Trailers: headerPairs(resp.Trailer)}, nil
}

// callFailed counts a call's failure against its server, unless the caller
// cancelled it (the client left, or the plugin's stream ended): that says
// nothing about the server.
func (g *Gateway) callFailed(caller context.Context, b *backend, err error) {
	if !errors.Is(caller.Err(), context.Canceled) {
		g.metrics.upstreamError(b.cluster, errorKind(err))
	}
}

// callRequest is the HTTP request for a call: its pseudo-headers become the
// method, target and authority; Go sets the framing headers itself.
func callRequest(ctx context.Context, address string, call wasmhost.HTTPCall) (*http.Request, error) {
	f := outboundFields(call.Headers, "")
	method, target := f.method, f.path
	if method == "" {
		method = http.MethodGet
	}
	u, err := url.ParseRequestURI(target)
	if err != nil || !strings.HasPrefix(target, "/") {
		return nil, fmt.Errorf("the call's :path %q is not an origin-form target", target)
	}
	u.Scheme, u.Host = "https", address
	req, err := http.NewRequestWithContext(ctx, method, u.String(), bytes.NewReader(call.Body))
	if err != nil {
		return nil, err
	}
	req.Header = f.header
	req.Host = f.authority
	if len(call.Trailers) > 0 {
		req.Trailer = http.Header{}
		for _, kv := range call.Trailers {
			key := textproto.CanonicalMIMEHeaderKey(kv[0])
			req.Trailer[key] = append(req.Trailer[key], kv[1])
		}
	}
	return req, nil
}

// headerPairs lists h as Envoy hands headers to a plugin: lower-case names,
// one pair per value, names sorted so that the order is deterministic.
func headerPairs(h http.Header) [][2]string {
	var pairs [][2]string
	for _, name := range slices.Sorted(maps.Keys(h)) {
		for _, v := range h[name] {
			pairs = append(pairs, [2]string{strings.ToLower(name), v})
		}
	}
	return pairs
}
