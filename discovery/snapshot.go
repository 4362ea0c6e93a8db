package discovery

import (
	"fmt"
	"strconv"
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
	// FieldSkew maps a resource (ResourceKey) whose schemas differ between
	// the servers to what each server's schema has of the paths that
	// differ. Nil: no such resource, or no field-level knowledge. Since
	// schema 1.3.
	FieldSkew map[string]FieldSkew
	// Ignored names the members of a document of a newer minor schema
	// version that the reader did not know, once each, array indexes left
	// out ("servers[].example"); empty for what NewSnapshot builds.
	Ignored []string
}

// Server is one kube-apiserver as the controller last saw it.
type Server struct {
	ID      string
	Cluster string
	Version string
	Healthy bool
	// Draining marks a server about to be stopped (its node is cordoned for
	// maintenance, as kubeadm's upgrade procedure does before it restarts
	// the kubelet, which restarts the server): requests go to other capable
	// servers while there are any, so that none is in flight on it when it
	// stops. Since schema 1.2.
	Draining bool
	// APIs and Core are the server's own (nopeer) /apis and /api documents.
	APIs GroupList
	Core GroupList
	// OpenAPI is the server's GET /openapi/v3 index sorted by path; nil when
	// the snapshot does not carry it.
	OpenAPI []OpenAPIPath
	// FieldSelectors maps a resource (ResourceKey: "v1/services" for the
	// core group, "apps/v1/deployments" otherwise) to the field-selector
	// labels this server accepts for it, sorted; only for resources whose
	// label sets differ between the snapshot's servers, and then on every
	// server that serves the resource. Nil: no such resource, or no
	// field-level knowledge.
	FieldSelectors map[string][]string
	// MissingFields maps a resource (same spelling) to field paths (dotted,
	// sorted, at most MaxMissingFields of them) that another snapshot
	// server's schema of it has and this one's lacks. Nil: none known.
	MissingFields map[string][]string
}

// NewSnapshot assembles a snapshot and checks it (Validate): it is how every
// writer of the format makes one, so a snapshot that would be refused is
// never encoded. servers is kept, not copied.
func NewSnapshot(generation uint64, preferred string, servers []Server) (*Snapshot, error) {
	s := &Snapshot{Generation: generation, Preferred: preferred, Servers: servers}
	if err := s.Validate(); err != nil {
		return nil, err
	}
	return s, nil
}

// AppendJSON appends the snapshot as the document ParseSnapshot reads (the
// format in the package documentation). A group list that was parsed from a
// document is written as those bytes, so encoding a snapshot of real servers
// copies their documents instead of encoding them again.
func (s *Snapshot) AppendJSON(dst []byte) []byte {
	return appendMembers(dst, s, snapshotMembers[:])
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
	snap := &Snapshot{}
	values, unknown := collectMembers(doc, snapshotMembers[:])
	schema, err := ReadDocumentSchema(func(name string) JSONValue { return memberValue(snapshotMembers[:], values, name) })
	if err != nil {
		return nil, fmt.Errorf("snapshot: %w", err)
	}
	r := &reading{schema: schema}
	if err := fillMembers(values, unknown, snap, snapshotMembers[:], func(*Snapshot) string { return "snapshot" }, r, ""); err != nil {
		return nil, err
	}
	if err := snap.Validate(); err != nil {
		return nil, err
	}
	snap.Ignored = r.ignored
	return snap, nil
}

// member is one member of a JSON object of the format: its name and how it
// is read and written. The tables snapshotMembers and serverMembers are the
// format; ParseSnapshot and AppendJSON both walk them, so a new field is one
// more entry (and the Go field it fills).
type member[T any] struct {
	name string
	// read fills into from v, which is missing when the document has no
	// such member; r is the reading of the whole document.
	read func(v JSONValue, into *T, r *reading) error
	// omitted reports a value that is written by leaving the member out; nil
	// for a member that is always written.
	omitted func(from *T) bool
	write   func(dst []byte, from *T) []byte
}

// reading is what reading one snapshot document needs besides the document:
// its schema version, and the members of a newer minor it ignored.
type reading struct {
	schema  DocumentSchema
	ignored []string
}

// locatedError is a defect whose message already says where it is, so the
// member that contains it does not name itself again.
type locatedError struct{ error }

// collectMembers finds every member of obj that the table names, the first
// of each name only, in one pass (looking each up would skip over the
// embedded documents once per name), and the names of those it does not
// know.
func collectMembers[T any](obj JSONValue, table []member[T]) (values []JSONValue, unknown []string) {
	values = make([]JSONValue, len(table))
	for members := obj.Members(); members.Next(); {
		known := false
		for i := range table {
			if members.Key().is(table[i].name) {
				if !values[i].Exists() {
					values[i] = members.Value()
				}
				known = true
				break
			}
		}
		if !known {
			unknown = append(unknown, members.Key().Str())
		}
	}
	return values, unknown
}

func memberValue[T any](table []member[T], values []JSONValue, name string) JSONValue {
	for i := range table {
		if table[i].name == name {
			return values[i]
		}
	}
	return JSONValue{}
}

// fillMembers fills into from the collected values in the table's order, so
// that where (called after each member) can name what is read so far, then
// deals with the members the table does not know (DocumentSchema). at is
// where the object sits, array indexes left out ("servers[]."), for naming
// an ignored member. Reading an object is collectMembers, then fillMembers:
// each a call of its own, never nested, to keep the parser's stack flat.
func fillMembers[T any](values []JSONValue, unknown []string, into *T, table []member[T], where func(*T) string, r *reading, at string) error {
	for i := range table {
		if err := table[i].read(values[i], into, r); err != nil {
			if located, ok := err.(locatedError); ok {
				return located.error
			}
			return fmt.Errorf("%s: %s: %w", where(into), table[i].name, err)
		}
	}
	for _, name := range unknown {
		if err := r.schema.unknownMember(name, at, &r.ignored); err != nil {
			return fmt.Errorf("%s: %w", where(into), err)
		}
	}
	return nil
}

func appendMembers[T any](dst []byte, from *T, table []member[T]) []byte {
	dst = append(dst, '{')
	first := true
	for i := range table {
		m := &table[i]
		if m.omitted != nil && m.omitted(from) {
			continue
		}
		if !first {
			dst = append(dst, ',')
		}
		first = false
		dst = appendJSONString(dst, m.name)
		dst = append(dst, ':')
		dst = m.write(dst, from)
	}
	return append(dst, '}')
}

// snapshotMembers is the snapshot document.
var snapshotMembers = [...]member[Snapshot]{
	// ParseSnapshotValue reads the version members before any other
	// (ReadDocumentSchema); a writer always writes its own version.
	{
		name:  SchemaVersionMember,
		read:  func(JSONValue, *Snapshot, *reading) error { return nil },
		write: func(dst []byte, _ *Snapshot) []byte { return appendJSONString(dst, CurrentSchema().String()) },
	},
	{
		name:    RequiresSchemaVersionMember,
		read:    func(JSONValue, *Snapshot, *reading) error { return nil },
		omitted: func(*Snapshot) bool { return true },
	},
	{
		name: "generation",
		read: func(v JSONValue, s *Snapshot, _ *reading) error {
			generation, ok := v.Uint()
			if !ok || generation == 0 {
				return fmt.Errorf("must be a positive integer, got %s", describeValue(v))
			}
			s.Generation = generation
			return nil
		},
		write: func(dst []byte, s *Snapshot) []byte { return strconv.AppendUint(dst, s.Generation, 10) },
	},
	{
		name: "preferred",
		read: func(v JSONValue, s *Snapshot, _ *reading) error {
			if !v.Exists() {
				return nil
			}
			if !v.IsString() {
				return fmt.Errorf("must be a server id, got %s", describeValue(v))
			}
			s.Preferred = v.Str()
			return nil
		},
		omitted: func(s *Snapshot) bool { return s.Preferred == "" },
		write:   func(dst []byte, s *Snapshot) []byte { return appendJSONString(dst, s.Preferred) },
	},
	{
		name: "servers",
		read: func(v JSONValue, s *Snapshot, r *reading) error {
			if !v.IsArray() {
				return fmt.Errorf("must be an array, got %s", describeValue(v))
			}
			for elements := v.Members(); elements.Next(); {
				if len(s.Servers) == MaxServers {
					return fmt.Errorf("more than %d servers", MaxServers)
				}
				// A server is read here rather than in a function of its own:
				// this is the plugin's deepest call chain, and every frame
				// counts against the fixed stack of Envoy's WAMR runtime.
				i, v := len(s.Servers), elements.Value()
				if !v.IsObject() {
					return locatedError{fmt.Errorf("snapshot: servers[%d]: must be an object, got %s", i, describeValue(v))}
				}
				var srv Server
				values, unknown := collectMembers(v, serverMembers[:])
				if err := fillMembers(values, unknown, &srv, serverMembers[:], func(s *Server) string { return "snapshot: " + serverLabel(i, s.ID) }, r, "servers[]."); err != nil {
					return locatedError{err}
				}
				s.Servers = append(s.Servers, srv)
			}
			return nil
		},
		write: func(dst []byte, s *Snapshot) []byte {
			dst = append(dst, '[')
			for i := range s.Servers {
				if i > 0 {
					dst = append(dst, ',')
				}
				dst = appendMembers(dst, &s.Servers[i], serverMembers[:])
			}
			return append(dst, ']')
		},
	},
	// Since schema 1.3.
	fieldSkewMember,
}

// serverMembers is one server of the snapshot. Its members are each a fixed
// number of calls deep: the group lists are walked in loops (see
// parseGroupList), so a server with more groups or deeper documents costs
// time, never stack.
var serverMembers = [...]member[Server]{
	stringMember("id", func(s *Server) *string { return &s.ID }),
	stringMember("cluster", func(s *Server) *string { return &s.Cluster }),
	stringMember("version", func(s *Server) *string { return &s.Version }),
	{
		name: "healthy",
		read: func(v JSONValue, s *Server, _ *reading) error {
			if !v.IsBool() {
				return fmt.Errorf("must be true or false, got %s", describeValue(v))
			}
			s.Healthy = v.Bool()
			return nil
		},
		write: func(dst []byte, s *Server) []byte { return strconv.AppendBool(dst, s.Healthy) },
	},
	// Since schema 1.2.
	{
		name: "draining",
		read: func(v JSONValue, s *Server, _ *reading) error {
			if !v.Exists() {
				return nil
			}
			if !v.IsBool() {
				return fmt.Errorf("must be true or false, got %s", describeValue(v))
			}
			s.Draining = v.Bool()
			return nil
		},
		omitted: func(s *Server) bool { return !s.Draining },
		write:   func(dst []byte, s *Server) []byte { return strconv.AppendBool(dst, s.Draining) },
	},
	groupListMember("apis", func(s *Server) *GroupList { return &s.APIs }),
	groupListMember("api", func(s *Server) *GroupList { return &s.Core }),
	{
		name: "openapiV3",
		read: func(v JSONValue, s *Server, _ *reading) error {
			if !v.Exists() {
				return nil
			}
			paths, err := parseOpenAPIHashes(v)
			s.OpenAPI = paths
			return err
		},
		omitted: func(s *Server) bool { return s.OpenAPI == nil },
		write: func(dst []byte, s *Server) []byte {
			dst = append(dst, '{')
			for i := range s.OpenAPI {
				if i > 0 {
					dst = append(dst, ',')
				}
				dst = appendJSONString(dst, s.OpenAPI[i].Path)
				dst = append(dst, ':')
				dst = appendJSONString(dst, s.OpenAPI[i].Hash)
			}
			return append(dst, '}')
		},
	},
	// Since schema 1.1.
	resourceListsMember("fieldSelectors", func(s *Server) *map[string][]string { return &s.FieldSelectors }),
	resourceListsMember("missingFields", func(s *Server) *map[string][]string { return &s.MissingFields }),
}

func stringMember(name string, field func(*Server) *string) member[Server] {
	return member[Server]{
		name: name,
		read: func(v JSONValue, s *Server, _ *reading) error {
			if !v.IsString() {
				return fmt.Errorf("must be a string, got %s", describeValue(v))
			}
			*field(s) = v.Str()
			return nil
		},
		write: func(dst []byte, s *Server) []byte { return appendJSONString(dst, *field(s)) },
	}
}

// groupListMember is an APIGroupDiscoveryList; one parsed from a document is
// written as that document's bytes.
func groupListMember(name string, field func(*Server) *GroupList) member[Server] {
	return member[Server]{
		name: name,
		read: func(v JSONValue, s *Server, _ *reading) error {
			if !v.IsObject() {
				return fmt.Errorf("must be an APIGroupDiscoveryList object, got %s", describeValue(v))
			}
			if deeperThan(v.Raw(), maxJSONNesting) {
				return errTooDeep()
			}
			list, err := parseGroupList(v)
			*field(s) = list
			return err
		},
		write: func(dst []byte, s *Server) []byte {
			if list := field(s); list.source != "" {
				return append(dst, list.source...)
			}
			return field(s).AppendJSON(dst, true)
		},
	}
}

// Validate checks the invariants every consumer relies on: a positive
// generation, 1..MaxServers servers with unique well-formed IDs and clusters
// (no '+' in a cluster), the core group only in /api and never in /apis,
// OpenAPI index entries well-formed and sorted by path, a preferred
// server that is one of them, and field-level data as checkFieldData
// describes.
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
		if err := srv.APIs.CheckPlacement(false); err != nil {
			return fmt.Errorf("snapshot: %s: apis: %w", where, err)
		}
		if err := srv.Core.CheckPlacement(true); err != nil {
			return fmt.Errorf("snapshot: %s: api: %w", where, err)
		}
		for j := range srv.OpenAPI {
			p := &srv.OpenAPI[j]
			if err := checkOpenAPIPath(p); err != nil {
				return fmt.Errorf("snapshot: %s: openapiV3: %w", where, err)
			}
			if j > 0 && p.Path <= srv.OpenAPI[j-1].Path {
				return fmt.Errorf("snapshot: %s: openapiV3: %q: not sorted after %q, or listed twice", where, p.Path, srv.OpenAPI[j-1].Path)
			}
		}
	}
	if _, ok := ids[s.Preferred]; s.Preferred != "" && !ok {
		return fmt.Errorf("snapshot: preferred: %q is the id of no server in the snapshot", s.Preferred)
	}
	if err := s.checkFieldData(); err != nil {
		return err
	}
	return s.checkFieldSkew()
}

// CheckPlacement reports what keeps the list from being a server's /api (core
// set) or /apis document: the core group belongs in /api, and nothing else
// does.
func (l *GroupList) CheckPlacement(core bool) error {
	for g := range l.Items {
		switch name := l.Items[g].Name(); {
		case !core && name == "":
			return fmt.Errorf("items[%d]: the core group belongs in /api, not /apis", g)
		case core && name != "":
			return fmt.Errorf("items[%d] (%s): /api holds only the core group", g, name)
		}
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
