// Package config owns the plugin configuration's contract: the JSON document
// the plugin is started with (field names, defaults, limits, identity modes)
// and the rule for every value. The plugin parses its configuration with it;
// the host writes the configuration with it and checks each flag with the same
// rule before anything starts, so a value the plugin would refuse fails at the
// host's start instead of leaving a gateway that never becomes ready.
//
// It is compiled into the plugin: standard library and discovery only, and
// nothing that grows the module (the host-only Marshal is left out by the
// linker).
package config

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/skewgate/skewgate/discovery"
)

// The configuration's fields.
const (
	fieldRoutingHeader                      = "routingHeader"
	fieldRetryAfterSeconds                  = "retryAfterSeconds"
	fieldTrustPeerProxiedHeader             = "trustPeerProxiedHeader"
	fieldIdentityMode                       = "identityMode"
	fieldDiscoveryAuthorizationCacheSeconds = "discoveryAuthorizationCacheSeconds"
	fieldSchemaSkewRouting                  = "schemaSkewRouting" // since schema 1.1
	fieldRouteWritesByBody                  = "routeWritesByBody" // since schema 1.3
	fieldSnapshot                           = "snapshot"
)

// IsField reports whether name is one of the configuration's fields.
func IsField(name string) bool {
	switch name {
	case discovery.SchemaVersionMember, discovery.RequiresSchemaVersionMember,
		fieldRoutingHeader, fieldRetryAfterSeconds, fieldTrustPeerProxiedHeader,
		fieldIdentityMode, fieldDiscoveryAuthorizationCacheSeconds, fieldSchemaSkewRouting, fieldRouteWritesByBody, fieldSnapshot:
		return true
	}
	return false
}

// Headers the plugin strips or sets for their own purposes, so none of them
// can be the routing header.
const (
	// PeerProxiedHeader marks a request a kube-apiserver peer already
	// re-routed; upstream serves such a request locally.
	PeerProxiedHeader = "x-kubernetes-peer-proxied"
	// RemoteHeaderPrefix starts the request-header identity (X-Remote-User,
	// X-Remote-Group, X-Remote-Extra-*) API servers trust from a front proxy.
	RemoteHeaderPrefix = "x-remote-"
)

// IdentityMode says what the plugin does with the downstream client's identity.
type IdentityMode string

const (
	// IdentityPassthrough forwards credentials (bearer tokens) untouched and
	// removes every inbound X-Remote-* header; nothing presents a client
	// certificate upstream.
	IdentityPassthrough IdentityMode = "passthrough"
	// IdentityFrontProxy additionally asserts the identity of a client
	// certificate that the gateway verified, as X-Remote-* headers that the
	// API servers trust from the front-proxy client certificate. Such a
	// request goes to the server's cluster with discovery.FrontProxyClusterSuffix,
	// the only one presenting that certificate.
	IdentityFrontProxy IdentityMode = "front-proxy"
)

// SchemaSkewRouting says which requests for a resource whose schemas differ
// between the servers (some lack fields others have: the snapshot's
// missingFields) go only to the servers whose schema has every field.
type SchemaSkewRouting string

const (
	// SchemaSkewReadsAndWrites routes every request for such a resource
	// there: a read through a server that lacks a field returns objects
	// without it, and a client that updates what it read (a read-modify-write
	// update or a client-side apply) then clears the field wherever the
	// update goes (kubernetes/kubernetes#46073).
	SchemaSkewReadsAndWrites SchemaSkewRouting = "reads-and-writes"
	// SchemaSkewWrites routes only creates, updates, patches (server-side
	// apply included) and deletes there, which spreads the reads over every
	// server and leaves the read-modify-write risk to the clients.
	SchemaSkewWrites SchemaSkewRouting = "writes"
)

// Defaults and limits.
const (
	DefaultRoutingHeader     = "x-skewgate-upstream"
	DefaultRetryAfterSeconds = 5
	MaxRetryAfterSeconds     = 3600
	DefaultIdentityMode      = IdentityPassthrough
	// By default a credential's permission to read discovery is rechecked
	// after as long as kube-apiserver caches a token's successful
	// authentication.
	DefaultDiscoveryAuthorizationCacheSeconds = 10
	MaxDiscoveryAuthorizationCacheSeconds     = 300
	DefaultSchemaSkewRouting                  = SchemaSkewReadsAndWrites
)

// Options are the settings a configuration carries besides its snapshot.
type Options struct {
	// RoutingHeader is the request header the plugin writes the chosen
	// server's cluster into, and the host routes on.
	RoutingHeader string
	// RetryAfterSeconds is announced with the plugin's 503 answers.
	RetryAfterSeconds int
	// TrustPeerProxiedHeader honours an inbound x-kubernetes-peer-proxied
	// header instead of stripping it; only for a plugin whose clients are
	// API server peers, never one facing clients.
	TrustPeerProxiedHeader bool
	IdentityMode           IdentityMode
	// DiscoveryAuthorizationCacheSeconds is how long an API server's answer
	// to "may this credential read discovery?" is reused; 0 asks on every
	// merged discovery request.
	DiscoveryAuthorizationCacheSeconds int
	SchemaSkewRouting                  SchemaSkewRouting
	// RouteWritesByBody lets the plugin wait for the body of a write to a
	// resource whose schemas differ, and route it by the fields it sets. Set
	// only by a host that then hands the plugin the body: skewgate's does,
	// Envoy from 1.35 with the filter's allow_on_headers_stop_iteration; an
	// Envoy without it would hold such a write forever. Absent, false.
	RouteWritesByBody bool
}

// Defaults are the options of a configuration that sets none.
func Defaults() Options {
	return Options{
		RoutingHeader:                      DefaultRoutingHeader,
		RetryAfterSeconds:                  DefaultRetryAfterSeconds,
		IdentityMode:                       DefaultIdentityMode,
		DiscoveryAuthorizationCacheSeconds: DefaultDiscoveryAuthorizationCacheSeconds,
		SchemaSkewRouting:                  DefaultSchemaSkewRouting,
	}
}

// The rules, worded to follow the field or flag they are about.
var (
	errRoutingHeaderEmpty    = errors.New("must not be empty")
	errRoutingHeaderReserved = errors.New("reserved by the plugin, which strips or sets " + RemoteHeaderPrefix + "* and " + PeerProxiedHeader + " itself")
	errRoutingHeaderToken    = errors.New("not a lower-case HTTP header name (RFC 9110 token)")
	errRetryAfterSeconds     = errors.New("must be an integer from 1 to " + strconv.Itoa(MaxRetryAfterSeconds))
	errAuthorizationCache    = errors.New("must be an integer from 0 to " + strconv.Itoa(MaxDiscoveryAuthorizationCacheSeconds))
	errIdentityMode          = errors.New(`must be "` + string(IdentityPassthrough) + `" or "` + string(IdentityFrontProxy) + `"`)
	errSchemaSkewRouting     = errors.New(`must be "` + string(SchemaSkewReadsAndWrites) + `" or "` + string(SchemaSkewWrites) + `"`)
	errNotABool              = errors.New("must be true or false")
	errRoutingHeaderString   = errors.New("must be a string")
)

// CheckRoutingHeader accepts a lower-case RFC 9110 token that the plugin can
// own: not a pseudo-header and not one it strips or sets for other reasons.
func CheckRoutingHeader(name string) error {
	if name == "" {
		return errRoutingHeaderEmpty
	}
	if name == PeerProxiedHeader || strings.HasPrefix(name, RemoteHeaderPrefix) {
		return errRoutingHeaderReserved
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return errRoutingHeaderToken
		}
	}
	return nil
}

// CheckRetryAfterSeconds accepts 1 to MaxRetryAfterSeconds.
func CheckRetryAfterSeconds(n int64) error {
	if n < 1 || n > MaxRetryAfterSeconds {
		return errRetryAfterSeconds
	}
	return nil
}

// CheckDiscoveryAuthorizationCacheSeconds accepts 0 to
// MaxDiscoveryAuthorizationCacheSeconds.
func CheckDiscoveryAuthorizationCacheSeconds(n int64) error {
	if n < 0 || n > MaxDiscoveryAuthorizationCacheSeconds {
		return errAuthorizationCache
	}
	return nil
}

// CheckIdentityMode accepts the two identity modes.
func CheckIdentityMode(m IdentityMode) error {
	if m != IdentityPassthrough && m != IdentityFrontProxy {
		return errIdentityMode
	}
	return nil
}

// CheckSchemaSkewRouting accepts the two policies.
func CheckSchemaSkewRouting(r SchemaSkewRouting) error {
	if r != SchemaSkewReadsAndWrites && r != SchemaSkewWrites {
		return errSchemaSkewRouting
	}
	return nil
}

// Check reports the first option the plugin would refuse, as the plugin
// reports it.
func (o Options) Check() error {
	if err := CheckRoutingHeader(o.RoutingHeader); err != nil {
		return fieldError(fieldRoutingHeader, err, strconv.Quote(o.RoutingHeader))
	}
	if err := CheckRetryAfterSeconds(int64(o.RetryAfterSeconds)); err != nil {
		return fieldError(fieldRetryAfterSeconds, err, strconv.Itoa(o.RetryAfterSeconds))
	}
	if err := CheckIdentityMode(o.IdentityMode); err != nil {
		return fieldError(fieldIdentityMode, err, strconv.Quote(string(o.IdentityMode)))
	}
	if err := CheckDiscoveryAuthorizationCacheSeconds(int64(o.DiscoveryAuthorizationCacheSeconds)); err != nil {
		return fieldError(fieldDiscoveryAuthorizationCacheSeconds, err, strconv.Itoa(o.DiscoveryAuthorizationCacheSeconds))
	}
	if err := CheckSchemaSkewRouting(o.SchemaSkewRouting); err != nil {
		return fieldError(fieldSchemaSkewRouting, err, strconv.Quote(string(o.SchemaSkewRouting)))
	}
	return nil
}

// IndexOptions are the options' routing choices as discovery takes them:
// the plugin and the gateway's retry set index a snapshot with the same.
func (o Options) IndexOptions() discovery.IndexOptions {
	return discovery.IndexOptions{SchemaSkewWritesOnly: o.SchemaSkewRouting == SchemaSkewWrites}
}

func fieldError(field string, rule error, got string) error {
	return fmt.Errorf("configuration: %s: %w, got %s", field, rule, got)
}

// Marshal is the configuration of o and a snapshot, whose JSON object
// rawSnapshot is embedded as it is (the plugin validates it). Options the
// plugin would refuse are refused here.
func (o Options) Marshal(rawSnapshot []byte) ([]byte, error) {
	if err := o.Check(); err != nil {
		return nil, err
	}
	b := make([]byte, 0, 230+len(rawSnapshot))
	// The version, the routing header (a token), the identity mode and the
	// schema skew routing (constants) need no escaping.
	b = append(b, `{"`+discovery.SchemaVersionMember+`":"`...)
	b = append(b, discovery.CurrentSchema().String()...)
	b = append(b, `","`+fieldRoutingHeader+`":"`...)
	b = append(b, o.RoutingHeader...)
	b = append(b, `","`+fieldRetryAfterSeconds+`":`...)
	b = strconv.AppendInt(b, int64(o.RetryAfterSeconds), 10)
	b = append(b, `,"`+fieldTrustPeerProxiedHeader+`":`...)
	b = strconv.AppendBool(b, o.TrustPeerProxiedHeader)
	b = append(b, `,"`+fieldIdentityMode+`":"`...)
	b = append(b, o.IdentityMode...)
	b = append(b, `","`+fieldDiscoveryAuthorizationCacheSeconds+`":`...)
	b = strconv.AppendInt(b, int64(o.DiscoveryAuthorizationCacheSeconds), 10)
	b = append(b, `,"`+fieldSchemaSkewRouting+`":"`...)
	b = append(b, o.SchemaSkewRouting...)
	b = append(b, `","`+fieldRouteWritesByBody+`":`...)
	b = strconv.AppendBool(b, o.RouteWritesByBody)
	b = append(b, `,"`+fieldSnapshot+`":`...)
	b = append(b, rawSnapshot...)
	return append(b, '}'), nil
}

// RoutesWritesByBody reports whether a configuration asks the host for the
// bodies of the writes the plugin routes by their fields (Options'
// RouteWritesByBody), for a host that must switch that on (Envoy's
// allow_on_headers_stop_iteration).
func RoutesWritesByBody(configuration []byte) bool {
	doc, ok := discovery.ParseJSON(configuration)
	return ok && doc.Get(fieldRouteWritesByBody).Bool()
}

// Config is a parsed configuration.
type Config struct {
	Options
	Snapshot *discovery.Snapshot
	// Schema is the version the configuration was written for.
	Schema discovery.SchemaVersion
	// Ignored names the fields of a newer minor schema version that this
	// build does not know and ignored, the snapshot's prefixed "snapshot.".
	Ignored []string
}

// Parse validates the whole configuration, so that a bad one is rejected with
// one precise message.
func Parse(raw []byte) (*Config, error) {
	doc, opts, err := parse(raw)
	if err != nil {
		return nil, err
	}
	cfg := &Config{Options: opts.Options, Schema: opts.schema.Version, Ignored: opts.ignored}
	snapRaw := doc.Get(fieldSnapshot)
	if !snapRaw.IsObject() {
		return nil, fmt.Errorf("configuration: %s: must be an object, got %s", fieldSnapshot, orMissing(snapRaw))
	}
	snap, err := discovery.ParseSnapshotValue(snapRaw)
	if err != nil {
		return nil, fmt.Errorf("configuration: %w", err)
	}
	cfg.Snapshot = snap
	for _, name := range snap.Ignored {
		cfg.Ignored = append(cfg.Ignored, fieldSnapshot+"."+name)
	}
	return cfg, nil
}

// parsed is what parse reads besides the snapshot.
type parsed struct {
	Options
	schema  discovery.DocumentSchema
	ignored []string
}

func parse(raw []byte) (discovery.JSONValue, parsed, error) {
	opts := parsed{Options: Defaults()}
	doc, ok := discovery.ParseJSON(raw)
	if !ok {
		return doc, opts, errors.New("configuration: not valid JSON")
	}
	if !doc.IsObject() {
		return doc, opts, errors.New("configuration: must be a JSON object")
	}
	schema, err := discovery.ReadDocumentSchema(doc.Get)
	if err != nil {
		return doc, opts, fmt.Errorf("configuration: %w", err)
	}
	opts.schema = schema
	for members := doc.Members(); members.Next(); {
		if name := members.Key().Str(); !IsField(name) {
			if err := schema.UnknownMember(name, &opts.ignored); err != nil {
				return doc, opts, fmt.Errorf("configuration: %w", err)
			}
		}
	}
	if v := doc.Get(fieldRoutingHeader); v.Exists() {
		if !v.IsString() {
			return doc, opts, fieldError(fieldRoutingHeader, errRoutingHeaderString, v.Raw())
		}
		if err := CheckRoutingHeader(v.Str()); err != nil {
			return doc, opts, fieldError(fieldRoutingHeader, err, v.Raw())
		}
		opts.RoutingHeader = v.Str()
	}
	if v := doc.Get(fieldRetryAfterSeconds); v.Exists() {
		n, ok := v.Int()
		if !ok || CheckRetryAfterSeconds(n) != nil {
			return doc, opts, fieldError(fieldRetryAfterSeconds, errRetryAfterSeconds, v.Raw())
		}
		opts.RetryAfterSeconds = int(n)
	}
	if v := doc.Get(fieldDiscoveryAuthorizationCacheSeconds); v.Exists() {
		n, ok := v.Int()
		if !ok || CheckDiscoveryAuthorizationCacheSeconds(n) != nil {
			return doc, opts, fieldError(fieldDiscoveryAuthorizationCacheSeconds, errAuthorizationCache, v.Raw())
		}
		opts.DiscoveryAuthorizationCacheSeconds = int(n)
	}
	if v := doc.Get(fieldTrustPeerProxiedHeader); v.Exists() {
		if !v.IsBool() {
			return doc, opts, fieldError(fieldTrustPeerProxiedHeader, errNotABool, v.Raw())
		}
		opts.TrustPeerProxiedHeader = v.Bool()
	}
	if v := doc.Get(fieldIdentityMode); v.Exists() {
		mode := IdentityMode(v.Str())
		if !v.IsString() || CheckIdentityMode(mode) != nil {
			return doc, opts, fieldError(fieldIdentityMode, errIdentityMode, v.Raw())
		}
		opts.IdentityMode = mode
	}
	if v := doc.Get(fieldSchemaSkewRouting); v.Exists() {
		routing := SchemaSkewRouting(v.Str())
		if !v.IsString() || CheckSchemaSkewRouting(routing) != nil {
			return doc, opts, fieldError(fieldSchemaSkewRouting, errSchemaSkewRouting, v.Raw())
		}
		opts.SchemaSkewRouting = routing
	}
	if v := doc.Get(fieldRouteWritesByBody); v.Exists() {
		if !v.IsBool() {
			return doc, opts, fieldError(fieldRouteWritesByBody, errNotABool, v.Raw())
		}
		opts.RouteWritesByBody = v.Bool()
	}
	return doc, opts, nil
}

func orMissing(v discovery.JSONValue) string {
	if !v.Exists() {
		return "nothing (field missing)"
	}
	return v.Raw()
}
