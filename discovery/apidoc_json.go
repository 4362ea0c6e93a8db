package discovery

import (
	"maps"
	"slices"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// ParseError reports where and why ParseGroupList rejected a document.
type ParseError struct {
	// Path locates the offending value, e.g. `items[3] (apps).versions[0] (v1)`;
	// it is empty when the problem is the document as a whole.
	Path string
	// Problem says what is wrong there.
	Problem string
}

func (e *ParseError) Error() string {
	if e.Path == "" {
		return e.Problem
	}
	return e.Path + ": " + e.Problem
}

// maxJSONNesting is encoding/json's own limit: upstream's types decode nothing deeper.
const maxJSONNesting = 10000

// ParseGroupList parses an apidiscovery.k8s.io/v2 APIGroupDiscoveryList.
//
// It reads what decoding into upstream's Go types would read (same string
// unescaping, invalid UTF-8 and lone surrogates become U+FFFD, unknown members
// are ignored, member names match case-sensitively like the API server's own
// decoder) but is strict about everything those types could not represent or
// this package could not re-encode exactly: values of the wrong JSON type,
// missing or empty version, resource and subresource names, the same member
// twice in one object, and ObjectMeta fields other than name, labels and
// annotations (null or "" excepted, since those encode to nothing). A
// group's metadata.name may be absent: that is the core group. The list's own
// kind, apiVersion and metadata are ignored. It never panics.
func ParseGroupList(raw []byte) (GroupList, error) {
	// One copy of the document: every name parsed below is a substring of it.
	text := string(raw)
	if deeperThan(text, maxJSONNesting) {
		return GroupList{}, errTooDeep()
	}
	if !validJSON(text) {
		return GroupList{}, &ParseError{Problem: "not valid JSON"}
	}
	doc := topLevel(text)
	if !doc.IsObject() {
		return GroupList{}, &ParseError{Problem: "must be a JSON object, got " + describeJSON(doc)}
	}
	return parseGroupList(doc)
}

func errTooDeep() error {
	return &ParseError{Problem: "nested deeper than " + strconv.Itoa(maxJSONNesting) + " levels"}
}

// The parser below descends one call per level of the discovery schema and
// walks every object and array in a loop, so its call depth is the schema's,
// whatever the document holds or how deeply it nests what it ignores.

// parseGroupList parses a list that is an object of a document ParseJSON
// accepted, nested no deeper than maxJSONNesting.
func parseGroupList(doc JSONValue) (list GroupList, err error) {
	members := knownMembersOf(doc, nil, listMembers)
	for members.next() {
		items := objectsIn(members.value, nil, "items", "metadata.name")
		for items.next() {
			g, err := parseGroup(items.value, &items.at)
			if err != nil {
				return GroupList{}, err
			}
			list.Items = append(list.Items, g)
		}
		if err = items.err; err != nil {
			return GroupList{}, err
		}
		list.Items = emptyUnlessNull(members.value, list.Items)
	}
	if members.err != nil {
		return GroupList{}, members.err
	}
	list.source = doc.Raw()
	return list, nil
}

// listMembers are the list-level members read; kind, apiVersion and metadata
// are ignored like any unknown member.
var listMembers = []string{"items"}

const (
	groupKind = iota
	groupAPIVersion
	groupMetadata
	groupVersions
)

var groupMembers = []string{"kind", "apiVersion", "metadata", "versions"}

func parseGroup(obj JSONValue, at *docPath) (g Group, err error) {
	members := knownMembersOf(obj, at, groupMembers)
	for members.next() {
		v := members.value
		switch members.member {
		case groupKind:
			g.Type.Kind, err = parseString(v, at, "kind")
		case groupAPIVersion:
			g.Type.APIVersion, err = parseString(v, at, "apiVersion")
		case groupMetadata:
			g.Meta, err = parseObjectMeta(v, at)
		case groupVersions:
			versions := objectsIn(v, at, "versions", "version")
			for versions.next() {
				ver, err := parseVersion(versions.value, &versions.at)
				if err != nil {
					return g, err
				}
				g.Versions = append(g.Versions, ver)
			}
			g.Versions, err = emptyUnlessNull(v, g.Versions), versions.err
		}
		if err != nil {
			return g, err
		}
	}
	return g, members.err
}

const (
	metaName = iota
	metaLabels
	metaAnnotations
	metaCreationTimestamp
)

// objectMetaMembers lists after the modelled ones every other ObjectMeta field:
// discovery documents never set them, so they are accepted only as null or "",
// which re-encode to nothing.
var objectMetaMembers = []string{
	"name", "labels", "annotations", "creationTimestamp",
	"generateName", "namespace", "selfLink", "uid", "resourceVersion", "generation",
	"deletionTimestamp", "deletionGracePeriodSeconds", "ownerReferences", "finalizers", "managedFields",
}

func parseObjectMeta(v JSONValue, parent *docPath) (meta ObjectMeta, err error) {
	if v.IsNull() {
		return meta, nil
	}
	if !v.IsObject() {
		return meta, parent.fail(strconv.Quote("metadata") + " must be an object, got " + describeJSON(v))
	}
	at := parent.member("metadata")
	members := knownMembersOf(v, &at, objectMetaMembers)
	for members.next() {
		v := members.value
		key := objectMetaMembers[members.member]
		switch {
		case members.member == metaName:
			meta.Name, err = parseString(v, &at, key)
		case members.member == metaLabels:
			meta.Labels, err = parseStringMap(v, &at, key)
		case members.member == metaAnnotations:
			meta.Annotations, err = parseStringMap(v, &at, key)
		case members.member == metaCreationTimestamp:
			// Servers built before creationTimestamp was tagged omitzero write
			// "creationTimestamp":null; it decodes to the zero time, which
			// today's upstream leaves out.
			if !v.IsNull() {
				err = at.fail(strconv.Quote(key) + " is not supported in discovery metadata (only null)")
			}
		case v.IsNull(), v.raw == `""`:
		default:
			err = at.fail(strconv.Quote(key) + " is not supported in discovery metadata")
		}
		if err != nil {
			return meta, err
		}
	}
	return meta, members.err
}

const (
	versionName = iota
	versionResources
	versionFreshness
)

var versionMembers = []string{"version", "resources", "freshness"}

func parseVersion(obj JSONValue, at *docPath) (ver Version, err error) {
	members := knownMembersOf(obj, at, versionMembers)
	for members.next() {
		v := members.value
		switch members.member {
		case versionName:
			ver.Version, err = parseString(v, at, "version")
		case versionResources:
			resources := objectsIn(v, at, "resources", "resource")
			for resources.next() {
				r, err := parseResource(resources.value, &resources.at)
				if err != nil {
					return ver, err
				}
				ver.Resources = append(ver.Resources, r)
			}
			ver.Resources, err = emptyUnlessNull(v, ver.Resources), resources.err
		case versionFreshness:
			ver.Freshness, err = parseString(v, at, "freshness")
		}
		if err != nil {
			return ver, err
		}
	}
	if members.err != nil {
		return ver, members.err
	}
	if ver.Version == "" {
		return ver, at.fail(strconv.Quote("version") + " is required")
	}
	return ver, nil
}

const (
	resourceName = iota
	resourceResponseKind
	resourceScope
	resourceSingular
	resourceVerbs
	resourceShortNames
	resourceCategories
	resourceSubresources
)

var resourceMembers = []string{
	"resource", "responseKind", "scope", "singularResource", "verbs", "shortNames", "categories", "subresources",
}

func parseResource(obj JSONValue, at *docPath) (r Resource, err error) {
	members := knownMembersOf(obj, at, resourceMembers)
	for members.next() {
		v := members.value
		key := resourceMembers[members.member]
		switch members.member {
		case resourceName:
			r.Resource, err = parseString(v, at, key)
		case resourceResponseKind:
			var kindAt docPath
			if kindAt, err = optionalGVKAt(v, at, key); err == nil && v.IsObject() {
				r.ResponseKind = new(GVK)
				*r.ResponseKind, err = parseGVK(v, &kindAt)
			}
		case resourceScope:
			r.Scope, err = parseString(v, at, key)
		case resourceSingular:
			r.SingularResource, err = parseString(v, at, key)
		case resourceVerbs:
			r.Verbs, err = parseStrings(v, at, key)
		case resourceShortNames:
			r.ShortNames, err = parseStrings(v, at, key)
		case resourceCategories:
			r.Categories, err = parseStrings(v, at, key)
		case resourceSubresources:
			subresources := objectsIn(v, at, key, "subresource")
			for subresources.next() {
				s, err := parseSubresource(subresources.value, &subresources.at)
				if err != nil {
					return r, err
				}
				r.Subresources = append(r.Subresources, s)
			}
			r.Subresources, err = emptyUnlessNull(v, r.Subresources), subresources.err
		}
		if err != nil {
			return r, err
		}
	}
	if members.err != nil {
		return r, members.err
	}
	if r.Resource == "" {
		return r, at.fail(strconv.Quote("resource") + " is required")
	}
	return r, nil
}

const (
	subresourceName = iota
	subresourceResponseKind
	subresourceAcceptedTypes
	subresourceVerbs
)

var subresourceMembers = []string{"subresource", "responseKind", "acceptedTypes", "verbs"}

func parseSubresource(obj JSONValue, at *docPath) (s Subresource, err error) {
	members := knownMembersOf(obj, at, subresourceMembers)
	for members.next() {
		v := members.value
		key := subresourceMembers[members.member]
		switch members.member {
		case subresourceName:
			s.Subresource, err = parseString(v, at, key)
		case subresourceResponseKind:
			var kindAt docPath
			if kindAt, err = optionalGVKAt(v, at, key); err == nil && v.IsObject() {
				s.ResponseKind = new(GVK)
				*s.ResponseKind, err = parseGVK(v, &kindAt)
			}
		case subresourceAcceptedTypes:
			types := objectsIn(v, at, key, "")
			for types.next() {
				gvk, err := parseGVK(types.value, &types.at)
				if err != nil {
					return s, err
				}
				s.AcceptedTypes = append(s.AcceptedTypes, gvk)
			}
			s.AcceptedTypes, err = emptyUnlessNull(v, s.AcceptedTypes), types.err
		case subresourceVerbs:
			s.Verbs, err = parseStrings(v, at, key)
		}
		if err != nil {
			return s, err
		}
	}
	if members.err != nil {
		return s, members.err
	}
	if s.Subresource == "" {
		return s, at.fail(strconv.Quote("subresource") + " is required")
	}
	return s, nil
}

const (
	gvkGroup = iota
	gvkVersion
	gvkKind
)

var gvkMembers = []string{"group", "version", "kind"}

func parseGVK(obj JSONValue, at *docPath) (gvk GVK, err error) {
	members := knownMembersOf(obj, at, gvkMembers)
	for members.next() {
		v := members.value
		key := gvkMembers[members.member]
		switch members.member {
		case gvkGroup:
			gvk.Group, err = parseString(v, at, key)
		case gvkVersion:
			gvk.Version, err = parseString(v, at, key)
		case gvkKind:
			gvk.Kind, err = parseString(v, at, key)
		}
		if err != nil {
			return gvk, err
		}
	}
	return gvk, members.err
}

// optionalGVKAt checks a member that holds a GVK or null and returns the
// path to parse an object at. The caller parses it with parseGVK itself
// rather than through a function in between: responseKind is the deepest
// level of the discovery schema, where every frame counts against the fixed
// stack of Envoy's WAMR runtime.
func optionalGVKAt(v JSONValue, parent *docPath, key string) (docPath, error) {
	if !v.IsNull() && !v.IsObject() {
		return docPath{}, parent.fail(strconv.Quote(key) + " must be an object, got " + describeJSON(v))
	}
	return parent.member(key), nil
}

// knownMembers walks the members of an object that are named in known, with
// their index there. It rejects a known member given twice, which decoders
// would resolve silently by keeping the last one.
type knownMembers struct {
	members JSONMembers
	known   []string
	at      *docPath
	seen    uint64
	// member and value are the current member's index in known and value.
	member int
	value  JSONValue
	err    error
}

func knownMembersOf(obj JSONValue, at *docPath, known []string) knownMembers {
	return knownMembers{members: obj.Members(), known: known, at: at}
}

// next moves to the next known member; false at the end or on a duplicate (err).
func (m *knownMembers) next() bool {
	for m.members.Next() {
		member := slices.Index(m.known, unquoteJSON(m.members.Key().raw))
		if member < 0 {
			continue
		}
		if m.seen&(1<<member) != 0 {
			m.err = m.at.fail(strconv.Quote(m.known[member]) + " appears more than once")
			return false
		}
		m.seen |= 1 << member
		m.member, m.value = member, m.members.Value()
		return true
	}
	return false
}

// objectArray walks an array of objects: the member key of the object at
// parent. null walks nothing; anything else but an array is an error.
type objectArray struct {
	elements JSONMembers
	parent   *docPath
	key      string
	// nameAt is the path of an element's name (see docPath), shown in errors.
	nameAt string
	count  int
	// at and value are the current element's path and value.
	at    docPath
	value JSONValue
	err   error
}

func objectsIn(v JSONValue, parent *docPath, key, nameAt string) objectArray {
	a := objectArray{parent: parent, key: key, nameAt: nameAt}
	switch {
	case v.IsArray():
		a.elements = v.Members()
	case !v.IsNull():
		a.err = parent.fail(strconv.Quote(key) + " must be an array of objects, got " + describeJSON(v))
	}
	return a
}

// next moves to the next element; false at the end or on one that is not an
// object (err).
func (a *objectArray) next() bool {
	if a.err != nil || !a.elements.Next() {
		return false
	}
	a.value = a.elements.Value()
	a.at = docPath{parent: a.parent, name: a.key, index: a.count, elem: a.value, nameAt: a.nameAt}
	a.count++
	if !a.value.IsObject() {
		a.err = a.at.fail("must be an object, got " + describeJSON(a.value))
		return false
	}
	return true
}

// emptyUnlessNull is what decoders make of an array that held no elements:
// nil for null, an empty slice for [].
func emptyUnlessNull[T any](v JSONValue, s []T) []T {
	if s == nil && v.IsArray() {
		return []T{}
	}
	return s
}

// parseString accepts a string or null (the empty string, as decoders leave it).
func parseString(v JSONValue, at *docPath, key string) (string, error) {
	switch {
	case v.IsString():
		return unquoteJSON(v.raw), nil
	case v.IsNull():
		return "", nil
	}
	return "", at.fail(strconv.Quote(key) + " must be a string, got " + describeJSON(v))
}

// parseStrings accepts an array of strings (an empty one stays non-nil) or null.
func parseStrings(v JSONValue, at *docPath, key string) ([]string, error) {
	switch {
	case v.IsNull():
		return nil, nil
	case !v.IsArray():
		return nil, at.fail(strconv.Quote(key) + " must be an array of strings, got " + describeJSON(v))
	}
	out := []string{}
	for elements := v.Members(); elements.Next(); {
		elem := elements.Value()
		if !elem.IsString() {
			return nil, at.fail(strconv.Quote(key) + " must be an array of strings")
		}
		out = append(out, unquoteJSON(elem.raw))
	}
	return out, nil
}

// parseStringMap accepts an object of string values or null.
func parseStringMap(v JSONValue, at *docPath, key string) (map[string]string, error) {
	switch {
	case v.IsNull():
		return nil, nil
	case !v.IsObject():
		return nil, at.fail(strconv.Quote(key) + " must be an object of strings, got " + describeJSON(v))
	}
	out := map[string]string{}
	for members := v.Members(); members.Next(); {
		name, elem := unquoteJSON(members.Key().raw), members.Value()
		if _, dup := out[name]; dup {
			return nil, at.fail(strconv.Quote(key) + ": " + strconv.Quote(name) + " appears more than once")
		}
		if !elem.IsString() {
			return nil, at.fail(strconv.Quote(key) + ": " + strconv.Quote(name) + " must be a string, got " + describeJSON(elem))
		}
		out[name] = unquoteJSON(elem.raw)
	}
	return out, nil
}

// docPath locates the value being parsed. The parser keeps it in its own
// frames on the way down and renders it only for an error message.
type docPath struct {
	parent *docPath
	// name is the name of this value in its parent object.
	name string
	// index is the element's position in the member's array, or -1.
	index int
	// elem and nameAt (see getPath) name an array element in messages.
	elem   JSONValue
	nameAt string
}

func (p *docPath) member(name string) docPath {
	return docPath{parent: p, name: name, index: -1}
}

func (p *docPath) fail(problem string) error {
	return &ParseError{Path: p.String(), Problem: problem}
}

// String renders the path as `items[3] (apps).versions[0] (v1).resources[2] (pods)`.
func (p *docPath) String() string {
	s := ""
	for q := p; q != nil; q = q.parent {
		segment := q.name
		if q.index >= 0 {
			segment += "[" + strconv.Itoa(q.index) + "]"
			if q.nameAt != "" {
				if name := q.elem.getPath(q.nameAt); name.IsString() && name.Str() != "" {
					segment += " (" + displayName(name.Str()) + ")"
				}
			}
		}
		if q != p {
			segment += "."
		}
		s = segment + s
	}
	return s
}

// displayName shows a name as is when that cannot be misread, quoted otherwise.
func displayName(name string) string {
	for i := 0; i < len(name); i++ {
		if c := name[i]; c <= ' ' || c >= 0x7f || c == '(' || c == ')' || c == '"' {
			return strconv.Quote(name)
		}
	}
	return name
}

// describeJSON shows a value found where another kind was expected, briefly.
func describeJSON(v JSONValue) string {
	switch {
	case v.IsObject():
		return "an object"
	case v.IsArray():
		return "an array"
	case v.IsString():
		return "a string"
	case v.IsNumber():
		return "a number"
	case v.IsBool():
		return "a boolean"
	}
	return "null"
}

// deeperThan reports whether raw nests arrays and objects more than limit
// levels deep, ignoring brackets inside strings.
func deeperThan(raw string, limit int) bool {
	depth := 0
	inString := false
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		switch {
		case inString && c == '\\':
			i++
		case c == '"':
			inString = !inString
		case inString:
		case c == '{' || c == '[':
			if depth++; depth > limit {
				return true
			}
		case c == '}' || c == ']':
			depth--
		}
	}
	return false
}

// The JSON reader below never recurses, whatever the nesting: Envoy's Wasm
// runtimes give a plugin a fixed stack (32 KiB in WAMR) that a reader
// descending one call per level exhausts, and a trap there kills the VM.

// JSONValue is one value of a document ParseJSON accepted, held as its text: a
// string with its quotes, an object or array with its brackets. The zero value
// is a missing value.
type JSONValue struct{ raw string }

// ParseJSON validates raw as one JSON value (RFC 8259, surrounded by optional
// whitespace) and returns it, read from a copy of raw.
func ParseJSON(raw []byte) (JSONValue, bool) {
	text := string(raw)
	if !validJSON(text) {
		return JSONValue{}, false
	}
	return topLevel(text), true
}

// topLevel is the value of a valid document without its surrounding whitespace.
func topLevel(text string) JSONValue {
	return JSONValue{strings.Trim(text, " \t\n\r")}
}

// Exists reports whether the value is present.
func (v JSONValue) Exists() bool { return v.raw != "" }

// Raw is the value's JSON text, "" when it is missing.
func (v JSONValue) Raw() string { return v.raw }

func (v JSONValue) first() byte {
	if v.raw == "" {
		return 0
	}
	return v.raw[0]
}

// IsObject, IsArray, IsString, IsNull, IsBool and IsNumber tell the value's
// kind; a missing value is none of them.
func (v JSONValue) IsObject() bool { return v.first() == '{' }
func (v JSONValue) IsArray() bool  { return v.first() == '[' }
func (v JSONValue) IsString() bool { return v.first() == '"' }
func (v JSONValue) IsNull() bool   { return v.first() == 'n' }
func (v JSONValue) IsBool() bool   { return v.first() == 't' || v.first() == 'f' }

func (v JSONValue) IsNumber() bool {
	c := v.first()
	return c == '-' || c >= '0' && c <= '9'
}

// Bool reports whether the value is true.
func (v JSONValue) Bool() bool { return v.first() == 't' }

// Str is a string's content with its escapes decoded and every other byte kept
// as it is, "" for any other value.
func (v JSONValue) Str() string {
	if !v.IsString() {
		return ""
	}
	return unquote(v.raw, false)
}

// Uint is a number written as a non-negative integer in its shortest decimal
// form (no sign, fraction, exponent or leading zero), if it fits.
func (v JSONValue) Uint() (uint64, bool) {
	n, err := strconv.ParseUint(v.raw, 10, 64)
	return n, err == nil && v.raw == strconv.FormatUint(n, 10)
}

// Int is a number written as an integer in its shortest decimal form, if it fits.
func (v JSONValue) Int() (int64, bool) {
	n, err := strconv.ParseInt(v.raw, 10, 64)
	return n, err == nil && v.raw == strconv.FormatInt(n, 10)
}

// Get is the first member of an object named name, missing if there is none.
func (v JSONValue) Get(name string) JSONValue {
	if !v.IsObject() {
		return JSONValue{}
	}
	for members := v.Members(); members.Next(); {
		if members.Key().is(name) {
			return members.Value()
		}
	}
	return JSONValue{}
}

// getPath reads a member, "name", or a member of a member, "outer.inner";
// of several members named outer the first object holding inner counts, as
// gjson's dotted paths did, which this reader replaced.
func (v JSONValue) getPath(path string) JSONValue {
	outer, inner, nested := strings.Cut(path, ".")
	if !nested {
		return v.Get(outer)
	}
	if !v.IsObject() {
		return JSONValue{}
	}
	for members := v.Members(); members.Next(); {
		if members.Key().is(outer) {
			if found := members.Value().Get(inner); found.Exists() {
				return found
			}
		}
	}
	return JSONValue{}
}

// is reports whether a member name (a string value) decodes to name.
func (v JSONValue) is(name string) bool {
	inner := v.raw[1 : len(v.raw)-1]
	if strings.IndexByte(inner, '\\') < 0 {
		return inner == name
	}
	return unquote(v.raw, false) == name
}

// Members walks an object's members or an array's elements, one per Next.
func (v JSONValue) Members() JSONMembers {
	if !v.IsObject() && !v.IsArray() {
		return JSONMembers{}
	}
	return JSONMembers{text: v.raw, next: 1, object: v.IsObject()}
}

// JSONMembers is a position in an object or array; see JSONValue.Members.
type JSONMembers struct {
	text       string
	next       int
	object     bool
	key, value JSONValue
}

// Next moves to the next member or element and reports whether there is one.
func (m *JSONMembers) Next() bool {
	i := skipSpace(m.text, m.next)
	if i < len(m.text) && m.text[i] == ',' {
		i = skipSpace(m.text, i+1)
	}
	if i >= len(m.text) || m.text[i] == '}' || m.text[i] == ']' {
		m.next = len(m.text)
		return false
	}
	if m.object {
		end := skipString(m.text, i)
		m.key = JSONValue{m.text[i:end]}
		i = skipSpace(m.text, skipSpace(m.text, end)+1) // past the colon
	}
	end := skipValue(m.text, i)
	m.value = JSONValue{m.text[i:end]}
	m.next = end
	return true
}

// Key is the current member's name as a string value; missing in an array.
func (m *JSONMembers) Key() JSONValue { return m.key }

// Value is the current member or element.
func (m *JSONMembers) Value() JSONValue { return m.value }

func skipSpace(s string, i int) int {
	for i < len(s) && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r') {
		i++
	}
	return i
}

// skipString returns the end of the valid string token starting at s[i].
func skipString(s string, i int) int {
	for i++; s[i] != '"'; i++ {
		if s[i] == '\\' {
			i++
		}
	}
	return i + 1
}

// skipValue returns the end of the valid value starting at s[i], counting
// brackets instead of descending into them.
func skipValue(s string, i int) int {
	switch s[i] {
	case '"':
		return skipString(s, i)
	case '{', '[':
		depth := 0
		for ; ; i++ {
			switch s[i] {
			case '"':
				i = skipString(s, i) - 1
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return i + 1
				}
			}
		}
	}
	for i < len(s) && strings.IndexByte(",}] \t\n\r", s[i]) < 0 {
		i++
	}
	return i
}

// validJSON reports whether s is one JSON value (RFC 8259) with optional
// whitespace around it. It keeps the open arrays and objects on a stack of its
// own instead of descending into them.
func validJSON(s string) bool {
	var open []byte // '{' or '[' per open container
	i := skipSpace(s, 0)
value:
	for {
		if i >= len(s) {
			return false
		}
		switch c := s[i]; {
		case c == '{' || c == '[':
			i = skipSpace(s, i+1)
			if i < len(s) && s[i] == c+2 { // '}' and ']' follow '{' and '[' two apart
				i++
				break
			}
			open = append(open, c)
			if c == '{' {
				var ok bool
				if i, ok = validKey(s, i); !ok {
					return false
				}
			}
			continue value
		case c == '"':
			var ok bool
			if i, ok = validString(s, i); !ok {
				return false
			}
		case c == '-' || c >= '0' && c <= '9':
			var ok bool
			if i, ok = validNumber(s, i); !ok {
				return false
			}
		case strings.HasPrefix(s[i:], "true"), strings.HasPrefix(s[i:], "null"):
			i += 4
		case strings.HasPrefix(s[i:], "false"):
			i += 5
		default:
			return false
		}
		// After a value: close what it ends, or go on after a comma.
		for {
			i = skipSpace(s, i)
			if len(open) == 0 {
				return i == len(s)
			}
			if i >= len(s) {
				return false
			}
			top := open[len(open)-1]
			switch s[i] {
			case top + 2:
				open = open[:len(open)-1]
				i++
			case ',':
				i = skipSpace(s, i+1)
				if top == '{' {
					var ok bool
					if i, ok = validKey(s, i); !ok {
						return false
					}
				}
				continue value
			default:
				return false
			}
		}
	}
}

// validKey checks a member name and its colon at s[i] and returns where the
// member's value starts.
func validKey(s string, i int) (int, bool) {
	if i >= len(s) || s[i] != '"' {
		return i, false
	}
	i, ok := validString(s, i)
	if !ok {
		return i, false
	}
	if i = skipSpace(s, i); i >= len(s) || s[i] != ':' {
		return i, false
	}
	return skipSpace(s, i+1), true
}

// validString checks the string token starting at s[i] and returns its end.
// Like encoding/json it accepts any byte but control characters, valid UTF-8
// or not.
func validString(s string, i int) (int, bool) {
	for i++; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"':
			return i + 1, true
		case c < ' ':
			return i, false
		case c == '\\':
			if i++; i >= len(s) {
				return i, false
			}
			switch s[i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if i+4 >= len(s) {
					return i, false
				}
				for _, h := range []byte(s[i+1 : i+5]) {
					if !isHex(h) {
						return i, false
					}
				}
				i += 4
			default:
				return i, false
			}
		}
	}
	return i, false
}

// validNumber checks the number token starting at s[i] and returns its end.
func validNumber(s string, i int) (int, bool) {
	digits := func(i int) int {
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
		}
		return i
	}
	if s[i] == '-' {
		i++
	}
	switch {
	case i < len(s) && s[i] == '0':
		i++
	case i < len(s) && s[i] >= '1' && s[i] <= '9':
		i = digits(i)
	default:
		return i, false
	}
	if i < len(s) && s[i] == '.' {
		start := i + 1
		if i = digits(start); i == start {
			return i, false
		}
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		start := i
		if i = digits(start); i == start {
			return i, false
		}
	}
	return i, true
}

// unquoteJSON decodes a valid JSON string token exactly as encoding/json does:
// invalid UTF-8 bytes and unpaired surrogate escapes become U+FFFD. Tokens
// without escapes or invalid bytes are returned as substrings, without copying.
func unquoteJSON(token string) string { return unquote(token, true) }

// unquote decodes a valid string token; fixUTF8 replaces invalid UTF-8 bytes
// with U+FFFD as encoding/json does, otherwise they are kept. Unpaired
// surrogate escapes become U+FFFD either way.
func unquote(token string, fixUTF8 bool) string {
	s := token[1 : len(token)-1]
	if strings.IndexByte(s, '\\') < 0 && (!fixUTF8 || utf8.ValidString(s)) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); {
		c := s[i]
		if c != '\\' {
			if !fixUTF8 {
				b.WriteByte(c)
				i++
				continue
			}
			r, size := utf8.DecodeRuneInString(s[i:])
			b.WriteRune(r) // RuneError for an invalid byte, as encoding/json does
			i += size
			continue
		}
		switch e := s[i+1]; e {
		case 'u':
			r := hex4(s[i+2 : i+6])
			i += 6
			if utf16.IsSurrogate(r) {
				if i+6 <= len(s) && s[i] == '\\' && s[i+1] == 'u' {
					if pair := utf16.DecodeRune(r, hex4(s[i+2:i+6])); pair != utf8.RuneError {
						b.WriteRune(pair)
						i += 6
						continue
					}
				}
				r = utf8.RuneError
			}
			b.WriteRune(r)
			continue
		case 'b':
			b.WriteByte('\b')
		case 'f':
			b.WriteByte('\f')
		case 'n':
			b.WriteByte('\n')
		case 'r':
			b.WriteByte('\r')
		case 't':
			b.WriteByte('\t')
		default: // '"', '\\' and '/' stand for themselves
			b.WriteByte(e)
		}
		i += 2
	}
	return b.String()
}

// hex4 decodes four hex digits; the token was validated, so they are digits.
func hex4(s string) rune {
	var r rune
	for i := 0; i < 4; i++ {
		c := s[i]
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c = c - 'a' + 10
		default:
			c = c - 'A' + 10
		}
		r = r<<4 | rune(c)
	}
	return r
}

// AppendJSON appends the list encoded exactly as encoding/json encodes
// upstream's APIGroupDiscoveryList with the same content: struct field order,
// omitempty, null for nil verbs and items, "metadata":{} at list level, HTML
// escaping. Without type meta it is the document upstream hashes into the
// ETag; with it, the object an API server's JSON serializer writes (see
// ResponseBody).
func (l GroupList) AppendJSON(dst []byte, withTypeMeta bool) []byte {
	return l.appendJSON(dst, withTypeMeta, nil)
}

// appendJSON is AppendJSON that, if drain is set, passes dst to it after every
// item and continues with what it returns, so a consumer can take the encoding
// piecewise.
func (l GroupList) appendJSON(dst []byte, withTypeMeta bool, drain func([]byte) []byte) []byte {
	dst = append(dst, '{')
	if withTypeMeta {
		dst = append(dst, `"kind":"APIGroupDiscoveryList","apiVersion":"apidiscovery.k8s.io/v2",`...)
	}
	dst = append(dst, `"metadata":{},"items":`...)
	if l.Items == nil {
		dst = append(dst, "null"...)
	} else {
		dst = append(dst, '[')
		for i := range l.Items {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = appendGroup(dst, &l.Items[i])
			if drain != nil {
				dst = drain(dst)
			}
		}
		dst = append(dst, ']')
	}
	return append(dst, '}')
}

// ResponseBody is the body kube-apiserver writes for the list with the
// aggregated JSON media type: the object with its kind and apiVersion followed
// by a newline (json.Encoder and the streaming list encoder both end with one).
func ResponseBody(l GroupList) []byte {
	return append(l.AppendJSON(nil, true), '\n')
}

func appendGroup(dst []byte, g *Group) []byte {
	dst = append(dst, '{')
	if g.Type.Kind != "" {
		dst = append(dst, `"kind":`...)
		dst = appendJSONString(dst, g.Type.Kind)
		dst = append(dst, ',')
	}
	if g.Type.APIVersion != "" {
		dst = append(dst, `"apiVersion":`...)
		dst = appendJSONString(dst, g.Type.APIVersion)
		dst = append(dst, ',')
	}
	// ObjectMeta is a struct, which omitempty never omits.
	dst = append(dst, `"metadata":`...)
	dst = appendObjectMeta(dst, &g.Meta)
	if len(g.Versions) > 0 {
		dst = append(dst, `,"versions":[`...)
		for i := range g.Versions {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = appendVersion(dst, &g.Versions[i])
		}
		dst = append(dst, ']')
	}
	return append(dst, '}')
}

func appendObjectMeta(dst []byte, m *ObjectMeta) []byte {
	dst = append(dst, '{')
	first := true
	sep := func() {
		if !first {
			dst = append(dst, ',')
		}
		first = false
	}
	if m.Name != "" {
		sep()
		dst = append(dst, `"name":`...)
		dst = appendJSONString(dst, m.Name)
	}
	if len(m.Labels) > 0 {
		sep()
		dst = append(dst, `"labels":`...)
		dst = appendStringMap(dst, m.Labels)
	}
	if len(m.Annotations) > 0 {
		sep()
		dst = append(dst, `"annotations":`...)
		dst = appendStringMap(dst, m.Annotations)
	}
	return append(dst, '}')
}

// appendStringMap writes keys in byte order, as encoding/json sorts them.
func appendStringMap(dst []byte, m map[string]string) []byte {
	dst = append(dst, '{')
	for i, k := range slices.Sorted(maps.Keys(m)) {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendJSONString(dst, k)
		dst = append(dst, ':')
		dst = appendJSONString(dst, m[k])
	}
	return append(dst, '}')
}

func appendVersion(dst []byte, v *Version) []byte {
	dst = append(dst, `{"version":`...)
	dst = appendJSONString(dst, v.Version)
	if len(v.Resources) > 0 {
		dst = append(dst, `,"resources":[`...)
		for i := range v.Resources {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = appendResource(dst, &v.Resources[i])
		}
		dst = append(dst, ']')
	}
	if v.Freshness != "" {
		dst = append(dst, `,"freshness":`...)
		dst = appendJSONString(dst, v.Freshness)
	}
	return append(dst, '}')
}

func appendResource(dst []byte, r *Resource) []byte {
	dst = append(dst, `{"resource":`...)
	dst = appendJSONString(dst, r.Resource)
	if r.ResponseKind != nil {
		dst = append(dst, `,"responseKind":`...)
		dst = appendGVK(dst, r.ResponseKind)
	}
	dst = append(dst, `,"scope":`...)
	dst = appendJSONString(dst, r.Scope)
	dst = append(dst, `,"singularResource":`...)
	dst = appendJSONString(dst, r.SingularResource)
	dst = append(dst, `,"verbs":`...)
	dst = appendStrings(dst, r.Verbs)
	if len(r.ShortNames) > 0 {
		dst = append(dst, `,"shortNames":`...)
		dst = appendStrings(dst, r.ShortNames)
	}
	if len(r.Categories) > 0 {
		dst = append(dst, `,"categories":`...)
		dst = appendStrings(dst, r.Categories)
	}
	if len(r.Subresources) > 0 {
		dst = append(dst, `,"subresources":[`...)
		for i := range r.Subresources {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = appendSubresource(dst, &r.Subresources[i])
		}
		dst = append(dst, ']')
	}
	return append(dst, '}')
}

func appendSubresource(dst []byte, s *Subresource) []byte {
	dst = append(dst, `{"subresource":`...)
	dst = appendJSONString(dst, s.Subresource)
	if s.ResponseKind != nil {
		dst = append(dst, `,"responseKind":`...)
		dst = appendGVK(dst, s.ResponseKind)
	}
	if len(s.AcceptedTypes) > 0 {
		dst = append(dst, `,"acceptedTypes":[`...)
		for i := range s.AcceptedTypes {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = appendGVK(dst, &s.AcceptedTypes[i])
		}
		dst = append(dst, ']')
	}
	dst = append(dst, `,"verbs":`...)
	dst = appendStrings(dst, s.Verbs)
	return append(dst, '}')
}

func appendGVK(dst []byte, gvk *GVK) []byte {
	dst = append(dst, `{"group":`...)
	dst = appendJSONString(dst, gvk.Group)
	dst = append(dst, `,"version":`...)
	dst = appendJSONString(dst, gvk.Version)
	dst = append(dst, `,"kind":`...)
	dst = appendJSONString(dst, gvk.Kind)
	return append(dst, '}')
}

// appendStrings writes nil as null and an empty slice as [].
func appendStrings(dst []byte, ss []string) []byte {
	if ss == nil {
		return append(dst, "null"...)
	}
	dst = append(dst, '[')
	for i, s := range ss {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendJSONString(dst, s)
	}
	return append(dst, ']')
}

const lowerHex = "0123456789abcdef"

// appendJSONString quotes s as encoding/json does with HTML escaping on:
// <, > and & as \u003c, \u003e, \u0026; control characters as \b \f \n \r \t
// or \u00XX; U+2028 and U+2029 escaped; each invalid UTF-8 byte as \ufffd.
func appendJSONString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= ' ' && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', lowerHex[c>>4], lowerHex[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', lowerHex[r&0xF])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}
