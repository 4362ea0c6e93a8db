// Package statuspage renders the gateway's status page: which API server
// serves which API, as a server × API matrix with the skewed APIs (those not
// every server serves the same way) highlighted. The page is self-contained
// HTML, with no scripts and no external assets.
package statuspage

import (
	"cmp"
	"embed"
	"html/template"
	"io"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/skewgate/skewgate/discovery"
)

//go:embed page.html.tmpl
var templates embed.FS

var page = template.Must(template.ParseFS(templates, "page.html.tmpl"))

// Input is what the page shows.
type Input struct {
	// Snapshot is the snapshot the gateway routes with; nil before the first.
	Snapshot *discovery.Snapshot
	// AcceptedAt is when the plugin accepted it.
	AcceptedAt time.Time
	// Addresses maps cluster names to host:port.
	Addresses map[string]string
	// Ready is the gateway's readiness.
	Ready bool
	Now   time.Time
}

// Render writes the page.
func Render(w io.Writer, in Input) error {
	return page.Execute(w, build(in))
}

type view struct {
	Ready          bool
	HasSnapshot    bool
	Generation     uint64
	Age            string
	AcceptedAt     string
	Servers        []serverColumn
	GroupVersions  []row
	Resources      []row
	SkewedGVs      int
	SkewedResource int
}

type serverColumn struct {
	ID, Cluster, Version, Address string
	Healthy                       bool
	// Preferred marks the node's own server in node-local mode.
	Preferred bool
}

// row is one API and, per server column, whether that server serves it.
type row struct {
	Name   string
	Cells  []cell
	Skewed bool
}

type cell struct {
	Served bool
	// Detail is shown in the cell: the number of resources for a group
	// version.
	Detail string
}

type gvKey struct{ group, version string }

type gvrKey struct{ group, version, resource string }

func build(in Input) view {
	v := view{Ready: in.Ready}
	snap := in.Snapshot
	if snap == nil {
		return v
	}
	v.HasSnapshot = true
	v.Generation = snap.Generation
	v.AcceptedAt = in.AcceptedAt.UTC().Format(time.RFC3339)
	v.Age = in.Now.Sub(in.AcceptedAt).Truncate(time.Second).String()

	n := len(snap.Servers)
	gvResources := map[gvKey][]map[string]bool{}
	gvrServed := map[gvrKey][]bool{}
	for i, srv := range snap.Servers {
		v.Servers = append(v.Servers, serverColumn{srv.ID, srv.Cluster, srv.Version, in.Addresses[srv.Cluster], srv.Healthy, srv.ID == snap.Preferred})
		for _, list := range []discovery.GroupList{srv.Core, srv.APIs} {
			for _, g := range list.Items {
				for _, ver := range g.Versions {
					k := gvKey{g.Name(), ver.Version}
					if gvResources[k] == nil {
						gvResources[k] = make([]map[string]bool, n)
					}
					set := map[string]bool{}
					for _, r := range ver.Resources {
						set[r.Resource] = true
						rk := gvrKey{k.group, k.version, r.Resource}
						if gvrServed[rk] == nil {
							gvrServed[rk] = make([]bool, n)
						}
						gvrServed[rk][i] = true
					}
					gvResources[k][i] = set
				}
			}
		}
	}

	for _, k := range slices.SortedFunc(maps.Keys(gvResources), func(a, b gvKey) int {
		return cmp.Or(cmp.Compare(a.group, b.group), cmp.Compare(a.version, b.version))
	}) {
		sets := gvResources[k]
		r := row{Name: gvName(k.group, k.version)}
		var first map[string]bool
		for _, set := range sets {
			c := cell{Served: set != nil}
			if set != nil {
				c.Detail = plural(len(set), "resource")
				if first == nil {
					first = set
				} else if !sameKeys(first, set) {
					r.Skewed = true
				}
			} else {
				r.Skewed = true
			}
			r.Cells = append(r.Cells, c)
		}
		if r.Skewed {
			v.SkewedGVs++
		}
		v.GroupVersions = append(v.GroupVersions, r)
	}

	for _, k := range slices.SortedFunc(maps.Keys(gvrServed), func(a, b gvrKey) int {
		return cmp.Or(cmp.Compare(a.group, b.group), cmp.Compare(a.version, b.version), cmp.Compare(a.resource, b.resource))
	}) {
		r := row{Name: gvName(k.group, k.version) + "/" + k.resource}
		for _, served := range gvrServed[k] {
			r.Cells = append(r.Cells, cell{Served: served})
			r.Skewed = r.Skewed || !served
		}
		if r.Skewed {
			v.SkewedResource++
		}
		v.Resources = append(v.Resources, r)
	}
	return v
}

func gvName(group, version string) string {
	if group == "" {
		return "core/" + version
	}
	return group + "/" + version
}

func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return strconv.Itoa(n) + " " + noun + "s"
}

func sameKeys(a, b map[string]bool) bool {
	if len(a) != len(b) {
		return false
	}
	for k := range a {
		if !b[k] {
			return false
		}
	}
	return true
}
