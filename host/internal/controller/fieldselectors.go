package controller

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/skewgate/skewgate/fixtures/fieldselectors"
)

// labelTable is the field-selector labels of the built-in resources of one
// Kubernetes minor version, as `make fixtures` probed them on a real server.
type labelTable struct {
	minor int
	// version is the captured server's gitVersion.
	version   string
	resources map[string][]string
}

// builtinLabelTables are the embedded tables.
var builtinLabelTables = sync.OnceValues(func() ([]labelTable, error) {
	captured, err := fieldselectors.Tables()
	if err != nil {
		return nil, err
	}
	return newLabelTables(captured)
})

func newLabelTables(captured []fieldselectors.Table) ([]labelTable, error) {
	var tables []labelTable
	for _, t := range captured {
		v, ok := parseServerVersion(t.Version)
		if !ok || v.preRelease {
			return nil, fmt.Errorf("field-selector table of %q: not a released Kubernetes version", t.Version)
		}
		if i := slices.IndexFunc(tables, func(o labelTable) bool { return o.minor == v.minor }); i >= 0 {
			return nil, fmt.Errorf("field-selector tables of %s and %s: one minor version, two tables", tables[i].version, t.Version)
		}
		tables = append(tables, labelTable{minor: v.minor, version: t.Version, resources: t.Resources})
	}
	return tables, nil
}

// serverVersionPattern matches a kube-apiserver gitVersion: v1.31.4, and
// with a pre-release (v1.32.0-alpha.1) or vendor suffix (v1.31.4-gke.1200,
// v1.31.4+k3s1).
var serverVersionPattern = regexp.MustCompile(`^v1\.(\d+)\.\d+(?:-([0-9A-Za-z.-]+))?(?:\+[0-9A-Za-z.-]+)?$`)

type serverVersion struct {
	minor int
	// preRelease marks an alpha, beta or release candidate of the minor: it
	// may lack what the release added.
	preRelease bool
}

func parseServerVersion(gitVersion string) (serverVersion, bool) {
	m := serverVersionPattern.FindStringSubmatch(gitVersion)
	if m == nil {
		return serverVersion{}, false
	}
	minor, err := strconv.Atoi(m[1])
	if err != nil {
		return serverVersion{}, false
	}
	pre := m[2]
	return serverVersion{minor: minor, preRelease: strings.HasPrefix(pre, "alpha") || strings.HasPrefix(pre, "beta") || strings.HasPrefix(pre, "rc")}, true
}

// labelsOfVersion returns the built-in resources' labels a server of
// gitVersion accepts: the table of the newest captured minor the server is
// not older than (a pre-release counts as older than its minor's release).
// Field selectors are added by minor releases and never removed from a
// served group version, so an older minor's table claims no label the
// server lacks. A server older than every captured minor, or whose version
// does not parse, gets nil: it is known to accept only the metadata labels.
func labelsOfVersion(tables []labelTable, gitVersion string) map[string][]string {
	v, ok := parseServerVersion(gitVersion)
	if !ok {
		return nil
	}
	var found map[string][]string
	foundMinor := -1
	for _, t := range tables {
		if (t.minor < v.minor || (t.minor == v.minor && !v.preRelease)) && t.minor > foundMinor {
			found, foundMinor = t.resources, t.minor
		}
	}
	return found
}

// labelsChangedAcrossMinors reports whether the tables that list the
// resource disagree on its labels: a minor release added some.
func labelsChangedAcrossMinors(tables []labelTable, key string) bool {
	var first []string
	seen := false
	for _, t := range tables {
		labels, ok := t.resources[key]
		switch {
		case !ok:
		case !seen:
			first, seen = labels, true
		case !slices.Equal(labels, first):
			return true
		}
	}
	return false
}
