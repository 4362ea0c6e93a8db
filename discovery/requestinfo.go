package discovery

import (
	"fmt"
	"strconv"
	"strings"
)

// RequestInfo is what a Kubernetes API server's RequestInfoFactory (configured as
// kube-apiserver configures it: API prefixes "api" and "apis", "api" groupless)
// derives from a request. Fields mean exactly what they mean upstream.
//
// Every string is a substring of the parsed path or query, except Verb (a
// constant or the lowercased method) and query values that carried escapes.
type RequestInfo struct {
	// IsResourceRequest is true for /api/{version}/... and /apis/{group}/{version}/...
	// paths that name at least a resource.
	IsResourceRequest bool
	// Path is the decoded URL path as given.
	Path string
	// Verb is the Kubernetes verb (get, list, watch, create, update, patch, delete,
	// deletecollection, proxy or "") for resource requests, and the lowercased HTTP
	// method otherwise.
	Verb string

	APIPrefix  string
	APIGroup   string
	APIVersion string
	Namespace  string
	// Resource is the resource's plural name, e.g. "pods".
	Resource string
	// Subresource is e.g. "status" or "exec"; never set for the proxy verb.
	Subresource string
	// Name is the object's name from the path, or from an exact
	// metadata.name field selector on list and watch requests.
	Name string

	// FieldSelector and LabelSelector are the first raw query values, captured
	// only for list, watch and deletecollection requests whose verb did not come
	// from a /watch/ or /proxy/ path prefix.
	FieldSelector string
	LabelSelector string

	// partsPath is the slash-separated tail of the path that upstream exposes as
	// Parts, kept as one substring so that parsing does not allocate.
	partsPath string
}

// maxQueryParams is net/url's default limit on query parameters: beyond it
// url.ParseQuery yields no values at all, so the API server sees an empty query.
const maxQueryParams = 10000

// ParseRequestInfo classifies a request as the API server's RequestInfoFactory
// does. path is the decoded URL path (url.URL.Path), rawQuery the undecoded
// query string. The error case is the verb-only path such as /api/v1/watch,
// which the API server answers with 500; the returned RequestInfo then holds
// what was known before the failure, as upstream's does. The error text names
// the request URL re-encoded from path and rawQuery.
//
// Typical requests are parsed without allocating; query values are unescaped
// into new strings only when they contain escapes.
func ParseRequestInfo(method, path, rawQuery string) (RequestInfo, error) {
	info, ok := parsePath(method, path)
	if !ok {
		return info, fmt.Errorf("unable to determine kind and namespace from url, %s", requestURL(path, rawQuery))
	}
	// Only a nameless get or delete consults the query: it becomes list, watch or
	// deletecollection, and those verbs carry the raw selectors. Path-prefix verbs
	// never reach here, so upstream's "not via path prefix" condition holds.
	if !info.IsResourceRequest || info.Name != "" || (info.Verb != "get" && info.Verb != "delete") {
		return info, nil
	}
	params := scanListParams(rawQuery)
	fieldSelector := params.fieldSelector.decoded()
	labelSelector := params.labelSelector.decoded()
	if info.Verb == "delete" {
		info.Verb = "deletecollection"
	} else {
		watch, name, pinned := decodeListOptions(&params, fieldSelector, labelSelector)
		info.Verb = "list"
		if watch {
			info.Verb = "watch"
		}
		if pinned && isPathSegmentName(name) {
			info.Name = name
		}
	}
	info.FieldSelector = fieldSelector
	info.LabelSelector = labelSelector
	return info, nil
}

// requestURL is the request URL as upstream's error prints it: net/url's
// URL.String of a URL holding only path and rawQuery. Written out because
// importing net/url costs the plugin 100 KB of package initialisation.
func requestURL(path, rawQuery string) string {
	var b strings.Builder
	if path == "*" {
		b.WriteByte('*')
	} else {
		// A colon in the first segment would read as a scheme (RFC 3986 §4.2).
		if segment, _, _ := strings.Cut(path, "/"); strings.IndexByte(segment, ':') >= 0 {
			b.WriteString("./")
		}
		for i := 0; i < len(path); i++ {
			if c := path[i]; pathSafe(c) {
				b.WriteByte(c)
			} else {
				b.WriteByte('%')
				b.WriteByte(upperHex[c>>4])
				b.WriteByte(upperHex[c&0xF])
			}
		}
	}
	if rawQuery != "" {
		b.WriteByte('?')
		b.WriteString(rawQuery)
	}
	return b.String()
}

// pathSafe reports the bytes net/url leaves unescaped in a path.
func pathSafe(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("$&+,-./:;=@_~", c) >= 0
}

// parsePath is the part of ParseRequestInfo that reads only the path: which
// resource a request addresses, and the verb as far as the method and a
// /watch/ or /proxy/ prefix tell it. The query never changes the resource, so
// routing needs no more than this, and the plugin links none of the query and
// selector decoding. ok is false for upstream's error case, a verb-only path
// such as /api/v1/watch.
func parsePath(method, path string) (info RequestInfo, ok bool) {
	info.Path = path

	segments := splitPathSegments(path)
	if segments.count < 3 {
		info.Verb = lowercaseMethod(method)
		return info, true
	}
	prefix := segments.at(0)
	if prefix != "api" && prefix != "apis" {
		info.Verb = lowercaseMethod(method)
		return info, true
	}
	info.APIPrefix = prefix
	next := 1
	if prefix == "apis" {
		// A grouped prefix needs group, version and resource after it.
		if segments.count < 4 {
			info.Verb = lowercaseMethod(method)
			return info, true
		}
		info.APIGroup = segments.at(next)
		next++
	}
	info.IsResourceRequest = true
	info.APIVersion = segments.at(next)
	next++

	if word := segments.at(next); IsPathVerb(word) {
		if segments.count-next < 2 {
			info.Verb = lowercaseMethod(method)
			return info, false
		}
		info.Verb = word
		next++
	} else {
		info.Verb = verbForMethod(method)
	}

	if segments.at(next) == "namespaces" && segments.count-next > 1 {
		info.Namespace = segments.at(next + 1)
		// A known namespace subresource keeps "namespaces" as the resource;
		// anything else is a namespaced resource.
		if segments.count-next > 2 {
			if sub := segments.at(next + 2); sub != "status" && sub != "finalize" {
				next += 2
			}
		}
	}
	info.partsPath = segments.from(next)

	info.Resource = segments.at(next)
	if parts := segments.count - next; parts >= 2 {
		info.Name = segments.at(next + 1)
		if parts >= 3 && info.Verb != "proxy" {
			info.Subresource = segments.at(next + 2)
		}
	}
	return info, true
}

// indexedSegments is how many leading path segments ParseRequestInfo may
// inspect: /apis/{group}/{version}/watch/namespaces/{ns}/{resource}/{name}/{sub}.
const indexedSegments = 9

// pathSegments locates the segments of a path trimmed of surrounding slashes
// (empty segments inside are kept, as upstream's splitPath keeps them) in one
// pass, without allocating.
type pathSegments struct {
	trimmed string
	count   int
	// ends[i] is the offset in trimmed just past segment i.
	ends [indexedSegments]int
}

func splitPathSegments(path string) pathSegments {
	segments := pathSegments{trimmed: strings.Trim(path, "/")}
	if segments.trimmed == "" {
		return segments
	}
	for i := 0; i < len(segments.trimmed); i++ {
		if segments.trimmed[i] == '/' {
			if segments.count < indexedSegments {
				segments.ends[segments.count] = i
			}
			segments.count++
		}
	}
	if segments.count < indexedSegments {
		segments.ends[segments.count] = len(segments.trimmed)
	}
	segments.count++
	return segments
}

func (s *pathSegments) start(i int) int {
	if i == 0 {
		return 0
	}
	return s.ends[i-1] + 1
}

// at returns segment i; i must be below both count and indexedSegments.
func (s *pathSegments) at(i int) string {
	return s.trimmed[s.start(i):s.ends[i]]
}

// from returns segments i onwards, slash-joined as in the path.
func (s *pathSegments) from(i int) string {
	return s.trimmed[s.start(i):]
}

// lowercaseMethod is strings.ToLower without allocating for common methods.
func lowercaseMethod(method string) string {
	switch method {
	case "GET":
		return "get"
	case "HEAD":
		return "head"
	case "POST":
		return "post"
	case "PUT":
		return "put"
	case "PATCH":
		return "patch"
	case "DELETE":
		return "delete"
	case "OPTIONS":
		return "options"
	}
	return strings.ToLower(method)
}

// verbForMethod maps an HTTP method to the verb of a resource request; the
// comparison is case-sensitive, as upstream's.
func verbForMethod(method string) string {
	switch method {
	case "POST":
		return "create"
	case "GET", "HEAD":
		return "get"
	case "PUT":
		return "update"
	case "PATCH":
		return "patch"
	case "DELETE":
		return "delete"
	}
	return ""
}

// queryParam is the first value url.ParseQuery would keep for one key.
type queryParam struct {
	raw     string
	present bool
}

// decoded returns the query-unescaped value; it allocates only when the raw
// value contains an escape or '+'.
func (p queryParam) decoded() string {
	if !containsEither(p.raw, '%', '+') {
		return p.raw
	}
	// The raw value was validated when scanned, so unescaping cannot fail.
	value, _ := queryUnescape(p.raw)
	return value
}

// listParams holds the query parameters that decide whether upstream's
// ListOptions decoding succeeds, whether it yields a watch, and the selectors.
type listParams struct {
	watch, limit, timeoutSeconds, fieldSelector, labelSelector queryParam
}

// scanListParams finds the first value of each relevant key exactly as
// url.ParseQuery would: pairs containing ';' or a malformed escape in the key
// or value are dropped, and an over-long query yields nothing.
func scanListParams(rawQuery string) listParams {
	var params listParams
	separators := 0
	for rest := rawQuery; rest != ""; {
		pair, tail, separated := cutQueryPair(rest)
		rest = tail
		if separated {
			separators++
		}
		if !pair.usable {
			continue
		}
		if slot := params.slot(pair.key, pair.keyEscaped); slot != nil && !slot.present {
			*slot = queryParam{raw: pair.value, present: true}
		}
	}
	if separators >= maxQueryParams {
		return listParams{}
	}
	return params
}

// queryPair is one '&'-separated element of a raw query.
type queryPair struct {
	key, value string
	// usable is false when url.ParseQuery drops the pair: it contains ';' or
	// a '%' not followed by two hex digits.
	usable bool
	// keyEscaped is true when the key needs unescaping before comparison.
	keyEscaped bool
}

// cutQueryPair splits the first pair off rawQuery in one pass. Checking an
// escape's hex digits against the whole query is equivalent to checking them
// within the key or value, because neither '=' nor '&' is a hex digit.
func cutQueryPair(rawQuery string) (pair queryPair, rest string, separated bool) {
	equals := -1
	pair.usable = true
	end := 0
	for ; end < len(rawQuery) && rawQuery[end] != '&'; end++ {
		switch rawQuery[end] {
		case '=':
			if equals < 0 {
				equals = end
			}
		case ';':
			pair.usable = false
		case '%':
			if end+2 >= len(rawQuery) || !isHex(rawQuery[end+1]) || !isHex(rawQuery[end+2]) {
				pair.usable = false
			}
			pair.keyEscaped = pair.keyEscaped || equals < 0
		case '+':
			pair.keyEscaped = pair.keyEscaped || equals < 0
		}
	}
	if equals < 0 {
		pair.key = rawQuery[:end]
	} else {
		pair.key, pair.value = rawQuery[:equals], rawQuery[equals+1:end]
	}
	if end == len(rawQuery) {
		return pair, "", false
	}
	return pair, rawQuery[end+1:], true
}

// slot returns where the value of a validly escaped key belongs, or nil.
func (p *listParams) slot(key string, escaped bool) *queryParam {
	if escaped {
		for _, slot := range [...]struct {
			name  string
			param *queryParam
		}{
			{WatchParameter, &p.watch},
			{"limit", &p.limit},
			{"timeoutSeconds", &p.timeoutSeconds},
			{"fieldSelector", &p.fieldSelector},
			{"labelSelector", &p.labelSelector},
		} {
			if escapedQueryKeyIs(key, slot.name) {
				return slot.param
			}
		}
		return nil
	}
	switch key {
	case WatchParameter:
		return &p.watch
	case "limit":
		return &p.limit
	case "timeoutSeconds":
		return &p.timeoutSeconds
	case "fieldSelector":
		return &p.fieldSelector
	case "labelSelector":
		return &p.labelSelector
	}
	return nil
}

// decodeListOptions reproduces what upstream takes from the ListOptions its
// parameter codec decodes: the watch flag and an exact metadata.name field
// requirement. Decoding fails when limit or timeoutSeconds is not an integer or
// a selector does not parse (no other field can fail); upstream then drops the
// field selector and reads watch with a different boolean rule.
func decodeListOptions(p *listParams, fieldSelector, labelSelector string) (watch bool, name string, pinned bool) {
	name, pinned, fieldSelectorValid := parseFieldSelector(fieldSelector)
	decoded := fieldSelectorValid &&
		(!p.limit.present || isInt64(p.limit.decoded())) &&
		(!p.timeoutSeconds.present || isInt64(p.timeoutSeconds.decoded())) &&
		validLabelSelector(labelSelector)
	if !decoded {
		return p.watch.present && !fallbackFalse(p.watch.decoded()), "", false
	}
	return p.watch.present && codecBool(p.watch.decoded()), name, pinned
}

// codecBool is the parameter codec's string-to-bool conversion.
func codecBool(value string) bool {
	return value != "0" && !strings.EqualFold(value, "false")
}

// fallbackFalse is upstream's check after a failed decode, which lowercases the
// value instead of folding case, so "falſe" counts as true here but false in
// codecBool. Only ASCII letters lowercase onto "false".
func fallbackFalse(value string) bool {
	if value == "0" {
		return true
	}
	if len(value) != len("false") {
		return false
	}
	for i := 0; i < len(value); i++ {
		if value[i]|0x20 != "false"[i] {
			return false
		}
	}
	return true
}

func isInt64(value string) bool {
	_, err := strconv.ParseInt(value, 10, 64)
	return err == nil
}

// isPathSegmentName is upstream's content.IsPathSegmentName without messages.
func isPathSegmentName(name string) bool {
	return name != "." && name != ".." && !containsEither(name, '/', '%')
}

// containsEither is strings.ContainsAny for two bytes, without the set setup
// that dominates on the short strings parsed here.
func containsEither(s string, a, b byte) bool {
	for i := 0; i < len(s); i++ {
		if s[i] == a || s[i] == b {
			return true
		}
	}
	return false
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case c <= '9':
		return c - '0'
	case c <= 'F':
		return c - 'A' + 10
	}
	return c - 'a' + 10
}

// escapedQueryKeyIs compares a validly escaped query key with want after
// unescaping, without allocating.
func escapedQueryKeyIs(raw, want string) bool {
	j := 0
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		switch c {
		case '%':
			c = unhex(raw[i+1])<<4 | unhex(raw[i+2])
			i += 2
		case '+':
			c = ' '
		}
		if j >= len(want) || want[j] != c {
			return false
		}
		j++
	}
	return j == len(want)
}

// parseFieldSelector mirrors fields.ParseSelector: it reports whether the
// selector is valid and, if so, the value of the metadata.name "=" or "=="
// term that sorts first among the raw terms (upstream sorts terms and returns
// the first match).
func parseFieldSelector(selector string) (name string, pinned, valid bool) {
	var firstTerm, firstValue string
	for rest, more := (selectorText{s: selector}), selector != ""; more; {
		var term selectorText
		term, rest, more = cutFieldTerm(rest)
		if term.s == "" {
			continue
		}
		field, operator, value, ok := splitFieldTerm(term)
		if !ok || !validFieldValue(value) {
			return "", false, false
		}
		if operator != "!=" && field.s == "metadata.name" && (!pinned || term.s < firstTerm) {
			firstTerm, firstValue, pinned = term.s, value.s, true
		}
	}
	if !pinned {
		return "", false, true
	}
	return unescapeFieldValue(firstValue), true, true
}

// selectorText is a field selector as fields.ParseSelector reads it: the
// text itself, or, when inQuery, a raw query value whose escapes (%XX, '+'
// for a space) are decoded as they are read, so that the router reads the
// selector of a request without decoding it into a new string. Its offsets
// are into s; a raw query value's escapes were validated when it was
// scanned (scanListParams).
type selectorText struct {
	s       string
	inQuery bool
}

// at is the decoded byte at offset i and the offset of the next one.
func (t selectorText) at(i int) (byte, int) {
	if t.inQuery {
		switch t.s[i] {
		case '%':
			return unhex(t.s[i+1])<<4 | unhex(t.s[i+2]), i + 3
		case '+':
			return ' ', i + 1
		}
	}
	return t.s[i], i + 1
}

func (t selectorText) slice(from, to int) selectorText { return selectorText{t.s[from:to], t.inQuery} }

// is reports whether the decoded text is want.
func (t selectorText) is(want string) bool {
	j := 0
	for i := 0; i < len(t.s); j++ {
		var c byte
		c, i = t.at(i)
		if j >= len(want) || want[j] != c {
			return false
		}
	}
	return j == len(want)
}

// cutFieldTerm splits off the first term at a comma not escaped by a backslash.
func cutFieldTerm(t selectorText) (term, rest selectorText, more bool) {
	escaped := false
	for i := 0; i < len(t.s); {
		c, next := t.at(i)
		switch {
		case escaped:
			escaped = false
		case c == '\\':
			escaped = true
		case c == ',':
			return t.slice(0, i), t.slice(next, len(t.s)), true
		}
		i = next
	}
	return t, selectorText{inQuery: t.inQuery}, false
}

// splitFieldTerm splits at the first operator; "!=" and "==" win over "=" at
// the same position, and the field itself supports no escaping.
func splitFieldTerm(term selectorText) (field selectorText, operator string, value selectorText, ok bool) {
	for i := 0; i < len(term.s); {
		c, next := term.at(i)
		doubled, after := false, next
		if next < len(term.s) {
			var d byte
			d, after = term.at(next)
			doubled = d == '='
		}
		switch {
		case c == '!' && doubled:
			return term.slice(0, i), "!=", term.slice(after, len(term.s)), true
		case c == '=' && doubled:
			return term.slice(0, i), "==", term.slice(after, len(term.s)), true
		case c == '=':
			return term.slice(0, i), "=", term.slice(next, len(term.s)), true
		}
		i = next
	}
	return selectorText{}, "", selectorText{}, false
}

// validFieldValue reports whether fields.UnescapeValue accepts the value:
// ',' and '=' must be backslash-escaped and a backslash may only escape '\',
// ',' or '='.
func validFieldValue(v selectorText) bool {
	escaped := false
	for i := 0; i < len(v.s); {
		var c byte
		c, i = v.at(i)
		if escaped {
			if c != '\\' && c != ',' && c != '=' {
				return false
			}
			escaped = false
			continue
		}
		switch c {
		case '\\':
			escaped = true
		case ',', '=':
			return false
		}
	}
	return !escaped
}

// unescapeFieldValue is fields.UnescapeValue for a valid value. Like upstream,
// it rewrites the value rune by rune only when it contains an escape, turning
// invalid UTF-8 into U+FFFD in that case.
func unescapeFieldValue(s string) string {
	if strings.IndexByte(s, '\\') < 0 {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	escaped := false
	for _, r := range s {
		if r == '\\' && !escaped {
			escaped = true
			continue
		}
		escaped = false
		b.WriteRune(r)
	}
	return b.String()
}

// labelToken is a token of the label selector grammar.
type labelToken uint8

const (
	labelEnd labelToken = iota
	labelIdentifier
	labelIn
	labelNotIn
	labelComma
	labelOpenParen
	labelCloseParen
	labelNot
	labelEquals
	labelDoubleEquals
	labelNotEquals
	labelGreater
	labelLess
)

// labelLexer tokenizes a label selector byte by byte like labels.Lexer,
// including its quirks: a NUL byte ends an identifier or operator (and is
// consumed), and a NUL where a token would start ends the input.
type labelLexer struct {
	s   string
	pos int
	end bool
}

func isLabelSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\r' || c == '\n'
}

func isLabelSymbol(c byte) bool {
	switch c {
	case '=', '!', '(', ')', ',', '>', '<':
		return true
	}
	return false
}

func (l *labelLexer) next() (labelToken, string) {
	if l.end {
		return labelEnd, ""
	}
	for l.pos < len(l.s) && isLabelSpace(l.s[l.pos]) {
		l.pos++
	}
	if l.pos >= len(l.s) || l.s[l.pos] == 0 {
		l.end = true
		return labelEnd, ""
	}
	if isLabelSymbol(l.s[l.pos]) {
		return l.symbol()
	}
	start := l.pos
	for l.pos < len(l.s) {
		c := l.s[l.pos]
		if c == 0 {
			lit := l.s[start:l.pos]
			l.pos++
			return identifierToken(lit), lit
		}
		if isLabelSymbol(c) || isLabelSpace(c) {
			break
		}
		l.pos++
	}
	lit := l.s[start:l.pos]
	return identifierToken(lit), lit
}

func identifierToken(lit string) labelToken {
	switch lit {
	case "in":
		return labelIn
	case "notin":
		return labelNotIn
	}
	return labelIdentifier
}

// symbol scans an operator: every single symbol is a token, and "==" and "!="
// are the only longer ones.
func (l *labelLexer) symbol() (labelToken, string) {
	first := l.s[l.pos]
	l.pos++
	tok := singleSymbolToken(first)
	if l.pos < len(l.s) {
		switch second := l.s[l.pos]; {
		case second == 0:
			l.pos++
		case second == '=' && (first == '=' || first == '!'):
			l.pos++
			tok = labelDoubleEquals
			if first == '!' {
				tok = labelNotEquals
			}
			if l.pos < len(l.s) && l.s[l.pos] == 0 {
				l.pos++
			}
		}
	}
	return tok, ""
}

func singleSymbolToken(c byte) labelToken {
	switch c {
	case '=':
		return labelEquals
	case '!':
		return labelNot
	case '(':
		return labelOpenParen
	case ')':
		return labelCloseParen
	case ',':
		return labelComma
	case '>':
		return labelGreater
	}
	return labelLess
}

// labelParser validates a label selector with labels.Parser's grammar and one
// token of lookahead.
type labelParser struct {
	lex labelLexer
	tok labelToken
	lit string
}

// take consumes the lookahead token and returns it.
func (p *labelParser) take() (labelToken, string) {
	tok, lit := p.tok, p.lit
	p.tok, p.lit = p.lex.next()
	return tok, lit
}

// isValueToken reports whether tok reads as an identifier where values are
// expected, where "in" and "notin" are plain words.
func isValueToken(tok labelToken) bool {
	return tok == labelIdentifier || tok == labelIn || tok == labelNotIn
}

// validLabelSelector reports whether labels.Parse accepts selector.
func validLabelSelector(selector string) bool {
	if selector == "" {
		return true
	}
	p := labelParser{lex: labelLexer{s: selector}}
	p.take()
	for {
		switch {
		case p.tok == labelEnd:
			return true
		case isValueToken(p.tok) || p.tok == labelNot:
			if !p.requirement() {
				return false
			}
			switch tok, _ := p.take(); tok {
			case labelEnd:
				return true
			case labelComma:
				if !isValueToken(p.tok) && p.tok != labelNot {
					return false
				}
			default:
				return false
			}
		default:
			return false
		}
	}
}

func (p *labelParser) requirement() bool {
	tok, key := p.take()
	negated := tok == labelNot
	if negated {
		tok, key = p.take()
	}
	if !isValueToken(tok) || !validLabelKey(key) {
		return false
	}
	if negated || p.tok == labelEnd || p.tok == labelComma {
		// Exists or DoesNotExist; whatever follows is the caller's to reject.
		return true
	}
	switch operator, _ := p.take(); operator {
	case labelIn, labelNotIn:
		return p.valueSet()
	case labelEquals, labelDoubleEquals, labelNotEquals:
		value, ok := p.exactValue()
		return ok && validLabelValue(value)
	case labelGreater, labelLess:
		value, ok := p.exactValue()
		return ok && isInt64(value) && validLabelValue(value)
	}
	return false
}

func (p *labelParser) exactValue() (string, bool) {
	if p.tok == labelEnd || p.tok == labelComma {
		return "", true
	}
	tok, lit := p.take()
	return lit, isValueToken(tok)
}

// valueSet parses "(v1,v2,...)"; empty entries such as "()" or "(a,,b)" stand
// for the empty value, which is valid.
func (p *labelParser) valueSet() bool {
	if tok, _ := p.take(); tok != labelOpenParen {
		return false
	}
	switch {
	case p.tok == labelCloseParen:
		p.take()
		return true
	case !isValueToken(p.tok) && p.tok != labelComma:
		return false
	}
	for {
		tok, lit := p.take()
		switch {
		case isValueToken(tok):
			if !validLabelValue(lit) {
				return false
			}
			if p.tok == labelCloseParen {
				p.take()
				return true
			}
			if p.tok != labelComma {
				return false
			}
		case tok == labelComma:
			if p.tok == labelCloseParen {
				p.take()
				return true
			}
		default:
			return false
		}
	}
}

const labelNameMaxLength = 63

// validLabelKey is content.IsLabelKey: an optional DNS-1123 subdomain prefix
// and '/', then a name of at most 63 characters.
func validLabelKey(key string) bool {
	prefix, name, hasPrefix := strings.Cut(key, "/")
	if !hasPrefix {
		name = prefix
	} else if strings.IndexByte(name, '/') >= 0 || !isDNS1123Subdomain(prefix) {
		return false
	}
	return name != "" && len(name) <= labelNameMaxLength && isLabelName(name)
}

// validLabelValue is content.IsLabelValue: empty, or a label name.
func validLabelValue(value string) bool {
	return value == "" || len(value) <= labelNameMaxLength && isLabelName(value)
}

func isASCIIAlphanumeric(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z'
}

// isLabelName matches ([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9].
func isLabelName(s string) bool {
	if s == "" || !isASCIIAlphanumeric(s[0]) || !isASCIIAlphanumeric(s[len(s)-1]) {
		return false
	}
	for i := 1; i < len(s)-1; i++ {
		if c := s[i]; !isASCIIAlphanumeric(c) && c != '-' && c != '_' && c != '.' {
			return false
		}
	}
	return true
}

const dns1123SubdomainMaxLength = 253

// isDNS1123Subdomain matches lowercase RFC 1123 labels joined by dots, at most
// 253 characters in all.
func isDNS1123Subdomain(s string) bool {
	if s == "" || len(s) > dns1123SubdomainMaxLength {
		return false
	}
	for label := range strings.SplitSeq(s, ".") {
		if !isDNS1123Label(label) {
			return false
		}
	}
	return true
}

func isLowerAlphanumeric(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'z'
}

// isDNS1123Label matches [a-z0-9]([-a-z0-9]*[a-z0-9])? with no length limit of
// its own, as upstream's subdomain pattern.
func isDNS1123Label(s string) bool {
	if s == "" || !isLowerAlphanumeric(s[0]) || !isLowerAlphanumeric(s[len(s)-1]) {
		return false
	}
	for i := 1; i < len(s)-1; i++ {
		if c := s[i]; !isLowerAlphanumeric(c) && c != '-' {
			return false
		}
	}
	return true
}
