package rehearsal

import (
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"
)

// Counts are what a rehearsal measured: the harms the issue names, each counted once.
type Counts struct {
	// DependentsCreated and DependentsWronglyDeleted: dependents of owners that exist all along,
	// and those of them the garbage collector deleted.
	DependentsCreated        int
	DependentsWronglyDeleted int
	// ObjectsInDeletedNamespace is how many objects of the new kind were in the namespace when
	// it was deleted; ObjectsLeftByNamespaceDeletion how many of them stayed in storage after
	// the namespace was gone.
	ObjectsInDeletedNamespace      int
	ObjectsLeftByNamespaceDeletion int
	// Requests is how many requests the client load sent through the endpoint; Failed counts
	// the failed ones by status ("503", "connection" for no HTTP answer).
	Requests int
	Failed   map[string]int
	// Allowed503 counts 503s with Retry-After while no server of the resource's version was up.
	Allowed503 int
	// False404 and False400 are answers that a server serving the request would not have given:
	// not found for an object or resource that exists, bad request for a valid request.
	False404 int
	False400 int
	// WatchStreamsEnded counts watch responses that ended before the load stopped them; each
	// was resumed from the last resourceVersion it delivered, as client-go's reflector resumes.
	// WatchInterruptions counts those that could not go on from there: an ERROR event (the
	// resourceVersion is too old; a relist follows), or a resume answered with a failure.
	WatchStreamsEnded  int
	WatchInterruptions int
	// SlowAnswers counts requests answered, or failed, after more than slowAnswer: a client
	// that waited that long saw the upgrade, whatever the outcome.
	SlowAnswers int
	// PodsFailedToStart names each Pod that failed to start once, with why.
	PodsFailedToStart map[string]string
	// ServiceLinkFailures counts the Pods of PodsFailedToStart whose kubelet had not read the
	// Services its service links need (kubernetes/kubernetes#127316).
	ServiceLinkFailures int
	// UpgradeWallTime is from the first kubeadm upgrade to the last node's uncordon.
	UpgradeWallTime time.Duration
}

func (c Counts) String() string {
	var failed []string
	for _, k := range slices.Sorted(maps.Keys(c.Failed)) {
		failed = append(failed, fmt.Sprintf("%s×%d", k, c.Failed[k]))
	}
	var pods []string
	for _, k := range slices.Sorted(maps.Keys(c.PodsFailedToStart)) {
		pods = append(pods, k+" ("+c.PodsFailedToStart[k]+")")
	}
	return fmt.Sprintf("dependents wrongly deleted %d of %d; objects left by namespace deletion %d of %d; "+
		"client requests %d, failed %d [%s], 503 with Retry-After while no capable server %d; false 404s %d, false 400s %d; "+
		"watch streams ended %d, interrupted %d; answers slower than %s %d; pods failed to start %d (%d without the Services read) [%s]; upgrade wall time %s",
		c.DependentsWronglyDeleted, c.DependentsCreated, c.ObjectsLeftByNamespaceDeletion, c.ObjectsInDeletedNamespace,
		c.Requests, c.failedTotal(), strings.Join(failed, " "), c.Allowed503, c.False404, c.False400,
		c.WatchStreamsEnded, c.WatchInterruptions, slowAnswer, c.SlowAnswers, len(c.PodsFailedToStart), c.ServiceLinkFailures, strings.Join(pods, ", "), c.UpgradeWallTime.Round(time.Second))
}

func (c Counts) failedTotal() int {
	n := 0
	for _, v := range c.Failed {
		n += v
	}
	return n
}

// maxLoggedFailures bounds the failed requests, interrupted watches and slow answers a
// rehearsal logs one by one.
const maxLoggedFailures = 60

// logTime is how log lines that must be set beside each other give the time.
const logTime = "15:04:05.000"

// tally collects the client load's counts from its goroutines.
type tally struct {
	mu                 sync.Mutex
	requests           int
	failed             map[string]int
	allowed503         int
	false404, false400 int
	watchStreamsEnded  int
	watchInterruptions int
	slowAnswers        int
	// failures are the first maxLoggedFailures failed requests, interrupted watches and slow
	// answers, with when they were answered, for the log: beside the load balancer's snapshots
	// they say which server it counted able.
	failures []string
	// byPhase counts failures and watch interruptions by what each node's API server answered
	// when they happened (phase's answer), so that a log says in which step of the upgrade they
	// came.
	byPhase map[string]int
	phase   func() string
}

func newTally(phase func() string) *tally {
	return &tally{failed: map[string]int{}, byPhase: map[string]int{}, phase: phase}
}

// request records one request's outcome, status 0 for no HTTP answer at all, and reports
// whether it counts as failed. noCapableServer is asked only of a 503 with Retry-After, which it
// allows when it says no capable server was up; it may wait for the evidence.
func (t *tally) request(what string, status int, retryAfter bool, noCapableServer func() bool, detail string) (failed bool) {
	ok := status >= 200 && status < 300
	allowed := status == http.StatusServiceUnavailable && retryAfter && noCapableServer()
	phase := ""
	if !ok {
		phase = t.phase()
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.requests++
	if ok {
		return false
	}
	if allowed {
		t.allowed503++
		return false
	}
	key := fmt.Sprint(status)
	if status == 0 {
		key = "connection"
	}
	t.failed[key]++
	t.byPhase[key+" while "+phase]++
	switch status {
	case 404:
		t.false404++
	case 400:
		t.false400++
	}
	t.logLocked(key, phase, what, detail)
	return true
}

// logLocked keeps one line for the log; t.mu is held.
func (t *tally) logLocked(key, phase, what, detail string) {
	if len(t.failures) < maxLoggedFailures {
		t.failures = append(t.failures, fmt.Sprintf("%s %s while %s: %s: %s", time.Now().Format(logTime), key, phase, what, detail))
	}
}

// answered records how long a request took, whatever its outcome.
func (t *tally) answered(what string, took time.Duration) {
	if took <= slowAnswer {
		return
	}
	phase := t.phase()
	t.mu.Lock()
	defer t.mu.Unlock()
	t.slowAnswers++
	t.logLocked("slow answer", phase, what, took.Round(time.Millisecond).String())
}

func (t *tally) watchEnded() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.watchStreamsEnded++
}

func (t *tally) watchInterrupted(what, detail string) {
	phase := t.phase()
	t.mu.Lock()
	defer t.mu.Unlock()
	t.watchInterruptions++
	t.byPhase["watch interrupted while "+phase]++
	t.logLocked("watch interrupted", phase, what, detail)
}

func (t *tally) into(c *Counts) {
	t.mu.Lock()
	defer t.mu.Unlock()
	c.Requests = t.requests
	c.Failed = maps.Clone(t.failed)
	c.Allowed503 = t.allowed503
	c.False404, c.False400 = t.false404, t.false400
	c.WatchStreamsEnded, c.WatchInterruptions = t.watchStreamsEnded, t.watchInterruptions
	c.SlowAnswers = t.slowAnswers
}
