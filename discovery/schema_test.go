package discovery_test

import (
	"errors"
	"strings"
	"testing"

	. "github.com/skewgate/skewgate/discovery"
	"github.com/skewgate/skewgate/discovery/discoverytest"
)

func TestParseSchemaVersion(t *testing.T) {
	for _, c := range []struct {
		in   string
		want SchemaVersion
	}{{"1.0", SchemaVersion{1, 0}}, {"1.12", SchemaVersion{1, 12}}, {"0.0", SchemaVersion{0, 0}}, {"65535.65535", SchemaVersion{65535, 65535}}} {
		if got, err := ParseSchemaVersion(c.in); err != nil || got != c.want || got.String() != c.in {
			t.Errorf("ParseSchemaVersion(%q) = %v, %v; want %v", c.in, got, err, c.want)
		}
	}
	for _, bad := range []string{"", "1", "1.", ".1", "01.0", "1.00", "1.0.0", "v1.0", "+1.0", "1.-1", "65536.0", "1 .0", "1.0 "} {
		if got, err := ParseSchemaVersion(bad); err == nil || !strings.Contains(err.Error(), `must be "MAJOR.MINOR"`) {
			t.Errorf("ParseSchemaVersion(%q) = %v, %v; want the format named", bad, got, err)
		}
	}
}

// versioned is the test snapshot declaring version (and, unless "",
// requiresSchemaVersion), with extra members at snapshot level and in the
// second server.
func versioned(t *testing.T, version, requires, topMember, serverMember string) []byte {
	t.Helper()
	doc := string(discoverytest.SnapshotJSON(3, discoverytest.SkewedControlPlane()))
	head := `{"schemaVersion":"` + CurrentSchema().String() + `",`
	if !strings.HasPrefix(doc, head) {
		t.Fatalf("the writer does not lead with its version: %.80s", doc)
	}
	members := ""
	if version != "" {
		members += `"schemaVersion":"` + version + `",`
	}
	if requires != "" {
		members += `"requiresSchemaVersion":"` + requires + `",`
	}
	if topMember != "" {
		members += topMember + ","
	}
	doc = "{" + members + doc[len(head):]
	if serverMember != "" {
		const second = `{"id":"apiserver-bbb",`
		if !strings.Contains(doc, second) {
			t.Fatalf("test input lacks %q", second)
		}
		doc = strings.Replace(doc, second, second+serverMember+",", 1)
	}
	return []byte(doc)
}

func nextMinor() SchemaVersion { return SchemaVersion{SchemaMajor, SchemaMinor + 1} }

// A document of a newer minor version is read with the members this build
// does not know ignored and named once each; of this build's version, or an
// older one, such a member is a mistake and refused by name.
func TestSnapshotMembersOfANewerMinorAreIgnoredAndNamed(t *testing.T) {
	newer := nextMinor().String()
	snap, err := ParseSnapshot(versioned(t, newer, "", `"shards":4`, `"fieldHints":{"x":1},"weight":2`))
	if err != nil {
		t.Fatalf("a snapshot of schema %s with optional members refused: %v", newer, err)
	}
	want := []string{"servers[].fieldHints", "servers[].weight", "shards"}
	if strings.Join(snap.Ignored, " ") != strings.Join(want, " ") {
		t.Errorf("ignored %q; want %q", snap.Ignored, want)
	}
	plain, err := ParseSnapshot(versioned(t, CurrentSchema().String(), "", "", ""))
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Servers) != len(plain.Servers) || snap.Generation != plain.Generation || len(plain.Ignored) != 0 {
		t.Errorf("read %d servers, ignored %q; want what the document without the new members gives", len(snap.Servers), plain.Ignored)
	}
	// Every server of a newer document may carry the member: named once.
	again, err := ParseSnapshot([]byte(strings.ReplaceAll(string(versioned(t, newer, "", "", "")), `"healthy":`, `"weight":1,"healthy":`)))
	if err != nil || len(again.Ignored) != 1 || again.Ignored[0] != "servers[].weight" {
		t.Errorf("ignored %q, %v; want servers[].weight once", again.Ignored, err)
	}

	for _, version := range []string{"", "1.0", CurrentSchema().String()} {
		if _, err := ParseSnapshot(versioned(t, version, "", "", `"weight":2`)); err == nil ||
			!strings.Contains(err.Error(), `snapshot: servers[1] (apiserver-bbb): unknown field "weight" in schema`) {
			t.Errorf("version %q: error %v; want the unknown member refused by server and name", version, err)
		}
		if _, err := ParseSnapshot(versioned(t, version, "", `"shards":4`, "")); err == nil ||
			!strings.Contains(err.Error(), `snapshot: unknown field "shards" in schema`) {
			t.Errorf("version %q: error %v; want the unknown member refused by name", version, err)
		}
	}
}

// What this build cannot honour is refused with a *SchemaError naming the
// member and the version: another major version, or a document that needs
// a newer reader.
func TestSnapshotOfAnotherMajorOrNeedingANewerReaderIsRefused(t *testing.T) {
	for _, c := range []struct{ name, version, requires, want string }{
		{"next major", "2.0", "", "snapshot: schemaVersion: 2.0: this reader implements schema " + CurrentSchema().String() + " and reads major version 1 only"},
		{"major zero", "0.9", "", "schemaVersion: 0.9: this reader implements"},
		{"needs the next minor", nextMinor().String(), nextMinor().String(),
			"snapshot: requiresSchemaVersion: " + nextMinor().String() + ": the document needs a reader of schema " + nextMinor().String() + " or later"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseSnapshot(versioned(t, c.version, c.requires, "", ""))
			var schemaErr *SchemaError
			if !errors.As(err, &schemaErr) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v; want a *SchemaError containing %q", err, c.want)
			}
		})
	}
	for _, c := range []struct{ name, version, requires, want string }{
		{"not a version", "1", "", `schemaVersion: must be "MAJOR.MINOR"`},
		{"requires more than the document", "1.0", "1.1", "requiresSchemaVersion: 1.1: must be of the document's major version and not after its schemaVersion 1.0"},
		{"requires another major", nextMinor().String(), "0.1", "requiresSchemaVersion: 0.1: must be of the document's major version"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseSnapshot(versioned(t, c.version, c.requires, "", ""))
			var schemaErr *SchemaError
			if err == nil || errors.As(err, &schemaErr) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v; want a malformed-version error containing %q", err, c.want)
			}
		})
	}
	// A newer document that needs no more than this build reads.
	if _, err := ParseSnapshot(versioned(t, nextMinor().String(), CurrentSchema().String(), "", "")); err != nil {
		t.Errorf("a document of %s requiring %s refused: %v", nextMinor(), CurrentSchema(), err)
	}
	if _, err := ParseSnapshot([]byte(strings.Replace(string(versioned(t, "", "", "", "")), `{`, `{"schemaVersion":1.0,`, 1))); err == nil ||
		!strings.Contains(err.Error(), `snapshot: schemaVersion: must be a string "MAJOR.MINOR", got 1.0`) {
		t.Errorf("a numeric version: error %v", err)
	}
}
