package discovery

import (
	"fmt"
	"strconv"
	"strings"
)

// The schema version of the contract between the controller and the plugin
// module: the plugin configuration and the snapshot it carries. Both
// documents state the version they were written for ("schemaVersion"), and
// the module announces the version it implements (plugin/config reads it
// from the module file), so that either side can be upgraded first.
//
// A new minor version only adds optional members whose absence means what
// the older minor meant. A reader therefore reads every minor of its major
// version: a document of an older minor is one of its own without the newer
// members, and of a newer minor it ignores (and reports, see
// Snapshot.Ignored) the members it does not know. A document of its own or
// an older minor with a member it does not know is refused: that is a typo
// or a broken writer, not a newer writer. What a reader must not ignore
// takes a new major version, which readers of another major refuse; or, for
// a member that must be honoured only when present, the writer raises the
// document's "requiresSchemaVersion" to the minor that introduced it, and
// older readers refuse that document, not every document.
const (
	SchemaMajor = 1
	SchemaMinor = 3
)

// SchemaVersion is a version of the controller–module contract.
type SchemaVersion struct{ Major, Minor int }

// CurrentSchema is the version this build writes, and the newest it reads.
func CurrentSchema() SchemaVersion { return SchemaVersion{SchemaMajor, SchemaMinor} }

// firstSchema is the version of documents that carry none: written before
// the contract had versions, they are exactly its first version.
var firstSchema = SchemaVersion{1, 0}

func (v SchemaVersion) String() string {
	return strconv.Itoa(v.Major) + "." + strconv.Itoa(v.Minor)
}

// Less orders versions.
func (v SchemaVersion) Less(w SchemaVersion) bool {
	return v.Major < w.Major || v.Major == w.Major && v.Minor < w.Minor
}

// maxSchemaNumber bounds each number of a version.
const maxSchemaNumber = 65535

// ParseSchemaVersion reads "MAJOR.MINOR": two decimal numbers without sign
// or leading zeros, each at most 65535.
func ParseSchemaVersion(s string) (SchemaVersion, error) {
	major, minor, ok := strings.Cut(s, ".")
	var v SchemaVersion
	if ok {
		v.Major, ok = schemaNumber(major)
	}
	if ok {
		v.Minor, ok = schemaNumber(minor)
	}
	if !ok {
		return SchemaVersion{}, fmt.Errorf(`must be "MAJOR.MINOR" (such as %q), got %q`, CurrentSchema().String(), s)
	}
	return v, nil
}

func schemaNumber(s string) (int, bool) {
	if s == "" || len(s) > 1 && s[0] == '0' {
		return 0, false
	}
	n := 0
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
		if n = n*10 + int(s[i]-'0'); n > maxSchemaNumber {
			return 0, false
		}
	}
	return n, true
}

// The members every document of the contract may carry.
const (
	SchemaVersionMember         = "schemaVersion"
	RequiresSchemaVersionMember = "requiresSchemaVersion"
)

// SchemaError is a document this build cannot honour: written for another
// major version, or requiring a newer minor than it implements.
type SchemaError struct {
	// Member is the member that says so, Version what it says.
	Member  string
	Version SchemaVersion
}

func (e *SchemaError) Error() string {
	if e.Member == RequiresSchemaVersionMember {
		return fmt.Sprintf("%s: %s: the document needs a reader of schema %s or later; this one implements %s",
			e.Member, e.Version, e.Version, CurrentSchema())
	}
	return fmt.Sprintf("%s: %s: this reader implements schema %s and reads major version %d only",
		e.Member, e.Version, CurrentSchema(), SchemaMajor)
}

// DocumentSchema is what a reader makes of a document's version members.
type DocumentSchema struct {
	// Version is the document's schemaVersion (1.0 when absent).
	Version SchemaVersion
}

// Newer reports a document of a newer minor version than this reader's, whose
// unknown members are therefore ignored rather than refused.
func (d DocumentSchema) Newer() bool { return CurrentSchema().Less(d.Version) }

// ReadDocumentSchema reads the version members of a document of the contract
// (the plugin configuration, or a snapshot), given by lookup, and refuses a
// document this build cannot honour with a *SchemaError.
func ReadDocumentSchema(lookup func(name string) JSONValue) (DocumentSchema, error) {
	doc := DocumentSchema{Version: firstSchema}
	if v := lookup(SchemaVersionMember); v.Exists() {
		version, err := schemaVersionValue(v)
		if err != nil {
			return doc, fmt.Errorf("%s: %w", SchemaVersionMember, err)
		}
		doc.Version = version
	}
	if doc.Version.Major != SchemaMajor {
		return doc, &SchemaError{Member: SchemaVersionMember, Version: doc.Version}
	}
	if v := lookup(RequiresSchemaVersionMember); v.Exists() {
		required, err := schemaVersionValue(v)
		if err != nil {
			return doc, fmt.Errorf("%s: %w", RequiresSchemaVersionMember, err)
		}
		if required.Major != doc.Version.Major || doc.Version.Less(required) {
			return doc, fmt.Errorf("%s: %s: must be of the document's major version and not after its %s %s",
				RequiresSchemaVersionMember, required, SchemaVersionMember, doc.Version)
		}
		if CurrentSchema().Less(required) {
			return doc, &SchemaError{Member: RequiresSchemaVersionMember, Version: required}
		}
	}
	return doc, nil
}

func schemaVersionValue(v JSONValue) (SchemaVersion, error) {
	if !v.IsString() {
		return SchemaVersion{}, fmt.Errorf(`must be a string "MAJOR.MINOR", got %s`, describeValue(v))
	}
	return ParseSchemaVersion(v.Str())
}

// unknownMember is what a reader does with a member it does not know: in a
// document of a newer minor it is recorded in ignored, once per name (at,
// the member's place with array indexes left out); otherwise it is an error.
func (d DocumentSchema) unknownMember(name, at string, ignored *[]string) error {
	if !d.Newer() {
		return fmt.Errorf("unknown field %q in schema %s", name, d.Version)
	}
	*ignored = appendOnce(*ignored, at+name)
	return nil
}

// UnknownMember is unknownMember for the plugin configuration.
func (d DocumentSchema) UnknownMember(name string, ignored *[]string) error {
	return d.unknownMember(name, "", ignored)
}

func appendOnce(list []string, s string) []string {
	for _, have := range list {
		if have == s {
			return list
		}
	}
	return append(list, s)
}
