package main

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/skewgate/skewgate/discovery"
	"github.com/skewgate/skewgate/host/internal/cmdline"
)

// runDiscoveryMerge prints the document upstream's peer-aggregated discovery
// would serve for the given servers' own documents, then its ETag on stderr
// (so that stdout stays the document).
func runDiscoveryMerge(args []string, stdout, stderr io.Writer) error {
	var ids []string
	var snapshotFile string
	var core bool
	fs := cmdline.NewFlagSet("skewgate discovery merge",
		"skewgate discovery merge [--id ID]... FILE...\n"+
			"skewgate discovery merge --snapshot FILE [--core]",
		"Merges API servers' own aggregated discovery documents (GET /apis or /api with profile=nopeer),\n"+
			"one file per server, as upstream's peer-aggregated discovery does; the lowest server ID counts as\n"+
			"the local server. Prints the merged document and, on stderr, its ETag.", stderr)
	fs.StringArrayVar(&ids, "id", nil, "server ID of a FILE, the first --id naming the first FILE and so on (repeatable; default: the file name without extension)")
	fs.StringVar(&snapshotFile, "snapshot", "", "merge the servers of this snapshot (skewgate's /debug/snapshot) instead of files")
	fs.BoolVar(&core, "core", false, "with --snapshot: merge /api instead of /apis")
	if err := cmdline.Parse(fs, args, true); err != nil {
		return err
	}
	var doc discovery.Document
	switch {
	case snapshotFile != "":
		if fs.NArg() > 0 || len(ids) > 0 {
			fs.Usage()
			return cmdline.ErrUsage
		}
		var err error
		if doc, err = mergeSnapshot(snapshotFile, core); err != nil {
			return err
		}
	case fs.NArg() == 0:
		fs.Usage()
		return cmdline.ErrUsage
	default:
		if core {
			return errors.New("--core applies to --snapshot; with files, /api documents are recognised by their content")
		}
		var err error
		if doc, err = mergeFiles(fs.Args(), ids); err != nil {
			return err
		}
	}
	if _, err := stdout.Write(doc.Body); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "ETag: %s\n", doc.ETag)
	return nil
}

func mergeSnapshot(path string, core bool) (discovery.Document, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return discovery.Document{}, err
	}
	snap, err := discovery.ParseSnapshot(raw)
	if err != nil {
		return discovery.Document{}, fmt.Errorf("%s: %w", path, err)
	}
	ix, err := discovery.NewIndex(snap)
	if err != nil {
		return discovery.Document{}, fmt.Errorf("%s: %w", path, err)
	}
	if core {
		return *ix.MergedCoreAPI(), nil
	}
	return *ix.MergedAPIs(), nil
}

func mergeFiles(files, ids []string) (discovery.Document, error) {
	if len(ids) > len(files) {
		return discovery.Document{}, fmt.Errorf("%d --id flags for %d files", len(ids), len(files))
	}
	servers := make([]discovery.ServerGroups, len(files))
	seen := map[string]string{}
	coreDocs := 0
	for i, file := range files {
		id := strings.TrimSuffix(filepath.Base(file), filepath.Ext(file))
		if i < len(ids) {
			id = ids[i]
		}
		if other, dup := seen[id]; dup {
			return discovery.Document{}, fmt.Errorf("%s and %s both have server ID %q: give --id for each file", other, file, id)
		}
		seen[id] = file
		raw, err := os.ReadFile(file)
		if err != nil {
			return discovery.Document{}, err
		}
		list, err := discovery.ParseGroupList(raw)
		if err != nil {
			return discovery.Document{}, fmt.Errorf("%s: %w", file, err)
		}
		if slices.ContainsFunc(list.Items, func(g discovery.Group) bool { return g.Name() == "" }) {
			coreDocs++
		}
		servers[i] = discovery.ServerGroups{ServerID: id, Groups: list.Items}
	}
	if coreDocs != 0 && coreDocs != len(files) {
		return discovery.Document{}, errors.New("some files are /api documents (core group) and some /apis documents: merge each kind separately")
	}
	lowest := slices.MinFunc(servers, func(a, b discovery.ServerGroups) int { return cmp.Compare(a.ServerID, b.ServerID) })
	merged := discovery.GroupList{Items: discovery.MergeGroups(servers, lowest.ServerID)}
	return discovery.Document{Body: discovery.ResponseBody(merged), ETag: discovery.ETag(merged)}, nil
}
