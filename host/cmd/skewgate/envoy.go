package main

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"

	"github.com/skewgate/skewgate/discovery"
	"github.com/skewgate/skewgate/host/internal/cmdline"
	"github.com/skewgate/skewgate/host/internal/controller"
	"github.com/skewgate/skewgate/host/internal/envoyconfig"
	"github.com/skewgate/skewgate/host/internal/serve"
	"github.com/skewgate/skewgate/plugin/config"
)

// runEnvoyConfig renders an Envoy bootstrap (or ECDS resource) running the
// plugin in front of the given API servers. Cluster names are the ones
// `skewgate serve` puts into snapshots, so a serve instance writing the ECDS
// file (--envoy-ecds-file) fits the bootstrap.
func runEnvoyConfig(args []string, stdout, stderr io.Writer) error {
	var spec envoyconfig.Spec
	var apiServers []string
	var identityMode, schemaSkewRouting, ecdsFile, snapshotFile, xdsAddress string
	var xds envoyconfig.XDSSource
	var ecdsResource bool
	var port, adminPort uint
	fs := cmdline.NewFlagSet("skewgate envoy config",
		"skewgate envoy config --apiserver URL... [flags] (--envoy-ecds-file PATH | --xds-address HOST:PORT | --snapshot FILE)",
		"Prints an Envoy bootstrap that runs the skewgate plugin in front of the API servers. With\n"+
			"--envoy-ecds-file the plugin configuration comes from that file (written by skewgate serve);\n"+
			"with --xds-address from skewgate serve's management server (--xds-bind-address) over gRPC;\n"+
			"with --snapshot it is inline. --ecds-resource prints the ECDS resource for --snapshot instead.\n"+
			"File paths are paths on the Envoy host and must be absolute.", stderr)
	fs.StringArrayVar(&apiServers, "apiserver", nil, "API server URL https://host:port (repeatable)")
	fs.StringVar(&spec.ListenAddress, "bind-address", "0.0.0.0", "IP address Envoy listens on")
	fs.UintVar(&port, "secure-port", 6443, "port Envoy serves HTTPS on")
	fs.UintVar(&adminPort, "admin-port", 9901, "Envoy admin port (127.0.0.1 only)")
	fs.StringVar(&spec.ServingCertPath, "tls-cert-file", "", "Envoy's serving certificate")
	fs.StringVar(&spec.ServingKeyPath, "tls-private-key-file", "", "the serving certificate's private key")
	fs.StringVar(&spec.ClientCAPath, "client-ca-file", "", "CA certificates verifying client certificates (required in front-proxy mode)")
	fs.StringVar(&spec.ClusterCAPath, "peer-ca-file", "", "CA certificates that sign the API servers' serving certificates")
	fs.StringVar(&spec.FrontProxyCertPath, "proxy-client-cert-file", "", "front-proxy client certificate Envoy presents (front-proxy mode)")
	fs.StringVar(&spec.FrontProxyKeyPath, "proxy-client-key-file", "", "the front-proxy client certificate's private key")
	fs.StringVar(&identityMode, "identity-mode", string(config.DefaultIdentityMode), "passthrough or front-proxy")
	fs.StringVar(&schemaSkewRouting, "schema-skew-routing", string(config.DefaultSchemaSkewRouting), "with --snapshot: "+string(config.SchemaSkewReadsAndWrites)+" or "+string(config.SchemaSkewWrites)+
		", as skewgate serve's flag (which sets it for the configurations serve delivers)")
	fs.StringVar(&spec.WasmPath, "wasm", "", "plugin module path Envoy loads")
	fs.StringVar(&ecdsFile, "envoy-ecds-file", "", "deliver the plugin through this file-based ECDS resource")
	fs.StringVar(&snapshotFile, "snapshot", "", "snapshot JSON (skewgate's /debug/snapshot) to configure the plugin inline")
	fs.BoolVar(&ecdsResource, "ecds-resource", false, "print the ECDS resource for --snapshot instead of a bootstrap")
	fs.StringVar(&xdsAddress, "xds-address", "", "deliver the plugin from skewgate's management server at host:port over gRPC")
	fs.StringVar(&xds.ServerName, "xds-server-name", "", "DNS name in the management server's certificate (default: the --xds-address host)")
	fs.StringVar(&xds.CAPath, "xds-ca-file", "", "CA certificates verifying the management server")
	fs.StringVar(&xds.ClientCertPath, "xds-client-cert-file", "", "client certificate Envoy presents to the management server")
	fs.StringVar(&xds.ClientKeyPath, "xds-client-key-file", "", "the xDS client certificate's private key")
	fs.BoolVar(&xds.ADS, "xds-ads", false, "subscribe through the aggregated discovery stream (ADS)")
	if err := cmdline.Parse(fs, args, false); err != nil {
		return err
	}
	if sources := countSet(ecdsFile, snapshotFile, xdsAddress); sources != 1 && !ecdsResource {
		return errors.New("give exactly one of --envoy-ecds-file, --xds-address and --snapshot")
	}
	if xdsAddress != "" {
		host, port, err := net.SplitHostPort(xdsAddress)
		p, perr := strconv.ParseUint(port, 10, 16)
		if err != nil || perr != nil || host == "" || p == 0 {
			return fmt.Errorf("--xds-address %q: must be host:port", xdsAddress)
		}
		xds.Address, xds.Port = host, uint32(p)
	}
	if ecdsResource && snapshotFile == "" {
		return errors.New("--ecds-resource needs --snapshot")
	}
	if err := config.CheckSchemaSkewRouting(config.SchemaSkewRouting(schemaSkewRouting)); err != nil {
		return fmt.Errorf("--schema-skew-routing %q: %w", schemaSkewRouting, err)
	}
	if fs.Changed("schema-skew-routing") && snapshotFile == "" {
		return errors.New("--schema-skew-routing needs --snapshot: otherwise skewgate serve writes the plugin configuration, with its own --schema-skew-routing")
	}
	if port > 65535 || adminPort > 65535 {
		return errors.New("--secure-port and --admin-port must be at most 65535")
	}
	spec.ListenPort, spec.AdminPort = uint32(port), uint32(adminPort)
	spec.IdentityMode = config.IdentityMode(identityMode)
	if err := config.CheckIdentityMode(spec.IdentityMode); err != nil {
		return fmt.Errorf("--identity-mode %q: %w", identityMode, err)
	}
	addresses, _, err := controller.ParseServers(apiServers, "")
	if err != nil {
		return serve.APIServerFlagError(err)
	}
	for _, address := range addresses {
		spec.Servers = append(spec.Servers, envoyServer(address))
	}

	var pluginConfig []byte
	var generation uint64
	if snapshotFile != "" {
		raw, err := os.ReadFile(snapshotFile)
		if err != nil {
			return err
		}
		snap, err := discovery.ParseSnapshot(raw)
		if err != nil {
			return fmt.Errorf("%s: %w", snapshotFile, err)
		}
		generation = snap.Generation
		opts := config.Defaults()
		opts.IdentityMode = spec.IdentityMode
		opts.SchemaSkewRouting = config.SchemaSkewRouting(schemaSkewRouting)
		if pluginConfig, err = opts.Marshal(raw); err != nil {
			return err
		}
	}
	var out []byte
	switch {
	case ecdsResource:
		if err := spec.CheckPluginConfig(pluginConfig); err != nil {
			return err
		}
		out, err = envoyconfig.RenderECDSResource(pluginConfig, spec.WasmPath, strconv.FormatUint(generation, 10))
	case ecdsFile != "":
		out, err = envoyconfig.RenderECDS(spec, ecdsFile)
	case xdsAddress != "":
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

func countSet(values ...string) int {
	n := 0
	for _, v := range values {
		if v != "" {
			n++
		}
	}
	return n
}

// envoyServer is the Envoy cluster of an API server at a canonical address,
// named as the controller names that server.
func envoyServer(address string) envoyconfig.Server {
	host, port, _ := net.SplitHostPort(address)
	p, _ := strconv.ParseUint(port, 10, 16)
	return envoyconfig.Server{Cluster: controller.ClusterName(address), Address: host, Port: uint32(p)}
}
