package check

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/skewgate/skewgate/discovery"
	"github.com/skewgate/skewgate/fixtures"
	"github.com/skewgate/skewgate/fixtures/fieldselectors"
)

// side is one version's API servers: what they serve and, for live servers,
// how to ask them.
type side struct {
	// label names the side in findings: its version, or where its documents
	// came from when they name none.
	label string
	// version is the servers' gitVersion, when known.
	version string
	// source says where the documents came from, for the report.
	source string
	api    *API
	// client reaches a live server of the side; nil for captured documents.
	client *client
	// builtinOnly marks documents captured from a server without CRDs or
	// aggregated APIs: every group version they list is the server's own.
	builtinOnly bool
	// fieldSelectors, when not nil, are the field-selector labels the side's
	// servers accept, by resource ("v1/services", "apps/v1/deployments");
	// see fieldSelectorTable.
	fieldSelectors map[string][]string
}

// fieldSelectorFile is the name of a field-selector table next to captured
// discovery documents, in the format of the tables `make fixtures` captures
// for every pinned version (package fixtures/fieldselectors). Without one,
// a side's acceptance is only known by asking a live server.
const fieldSelectorFile = "fieldselectors.json"

// pinnedVersions lists the versions whose documents are built in, captured
// from real servers by `make fixtures` (the default profile: no
// --runtime-config).
func pinnedVersions() ([]string, error) {
	m, err := fixtures.Load()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, d := range m.Documents {
		if d.Profile == "default" && !slices.Contains(out, d.Version) {
			out = append(out, d.Version)
		}
	}
	slices.SortFunc(out, compareVersions)
	return out, nil
}

// pinnedSide is the side of the built-in documents for version: "v1.36.3",
// "1.36.3", "v1.36" or any patch release of a pinned minor version (patch
// releases never change the served APIs, so the pinned patch of the minor
// stands for all).
func pinnedSide(version string) (*side, error) {
	versions, err := pinnedVersions()
	if err != nil {
		return nil, fmt.Errorf("--to: the built-in documents: %w", err)
	}
	want, ok := parseVersion(version)
	if !ok {
		return nil, fmt.Errorf("--to %q: not a Kubernetes version (vMAJOR.MINOR or vMAJOR.MINOR.PATCH); built-in documents: %s",
			version, strings.Join(versions, ", "))
	}
	var pinned string
	for _, v := range versions {
		if got, _ := parseVersion(v); got.major == want.major && got.minor == want.minor {
			pinned = v
		}
	}
	if pinned == "" {
		return nil, fmt.Errorf("--to %s: no documents are built in for Kubernetes %d.%d; built-in documents: %s "+
			"(for another version give --to-server or --to-fixtures)", version, want.major, want.minor, strings.Join(versions, ", "))
	}
	servers, err := fixtures.Servers("default", pinned)
	if err != nil {
		return nil, fmt.Errorf("--to %s: %w", version, err)
	}
	s, err := sideFromDocuments(pinned, "documents captured from kube-apiserver "+pinned+" (built in)", servers[0].APIs, servers[0].API)
	if err != nil {
		return nil, fmt.Errorf("--to %s: the built-in documents of %s: %w", version, pinned, err)
	}
	s.version, s.builtinOnly = pinned, true
	tables, err := fieldselectors.Tables()
	if err != nil {
		return nil, fmt.Errorf("--to %s: %w", version, err)
	}
	for _, t := range tables {
		if t.Version == pinned {
			s.fieldSelectors = t.Resources
		}
	}
	return s, nil
}

// dirSide is the side of the documents in dir: apis.json and api.json, the
// bodies of GET /apis and GET /api (aggregated discovery) as a server served
// them, and optionally fieldselectors.json.
func dirSide(dir string) (*side, error) {
	var docs [2][]byte
	for i, name := range []string{"apis.json", "api.json"} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return nil, fmt.Errorf("--to-fixtures %s: no %s: the directory must hold apis.json and api.json, the bodies of "+
				"GET /apis and GET /api with Accept: %s (as fixtures/<version>/default holds them)", dir, name, acceptAggregated)
		case err != nil:
			return nil, fmt.Errorf("--to-fixtures %s: %w", dir, err)
		}
		docs[i] = b
	}
	s, err := sideFromDocuments("the documents in "+dir, "documents in "+dir, docs[0], docs[1])
	if err != nil {
		return nil, fmt.Errorf("--to-fixtures %s: %w", dir, err)
	}
	if s.fieldSelectors, err = readFieldSelectors(os.DirFS(dir), fieldSelectorFile); err != nil {
		return nil, fmt.Errorf("--to-fixtures %s: %w", dir, err)
	}
	return s, nil
}

func sideFromDocuments(label, source string, apis, core []byte) (*side, error) {
	var lists [2]discovery.GroupList
	for i, doc := range [][]byte{apis, core} {
		name := [2]string{"apis.json", "api.json"}[i]
		list, err := discovery.ParseGroupList(doc)
		if err == nil {
			err = list.CheckPlacement(i == 1)
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		lists[i] = list
	}
	api := apiFromDiscovery(lists[0], lists[1])
	if len(api.resources) == 0 {
		return nil, errors.New("the documents list no resources")
	}
	return &side{label: label, source: source, api: api}, nil
}

// readFieldSelectors reads a field-selector table, nil when there is none.
func readFieldSelectors(fsys fs.FS, name string) (map[string][]string, error) {
	raw, err := fs.ReadFile(fsys, name)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var table fieldselectors.Table
	if err := json.Unmarshal(raw, &table); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if table.Resources == nil {
		return nil, fmt.Errorf("%s: no resources: a table is {\"version\": ..., \"resources\": {\"v1/services\": [labels], ...}}", name)
	}
	return table.Resources, nil
}

// liveSide reads what a live server serves.
func liveSide(ctx context.Context, c *client) (*side, error) {
	version, err := c.version(ctx)
	if err != nil {
		return nil, err
	}
	apis, core, err := c.discovery(ctx)
	if err != nil {
		return nil, err
	}
	return &side{label: version, version: version, source: "kube-apiserver " + version + " at " + c.base.Redacted(), api: apiFromDiscovery(apis, core), client: c}, nil
}

type version struct{ major, minor, patch int }

// parseVersion reads v1.36, v1.36.3 or 1.36.3, ignoring any pre-release or
// build suffix (v1.36.3-gke.100).
func parseVersion(s string) (version, bool) {
	s = strings.TrimPrefix(s, "v")
	if i := strings.IndexAny(s, "-+"); i >= 0 {
		s = s[:i]
	}
	parts := strings.Split(s, ".")
	if len(parts) < 2 || len(parts) > 3 {
		return version{}, false
	}
	var n [3]int
	for i, p := range parts {
		v, err := strconv.Atoi(p)
		if err != nil || v < 0 {
			return version{}, false
		}
		n[i] = v
	}
	return version{n[0], n[1], n[2]}, true
}

func compareVersions(a, b string) int {
	va, _ := parseVersion(a)
	vb, _ := parseVersion(b)
	for _, d := range [3]int{va.major - vb.major, va.minor - vb.minor, va.patch - vb.patch} {
		if d != 0 {
			return d
		}
	}
	return strings.Compare(a, b)
}
