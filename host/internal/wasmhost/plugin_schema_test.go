package wasmhost

import (
	"os"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/skewgate/skewgate/discovery"
	"github.com/skewgate/skewgate/discovery/discoverytest"
	"github.com/skewgate/skewgate/plugin/config"
	"github.com/skewgate/skewgate/plugin/metricdef"
	"github.com/skewgate/skewgate/plugin/plugintest"
)

// previousMinor is the module and the controller's configuration of the
// schema's previous minor version, built from this repository's history,
// once per test binary.
var previousMinor = sync.OnceValues(func() (*previousRelease, error) {
	tree, err := plugintest.CheckOutPreviousMinor()
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tree.Dir)
	wasm, err := tree.BuildModule()
	if err != nil {
		return nil, err
	}
	cfg, err := tree.ControllerConfiguration()
	if err != nil {
		return nil, err
	}
	return &previousRelease{commit: tree.Commit, version: tree.Version, wasm: wasm, config: cfg}, nil
})

type previousRelease struct {
	commit  string
	version discovery.SchemaVersion
	wasm    []byte
	// config is what its controller writes for discoverytest.SkewedControlPlane.
	config []byte
}

func loadPreviousMinor(t *testing.T) *previousRelease {
	t.Helper()
	old, err := previousMinor()
	if err != nil {
		t.Fatal(err)
	}
	return old
}

// thisControllersConfiguration is what this build's controller writes for
// the skewed control plane whose deployments' schemas differ both ways
// (kube-a lacks a field kube-b and kube-c have, they lack one kube-a has),
// with writes routed by their body: the options, then the snapshot, through
// the writers the controller uses.
func thisControllersConfiguration(t *testing.T) []byte {
	t.Helper()
	servers, skew := discoverytest.WithBothWayFieldSkew(discoverytest.SkewedControlPlane())
	opts := config.Defaults()
	opts.RouteWritesByBody = true
	raw, err := opts.Marshal(discoverytest.SnapshotJSONWithFieldSkew(1, servers, skew))
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// schemaRequests are requests whose routing tells the versions apart or
// must not: a field selector only the v1.36 servers accept, a write of a
// kind kube-a lacks fields of, a resource only the v1.36 servers serve, and
// a request every server serves alike.
var schemaRequests = []struct{ name, method, path string }{
	{"kubelet pod list", "GET", plugintest.KubeletPodList},
	{"deployment create", "POST", "/apis/apps/v1/namespaces/ns/deployments"},
	{"resource only the v1.36 servers serve", "POST", "/apis/admissionregistration.k8s.io/v1/mutatingadmissionpolicies"},
	{"resource every server serves", "GET", "/api/v1/namespaces/ns/configmaps"},
}

// ignoredFields is a module's ignored-fields counter, by the name it defines:
// modules from before the plugin's metrics took the skewgate_plugin_ prefix
// define skewgate_configuration_ignored_fields_total.
func ignoredFields(t *testing.T, p plugintest.Plugin) int64 {
	t.Helper()
	for _, name := range []string{metricdef.PluginConfigurationIgnoredFields.Name, "skewgate_configuration_ignored_fields_total"} {
		if v, ok := p.(*hostedPlugin).exported(name); ok {
			return v
		}
	}
	t.Fatal("the module defines no ignored-fields counter")
	return 0
}

// routing is where a request went: the routing header, or "" for the
// gateway's balancing.
func routing(t *testing.T, p plugintest.Plugin, method, path string) string {
	t.Helper()
	res := p.Request(method, path)
	if !res.Forwarded {
		t.Fatalf("%s %s: not forwarded: %+v", method, path, res.Local)
	}
	cluster, _ := res.Header(plugintest.RoutingHeader)
	return cluster
}

// The module of the previous minor version under this controller: it reads
// the configuration (the field skew table and routing by body are optional),
// ignores what its version does not know and counts it, and routes as it
// always did: a kind no server has every field of is left to the gateway.
// This build's module, under the same configuration, sends a write where
// every field its body sets is known, and one it cannot read to the newest
// minor.
func TestModuleOfThePreviousMinorAcceptsThisControllersConfiguration(t *testing.T) {
	old := loadPreviousMinor(t)
	announced, err := config.ModuleSchemaVersion(old.wasm)
	if err != nil || announced != old.version {
		t.Fatalf("the module of %s announces %v, %v; want %v", old.commit, announced, err, old.version)
	}
	if err := config.CheckModuleSchema(announced); err != nil {
		t.Fatalf("this controller would not feed the module of schema %v: %v", announced, err)
	}
	cfg := thisControllersConfiguration(t)
	oldPlugin, err := pluginHarness{wasm: old.wasm}.Start(t, plugintest.StartOptions{Config: cfg})
	if err != nil {
		t.Fatalf("the module of schema %v (%s) rejects this controller's configuration: %v", old.version, old.commit, err)
	}
	if got := ignoredFields(t, oldPlugin); got != 2 {
		t.Errorf("ignored-fields counter %d; want 2 (routeWritesByBody, snapshot.fieldSkew)", got)
	}
	wasm, err := builtPlugin()
	if err != nil {
		t.Fatal(err)
	}
	newPlugin, err := pluginHarness{wasm: wasm}.Start(t, plugintest.StartOptions{Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	if got := ignoredFields(t, newPlugin); got != 0 {
		t.Errorf("this module ignored %d fields of its own controller's configuration", got)
	}
	newest := []string{"kube-b", "kube-c"}
	for _, r := range schemaRequests {
		oldTo, newTo := routing(t, oldPlugin, r.method, r.path), routing(t, newPlugin, r.method, r.path)
		switch r.name {
		case "deployment create":
			if oldTo != "" || !slices.Contains(newest, newTo) {
				t.Errorf("%s: the old module routes to %q, this one to %q; want the old one to leave it to the gateway as it always did, this one to send a body it did not read to kube-b or kube-c, the newest minor",
					r.name, oldTo, newTo)
			}
		default:
			if oldTo != newTo && !(slices.Contains(newest, oldTo) && slices.Contains(newest, newTo)) {
				t.Errorf("%s: the old module routes to %q, this one to %q; want the same", r.name, oldTo, newTo)
			}
		}
	}
	body := []byte(`{"kind":"Deployment","spec":{"template":{"spec":{"workloadRef":{"name":"w"}}}}}`)
	oldRes := oldPlugin.Write("POST", "/apis/apps/v1/namespaces/ns/deployments", "application/json", body)
	newRes := newPlugin.Write("POST", "/apis/apps/v1/namespaces/ns/deployments", "application/json", body)
	oldTo, _ := oldRes.Header(plugintest.RoutingHeader)
	newTo, _ := newRes.Header(plugintest.RoutingHeader)
	if !oldRes.Forwarded || oldTo != "" || !newRes.Forwarded || newTo != "kube-a" {
		t.Errorf("a create setting the field only kube-a knows: the old module routes to %q (forwarded %v), this one to %q (forwarded %v); want the gateway's choice and kube-a",
			oldTo, oldRes.Forwarded, newTo, newRes.Forwarded)
	}
}

// This build's module under the controller of the previous minor version:
// it reads its configuration with nothing to ignore and routes exactly as
// the module of that version does.
func TestThisModuleAcceptsTheConfigurationOfThePreviousMinorsController(t *testing.T) {
	old := loadPreviousMinor(t)
	if !strings.Contains(string(old.config), `"schemaVersion":"`+old.version.String()+`"`) {
		t.Fatalf("the configuration of %s does not declare schema %v: %.120s", old.commit, old.version, old.config)
	}
	wasm, err := builtPlugin()
	if err != nil {
		t.Fatal(err)
	}
	newPlugin, err := pluginHarness{wasm: wasm}.Start(t, plugintest.StartOptions{Config: old.config})
	if err != nil {
		t.Fatalf("this module rejects the configuration of schema %v (%s): %v", old.version, old.commit, err)
	}
	oldPlugin, err := pluginHarness{wasm: old.wasm}.Start(t, plugintest.StartOptions{Config: old.config})
	if err != nil {
		t.Fatal(err)
	}
	if got := ignoredFields(t, newPlugin); got != 0 {
		t.Errorf("ignored-fields counter %d; an older configuration has nothing this module does not know", got)
	}
	for _, r := range schemaRequests {
		// Re-routed requests are spread by a counter both modules keep
		// alike, so equal routing means equal clusters.
		for range 2 {
			if oldTo, newTo := routing(t, oldPlugin, r.method, r.path), routing(t, newPlugin, r.method, r.path); oldTo != newTo {
				t.Errorf("%s: the module of %v routes to %q, this one to %q; want the same", r.name, old.version, oldTo, newTo)
			}
		}
	}
	// And pushed into a running VM, as Envoy pushes each new configuration.
	if err := newPlugin.(plugintest.Reconfigurer).Reconfigure(old.config); err != nil {
		t.Errorf("reconfiguration with the older controller's configuration: %v", err)
	}
}

// The baseline: the module from before the configuration had a schema
// version refuses every configuration of a controller one release ahead
// (an unknown field), so an Envoy keeps its last one and every later
// snapshot is lost; it announces no version, so this controller refuses to
// start in front of it instead (serve.checkModuleSchemas).
func TestModuleFromBeforeSchemaVersionsRefusesANewerControllersConfiguration(t *testing.T) {
	tree, err := plugintest.CheckOutBeforeSchemaVersions()
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(tree.Dir)
	wasm, err := tree.BuildModule()
	if err != nil {
		t.Fatal(err)
	}
	_, err = pluginHarness{wasm: wasm}.Start(t, plugintest.StartOptions{Config: thisControllersConfiguration(t)})
	if err == nil || !strings.Contains(err.Error(), `unknown field \"schemaVersion\"`) {
		t.Errorf("the module of %s: %v; want this controller's configuration refused for its unknown field schemaVersion", tree.Commit, err)
	}
	if _, err := config.ModuleSchemaVersion(wasm); err == nil || !strings.Contains(err.Error(), "announces no schema version") {
		t.Errorf("ModuleSchemaVersion: %v; want the missing announcement named", err)
	}
}
