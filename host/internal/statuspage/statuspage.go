// Package statuspage renders the gateway's status page: which API server
// serves which API, as a server × API matrix with the skewed APIs (those not
// every server serves the same way) highlighted. The page is self-contained
// HTML, with no scripts and no external assets.
//
// The page is written by plain code rather than html/template: a template's
// method calls go through reflection, which makes the linker keep every
// exported method of every type in the binary.
package statuspage

import (
	"cmp"
	"html"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/skewgate/skewgate/discovery"
)

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
	var p page
	p.write(build(in))
	_, err := io.WriteString(w, p.String())
	return err
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

const head = `<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>skewgate status</title>
<style>
body { font-family: system-ui, sans-serif; margin: 1.5rem; color: #1d1d1f; }
h1 { font-size: 1.4rem; margin-bottom: .2rem; }
h2 { font-size: 1.1rem; margin-top: 2rem; }
.summary { color: #555; margin-bottom: 1rem; }
table { border-collapse: collapse; font-size: .85rem; }
th, td { border: 1px solid #d0d0d5; padding: .25rem .5rem; text-align: left; }
th { background: #f3f3f6; vertical-align: bottom; }
td.cell { text-align: center; }
td.served { background: #e6f4ea; color: #1e6b34; }
td.missing { background: #fdecea; color: #a12622; font-weight: 600; }
tr.skewed th.api { background: #fff4d6; }
tr.skewed th.api::after { content: " skewed"; color: #a86b00; font-size: .75rem; font-weight: 600; }
.healthy { color: #1e6b34; }
.unhealthy { color: #a12622; font-weight: 600; }
.mono { font-family: ui-monospace, monospace; font-size: .8rem; }
.badge { display: inline-block; padding: .1rem .5rem; border-radius: .6rem; font-size: .8rem; }
.ready { background: #e6f4ea; color: #1e6b34; }
.notready { background: #fdecea; color: #a12622; }
</style>
</head>
<body>
<h1>skewgate</h1>
`

const foot = `<p class="summary"><a href="/metrics">metrics</a> · <a href="/debug/snapshot">snapshot JSON</a> · <a href="/readyz">readyz</a></p>
</body>
</html>
`

// page builds the HTML: markup is written as is, everything that comes from a
// snapshot or the configuration through text, which escapes it.
type page struct{ strings.Builder }

// text writes s escaped for HTML text and attribute values.
func (p *page) text(s string) { p.WriteString(html.EscapeString(s)) }

// when writes s if cond holds, otherwise alt.
func (p *page) when(cond bool, s, alt string) {
	if cond {
		p.WriteString(s)
	} else {
		p.WriteString(alt)
	}
}

func (p *page) write(v view) {
	p.WriteString(head)
	p.when(v.Ready, `<span class="badge ready">ready</span>`, `<span class="badge notready">not ready</span>`)
	p.WriteString("\n")
	if !v.HasSnapshot {
		p.WriteString("\n<p class=\"summary\">No discovery snapshot has been accepted yet; the gateway answers 503 until one is.</p>\n\n")
		p.WriteString(foot)
		return
	}
	p.WriteString("\n<p class=\"summary\">Snapshot generation <strong>")
	p.WriteString(strconv.FormatUint(v.Generation, 10))
	p.WriteString("</strong>, accepted ")
	p.text(v.AcceptedAt)
	p.WriteString(" (")
	p.text(v.Age)
	p.WriteString(" ago).\n")
	p.WriteString(strconv.Itoa(v.SkewedGVs) + " of " + strconv.Itoa(len(v.GroupVersions)) + " group versions and " +
		strconv.Itoa(v.SkewedResource) + " of " + strconv.Itoa(len(v.Resources)) + " resources are skewed: not every server serves them.</p>\n")

	p.WriteString("\n<h2>API servers</h2>\n<table>\n")
	p.WriteString("<tr><th>Server ID</th><th>Cluster</th><th>Address</th><th>Version</th><th>Health</th></tr>\n")
	for _, s := range v.Servers {
		p.WriteString(`<tr><td class="mono">`)
		p.text(s.ID)
		p.when(s.Preferred, " (local, preferred)", "")
		p.WriteString(`</td><td class="mono">`)
		p.text(s.Cluster)
		p.WriteString(`</td><td class="mono">`)
		p.text(s.Address)
		p.WriteString(`</td><td>`)
		p.text(s.Version)
		p.WriteString(`</td><td>`)
		p.when(s.Healthy, `<span class="healthy">healthy</span>`, `<span class="unhealthy">unhealthy</span>`)
		p.WriteString("</td></tr>\n")
	}
	p.WriteString("</table>\n")

	p.WriteString("\n<h2>Group versions</h2>\n<table>\n")
	p.matrixHeader("Group/version", v.Servers)
	for _, r := range v.GroupVersions {
		p.rowStart(r)
		for _, c := range r.Cells {
			if c.Served {
				p.WriteString(`<td class="cell served">✓ `)
				p.text(c.Detail)
				p.WriteString(`</td>`)
			} else {
				p.WriteString(`<td class="cell missing">✗ not served</td>`)
			}
		}
		p.WriteString("</tr>\n")
	}
	p.WriteString("</table>\n")

	p.WriteString("\n<h2>Resources</h2>\n<details")
	p.when(v.SkewedResource > 0, " open", "")
	p.WriteString(">\n<summary>" + strconv.Itoa(len(v.Resources)) + " resources, " + strconv.Itoa(v.SkewedResource) + " skewed</summary>\n<table>\n")
	p.matrixHeader("Group/version/resource", v.Servers)
	for _, r := range v.Resources {
		p.rowStart(r)
		for _, c := range r.Cells {
			p.when(c.Served, `<td class="cell served">✓</td>`, `<td class="cell missing">✗</td>`)
		}
		p.WriteString("</tr>\n")
	}
	p.WriteString("</table>\n</details>\n\n")
	p.WriteString(foot)
}

// matrixHeader writes the header row of a server × API table.
func (p *page) matrixHeader(first string, servers []serverColumn) {
	p.WriteString("<tr><th>" + first + "</th>")
	for _, s := range servers {
		p.WriteString("<th>")
		p.text(s.Version)
		p.WriteString(`<br><span class="mono">`)
		p.text(s.Cluster)
		p.WriteString("</span></th>")
	}
	p.WriteString("</tr>\n")
}

// rowStart opens an API's row, marked when it is skewed.
func (p *page) rowStart(r row) {
	p.when(r.Skewed, `<tr class="skewed">`, "<tr>")
	p.WriteString(`<th class="api mono">`)
	p.text(r.Name)
	p.WriteString("</th>")
}
