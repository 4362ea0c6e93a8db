package discovery

import (
	"fmt"
	"slices"
	"sort"
	"strings"
)

const (
	openAPIV3Root   = "/openapi/v3"
	openAPIV3Prefix = openAPIV3Root + "/"
	openAPIV2Path   = "/openapi/v2"
	openAPIHashSep  = "?hash="
)

// OpenAPIPath is one entry of a server's GET /openapi/v3 index: a path such as
// "apis/apps/v1" and the hash of its document, which kube-apiserver serves at
// "/openapi/v3/<path>?hash=<hash>".
type OpenAPIPath struct {
	Path, Hash string
}

// URL is the entry's server-relative URL.
func (p *OpenAPIPath) URL() string { return openAPIV3Prefix + p.Path + openAPIHashSep + p.Hash }

// ParseOpenAPIIndex decodes a server's GET /openapi/v3 answer
// ({"paths":{"<path>":{"serverRelativeURL":"..."}}}) into its entries sorted by
// path. Every URL must be the one kube-apiserver writes for its path:
// "/openapi/v3/<path>?hash=<hash>", the hash letters and digits only.
func ParseOpenAPIIndex(raw []byte) ([]OpenAPIPath, error) {
	doc, ok := ParseJSON(raw)
	if !ok {
		return nil, fmt.Errorf("not valid JSON")
	}
	paths := doc.Get("paths")
	if !doc.IsObject() || !paths.IsObject() {
		return nil, fmt.Errorf("paths: must be an object, got %s", describeValue(paths))
	}
	return parseOpenAPIEntries(paths, func(path string, v JSONValue) (string, error) {
		url := v.Get("serverRelativeURL")
		if !url.IsString() {
			return "", fmt.Errorf("paths[%q]: serverRelativeURL: must be a string, got %s", path, describeValue(url))
		}
		hash, ok := strings.CutPrefix(url.Str(), openAPIV3Prefix+path+openAPIHashSep)
		if !ok || hash == "" {
			return "", fmt.Errorf("paths[%q]: serverRelativeURL: %q is not %s%s%s<hash>", path, url.Str(), openAPIV3Prefix, path, openAPIHashSep)
		}
		return hash, nil
	})
}

// parseOpenAPIHashes decodes the snapshot's form of an index,
// {"<path>":"<hash>"}.
func parseOpenAPIHashes(v JSONValue) ([]OpenAPIPath, error) {
	if !v.IsObject() {
		return nil, fmt.Errorf("must be an object of paths and hashes, got %s", describeValue(v))
	}
	return parseOpenAPIEntries(v, func(path string, v JSONValue) (string, error) {
		if !v.IsString() {
			return "", fmt.Errorf("%q: must be a hash, got %s", path, describeValue(v))
		}
		return v.Str(), nil
	})
}

// parseOpenAPIEntries reads one flat object with hashOf and checks the
// entries, member by member.
func parseOpenAPIEntries(obj JSONValue, hashOf func(path string, v JSONValue) (string, error)) ([]OpenAPIPath, error) {
	// Empty, not nil, for an index without paths: nil is a server whose
	// index is not known.
	out := []OpenAPIPath{}
	for members := obj.Members(); members.Next(); {
		entry := OpenAPIPath{Path: members.Key().Str()}
		hash, err := hashOf(entry.Path, members.Value())
		if err != nil {
			return nil, err
		}
		entry.Hash = hash
		if err := checkOpenAPIPath(&entry); err != nil {
			return nil, err
		}
		out = append(out, entry)
	}
	sort.Sort(openAPIPathsByPath(out))
	for i := 1; i < len(out); i++ {
		if out[i].Path == out[i-1].Path {
			return nil, fmt.Errorf("%q: listed twice", out[i].Path)
		}
	}
	return out, nil
}

type openAPIPathsByPath []OpenAPIPath

func (s openAPIPathsByPath) Len() int           { return len(s) }
func (s openAPIPathsByPath) Less(i, j int) bool { return s[i].Path < s[j].Path }
func (s openAPIPathsByPath) Swap(i, j int)      { s[i], s[j] = s[j], s[i] }

func checkOpenAPIPath(p *OpenAPIPath) error {
	if err := checkToken("path", p.Path); err != nil {
		return err
	}
	if p.Path[0] == '/' || strings.ContainsAny(p.Path, "?#%\"\\") {
		return fmt.Errorf("%q: not a path below %s", p.Path, openAPIV3Prefix)
	}
	for _, c := range []byte(p.Hash) {
		if !(c >= '0' && c <= '9' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z') {
			return fmt.Errorf("%q: hash %q: letters and digits only", p.Path, p.Hash)
		}
	}
	if p.Hash == "" {
		return fmt.Errorf("%q: hash: must not be empty", p.Path)
	}
	return nil
}

// openAPIKey names one published document: a path and its hash.
type openAPIKey struct{ path, hash string }

// openAPIIndex is the OpenAPI part of an Index: who publishes which document,
// where each path goes, and the merged index document.
type openAPIIndex struct {
	// published holds, per path and hash, the servers that published them.
	published map[openAPIKey]ServerSet
	// paths holds every listed path's publishers and chosen server.
	paths map[string]openAPIPathRoute
	// document is the merged /openapi/v3 index; nil when no server in the
	// snapshot has one, and then the servers answer for themselves.
	document *Document
	// coverage counts, per server, the group versions it serves: the
	// server answering GET /openapi/v2 serves the most.
	coverage []int
}

// openAPIPathRoute is where the requests for one listed path go.
type openAPIPathRoute struct {
	publishers ServerSet
	// chosen is the server the merged index points at and that requests
	// without a published hash go to.
	chosen int
}

// buildOpenAPI indexes every server's OpenAPI v3 entries and makes the
// deterministic choices RATIONALE.md explains: for a path, among the healthy
// servers publishing it (all publishing ones while none is healthy), the
// preferred server, else the newest version, else the lowest ID; for
// /openapi/v2 (decided per request, from coverage), the routable server
// serving the most group-versions, ties broken the same way. Only sets and
// server IDs decide, never the order servers come in.
func (ix *Index) buildOpenAPI() {
	o := &ix.openAPI
	o.published = make(map[openAPIKey]ServerSet)
	o.paths = make(map[string]openAPIPathRoute)
	servers := ix.snap.Servers
	for i := range servers {
		for j := range servers[i].OpenAPI {
			p := &servers[i].OpenAPI[j]
			o.published[openAPIKey{p.Path, p.Hash}] |= 1 << uint(i)
			r := o.paths[p.Path]
			r.publishers |= 1 << uint(i)
			o.paths[p.Path] = r
		}
	}
	paths := make([]string, 0, len(o.paths))
	for path, r := range o.paths {
		paths = append(paths, path)
		r.chosen = ix.best(ix.routableOr(r.publishers), nil)
		o.paths[path] = r
	}
	slices.Sort(paths)
	if len(paths) > 0 {
		body := append(make([]byte, 0, 256*len(paths)), `{"paths":{`...)
		for n, path := range paths {
			if n > 0 {
				body = append(body, ',')
			}
			body = appendJSONString(body, path)
			body = append(body, `:{"serverRelativeURL":`...)
			body = appendJSONString(body, servers[o.paths[path].chosen].openAPIURL(path))
			body = append(body, '}')
		}
		body = append(body, "}}"...)
		h := NewSHA512()
		h.Write(body)
		o.document = &Document{Body: body, ETag: quotedHex(h.Sum()), ContentType: "application/json"}
	}
	o.coverage = make([]int, len(servers))
	for _, set := range ix.gv {
		for i := range servers {
			if set.Has(i) {
				o.coverage[i]++
			}
		}
	}
}

// routableOr is the routable part of set, or set itself when none of it is:
// the merged index names a document even while only servers that are down
// publish it.
func (ix *Index) routableOr(set ServerSet) ServerSet {
	if h := set & ix.routable; h != 0 {
		return h
	}
	return set
}

// best picks from a non-empty set: the highest score (when scores are given),
// then the preferred server, then the newest version, then the lowest ID.
func (ix *Index) best(set ServerSet, score []int) int {
	servers := ix.snap.Servers
	best := -1
	for i := range servers {
		if !set.Has(i) {
			continue
		}
		if best < 0 {
			best = i
			continue
		}
		c := 0
		if score != nil {
			c = score[i] - score[best]
		}
		if c == 0 {
			c = boolInt(i == ix.preferred) - boolInt(best == ix.preferred)
		}
		if c == 0 {
			c = compareVersions(servers[i].Version, servers[best].Version)
		}
		if c > 0 || c == 0 && servers[i].ID < servers[best].ID {
			best = i
		}
	}
	return best
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// openAPIURL is the URL of the server's document for path.
func (s *Server) openAPIURL(path string) string {
	lo, hi := 0, len(s.OpenAPI)
	for lo < hi {
		if mid := int(uint(lo+hi) >> 1); s.OpenAPI[mid].Path < path {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return s.OpenAPI[lo].URL()
}

// compareVersions orders gitVersions ("v1.36.3", "v1.35.0-rc.1+abc") by their
// major, minor and patch numbers; what does not parse sorts first.
func compareVersions(a, b string) int {
	va, vb := versionNumbers(a), versionNumbers(b)
	for i := range va {
		if va[i] != vb[i] {
			if va[i] > vb[i] {
				return 1
			}
			return -1
		}
	}
	return 0
}

func versionNumbers(v string) (n [3]int) {
	v, ok := strings.CutPrefix(v, "v")
	for i := 0; ok && i < len(n); i++ {
		j := 0
		for j < len(v) && v[j] >= '0' && v[j] <= '9' && n[i] < 1e6 {
			n[i] = 10*n[i] + int(v[j]-'0')
			j++
		}
		ok = j > 0
		v = v[j:]
		if i < 2 {
			v, ok = strings.CutPrefix(v, ".")
			ok = ok && j > 0
		}
	}
	if !ok {
		return [3]int{}
	}
	return n
}

// decideOpenAPI routes the OpenAPI endpoints and returns the set it picked
// from; ok is false for any other request and for a path no server's index
// lists, which the servers then answer as before.
func (ix *Index) decideOpenAPI(req *Request, c choice) (d Decision, from ServerSet, ok bool) {
	if req.Method != "GET" && req.Method != "HEAD" {
		return d, 0, false
	}
	o := &ix.openAPI
	switch {
	case req.Path == openAPIV2Path:
		if c.routable == 0 {
			return Decision{Action: Unavailable, Version: openAPIV2Path}, 0, true
		}
		v2 := ix.best(c.prefer(c.routable), o.coverage)
		return Decision{Action: Route, Server: v2}, 1 << uint(v2), true
	case req.Path == openAPIV3Root:
		if o.document == nil {
			return d, 0, false
		}
		if ifNoneMatchMatches(req.IfNoneMatch, o.document.ETag) {
			return Decision{Action: NotModified, Document: o.document}, 0, true
		}
		return Decision{Action: ServeDocument, Document: o.document}, 0, true
	case !strings.HasPrefix(req.Path, openAPIV3Prefix):
		return d, 0, false
	}
	path := req.Path[len(openAPIV3Prefix):]
	route, listed := o.paths[path]
	if !listed {
		return d, 0, false
	}
	// Whoever published the hash serves exactly those bytes: the immutable
	// caching kube-apiserver promises for a hashed URL stays true.
	if hash := queryValue(req.Query, "hash"); hash != "" {
		if set := c.prefer(o.published[openAPIKey{path, hash}] & c.routable); set != 0 {
			if c.preferred >= 0 && set.Has(c.preferred) {
				return Decision{Action: Route, Server: c.preferred}, 1 << uint(c.preferred), true
			}
			return Decision{Action: Route, Server: set.Pick(c.pick)}, set, true
		}
	}
	publishers := c.prefer(route.publishers & c.routable)
	if publishers == 0 {
		// Only servers that are down publish it.
		d.Action = Unavailable
		d.Group, d.Version = openAPIGroupVersion(path)
		return d, 0, true
	}
	// The server the merged index points at, as long as it is routable.
	chosen := ix.best(publishers, nil)
	return Decision{Action: Route, Server: chosen}, 1 << uint(chosen), true
}

// openAPIGroupVersion names what an OpenAPI v3 path describes, for the 503
// message.
func openAPIGroupVersion(path string) (group, version string) {
	if rest, ok := strings.CutPrefix(path, "apis/"); ok {
		group, version, _ = strings.Cut(rest, "/")
		return group, version
	}
	if rest, ok := strings.CutPrefix(path, "api/"); ok {
		return "", rest
	}
	return "", openAPIV3Prefix + path
}

// queryValue is what Go's url.Values.Get returns for key after
// url.ParseQuery(rawQuery), as kube-apiserver reads the hash: the first
// well-formed pair with that key, unescaped.
func queryValue(rawQuery, key string) string {
	for rawQuery != "" {
		var pair string
		pair, rawQuery, _ = strings.Cut(rawQuery, "&")
		if pair == "" || strings.IndexByte(pair, ';') >= 0 {
			continue
		}
		k, v, _ := strings.Cut(pair, "=")
		if k, ok := queryUnescape(k); !ok || k != key {
			continue
		}
		if v, ok := queryUnescape(v); ok {
			return v
		}
	}
	return ""
}

// ifNoneMatchMatches is net/http's If-None-Match test, which kube-apiserver
// answers /openapi/v3 with (http.ServeContent): "*", or any tag of the list
// equal to etag when weakness is ignored.
func ifNoneMatchMatches(header, etag string) bool {
	for header != "" {
		var tag string
		tag, header, _ = strings.Cut(header, ",")
		tag = strings.TrimSpace(tag)
		if tag == "*" || strings.TrimPrefix(tag, "W/") == strings.TrimPrefix(etag, "W/") {
			return true
		}
	}
	return false
}
