// Command capture-fixtures starts real kube-apiservers and records their discovery documents under
// fixtures/: every pinned version's own (profile=nopeer) aggregated /apis and /api, with and
// without extra runtime-config APIs; the peer-aggregated /apis of mixed-version MVP clusters with
// their members' documents; the resources whose availability differs between adjacent
// versions, probed on live servers; every version's field-selector labels per resource, probed
// (fixtures/fieldselectors/); and the field paths whose presence in the OpenAPI v3 schemas
// differs between adjacent versions (fixtures/schema-skew.json). Bodies are stored exactly as
// served. fixtures/manifest.json and fixtures/README.md are regenerated from what was actually run.
//
// Usage, from anywhere inside the repository:
//
//	go run ./host/testcluster/cmd/capture-fixtures [-out DIR]
package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"

	"github.com/skewgate/skewgate/fixtures"
	"github.com/skewgate/skewgate/host/testcluster"
)

const (
	moduleRoot = "github.com/skewgate/skewgate"
	command    = "go run ./host/testcluster/cmd/capture-fixtures"

	acceptAggregated = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
	acceptNoPeer     = acceptAggregated + ";profile=nopeer"

	profileDefault = "default"
	profileExtra   = "extra"

	convergenceTimeout = 3 * time.Minute
)

// extraRuntimeConfig enables, per version, group versions that the version serves only on request
// and without feature gates. 1.37 stops serving the v1beta1 IPAddress, ServiceCIDR and
// VolumeAttributesClass, so it gets the v1alpha1 mutating admission policies instead.
var extraRuntimeConfig = map[string][]string{
	testcluster.KubeVersion130: {"admissionregistration.k8s.io/v1beta1=true", "networking.k8s.io/v1alpha1=true", "storage.k8s.io/v1alpha1=true"},
	testcluster.KubeVersion131: {"admissionregistration.k8s.io/v1beta1=true", "coordination.k8s.io/v1alpha1=true", "networking.k8s.io/v1beta1=true", "storage.k8s.io/v1beta1=true"},
	testcluster.KubeVersion135: {"coordination.k8s.io/v1alpha2=true", "networking.k8s.io/v1beta1=true", "storage.k8s.io/v1beta1=true"},
	testcluster.KubeVersion136: {"coordination.k8s.io/v1alpha2=true", "networking.k8s.io/v1beta1=true", "storage.k8s.io/v1beta1=true"},
	testcluster.KubeVersion137: {"admissionregistration.k8s.io/v1alpha1=true", "coordination.k8s.io/v1alpha2=true"},
}

// mixedClusters are the MVP clusters whose peer-aggregated discovery is captured, each from its
// aggregator member. The aggregator must lack some resource of a peer, so that the capture can
// tell when the peer's discovery has been merged: in the 1.35/1.36 cluster the 1.35 member serves
// the extra APIs; in the 1.36/1.37 cluster 1.37 adds resources, a group, a status subresource
// and a different group order.
//
// The merge walks servers in server-ID order, so the leader (lowest ID) shapes the result: the
// first cluster starts from a peer, the second from the aggregator itself.
var mixedClusters = []mixedCluster{
	{
		members:    []member{{testcluster.KubeVersion135, profileExtra}, {testcluster.KubeVersion136, profileDefault}},
		aggregator: testcluster.KubeVersion136,
		leader:     testcluster.KubeVersion135,
	},
	{
		members:    []member{{testcluster.KubeVersion136, profileDefault}, {testcluster.KubeVersion137, profileDefault}},
		aggregator: testcluster.KubeVersion136,
		leader:     testcluster.KubeVersion136,
	},
}

type mixedCluster struct {
	members    []member
	aggregator string
	leader     string
}

// hostnames names the members "mixed-<version>-<profile>", appending the smallest numeric suffix
// to the leader's name that gives it the lowest server ID.
func (m mixedCluster) hostnames() []string {
	for suffix := 0; ; suffix++ {
		names := make([]string, len(m.members))
		leaderID := ""
		for i, mem := range m.members {
			names[i] = hostname("mixed", mem.version, mem.profile)
			if mem.version == m.leader {
				if suffix > 0 {
					names[i] += "-" + strconv.Itoa(suffix)
				}
				leaderID = testcluster.ServerID(names[i])
			}
		}
		if !slices.ContainsFunc(names, func(n string) bool { return testcluster.ServerID(n) < leaderID }) {
			return names
		}
	}
}

func (m mixedCluster) dir() string {
	var versions []string
	for _, mem := range m.members {
		versions = append(versions, strings.TrimPrefix(mem.version, "v"))
	}
	return "mixed-" + strings.Join(versions, "-")
}

// skewPairs are the pairs of pinned versions whose differing resources are probed and whose
// schemas are compared: each a minor upgrade.
var skewPairs = [][2]string{
	{testcluster.KubeVersion130, testcluster.KubeVersion131},
	{testcluster.KubeVersion135, testcluster.KubeVersion136},
	{testcluster.KubeVersion136, testcluster.KubeVersion137},
}

type member struct {
	version, profile string
}

func runtimeConfigFor(version, profile string) []string {
	if profile == profileExtra {
		return extraRuntimeConfig[version]
	}
	return nil
}

// hostname gives each captured server a stable host name, so its server ID (and with it the
// peer merge order) is the same on every capture.
func hostname(prefix, version, profile string) string {
	return prefix + "-" + strings.NewReplacer("v", "", ".", "-").Replace(version) + "-" + profile
}

// Manifest is fixtures/manifest.json.
type Manifest struct {
	Command            string               `json:"command"`
	Versions           ManifestVersions     `json:"versions"`
	ExtraRuntimeConfig map[string][]string  `json:"extraRuntimeConfig"`
	Accept             map[string]string    `json:"accept"`
	Documents          []Document           `json:"documents"`
	Mixed              []Mixed              `json:"mixed"`
	Skew               []Skew               `json:"skew"`
	ServerFlags        map[string][]string  `json:"serverFlags"`
	ExtraAPIsFound     map[string][]string  `json:"extraAPIsFound"`
	FieldSelectors     []FieldSelectorTable `json:"fieldSelectors"`
	Notes              []string             `json:"notes"`
}

// ManifestVersions pins what produced the documents.
type ManifestVersions struct {
	KubeAPIServer []string `json:"kubeAPIServer"`
	Etcd          string   `json:"etcd"`
	Go            string   `json:"go"`
}

// Document describes one stored response body.
type Document struct {
	Path        string `json:"path"`
	Version     string `json:"version"`
	Profile     string `json:"profile"`
	Hostname    string `json:"hostname"`
	ServerID    string `json:"serverID"`
	Request     string `json:"request"`
	Accept      string `json:"accept"`
	ContentType string `json:"contentType"`
	ETag        string `json:"etag"`
	SHA256      string `json:"sha256"`
	Bytes       int    `json:"bytes"`
}

// Mixed describes one mixed-version MVP capture.
type Mixed struct {
	Dir            string     `json:"dir"`
	PeerAggregated Document   `json:"peerAggregated"`
	Members        []Document `json:"members"`
}

// Skew lists the resources served by only one of two adjacent versions' default servers, with the
// HTTP status each server answered for a GET of the collection.
type Skew struct {
	Older       string  `json:"older"`
	Newer       string  `json:"newer"`
	OnlyInNewer []Probe `json:"onlyInNewer"`
	OnlyInOlder []Probe `json:"onlyInOlder"`
}

// Probe is one resource's collection GET on both servers.
type Probe struct {
	Group    string         `json:"group"`
	Version  string         `json:"version"`
	Resource string         `json:"resource"`
	Path     string         `json:"path"`
	Status   map[string]int `json:"status"`
}

type capturer struct {
	log      logger
	ctx      context.Context
	staging  string
	manifest Manifest
	// gvrs holds each version's default-profile resources (/api and /apis) for the skew probes.
	gvrs map[string][]gvr
	// clusters stay up until the skew probes ran.
	clusters map[string]*testcluster.Cluster
	// fields holds each version's default-server kinds' field paths by resource key, labels the
	// field-selector labels each version accepts by resource key.
	fields map[string]map[string]kindFields
	labels map[string]map[string][]string
	// schemaSkew compares the schemas of each of skewPairs.
	schemaSkew []fixtures.SchemaSkew
}

type logger struct{ *log.Logger }

func (l logger) Logf(format string, args ...any) { l.Printf(format, args...) }

func main() {
	out := flag.String("out", "", "fixtures directory (default: the repository's fixtures/)")
	timeout := flag.Duration("timeout", 45*time.Minute, "overall time limit, including any binary builds")
	flag.Parse()
	lg := logger{log.New(os.Stderr, "capture-fixtures: ", log.LstdFlags)}
	if err := run(lg, *out, *timeout); err != nil {
		lg.Fatal(err)
	}
}

func run(lg logger, out string, timeout time.Duration) error {
	if out == "" {
		root, err := findModuleRoot()
		if err != nil {
			return err
		}
		out = filepath.Join(root, "fixtures")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	staging, err := os.MkdirTemp(out, ".capture-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(staging)

	c := &capturer{
		log:      lg,
		ctx:      ctx,
		staging:  staging,
		gvrs:     map[string][]gvr{},
		clusters: map[string]*testcluster.Cluster{},
		fields:   map[string]map[string]kindFields{},
		labels:   map[string]map[string][]string{},
	}
	defer c.closeClusters()
	if err := c.captureAll(); err != nil {
		return err
	}
	if err := publish(staging, out); err != nil {
		return err
	}
	lg.Printf("wrote %s", out)
	return nil
}

func (c *capturer) captureAll() error {
	c.manifest = Manifest{
		Command: command,
		Versions: ManifestVersions{
			KubeAPIServer: testcluster.KubeAPIServerVersions,
			Etcd:          testcluster.EtcdVersion,
			Go:            goVersion(),
		},
		ExtraRuntimeConfig: extraRuntimeConfig,
		Accept:             map[string]string{"nopeer": acceptNoPeer, "peerAggregated": acceptAggregated},
		ServerFlags:        map[string][]string{},
		ExtraAPIsFound:     map[string][]string{},
	}
	for _, v := range testcluster.KubeAPIServerVersions {
		if err := c.captureVersion(v); err != nil {
			return fmt.Errorf("capturing %s: %w", v, err)
		}
	}
	for _, pair := range skewPairs {
		skew, err := c.probeSkew(pair[0], pair[1])
		if err != nil {
			return err
		}
		c.manifest.Skew = append(c.manifest.Skew, skew)
		c.schemaSkew = append(c.schemaSkew, c.compareSchemas(pair[0], pair[1]))
	}
	c.closeClusters()
	for _, m := range mixedClusters {
		if err := c.captureMixed(m); err != nil {
			return fmt.Errorf("capturing %s: %w", m.dir(), err)
		}
	}
	c.manifest.Notes = notes()
	data, err := json.MarshalIndent(c.manifest, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(c.staging, "manifest.json"), append(data, '\n'), 0o644); err != nil {
		return err
	}
	skew, err := json.MarshalIndent(c.schemaSkew, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(c.staging, schemaSkewFile), append(skew, '\n'), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(c.staging, "README.md"), []byte(readme(c.manifest, c.labels, c.schemaSkew)), 0o644)
}

func (c *capturer) closeClusters() {
	for v, cl := range c.clusters {
		if err := cl.Close(); err != nil {
			c.log.Printf("closing the %s cluster: %v", v, err)
		}
		delete(c.clusters, v)
	}
}

// captureVersion runs one cluster with a default and an extra server of version v and stores both
// servers' nopeer /apis and /api.
func (c *capturer) captureVersion(v string) error {
	spec := testcluster.Spec{}
	for _, profile := range []string{profileDefault, profileExtra} {
		spec.Servers = append(spec.Servers, testcluster.ServerSpec{
			Name:          hostname("fixture", v, profile),
			Version:       v,
			RuntimeConfig: runtimeConfigFor(v, profile),
		})
	}
	cl, err := testcluster.Start(c.ctx, c.log, spec)
	if err != nil {
		return err
	}
	c.clusters[v] = cl
	client := adminClient(cl)
	dir := strings.TrimPrefix(v, "v")
	perProfile := map[string][]gvr{}
	for i, profile := range []string{profileDefault, profileExtra} {
		srv := cl.Server(i)
		c.manifest.ServerFlags[dir+"/"+profile] = redactFlags(srv.Args, cl.Dir(), cl.EtcdURL())
		var all []gvr
		for _, request := range []string{"/apis", "/api"} {
			doc, body, err := c.store(client, srv, profile, request, acceptNoPeer, filepath.Join(dir, profile, strings.TrimPrefix(request, "/")+".json"))
			if err != nil {
				return err
			}
			c.manifest.Documents = append(c.manifest.Documents, doc)
			parsed, err := parseGVRs(body)
			if err != nil {
				return fmt.Errorf("%s %s: %w", srv.Name, request, err)
			}
			all = append(all, parsed...)
		}
		perProfile[profile] = all
	}
	c.gvrs[v] = perProfile[profileDefault]

	// The extra profile must add exactly the requested group versions.
	added := groupVersions(difference(perProfile[profileExtra], perProfile[profileDefault]))
	var want []string
	for _, rc := range extraRuntimeConfig[v] {
		want = append(want, strings.TrimSuffix(rc, "=true"))
	}
	if !slices.Equal(added, want) {
		return fmt.Errorf("%s: extra runtime config added group versions %q, want %q", v, added, want)
	}
	c.manifest.ExtraAPIsFound[dir] = added
	return c.captureFieldSelectors(cl, v)
}

// store fetches request from srv with accept and writes the body, byte for byte, to rel.
func (c *capturer) store(client *http.Client, srv testcluster.Server, profile, request, accept, rel string) (Document, []byte, error) {
	status, header, body, err := fetch(c.ctx, client, srv.URL+request, accept)
	if err != nil {
		return Document{}, nil, err
	}
	if status != http.StatusOK {
		return Document{}, nil, fmt.Errorf("%s %s: HTTP %d: %s", srv.Name, request, status, body)
	}
	if err := writeFile(filepath.Join(c.staging, rel), body); err != nil {
		return Document{}, nil, err
	}
	sum := sha256.Sum256(body)
	return Document{
		Path:        filepath.ToSlash(rel),
		Version:     srv.Version,
		Profile:     profile,
		Hostname:    srv.Name,
		ServerID:    srv.ServerID,
		Request:     request,
		Accept:      accept,
		ContentType: header.Get("Content-Type"),
		ETag:        header.Get("ETag"),
		SHA256:      hex.EncodeToString(sum[:]),
		Bytes:       len(body),
	}, body, nil
}

// probeSkew GETs every resource collection that only one of the two default servers advertises
// on both servers, and requires that the server lacking it answers 404 while the other does not.
func (c *capturer) probeSkew(older, newer string) (Skew, error) {
	skew := Skew{Older: older, Newer: newer}
	for _, side := range []struct {
		onlyIn, lacking string
		dst             *[]Probe
	}{
		{newer, older, &skew.OnlyInNewer},
		{older, newer, &skew.OnlyInOlder},
	} {
		*side.dst = []Probe{}
		for _, r := range difference(c.gvrs[side.onlyIn], c.gvrs[side.lacking]) {
			p := Probe{Group: r.group, Version: r.version, Resource: r.resource, Path: r.collectionPath(), Status: map[string]int{}}
			for _, v := range []string{older, newer} {
				cl := c.clusters[v]
				status, _, _, err := fetch(c.ctx, adminClient(cl), cl.Server(0).URL+p.Path, "application/json")
				if err != nil {
					return Skew{}, err
				}
				p.Status[v] = status
			}
			if p.Status[side.lacking] != http.StatusNotFound || p.Status[side.onlyIn] == http.StatusNotFound {
				return Skew{}, fmt.Errorf("%s: %s answered %d and %s answered %d; want 404 only from %s",
					p.Path, older, p.Status[older], newer, p.Status[newer], side.lacking)
			}
			*side.dst = append(*side.dst, p)
		}
	}
	c.log.Printf("skew %s -> %s: %d resources only in %s, %d only in %s",
		older, newer, len(skew.OnlyInNewer), newer, len(skew.OnlyInOlder), older)
	return skew, nil
}

// captureMixed runs an MVP cluster, waits until the aggregator's peer-aggregated /apis covers
// every member's resources, and stores it with the members' own documents, checking that nothing
// changed while capturing.
func (c *capturer) captureMixed(m mixedCluster) error {
	spec := testcluster.Spec{}
	names := m.hostnames()
	for i, mem := range m.members {
		spec.Servers = append(spec.Servers, testcluster.ServerSpec{
			Name:          names[i],
			Version:       mem.version,
			RuntimeConfig: runtimeConfigFor(mem.version, mem.profile),
			MVP:           true,
		})
	}
	cl, err := testcluster.Start(c.ctx, c.log, spec)
	if err != nil {
		return err
	}
	defer cl.Close()
	client := adminClient(cl)
	aggregator := cl.Server(slices.IndexFunc(m.members, func(mem member) bool { return mem.version == m.aggregator }))

	var union, local []gvr
	for i, mem := range m.members {
		srv := cl.Server(i)
		c.manifest.ServerFlags[m.dir()+"/"+strings.TrimPrefix(mem.version, "v")] = redactFlags(srv.Args, cl.Dir(), cl.EtcdURL())
		_, _, body, err := fetch(c.ctx, client, srv.URL+"/apis", acceptNoPeer)
		if err != nil {
			return err
		}
		parsed, err := parseGVRs(body)
		if err != nil {
			return err
		}
		union = append(union, parsed...)
		if srv.Index == aggregator.Index {
			local = parsed
		}
	}
	want := unique(union)
	if slices.Equal(want, local) {
		return fmt.Errorf("%s serves every member resource itself, so merging would be unobservable", aggregator.Name)
	}
	if err := c.awaitPeerMerge(client, aggregator, want); err != nil {
		return err
	}

	// Capture twice; identical bytes and ETags show the documents were stable and consistent.
	var first []Document
	for round := range 2 {
		var docs []Document
		peer, _, err := c.store(client, aggregator, "peer-aggregated", "/apis", acceptAggregated, filepath.Join(m.dir(), "peer-aggregated", "apis.json"))
		if err != nil {
			return err
		}
		if peer.ETag == "" {
			return errors.New("peer-aggregated /apis carried no ETag")
		}
		docs = append(docs, peer)
		for i, mem := range m.members {
			for _, request := range []string{"/apis", "/api"} {
				rel := filepath.Join(m.dir(), "members", strings.TrimPrefix(mem.version, "v"), strings.TrimPrefix(request, "/")+".json")
				doc, _, err := c.store(client, cl.Server(i), mem.profile, request, acceptNoPeer, rel)
				if err != nil {
					return err
				}
				docs = append(docs, doc)
			}
		}
		if round == 0 {
			first = docs
			time.Sleep(2 * time.Second)
			continue
		}
		if !slices.Equal(first, docs) {
			return errors.New("documents changed between two captures")
		}
		c.manifest.Mixed = append(c.manifest.Mixed, Mixed{Dir: m.dir(), PeerAggregated: docs[0], Members: docs[1:]})
	}
	c.log.Printf("%s: %s merged its peers' discovery", m.dir(), aggregator.Name)
	return nil
}

// awaitPeerMerge polls the aggregator's peer-aggregated /apis until it advertises exactly want.
// Peer discovery is event-driven and retried with backoff, so it lags readiness by seconds.
func (c *capturer) awaitPeerMerge(client *http.Client, aggregator testcluster.Server, want []gvr) error {
	deadline := time.Now().Add(convergenceTimeout)
	for {
		_, _, body, err := fetch(c.ctx, client, aggregator.URL+"/apis", acceptAggregated)
		if err != nil {
			return err
		}
		got, err := parseGVRs(body)
		if err != nil {
			return err
		}
		if slices.Equal(got, want) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("peer-aggregated /apis of %s still differs from the members' union in %d resources after %s",
				aggregator.Name, len(difference(want, got))+len(difference(got, want)), convergenceTimeout)
		}
		select {
		case <-c.ctx.Done():
			return c.ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

func adminClient(cl *testcluster.Cluster) *http.Client {
	return &http.Client{
		Timeout: 30 * time.Second,
		// Without compression the body is read exactly as the server serialised it.
		Transport: &http.Transport{TLSClientConfig: cl.AdminTLSConfig(), DisableCompression: true},
	}
}

func fetch(ctx context.Context, client *http.Client, url, accept string) (int, http.Header, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, nil, nil, err
	}
	req.Header.Set("Accept", accept)
	resp, err := client.Do(req)
	if err != nil {
		return 0, nil, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, body, err
}

// gvr is a top-level resource as discovery advertises it.
type gvr struct {
	group, version, resource string
}

func (r gvr) collectionPath() string {
	if r.group == "" {
		return "/api/" + r.version + "/" + r.resource
	}
	return "/apis/" + r.group + "/" + r.version + "/" + r.resource
}

func compareGVR(a, b gvr) int {
	return strings.Compare(a.group+"\x00"+a.version+"\x00"+a.resource, b.group+"\x00"+b.version+"\x00"+b.resource)
}

func parseGVRs(body []byte) ([]gvr, error) {
	var list apidiscoveryv2.APIGroupDiscoveryList
	if err := json.Unmarshal(body, &list); err != nil {
		return nil, fmt.Errorf("decoding discovery: %w", err)
	}
	if list.Kind != "APIGroupDiscoveryList" {
		return nil, fmt.Errorf("discovery kind %q, want APIGroupDiscoveryList", list.Kind)
	}
	var out []gvr
	for _, g := range list.Items {
		for _, v := range g.Versions {
			for _, r := range v.Resources {
				out = append(out, gvr{g.Name, v.Version, r.Resource})
			}
		}
	}
	return unique(out), nil
}

func unique(rs []gvr) []gvr {
	out := slices.Clone(rs)
	slices.SortFunc(out, compareGVR)
	return slices.Compact(out)
}

// difference returns the resources of a that b lacks, sorted.
func difference(a, b []gvr) []gvr {
	var out []gvr
	for _, r := range unique(a) {
		if !slices.Contains(b, r) {
			out = append(out, r)
		}
	}
	return out
}

func groupVersions(rs []gvr) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.group+"/"+r.version)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// redactFlags replaces the per-run parts of a server's flags (the cluster directory, etcd URL and
// ports) with placeholders so they can be published.
func redactFlags(args []string, clusterDir, etcdURL string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		a = strings.ReplaceAll(a, etcdURL, "$ETCD_URL")
		a = strings.ReplaceAll(a, filepath.Join(clusterDir, "pki")+"/", "$PKI/")
		name, _, _ := strings.Cut(a, "=")
		switch name {
		case "--secure-port", "--peer-advertise-port":
			a = name + "=$PORT"
		}
		out[i] = a
	}
	return out
}

func writeFile(path string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, data, 0o644)
}

// schemaSkewFile is the generated comparison of the pinned versions' schemas.
const schemaSkewFile = "schema-skew.json"

// publish replaces the fixtures directory's generated entries with the staged ones, leaving any
// other file alone. The field-selector directory also holds the Go package that embeds the
// tables, so only its JSON files are replaced there.
func publish(staging, out string) error {
	entries, err := os.ReadDir(staging)
	if err != nil {
		return err
	}
	for _, e := range entries {
		dst := filepath.Join(out, e.Name())
		if e.Name() == fieldSelectorsDir {
			if err := publishJSON(filepath.Join(staging, e.Name()), dst); err != nil {
				return err
			}
			continue
		}
		if err := os.RemoveAll(dst); err != nil {
			return err
		}
		if err := os.Rename(filepath.Join(staging, e.Name()), dst); err != nil {
			return err
		}
	}
	return nil
}

// publishJSON replaces the *.json files of dst with those of src.
func publishJSON(src, dst string) error {
	old, err := filepath.Glob(filepath.Join(dst, "*.json"))
	if err != nil {
		return err
	}
	for _, f := range old {
		if err := os.Remove(f); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return err
	}
	staged, err := filepath.Glob(filepath.Join(src, "*.json"))
	if err != nil {
		return err
	}
	for _, f := range staged {
		if err := os.Rename(f, filepath.Join(dst, filepath.Base(f))); err != nil {
			return err
		}
	}
	return nil
}

func findModuleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && strings.HasPrefix(string(data), "module "+moduleRoot+"\n") {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("not inside the " + moduleRoot + " module; pass -out")
		}
		dir = parent
	}
}
