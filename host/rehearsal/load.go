package rehearsal

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"
)

// The bounded client load: a few clients in turn, each one request at a time with a pause
// between, so that three API servers and etcd on a busy 2-core machine are not what fails.
// A client waits for an answer a little longer than kube-apiserver's own request timeout
// (--request-timeout, 60 s), as client-go and kubectl, which set no timeout of their own, wait
// until the server gives up; an answer slower than slowAnswer is counted apart.
const (
	loadPause          = 250 * time.Millisecond
	loadRequestTimeout = 65 * time.Second
	slowAnswer         = 10 * time.Second
	watchRetryPause    = time.Second
)

// resource is one resource the load and the workloads use, by its paths.
type resource struct {
	// collection is the path of its collection ("/api/v1/namespaces/NS/configmaps").
	collection string
	// new is true for a resource only the upgraded servers serve.
	new bool
	// object renders an object of the resource named name.
	object func(name string) []byte
}

// endpointClient sends requests through the control-plane endpoint and records each outcome.
type endpointClient struct {
	http  *http.Client
	base  string
	tally *tally
	// noCapableServerAround says whether no ready server could serve a request on a common or
	// new resource around the time it was sent and answered.
	noCapableServerAround func(ctx context.Context, new bool, sent time.Time) bool
	// serverDownAround says whether some API server was not ready around the time a request
	// was sent and answered.
	serverDownAround func(ctx context.Context, sent time.Time) bool
}

type answer struct {
	status int
	body   []byte
}

// do sends one request and records it; status 0 is no HTTP answer. Every request the load
// sends is valid and names what exists, on a resource some running server serves, so every 404
// and 400 is a false one.
func (c *endpointClient) do(parent context.Context, r resource, method, path string, body []byte) answer {
	ctx, cancel := context.WithTimeout(parent, loadRequestTimeout)
	defer cancel()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		panic(err)
	}
	sent := time.Now()
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		if parent.Err() != nil {
			return answer{}
		}
		c.tally.answered(method+" "+path, time.Since(sent))
		c.tally.request(outcome{what: method + " " + path, detail: err.Error()}, judge{})
		return answer{}
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	c.tally.answered(method+" "+path, time.Since(sent))
	c.tally.request(outcome{what: method + " " + path, status: resp.StatusCode, retryAfter: resp.Header.Get("Retry-After") != "",
		write: method != http.MethodGet, detail: firstLine(data)}, c.judge(parent, r, sent))
	return answer{status: resp.StatusCode, body: data}
}

// judge is the evidence for a failed request on r sent at sent (tally.request).
func (c *endpointClient) judge(ctx context.Context, r resource, sent time.Time) judge {
	return judge{
		noCapableServer: func() bool { return c.noCapableServerAround(ctx, r.new, sent) },
		serverDown:      func() bool { return c.serverDownAround(ctx, sent) },
	}
}

func firstLine(b []byte) string {
	s, _, _ := strings.Cut(string(b), "\n")
	if len(s) > 200 {
		s = s[:200]
	}
	return s
}

// cycle is one round of the load on r: create an object, read it back, list, delete it.
func (c *endpointClient) cycle(ctx context.Context, r resource, name string) {
	created := c.do(ctx, r, http.MethodPost, r.collection, r.object(name))
	if ctx.Err() != nil {
		return
	}
	if created.status == http.StatusCreated {
		c.do(ctx, r, http.MethodGet, r.collection+"/"+name, nil)
	}
	c.do(ctx, r, http.MethodGet, r.collection+"?limit=20", nil)
	if created.status == http.StatusCreated {
		c.do(ctx, r, http.MethodDelete, r.collection+"/"+name, nil)
	}
}

// runLoad runs the cycles over resources until ctx ends, one goroutine per resource.
func (c *endpointClient) runLoad(ctx context.Context, wg *sync.WaitGroup, prefix string, resources ...resource) {
	for i, r := range resources {
		wg.Go(func() {
			for n := 0; ctx.Err() == nil; n++ {
				c.cycle(ctx, r, fmt.Sprintf("%s-%d-%d", prefix, i, n))
				sleep(ctx, loadPause)
			}
		})
	}
}

// watch keeps a watch on r's collection open until ctx ends. Like client-go's reflector, it
// resumes a watch that ended from the last resourceVersion it delivered; an end is counted, and
// a watch that cannot go on from there (an ERROR event, a failed resume) is an interruption,
// unless every server of r went down since the end (Counts.WatchesRelistedAfterTheirServerRestarted).
func (c *endpointClient) watch(ctx context.Context, wg *sync.WaitGroup, r resource) {
	wg.Go(func() {
		w := watchState{}
		for ctx.Err() == nil {
			w = c.watchOnce(ctx, r, w)
			sleep(ctx, watchRetryPause)
		}
	})
}

// watchState is where a watch goes on from: the last resourceVersion it delivered ("" for
// now), and when its last stream ended (zero before any ended).
type watchState struct {
	resourceVersion string
	ended           time.Time
}

// watchOnce watches r's collection from w until the response ends, and returns where to
// resume from.
func (c *endpointClient) watchOnce(ctx context.Context, r resource, w watchState) watchState {
	resourceVersion := w.resourceVersion
	url := c.base + r.collection + "?watch=1&timeoutSeconds=7200&allowWatchBookmarks=true"
	if resourceVersion != "" {
		url += "&resourceVersion=" + resourceVersion
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		panic(err)
	}
	sent := time.Now()
	what := "watch " + r.collection
	resp, err := c.http.Do(req)
	if err != nil {
		if ctx.Err() == nil && c.tally.request(outcome{what: what, detail: err.Error()}, judge{}) && resourceVersion != "" {
			c.tally.watchInterrupted(what, "resume failed: "+err.Error())
		}
		return w
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		if c.tally.request(outcome{what: what, status: resp.StatusCode, retryAfter: resp.Header.Get("Retry-After") != "", detail: firstLine(data)},
			c.judge(ctx, r, sent)) && resourceVersion != "" {
			c.tally.watchInterrupted(what, fmt.Sprintf("resume answered %d", resp.StatusCode))
		}
		return w
	}
	c.tally.request(outcome{what: what, status: resp.StatusCode}, judge{})
	scanner := bufio.NewScanner(resp.Body)
	scanner.Buffer(make([]byte, 1<<20), 4<<20)
	for first := true; scanner.Scan(); first = false {
		var event struct {
			Type   string
			Object struct {
				Metadata struct{ ResourceVersion string }
				// An ERROR event's object is a Status.
				Code    int
				Message string
			}
		}
		if json.Unmarshal(scanner.Bytes(), &event) != nil {
			break
		}
		if event.Type == "ERROR" {
			// Most likely 410 Gone: the resourceVersion is too old; start again from now.
			detail := fmt.Sprintf("ERROR %d: %s", event.Object.Code, event.Object.Message)
			if first && event.Object.Code == http.StatusGone && !w.ended.IsZero() && c.noCapableServerAround(ctx, r.new, w.ended) {
				c.tally.watchRelisted(what+" from "+resourceVersion, detail)
			} else {
				c.tally.watchInterrupted(what+" from "+resourceVersion, detail)
			}
			return watchState{}
		}
		resourceVersion = event.Object.Metadata.ResourceVersion
	}
	if ctx.Err() == nil {
		c.tally.watchEnded()
	}
	return watchState{resourceVersion: resourceVersion, ended: time.Now()}
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
