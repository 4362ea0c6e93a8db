package discovery

import (
	"slices"
	"sort"
	"strconv"
	"strings"
)

// DiscoveryFormat says which representation a discovery request (GET or HEAD of
// /apis or /api) negotiated with a Kubernetes API server.
type DiscoveryFormat uint8

const (
	// FormatLegacy is the unaggregated APIGroupList or APIVersions document, and
	// also stands for the 406 a server gives when no clause is acceptable: both
	// are left to a real server.
	FormatLegacy DiscoveryFormat = iota
	// FormatAggregatedJSON is an apidiscovery.k8s.io/v2 APIGroupDiscoveryList
	// encoded as JSON.
	FormatAggregatedJSON
	// FormatAggregatedOther is the same v2 aggregated document encoded as
	// protobuf or YAML.
	FormatAggregatedOther
)

// String names the format for logs and test output.
func (f DiscoveryFormat) String() string {
	switch f {
	case FormatLegacy:
		return "legacy"
	case FormatAggregatedJSON:
		return "aggregated-json"
	case FormatAggregatedOther:
		return "aggregated-other"
	default:
		return "DiscoveryFormat(" + strconv.Itoa(int(f)) + ")"
	}
}

// DiscoveryNegotiation is the outcome of NegotiateDiscovery.
type DiscoveryNegotiation struct {
	// Format is the representation the API server serves.
	Format DiscoveryFormat
	// NoPeer reports that the winning clause carries profile=nopeer exactly, so
	// the server answers with its local view instead of the peer-aggregated one.
	NoPeer bool
	// AcceptsAggregatedJSON reports that some clause, at any position, would be
	// served as peer-aggregated v2 JSON had it won. Like the server, it treats
	// q=0 as an ordinary weight, not as a refusal.
	AcceptsAggregatedJSON bool
}

// Aggregated discovery is selected by these media type parameters. Since
// AggregatedDiscoveryRemoveBetaType is locked on (Kubernetes 1.35), v2beta1 is
// never aggregated.
const (
	aggregatedDiscoveryGroup   = "apidiscovery.k8s.io"
	aggregatedDiscoveryVersion = "v2"
	aggregatedDiscoveryKind    = "APIGroupDiscoveryList"
	noPeerProfile              = "nopeer"
	watchStream                = "watch"
)

// discoverySerializer is one media type the apiserver's discovery codec factory
// offers. All of them have the top-level type "application".
type discoverySerializer struct {
	subtype string
	// streams reports whether the serializer has a stream serializer, which
	// decides whether a stream=watch parameter is acceptable.
	streams bool
	format  DiscoveryFormat
}

// discoverySerializers is the codec factory's list in its order, which decides
// what a wildcard clause gets. CBOR joins only with the CBORServingAndStorage
// gate, which is off by default.
var discoverySerializers = [...]discoverySerializer{
	{subtype: "json", streams: true, format: FormatAggregatedJSON},
	{subtype: "yaml", streams: false, format: FormatAggregatedOther},
	{subtype: "vnd.kubernetes.protobuf", streams: true, format: FormatAggregatedOther},
}

// insertionSortMax is the length up to which sort.Sort sorts by plain insertion
// sort. Upstream orders Accept clauses with sort.Sort and a comparison that is
// not a strict weak order, so only the same algorithm yields the same order.
const insertionSortMax = 12

// acceptClause keeps what ordering and matching need from one Accept clause.
type acceptClause struct {
	q          float64
	anyType    bool // the type is "*"
	anySubtype bool // the subtype is "*"
	noPeer     bool // profile=nopeer, byte for byte
	format     DiscoveryFormat
	aggregated bool // some discovery serializer accepts the clause as aggregated v2
}

// NegotiateDiscovery reproduces how a Kubernetes v1.37 API server's discovery
// handler for /apis and /api reads an Accept header: which representation it
// serves and whether the local (nopeer) or the peer-aggregated view.
//
// accept is the first Accept header line, which is what the server reads. The
// parsing mirrors github.com/munnerz/goautoneg as the apiserver uses it: clauses
// split on ',' and parameters on ';', only spaces trimmed, parameter names
// case-sensitive, values not unquoted (profile="nopeer" is not nopeer), a later
// duplicate parameter replaces an earlier one. Clauses are ordered by q, then
// concrete before wildcard, exactly as upstream's sort.Sort orders them, and the
// first clause a discovery serializer accepts with aggregated parameters wins.
//
// It does not allocate unless the header has more than 12 clauses or a q value
// that does not parse.
func NegotiateDiscovery(accept string) DiscoveryNegotiation {
	var result DiscoveryNegotiation
	// An empty header selects the first serializer without conversion: legacy.
	if accept == "" {
		return result
	}
	var stack [insertionSortMax]acceptClause
	clauses := stack[:0]
	anyAggregated := false
	for rest := accept; rest != ""; {
		var part string
		part, rest, _ = strings.Cut(rest, ",")
		clause, ok := parseAcceptClause(part)
		if !ok {
			continue
		}
		clauses = append(clauses, clause)
		if clause.aggregated {
			anyAggregated = true
			if clause.format == FormatAggregatedJSON && !clause.noPeer {
				result.AcceptsAggregatedJSON = true
			}
		}
	}
	if !anyAggregated {
		return result
	}
	for _, clause := range sortClauses(clauses) {
		if clause.aggregated {
			result.Format = clause.format
			result.NoPeer = clause.noPeer
			break
		}
	}
	return result
}

// parseAcceptClause parses one comma-separated element the way goautoneg does;
// ok is false for an element goautoneg drops.
func parseAcceptClause(part string) (clause acceptClause, ok bool) {
	part = trimSpaces(part)
	mediaRange, params, _ := strings.Cut(part, ";")
	mediaType, afterSlash, _ := strings.Cut(mediaRange, "/")
	mediaType = trimSpaces(mediaType)
	var subtype string
	if afterSlash == "" {
		// Only a bare "*" (or "*/") stands for "*/*".
		if mediaType != "*" {
			return acceptClause{}, false
		}
		subtype = "*"
	} else {
		var extra string
		subtype, extra, _ = strings.Cut(afterSlash, "/")
		if extra != "" {
			return acceptClause{}, false
		}
		subtype = trimSpaces(subtype)
	}

	clause.q = 1
	var group, version, kind, stream, serverVersion, profile string
	for params != "" {
		var param string
		param, params, _ = strings.Cut(params, ";")
		name, afterEquals, _ := strings.Cut(param, "=")
		if afterEquals == "" {
			continue
		}
		value, extra, _ := strings.Cut(afterEquals, "=")
		if extra != "" {
			continue
		}
		switch trimSpaces(name) {
		case "q":
			// Upstream parses the untrimmed value and keeps 0 on error.
			clause.q, _ = strconv.ParseFloat(value, 32)
		case "g":
			group = trimSpaces(value)
		case "v":
			version = trimSpaces(value)
		case "as":
			kind = trimSpaces(value)
		case "stream":
			stream = trimSpaces(value)
		case "sv":
			serverVersion = trimSpaces(value)
		case "profile":
			profile = trimSpaces(value)
		}
	}

	clause.anyType = mediaType == "*"
	clause.anySubtype = subtype == "*"
	clause.noPeer = profile == noPeerProfile
	// Discovery endpoints accept a clause only when it converts to the
	// aggregated kind; they allow no server version and only the watch stream.
	if group != aggregatedDiscoveryGroup || version != aggregatedDiscoveryVersion || kind != aggregatedDiscoveryKind ||
		serverVersion != "" || (stream != "" && stream != watchStream) {
		return clause, true
	}
	for _, s := range discoverySerializers {
		matches := (clause.anyType && clause.anySubtype) ||
			(mediaType == "application" && (subtype == s.subtype || clause.anySubtype))
		if matches && (stream == "" || s.streams) {
			clause.format = s.format
			clause.aggregated = true
			break
		}
	}
	return clause, true
}

// trimSpaces trims U+0020 only, as goautoneg does; tabs are kept.
func trimSpaces(s string) string {
	for s != "" && s[0] == ' ' {
		s = s[1:]
	}
	for s != "" && s[len(s)-1] == ' ' {
		s = s[:len(s)-1]
	}
	return s
}

// clauseOrder sorts clauses with goautoneg's comparison.
type clauseOrder []acceptClause

func (o clauseOrder) Len() int      { return len(o) }
func (o clauseOrder) Swap(i, j int) { o[i], o[j] = o[j], o[i] }

// Less is goautoneg's comparison: a higher q first, but a concrete type or
// subtype also precedes a wildcard whatever the q values.
func (o clauseOrder) Less(i, j int) bool {
	a, b := &o[i], &o[j]
	if a.q > b.q {
		return true
	}
	if !a.anyType && b.anyType {
		return true
	}
	return !a.anySubtype && b.anySubtype
}

// sortClauses orders clauses as sort.Sort does. Up to insertionSortMax clauses
// are sorted in place by the same insertion sort, which keeps the caller's
// array on the stack; longer lists are copied and handed to sort.Sort itself.
func sortClauses(clauses []acceptClause) []acceptClause {
	if len(clauses) > insertionSortMax {
		sorted := slices.Clone(clauses)
		sort.Sort(clauseOrder(sorted))
		return sorted
	}
	order := clauseOrder(clauses)
	for i := 1; i < len(order); i++ {
		for j := i; j > 0 && order.Less(j, j-1); j-- {
			order.Swap(j, j-1)
		}
	}
	return clauses
}
