package main

import (
	"fmt"
	"strings"

	"github.com/skewgate/skewgate/discovery"
)

// IdentityMode says what the plugin does with the downstream client's identity.
type IdentityMode uint8

const (
	// IdentityPassthrough forwards credentials (bearer tokens) untouched and
	// removes every inbound X-Remote-* header.
	IdentityPassthrough IdentityMode = iota
	// IdentityFrontProxy additionally asserts the identity of a client
	// certificate that the gateway verified, as X-Remote-User/X-Remote-Group
	// headers that the API servers trust from the gateway's front-proxy
	// certificate.
	IdentityFrontProxy
)

const (
	defaultRoutingHeader     = "x-skewgate-upstream"
	defaultRetryAfterSeconds = 5
	maxRetryAfterSeconds     = 3600
	// By default a credential's permission to read discovery is rechecked
	// after as long as kube-apiserver caches a token's successful
	// authentication (10 s).
	defaultDiscoveryAuthorizationCacheSeconds = 10
	maxDiscoveryAuthorizationCacheSeconds     = 300
)

// Config is the validated plugin configuration with its derived index.
type Config struct {
	RoutingHeader          string
	RetryAfterSeconds      int
	TrustPeerProxiedHeader bool
	Identity               IdentityMode
	// DiscoveryAuthorizationCacheSeconds is how long an API server's answer
	// to "may this credential read discovery?" is reused; 0 asks on every
	// merged discovery request.
	DiscoveryAuthorizationCacheSeconds int
	Index                              *discovery.Index
	// frontProxyClusters[i] is the cluster that reaches Index.Servers()[i]
	// with the front-proxy certificate, built once instead of per request.
	frontProxyClusters []string
}

var knownConfigFields = map[string]bool{
	"routingHeader": true, "retryAfterSeconds": true, "trustPeerProxiedHeader": true,
	"identityMode": true, "discoveryAuthorizationCacheSeconds": true, "snapshot": true,
}

// ParseConfig validates the whole configuration before building anything from
// it, so a bad push is rejected with one precise message.
func ParseConfig(raw []byte) (*Config, error) {
	doc, ok := discovery.ParseJSON(raw)
	if !ok {
		return nil, fmt.Errorf("configuration: not valid JSON")
	}
	if !doc.IsObject() {
		return nil, fmt.Errorf("configuration: must be a JSON object")
	}
	for members := doc.Members(); members.Next(); {
		if name := members.Key().Str(); !knownConfigFields[name] {
			return nil, fmt.Errorf("configuration: unknown field %q", name)
		}
	}
	cfg := &Config{
		RoutingHeader:                      defaultRoutingHeader,
		RetryAfterSeconds:                  defaultRetryAfterSeconds,
		DiscoveryAuthorizationCacheSeconds: defaultDiscoveryAuthorizationCacheSeconds,
	}
	if v := doc.Get("routingHeader"); v.Exists() {
		if !v.IsString() || !isOwnableHeaderName(v.Str()) {
			return nil, fmt.Errorf("configuration: routingHeader: must be a lower-case HTTP header name that is not a pseudo-header or one the plugin strips, got %s", v.Raw())
		}
		cfg.RoutingHeader = v.Str()
	}
	if v := doc.Get("retryAfterSeconds"); v.Exists() {
		n, ok := v.Int()
		if !ok || n < 1 || n > maxRetryAfterSeconds {
			return nil, fmt.Errorf("configuration: retryAfterSeconds: must be an integer from 1 to %d, got %s", maxRetryAfterSeconds, v.Raw())
		}
		cfg.RetryAfterSeconds = int(n)
	}
	if v := doc.Get("discoveryAuthorizationCacheSeconds"); v.Exists() {
		n, ok := v.Int()
		if !ok || n < 0 || n > maxDiscoveryAuthorizationCacheSeconds {
			return nil, fmt.Errorf("configuration: discoveryAuthorizationCacheSeconds: must be an integer from 0 to %d, got %s", maxDiscoveryAuthorizationCacheSeconds, v.Raw())
		}
		cfg.DiscoveryAuthorizationCacheSeconds = int(n)
	}
	if v := doc.Get("trustPeerProxiedHeader"); v.Exists() {
		if !v.IsBool() {
			return nil, fmt.Errorf("configuration: trustPeerProxiedHeader: must be true or false, got %s", v.Raw())
		}
		cfg.TrustPeerProxiedHeader = v.Bool()
	}
	if v := doc.Get("identityMode"); v.Exists() {
		switch {
		case v.IsString() && v.Str() == "passthrough":
			cfg.Identity = IdentityPassthrough
		case v.IsString() && v.Str() == "front-proxy":
			cfg.Identity = IdentityFrontProxy
		default:
			return nil, fmt.Errorf(`configuration: identityMode: must be "passthrough" or "front-proxy", got %s`, v.Raw())
		}
	}
	snapRaw := doc.Get("snapshot")
	if !snapRaw.IsObject() {
		return nil, fmt.Errorf("configuration: snapshot: must be an object, got %s", orMissing(snapRaw))
	}
	snap, err := discovery.ParseSnapshotValue(snapRaw)
	if err != nil {
		return nil, fmt.Errorf("configuration: %w", err)
	}
	ix, err := discovery.NewIndex(snap)
	if err != nil {
		return nil, fmt.Errorf("configuration: %w", err)
	}
	cfg.Index = ix
	for _, srv := range ix.Servers() {
		cfg.frontProxyClusters = append(cfg.frontProxyClusters, srv.Cluster+discovery.FrontProxyClusterSuffix)
	}
	return cfg, nil
}

func orMissing(v discovery.JSONValue) string {
	if !v.Exists() {
		return "nothing (field missing)"
	}
	return v.Raw()
}

// isOwnableHeaderName accepts a lower-case RFC 9110 token that the plugin can
// own: not a pseudo-header and not one of the headers it removes or sets for
// other reasons.
func isOwnableHeaderName(name string) bool {
	if name == "" || name == headerPeerProxied || strings.HasPrefix(name, "x-remote-") {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}
