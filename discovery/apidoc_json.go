package discovery

import (
	"maps"
	"slices"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/tidwall/gjson"
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

// maxJSONNesting is encoding/json's own limit; it also bounds the recursion of
// gjson's validator, which would otherwise follow any nesting depth.
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
	if deeperThan(raw, maxJSONNesting) {
		return GroupList{}, &ParseError{Problem: "nested deeper than " + strconv.Itoa(maxJSONNesting) + " levels"}
	}
	if !gjson.ValidBytes(raw) {
		return GroupList{}, &ParseError{Problem: "not valid JSON"}
	}
	// One copy of the document: every name parsed below is a substring of it.
	doc := gjson.Parse(string(raw))
	if !doc.IsObject() {
		return GroupList{}, &ParseError{Problem: "must be a JSON object, got " + describeJSON(doc)}
	}
	var list GroupList
	err := eachMember(doc, nil, listMembers, func(member int, v gjson.Result) (err error) {
		list.Items, err = parseObjects(v, nil, "items", "metadata.name", parseGroup)
		return err
	})
	if err != nil {
		return GroupList{}, err
	}
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

func parseGroup(obj gjson.Result, at *docPath) (g Group, err error) {
	err = eachMember(obj, at, groupMembers, func(member int, v gjson.Result) (err error) {
		switch member {
		case groupKind:
			g.Type.Kind, err = parseString(v, at, "kind")
		case groupAPIVersion:
			g.Type.APIVersion, err = parseString(v, at, "apiVersion")
		case groupMetadata:
			g.Meta, err = parseObjectMeta(v, at)
		case groupVersions:
			g.Versions, err = parseObjects(v, at, "versions", "version", parseVersion)
		}
		return err
	})
	return g, err
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

func parseObjectMeta(v gjson.Result, parent *docPath) (meta ObjectMeta, err error) {
	if v.Type == gjson.Null {
		return meta, nil
	}
	if !v.IsObject() {
		return meta, parent.fail(strconv.Quote("metadata") + " must be an object, got " + describeJSON(v))
	}
	at := parent.member("metadata")
	err = eachMember(v, at, objectMetaMembers, func(member int, v gjson.Result) (err error) {
		key := objectMetaMembers[member]
		switch {
		case member == metaName:
			meta.Name, err = parseString(v, at, key)
		case member == metaLabels:
			meta.Labels, err = parseStringMap(v, at, key)
		case member == metaAnnotations:
			meta.Annotations, err = parseStringMap(v, at, key)
		case member == metaCreationTimestamp:
			// Servers built before creationTimestamp was tagged omitzero write
			// "creationTimestamp":null; it decodes to the zero time, which
			// today's upstream leaves out.
			if v.Type != gjson.Null {
				err = at.fail(strconv.Quote(key) + " is not supported in discovery metadata (only null)")
			}
		case v.Type == gjson.Null, v.Type == gjson.String && v.Raw == `""`:
		default:
			err = at.fail(strconv.Quote(key) + " is not supported in discovery metadata")
		}
		return err
	})
	return meta, err
}

const (
	versionName = iota
	versionResources
	versionFreshness
)

var versionMembers = []string{"version", "resources", "freshness"}

func parseVersion(obj gjson.Result, at *docPath) (ver Version, err error) {
	err = eachMember(obj, at, versionMembers, func(member int, v gjson.Result) (err error) {
		switch member {
		case versionName:
			ver.Version, err = parseString(v, at, "version")
		case versionResources:
			ver.Resources, err = parseObjects(v, at, "resources", "resource", parseResource)
		case versionFreshness:
			ver.Freshness, err = parseString(v, at, "freshness")
		}
		return err
	})
	if err == nil && ver.Version == "" {
		err = at.fail(strconv.Quote("version") + " is required")
	}
	return ver, err
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

func parseResource(obj gjson.Result, at *docPath) (r Resource, err error) {
	err = eachMember(obj, at, resourceMembers, func(member int, v gjson.Result) (err error) {
		key := resourceMembers[member]
		switch member {
		case resourceName:
			r.Resource, err = parseString(v, at, key)
		case resourceResponseKind:
			r.ResponseKind, err = parseGVKPointer(v, at, key)
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
			r.Subresources, err = parseObjects(v, at, key, "subresource", parseSubresource)
		}
		return err
	})
	if err == nil && r.Resource == "" {
		err = at.fail(strconv.Quote("resource") + " is required")
	}
	return r, err
}

const (
	subresourceName = iota
	subresourceResponseKind
	subresourceAcceptedTypes
	subresourceVerbs
)

var subresourceMembers = []string{"subresource", "responseKind", "acceptedTypes", "verbs"}

func parseSubresource(obj gjson.Result, at *docPath) (s Subresource, err error) {
	err = eachMember(obj, at, subresourceMembers, func(member int, v gjson.Result) (err error) {
		key := subresourceMembers[member]
		switch member {
		case subresourceName:
			s.Subresource, err = parseString(v, at, key)
		case subresourceResponseKind:
			s.ResponseKind, err = parseGVKPointer(v, at, key)
		case subresourceAcceptedTypes:
			s.AcceptedTypes, err = parseObjects(v, at, key, "", parseGVK)
		case subresourceVerbs:
			s.Verbs, err = parseStrings(v, at, key)
		}
		return err
	})
	if err == nil && s.Subresource == "" {
		err = at.fail(strconv.Quote("subresource") + " is required")
	}
	return s, err
}

const (
	gvkGroup = iota
	gvkVersion
	gvkKind
)

var gvkMembers = []string{"group", "version", "kind"}

func parseGVK(obj gjson.Result, at *docPath) (gvk GVK, err error) {
	err = eachMember(obj, at, gvkMembers, func(member int, v gjson.Result) (err error) {
		key := gvkMembers[member]
		switch member {
		case gvkGroup:
			gvk.Group, err = parseString(v, at, key)
		case gvkVersion:
			gvk.Version, err = parseString(v, at, key)
		case gvkKind:
			gvk.Kind, err = parseString(v, at, key)
		}
		return err
	})
	return gvk, err
}

func parseGVKPointer(v gjson.Result, parent *docPath, key string) (*GVK, error) {
	switch {
	case v.Type == gjson.Null:
		return nil, nil
	case !v.IsObject():
		return nil, parent.fail(strconv.Quote(key) + " must be an object, got " + describeJSON(v))
	}
	gvk, err := parseGVK(v, parent.member(key))
	if err != nil {
		return nil, err
	}
	return &gvk, nil
}

// eachMember calls fn for every member of obj named in known, with its index
// there; it rejects a known member given twice, which decoders would resolve
// silently by keeping the last one.
func eachMember(obj gjson.Result, at *docPath, known []string, fn func(member int, v gjson.Result) error) error {
	var seen uint64
	var err error
	obj.ForEach(func(k, v gjson.Result) bool {
		member := slices.Index(known, unquoteJSON(k.Raw))
		if member < 0 {
			return true
		}
		if seen&(1<<member) != 0 {
			err = at.fail(strconv.Quote(known[member]) + " appears more than once")
			return false
		}
		seen |= 1 << member
		err = fn(member, v)
		return err == nil
	})
	return err
}

// parseObjects parses an array of objects, each with parse; nameAt is the gjson
// path of an element's name, shown in error messages. null gives nil, [] an
// empty non-nil slice.
func parseObjects[T any](v gjson.Result, parent *docPath, key, nameAt string, parse func(gjson.Result, *docPath) (T, error)) ([]T, error) {
	switch {
	case v.Type == gjson.Null:
		return nil, nil
	case !v.IsArray():
		return nil, parent.fail(strconv.Quote(key) + " must be an array of objects, got " + describeJSON(v))
	}
	out := []T{}
	var err error
	v.ForEach(func(_, elem gjson.Result) bool {
		at := parent.element(key, len(out), elem, nameAt)
		if !elem.IsObject() {
			err = at.fail("must be an object, got " + describeJSON(elem))
			return false
		}
		var item T
		if item, err = parse(elem, at); err != nil {
			return false
		}
		out = append(out, item)
		return true
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// parseString accepts a string or null (the empty string, as decoders leave it).
func parseString(v gjson.Result, at *docPath, key string) (string, error) {
	switch v.Type {
	case gjson.String:
		return unquoteJSON(v.Raw), nil
	case gjson.Null:
		return "", nil
	}
	return "", at.fail(strconv.Quote(key) + " must be a string, got " + describeJSON(v))
}

// parseStrings accepts an array of strings (an empty one stays non-nil) or null.
func parseStrings(v gjson.Result, at *docPath, key string) ([]string, error) {
	switch {
	case v.Type == gjson.Null:
		return nil, nil
	case !v.IsArray():
		return nil, at.fail(strconv.Quote(key) + " must be an array of strings, got " + describeJSON(v))
	}
	out := []string{}
	ok := true
	v.ForEach(func(_, elem gjson.Result) bool {
		if ok = elem.Type == gjson.String; ok {
			out = append(out, unquoteJSON(elem.Raw))
		}
		return ok
	})
	if !ok {
		return nil, at.fail(strconv.Quote(key) + " must be an array of strings")
	}
	return out, nil
}

// parseStringMap accepts an object of string values or null.
func parseStringMap(v gjson.Result, at *docPath, key string) (map[string]string, error) {
	switch {
	case v.Type == gjson.Null:
		return nil, nil
	case !v.IsObject():
		return nil, at.fail(strconv.Quote(key) + " must be an object of strings, got " + describeJSON(v))
	}
	out := map[string]string{}
	var err error
	v.ForEach(func(k, elem gjson.Result) bool {
		name := unquoteJSON(k.Raw)
		if _, dup := out[name]; dup {
			err = at.fail(strconv.Quote(key) + ": " + strconv.Quote(name) + " appears more than once")
		} else if elem.Type != gjson.String {
			err = at.fail(strconv.Quote(key) + ": " + strconv.Quote(name) + " must be a string, got " + describeJSON(elem))
		} else {
			out[name] = unquoteJSON(elem.Raw)
		}
		return err == nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// docPath locates the value being parsed. The parser builds it on the way down
// and renders it only for an error message.
type docPath struct {
	parent *docPath
	// name is the name of this value in its parent object.
	name string
	// index is the element's position in the member's array, or -1.
	index int
	// elem and nameAt (a gjson path) name an array element in messages.
	elem   gjson.Result
	nameAt string
}

func (p *docPath) member(name string) *docPath {
	return &docPath{parent: p, name: name, index: -1}
}

func (p *docPath) element(name string, index int, elem gjson.Result, nameAt string) *docPath {
	return &docPath{parent: p, name: name, index: index, elem: elem, nameAt: nameAt}
}

func (p *docPath) fail(problem string) error {
	return &ParseError{Path: p.String(), Problem: problem}
}

// String renders the path as `items[3] (apps).versions[0] (v1).resources[2] (pods)`.
func (p *docPath) String() string {
	if p == nil {
		return ""
	}
	prefix := p.parent.String()
	if prefix != "" {
		prefix += "."
	}
	s := prefix + p.name
	if p.index < 0 {
		return s
	}
	s += "[" + strconv.Itoa(p.index) + "]"
	if p.nameAt != "" {
		if name := p.elem.Get(p.nameAt); name.Type == gjson.String && name.Str != "" {
			s += " (" + displayName(name.Str) + ")"
		}
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
func describeJSON(v gjson.Result) string {
	switch {
	case v.IsObject():
		return "an object"
	case v.IsArray():
		return "an array"
	case v.Type == gjson.String:
		return "a string"
	case v.Type == gjson.Number:
		return "a number"
	case v.Type == gjson.True, v.Type == gjson.False:
		return "a boolean"
	}
	return "null"
}

// deeperThan reports whether raw nests arrays and objects more than limit
// levels deep, ignoring brackets inside strings.
func deeperThan(raw []byte, limit int) bool {
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

// unquoteJSON decodes a valid JSON string token exactly as encoding/json does:
// invalid UTF-8 bytes and unpaired surrogate escapes become U+FFFD. Tokens
// without escapes or invalid bytes are returned as substrings, without copying.
func unquoteJSON(token string) string {
	s := token[1 : len(token)-1]
	if strings.IndexByte(s, '\\') < 0 && utf8.ValidString(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); {
		c := s[i]
		if c != '\\' {
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
