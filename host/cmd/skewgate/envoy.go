package main

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"

	"github.com/spf13/pflag"

	"github.com/skewgate/skewgate/discovery"
	"github.com/skewgate/skewgate/host/internal/cmdline"
	"github.com/skewgate/skewgate/host/internal/controller"
	"github.com/skewgate/skewgate/host/internal/envoyconfig"
	"github.com/skewgate/skewgate/plugin/config"
)

// envoyConfigOptions are skewgate envoy config's flags. The serving,
// upstream and plugin options are skewgate serve's own, so that one set of
// flags configures both alike: the routing header the bootstrap's route
// matches is the one serve's plugin configurations set.
type envoyConfigOptions struct {
	cmdline.ServingOptions
	cmdline.UpstreamOptions
	cmdline.PluginOptions

	AdminPort int
	// WasmPath is the plugin module's path on the Envoy host.
	WasmPath string
	// ECDSFile, XDSAddress and SnapshotFile are where the plugin
	// configuration comes from; exactly one is given.
	ECDSFile, XDSAddress, SnapshotFile string
	// ECDSResource prints the ECDS resource for SnapshotFile instead.
	ECDSResource bool
	XDS          envoyconfig.XDSSource
}

func newEnvoyConfigOptions() envoyConfigOptions {
	return envoyConfigOptions{
		ServingOptions: cmdline.NewServingOptions(),
		PluginOptions:  cmdline.NewPluginOptions(),
		AdminPort:      envoyconfig.DefaultAdminPort,
	}
}

func (o *envoyConfigOptions) AddFlags(fs *pflag.FlagSet) {
	o.ServingOptions.AddFlags(fs)
	o.UpstreamOptions.AddFlags(fs)
	o.PluginOptions.AddFlags(fs)
	fs.IntVar(&o.AdminPort, "admin-port", o.AdminPort, "Envoy admin port (127.0.0.1 only)")
	fs.StringVar(&o.WasmPath, "wasm", o.WasmPath, "plugin module path Envoy loads")
	fs.StringVar(&o.ECDSFile, "envoy-ecds-file", o.ECDSFile, "deliver the plugin through this file-based ECDS resource")
	fs.StringVar(&o.SnapshotFile, "snapshot", o.SnapshotFile, "snapshot JSON (skewgate's /debug/snapshot) to configure the plugin inline")
	fs.BoolVar(&o.ECDSResource, "ecds-resource", o.ECDSResource, "print the ECDS resource for --snapshot instead of a bootstrap")
	fs.StringVar(&o.XDSAddress, "xds-address", o.XDSAddress, "deliver the plugin from skewgate's management server at host:port over gRPC")
	fs.StringVar(&o.XDS.ServerName, "xds-server-name", o.XDS.ServerName, "DNS name in the management server's certificate (default: the --xds-address host)")
	fs.StringVar(&o.XDS.CAPath, "xds-ca-file", o.XDS.CAPath, "CA certificates verifying the management server")
	fs.StringVar(&o.XDS.ClientCertPath, "xds-client-cert-file", o.XDS.ClientCertPath, "client certificate Envoy presents to the management server")
	fs.StringVar(&o.XDS.ClientKeyPath, "xds-client-key-file", o.XDS.ClientKeyPath, "the xDS client certificate's private key")
	fs.BoolVar(&o.XDS.ADS, "xds-ads", o.XDS.ADS, "subscribe through the aggregated discovery stream (ADS)")
}

// snapshotOnlyFlags set the plugin configuration, which only --snapshot
// renders: otherwise skewgate serve writes it, with its own flags.
var snapshotOnlyFlags = []string{"retry-after-seconds", "discovery-authorization-cache", "schema-skew-routing"}

// Validate reports every mistake, naming its flag; changed tells the flags
// given on the command line.
func (o *envoyConfigOptions) Validate(changed func(flag string) bool) []error {
	errs := o.ServingOptions.Validate(&o.PluginOptions)
	errs = append(errs, o.UpstreamOptions.Validate("")...)
	if len(o.APIServers) == 0 {
		errs = append(errs, errors.New("--apiserver is required (repeatable): Envoy's clusters are the API servers"))
	}
	errs = append(errs, o.PluginOptions.Validate(&o.UpstreamOptions)...)
	if config.IdentityMode(o.IdentityMode) == config.IdentityPassthrough && o.ProxyClientCertFile != "" {
		// The API servers trust X-Remote-* headers on a connection that
		// carries the front-proxy certificate.
		errs = append(errs, errors.New("--proxy-client-cert-file: Envoy presents it only in front-proxy identity mode; in passthrough mode clients could choose their identity"))
	}
	if o.AdminPort < 1 || o.AdminPort > 65535 || o.AdminPort == o.SecurePort {
		errs = append(errs, fmt.Errorf("--admin-port %d: must be 1 to 65535 and not --secure-port", o.AdminPort))
	}
	sources := 0
	for _, source := range []string{o.ECDSFile, o.SnapshotFile, o.XDSAddress} {
		if source != "" {
			sources++
		}
	}
	switch {
	case o.ECDSResource && o.SnapshotFile == "":
		errs = append(errs, errors.New("--ecds-resource needs --snapshot"))
	case sources != 1 && !o.ECDSResource:
		errs = append(errs, errors.New("give exactly one of --envoy-ecds-file, --xds-address and --snapshot"))
	}
	if o.XDSAddress != "" {
		host, port, err := net.SplitHostPort(o.XDSAddress)
		p, perr := strconv.ParseUint(port, 10, 16)
		if err != nil || perr != nil || host == "" || p == 0 {
			errs = append(errs, fmt.Errorf("--xds-address %q: must be host:port", o.XDSAddress))
		}
	}
	if o.XDS.ServerName != "" {
		if err := cmdline.CheckDNSName(o.XDS.ServerName); err != nil {
			errs = append(errs, fmt.Errorf("--xds-server-name %q: %w", o.XDS.ServerName, err))
		}
	}
	if o.SnapshotFile == "" {
		for _, flag := range snapshotOnlyFlags {
			if changed(flag) {
				errs = append(errs, fmt.Errorf("--%s needs --snapshot: otherwise skewgate serve writes the plugin configuration, with its own --%s", flag, flag))
			}
		}
	} else {
		errs = append(errs, cmdline.CheckReadable([]cmdline.FileFlag{{Flag: "snapshot", Path: o.SnapshotFile}})...)
	}
	// Every other file is Envoy's, on its host.
	paths := append(o.ServingOptions.Files(), o.UpstreamOptions.Files()...)
	for _, f := range []cmdline.FileFlag{{Flag: "wasm", Path: o.WasmPath}, {Flag: "envoy-ecds-file", Path: o.ECDSFile},
		{Flag: "xds-ca-file", Path: o.XDS.CAPath}, {Flag: "xds-client-cert-file", Path: o.XDS.ClientCertPath}, {Flag: "xds-client-key-file", Path: o.XDS.ClientKeyPath}} {
		if f.Path != "" {
			paths = append(paths, f)
		}
	}
	for _, f := range paths {
		if err := envoyconfig.CheckWasmPath(f.Path); err != nil {
			errs = append(errs, fmt.Errorf("--%s: %w: a path on the Envoy host", f.Flag, err))
		}
	}
	return errs
}

// runEnvoyConfig renders an Envoy bootstrap (or ECDS resource) running the
// plugin in front of the given API servers. Cluster names are the ones
// `skewgate serve` puts into snapshots, so a serve instance writing the ECDS
// file (--envoy-ecds-file) fits the bootstrap.
func runEnvoyConfig(args []string, stdout, stderr io.Writer) error {
	o := newEnvoyConfigOptions()
	fs := envoyConfigFlags(&o, stderr)
	if err := cmdline.Parse(fs, args, false); err != nil {
		return err
	}
	if err := errors.Join(o.Validate(fs.Changed)...); err != nil {
		return err
	}
	return renderEnvoyConfig(&o, stdout)
}

// envoyConfigFlags is envoy config's flag set, its help written to stderr.
func envoyConfigFlags(o *envoyConfigOptions, stderr io.Writer) *pflag.FlagSet {
	fs := cmdline.NewFlagSet("skewgate envoy config",
		"skewgate envoy config --apiserver URL... [flags] (--envoy-ecds-file PATH | --xds-address HOST:PORT | --snapshot FILE)",
		"Prints an Envoy bootstrap that runs the skewgate plugin in front of the API servers. With\n"+
			"--envoy-ecds-file the plugin configuration comes from that file (written by skewgate serve);\n"+
			"with --xds-address from skewgate-xds's management server over gRPC;\n"+
			"with --snapshot it is inline. --ecds-resource prints the ECDS resource for --snapshot instead.\n"+
			"The serving, API server and plugin flags are skewgate serve's: give both the same values.\n"+
			"File paths are paths on the Envoy host and must be absolute.", stderr)
	o.AddFlags(fs)
	return fs
}

// renderEnvoyConfig writes what valid options ask for.
func renderEnvoyConfig(o *envoyConfigOptions, stdout io.Writer) error {
	spec := envoyconfig.Spec{
		AdminPort:          uint32(o.AdminPort),
		ListenAddress:      o.BindAddress,
		ListenPort:         uint32(o.SecurePort),
		ServingCertPath:    o.TLSCertFile,
		ServingKeyPath:     o.TLSPrivateKeyFile,
		ClientCAPath:       o.ClientCAFile,
		ClusterCAPath:      o.PeerCAFile,
		FrontProxyCertPath: o.ProxyClientCertFile,
		FrontProxyKeyPath:  o.ProxyClientKeyFile,
		IdentityMode:       envoyconfig.IdentityMode(o.IdentityMode),
		RoutingHeader:      o.RoutingHeader,
		WasmPath:           o.WasmPath,
	}
	addresses, _, _ := controller.ParseServers(o.APIServers, "")
	for _, address := range addresses {
		spec.Servers = append(spec.Servers, envoyServer(address))
	}

	var pluginConfig []byte
	var generation uint64
	if o.SnapshotFile != "" {
		raw, err := os.ReadFile(o.SnapshotFile)
		if err != nil {
			return err
		}
		snap, err := discovery.ParseSnapshot(raw)
		if err != nil {
			return fmt.Errorf("%s: %w", o.SnapshotFile, err)
		}
		generation = snap.Generation
		if pluginConfig, err = o.PluginOptions.Config().Marshal(raw); err != nil {
			return err
		}
	}
	var out []byte
	var err error
	switch {
	case o.ECDSResource:
		if err := spec.CheckPluginConfig(pluginConfig); err != nil {
			return err
		}
		out, err = envoyconfig.RenderECDSResource(pluginConfig, spec.WasmPath, strconv.FormatUint(generation, 10))
	case o.ECDSFile != "":
		out, err = envoyconfig.RenderECDS(spec, o.ECDSFile)
	case o.XDSAddress != "":
		xds := o.XDS
		host, port, _ := net.SplitHostPort(o.XDSAddress)
		p, _ := strconv.ParseUint(port, 10, 16)
		xds.Address, xds.Port = host, uint32(p)
		out, err = envoyconfig.RenderXDS(spec, xds)
	default:
		spec.PluginConfig = pluginConfig
		out, err = envoyconfig.Render(spec)
	}
	if err != nil {
		return err
	}
	_, err = stdout.Write(out)
	return err
}

// envoyServer is the Envoy cluster of an API server at a canonical address,
// named as the controller names that server.
func envoyServer(address string) envoyconfig.Server {
	host, port, _ := net.SplitHostPort(address)
	p, _ := strconv.ParseUint(port, 10, 16)
	return envoyconfig.Server{Cluster: controller.ClusterName(address), Address: host, Port: uint32(p)}
}
