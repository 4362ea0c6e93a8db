package main

import (
	"fmt"
	"maps"
	"runtime"
	"slices"
	"strings"

	"github.com/skewgate/skewgate/fixtures"
)

func goVersion() string { return runtime.Version() }

func notes() []string {
	return []string{
		"Bodies are stored exactly as served: no pretty-printing, no re-encoding; requests carry no Accept-Encoding, so nothing was decompressed.",
		"Host names are fixed, so server IDs (apiserver- + base32 of sha256(len|hostname|len|\"kube-apiserver\")[:16]) are the same on every capture; each server ID was checked against its identity Lease in kube-system.",
		"Every version ran in its own cluster (own etcd): one server with the default API set and one with the extra runtime config.",
		"Each peer-aggregated document was fetched without a profile from the aggregator member of an MVP cluster once it advertised exactly the union of the members' resources; it and all member documents were captured twice, two seconds apart, with identical bytes and ETags.",
		"Skew probes GET each differing resource's collection (all namespaces) as cluster admin on the two default servers; a probe only passes when exactly the server lacking the resource answers 404.",
		"Field-selector probes list each collection (all namespaces) as cluster admin with limit=1 and one selector term <label>=x; the value never matters to whether a label is supported.",
		"Field paths come from the OpenAPI v3 document of the resource's group version, reduced by host/internal/schemafields: property names joined by dots, [] for an array's items, .* for a map's values, references followed until they recur; descriptions and every other keyword ignored.",
	}
}

// readme renders fixtures/README.md from the manifest, so it always describes the actual capture.
func readme(m Manifest, labels map[string]map[string][]string, schemaSkew []fixtures.SchemaSkew) string {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }

	p("# Discovery fixtures")
	p("")
	p("Generated; do not edit. Regenerate from the repository root with:")
	p("")
	p("```sh")
	p("%s", m.Command)
	p("```")
	p("")
	p("It builds any missing binary first (see `host/testcluster`), starts real clusters on loopback, and rewrites")
	p("everything in this directory that it generates. `manifest.json` is the machine-readable index of the files below.")
	p("")
	p("## Binaries")
	p("")
	p("- kube-apiserver %s, each built from `k8s.io/kubernetes` at that tag with every staging module", strings.Join(m.Versions.KubeAPIServer, ", "))
	p("  replaced by its published `v0.Y.Z` release, `CGO_ENABLED=0 -trimpath`, and the version variables of")
	p("  `k8s.io/component-base/version` and `k8s.io/client-go/pkg/version` stamped as Kubernetes' release build does.")
	p("- etcd %s (`go.etcd.io/etcd/server/v3`), single member, loopback.", m.Versions.Etcd)
	p("- Built and run with %s.", m.Versions.Go)
	p("")
	p("## Requests")
	p("")
	p("| Document | Request | Accept |")
	p("|---|---|---|")
	p("| own (`nopeer`) | `GET /apis`, `GET /api` | `%s` |", m.Accept["nopeer"])
	p("| peer-aggregated | `GET /apis` | `%s` |", m.Accept["peerAggregated"])
	p("")
	p("All requests authenticate with the cluster-admin client certificate.")
	p("")
	p("## Profiles")
	p("")
	p("- `default`: no `--runtime-config`.")
	p("- `extra`: `--runtime-config` enabling group versions the version serves only on request, each confirmed to add")
	p("  resources to `/apis`:")
	p("")
	p("| Version | `--runtime-config` | Group versions added |")
	p("|---|---|---|")
	for _, v := range sortedKeys(m.ExtraRuntimeConfig) {
		p("| %s | `%s` | %s |", v, strings.Join(m.ExtraRuntimeConfig[v], ","), strings.Join(m.ExtraAPIsFound[strings.TrimPrefix(v, "v")], ", "))
	}
	p("")
	p("## Files")
	p("")
	p("| File | Server version | Profile | Host name | Server ID | ETag |")
	p("|---|---|---|---|---|---|")
	docs := slices.Clone(m.Documents)
	for _, mixed := range m.Mixed {
		docs = append(append(docs, mixed.PeerAggregated), mixed.Members...)
	}
	for _, d := range docs {
		etag := d.ETag
		if len(etag) > 18 {
			etag = etag[:17] + "…\""
		}
		p("| `%s` | %s | %s | `%s` | `%s` | `%s` |", d.Path, d.Version, d.Profile, d.Hostname, d.ServerID, etag)
	}
	p("")
	p("Full ETags, SHA-256 digests, sizes and Content-Types are in `manifest.json`.")
	p("")
	p("## Mixed-version clusters")
	p("")
	p("Every member runs the mixed version proxy (`--peer-ca-file`, `--peer-advertise-ip/port`; 1.35 also needs the alpha")
	p("gate `UnknownVersionInteroperabilityProxy=true` with `APIServerIdentity=true`). `peer-aggregated/apis.json` is the")
	p("aggregator member's merged `/apis`; `members/<version>/` holds each member's own documents. Servers merge in")
	p("lexicographic server-ID order, listed here in that order.")
	p("")
	for _, mixed := range m.Mixed {
		pa := mixed.PeerAggregated
		p("### `%s/`", mixed.Dir)
		p("")
		p("Aggregator: %s `%s`. ETag of `peer-aggregated/apis.json`: `%s`.", pa.Version, pa.ServerID, pa.ETag)
		p("")
		members := slices.Clone(mixed.Members)
		slices.SortStableFunc(members, func(a, b Document) int { return strings.Compare(a.ServerID, b.ServerID) })
		for _, d := range members {
			if d.Request == "/apis" {
				p("- `%s`: %s, host name `%s`, profile %s", d.ServerID, d.Version, d.Hostname, d.Profile)
			}
		}
		var identical []string
		for _, other := range docs {
			if other.SHA256 == pa.SHA256 && other.Path != pa.Path {
				identical = append(identical, "`"+other.Path+"`")
			}
		}
		if len(identical) > 0 {
			p("")
			p("The merged document is byte-identical to %s, a server whose own API set is the members' union.",
				strings.Join(identical, " and "))
		}
		p("")
	}
	p("## Version skew")
	p("")
	p("Resources advertised by only one of two adjacent versions' default servers, with the status of `GET <collection>`:")
	p("")
	for _, s := range m.Skew {
		p("### %s → %s", s.Older, s.Newer)
		p("")
		if len(s.OnlyInNewer)+len(s.OnlyInOlder) == 0 {
			p("No differences.")
			p("")
			continue
		}
		p("| Resource | Only in | %s | %s |", s.Older, s.Newer)
		p("|---|---|---|---|")
		for _, side := range []struct {
			probes []Probe
			in     string
		}{{s.OnlyInNewer, s.Newer}, {s.OnlyInOlder, s.Older}} {
			for _, pr := range side.probes {
				p("| `%s` | %s | %d | %d |", pr.Path, side.in, pr.Status[s.Older], pr.Status[s.Newer])
			}
		}
		p("")
	}
	p("## Field selectors")
	p("")
	p("`fieldselectors/<version>.json` maps every resource that answers `list` to the labels a field selector may name")
	p("for it on that version (the package in that directory embeds them for skewgate's controller). They are probed,")
	p("not read from source: on the version's default server (and, for resources only the extra profile serves, on")
	p("the extra one), `GET <collection>?fieldSelector=<label>%%3Dx&limit=1` as cluster admin for every candidate label:")
	p("`metadata.name`, `metadata.namespace` and every field path of the kind's OpenAPI v3 schema that leads through no")
	p("array and no map. 200 means accepted, 400 refused; any other answer fails the capture. A label that is no path of")
	p("the kind's schema is not found this way, such as Pod's `spec.host`, an alias of `spec.nodeName` that every version")
	p("accepts.")
	p("")
	p("| Version | Resources | Probes | Accepted | Kinds without a schema |")
	p("|---|---|---|---|---|")
	for _, t := range m.FieldSelectors {
		without := "(none)"
		if len(t.WithoutSchema) > 0 {
			without = "`" + strings.Join(t.WithoutSchema, "`, `") + "`"
		}
		p("| %s | %d | %d | %d | %s |", t.Version, t.Resources, t.Probes, t.Accepted, without)
	}
	p("")
	p("Labels whose acceptance differs between the versions of each compared pair, for the resources both serve:")
	p("")
	for _, s := range schemaSkew {
		p("### %s → %s", s.Older, s.Newer)
		p("")
		older, newer := labels[s.Older], labels[s.Newer]
		rows := 0
		for _, key := range sortedKeys(newer) {
			o, ok := older[key]
			if !ok {
				continue
			}
			onlyNewer, onlyOlder := setDifference(newer[key], o), setDifference(o, newer[key])
			if len(onlyNewer) == 0 && len(onlyOlder) == 0 {
				continue
			}
			if rows == 0 {
				p("| Resource | Only %s accepts | Only %s accepts |", s.Newer, s.Older)
				p("|---|---|---|")
			}
			rows++
			p("| `%s` | %s | %s |", key, codeList(onlyNewer), codeList(onlyOlder))
		}
		if rows == 0 {
			p("No differences.")
		}
		p("")
	}
	p("## Schema skew")
	p("")
	p("`%s` lists, for each compared pair of versions, the resources both default servers serve whose kinds'", schemaSkewFile)
	p("field paths differ, with every path only one side has. A field gated off by default is in the schema all the same:")
	p("a difference says what each server's schema can carry, not what it stores with its default gates.")
	p("")
	for _, s := range schemaSkew {
		p("### %s → %s", s.Older, s.Newer)
		p("")
		if len(s.Resources) == 0 {
			p("No differences.")
			p("")
			continue
		}
		p("| Resource | Kind | Paths only in %s | Paths only in %s |", s.Newer, s.Older)
		p("|---|---|---|---|")
		for _, r := range s.Resources {
			p("| `%s` | %s | %s | %s |", r.Resource, r.Kind, pathSummary(r.OnlyInNewer), pathSummary(r.OnlyInOlder))
		}
		p("")
	}
	common, extra := splitFlags(m.ServerFlags)
	p("## Server flags")
	p("")
	p("`$ETCD_URL`, `$PKI` and `$PORT` stand for per-run values. Each server runs in its own UTS namespace")
	p("(`unshare --uts -- sh -c 'hostname NAME && exec kube-apiserver FLAGS'`) so that its host name, and with it its")
	p("server ID, is the one listed above. Every server has these flags:")
	p("")
	p("```")
	p("%s", strings.Join(common, " \\\n  "))
	p("```")
	p("")
	p("and in addition:")
	p("")
	p("| Server | Additional flags |")
	p("|---|---|")
	for _, role := range sortedKeys(extra) {
		flags := "(none)"
		if len(extra[role]) > 0 {
			flags = "`" + strings.Join(extra[role], "` `") + "`"
		}
		p("| `%s` | %s |", role, flags)
	}
	p("")
	p("## Notes")
	p("")
	for _, n := range m.Notes {
		p("- %s", n)
	}
	return b.String()
}

// splitFlags separates the flags every server shares (in the first server's order) from each
// server's additional ones.
func splitFlags(perServer map[string][]string) (common []string, extra map[string][]string) {
	roles := sortedKeys(perServer)
	if len(roles) == 0 {
		return nil, nil
	}
	for _, flag := range perServer[roles[0]] {
		shared := true
		for _, role := range roles[1:] {
			shared = shared && slices.Contains(perServer[role], flag)
		}
		if shared {
			common = append(common, flag)
		}
	}
	extra = map[string][]string{}
	for _, role := range roles {
		extra[role] = []string{}
		for _, flag := range perServer[role] {
			if !slices.Contains(common, flag) {
				extra[role] = append(extra[role], flag)
			}
		}
	}
	return common, extra
}

func sortedKeys[V any](m map[string]V) []string {
	return slices.Sorted(maps.Keys(m))
}

// setDifference returns the elements of a that b lacks.
func setDifference(a, b []string) []string {
	var out []string
	for _, x := range a {
		if !slices.Contains(b, x) {
			out = append(out, x)
		}
	}
	return out
}

func codeList(items []string) string {
	if len(items) == 0 {
		return ""
	}
	return "`" + strings.Join(items, "`, `") + "`"
}

// pathSummary shows a few paths and how many there are.
func pathSummary(paths []string) string {
	const shown = 4
	switch {
	case len(paths) == 0:
		return ""
	case len(paths) <= shown:
		return codeList(paths)
	default:
		return fmt.Sprintf("%d: %s, …", len(paths), codeList(paths[:shown]))
	}
}
