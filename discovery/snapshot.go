package discovery

import (
	"fmt"
	"strings"
)

// MaxServers bounds a snapshot: server sets are bit masks in a uint64, and no
// control plane runs more API servers than this.
const MaxServers = 64

// FrontProxyClusterSuffix is the contract between the plugin and the hosts
// about the front-proxy credential. When the plugin asserts a client's
// identity (X-Remote-User/X-Remote-Group), it names the server itself in the
// routing header as the server's cluster followed by this suffix, and hosts
// send exactly those requests with the front-proxy client certificate; every
// other request, including the plugin's own, reaches the API servers without
// it. Envoy configurations define, per server, the clusters "<cluster>" and
// "<cluster>+front-proxy". Snapshot cluster names never contain '+', so no
// cluster name can end in the suffix by accident.
const FrontProxyClusterSuffix = "+front-proxy"

// Snapshot is one consistent view of the control plane: every API server's own
// discovery and health at one moment, under one generation number.
type Snapshot struct {
	Generation uint64
	// Preferred is the ID of the server that takes every request it can serve
	// (node-local mode: the node's own API server); empty when requests are
	// balanced over all servers.
	Preferred string
	Servers   []Server
}

// Server is one kube-apiserver as the controller last saw it.
type Server struct {
	ID      string
	Cluster string
	Version string
	Healthy bool
	// APIs and Core are the server's own (nopeer) /apis and /api documents.
	APIs GroupList
	Core GroupList
	// OpenAPI is the server's GET /openapi/v3 index sorted by path; nil when
	// the snapshot does not carry it.
	OpenAPI []OpenAPIPath
}

// ParseSnapshot decodes and validates a snapshot document (format in the package
// documentation). Any defect yields an error naming the server and field.
func ParseSnapshot(raw []byte) (*Snapshot, error) {
	doc, ok := ParseJSON(raw)
	if !ok {
		return nil, fmt.Errorf("snapshot: not valid JSON")
	}
	return ParseSnapshotValue(doc)
}

// ParseSnapshotValue is ParseSnapshot for a snapshot embedded in a larger
// document ParseJSON accepted, which is then neither copied nor scanned again.
func ParseSnapshotValue(doc JSONValue) (*Snapshot, error) {
	if !doc.IsObject() {
		return nil, fmt.Errorf("snapshot: must be a JSON object")
	}
	var gen, servers, preferred JSONValue
	firstMembers(doc, []string{"generation", "servers", "preferred"}, []*JSONValue{&gen, &servers, &preferred})
	generation, ok := gen.Uint()
	if !ok || generation == 0 {
		return nil, fmt.Errorf("snapshot: generation: must be a positive integer, got %s", describeValue(gen))
	}
	if !servers.IsArray() {
		return nil, fmt.Errorf("snapshot: servers: must be an array, got %s", describeValue(servers))
	}
	snap := &Snapshot{Generation: generation}
	if preferred.Exists() {
		if !preferred.IsString() {
			return nil, fmt.Errorf("snapshot: preferred: must be a server id, got %s", describeValue(preferred))
		}
		snap.Preferred = preferred.Str()
	}
	for elements := servers.Members(); elements.Next(); {
		if len(snap.Servers) == MaxServers {
			return nil, fmt.Errorf("snapshot: servers: more than %d servers", MaxServers)
		}
		srv, err := parseServer(len(snap.Servers), elements.Value())
		if err != nil {
			return nil, err
		}
		snap.Servers = append(snap.Servers, srv)
	}
	if err := snap.Validate(); err != nil {
		return nil, err
	}
	return snap, nil
}

// parseServer reads one server's members, each a fixed number of calls deep:
// the group lists are walked in loops (see parseGroupList), so a server with
// more groups or deeper documents costs time, never stack.
func parseServer(i int, s JSONValue) (Server, error) {
	if !s.IsObject() {
		return Server{}, fmt.Errorf("snapshot: servers[%d]: must be an object, got %s", i, describeValue(s))
	}
	var srv Server
	var id, cluster, version, healthy, apis, api, openAPI JSONValue
	firstMembers(s, []string{"id", "cluster", "version", "healthy", "apis", "api", "openapiV3"},
		[]*JSONValue{&id, &cluster, &version, &healthy, &apis, &api, &openAPI})
	for _, f := range []struct {
		name string
		v    JSONValue
		dst  *string
	}{{"id", id, &srv.ID}, {"cluster", cluster, &srv.Cluster}, {"version", version, &srv.Version}} {
		v := f.v
		if !v.IsString() {
			return Server{}, fmt.Errorf("snapshot: servers[%d]: %s: must be a string, got %s", i, f.name, describeValue(v))
		}
		*f.dst = v.Str()
	}
	where := serverLabel(i, srv.ID)
	if !healthy.IsBool() {
		return Server{}, fmt.Errorf("snapshot: %s: healthy: must be true or false, got %s", where, describeValue(healthy))
	}
	srv.Healthy = healthy.Bool()
	for _, f := range []struct {
		name string
		v    JSONValue
		dst  *GroupList
	}{{"apis", apis, &srv.APIs}, {"api", api, &srv.Core}} {
		v := f.v
		if !v.IsObject() {
			return Server{}, fmt.Errorf("snapshot: %s: %s: must be an APIGroupDiscoveryList object, got %s", where, f.name, describeValue(v))
		}
		if deeperThan(v.Raw(), maxJSONNesting) {
			return Server{}, fmt.Errorf("snapshot: %s: %s: %w", where, f.name, errTooDeep())
		}
		list, err := parseGroupList(v)
		if err != nil {
			return Server{}, fmt.Errorf("snapshot: %s: %s: %w", where, f.name, err)
		}
		*f.dst = list
	}
	if openAPI.Exists() {
		paths, err := parseOpenAPIHashes(openAPI)
		if err != nil {
			return Server{}, fmt.Errorf("snapshot: %s: openapiV3: %w", where, err)
		}
		srv.OpenAPI = paths
	}
	return srv, nil
}

// firstMembers reads, in one pass over obj, the first member of each name
// into the matching destination: looking each up with Get would skip over the
// embedded documents once per name.
func firstMembers(obj JSONValue, names []string, dsts []*JSONValue) {
	for members := obj.Members(); members.Next(); {
		for i, name := range names {
			if !dsts[i].Exists() && members.Key().is(name) {
				*dsts[i] = members.Value()
				break
			}
		}
	}
}

// Validate checks the invariants every consumer relies on: a positive
// generation, 1..MaxServers servers with unique well-formed IDs and clusters
// (no '+' in a cluster), the core group only in /api and never in /apis.
func (s *Snapshot) Validate() error {
	if s.Generation == 0 {
		return fmt.Errorf("snapshot: generation: must be positive")
	}
	if len(s.Servers) == 0 || len(s.Servers) > MaxServers {
		return fmt.Errorf("snapshot: servers: need 1 to %d servers, got %d", MaxServers, len(s.Servers))
	}
	ids := make(map[string]int, len(s.Servers))
	clusters := make(map[string]int, len(s.Servers))
	for i := range s.Servers {
		srv := &s.Servers[i]
		where := serverLabel(i, srv.ID)
		if err := checkToken("id", srv.ID); err != nil {
			return fmt.Errorf("snapshot: %s: %w", where, err)
		}
		if err := checkToken("cluster", srv.Cluster); err != nil {
			return fmt.Errorf("snapshot: %s: %w", where, err)
		}
		if strings.Contains(srv.Cluster, "+") {
			return fmt.Errorf("snapshot: %s: cluster: %q: character '+' is not allowed (it marks the front-proxy cluster %q)",
				where, srv.Cluster, srv.Cluster+FrontProxyClusterSuffix)
		}
		if err := checkToken("version", srv.Version); err != nil {
			return fmt.Errorf("snapshot: %s: %w", where, err)
		}
		if j, dup := ids[srv.ID]; dup {
			return fmt.Errorf("snapshot: %s: id: duplicates servers[%d]", where, j)
		}
		ids[srv.ID] = i
		if j, dup := clusters[srv.Cluster]; dup {
			return fmt.Errorf("snapshot: %s: cluster: %q is also used by servers[%d]", where, srv.Cluster, j)
		}
		clusters[srv.Cluster] = i
		for g := range srv.APIs.Items {
			if srv.APIs.Items[g].Name() == "" {
				return fmt.Errorf("snapshot: %s: apis: items[%d]: the core group belongs in /api, not /apis", where, g)
			}
		}
		for g := range srv.Core.Items {
			if name := srv.Core.Items[g].Name(); name != "" {
				return fmt.Errorf("snapshot: %s: api: items[%d] (%s): /api holds only the core group", where, g, name)
			}
		}
	}
	if _, ok := ids[s.Preferred]; s.Preferred != "" && !ok {
		return fmt.Errorf("snapshot: preferred: %q is the id of no server in the snapshot", s.Preferred)
	}
	return nil
}

// PreferredIndex is the index in Servers of the preferred server, or -1.
func (s *Snapshot) PreferredIndex() int {
	if s.Preferred == "" {
		return -1
	}
	for i := range s.Servers {
		if s.Servers[i].ID == s.Preferred {
			return i
		}
	}
	return -1
}

// checkToken accepts the printable, space-free ASCII that server IDs, Envoy
// cluster names and version strings are made of; anything else would end up in a
// header value or a log line.
func checkToken(field, v string) error {
	if v == "" {
		return fmt.Errorf("%s: must not be empty", field)
	}
	if len(v) > 253 {
		return fmt.Errorf("%s: longer than 253 characters", field)
	}
	for i := 0; i < len(v); i++ {
		if c := v[i]; c <= ' ' || c >= 0x7f {
			return fmt.Errorf("%s: %q: character %q is not allowed (printable ASCII without spaces only)", field, v, c)
		}
	}
	return nil
}

func serverLabel(i int, id string) string {
	if id == "" || checkToken("id", id) != nil {
		return fmt.Sprintf("servers[%d]", i)
	}
	return fmt.Sprintf("servers[%d] (%s)", i, id)
}

// describeValue names what was found where something else was expected, short
// enough for one log line.
func describeValue(v JSONValue) string {
	if !v.Exists() {
		return "nothing (field missing)"
	}
	raw := v.Raw()
	if len(raw) > 40 {
		raw = raw[:37] + "..."
	}
	return raw
}
