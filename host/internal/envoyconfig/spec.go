// Package envoyconfig renders the Envoy configuration that runs skewgate's
// proxy-wasm plugin in front of a set of kube-apiservers: a static bootstrap
// with the plugin inline (Render), a bootstrap that receives the plugin through
// file-based ECDS (RenderECDS), the ECDS resource file a controller rewrites
// to push new plugin configuration (RenderECDSResource, WriteECDSFile), and a
// bootstrap that receives the same resource (RenderExtensionConfig) from a
// gRPC management server (RenderXDS).
//
// Output is deterministic: the same Spec always yields the same bytes, so a
// rendered file can be checked in and compared.
package envoyconfig

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"path"
	"slices"
	"strings"

	"github.com/skewgate/skewgate/plugin/config"
)

// Names shared by every rendered document.
const (
	// FilterName names the HTTP filter, the Wasm plugin, its VM and root
	// context, and the ECDS resource (which must equal the filter name).
	FilterName = "skewgate"
	// DefaultRoutingHeader is the plugin's default steering header.
	DefaultRoutingHeader = config.DefaultRoutingHeader
	// DefaultAllServersCluster balances over every API server; requests the
	// plugin does not steer go there.
	DefaultAllServersCluster = "apiserver-all"
	// APIServerSNI is the name every kube-apiserver serving certificate carries
	// (the in-cluster service name), so one SNI and one SAN check fit all.
	APIServerSNI = "kubernetes.default.svc"

	defaultNodeID = "skewgate"
	// DefaultAdminPort is where Envoy's admin interface listens, on
	// 127.0.0.1 only, when a Spec leaves AdminPort zero.
	DefaultAdminPort  = 9901
	defaultListenAddr = "0.0.0.0"
	defaultListenPort = 6443
)

// IdentityMode says how client identity reaches the API servers; it must equal
// the plugin configuration's identityMode. In front-proxy mode Envoy presents
// the front-proxy client certificate on the "+front-proxy" clusters only, to
// which the plugin steers exactly the requests whose identity it asserts:
// every other request reaches the API servers with the client's own
// credentials or none, never as the front proxy.
type IdentityMode = config.IdentityMode

// Server is one kube-apiserver and the Envoy clusters that reach only it.
type Server struct {
	// Cluster is the Envoy cluster name, the value the plugin writes into the
	// routing header (the snapshot's "cluster"). In front-proxy mode the
	// server also gets the cluster Cluster+discovery.FrontProxyClusterSuffix.
	Cluster string
	// Address is an IP address or a DNS name.
	Address string
	Port    uint32
}

// Spec describes one Envoy in front of a set of API servers. All file paths are
// paths on the Envoy host and must be absolute.
type Spec struct {
	NodeID    string // default "skewgate"
	AdminPort uint32 // admin listens on 127.0.0.1 only; default 9901

	ListenAddress string // default 0.0.0.0
	ListenPort    uint32 // default 6443

	ServingCertPath string
	ServingKeyPath  string
	// ClientCAPath, when set, makes Envoy require and verify client
	// certificates. Required in front-proxy mode: the asserted identity comes
	// from the verified certificate.
	ClientCAPath string

	// ClusterCAPath verifies the API servers' serving certificates.
	ClusterCAPath string
	// FrontProxyCertPath and FrontProxyKeyPath are the requestheader client
	// certificate Envoy presents upstream in front-proxy mode, on the
	// "+front-proxy" clusters only.
	FrontProxyCertPath string
	FrontProxyKeyPath  string

	IdentityMode      IdentityMode
	RoutingHeader     string // default DefaultRoutingHeader
	AllServersCluster string // default DefaultAllServersCluster
	Servers           []Server

	// WasmPath and PluginConfig are the plugin module and its JSON
	// configuration, used by Render. RenderECDS does not read them: with ECDS
	// they travel in the resource file (RenderECDSResource).
	WasmPath     string
	PluginConfig []byte
}

// normalized returns a copy with defaults filled in and servers sorted by
// cluster name, so equal server sets render identically, and every defect.
func (s Spec) normalized() (Spec, error) {
	if s.NodeID == "" {
		s.NodeID = defaultNodeID
	}
	if s.AdminPort == 0 {
		s.AdminPort = DefaultAdminPort
	}
	if s.ListenAddress == "" {
		s.ListenAddress = defaultListenAddr
	}
	if s.ListenPort == 0 {
		s.ListenPort = defaultListenPort
	}
	if s.RoutingHeader == "" {
		s.RoutingHeader = DefaultRoutingHeader
	}
	if s.AllServersCluster == "" {
		s.AllServersCluster = DefaultAllServersCluster
	}
	s.Servers = slices.Clone(s.Servers)
	slices.SortFunc(s.Servers, func(a, b Server) int { return strings.Compare(a.Cluster, b.Cluster) })
	return s, s.validate()
}

func (s *Spec) validate() error {
	var errs []error
	if err := checkToken(s.NodeID); err != nil {
		errs = append(errs, fmt.Errorf("node ID: %w", err))
	}
	if err := checkPort(s.AdminPort); err != nil {
		errs = append(errs, fmt.Errorf("admin port: %w", err))
	}
	if _, err := netip.ParseAddr(s.ListenAddress); err != nil {
		errs = append(errs, fmt.Errorf("listen address: must be an IP address: %w", err))
	}
	if err := checkPort(s.ListenPort); err != nil {
		errs = append(errs, fmt.Errorf("listen port: %w", err))
	}
	if s.ListenPort == s.AdminPort {
		errs = append(errs, fmt.Errorf("listen port and admin port are both %d", s.ListenPort))
	}
	for _, f := range []struct{ name, path string }{
		{"serving certificate", s.ServingCertPath},
		{"serving key", s.ServingKeyPath},
		{"cluster CA", s.ClusterCAPath},
	} {
		if err := checkPath(f.path); err != nil {
			errs = append(errs, fmt.Errorf("%s path: %w", f.name, err))
		}
	}
	if s.ClientCAPath != "" {
		if err := checkPath(s.ClientCAPath); err != nil {
			errs = append(errs, fmt.Errorf("client CA path: %w", err))
		}
	}
	switch s.IdentityMode {
	case config.IdentityFrontProxy:
		if s.ClientCAPath == "" {
			errs = append(errs, errors.New("front-proxy identity mode needs a client CA: the asserted identity comes from a verified client certificate"))
		}
		for _, f := range []struct{ name, path string }{
			{"front-proxy certificate", s.FrontProxyCertPath},
			{"front-proxy key", s.FrontProxyKeyPath},
		} {
			if err := checkPath(f.path); err != nil {
				errs = append(errs, fmt.Errorf("%s path: %w", f.name, err))
			}
		}
	case config.IdentityPassthrough:
		// The API servers trust X-Remote-* headers on a connection that carries
		// the front-proxy certificate; without the plugin asserting identity,
		// presenting it would let clients choose their identity.
		if s.FrontProxyCertPath != "" || s.FrontProxyKeyPath != "" {
			errs = append(errs, errors.New("passthrough identity mode must not present a front-proxy client certificate"))
		}
	default:
		errs = append(errs, fmt.Errorf("identity mode %q: %w", s.IdentityMode, config.CheckIdentityMode(s.IdentityMode)))
	}
	if err := config.CheckRoutingHeader(s.RoutingHeader); err != nil {
		errs = append(errs, fmt.Errorf("routing header %q: %w", s.RoutingHeader, err))
	}
	if err := checkClusterName(s.AllServersCluster); err != nil {
		errs = append(errs, fmt.Errorf("all-servers cluster: %w", err))
	}
	if len(s.Servers) == 0 {
		errs = append(errs, errors.New("servers: need at least one API server"))
	}
	seen := map[string]bool{s.AllServersCluster: true}
	for i, srv := range s.Servers {
		if err := checkClusterName(srv.Cluster); err != nil {
			errs = append(errs, fmt.Errorf("servers[%d]: cluster: %w", i, err))
		} else if seen[srv.Cluster] {
			errs = append(errs, fmt.Errorf("servers[%d]: cluster %q is used twice", i, srv.Cluster))
		}
		seen[srv.Cluster] = true
		if err := checkAddress(srv.Address); err != nil {
			errs = append(errs, fmt.Errorf("servers[%d] (%s): address: %w", i, srv.Cluster, err))
		}
		if err := checkPort(srv.Port); err != nil {
			errs = append(errs, fmt.Errorf("servers[%d] (%s): port: %w", i, srv.Cluster, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("envoyconfig: invalid spec: %w", err)
	}
	return nil
}

// CheckPluginConfig reports whether a plugin configuration fits this Spec: a
// JSON object whose fields the plugin accepts, the routing header the route
// matches, the same identity mode, and a snapshot whose clusters all exist.
// Render calls it; a controller calls it before RenderECDSResource, because a
// mismatch fails requests at runtime rather than at load time.
func (s Spec) CheckPluginConfig(pluginConfigJSON []byte) error {
	n, err := s.normalized()
	if err != nil {
		return err
	}
	return n.checkPluginConfig(pluginConfigJSON)
}

func (s *Spec) checkPluginConfig(raw []byte) error {
	// The plugin's own rules, defaults included, judge every field and the
	// snapshot.
	cfg, err := config.Parse(raw)
	if err != nil {
		return fmt.Errorf("envoyconfig: plugin %w", err)
	}
	if cfg.RoutingHeader != s.RoutingHeader {
		return fmt.Errorf("envoyconfig: plugin configuration: routingHeader %q differs from the routed header %q", cfg.RoutingHeader, s.RoutingHeader)
	}
	if cfg.IdentityMode != s.IdentityMode {
		return fmt.Errorf("envoyconfig: plugin configuration: identityMode %q differs from the spec's %q", cfg.IdentityMode, s.IdentityMode)
	}
	for i, srv := range cfg.Snapshot.Servers {
		if !slices.ContainsFunc(s.Servers, func(c Server) bool { return c.Cluster == srv.Cluster }) {
			return fmt.Errorf("envoyconfig: plugin configuration: snapshot: servers[%d]: cluster %q is not one of the rendered per-server clusters", i, srv.Cluster)
		}
	}
	return nil
}

// compactJSON strips insignificant whitespace so the embedded configuration is
// byte-stable and as small as possible.
func compactJSON(raw []byte) (string, error) {
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return "", fmt.Errorf("envoyconfig: plugin configuration: %w", err)
	}
	return b.String(), nil
}

func checkPort(p uint32) error {
	if p == 0 || p > 65535 {
		return fmt.Errorf("%d is not a TCP port", p)
	}
	return nil
}

func checkPath(p string) error {
	if p == "" {
		return errors.New("missing")
	}
	if !path.IsAbs(p) || path.Clean(p) != p {
		return fmt.Errorf("%q must be a clean absolute path", p)
	}
	if strings.ContainsFunc(p, func(r rune) bool { return r < ' ' || r == 0x7f }) {
		return fmt.Errorf("%q contains control characters", p)
	}
	return nil
}

// checkToken accepts the printable, space-free ASCII the plugin accepts in
// snapshot tokens.
func checkToken(v string) error {
	if v == "" {
		return errors.New("must not be empty")
	}
	if len(v) > 253 {
		return errors.New("longer than 253 characters")
	}
	for i := 0; i < len(v); i++ {
		if c := v[i]; c <= ' ' || c >= 0x7f {
			return fmt.Errorf("%q: character %q is not allowed", v, c)
		}
	}
	return nil
}

// checkClusterName keeps cluster names to characters that are safe in a header
// value, a stats name and a YAML plain scalar.
func checkClusterName(name string) error {
	if name == "" {
		return errors.New("must not be empty")
	}
	if len(name) > 253 {
		return errors.New("longer than 253 characters")
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case (c == '-' || c == '.' || c == '_') && i > 0:
		default:
			return fmt.Errorf("%q: only lower-case letters, digits and inner '-', '.', '_' are allowed", name)
		}
	}
	return nil
}

// checkAddress accepts an IP address or a DNS name.
func checkAddress(addr string) error {
	if _, err := netip.ParseAddr(addr); err == nil {
		return nil
	}
	if addr == "" || len(addr) > 253 {
		return fmt.Errorf("%q is neither an IP address nor a DNS name", addr)
	}
	for _, label := range strings.Split(strings.TrimSuffix(addr, "."), ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return fmt.Errorf("%q is neither an IP address nor a DNS name", addr)
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-') {
				return fmt.Errorf("%q is neither an IP address nor a DNS name", addr)
			}
		}
	}
	return nil
}

// allIPs reports whether every server address is an IP literal, which lets the
// clusters be STATIC instead of resolving DNS.
func allIPs(servers []Server) bool {
	for _, s := range servers {
		if _, err := netip.ParseAddr(s.Address); err != nil {
			return false
		}
	}
	return true
}
