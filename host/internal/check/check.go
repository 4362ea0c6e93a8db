// Package check is `skewgate check`: before or during an API-server upgrade,
// it finds what in a cluster meets a difference between the current servers
// and the target version while both serve, and after the upgrade: objects of
// resources only one side serves, owner references the garbage collector
// resolves on one side only, namespaces whose deletion leaves objects behind,
// CRD stored versions, self-registered APIServices, admission rules and
// policies, field selectors, and removed API versions still in use.
//
// It reads, read-only: the current cluster's discovery and its objects'
// metadata (paged metadata-only lists, decoded as they stream, one page at a
// time), the API configuration objects (CRDs, APIServices, admission webhook
// configurations and policies), the target's discovery documents (built in
// for pinned versions, from a directory, or from a live server), and
// optionally the request shapes a running `skewgate serve` recorded.
// Every finding names its evidence.
package check

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/skewgate/skewgate/host/internal/gateway"
)

// Exit statuses of `skewgate check`.
const (
	ExitClean    = 0
	ExitFindings = 1
	// ExitError: the check could not be completed (bad input, an unreachable
	// or refusing cluster); nothing is reported as a result.
	ExitError = 2
)

// Defaults of the options.
const (
	DefaultChunkSize      = 500
	DefaultRequestTimeout = 60 * time.Second
)

// Options are the flags of `skewgate check`, in the pattern of
// k8s.io/apiserver's options: AddFlags registers them, Validate names every
// flag given wrongly.
type Options struct {
	Kubeconfig string
	Context    string
	// To, ToServer and ToFixtures name the target; exactly one is given.
	To, ToServer, ToFixtures string
	// FromSkewgate is the metrics address of a running `skewgate serve`.
	FromSkewgate   string
	Output         string
	ChunkSize      int
	RequestTimeout time.Duration
}

// NewOptions returns the defaults.
func NewOptions() *Options {
	return &Options{Output: OutputTable, ChunkSize: DefaultChunkSize, RequestTimeout: DefaultRequestTimeout}
}

// AddFlags registers the options on fs.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Kubeconfig, "kubeconfig", o.Kubeconfig, "kubeconfig of the current cluster (default: $KUBECONFIG or ~/.kube/config); point it at one API server of the current version, not at a load balancer over both")
	fs.StringVar(&o.Context, "context", o.Context, "kubeconfig context to use (default: the current context)")
	fs.StringVar(&o.To, "to", o.To, "target Kubernetes version, checked against the documents built in for it (captured from real servers of the pinned versions)")
	fs.StringVar(&o.ToServer, "to-server", o.ToServer, "URL of a live API server of the target version, e.g. the first upgraded one; asked with the kubeconfig's credentials and CA")
	fs.StringVar(&o.ToFixtures, "to-fixtures", o.ToFixtures, "directory of the target's documents: apis.json and api.json (GET /apis and /api, aggregated discovery) and optionally fieldselectors.json")
	fs.StringVar(&o.FromSkewgate, "from-skewgate", o.FromSkewgate, "URL of the metrics listener (--metrics-bind-address) of a running skewgate serve: findings name the clients it saw")
	fs.StringVarP(&o.Output, "output", "o", o.Output, "output format: table, json or yaml")
	fs.IntVar(&o.ChunkSize, "chunk-size", o.ChunkSize, "objects per page of every list (limit); one page at a time is requested and decoded as it arrives")
	fs.DurationVar(&o.RequestTimeout, "request-timeout", o.RequestTimeout, "longest a single request may take")
}

// Validate returns one error per flag given wrongly, each naming the flag.
func (o *Options) Validate() []error {
	var errs []error
	var targets []string
	for _, t := range []struct{ flag, value string }{{"--to", o.To}, {"--to-server", o.ToServer}, {"--to-fixtures", o.ToFixtures}} {
		if t.value != "" {
			targets = append(targets, t.flag)
		}
	}
	switch len(targets) {
	case 0:
		errs = append(errs, errors.New("no target: give --to VERSION, --to-server URL or --to-fixtures DIR"))
	case 1:
	default:
		errs = append(errs, fmt.Errorf("%s: give exactly one target", strings.Join(targets, ", ")))
	}
	if o.ToServer != "" {
		if u, err := url.Parse(o.ToServer); err != nil || u.Scheme != "https" || u.Host == "" {
			errs = append(errs, fmt.Errorf("--to-server %q: must be https://host[:port]", o.ToServer))
		}
	}
	if o.FromSkewgate != "" {
		if u, err := url.Parse(o.FromSkewgate); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			errs = append(errs, fmt.Errorf("--from-skewgate %q: must be http://host:port, the metrics listener of skewgate serve", o.FromSkewgate))
		}
	}
	if !slices.Contains([]string{OutputTable, OutputJSON, OutputYAML}, o.Output) {
		errs = append(errs, fmt.Errorf("--output %q: must be table, json or yaml", o.Output))
	}
	if o.ChunkSize < 1 {
		errs = append(errs, fmt.Errorf("--chunk-size %d: must be at least 1", o.ChunkSize))
	}
	if o.RequestTimeout <= 0 {
		errs = append(errs, fmt.Errorf("--request-timeout %v: must be positive", o.RequestTimeout))
	}
	return errs
}

// restConfig loads the kubeconfig as kubectl does.
func (o *Options) restConfig() (*rest.Config, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = o.Kubeconfig
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: o.Context}).ClientConfig()
	if err != nil {
		flag := "--kubeconfig"
		if o.Context != "" {
			flag = "--kubeconfig/--context"
		}
		return nil, fmt.Errorf("%s: %w", flag, err)
	}
	cfg.Timeout = o.RequestTimeout
	return cfg, nil
}

// Run checks and writes the report to stdout; a summary, notes and errors go
// to stderr. It returns the exit status.
func Run(ctx context.Context, o *Options, stdout, stderr io.Writer) int {
	report, err := check(ctx, o)
	if err != nil {
		writeError(stderr, err)
		return ExitError
	}
	if err := report.Write(stdout, o.Output); err != nil {
		writeError(stderr, err)
		return ExitError
	}
	report.writeSummary(stderr, o.Output == OutputTable)
	if len(report.Findings) > 0 {
		return ExitFindings
	}
	return ExitClean
}

func check(ctx context.Context, o *Options) (*Report, error) {
	start := time.Now()
	var requests atomic.Int64
	cfg, err := o.restConfig()
	if err != nil {
		return nil, err
	}
	current, err := newClient(cfg, "--kubeconfig", &requests)
	if err != nil {
		return nil, err
	}
	from, err := liveSide(ctx, current)
	if err != nil {
		return nil, err
	}
	from.source = "kube-apiserver " + from.version + " at " + current.base.Redacted() + " (--kubeconfig)"
	to, err := o.target(ctx, cfg, &requests)
	if err != nil {
		return nil, err
	}
	config, err := readConfiguration(ctx, current, from.api, o.ChunkSize)
	if err != nil {
		return nil, err
	}
	shadowed := carryClusterAPIs(from, to, config)

	var traffic *gateway.RequestShapes
	if o.FromSkewgate != "" {
		if traffic, err = readRequestShapes(ctx, o.FromSkewgate, o.RequestTimeout); err != nil {
			return nil, err
		}
	}

	// A target server that shares the current cluster's storage lists the
	// objects of the resources only it serves.
	var toObjects *API
	if to.client != nil {
		fromUID, err := current.clusterUID(ctx)
		if err != nil {
			return nil, err
		}
		toUID, err := to.client.clusterUID(ctx)
		if err != nil {
			return nil, err
		}
		if fromUID == toUID {
			toObjects = to.api
		}
	}
	// The schemas: a live target's own, compared with the current server's;
	// otherwise the captured comparison of the two minor versions.
	var skew *schemaSkew
	var skewNote string
	if to.client != nil {
		skew, err = liveSchemaSkew(ctx, from, to)
	} else {
		skew, skewNote, err = schemaSkewFor(from, to)
	}
	if err != nil {
		return nil, err
	}
	sc := newScanner(from.api, to.api, skew)
	result := newScanResult()
	fromList, toList := listPlan(from.api, toObjects)
	for _, plan := range []struct {
		c         *client
		resources []*Resource
	}{{current, fromList}, {to.client, toList}} {
		for _, r := range plan.resources {
			res, err := sc.scanResource(ctx, plan.c, r, o.ChunkSize)
			if err != nil {
				return nil, err
			}
			result.merge(res)
		}
	}

	a := &analysis{from: from, to: to, cfg: config, scan: result, traffic: traffic, selectors: newSelectorOracle(ctx), skew: skew}
	a.resourceFindings()
	a.apiVersionFindings()
	a.garbageCollectionFindings()
	a.namespaceFindings()
	a.crdFindings()
	a.crdShadowFindings(shadowed)
	a.apiServiceFindings()
	a.admissionFindings()
	a.fieldFindings()
	if err := a.fieldSelectorFindings(); err != nil {
		return nil, err
	}
	if toObjects == nil && len(toOnlyListable(from.api, to.api)) > 0 {
		a.notes = append(a.notes, fmt.Sprintf("objects of resources only %s serves were not counted: no server of the current cluster "+
			"serves them, so none exist unless a %s server already runs in the cluster (--to-server of that server counts them): %s",
			to.label, to.label, strings.Join(toOnlyListable(from.api, to.api), ", ")))
	}
	if skewNote != "" {
		a.notes = append(a.notes, skewNote)
	}
	if result.malformedFields > 0 {
		a.notes = append(a.notes, fmt.Sprintf("%d managed-fields sets could not be read; their fields were not compared", result.malformedFields))
	}
	sortFindings(a.findings)

	report := &Report{
		From:     SideReport{Version: from.version, Source: from.source, ServedOnlyHere: onlyServed(from.api, to.api)},
		To:       SideReport{Version: to.version, Source: to.source, ServedOnlyHere: onlyServed(to.api, from.api)},
		Findings: a.findings,
		Notes:    a.notes,
		Scan:     ScanReport{Resources: len(result.listed), Requests: requests.Load(), Seconds: time.Since(start).Seconds()},
	}
	if report.Findings == nil {
		report.Findings = []Finding{}
	}
	for _, n := range result.objects {
		report.Scan.Objects += n
	}
	return report, nil
}

// target builds the target side from the flag given.
func (o *Options) target(ctx context.Context, cfg *rest.Config, requests *atomic.Int64) (*side, error) {
	switch {
	case o.To != "":
		return pinnedSide(o.To)
	case o.ToFixtures != "":
		return dirSide(o.ToFixtures)
	}
	toCfg := rest.CopyConfig(cfg)
	toCfg.Host = o.ToServer
	c, err := newClient(toCfg, "--to-server", requests)
	if err != nil {
		return nil, err
	}
	s, err := liveSide(ctx, c)
	if err != nil {
		return nil, err
	}
	s.source = "kube-apiserver " + s.version + " at " + c.base.Redacted() + " (--to-server)"
	return s, nil
}

// carryClusterAPIs adds to the target what the current cluster serves
// through its own configuration rather than the API servers' code: the
// versions of its CRDs, and group versions of aggregated APIServices. Every
// server of a cluster serves those whatever its version, unless it serves
// that group version itself: a built-in group version takes precedence over
// a CRD's. It returns the CRD versions the target's documents show it
// serving itself, when they list built-in APIs alone.
func carryClusterAPIs(from, to *side, cfg *configuration) (shadowed []shadowedVersion) {
	for i := range cfg.crds {
		for _, r := range cfg.crds[i].resources() {
			if !to.api.ServesGroupVersion(r.GroupVersion) {
				to.api.add(r)
			} else if to.builtinOnly {
				shadowed = append(shadowed, shadowedVersion{&cfg.crds[i], r})
			}
		}
	}
	for _, svc := range cfg.apiServices {
		gv := GroupVersion{svc.Spec.Group, svc.Spec.Version}
		if svc.Spec.Service == nil || to.api.ServesGroupVersion(gv) {
			continue
		}
		for _, r := range from.api.sortedResources() {
			if r.GroupVersion == gv {
				to.api.add(r)
			}
		}
	}
	return shadowed
}

// shadowedVersion is a CRD version in a group version the target serves
// itself.
type shadowedVersion struct {
	crd      *customResourceDefinition
	resource *Resource
}

// onlyServed lists what a serves and b does not, as "apiVersion resource".
func onlyServed(a, b *API) []string {
	out := []string{}
	for _, r := range a.sortedResources() {
		if !b.Serves(r.GroupVersionResource) {
			out = append(out, r.String())
		}
	}
	return out
}

// toOnlyListable lists the listable group resources only the target serves.
func toOnlyListable(from, to *API) []string {
	var out []string
	_, toList := listPlan(from, to)
	for _, r := range toList {
		out = append(out, r.GroupResource().String())
	}
	return out
}

// DebugHandlersFlag is the flag of skewgate serve without which its metrics
// listener does not serve /debug/requests.
const DebugHandlersFlag = "debug-handlers"

// readRequestShapes reads a running skewgate's record of request shapes.
func readRequestShapes(ctx context.Context, base string, timeout time.Duration) (*gateway.RequestShapes, error) {
	u := strings.TrimSuffix(base, "/") + "/debug/requests"
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, fmt.Errorf("--from-skewgate: %w", err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("--from-skewgate %s: unreachable: %w", base, err)
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusNotFound:
		return nil, fmt.Errorf("--from-skewgate %s: GET /debug/requests answered %s: skewgate serve serves it only with --%s; "+
			"is it the metrics listener of skewgate serve, started with that flag?", base, resp.Status, DebugHandlersFlag)
	default:
		return nil, fmt.Errorf("--from-skewgate %s: GET /debug/requests answered %s: is it the metrics listener of skewgate serve?", base, resp.Status)
	}
	var shapes gateway.RequestShapes
	if err := decodeJSON(resp.Body, &shapes); err != nil {
		return nil, fmt.Errorf("--from-skewgate %s: /debug/requests: %w", base, err)
	}
	return &shapes, nil
}
