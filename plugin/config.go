package plugin

import (
	"fmt"

	"github.com/skewgate/skewgate/discovery"
	"github.com/skewgate/skewgate/plugin/config"
)

// Config is a validated configuration with what the plugin derives from it.
type Config struct {
	config.Options
	Index *discovery.Index
	// Schema and Ignored are the configuration's schema version and the
	// fields of a newer minor version the plugin ignored (config.Config).
	Schema  discovery.SchemaVersion
	Ignored []string
	// frontProxyClusters[i] is the cluster that reaches Index.Servers()[i]
	// with the front-proxy certificate, built once instead of per request.
	frontProxyClusters []string
}

// configFrom builds the plugin's configuration from one config.Parse
// validated whole, so that a bad push is rejected with one precise message.
// OnPluginStart calls the two itself, not through a helper: parsing is the
// deepest call chain the plugin runs, and every frame above it counts
// against the fixed Wasm stack of Envoy's WAMR runtime.
func configFrom(parsed *config.Config) (*Config, error) {
	ix, err := discovery.NewIndexWith(parsed.Snapshot, parsed.IndexOptions())
	if err != nil {
		return nil, fmt.Errorf("configuration: %w", err)
	}
	cfg := &Config{Options: parsed.Options, Index: ix, Schema: parsed.Schema, Ignored: parsed.Ignored}
	for _, srv := range ix.Servers() {
		cfg.frontProxyClusters = append(cfg.frontProxyClusters, srv.Cluster+discovery.FrontProxyClusterSuffix)
	}
	return cfg, nil
}
