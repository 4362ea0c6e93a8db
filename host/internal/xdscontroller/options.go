package xdscontroller

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"

	"github.com/spf13/pflag"

	"github.com/skewgate/skewgate/discovery"
	"github.com/skewgate/skewgate/host/internal/cmdline"
	"github.com/skewgate/skewgate/host/internal/envoyconfig"
	"github.com/skewgate/skewgate/host/internal/shell"
	"github.com/skewgate/skewgate/host/internal/xds"
	pluginconfig "github.com/skewgate/skewgate/plugin/config"
)

// Defaults of the options only skewgate-xds has.
const (
	DefaultBindAddress = "0.0.0.0:18000"
	// DefaultMetricsBindAddress is one port above skewgate serve's, so that
	// both run on one host with their defaults.
	DefaultMetricsBindAddress = "127.0.0.1:9091"
)

// Config is everything skewgate-xds is told on its command line: NewConfig
// holds the defaults, AddFlags registers every field as its flag, and New
// validates it, naming the flag of every mistake. The upstream, controller
// and plugin options are skewgate serve's (package shell).
type Config struct {
	shell.Options

	// BindAddress is host:port of the management server.
	BindAddress string
	// TLSCertFile and TLSPrivateKeyFile are its serving certificate;
	// ClientCAFile must have signed the certificate every Envoy presents. All
	// are read again every certfile.DefaultInterval.
	TLSCertFile, TLSPrivateKeyFile, ClientCAFile string
	// MaxStreams and MaxStreamsPerClient bound the streams the management
	// server holds open, in all and per client certificate.
	MaxStreams, MaxStreamsPerClient int
	// EnvoyWasmPath is the plugin module's path on the Envoy hosts.
	EnvoyWasmPath string
	// EnvoyWasmSchemaVersion is the schema version that module announces;
	// empty: the one this build writes.
	EnvoyWasmSchemaVersion string
	// MetricsBindAddress is host:port of the plain-HTTP /metrics, /healthz
	// and /readyz listener.
	MetricsBindAddress string
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

// NewConfig is the configuration of skewgate-xds without flags.
func NewConfig() Config {
	return Config{
		Options:             shell.NewOptions(),
		BindAddress:         DefaultBindAddress,
		MaxStreams:          xds.DefaultMaxStreams,
		MaxStreamsPerClient: xds.DefaultMaxStreamsPerClient,
		MetricsBindAddress:  DefaultMetricsBindAddress,
	}
}

// AddFlags registers every field but Logger as its flag, defaulting to its
// current value. The management server's flags keep the names they have in
// skewgate envoy config and had in skewgate serve.
func (c *Config) AddFlags(fs *pflag.FlagSet) {
	c.Options.AddFlags(fs)
	fs.StringVar(&c.BindAddress, "xds-bind-address", c.BindAddress, "host:port the xDS management server serves the plugin configuration on to Envoys over gRPC (ECDS and ADS)")
	fs.StringVar(&c.TLSCertFile, "xds-tls-cert-file", c.TLSCertFile, "the xDS server's serving certificate (PEM); reloaded when the file changes")
	fs.StringVar(&c.TLSPrivateKeyFile, "xds-tls-private-key-file", c.TLSPrivateKeyFile, "the xDS serving certificate's private key (PEM)")
	fs.StringVar(&c.ClientCAFile, "xds-client-ca-file", c.ClientCAFile, "CA certificates that must have signed the client certificate every Envoy presents; reloaded when the file changes")
	fs.IntVar(&c.MaxStreams, "xds-max-streams", c.MaxStreams, "most xDS streams the management server holds open at once, from all Envoys; more are refused")
	fs.IntVar(&c.MaxStreamsPerClient, "xds-max-streams-per-client", c.MaxStreamsPerClient, "most xDS streams one client certificate may hold open at once; Envoys sharing a certificate count as one client")
	fs.StringVar(&c.EnvoyWasmPath, "envoy-wasm-path", c.EnvoyWasmPath, "plugin module path the Envoys load, served in every configuration")
	fs.StringVar(&c.EnvoyWasmSchemaVersion, "envoy-wasm-schema-version", c.EnvoyWasmSchemaVersion, "schema version MAJOR.MINOR the Envoys' plugin module announces (its skewgate_schema_version_MAJOR_MINOR export), when it is another build than this one; the controller refuses to start when that module would refuse its configurations")
	fs.StringVar(&c.MetricsBindAddress, "metrics-bind-address", c.MetricsBindAddress, "host:port for /metrics, /healthz and /readyz (plain HTTP)")
}

// complete fills in the logger, then validates.
func (c Config) complete() (Config, error) {
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c, errors.Join(c.validate()...)
}

// validate reports every mistake, naming its flag.
func (c *Config) validate() []error {
	errs := c.Options.Validate("")
	for _, address := range []struct{ flag, value string }{{"xds-bind-address", c.BindAddress}, {"metrics-bind-address", c.MetricsBindAddress}} {
		if _, port, err := net.SplitHostPort(address.value); err != nil {
			errs = append(errs, fmt.Errorf("--%s %q: must be host:port: %w", address.flag, address.value, err))
		} else if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
			errs = append(errs, fmt.Errorf("--%s %q: port must be 0 to 65535", address.flag, address.value))
		}
	}
	if c.TLSCertFile == "" || c.TLSPrivateKeyFile == "" {
		errs = append(errs, errors.New("--xds-tls-cert-file and --xds-tls-private-key-file are required"))
	}
	if c.ClientCAFile == "" {
		errs = append(errs, errors.New("--xds-client-ca-file is required: only Envoys presenting a certificate it signed may read the configuration, which describes every API server"))
	}
	for _, limit := range []struct {
		flag  string
		value int
	}{{"xds-max-streams", c.MaxStreams}, {"xds-max-streams-per-client", c.MaxStreamsPerClient}} {
		if limit.value < 0 {
			errs = append(errs, fmt.Errorf("--%s %d: must not be negative", limit.flag, limit.value))
		}
	}
	if err := envoyconfig.CheckWasmPath(c.EnvoyWasmPath); err != nil {
		errs = append(errs, fmt.Errorf("--envoy-wasm-path: %w: the plugin module's path on the Envoy hosts", err))
	}
	if _, err := c.envoyModuleSchema(); err != nil {
		errs = append(errs, err)
	}
	files := c.Options.Files()
	for _, f := range []cmdline.FileFlag{{Flag: "xds-tls-cert-file", Path: c.TLSCertFile}, {Flag: "xds-tls-private-key-file", Path: c.TLSPrivateKeyFile}, {Flag: "xds-client-ca-file", Path: c.ClientCAFile}} {
		if f.Path != "" {
			files = append(files, f)
		}
	}
	return append(errs, cmdline.CheckReadable(files)...)
}

// envoyModuleSchema is the schema version of the module the Envoys load, if
// it takes this build's configurations.
func (c *Config) envoyModuleSchema() (discovery.SchemaVersion, error) {
	if c.EnvoyWasmSchemaVersion == "" {
		return discovery.CurrentSchema(), nil
	}
	v, err := discovery.ParseSchemaVersion(c.EnvoyWasmSchemaVersion)
	if err == nil {
		err = pluginconfig.CheckModuleSchema(v)
	}
	if err != nil {
		return v, fmt.Errorf("--envoy-wasm-schema-version %q: %w", c.EnvoyWasmSchemaVersion, err)
	}
	return v, nil
}
