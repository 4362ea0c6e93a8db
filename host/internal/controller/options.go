package controller

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/rest"

	"github.com/skewgate/skewgate/discovery"
	"github.com/skewgate/skewgate/host/internal/certfile"
)

// Defaults for Options fields left zero.
const (
	DefaultPollInterval         = 5 * time.Second
	DefaultReadinessInterval    = time.Second
	DefaultFailureThreshold     = 3
	DefaultRequestTimeout       = 5 * time.Second
	DefaultGracePeriod          = 5 * time.Minute
	DefaultMaxResponseBytes     = 8 << 20
	DefaultMaxConcurrentFetches = 8
	// DefaultServerName is the name API servers' serving certificates are
	// verified against, as upstream does between peers.
	DefaultServerName = "kubernetes.default.svc"
)

// The request-header identity presented together with the front-proxy client
// certificate; API servers trust it because they trust the front-proxy CA.
const (
	RemoteUser  = "system:skewgate-controller"
	RemoteGroup = "system:authenticated"
)

// Membership says which servers are the members once the cluster's own
// membership has been read (the --apiserver-membership flag).
type Membership string

const (
	// MembershipCluster: the members are the servers the cluster announces;
	// StaticServers are only the bootstrap list, used until then.
	MembershipCluster Membership = "cluster"
	// MembershipListed: the members are StaticServers and LocalServer; the
	// cluster's membership is only compared with them.
	MembershipListed Membership = "listed"
)

// CheckMembership accepts a membership there is; listed says whether any
// server is listed (StaticServers, LocalServer).
func CheckMembership(m Membership, listed bool) error {
	switch {
	case m != MembershipCluster && m != MembershipListed:
		return fmt.Errorf("must be %s or %s", MembershipCluster, MembershipListed)
	case m == MembershipListed && !listed:
		return errors.New("no server is listed to be the members")
	}
	return nil
}

// Options configures a Controller. OnSnapshot, PeerCA, at least one source
// of servers and one kind of credentials are required; zero durations and
// limits take the defaults above.
type Options struct {
	// StaticServers are API server URLs, https://host:port (the --apiserver
	// flag). With cluster discovery they are the bootstrap list: the members
	// until the cluster's membership has been read (see Membership).
	StaticServers []string
	// LocalServer, when set, is the URL of the node's own API server (the
	// --local-apiserver flag): it is probed like a static server and named as
	// the snapshot's preferred server (node-local mode). It is a member
	// whatever the cluster announces; with cluster discovery, no
	// StaticServers and MembershipCluster, it joins with the cluster's first
	// read, not before.
	LocalServer string
	// RESTConfig, when set, makes the controller discover servers from the
	// cluster (identity Leases and the kubernetes Service's EndpointSlices). Its
	// credentials authenticate the controller to the servers when no front-proxy
	// certificate is given; its own TLS settings are replaced by PeerCA and
	// ServerName for those connections.
	RESTConfig *rest.Config
	// Cluster, when set, is listed and watched for the cluster discovery
	// instead of the cluster RESTConfig names; it also enables that discovery
	// on its own.
	Cluster *ClusterListers
	// Membership is which servers are the members once the cluster's
	// membership has been read; default MembershipCluster.
	Membership Membership

	// PeerCA holds the CA certificates that sign the servers' serving
	// certificates (--peer-ca-file). When it changes, new connections verify
	// with the new certificates; requests in flight finish.
	PeerCA *certfile.CABundle
	// ServerName is verified in every server's certificate; default
	// DefaultServerName.
	ServerName string
	// FrontProxyCertificate is the front-proxy client certificate; with it
	// the controller identifies as RemoteUser. Its changes are followed as
	// PeerCA's are.
	FrontProxyCertificate *certfile.KeyPair
	// CheckFrontProxyCertificate makes the controller ask a healthy server,
	// once per certificate, whether the front-proxy client certificate alone
	// (without X-Remote-User) authenticates as a user, and warn if it does.
	// Set it when the certificate also carries clients' asserted identities
	// (front-proxy identity mode).
	CheckFrontProxyCertificate bool

	// PollInterval is how often every server's documents are refreshed.
	PollInterval time.Duration
	// ReadinessInterval is how often /readyz is probed between those polls,
	// so that a server turning not ready (kube-apiserver answers 500
	// throughout its --shutdown-delay-duration) is seen within about a
	// second, before it stops listening. A probe is one small GET on a
	// kept-alive connection; kubeadm probes kube-apiserver's /readyz every
	// second too. At most PollInterval.
	ReadinessInterval time.Duration
	// FailureThreshold is how many consecutive probes must time out or lose
	// their connection before a server is marked unhealthy (kubeadm's
	// readiness probe allows 3): a loaded server or network misses a probe
	// now and then. A /readyz that answers anything but 200, a certificate
	// that is refused, or a refused connection marks it unhealthy at once.
	FailureThreshold int
	// RequestTimeout bounds each request to a server.
	RequestTimeout time.Duration
	// GracePeriod is how long a server that stopped answering, or stopped
	// being a member, stays in the snapshot (marked unhealthy) before it is
	// removed.
	GracePeriod time.Duration
	// MaxResponseBytes bounds every response body.
	MaxResponseBytes int64
	// MaxConcurrentFetches bounds how many servers are probed at once.
	MaxConcurrentFetches int

	// OnSnapshot receives every new snapshot. An error is logged, counted and
	// the same snapshot is offered again on the next poll; the snapshot becomes
	// Current only once accepted.
	OnSnapshot func(ctx context.Context, p Published) error
	// Logger receives structured logs; default slog.Default().
	Logger *slog.Logger
}

// complete validates o and fills in defaults.
func (o Options) complete() (Options, error) {
	if o.OnSnapshot == nil {
		return o, errors.New("controller: OnSnapshot is required")
	}
	if o.PeerCA == nil {
		return o, errors.New("controller: PeerCA is required: the CA that signs the API servers' serving certificates")
	}
	if len(o.StaticServers) == 0 && o.LocalServer == "" && o.RESTConfig == nil && o.Cluster == nil {
		return o, errors.New("controller: no API servers: give StaticServers, LocalServer, a RESTConfig or Cluster")
	}
	if o.CheckFrontProxyCertificate && o.FrontProxyCertificate == nil {
		return o, errors.New("controller: CheckFrontProxyCertificate needs FrontProxyCertificate")
	}
	if o.FrontProxyCertificate == nil && o.RESTConfig == nil {
		return o, errors.New("controller: no credentials for the API servers: give FrontProxyCertificate or a RESTConfig")
	}
	if o.Membership == "" {
		o.Membership = MembershipCluster
	}
	if err := CheckMembership(o.Membership, len(o.StaticServers) > 0 || o.LocalServer != ""); err != nil {
		return o, fmt.Errorf("controller: Membership %q: %w", o.Membership, err)
	}
	if o.ServerName == "" {
		o.ServerName = DefaultServerName
	}
	for _, d := range []struct {
		name  string
		value *time.Duration
		def   time.Duration
	}{
		{"PollInterval", &o.PollInterval, DefaultPollInterval},
		{"ReadinessInterval", &o.ReadinessInterval, DefaultReadinessInterval},
		{"RequestTimeout", &o.RequestTimeout, DefaultRequestTimeout},
		{"GracePeriod", &o.GracePeriod, DefaultGracePeriod},
	} {
		if *d.value < 0 {
			return o, fmt.Errorf("controller: %s must be positive, got %v", d.name, *d.value)
		}
		if *d.value == 0 {
			*d.value = d.def
		}
	}
	o.ReadinessInterval = min(o.ReadinessInterval, o.PollInterval)
	if o.FailureThreshold < 0 {
		return o, fmt.Errorf("controller: FailureThreshold must be positive, got %d", o.FailureThreshold)
	}
	if o.FailureThreshold == 0 {
		o.FailureThreshold = DefaultFailureThreshold
	}
	if o.MaxResponseBytes < 0 {
		return o, fmt.Errorf("controller: MaxResponseBytes must be positive, got %d", o.MaxResponseBytes)
	}
	if o.MaxResponseBytes == 0 {
		o.MaxResponseBytes = DefaultMaxResponseBytes
	}
	if o.MaxConcurrentFetches < 0 {
		return o, fmt.Errorf("controller: MaxConcurrentFetches must be positive, got %d", o.MaxConcurrentFetches)
	}
	if o.MaxConcurrentFetches == 0 {
		o.MaxConcurrentFetches = DefaultMaxConcurrentFetches
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o, nil
}

// backendClient is how the controller talks to API servers: an HTTP client
// that verifies every server against the peer CA and ServerName, and the
// identity headers to send with each request.
type backendClient struct {
	http     *http.Client
	identity http.Header
}

func newBackendClient(o Options) (*backendClient, error) {
	client := &backendClient{identity: http.Header{}}
	var transport http.RoundTripper
	if o.FrontProxyCertificate != nil {
		transport = &http.Transport{
			TLSClientConfig: &tls.Config{
				RootCAs:      o.PeerCA.Pool(),
				ServerName:   o.ServerName,
				Certificates: []tls.Certificate{*o.FrontProxyCertificate.Certificate()},
				MinVersion:   tls.VersionTLS12,
			},
			// Servers are addressed by their advertised IP on the control-plane
			// network: never through an environment proxy.
			Proxy:               nil,
			DialContext:         (&net.Dialer{Timeout: o.RequestTimeout, KeepAlive: 30 * time.Second}).DialContext,
			ForceAttemptHTTP2:   true,
			TLSHandshakeTimeout: o.RequestTimeout,
			MaxIdleConnsPerHost: 2,
			IdleConnTimeout:     90 * time.Second,
		}
		client.identity.Set("X-Remote-User", RemoteUser)
		client.identity.Set("X-Remote-Group", RemoteGroup)
	} else {
		var err error
		if transport, err = restTransport(o, o.PeerCA.PEM()); err != nil {
			return nil, err
		}
	}
	client.http = &http.Client{
		Transport: transport,
		// A redirect would carry the client certificate and identity elsewhere;
		// a 3xx is just a failed answer.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	return client, nil
}

// restTransport carries RESTConfig's credentials (token, client certificate,
// exec plugin ...) but verifies servers with the peer CA and ServerName,
// whatever the config says about TLS.
func restTransport(o Options, caPEM []byte) (http.RoundTripper, error) {
	cfg := rest.CopyConfig(o.RESTConfig)
	if cfg.Transport != nil {
		return nil, errors.New("controller: RESTConfig.Transport is set, so its TLS settings cannot be replaced by PeerCA and ServerName: give FrontProxyCertificate instead")
	}
	cfg.TLSClientConfig.Insecure = false
	cfg.TLSClientConfig.CAFile = ""
	cfg.TLSClientConfig.CAData = caPEM
	cfg.TLSClientConfig.ServerName = o.ServerName
	cfg.Proxy = func(*http.Request) (*url.URL, error) { return nil, nil }
	rt, err := rest.TransportFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("controller: RESTConfig credentials: %w", err)
	}
	return rt, nil
}

// A ServerURLError is an API server URL the controller cannot use, on its own
// or beside the others; Local tells that it was LocalServer (the
// --local-apiserver flag) rather than one of StaticServers (--apiserver).
type ServerURLError struct {
	URL   string
	Local bool
	Err   error
}

func (e *ServerURLError) Error() string {
	kind := "API server "
	if e.Local {
		kind = "local API server "
	}
	return kind + strconv.Quote(e.URL) + ": " + e.Err.Error()
}

func (e *ServerURLError) Unwrap() error { return e.Err }

// ParseServers canonicalises API server URLs (StaticServers and LocalServer,
// the --apiserver and --local-apiserver flags) to the host:port addresses
// whose ClusterName names their upstream. The local server, when given, comes
// first and may also be listed as static; any other server listed twice, or
// two servers whose cluster names clash, are refused. Every command that
// takes --apiserver parses it here.
func ParseServers(static []string, local string) (addresses []string, localAddress string, err error) {
	if local != "" {
		if localAddress, err = parseStaticServer(local); err != nil {
			return nil, "", &ServerURLError{URL: local, Local: true, Err: err}
		}
		addresses = append(addresses, localAddress)
	}
	byName := map[string]string{}
	if localAddress != "" {
		byName[ClusterName(localAddress)] = localAddress
	}
	for _, u := range static {
		address, err := parseStaticServer(u)
		if err != nil {
			return nil, "", &ServerURLError{URL: u, Err: err}
		}
		if address == localAddress {
			continue
		}
		if slices.Contains(addresses, address) {
			return nil, "", &ServerURLError{URL: u, Err: fmt.Errorf("listed twice (as %s)", address)}
		}
		name := ClusterName(address)
		if other, dup := byName[name]; dup {
			return nil, "", &ServerURLError{URL: u, Err: fmt.Errorf("it and %s both get the cluster name %s", other, name)}
		}
		byName[name] = address
		addresses = append(addresses, address)
	}
	if len(addresses) > discovery.MaxServers {
		return nil, "", fmt.Errorf("%d API servers, at most %d are supported", len(addresses), discovery.MaxServers)
	}
	return addresses, localAddress, nil
}

// parseStaticServer turns an API server URL into the canonical host:port: an
// https URL naming an IP address or a DNS name and at most a port, nothing
// else.
func parseStaticServer(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", err
	}
	if u.Scheme != "https" {
		return "", errors.New("must be an https:// URL")
	}
	if u.Opaque != "" || u.User != nil || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
		return "", errors.New("must be https://host:port with nothing after the port")
	}
	host := u.Hostname()
	if host == "" {
		return "", errors.New("no host")
	}
	port := 443
	if p := u.Port(); p != "" {
		port, err = strconv.Atoi(p)
		if err != nil || port < 1 || port > 65535 {
			return "", errors.New("port must be 1 to 65535")
		}
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		return canonicalAddress(ip, uint16(port))
	}
	host = strings.ToLower(host)
	if len(validation.IsDNS1123Subdomain(host)) > 0 {
		return "", fmt.Errorf("host %q is neither an IP address nor a DNS name", host)
	}
	address := net.JoinHostPort(host, strconv.Itoa(port))
	if len(ClusterName(address)) > maxNameLength {
		return "", errors.New("host name too long")
	}
	return address, nil
}
