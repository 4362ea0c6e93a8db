package plugintest

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/skewgate/skewgate/discovery"
)

// OldTree is this repository as it was at an older commit, extracted into a
// directory of its own: the source of the module and the controller a
// deployment upgrading from it still runs. Tests build from the history
// rather than keep copies of old modules: the history is the record of what
// was shipped, and a build takes seconds with the module cache warm.
type OldTree struct {
	Commit string
	// Version is the tree's schema version; zero before schemas had one.
	Version discovery.SchemaVersion
	// Dir holds the tree; the caller removes it.
	Dir string
}

const schemaFile = "discovery/schema.go"

var schemaNumbers = regexp.MustCompile(`(?m)^\s*Schema(Major|Minor)\s*=\s*(\d+)\s*$`)

// CheckOutPreviousMinor finds the commit before the one that raised the
// schema to its current minor version (the oldest commit whose schema.go
// says so) and extracts its tree with git archive. It needs the repository's
// history: a shallow clone has none to offer.
func CheckOutPreviousMinor() (*OldTree, error) {
	current := discovery.CurrentSchema()
	if current.Minor == 0 {
		return nil, fmt.Errorf("schema %s has no previous minor version", current)
	}
	commits, err := git("log", "--format=%H", "--", schemaFile)
	if err != nil {
		return nil, err
	}
	var raised string
	for _, commit := range strings.Fields(commits) {
		source, err := git("show", commit+":"+schemaFile)
		if err != nil {
			continue // the commit deleted it
		}
		if v, ok := schemaVersionIn(source); ok && v == current {
			raised = commit // git log lists the newest first: keep the oldest
		}
	}
	if raised == "" {
		return nil, fmt.Errorf("no commit in the history of %s sets schema %s (a shallow clone? the tests need the history)", schemaFile, current)
	}
	previous, err := git("rev-parse", raised+"^")
	if err != nil {
		return nil, err
	}
	previous = strings.TrimSpace(previous)
	source, err := git("show", previous+":"+schemaFile)
	if err != nil {
		return nil, err
	}
	version, ok := schemaVersionIn(source)
	if !ok || version.Major != current.Major || version.Minor != current.Minor-1 {
		return nil, fmt.Errorf("commit %s, before %s raised the schema to %s, has schema %v", previous, raised, current, version)
	}
	return checkOut(previous, version)
}

// CheckOutBeforeSchemaVersions extracts the tree of the commit before the
// one that gave the configuration and the snapshot a schema version (the
// oldest commit with schema.go).
func CheckOutBeforeSchemaVersions() (*OldTree, error) {
	commits, err := git("log", "--format=%H", "--", schemaFile)
	if err != nil {
		return nil, err
	}
	all := strings.Fields(commits)
	if len(all) == 0 {
		return nil, fmt.Errorf("no commit in the history touches %s (a shallow clone? the tests need the history)", schemaFile)
	}
	before, err := git("rev-parse", all[len(all)-1]+"^")
	if err != nil {
		return nil, err
	}
	return checkOut(strings.TrimSpace(before), discovery.SchemaVersion{})
}

func checkOut(commit string, version discovery.SchemaVersion) (*OldTree, error) {
	dir, err := os.MkdirTemp("", "skewgate-"+commit[:12]+"-")
	if err != nil {
		return nil, err
	}
	if err := extract(commit, dir); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return &OldTree{Commit: commit, Version: version, Dir: dir}, nil
}

func schemaVersionIn(source string) (discovery.SchemaVersion, bool) {
	var v discovery.SchemaVersion
	found := 0
	for _, m := range schemaNumbers.FindAllStringSubmatch(source, -1) {
		n, err := strconv.Atoi(m[2])
		if err != nil {
			return v, false
		}
		if m[1] == "Major" {
			v.Major = n
		} else {
			v.Minor = n
		}
		found++
	}
	return v, found == 2
}

// git runs git at the top of the working tree the test runs in, where
// paths and archives mean the whole repository.
func git(args ...string) (string, error) {
	top, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		return "", fmt.Errorf("git rev-parse --show-toplevel: %v (the tests need this repository's git history)", err)
	}
	var stderr bytes.Buffer
	cmd := exec.Command("git", args...)
	cmd.Dir = strings.TrimSpace(string(top))
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("git %s: %v: %s", strings.Join(args, " "), err, stderr.Bytes())
	}
	return string(out), nil
}

// extract writes the tree of commit into dir.
func extract(commit, dir string) error {
	archive, err := git("archive", "--format=tar", commit)
	if err != nil {
		return err
	}
	r := tar.NewReader(strings.NewReader(archive))
	for {
		h, err := r.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		path := filepath.Join(dir, filepath.FromSlash(h.Name))
		switch h.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(path, 0o755)
		case tar.TypeReg:
			var body []byte
			if body, err = io.ReadAll(r); err == nil {
				err = os.WriteFile(path, body, os.FileMode(h.Mode)&0o755|0o600)
			}
		}
		if err != nil {
			return err
		}
	}
}

// BuildModule builds the plugin module of the old tree as BuildModule
// builds this tree's.
func (p *OldTree) BuildModule() ([]byte, error) {
	out := filepath.Join(p.Dir, "skewgate.wasm")
	if err := p.goCommand(nil, "build", "-buildmode=c-shared", "-trimpath", "-ldflags=-s -w", "-o", out, ModuleCommand); err != nil {
		return nil, fmt.Errorf("building the plugin module of %s: %w", p.Commit, err)
	}
	return os.ReadFile(out)
}

// oldWriter is a program, compiled against the old tree, that writes the
// plugin configuration its controller writes for the skewed control plane:
// the default options and the snapshot discovery's writer encodes.
const oldWriter = `package main

import (
	"os"

	"github.com/skewgate/skewgate/discovery/discoverytest"
	"github.com/skewgate/skewgate/plugin/config"
)

func main() {
	raw, err := config.Defaults().Marshal(discoverytest.SnapshotJSON(1, discoverytest.SkewedControlPlane()))
	if err != nil {
		panic(err)
	}
	os.Stdout.Write(raw)
}
`

// ControllerConfiguration is the plugin configuration the old tree's
// controller writes for discoverytest.SkewedControlPlane, with its default
// options.
func (p *OldTree) ControllerConfiguration() ([]byte, error) {
	dir := filepath.Join(p.Dir, "oldwriter")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(oldWriter), 0o644); err != nil {
		return nil, err
	}
	var out bytes.Buffer
	if err := p.goCommand(&out, "run", "./oldwriter"); err != nil {
		return nil, fmt.Errorf("writing the configuration of %s: %w", p.Commit, err)
	}
	return out.Bytes(), nil
}

func (p *OldTree) goCommand(stdout io.Writer, args ...string) error {
	cmd := exec.Command("go", args...)
	cmd.Dir = p.Dir
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=readonly")
	if args[0] == "build" {
		cmd.Env = append(cmd.Env, "GOOS=wasip1", "GOARCH=wasm")
	}
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = stdout, &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, stderr.Bytes())
	}
	return nil
}
