package controller

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"mime"
	"net"
	"net/http"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/skewgate/skewgate/discovery"
)

// acceptAggregated asks for the server's own aggregated discovery (nopeer), as
// upstream's peer discovery does, falling back to plain aggregated discovery on
// servers that do not know the profile.
const acceptAggregated = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList;profile=nopeer," +
	"application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json"

// The paths probed on every server.
const (
	pathReadyz  = "/readyz"
	pathVersion = "/version"
	pathAPIs    = "/apis"
	pathCore    = "/api"
	pathOpenAPI = "/openapi/v3"
)

// Why a request failed; the values label the fetch error metric.
const (
	reasonUnreachable = "unreachable"
	reasonRefused     = "refused"
	reasonTimeout     = "timeout"
	reasonTLS         = "tls"
	reasonNotReady    = "not_ready"
	reasonStatus      = "status"
	reasonTooLarge    = "too_large"
	reasonContentType = "content_type"
	reasonMalformed   = "malformed"
)

// fetchError is a failed request to one server.
type fetchError struct {
	path   string
	reason string
	err    error
}

func (e *fetchError) Error() string { return e.path + ": " + e.reason + ": " + e.err.Error() }

// conclusive reports whether the server answered, presented a certificate
// that was refused, or nothing listens at its address: asking again at once
// would get the same, unlike a probe that timed out or lost its connection.
// A refused connection is a stopped or restarting kube-apiserver, whose
// successor answers 403 to everyone until its RBAC is loaded: waiting for
// more probes would route requests into that window.
func (e *fetchError) conclusive() bool {
	return e.reason == reasonNotReady || e.reason == reasonTLS || e.reason == reasonRefused
}

// fetched is one of a server's documents as the snapshot carries it, with
// the ETag it was served with; ok is false until one was fetched.
type fetched[T any] struct {
	value T
	etag  string
	ok    bool
}

// fetcher performs the bounded, verified requests of one probe.
type fetcher struct {
	// client is replaced when the peer CA or the front-proxy certificate
	// changes.
	client   atomic.Pointer[backendClient]
	timeout  time.Duration
	maxBytes int64
}

// response is what get keeps of an answer.
type response struct {
	status      int
	body        []byte
	etag        string
	contentType string
}

func (f *fetcher) get(ctx context.Context, address, path, accept, ifNoneMatch string) (response, *fetchError) {
	header := http.Header{"Accept": {accept}}
	if ifNoneMatch != "" {
		header.Set("If-None-Match", ifNoneMatch)
	}
	maps.Copy(header, f.client.Load().identity)
	return f.do(ctx, http.MethodGet, address, path, nil, header)
}

// do sends one request with exactly the given headers and reads its answer,
// bounded in time and size.
func (f *fetcher) do(ctx context.Context, method, address, path string, body []byte, header http.Header) (response, *fetchError) {
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, "https://"+address+path, bytes.NewReader(body))
	if err != nil {
		return response{}, &fetchError{path, reasonUnreachable, err}
	}
	req.Header = header
	req.Header.Set("User-Agent", "skewgate-controller")
	resp, err := f.client.Load().http.Do(req)
	if err != nil {
		return response{}, &fetchError{path, transportReason(err), err}
	}
	defer resp.Body.Close()
	out := response{status: resp.StatusCode, etag: resp.Header.Get("ETag"), contentType: resp.Header.Get("Content-Type")}
	if resp.ContentLength > f.maxBytes {
		return out, &fetchError{path, reasonTooLarge, fmt.Errorf("Content-Length %d exceeds %d bytes", resp.ContentLength, f.maxBytes)}
	}
	out.body, err = io.ReadAll(io.LimitReader(resp.Body, f.maxBytes+1))
	if err != nil {
		return out, &fetchError{path, transportReason(err), err}
	}
	if int64(len(out.body)) > f.maxBytes {
		return out, &fetchError{path, reasonTooLarge, fmt.Errorf("body exceeds %d bytes", f.maxBytes)}
	}
	return out, nil
}

// transportReason tells a refused certificate, a refused connection and a
// timeout apart from other connection failures.
func transportReason(err error) string {
	var verifyErr *tls.CertificateVerificationError
	var unknownAuthority x509.UnknownAuthorityError
	var hostnameErr x509.HostnameError
	var invalidCert x509.CertificateInvalidError
	var netErr net.Error
	switch {
	case errors.As(err, &verifyErr), errors.As(err, &unknownAuthority), errors.As(err, &hostnameErr), errors.As(err, &invalidCert):
		return reasonTLS
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &netErr) && netErr.Timeout():
		return reasonTimeout
	case errors.Is(err, syscall.ECONNREFUSED):
		return reasonRefused
	default:
		return reasonUnreachable
	}
}

// readyz reports whether the server answers /readyz with 200.
func (f *fetcher) readyz(ctx context.Context, address string) *fetchError {
	resp, ferr := f.get(ctx, address, pathReadyz, "text/plain", "")
	if ferr != nil {
		return ferr
	}
	if resp.status != http.StatusOK {
		return &fetchError{pathReadyz, reasonNotReady, fmt.Errorf("HTTP %d", resp.status)}
	}
	return nil
}

// version returns the server's gitVersion.
func (f *fetcher) version(ctx context.Context, address string) (string, *fetchError) {
	resp, ferr := f.get(ctx, address, pathVersion, "application/json", "")
	if ferr != nil {
		return "", ferr
	}
	if resp.status != http.StatusOK {
		return "", &fetchError{pathVersion, reasonStatus, fmt.Errorf("HTTP %d", resp.status)}
	}
	var info struct {
		GitVersion string `json:"gitVersion"`
	}
	if err := json.Unmarshal(resp.body, &info); err != nil {
		return "", &fetchError{pathVersion, reasonMalformed, err}
	}
	if err := checkVersion(info.GitVersion); err != nil {
		return "", &fetchError{pathVersion, reasonMalformed, err}
	}
	return info.GitVersion, nil
}

// checkVersion applies the snapshot's rule for version strings here, so that
// one odd server is refused alone instead of invalidating the whole snapshot.
func checkVersion(v string) error {
	if v == "" || len(v) > maxNameLength {
		return fmt.Errorf("gitVersion %q must be 1 to %d characters", v, maxNameLength)
	}
	for i := 0; i < len(v); i++ {
		if c := v[i]; c <= ' ' || c >= 0x7f {
			return fmt.Errorf("gitVersion %q: only printable ASCII without spaces is allowed", v)
		}
	}
	return nil
}

// document fetches /apis or /api, revalidating cached with If-None-Match. It
// returns cached unchanged on 304 and a new document only when the answer is
// an aggregated discovery list the snapshot can carry there.
func (f *fetcher) document(ctx context.Context, address, path string, cached fetched[discovery.GroupList]) (fetched[discovery.GroupList], *fetchError) {
	return revalidate(ctx, f, address, path, acceptAggregated, cached, func(resp response) (discovery.GroupList, *fetchError) {
		if !isAggregatedDiscovery(resp.contentType) {
			return discovery.GroupList{}, &fetchError{path, reasonContentType, fmt.Errorf("Content-Type %q is not an aggregated discovery list", resp.contentType)}
		}
		list, err := discovery.ParseGroupList(resp.body)
		if err == nil {
			err = list.CheckPlacement(path == pathCore)
		}
		if err != nil {
			return discovery.GroupList{}, &fetchError{path, reasonMalformed, err}
		}
		return list, nil
	})
}

// openAPIIndex fetches the server's /openapi/v3 index, revalidating cached with
// If-None-Match; an answer the snapshot could not carry keeps cached.
func (f *fetcher) openAPIIndex(ctx context.Context, address string, cached fetched[[]discovery.OpenAPIPath]) (fetched[[]discovery.OpenAPIPath], *fetchError) {
	return revalidate(ctx, f, address, pathOpenAPI, "application/json", cached, func(resp response) ([]discovery.OpenAPIPath, *fetchError) {
		paths, err := discovery.ParseOpenAPIIndex(resp.body)
		if err != nil {
			return nil, &fetchError{pathOpenAPI, reasonMalformed, err}
		}
		return paths, nil
	})
}

// revalidate GETs path with If-None-Match for cached: on 304 cached stays, on
// 200 carry turns the answer into what the snapshot holds, and any failure
// keeps cached.
func revalidate[T any](ctx context.Context, f *fetcher, address, path, accept string, cached fetched[T],
	carry func(response) (T, *fetchError)) (fetched[T], *fetchError) {
	var ifNoneMatch string
	if cached.ok {
		ifNoneMatch = cached.etag
	}
	resp, ferr := f.get(ctx, address, path, accept, ifNoneMatch)
	if ferr != nil {
		return cached, ferr
	}
	switch {
	case resp.status == http.StatusNotModified && ifNoneMatch != "":
		return cached, nil
	case resp.status != http.StatusOK:
		return cached, &fetchError{path, reasonStatus, fmt.Errorf("HTTP %d", resp.status)}
	}
	value, ferr := carry(resp)
	if ferr != nil {
		return cached, ferr
	}
	return fetched[T]{value: value, etag: resp.etag, ok: true}, nil
}

// isAggregatedDiscovery accepts the media type API servers label aggregated
// discovery with: application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList.
func isAggregatedDiscovery(contentType string) bool {
	mediaType, params, err := mime.ParseMediaType(contentType)
	return err == nil && mediaType == "application/json" &&
		params["g"] == "apidiscovery.k8s.io" && params["v"] == "v2" && params["as"] == "APIGroupDiscoveryList"
}
