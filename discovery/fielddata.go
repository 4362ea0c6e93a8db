package discovery

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// MaxMissingFields bounds the field paths a server lists per resource in
// Server.MissingFields: they are evidence for people, and the plugin only
// needs to know that some exist (the paths writes are routed by are in
// Snapshot.FieldSkew, one table for all servers). At 64 servers with the skew between v1.36
// and v1.37 (14 kinds, paths of 60 to 70 bytes), 16 paths each grow the
// configuration every plugin VM parses by 42%, 4 by 12%.
const MaxMissingFields = 4

// ResourceKey names a resource in Server.FieldSelectors and
// Server.MissingFields: "group/version/resource", or "version/resource" for
// the core group ("v1/services", "apps/v1/deployments").
func ResourceKey(group, version, resource string) string {
	if group == "" {
		return version + "/" + resource
	}
	return group + "/" + version + "/" + resource
}

// parseResourceKey splits a ResourceKey; ok is false for anything else (an
// empty part, a subresource, the core group spelt with a leading slash).
func parseResourceKey(key string) (gvr groupVersionResource, ok bool) {
	parts := strings.Split(key, "/")
	switch len(parts) {
	case 2:
		gvr = groupVersionResource{"", parts[0], parts[1]}
	case 3:
		gvr = groupVersionResource{parts[0], parts[1], parts[2]}
	default:
		return gvr, false
	}
	return gvr, gvr.version != "" && gvr.resource != "" && ResourceKey(gvr.group, gvr.version, gvr.resource) == key
}

// resourceListsMember is a member mapping resource keys to sorted lists of
// names: Server.FieldSelectors and Server.MissingFields. Absent, or empty,
// it is nil; written, its keys are sorted so that equal snapshots encode
// alike.
func resourceListsMember(name string, field func(*Server) *map[string][]string) member[Server] {
	return member[Server]{
		name: name,
		read: func(v JSONValue, s *Server, _ *reading) error {
			if !v.Exists() {
				return nil
			}
			if !v.IsObject() {
				return fmt.Errorf("must be an object of resources, got %s", describeValue(v))
			}
			lists := map[string][]string{}
			for members := v.Members(); members.Next(); {
				key := members.Key().Str()
				if _, dup := lists[key]; dup {
					return fmt.Errorf("%q: listed twice", key)
				}
				list := []string{}
				if !members.Value().IsArray() {
					return fmt.Errorf("%q: must be an array of strings, got %s", key, describeValue(members.Value()))
				}
				for elements := members.Value().Members(); elements.Next(); {
					if !elements.Value().IsString() {
						return fmt.Errorf("%q: must be an array of strings, got %s", key, describeValue(elements.Value()))
					}
					list = append(list, elements.Value().Str())
				}
				lists[key] = list
			}
			if len(lists) > 0 {
				*field(s) = lists
			}
			return nil
		},
		omitted: func(s *Server) bool { return len(*field(s)) == 0 },
		write: func(dst []byte, s *Server) []byte {
			lists := *field(s)
			dst = append(dst, '{')
			for i, key := range slices.Sorted(maps.Keys(lists)) {
				if i > 0 {
					dst = append(dst, ',')
				}
				dst = appendJSONString(dst, key)
				dst = append(dst, ':', '[')
				for j, item := range lists[key] {
					if j > 0 {
						dst = append(dst, ',')
					}
					dst = appendJSONString(dst, item)
				}
				dst = append(dst, ']')
			}
			return append(dst, '}')
		},
	}
}

// checkResourceLists checks one server's FieldSelectors or MissingFields:
// resources it serves, each with a sorted list of distinct names, at most
// limit of them (0: no limit).
func checkResourceLists(srv *Server, lists map[string][]string, what string, limit int) error {
	for _, key := range slices.Sorted(maps.Keys(lists)) {
		names := lists[key]
		gvr, ok := parseResourceKey(key)
		if !ok {
			return fmt.Errorf("%q: not a resource (group/version/resource, or version/resource for the core group)", key)
		}
		if !srv.serves(gvr) {
			return fmt.Errorf("%q: a resource the server does not serve", key)
		}
		if len(names) == 0 {
			return fmt.Errorf("%q: no %s", key, what)
		}
		if limit > 0 && len(names) > limit {
			return fmt.Errorf("%q: %d %ss, at most %d", key, len(names), what, limit)
		}
		for i, name := range names {
			if err := checkToken(what, name); err != nil {
				return fmt.Errorf("%q: %w", key, err)
			}
			if i > 0 && name <= names[i-1] {
				return fmt.Errorf("%q: %s: %q not sorted after %q, or listed twice", key, what, name, names[i-1])
			}
		}
	}
	return nil
}

// serves reports whether the server's discovery lists the resource.
func (srv *Server) serves(gvr groupVersionResource) bool {
	list := &srv.APIs
	if gvr.group == "" {
		list = &srv.Core
	}
	for g := range list.Items {
		grp := &list.Items[g]
		if grp.Name() != gvr.group {
			continue
		}
		for v := range grp.Versions {
			ver := &grp.Versions[v]
			if ver.Version != gvr.version {
				continue
			}
			for r := range ver.Resources {
				if ver.Resources[r].Resource == gvr.resource {
					return true
				}
			}
		}
	}
	return false
}

// checkFieldData checks every server's FieldSelectors and MissingFields, and
// that a resource whose field selectors one server lists is listed by every
// server that serves it: a server that leaves it out would read as accepting
// no label at all.
func (s *Snapshot) checkFieldData() error {
	for i := range s.Servers {
		srv := &s.Servers[i]
		if err := checkResourceLists(srv, srv.FieldSelectors, "label", 0); err != nil {
			return fmt.Errorf("snapshot: %s: fieldSelectors: %w", serverLabel(i, srv.ID), err)
		}
		if err := checkResourceLists(srv, srv.MissingFields, "field path", MaxMissingFields); err != nil {
			return fmt.Errorf("snapshot: %s: missingFields: %w", serverLabel(i, srv.ID), err)
		}
	}
	for i := range s.Servers {
		for _, key := range slices.Sorted(maps.Keys(s.Servers[i].FieldSelectors)) {
			gvr, _ := parseResourceKey(key)
			for j := range s.Servers {
				other := &s.Servers[j]
				if _, listed := other.FieldSelectors[key]; !listed && other.serves(gvr) {
					return fmt.Errorf("snapshot: %s: fieldSelectors: %q missing: %s lists it, and every server that serves a resource lists it when one does",
						serverLabel(j, other.ID), key, serverLabel(i, s.Servers[i].ID))
				}
			}
		}
	}
	return nil
}
