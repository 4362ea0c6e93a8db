package check

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"

	"k8s.io/client-go/rest"

	"github.com/skewgate/skewgate/discovery"
)

// Accept headers of the check's requests.
const (
	// acceptAggregated asks for a server's own aggregated discovery
	// (profile=nopeer), as skewgate's controller does: with the Mixed
	// Version Proxy on, the plain document would merge the peers' APIs in.
	acceptAggregated = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList;profile=nopeer," +
		"application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
	// acceptMetadataList asks for objects' metadata only; a server that
	// cannot (an aggregated API) answers with whole objects, of which only
	// the metadata is decoded.
	acceptMetadataList = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json"
	acceptMetadata     = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json"
	acceptJSON         = "application/json"
)

// userAgent identifies the check's requests in audit logs and in skewgate's
// record of request shapes.
const userAgent = "skewgate-check"

// client sends the check's read-only requests to one API server (or load
// balancer), with the credentials of a kubeconfig.
type client struct {
	http *http.Client
	base *url.URL
	// flag is the command-line flag that named this endpoint; every error
	// names it.
	flag string
	// requests counts every request sent, for the report.
	requests *atomic.Int64
}

// newClient builds a client for cfg; requests are counted in requests.
func newClient(cfg *rest.Config, flag string, requests *atomic.Int64) (*client, error) {
	cfg = rest.CopyConfig(cfg)
	cfg.UserAgent = userAgent
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return countingTransport{rt, requests} })
	httpClient, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", flag, err)
	}
	base, err := url.Parse(cfg.Host)
	if err != nil || base.Host == "" {
		base, err = url.Parse("https://" + cfg.Host)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: server %q: %w", flag, cfg.Host, err)
	}
	base.Path = strings.TrimSuffix(base.Path, "/")
	return &client{http: httpClient, base: base, flag: flag, requests: requests}, nil
}

type countingTransport struct {
	next  http.RoundTripper
	count *atomic.Int64
}

func (t countingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	t.count.Add(1)
	return t.next.RoundTrip(req)
}

// where names the endpoint in errors: the flag and the server URL.
func (c *client) where() string { return c.flag + " (" + c.base.Redacted() + ")" }

// statusError is a request a server answered with an error status.
type statusError struct {
	code    int
	message string
}

func (e *statusError) Error() string {
	if e.message == "" {
		return http.StatusText(e.code)
	}
	return fmt.Sprintf("%d %s: %s", e.code, http.StatusText(e.code), e.message)
}

func isStatus(err error, code int) bool {
	var se *statusError
	return errors.As(err, &se) && se.code == code
}

// get sends GET path?query and returns the response of a 2xx answer; the
// caller closes its body. Any other answer is a *statusError carrying the
// Status message the server sent.
func (c *client) get(ctx context.Context, path string, query url.Values, accept string) (*http.Response, error) {
	u := *c.base
	u.Path += path
	u.RawQuery = query.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", accept)
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, c.transportError(err)
	}
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return resp, nil
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	var status struct {
		Message string `json:"message"`
	}
	if json.Unmarshal(body, &status) != nil || status.Message == "" {
		status.Message = strings.TrimSpace(string(body))
	}
	return nil, &statusError{code: resp.StatusCode, message: status.Message}
}

// transportError says why a server could not be asked at all.
func (c *client) transportError(err error) error {
	var verifyErr *tls.CertificateVerificationError
	var unknownAuthority x509.UnknownAuthorityError
	var hostnameErr x509.HostnameError
	var opErr *net.OpError
	var dnsErr *net.DNSError
	switch {
	case errors.As(err, &verifyErr), errors.As(err, &unknownAuthority), errors.As(err, &hostnameErr):
		return fmt.Errorf("%s: the server's certificate was not accepted: %w", c.where(), err)
	case errors.As(err, &opErr), errors.As(err, &dnsErr), errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("%s: the server is unreachable: %w", c.where(), err)
	}
	return fmt.Errorf("%s: %w", c.where(), err)
}

// requestError says what a failed request means for the check, naming the
// endpoint: a refused credential, a missing permission, or another answer.
func (c *client) requestError(what string, err error) error {
	var se *statusError
	if !errors.As(err, &se) {
		return fmt.Errorf("%s: %s: %w", c.where(), what, err)
	}
	switch se.code {
	case http.StatusUnauthorized:
		return fmt.Errorf("%s: %s: the server refused the credentials (401 Unauthorized)", c.where(), what)
	case http.StatusForbidden:
		return fmt.Errorf("%s: %s: forbidden (403: %s); the check needs the read-only permissions of host/deploy/check/rbac.yaml",
			c.where(), what, se.message)
	}
	return fmt.Errorf("%s: %s: %w", c.where(), what, err)
}

// getJSON GETs path and decodes the JSON answer into v.
func (c *client) getJSON(ctx context.Context, path, accept, what string, v any) error {
	resp, err := c.get(ctx, path, nil, accept)
	if err != nil {
		return c.requestError(what, err)
	}
	defer closeBody(resp)
	if err := decodeJSON(resp.Body, v); err != nil {
		return fmt.Errorf("%s: %s: the answer is not the JSON expected: %w", c.where(), what, err)
	}
	return nil
}

// version is the server's gitVersion.
func (c *client) version(ctx context.Context) (string, error) {
	var info struct {
		GitVersion string `json:"gitVersion"`
	}
	if err := c.getJSON(ctx, "/version", acceptJSON, "reading /version", &info); err != nil {
		return "", err
	}
	if info.GitVersion == "" {
		return "", fmt.Errorf("%s: /version names no gitVersion", c.where())
	}
	return info.GitVersion, nil
}

// discovery reads the server's own aggregated /apis and /api documents.
func (c *client) discovery(ctx context.Context) (apis, core discovery.GroupList, err error) {
	if apis, err = c.discoveryDocument(ctx, "/apis"); err != nil {
		return
	}
	core, err = c.discoveryDocument(ctx, "/api")
	return
}

func (c *client) discoveryDocument(ctx context.Context, path string) (discovery.GroupList, error) {
	what := "reading the discovery document " + path
	resp, err := c.get(ctx, path, nil, acceptAggregated)
	if err != nil {
		return discovery.GroupList{}, c.requestError(what, err)
	}
	defer closeBody(resp)
	mediaType, params, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if mediaType != "application/json" || params["g"] != "apidiscovery.k8s.io" || params["v"] != "v2" {
		return discovery.GroupList{}, fmt.Errorf("%s: %s: the server answered %q, not aggregated discovery "+
			"(apidiscovery.k8s.io/v2, served by Kubernetes 1.30 and later)", c.where(), what, resp.Header.Get("Content-Type"))
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return discovery.GroupList{}, c.transportError(err)
	}
	list, err := discovery.ParseGroupList(body)
	if err == nil {
		err = list.CheckPlacement(path == "/api")
	}
	if err != nil {
		return discovery.GroupList{}, fmt.Errorf("%s: %s: %w", c.where(), what, err)
	}
	return list, nil
}

// clusterUID is the UID of the kube-system namespace: servers answering the
// same UID share one storage, so objects listed through either are the same.
func (c *client) clusterUID(ctx context.Context) (string, error) {
	var ns struct {
		Metadata struct {
			UID string `json:"uid"`
		} `json:"metadata"`
	}
	if err := c.getJSON(ctx, "/api/v1/namespaces/kube-system", acceptMetadata, "reading namespace kube-system", &ns); err != nil {
		return "", err
	}
	return ns.Metadata.UID, nil
}

func decodeJSON(r io.Reader, v any) error { return json.NewDecoder(r).Decode(v) }

// closeBody reads what is left of a body before closing it: the connection
// is then reused, and the server has finished answering before the next
// request goes out.
func closeBody(resp *http.Response) {
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	resp.Body.Close()
}
