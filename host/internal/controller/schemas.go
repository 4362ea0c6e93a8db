package controller

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/skewgate/skewgate/discovery"
	"github.com/skewgate/skewgate/host/internal/schemafields"
)

// maxConcurrentSchemaFetches bounds the OpenAPI v3 documents fetched and
// reduced at once, and with it the controller's peak memory: each is read
// whole (at most MaxResponseBytes) and decoded before it is reduced.
const maxConcurrentSchemaFetches = 2

// schemaRetryInterval is how long a document that could not be fetched is
// left alone: one that failed is likely to fail again, and polls are frequent.
const schemaRetryInterval = 30 * time.Second

// pathOpenAPIDocument labels the fetch errors of group-version documents,
// whatever their path, so that the metric's series stay few.
const pathOpenAPIDocument = "/openapi/v3/{group-version}"

// schemas keeps the reduced OpenAPI v3 documents the snapshot's field
// knowledge is computed from, by hash, and fetches missing ones in the
// background so that a slow document never delays the readiness probes.
// Only documents of a group version whose hashes differ between servers are
// fetched: servers publishing one hash publish the same document, so they
// have the same fields and the same selectable fields.
type schemas struct {
	// docs and generation are touched only by Run's goroutine; generation
	// changes whenever docs does.
	docs       map[string]*schemafields.Document
	generation uint64
	// failed holds when each hash last failed to be fetched.
	failed map[string]time.Time

	mu sync.Mutex
	// finished holds fetches done since the last merge; fetching is set
	// while a batch runs.
	finished []schemaFetch
	fetching bool
	running  sync.WaitGroup
}

// schemaFetch is one fetched document, or why it could not be had.
type schemaFetch struct {
	hash, path, address string
	doc                 *schemafields.Document
	bytes               int
	err                 *fetchError
}

// wanted is a document to fetch and the servers that publish it.
type wanted struct {
	path      string
	addresses []string
}

func newSchemas() *schemas {
	return &schemas{docs: map[string]*schemafields.Document{}, failed: map[string]time.Time{}}
}

// groupVersionOfPath returns the group version an /openapi/v3 index path
// documents: "api/v1" the core group's, "apis/<group>/<version>" a named
// group's; ok is false for any other path.
func groupVersionOfPath(path string) (group, version string, ok bool) {
	parts := strings.Split(path, "/")
	switch {
	case len(parts) == 2 && parts[0] == "api" && parts[1] != "":
		return "", parts[1], true
	case len(parts) == 3 && parts[0] == "apis" && parts[1] != "" && parts[2] != "":
		return parts[1], parts[2], true
	}
	return "", "", false
}

// wantedDocuments are the documents of every group version that at least two
// of the servers publish with different hashes, by hash, each with the
// healthy servers that publish it.
func wantedDocuments(states []*serverState) map[string]wanted {
	hashesOf := map[string]map[string][]*serverState{}
	for _, s := range states {
		if !s.openAPI.ok {
			continue
		}
		for _, p := range s.openAPI.value {
			if _, _, ok := groupVersionOfPath(p.Path); !ok {
				continue
			}
			if hashesOf[p.Path] == nil {
				hashesOf[p.Path] = map[string][]*serverState{}
			}
			hashesOf[p.Path][p.Hash] = append(hashesOf[p.Path][p.Hash], s)
		}
	}
	out := map[string]wanted{}
	for path, byHash := range hashesOf {
		if len(byHash) < 2 {
			continue
		}
		for hash, publishers := range byHash {
			w := wanted{path: path}
			for _, s := range publishers {
				if s.healthy {
					w.addresses = append(w.addresses, s.address)
				}
			}
			out[hash] = w
		}
	}
	return out
}

// updateSchemas merges finished fetches (reporting the failed ones), forgets
// documents no longer wanted and starts fetching the wanted ones it lacks,
// unless a batch still runs.
func (c *Controller) updateSchemas(ctx context.Context, now time.Time, states []*serverState) {
	sc := c.schemas
	sc.mu.Lock()
	finished, busy := sc.finished, sc.fetching
	sc.finished = nil
	sc.mu.Unlock()

	want := wantedDocuments(states)
	for _, f := range finished {
		if f.err != nil {
			sc.failed[f.hash] = now
			c.metrics.schemaFetchError(f.err)
			c.notices.warn("schema/"+f.address+"/"+f.path+"/"+f.err.reason, "fetching an OpenAPI v3 document failed; its fields stay unknown until a later poll fetches it",
				"address", f.address, "path", f.path, "reason", f.err.reason, "err", f.err.err)
			continue
		}
		c.metrics.schemaFetched(f.bytes)
		if _, ok := want[f.hash]; ok {
			sc.docs[f.hash] = f.doc
			sc.generation++
		}
	}
	for hash := range sc.docs {
		if _, ok := want[hash]; !ok {
			delete(sc.docs, hash)
			sc.generation++
		}
	}
	for hash, at := range sc.failed {
		if now.Sub(at) > schemaRetryInterval {
			delete(sc.failed, hash)
		}
	}
	fields := 0
	for _, d := range sc.docs {
		for _, k := range d.Kinds {
			fields += k.Fields.Len()
		}
	}
	c.metrics.schemasCached(len(sc.docs), fields)

	if busy {
		return
	}
	var missing []schemaFetch
	for _, hash := range slices.Sorted(maps.Keys(want)) {
		w := want[hash]
		_, have := sc.docs[hash]
		_, failed := sc.failed[hash]
		if have || failed || len(w.addresses) == 0 {
			continue
		}
		missing = append(missing, schemaFetch{hash: hash, path: w.path, address: w.addresses[0]})
	}
	if len(missing) == 0 {
		return
	}
	sc.mu.Lock()
	sc.fetching = true
	sc.mu.Unlock()
	sc.running.Go(func() { c.fetchSchemas(ctx, missing) })
}

// fetchSchemas fetches and reduces the documents, at most
// maxConcurrentSchemaFetches at once, and hands them to the next update.
func (c *Controller) fetchSchemas(ctx context.Context, batch []schemaFetch) {
	start := time.Now()
	slots := make(chan struct{}, maxConcurrentSchemaFetches)
	var wg sync.WaitGroup
	for i := range batch {
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			f := &batch[i]
			f.doc, f.bytes, f.err = c.fetcher.schema(ctx, f.address, f.path, f.hash)
		})
	}
	wg.Wait()
	c.log.Debug("fetched OpenAPI v3 documents", "documents", len(batch), "elapsed", time.Since(start))
	sc := c.schemas
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if ctx.Err() == nil {
		sc.finished = append(sc.finished, batch...)
	}
	sc.fetching = false
}

// schema fetches the document the index lists at path with hash and reduces
// it; the document itself is dropped.
func (f *fetcher) schema(ctx context.Context, address, path, hash string) (*schemafields.Document, int, *fetchError) {
	group, version, _ := groupVersionOfPath(path)
	entry := discovery.OpenAPIPath{Path: path, Hash: hash}
	resp, ferr := f.get(ctx, address, entry.URL(), "application/json", "")
	if ferr != nil {
		ferr.path = pathOpenAPIDocument
		return nil, 0, ferr
	}
	if resp.status != http.StatusOK {
		return nil, 0, &fetchError{pathOpenAPIDocument, reasonStatus, fmt.Errorf("GET %s: HTTP %d", entry.URL(), resp.status)}
	}
	doc, err := schemafields.Reduce(resp.body, group, version)
	if err != nil {
		return nil, 0, &fetchError{pathOpenAPIDocument, reasonMalformed, fmt.Errorf("GET %s: %w", entry.URL(), err)}
	}
	return doc, len(resp.body), nil
}
