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
	// WritesLostWithAServer counts writes lost as a server went down under them: answered 503
	// without Retry-After because the only servers that could carry them went down (no server
	// of the resource's version was up around the answer), or 500 or 504 by kube-apiserver while
	// some server was down (kubeadm restarts a node's etcd first: a proposal dropped as the etcd
	// leader hands over, or a server whose own etcd stopped under the request). Whether such a
	// write was carried out is unknown, so no answer invites a blind retry; the client reads
	// before it writes again. Each is logged.
	WritesLostWithAServer int
	// ReadsFailedInEtcdHandover counts reads answered 500 by kube-apiserver with its etcd's own
	// error ("etcdserver: leader changed", "… request timed out") while some API server was down:
	// kubeadm restarts a node's etcd with its server, and a read in flight while the etcd leader
	// hands over fails behind any endpoint alike. It changed nothing, and the client reads again.
	// Each is logged.
	ReadsFailedInEtcdHandover int
	// False404 and False400 are answers that a server serving the request would not have given:
	// not found for an object or resource that exists, bad request for a valid request.
	False404 int
	False400 int
	// WatchStreamsEnded counts watch responses that ended before the load stopped them; each
	// was resumed from the last resourceVersion it delivered, as client-go's reflector resumes.
	// WatchInterruptions counts those that could not go on from there: an ERROR event (the
	// resourceVersion is too old; a relist follows), or a resume answered with a failure.
	// WatchesRelistedAfterTheirServerRestarted counts, apart, the resumes answered "too old
	// resource version" after every server of the resource had gone down since the stream
	// ended: a restarted server's watch cache begins at its start, so no server could resume
	// the watch, and client-go's reflector lists again.
	WatchStreamsEnded                        int
	WatchInterruptions                       int
	WatchesRelistedAfterTheirServerRestarted int
	// SlowAnswers counts requests answered, or failed, after more than slowAnswer: a client
	// that waited that long saw the upgrade, whatever the outcome.
	SlowAnswers int
	// PodsFailedToStart names each Pod that failed to start once, with why.
	PodsFailedToStart map[string]string
	// ServiceLinkFailures counts the Pods of PodsFailedToStart whose kubelet had not read the
	// Services its service links need (kubernetes/kubernetes#127316).
	ServiceLinkFailures int
	// UpgradeWallTime is from the first kubeadm upgrade to the last node's uncordon;
	// UpgradeSteps are its steps, node by node.
	UpgradeWallTime time.Duration
	UpgradeSteps    []UpgradeStep
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
		"client requests %d, failed %d [%s], 503 with Retry-After while no capable server %d, writes lost with a server %d, reads failed in an etcd handover %d; false 404s %d, false 400s %d; "+
		"watch streams ended %d, interrupted %d, relisted after their only servers restarted %d; answers slower than %s %d; pods failed to start %d (%d without the Services read) [%s]; upgrade wall time %s",
		c.DependentsWronglyDeleted, c.DependentsCreated, c.ObjectsLeftByNamespaceDeletion, c.ObjectsInDeletedNamespace,
		c.Requests, c.failedTotal(), strings.Join(failed, " "), c.Allowed503, c.WritesLostWithAServer, c.ReadsFailedInEtcdHandover, c.False404, c.False400,
		c.WatchStreamsEnded, c.WatchInterruptions, c.WatchesRelistedAfterTheirServerRestarted, slowAnswer, c.SlowAnswers, len(c.PodsFailedToStart), c.ServiceLinkFailures, strings.Join(pods, ", "), c.UpgradeWallTime.Round(time.Second))
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
	writesLost         int
	etcdHandoverReads  int
	false404, false400 int
	watchStreamsEnded  int
	watchInterruptions int
	watchesRelisted    int
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

// outcome is one answer the load got.
type outcome struct {
	// what is the request ("GET /api/v1/…").
	what string
	// status is the HTTP status, 0 for no HTTP answer at all.
	status int
	// retryAfter is whether the answer said when to ask again.
	retryAfter bool
	// write is whether the request may have changed something.
	write bool
	// detail is the answer's first line, or the error.
	detail string
}

// etcdErrorMessage begins the message of a Status that kube-apiserver answers with its etcd's
// error as it got it.
const etcdErrorMessage = `"message":"etcdserver: `

// judge holds the evidence a failed answer is weighed against; each may wait for it, and a
// nil one finds nothing.
type judge struct {
	// noCapableServer says whether no server of the resource's version was up around the
	// request.
	noCapableServer func() bool
	// serverDown says whether some API server was not ready around the request.
	serverDown func() bool
}

// request records one request's outcome and reports whether it counts as failed. Allowed are
// a 503 with Retry-After while no capable server was up; a write lost with a server: answered
// 503 without Retry-After ("may have been carried out") while no capable server was up, or 500
// or 504 while some server was down; and a read answered 500 with an etcd error while some
// server was down.
func (t *tally) request(o outcome, j judge) (failed bool) {
	ok := o.status >= 200 && o.status < 300
	allowed, lost, handover := false, false, false
	switch {
	case ok:
	case o.status == http.StatusServiceUnavailable && o.retryAfter:
		allowed = j.noCapableServer != nil && j.noCapableServer()
	case o.status == http.StatusServiceUnavailable && o.write:
		lost = j.noCapableServer != nil && j.noCapableServer()
	case (o.status == http.StatusInternalServerError || o.status == http.StatusGatewayTimeout) && o.write:
		lost = j.serverDown != nil && j.serverDown()
	case o.status == http.StatusInternalServerError && strings.Contains(o.detail, etcdErrorMessage):
		handover = j.serverDown != nil && j.serverDown()
	}
	phase := ""
	if !ok && !allowed {
		phase = t.phase()
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.requests++
	switch {
	case ok:
		return false
	case allowed:
		t.allowed503++
		return false
	case lost:
		t.writesLost++
		t.logLocked("write lost with a server", phase, o.what, o.detail)
		return false
	case handover:
		t.etcdHandoverReads++
		t.logLocked("read failed in an etcd handover", phase, o.what, o.detail)
		return false
	}
	key := fmt.Sprint(o.status)
	if o.status == 0 {
		key = "connection"
	}
	t.failed[key]++
	t.byPhase[key+" while "+phase]++
	switch o.status {
	case 404:
		t.false404++
	case 400:
		t.false400++
	}
	t.logLocked(key, phase, o.what, o.detail)
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

// watchRelisted records a resume answered "too old resource version" after every server of
// the resource had gone down since the stream ended (Counts.WatchesRelistedAfterTheirServerRestarted).
func (t *tally) watchRelisted(what, detail string) {
	phase := t.phase()
	t.mu.Lock()
	defer t.mu.Unlock()
	t.watchesRelisted++
	t.logLocked("watch relisted after its only servers restarted", phase, what, detail)
}

func (t *tally) into(c *Counts) {
	t.mu.Lock()
	defer t.mu.Unlock()
	c.Requests = t.requests
	c.Failed = maps.Clone(t.failed)
	c.Allowed503, c.WritesLostWithAServer, c.ReadsFailedInEtcdHandover = t.allowed503, t.writesLost, t.etcdHandoverReads
	c.False404, c.False400 = t.false404, t.false400
	c.WatchStreamsEnded, c.WatchInterruptions, c.WatchesRelistedAfterTheirServerRestarted = t.watchStreamsEnded, t.watchInterruptions, t.watchesRelisted
	c.SlowAnswers = t.slowAnswers
}
