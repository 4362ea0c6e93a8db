// Package statuspage renders the gateway's status page: which API servers
// are members and what names each, which API server serves which API, as a server × API matrix with the skewed APIs (those not
// every server serves the same way) highlighted, and, where the servers
// differ, which field-selector labels each accepts and which fields its schema
// lacks, and which servers' schemas have each field path that differs. The
// page is self-contained HTML, with no scripts and no external assets.
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
	"github.com/skewgate/skewgate/host/internal/controller"
)

// Input is what the page shows.
type Input struct {
	// Snapshot is the snapshot the gateway routes with; nil before the first.
	Snapshot *discovery.Snapshot
	// AcceptedAt is when the plugin accepted it.
	AcceptedAt time.Time
	// Addresses maps cluster names to host:port.
	Addresses map[string]string
	// Members is the controller's membership; nil when unknown.
	Members *controller.Members
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
	// FieldSelectors and MissingFields are the resources the snapshot's
	// field-level knowledge names, each with a cell per server.
	FieldSelectors []fieldRow
	MissingFields  []fieldRow
	// FieldSkew are the resources of the snapshot's FieldSkew, sorted.
	FieldSkew  []skewTable
	Membership membership
}

// membership is what the page says of the members.
type membership struct {
	Known bool
	// Summary says where the members come from.
	Summary string
	// Differences are the servers listed but not in the cluster, and those
	// in it but not listed.
	Differences []difference
	// Unpublished are the members the snapshot lacks: not ready since they
	// joined, or unreachable.
	Unpublished []serverColumn
}

type difference struct {
	Address, What string
	Routed        bool
}

// skewTable is a resource's field paths that differ between the servers'
// schemas, each with a cell per server.
type skewTable struct {
	Name  string
	Paths []skewRow
}

type skewRow struct {
	Path  string
	Cells []skewCell
}

// skewCell is whether a server's schema has a path.
type skewCell uint8

const (
	notServed skewCell = iota
	// notCompared: the server serves the resource, but its schema was not
	// compared (it was down, or its schema unknown).
	notCompared
	lacksPath
	hasPath
)

// fieldRow is a resource with, per server column, the names the snapshot
// lists for it there.
type fieldRow struct {
	Name string
	// Common are the labels every server that serves the resource accepts.
	Common []string
	Cells  []fieldCell
}

type fieldCell struct {
	Served bool
	// Names are the labels only some servers accept, or the missing paths.
	Names []string
}

type serverColumn struct {
	ID, Cluster, Version, Address string
	Healthy                       bool
	// Preferred marks the node's own server in node-local mode.
	Preferred bool
	// Sources say what names the server a member; "" when it is none.
	Sources string
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
	members := map[string]controller.Member{}
	if in.Members != nil {
		for _, m := range in.Members.Servers {
			members[m.Address] = m
		}
	}
	v.Membership = buildMembership(in, members)
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
		address := in.Addresses[srv.Cluster]
		v.Servers = append(v.Servers, serverColumn{srv.ID, srv.Cluster, srv.Version, address, srv.Healthy, srv.ID == snap.Preferred,
			sourceNames(members[address].Sources)})
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
	v.FieldSelectors = fieldRows(snap, func(s *discovery.Server) map[string][]string { return s.FieldSelectors }, true)
	v.MissingFields = fieldRows(snap, func(s *discovery.Server) map[string][]string { return s.MissingFields }, false)
	v.FieldSkew = skewTables(snap)
	return v
}

// skewTables lists the resources of the snapshot's FieldSkew, each path
// with what every server's schema says of it.
func skewTables(snap *discovery.Snapshot) []skewTable {
	var tables []skewTable
	for _, key := range slices.Sorted(maps.Keys(snap.FieldSkew)) {
		f := snap.FieldSkew[key]
		t := skewTable{Name: key, Paths: make([]skewRow, len(f.Paths))}
		// Each server starts as what its discovery says; its schema, if
		// compared, then tells path by path.
		base := make([]skewCell, len(snap.Servers))
		for i := range snap.Servers {
			if servesKey(&snap.Servers[i], key) {
				base[i] = notCompared
			}
		}
		for _, schema := range f.Schemas {
			for _, i := range schema.Servers {
				base[i] = lacksPath
			}
		}
		for p, path := range f.Paths {
			t.Paths[p] = skewRow{Path: path, Cells: slices.Clone(base)}
		}
		for _, schema := range f.Schemas {
			for _, p := range schema.Knows {
				for _, i := range schema.Servers {
					t.Paths[p].Cells[i] = hasPath
				}
			}
		}
		tables = append(tables, t)
	}
	return tables
}

// sourceWords are the page's words for what names a member.
var sourceWords = map[controller.Source]string{
	controller.SourceListed:        "--apiserver",
	controller.SourceLocal:         "--local-apiserver",
	controller.SourceLease:         "identity Lease",
	controller.SourceEndpointSlice: "EndpointSlice",
}

func sourceNames(sources []controller.Source) string {
	var names []string
	for _, s := range sources {
		names = append(names, sourceWords[s])
	}
	return strings.Join(names, ", ")
}

// buildMembership says where the members come from, where the listed
// servers and the cluster's differ, and which members the snapshot lacks.
func buildMembership(in Input, members map[string]controller.Member) membership {
	m := in.Members
	if m == nil {
		return membership{}
	}
	v := membership{Known: true}
	switch {
	case !m.Cluster:
		v.Summary = "The API servers are the listed ones (--apiserver, --local-apiserver): no cluster is read (--kubeconfig)."
	case !m.ClusterRead:
		v.Summary = "The cluster's membership has not been read yet: the servers --apiserver lists are used until it is."
	case m.Membership == controller.MembershipListed:
		v.Summary = "The API servers are the listed ones (--apiserver-membership=listed); the cluster's are only compared with them."
	default:
		v.Summary = "The API servers are the cluster's, those its identity Leases and the kubernetes Service's EndpointSlices announce; " +
			"the servers --apiserver lists were used only until the cluster answered."
	}
	for _, d := range []struct {
		addresses []string
		what      string
	}{{m.ListedNotInCluster, "listed but not in the cluster"}, {m.InClusterNotListed, "in the cluster but not listed"}} {
		for _, address := range d.addresses {
			_, member := members[address]
			v.Differences = append(v.Differences, difference{address, d.what, member})
		}
	}
	published := map[string]bool{}
	if in.Snapshot != nil {
		for _, srv := range in.Snapshot.Servers {
			published[in.Addresses[srv.Cluster]] = true
		}
	}
	for _, member := range m.Servers {
		if !published[member.Address] {
			v.Unpublished = append(v.Unpublished, serverColumn{ID: member.ID, Address: member.Address, Sources: sourceNames(member.Sources)})
		}
	}
	return v
}

// fieldRows lists the resources some server's lists (FieldSelectors or
// MissingFields) name, sorted, with every server's list of each. With common
// set, names every server serving the resource lists move to the row's
// Common, so that the cells show what differs.
func fieldRows(snap *discovery.Snapshot, lists func(*discovery.Server) map[string][]string, common bool) []fieldRow {
	keys := map[string]bool{}
	for i := range snap.Servers {
		for k := range lists(&snap.Servers[i]) {
			keys[k] = true
		}
	}
	var rows []fieldRow
	for _, key := range slices.Sorted(maps.Keys(keys)) {
		r := fieldRow{Name: key, Cells: make([]fieldCell, len(snap.Servers))}
		first := true
		for i := range snap.Servers {
			names, listed := lists(&snap.Servers[i])[key]
			r.Cells[i] = fieldCell{Served: listed || servesKey(&snap.Servers[i], key), Names: names}
			if !common || !listed {
				continue
			}
			if first {
				r.Common, first = slices.Clone(names), false
			} else {
				r.Common = slices.DeleteFunc(r.Common, func(n string) bool { return !slices.Contains(names, n) })
			}
		}
		if common {
			for i := range r.Cells {
				r.Cells[i].Names = slices.DeleteFunc(slices.Clone(r.Cells[i].Names), func(n string) bool { return slices.Contains(r.Common, n) })
			}
		}
		rows = append(rows, r)
	}
	return rows
}

// servesKey reports whether the server's discovery lists the resource a
// discovery.ResourceKey names.
func servesKey(srv *discovery.Server, key string) bool {
	for _, list := range []*discovery.GroupList{&srv.Core, &srv.APIs} {
		for g := range list.Items {
			grp := &list.Items[g]
			for v := range grp.Versions {
				ver := &grp.Versions[v]
				for r := range ver.Resources {
					if discovery.ResourceKey(grp.Name(), ver.Version, ver.Resources[r].Resource) == key {
						return true
					}
				}
			}
		}
	}
	return false
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

const foot = `<p class="summary"><a href="/metrics">metrics</a> · <a href="/debug/snapshot">snapshot JSON</a> (with --debug-handlers) · <a href="/readyz">readyz</a></p>
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
		p.WriteString("\n<p class=\"summary\">No discovery snapshot has been accepted yet; the gateway answers 503 until one is.</p>\n")
		p.membership(v.Membership)
		p.WriteString("\n")
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
	p.WriteString("<tr><th>Server ID</th><th>Cluster</th><th>Address</th><th>Version</th><th>Health</th><th>Source</th></tr>\n")
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
		p.WriteString(`</td><td>`)
		switch {
		case s.Sources != "":
			p.text(s.Sources)
		case v.Membership.Known:
			p.WriteString(`<span class="unhealthy">no member: not routed to, leaves after the grace period</span>`)
		}
		p.WriteString("</td></tr>\n")
	}
	p.WriteString("</table>\n")
	p.membership(v.Membership)

	p.WriteString("\n<h2>Group versions</h2>\n<table>\n")
	p.serverHeader("Group/version", "", v.Servers)
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
	p.serverHeader("Group/version/resource", "", v.Servers)
	for _, r := range v.Resources {
		p.rowStart(r)
		for _, c := range r.Cells {
			p.when(c.Served, `<td class="cell served">✓</td>`, `<td class="cell missing">✗</td>`)
		}
		p.WriteString("</tr>\n")
	}
	p.WriteString("</table>\n</details>\n")

	p.WriteString("\n<h2>Field selectors</h2>\n")
	if len(v.FieldSelectors) == 0 {
		p.WriteString("<p class=\"summary\">Every server that serves a resource accepts the same field-selector labels for it.</p>\n")
	} else {
		p.WriteString("<p class=\"summary\">Resources whose field-selector labels differ between the servers: a list or watch whose selector names a label goes only to servers that accept it.</p>\n<table>\n")
		p.serverHeader("Resource", "Accepted by every server", v.Servers)
		for _, r := range v.FieldSelectors {
			p.rowStart(row{Name: r.Name, Skewed: true})
			p.WriteString(`<td class="mono">`)
			p.text(strings.Join(r.Common, ", "))
			p.WriteString("</td>")
			for _, c := range r.Cells {
				p.fieldCell(c, "also", "no others", "served", "missing")
			}
			p.WriteString("</tr>\n")
		}
		p.WriteString("</table>\n")
	}

	p.WriteString("\n<h2>Fields missing from schemas</h2>\n")
	if len(v.MissingFields) == 0 {
		p.WriteString("<p class=\"summary\">No healthy server's schema of a resource lacks a field another healthy server's has, as far as their OpenAPI v3 documents tell.</p>\n")
	} else {
		p.WriteString("<p class=\"summary\">Resources whose schema lacks fields on some servers (at most " + strconv.Itoa(discovery.MaxMissingFields) +
			" shown each): their requests go to the servers whose schema has them all.</p>\n<table>\n")
		p.serverHeader("Resource", "", v.Servers)
		for _, r := range v.MissingFields {
			p.rowStart(row{Name: r.Name, Skewed: true})
			for _, c := range r.Cells {
				p.fieldCell(c, "lacks", "has every field", "missing", "served")
			}
			p.WriteString("</tr>\n")
		}
		p.WriteString("</table>\n")
	}

	p.WriteString("\n<h2>Field paths that differ between schemas</h2>\n")
	if len(v.FieldSkew) == 0 {
		p.WriteString("<p class=\"summary\">The snapshot names no field path that one server's schema has and another's lacks.</p>\n")
	} else {
		p.WriteString("<p class=\"summary\">Each field path some server's schema has and another's lacks (a path's own fields are where it is, unless listed too): " +
			"a create, update or patch whose body sets one goes to the servers whose schema has it.</p>\n<table>\n")
		p.serverHeader("Resource, field path", "", v.Servers)
		for _, t := range v.FieldSkew {
			p.WriteString(`<tr class="skewed"><th class="api mono" colspan="` + strconv.Itoa(len(v.Servers)+1) + `">`)
			p.text(t.Name)
			p.WriteString("</th></tr>\n")
			for _, r := range t.Paths {
				p.WriteString(`<tr><td class="mono">`)
				p.text(r.Path)
				p.WriteString("</td>")
				for _, c := range r.Cells {
					switch c {
					case hasPath:
						p.WriteString(`<td class="cell served">✓ has</td>`)
					case lacksPath:
						p.WriteString(`<td class="cell missing">✗ lacks</td>`)
					case notCompared:
						p.WriteString(`<td class="cell">not compared</td>`)
					default:
						p.WriteString(`<td class="cell">not served</td>`)
					}
				}
				p.WriteString("</tr>\n")
			}
		}
		p.WriteString("</table>\n")
	}
	p.WriteString("\n")
	p.WriteString(foot)
}

// membership writes where the members come from, where the listed servers
// and the cluster's differ, and the members the snapshot lacks.
func (p *page) membership(m membership) {
	if !m.Known {
		return
	}
	p.WriteString("\n<h2>Membership</h2>\n<p class=\"summary\">")
	p.text(m.Summary)
	p.WriteString("</p>\n")
	if len(m.Differences) > 0 {
		p.WriteString("<table>\n<tr><th>Address</th><th>Difference</th><th>Routed to</th></tr>\n")
		for _, d := range m.Differences {
			p.WriteString(`<tr><td class="mono">`)
			p.text(d.Address)
			p.WriteString(`</td><td class="unhealthy">`)
			p.text(d.What)
			p.WriteString(`</td><td>`)
			p.when(d.Routed, "yes", "no")
			p.WriteString("</td></tr>\n")
		}
		p.WriteString("</table>\n")
	}
	if len(m.Unpublished) > 0 {
		p.WriteString("<p class=\"summary\">Members not in the snapshot: not ready since they joined, or unreachable.</p>\n" +
			"<table>\n<tr><th>Server ID</th><th>Address</th><th>Source</th></tr>\n")
		for _, s := range m.Unpublished {
			p.WriteString(`<tr><td class="mono">`)
			p.text(s.ID)
			p.WriteString(`</td><td class="mono">`)
			p.text(s.Address)
			p.WriteString(`</td><td>`)
			p.text(s.Sources)
			p.WriteString("</td></tr>\n")
		}
		p.WriteString("</table>\n")
	}
}

// serverHeader writes the header row of a table with a column per server,
// after the first column and, when set, an extra one.
func (p *page) serverHeader(first, extra string, servers []serverColumn) {
	p.WriteString("<tr><th>" + first + "</th>")
	if extra != "" {
		p.WriteString("<th>" + extra + "</th>")
	}
	for _, s := range servers {
		p.WriteString("<th>")
		p.text(s.Version)
		p.WriteString(`<br><span class="mono">`)
		p.text(s.Cluster)
		p.WriteString("</span></th>")
	}
	p.WriteString("</tr>\n")
}

// fieldCell writes one server's names for a resource, listed after label in
// a cell of class namesClass, or none in one of noneClass when it has none.
func (p *page) fieldCell(c fieldCell, label, none, namesClass, noneClass string) {
	switch {
	case !c.Served:
		p.WriteString(`<td class="cell">not served</td>`)
	case len(c.Names) == 0:
		p.WriteString(`<td class="cell ` + noneClass + `">`)
		p.text(none)
		p.WriteString("</td>")
	default:
		p.WriteString(`<td class="` + namesClass + `">`)
		p.text(label)
		p.WriteString(`: <span class="mono">`)
		p.text(strings.Join(c.Names, ", "))
		p.WriteString("</span></td>")
	}
}

// rowStart opens an API's row, marked when it is skewed.
func (p *page) rowStart(r row) {
	p.when(r.Skewed, `<tr class="skewed">`, "<tr>")
	p.WriteString(`<th class="api mono">`)
	p.text(r.Name)
	p.WriteString("</th>")
}
