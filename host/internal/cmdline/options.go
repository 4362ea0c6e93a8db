package cmdline

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/skewgate/skewgate/host/internal/controller"
	pluginconfig "github.com/skewgate/skewgate/plugin/config"
)

// The option groups below are shared by the commands that take them, in
// k8s.io/apiserver's options pattern: a constructor sets the defaults,
// AddFlags registers each field as a flag with its current value as the
// default, and Validate reports every mistake naming the flag. A command
// that renders configuration for another process (skewgate envoy config)
// takes the same groups as the process it configures, so that the two cannot
// disagree on a flag's name, default or meaning.

// Defaults of the serving options.
const (
	DefaultBindAddress = "0.0.0.0"
	// DefaultNodeLocalBindAddress is where skewgate serve's node-local mode
	// listens: only the node's own components are its clients.
	DefaultNodeLocalBindAddress = "127.0.0.1"
	DefaultSecurePort           = 6443
)

// FileFlag is a flag naming a file, and the file it names.
type FileFlag struct{ Flag, Path string }

// CheckReadable reports every file that cannot be opened, naming its flag;
// for a command that reads the files itself.
func CheckReadable(files []FileFlag) []error {
	var errs []error
	for _, f := range files {
		file, err := os.Open(f.Path)
		if err != nil {
			errs = append(errs, fmt.Errorf("--%s: %w", f.Flag, err))
			continue
		}
		file.Close()
	}
	return errs
}

// ServingOptions are where the gateway serves clients: skewgate serve
// itself, or the Envoy skewgate envoy config renders.
type ServingOptions struct {
	// BindAddress is an IP address; empty: DefaultBindAddress, or
	// DefaultNodeLocalBindAddress in skewgate serve's node-local mode.
	BindAddress string
	SecurePort  int
	// TLSCertFile and TLSPrivateKeyFile are the serving certificate.
	TLSCertFile, TLSPrivateKeyFile string
	// ClientCAFile verifies client certificates, when clients present one.
	ClientCAFile string
}

// NewServingOptions are the serving defaults.
func NewServingOptions() ServingOptions {
	return ServingOptions{SecurePort: DefaultSecurePort}
}

// AddFlags registers the serving flags.
func (o *ServingOptions) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.BindAddress, "bind-address", o.BindAddress, "IP address the gateway listens on (default "+DefaultBindAddress+"; "+DefaultNodeLocalBindAddress+" in skewgate serve's node-local mode, which allows only loopback)")
	fs.IntVar(&o.SecurePort, "secure-port", o.SecurePort, "port the gateway serves HTTPS on")
	fs.StringVar(&o.TLSCertFile, "tls-cert-file", o.TLSCertFile, "the gateway's serving certificate (PEM); skewgate serve reloads it when the file changes")
	fs.StringVar(&o.TLSPrivateKeyFile, "tls-private-key-file", o.TLSPrivateKeyFile, "the serving certificate's private key (PEM)")
	fs.StringVar(&o.ClientCAFile, "client-ca-file", o.ClientCAFile, "CA certificates that verify client certificates, when clients present one (required in front-proxy identity mode); skewgate serve reloads them when the file changes")
}

// Validate reports the serving options' mistakes; plugin says whether
// clients' identities are asserted from their certificates.
func (o *ServingOptions) Validate(plugin *PluginOptions) []error {
	var errs []error
	if plugin.FrontProxy() && o.ClientCAFile == "" {
		errs = append(errs, errors.New("--identity-mode=front-proxy needs --client-ca-file: asserted identities come from verified client certificates"))
	}
	if o.BindAddress != "" {
		if _, err := netip.ParseAddr(o.BindAddress); err != nil {
			errs = append(errs, fmt.Errorf("--bind-address %s: must be an IP address", o.BindAddress))
		}
	}
	if o.SecurePort < 1 || o.SecurePort > 65535 {
		errs = append(errs, fmt.Errorf("--secure-port %d: must be 1 to 65535", o.SecurePort))
	}
	if o.TLSCertFile == "" || o.TLSPrivateKeyFile == "" {
		errs = append(errs, errors.New("--tls-cert-file and --tls-private-key-file are required"))
	}
	return errs
}

// Files are the files the serving options name.
func (o *ServingOptions) Files() []FileFlag {
	return files(FileFlag{"tls-cert-file", o.TLSCertFile}, FileFlag{"tls-private-key-file", o.TLSPrivateKeyFile}, FileFlag{"client-ca-file", o.ClientCAFile})
}

// UpstreamOptions are the API servers and how they are reached: every
// command that proxies to them, configures a proxy for them, or polls them.
type UpstreamOptions struct {
	// APIServers are static API server URLs (https://host:port).
	APIServers []string
	// PeerCAFile verifies the API servers' serving certificates.
	PeerCAFile string
	// ProxyClientCertFile and ProxyClientKeyFile are the front-proxy client
	// certificate: the controller always identifies with it; the gateway
	// presents it only in front-proxy identity mode.
	ProxyClientCertFile, ProxyClientKeyFile string
}

// AddFlags registers the upstream flags.
func (o *UpstreamOptions) AddFlags(fs *pflag.FlagSet) {
	fs.StringArrayVar(&o.APIServers, "apiserver", o.APIServers, "API server URL https://host:port (repeatable)")
	fs.StringVar(&o.PeerCAFile, "peer-ca-file", o.PeerCAFile, "CA certificates that sign the API servers' serving certificates; skewgate reloads them when the file changes")
	fs.StringVar(&o.ProxyClientCertFile, "proxy-client-cert-file", o.ProxyClientCertFile, "front-proxy client certificate: the controller authenticates with it, and in front-proxy identity mode the gateway presents it on requests whose identity it asserts; skewgate reloads it when the file changes")
	fs.StringVar(&o.ProxyClientKeyFile, "proxy-client-key-file", o.ProxyClientKeyFile, "the front-proxy client certificate's private key")
}

// Validate reports the upstream options' mistakes; localAPIServer is
// skewgate serve's --local-apiserver, checked with the others (empty:
// none).
func (o *UpstreamOptions) Validate(localAPIServer string) []error {
	var errs []error
	if o.PeerCAFile == "" {
		errs = append(errs, errors.New("--peer-ca-file is required: the CA that signs the API servers' serving certificates"))
	}
	if _, _, err := controller.ParseServers(o.APIServers, localAPIServer); err != nil {
		errs = append(errs, APIServerFlagError(err))
	}
	if (o.ProxyClientCertFile == "") != (o.ProxyClientKeyFile == "") {
		errs = append(errs, errors.New("--proxy-client-cert-file and --proxy-client-key-file go together"))
	}
	return errs
}

// ApplyTo sets the controller's static servers; the certificates the files
// hold are read by whoever follows them.
func (o *UpstreamOptions) ApplyTo(opts *controller.Options) { opts.StaticServers = o.APIServers }

// Files are the files the upstream options name.
func (o *UpstreamOptions) Files() []FileFlag {
	return files(FileFlag{"peer-ca-file", o.PeerCAFile}, FileFlag{"proxy-client-cert-file", o.ProxyClientCertFile}, FileFlag{"proxy-client-key-file", o.ProxyClientKeyFile})
}

// APIServerFlagError names the flag, --apiserver or --local-apiserver, of an
// error controller.ParseServers returned.
func APIServerFlagError(err error) error {
	var bad *controller.ServerURLError
	switch {
	case errors.As(err, &bad) && bad.Local:
		return fmt.Errorf("--local-apiserver %q: %w", bad.URL, bad.Err)
	case bad != nil:
		return fmt.Errorf("--apiserver %q: %w", bad.URL, bad.Err)
	}
	return fmt.Errorf("--apiserver: %w", err)
}

// ControllerOptions are how the controller finds and polls the API servers:
// every command that runs one takes them.
type ControllerOptions struct {
	// Kubeconfig, when set, lets the controller discover API servers from the
	// cluster and, without a proxy client certificate, authenticate with it.
	Kubeconfig string
	// Membership is which API servers are the members once the cluster's
	// have been read (controller.Membership).
	Membership string
	// PeerServerName is the name verified in every API server's certificate.
	PeerServerName                               string
	PollInterval, ReadinessInterval, GracePeriod time.Duration
}

// NewControllerOptions are the controller's defaults.
func NewControllerOptions() ControllerOptions {
	return ControllerOptions{
		Membership:        string(controller.MembershipCluster),
		PeerServerName:    controller.DefaultServerName,
		PollInterval:      controller.DefaultPollInterval,
		ReadinessInterval: controller.DefaultReadinessInterval,
		GracePeriod:       controller.DefaultGracePeriod,
	}
}

// ApplyTo sets what these options decide of the controller's options: the
// membership, the server name, the intervals and, from --kubeconfig, its
// REST configuration.
func (o ControllerOptions) ApplyTo(opts *controller.Options) error {
	opts.Membership = controller.Membership(o.Membership)
	opts.ServerName = o.PeerServerName
	opts.PollInterval, opts.ReadinessInterval, opts.GracePeriod = o.PollInterval, o.ReadinessInterval, o.GracePeriod
	if o.Kubeconfig == "" {
		return nil
	}
	rc, err := clientcmd.BuildConfigFromFlags("", o.Kubeconfig)
	if err != nil {
		return fmt.Errorf("--kubeconfig: %w", err)
	}
	opts.RESTConfig = rc
	return nil
}

// AddFlags registers the controller flags.
func (o *ControllerOptions) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Kubeconfig, "kubeconfig", o.Kubeconfig, "kubeconfig for discovering API servers from identity leases and the kubernetes Service")
	fs.StringVar(&o.Membership, "apiserver-membership", o.Membership, "which API servers are routed to once the --kubeconfig cluster has been read: "+
		string(controller.MembershipCluster)+" (those its identity leases and kubernetes Service announce; --apiserver is only the bootstrap list, used until then) or "+
		string(controller.MembershipListed)+" (--apiserver and --local-apiserver; the cluster's are only compared with them)")
	fs.StringVar(&o.PeerServerName, "peer-server-name", o.PeerServerName, "name verified in every API server's serving certificate")
	fs.DurationVar(&o.PollInterval, "poll-interval", o.PollInterval, "how often every API server's discovery documents are refreshed")
	fs.DurationVar(&o.ReadinessInterval, "readiness-interval", o.ReadinessInterval, "how often every API server's /readyz is probed between polls (at most --poll-interval)")
	fs.DurationVar(&o.GracePeriod, "grace-period", o.GracePeriod, "how long an unreachable API server stays in discovery")
}

// Validate reports the controller options' mistakes; upstream are the API
// servers and credentials it is given, localAPIServer skewgate serve's
// --local-apiserver.
func (o *ControllerOptions) Validate(upstream *UpstreamOptions, localAPIServer string) []error {
	var errs []error
	if len(upstream.APIServers) == 0 && localAPIServer == "" && o.Kubeconfig == "" {
		errs = append(errs, errors.New("no API servers: give --apiserver (repeatable), --local-apiserver or --kubeconfig"))
	}
	if upstream.ProxyClientCertFile == "" && o.Kubeconfig == "" {
		errs = append(errs, errors.New("no credentials for the API servers: give --proxy-client-cert-file and --proxy-client-key-file, or --kubeconfig"))
	}
	if err := controller.CheckMembership(controller.Membership(o.Membership), len(upstream.APIServers) > 0 || localAPIServer != ""); err != nil {
		errs = append(errs, fmt.Errorf("--apiserver-membership %q: %w", o.Membership, err))
	}
	if err := CheckDNSName(o.PeerServerName); err != nil {
		errs = append(errs, fmt.Errorf("--peer-server-name %q: %w", o.PeerServerName, err))
	}
	for _, d := range []struct {
		flag  string
		value time.Duration
	}{{"poll-interval", o.PollInterval}, {"readiness-interval", o.ReadinessInterval}, {"grace-period", o.GracePeriod}} {
		if d.value < 0 {
			errs = append(errs, fmt.Errorf("--%s %v: must not be negative", d.flag, d.value))
		}
	}
	return errs
}

// Files are the files the controller options name.
func (o *ControllerOptions) Files() []FileFlag { return files(FileFlag{"kubeconfig", o.Kubeconfig}) }

// PluginOptions are the plugin configuration's settings: every command that
// configures the plugin, or renders the Envoy configuration around it, takes
// them.
type PluginOptions struct {
	// IdentityMode is passthrough or front-proxy.
	IdentityMode string
	// RoutingHeader carries the chosen upstream from the plugin to the proxy.
	RoutingHeader string
	// RetryAfterSeconds is announced with the 503 and 429 answers.
	RetryAfterSeconds int
	// DiscoveryAuthorizationCache is how long the plugin reuses an API
	// server's answer to whether a credential may read merged discovery, in
	// whole seconds; zero asks on every request.
	DiscoveryAuthorizationCache time.Duration
	// SchemaSkewRouting says which requests for a resource whose schemas
	// differ between the servers go only to the servers whose schema has
	// every field.
	SchemaSkewRouting string
	// RouteWritesByBody lets the plugin route a write of such a resource by
	// the fields its body sets.
	RouteWritesByBody bool
}

// NewPluginOptions are the plugin's defaults.
func NewPluginOptions() PluginOptions {
	d := pluginconfig.Defaults()
	return PluginOptions{
		IdentityMode:                string(d.IdentityMode),
		RoutingHeader:               d.RoutingHeader,
		RetryAfterSeconds:           d.RetryAfterSeconds,
		DiscoveryAuthorizationCache: time.Duration(d.DiscoveryAuthorizationCacheSeconds) * time.Second,
		SchemaSkewRouting:           string(d.SchemaSkewRouting),
		// skewgate's host hands the plugin the body; so does Envoy from 1.35.
		RouteWritesByBody: true,
	}
}

// maxDiscoveryAuthorizationCache is the longest the plugin accepts.
const maxDiscoveryAuthorizationCache = pluginconfig.MaxDiscoveryAuthorizationCacheSeconds * time.Second

// AddFlags registers the plugin flags.
func (o *PluginOptions) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.IdentityMode, "identity-mode", o.IdentityMode, string(pluginconfig.IdentityPassthrough)+" (forward credentials) or "+string(pluginconfig.IdentityFrontProxy)+" (assert verified client certificates as X-Remote-* headers)")
	fs.StringVar(&o.RoutingHeader, "routing-header", o.RoutingHeader, "internal header carrying the chosen upstream (a lower-case header name the plugin does not own)")
	fs.IntVar(&o.RetryAfterSeconds, "retry-after-seconds", o.RetryAfterSeconds, "Retry-After announced with the gateway's 503 and 429 answers (1 to "+strconv.Itoa(pluginconfig.MaxRetryAfterSeconds)+")")
	fs.DurationVar(&o.DiscoveryAuthorizationCache, "discovery-authorization-cache", o.DiscoveryAuthorizationCache, "how long an API server's answer to whether a credential may read merged discovery is reused (whole seconds, at most "+maxDiscoveryAuthorizationCache.String()+"; 0: ask on every request)")
	fs.StringVar(&o.SchemaSkewRouting, "schema-skew-routing", o.SchemaSkewRouting, "which requests for a resource whose schema lacks fields on some API servers go only to the servers whose schema has them all: "+
		string(pluginconfig.SchemaSkewReadsAndWrites)+" (every request: a client that updates what it read through a server lacking a field would clear it) or "+string(pluginconfig.SchemaSkewWrites)+" (creates, updates, patches and deletes; reads spread over every server)")
	fs.BoolVar(&o.RouteWritesByBody, "route-writes-by-body", o.RouteWritesByBody, "read the JSON body (at most 1 MiB) of a create, update or patch of a resource whose schemas differ between the API servers, and send it to the servers whose schema has every field it sets; "+
		"in Envoy this needs 1.35 or later (the rendered filter sets allow_on_headers_stop_iteration): false for older Envoys")
}

// Validate reports the plugin options' mistakes; upstream are the
// credentials front-proxy identity mode needs.
func (o *PluginOptions) Validate(upstream *UpstreamOptions) []error {
	var errs []error
	switch mode := pluginconfig.IdentityMode(o.IdentityMode); {
	case o.FrontProxy():
		if upstream.ProxyClientCertFile == "" {
			errs = append(errs, errors.New("--identity-mode=front-proxy needs --proxy-client-cert-file and --proxy-client-key-file"))
		}
	case pluginconfig.CheckIdentityMode(mode) != nil:
		errs = append(errs, fmt.Errorf("--identity-mode %q: %w", o.IdentityMode, pluginconfig.CheckIdentityMode(mode)))
	}
	if err := pluginconfig.CheckRoutingHeader(o.RoutingHeader); err != nil {
		errs = append(errs, fmt.Errorf("--routing-header %q: %w", o.RoutingHeader, err))
	}
	if err := pluginconfig.CheckRetryAfterSeconds(int64(o.RetryAfterSeconds)); err != nil {
		errs = append(errs, fmt.Errorf("--retry-after-seconds %d: %w", o.RetryAfterSeconds, err))
	}
	if d := o.DiscoveryAuthorizationCache; d < 0 {
		errs = append(errs, fmt.Errorf("--discovery-authorization-cache %v: must not be negative", d))
	} else if d > maxDiscoveryAuthorizationCache || d%time.Second != 0 {
		errs = append(errs, fmt.Errorf("--discovery-authorization-cache %v: must be whole seconds, at most %v", d, maxDiscoveryAuthorizationCache))
	}
	if err := pluginconfig.CheckSchemaSkewRouting(pluginconfig.SchemaSkewRouting(o.SchemaSkewRouting)); err != nil {
		errs = append(errs, fmt.Errorf("--schema-skew-routing %q: %w", o.SchemaSkewRouting, err))
	}
	return errs
}

// FrontProxy reports front-proxy identity mode: the gateway asserts
// verified client certificates and presents the front-proxy client
// certificate with them, which is why the controller checks what that
// certificate alone is allowed.
func (o *PluginOptions) FrontProxy() bool {
	return pluginconfig.IdentityMode(o.IdentityMode) == pluginconfig.IdentityFrontProxy
}

// ApplyTo sets whether the controller checks the front-proxy client
// certificate: only front-proxy mode presents it for clients.
func (o *PluginOptions) ApplyTo(opts *controller.Options) {
	opts.CheckFrontProxyCertificate = o.FrontProxy()
}

// Config is the plugin configuration's options these flags set.
func (o *PluginOptions) Config() pluginconfig.Options {
	return pluginconfig.Options{
		RoutingHeader:                      o.RoutingHeader,
		RetryAfterSeconds:                  o.RetryAfterSeconds,
		IdentityMode:                       pluginconfig.IdentityMode(o.IdentityMode),
		DiscoveryAuthorizationCacheSeconds: int(o.DiscoveryAuthorizationCache / time.Second),
		SchemaSkewRouting:                  pluginconfig.SchemaSkewRouting(o.SchemaSkewRouting),
		RouteWritesByBody:                  o.RouteWritesByBody,
	}
}

// CheckDNSName accepts a DNS name (RFC 1123 subdomain).
func CheckDNSName(name string) error {
	if msgs := validation.IsDNS1123Subdomain(name); len(msgs) > 0 {
		return errors.New(msgs[0])
	}
	return nil
}

// files drops the flags left empty.
func files(all ...FileFlag) []FileFlag {
	var out []FileFlag
	for _, f := range all {
		if f.Path != "" {
			out = append(out, f)
		}
	}
	return out
}
