package discovery

import (
	"slices"
	"strconv"
	"strings"
)

// IndexOptions are the routing choices an index makes that the snapshot does
// not carry: the operator's, given in the plugin configuration.
type IndexOptions struct {
	// SchemaSkewWritesOnly sends only the writes of a resource whose schemas
	// differ between the servers to the servers whose schema lacks nothing
	// (Server.MissingFields); otherwise its reads go there too.
	SchemaSkewWritesOnly bool
}

// resourceFields is what the index knows about one resource's fields.
type resourceFields struct {
	// labels are the field-selector labels some server accepts for it,
	// sorted, each with the servers that accept it; nil when every server
	// accepts the same.
	labels []acceptedLabel
	// lacking are the servers whose schema of it lacks fields another
	// server's has.
	lacking ServerSet
	// skew is what each server's schema has of the fields that differ; nil
	// when the snapshot does not say (Snapshot.FieldSkew).
	skew *skewTree
}

type acceptedLabel struct {
	label   string
	servers ServerSet
}

// indexFields records the snapshot's field selectors and missing fields per
// resource.
func (ix *Index) indexFields(snap *Snapshot) {
	fieldsOf := func(key string) *resourceFields {
		gvr, _ := parseResourceKey(key) // Validate checked every key
		if ix.fields == nil {
			ix.fields = make(map[groupVersionResource]*resourceFields)
		}
		f := ix.fields[gvr]
		if f == nil {
			f = &resourceFields{}
			ix.fields[gvr] = f
		}
		return f
	}
	for i := range snap.Servers {
		bit := ServerSet(1) << uint(i)
		for key, labels := range snap.Servers[i].FieldSelectors {
			f := fieldsOf(key)
			for _, label := range labels {
				at, found := slices.BinarySearchFunc(f.labels, label, func(a acceptedLabel, l string) int {
					switch {
					case a.label < l:
						return -1
					case a.label > l:
						return 1
					}
					return 0
				})
				if !found {
					f.labels = slices.Insert(f.labels, at, acceptedLabel{label: label})
				}
				f.labels[at].servers |= bit
			}
		}
		for key := range snap.Servers[i].MissingFields {
			fieldsOf(key).lacking |= bit
		}
	}
	for key, skew := range snap.FieldSkew {
		fieldsOf(key).skew = newSkewTree(&skew)
	}
	ix.minors = make([]int, len(snap.Servers))
	for i := range snap.Servers {
		ix.minors[i] = minorOf(snap.Servers[i].Version)
	}
}

// minorOf orders gitVersions ("v1.31.4") by their major and minor release;
// one it cannot read comes first.
func minorOf(version string) int {
	major, rest, _ := strings.Cut(strings.TrimPrefix(version, "v"), ".")
	minor, _, _ := strings.Cut(rest, ".")
	ma, errMajor := strconv.Atoi(major)
	mi, errMinor := strconv.Atoi(minor)
	if errMajor != nil || errMinor != nil || ma < 0 || mi < 0 || mi >= 1000 {
		return -1
	}
	return ma*1000 + mi
}

// newestMinor is the part of set whose servers run the newest minor release
// of those in it.
func (ix *Index) newestMinor(set ServerSet) ServerSet {
	newest, of := -2, ServerSet(0)
	for i := range ix.minors {
		switch m := ix.minors[i]; {
		case !set.Has(i):
		case m > newest:
			newest, of = m, 1<<uint(i)
		case m == newest:
			of |= 1 << uint(i)
		}
	}
	return of
}

// narrowForFields is the part of the capable servers that can serve a
// request for a resource as it asks, when the servers differ in what they
// know of its fields:
//
//   - a list, watch or deletecollection whose field selector (the first
//     fieldSelector value of the query, read as fields.ParseSelector reads
//     it) uses a label not every capable server accepts goes to those that
//     accept every label; when none does, or the selector is one upstream
//     rejects, every capable server answers alike (with a 400), and
//     unaccepted is set when it is because none accepts a label;
//   - a request for a resource whose schema differs between the servers
//     (writes only if options say so) goes, of the routable capable servers,
//     to those whose schema has every field its body sets, when the body is
//     read (a create, update or patch of the object or its status in a media
//     type the plugin reads); of those, to the ones that lack no field of
//     the resource, else to those of the newest minor release: each server
//     writes back only the stored fields its schema has, and the newest
//     release has the fields newer clients set (RATIONALE: "Why route writes
//     by the fields their body sets?"). When none has every field, the body
//     is invalid everywhere and any of them says so. A server that is down
//     lists no missing fields because the controller compares only the
//     servers that answer: what it lacks is unknown, so it is never chosen
//     for a field it may lack.
//
// body says what was made of the body; await is set instead of a decision
// when the body would decide and the caller can wait for it.
func (ix *Index) narrowForFields(f *resourceFields, req *Request, info *RequestInfo, capable ServerSet) (narrowed ServerSet, unaccepted bool, body BodyUse, await bool) {
	if f.labels != nil && readsWithSelector(req.Method, info) {
		if accepting, ok := acceptingServers(f.labels, req.Query); ok {
			if accepting&capable == 0 {
				return capable, true, BodyNotConsulted, false
			}
			capable &= accepting
		}
	}
	if f.lacking == 0 && f.skew == nil || ix.options.SchemaSkewWritesOnly && !isWriteMethod(req.Method) {
		return capable, false, BodyNotConsulted, false
	}
	candidates := capable & ix.routable
	if candidates == 0 {
		return capable, false, BodyNotConsulted, false
	}
	if f.skew != nil && bodySetsFields(req.Method, info) {
		switch body = BodyUnreadable; {
		case !bodyReadable(req):
		case req.Body == nil && req.BodyAwaitable:
			return capable, false, BodyNotConsulted, true
		case req.Body != nil:
			if knowing, ok := f.skew.knowingEveryField(req.Body, bodyFormatOf(req.ContentType)); ok {
				body = BodyRead
				if all := candidates & knowing; all != 0 {
					candidates = all
				}
			}
		}
	}
	if complete := candidates &^ f.lacking; complete != 0 {
		return complete, false, body, false
	}
	return ix.newestMinor(candidates), false, body, false
}

// readsWithSelector reports the requests upstream reads a field selector
// of: a list or watch (a GET of a collection, a /watch/ path) and a
// deletecollection.
func readsWithSelector(method string, info *RequestInfo) bool {
	switch {
	case info.Verb == "watch":
		return true
	case info.Name != "":
		return false
	}
	return method == "GET" || method == "HEAD" || method == "DELETE"
}

// isWriteMethod reports the methods of create, update, patch (server-side
// apply is a PATCH) and delete: each has the server decode the stored
// object into its own types and write what it knows back.
func isWriteMethod(method string) bool {
	return method == "POST" || method == "PUT" || method == "PATCH" || method == "DELETE"
}

// acceptingServers is the set of servers that accept every label of the
// first fieldSelector of a raw query, read in place; ok is false without a
// selector or for one upstream rejects. A label no server lists is accepted
// by none.
func acceptingServers(labels []acceptedLabel, rawQuery string) (accepting ServerSet, ok bool) {
	param := scanListParams(rawQuery).fieldSelector
	if !param.present {
		return 0, false
	}
	accepting = ^ServerSet(0)
	for rest, more := (selectorText{s: param.raw, inQuery: true}), param.raw != ""; more; {
		var term selectorText
		term, rest, more = cutFieldTerm(rest)
		if term.s == "" {
			continue
		}
		field, _, value, valid := splitFieldTerm(term)
		if !valid || !validFieldValue(value) {
			return 0, false
		}
		// fields.ParseSelector drops a term without field and value ("=")
		// before any label is looked at.
		if field.s != "" || value.s != "" {
			accepting &= serversAccepting(labels, field)
		}
	}
	return accepting, true
}

func serversAccepting(labels []acceptedLabel, field selectorText) ServerSet {
	// A field without escapes is compared as it stands.
	field.inQuery = field.inQuery && containsEither(field.s, '%', '+')
	for i := range labels {
		if field.is(labels[i].label) {
			return labels[i].servers
		}
	}
	return 0
}
