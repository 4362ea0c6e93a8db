package controller

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/skewgate/skewgate/discovery"
)

// Controller polls the API servers and publishes discovery snapshots.
type Controller struct {
	opts    Options
	log     *slog.Logger
	fetcher *fetcher
	static  []string
	// local is the canonical address of the preferred server, "" when there
	// is none.
	local   string
	cluster *clusterSource
	metrics *metrics
	notices *notices
	running atomic.Bool
	// frontProxyCheckDue is set while the front-proxy certificate has not
	// been checked (Options.CheckFrontProxyCertificate).
	frontProxyCheckDue atomic.Bool
	// lost carries the clusters ServerLost reports to Run's goroutine.
	lost chan string
	// cordons are the cordoned nodes; nil when the controller cannot read
	// nodes. cordonsChanged wakes Run's goroutine when they change.
	cordons        *cordonSource
	cordonsChanged chan struct{}
	nodeErrors     distinctErrors
	// readable are the addresses of the healthy servers, those that do not
	// drain first, which a node client without a kubeconfig reads through.
	readable atomic.Pointer[[]string]
	// clusterChanged wakes Run's goroutine when what the cluster announces
	// may have changed; roster is what it keeps of the membership.
	clusterChanged chan struct{}
	roster         roster

	// Touched only by Run's goroutine (and, during a probe, each server's own
	// goroutine for its serverState).
	servers    map[string]*serverState
	generation uint64
	// lastContent is the last built snapshot encoded with generation 1: what
	// the servers looked like, whatever the generation; spareContent is the
	// buffer the next one is encoded into.
	lastContent, spareContent []byte
	pending                   *Published
	// schemas are the servers' reduced OpenAPI v3 documents; labelTables
	// the built-in resources' field-selector labels per minor version.
	schemas     *schemas
	labelTables []labelTable
	// fieldKnowledge is the last computeFieldKnowledge, of the servers
	// whose key is fieldKeyLast; fieldKey is where the next key is built.
	fieldKnowledge         *fieldKnowledge
	fieldKey, fieldKeyLast []byte
	// unpublishable is set when lastContent could not become a snapshot (no
	// server, or invalid), so the current snapshot is behind.
	unpublishable bool

	// mu guards current, the last snapshot handed over, for readers outside
	// Run's goroutine.
	mu      sync.Mutex
	current *Published
}

// published is a snapshot together with where its clusters live.
// Published is a snapshot as the controller hands it over.
type Published struct {
	// Raw is the snapshot document; Snapshot its parsed form. Neither may be
	// modified.
	Raw      []byte
	Snapshot *discovery.Snapshot
	// Addresses maps every server's cluster name to its host:port, for whoever
	// routes to those clusters.
	Addresses map[string]string
}

// serverState is everything known about the server at one address.
type serverState struct {
	address     string
	id, cluster string
	// inDiscovery is set while the server is a member (desiredMembers).
	inDiscovery bool
	lastSeen    time.Time // when it was last a member

	healthy     bool
	lastHealthy time.Time
	// drainingNode names the cordoned node the server runs on; "" when it
	// is not draining.
	drainingNode string
	// failures counts the consecutive probes that got no answer.
	failures   int
	version    string
	apis, core fetched[discovery.GroupList]
	// openAPI is the server's /openapi/v3 index; a server without one (never
	// fetched, or refused) still serves its APIs.
	openAPI fetched[[]discovery.OpenAPIPath]
	// lastErrors holds the failure reason per path, so that a persisting
	// failure is logged once and its recovery too.
	lastErrors map[string]string
}

func (s *serverState) complete() bool {
	return s.apis.ok && s.core.ok && s.version != ""
}

func (s *serverState) forgetDocuments() {
	s.apis, s.core, s.openAPI, s.version = fetched[discovery.GroupList]{}, fetched[discovery.GroupList]{}, fetched[[]discovery.OpenAPIPath]{}, ""
}

// snapshotServer is the server as the snapshot describes it.
func (s *serverState) snapshotServer() discovery.Server {
	srv := discovery.Server{ID: s.id, Cluster: s.cluster, Version: s.version, Healthy: s.healthy,
		Draining: s.drainingNode != "", APIs: s.apis.value, Core: s.core.value}
	if s.openAPI.ok {
		srv.OpenAPI = s.openAPI.value
	}
	return srv
}

// New validates opts and prepares a Controller; Run starts it.
func New(opts Options) (*Controller, error) {
	o, err := opts.complete()
	if err != nil {
		return nil, err
	}
	client, err := newBackendClient(o)
	if err != nil {
		return nil, err
	}
	static, local, err := ParseServers(o.StaticServers, o.LocalServer)
	if err != nil {
		return nil, fmt.Errorf("controller: %w", err)
	}
	tables, err := builtinLabelTables()
	if err != nil {
		return nil, fmt.Errorf("controller: %w", err)
	}
	c := &Controller{
		opts:           o,
		log:            o.Logger,
		fetcher:        &fetcher{timeout: o.RequestTimeout, maxBytes: o.MaxResponseBytes},
		static:         static,
		local:          local,
		metrics:        newMetrics(),
		notices:        newNotices(o.Logger),
		lost:           make(chan string, maxPendingLostReports),
		cordonsChanged: make(chan struct{}, 1),
		clusterChanged: make(chan struct{}, 1),
		servers:        map[string]*serverState{},
		schemas:        newSchemas(),
		labelTables:    tables,
	}
	c.fetcher.client.Store(client)
	o.PeerCA.OnChange(c.renewClient)
	c.frontProxyCheckDue.Store(o.CheckFrontProxyCertificate)
	if o.FrontProxyCertificate != nil {
		o.FrontProxyCertificate.OnChange(func() {
			c.renewClient()
			// A new certificate may be trusted differently.
			c.frontProxyCheckDue.Store(o.CheckFrontProxyCertificate)
		})
	}
	listers := o.Cluster
	if listers == nil && o.RESTConfig != nil {
		if listers, err = clusterListersFor(o.RESTConfig); err != nil {
			return nil, fmt.Errorf("controller: cluster client: %w", err)
		}
	}
	var nodes cache.ListerWatcher
	switch {
	case listers != nil:
		c.cluster = newClusterSource(*listers, c.announcementChanged, c.clusterWatchFailed)
		nodes = listers.Nodes
	case o.FrontProxyCertificate != nil:
		transport := &throughServers{client: c.fetcher.client.Load, healthy: &c.readable}
		// The host is never dialled: the transport picks a server.
		if nodes, err = nodeLister(&rest.Config{Host: "https://apiservers.invalid", Transport: transport}); err != nil {
			return nil, fmt.Errorf("controller: node client: %w", err)
		}
	}
	if nodes != nil {
		c.cordons = newCordonSource(nodes, c.cordonChanged, c.nodeWatchFailed)
	}
	return c, nil
}

// renewClient makes new connections use the current peer CA and front-proxy
// certificate. Requests in flight finish on their connections, which close
// once idle.
func (c *Controller) renewClient() {
	client, err := newBackendClient(c.opts)
	if err != nil {
		c.log.Error("the new peer CA or front-proxy certificate cannot be used; keeping the previous", "err", err)
		return
	}
	c.fetcher.client.Swap(client).http.CloseIdleConnections()
}

// Run probes every server's /readyz each ReadinessInterval, refreshes
// membership and documents each PollInterval and publishes snapshots until
// ctx is done, then returns nil. It returns an error only if called twice.
func (c *Controller) Run(ctx context.Context) error {
	if !c.running.CompareAndSwap(false, true) {
		return errors.New("controller: Run called twice")
	}
	defer func() { c.fetcher.client.Load().http.CloseIdleConnections() }()
	// Runs before the deferred close above: the fetches use ctx, which is
	// done when Run returns.
	defer c.schemas.running.Wait()
	if c.cordons != nil {
		defer c.cordons.stop()
		c.cordons.start(ctx)
	}
	if c.cluster != nil {
		defer c.cluster.stop()
		c.cluster.start(ctx)
	}
	ticker := time.NewTicker(c.opts.ReadinessInterval)
	defer ticker.Stop()
	// Counting rounds rather than comparing clocks keeps a full poll from
	// slipping by a round when ticks jitter.
	every := int(c.opts.PollInterval / c.opts.ReadinessInterval)
	for round := 0; ; round++ {
		c.poll(ctx, round%every == 0)
		for waiting := true; waiting; {
			select {
			case <-ctx.Done():
				return nil
			case <-ticker.C:
				waiting = false
			case cluster := <-c.lost:
				c.markLost(ctx, cluster)
			case <-c.cordonsChanged:
				c.publish(ctx, time.Now(), c.snapshotServers())
			case <-c.clusterChanged:
				// A server that joined is probed, and one that left taken out
				// of routing, now rather than at the next full round.
				if c.membershipChanged() {
					c.poll(ctx, true)
				}
			}
		}
	}
}

// ServerLost reports that a connection to the server of cluster failed, or
// was lost before it answered, under a request: a server that died, or
// restarted between two probes, which must not be sent requests until a
// probe finds it ready with fresh documents (back from a restart, it may
// answer before its authorizer has loaded, or be another version). It never
// blocks; reports beyond what Run keeps up with are dropped, as they say
// the same.
func (c *Controller) ServerLost(cluster string) {
	select {
	case c.lost <- cluster:
	default:
	}
}

// cordonChanged tells Run that a node was cordoned or uncordoned; the
// snapshot that says which servers drain is published at once, not at the
// next probe, as the kubelet's restart may follow the cordon within a
// second.
func (c *Controller) cordonChanged() {
	select {
	case c.cordonsChanged <- struct{}{}:
	default:
	}
}

// announcementChanged tells Run that the cluster's identity leases or
// EndpointSlices changed, or were read for the first time.
func (c *Controller) announcementChanged() {
	select {
	case c.clusterChanged <- struct{}{}:
	default:
	}
}

func (c *Controller) clusterWatchFailed(err error) {
	c.log.Warn("cannot list or watch the API servers' identity leases or the kubernetes EndpointSlices: the members stay those of the last read, or the listed servers before the first; does the controller's identity have rbac.yaml's leases and endpointslices list and watch?", "err", err)
}

func (c *Controller) nodeWatchFailed(err error) {
	if errors.Is(err, errNoHealthyServer) {
		// Before the first probe, or while every server is down: the
		// informer tries again, and nothing is wrong with its permissions.
		c.log.Debug("no healthy API server to read the cordoned nodes from yet")
		return
	}
	if c.nodeErrors.isNew(err) {
		c.log.Warn("cannot watch the cordoned nodes, so the API servers of cordoned nodes are not drained; does the controller's identity have rbac.yaml's nodes list and watch?", "err", err)
	}
}

// updateDraining marks draining the servers on cordoned nodes (see
// cordonedNodesSelector), matching a server's address to the nodes'
// addresses.
func (c *Controller) updateDraining() {
	var addrs map[netip.Addr]string
	if c.cordons != nil {
		addrs = drainingAddresses(c.cordons.cordoned())
	}
	for _, s := range c.servers {
		node := ""
		if ap, err := netip.ParseAddrPort(s.address); err == nil {
			node = addrs[ap.Addr().Unmap()]
		}
		switch {
		case node == s.drainingNode:
			continue
		case node != "":
			c.log.Info("API server draining: its node is cordoned; it is sent only what no other server serves", "address", s.address, "id", s.id, "node", node)
		default:
			c.log.Info("API server no longer draining: its node is uncordoned", "address", s.address, "id", s.id, "node", s.drainingNode)
		}
		s.drainingNode = node
	}
}

// updateReadable keeps readable current with the servers' health and
// draining.
func (c *Controller) updateReadable() {
	var healthy, active []string
	for _, s := range c.servers {
		if s.healthy {
			healthy = append(healthy, s.address)
			if s.drainingNode == "" {
				active = append(active, s.address)
			}
		}
	}
	if len(active) > 0 {
		healthy = active
	}
	slices.Sort(healthy)
	c.readable.Store(&healthy)
}

// maxPendingLostReports bounds the ServerLost reports waiting for Run: more
// than one per server of a snapshot would only repeat one another.
const maxPendingLostReports = discovery.MaxServers

// markLost marks the healthy server of cluster unhealthy and publishes at
// once; its next probe, which refreshes its documents, decides when it is
// healthy again.
func (c *Controller) markLost(ctx context.Context, cluster string) {
	for _, s := range c.servers {
		if s.cluster != cluster || !s.healthy {
			continue
		}
		s.healthy = false
		c.log.Warn("API server marked unhealthy: a connection to it failed under a request", "address", s.address, "id", s.id)
		c.publish(ctx, time.Now(), c.snapshotServers())
		return
	}
}

// poll is one round: probe every server and publish. A full round also
// updates membership and refreshes every server's documents; the others
// probe only /readyz of the healthy servers.
func (c *Controller) poll(ctx context.Context, full bool) {
	if full {
		c.reconcileMembers(time.Now())
	}
	c.probeAll(ctx, full)
	if full {
		c.checkFrontProxyCertificate(ctx)
	}
	if ctx.Err() != nil {
		return
	}
	now := time.Now()
	c.expireUnhealthy(now)
	states := c.snapshotServers()
	c.updateSchemas(ctx, now, states)
	c.publish(ctx, now, states)
	if full {
		c.notices.endRound()
	}
}

// leaseIDsByAddress maps each announced address to its lease name. When two
// leases announce one address, the more recently renewed one is the live
// server (a replaced server's lease outlives it by up to two hours).
func (c *Controller) leaseIDsByAddress(leases []*coordinationv1.Lease) map[string]string {
	chosen := map[string]*coordinationv1.Lease{}
	for _, l := range leases {
		address, err := leaseAddress(l)
		if errors.Is(err, errNoPeerAddress) {
			continue
		}
		if err != nil {
			c.notices.warn("lease/"+l.Namespace+"/"+l.Name+"/"+err.Error(), "ignoring identity lease",
				"lease", l.Namespace+"/"+l.Name, "reason", err.Error())
			continue
		}
		if prev, ok := chosen[address]; ok && !renewedLater(l, prev) {
			continue
		}
		chosen[address] = l
	}
	ids := make(map[string]string, len(chosen))
	for address, l := range chosen {
		ids[address] = l.Name
	}
	return ids
}

func renewedLater(a, b *coordinationv1.Lease) bool {
	var at, bt time.Time
	if a.Spec.RenewTime != nil {
		at = a.Spec.RenewTime.Time
	}
	if b.Spec.RenewTime != nil {
		bt = b.Spec.RenewTime.Time
	}
	if !at.Equal(bt) {
		return at.After(bt)
	}
	return a.Name < b.Name
}

// reconcileMembers starts tracking new members, takes servers that are no
// members any more out of routing, and forgets those that have been no
// member for longer than the grace period, or whose name a current member
// now holds (the same server came back at another address).
func (c *Controller) reconcileMembers(now time.Time) {
	desired := c.desiredMembers()
	current := map[string]bool{}
	takenIDs, takenClusters := map[string]bool{}, map[string]bool{}
	for _, m := range desired {
		current[m.address] = true
		takenIDs[m.id], takenClusters[m.cluster] = true, true
		s := c.servers[m.address]
		if s == nil {
			s = &serverState{address: m.address, lastErrors: map[string]string{}}
			c.servers[m.address] = s
			c.log.Info("API server discovered", "address", m.address, "id", m.id, "cluster", m.cluster, "sources", m.sources.list())
		} else if s.id != m.id {
			c.log.Info("API server ID changed", "address", m.address, "from", s.id, "to", m.id)
		}
		s.id, s.cluster, s.inDiscovery, s.lastSeen = m.id, m.cluster, true, now
	}
	for address, s := range c.servers {
		if current[address] {
			continue
		}
		switch {
		case takenIDs[s.id] || takenClusters[s.cluster]:
			c.log.Info("API server forgotten: its ID is now at another address", "address", address, "id", s.id)
			c.forget(address)
		case now.Sub(s.lastSeen) > c.opts.GracePeriod:
			c.log.Info("API server forgotten: no member for longer than the grace period", "address", address, "id", s.id)
			c.forget(address)
		case s.inDiscovery:
			s.inDiscovery, s.healthy = false, false
			c.log.Warn("API server is no member any more: not routed to; it stays in the snapshot, unhealthy, for the grace period", "address", address, "id", s.id, "grace", c.opts.GracePeriod)
		}
	}
}

func (c *Controller) forget(address string) {
	delete(c.servers, address)
	c.metrics.forgetServer(address)
}

// probeAll probes every server, at most MaxConcurrentFetches at once. Outside
// full rounds only unhealthy servers have their documents fetched, so that
// one returning is healthy again with what it serves now.
func (c *Controller) probeAll(ctx context.Context, full bool) {
	slots := make(chan struct{}, c.opts.MaxConcurrentFetches)
	var wg sync.WaitGroup
	for _, s := range c.servers {
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			c.probe(ctx, s, full || !s.healthy)
		})
	}
	wg.Wait()
	healthy := 0
	for _, s := range c.servers {
		if s.healthy {
			healthy++
		}
	}
	c.metrics.servers(len(c.servers), healthy)
}

// probe checks /readyz and, when the server is ready and withDocuments is
// set, refreshes its version and documents; every failure keeps what was
// there. An unhealthy server becomes healthy only once all of them are
// fresh: a server back from a restart may be another version.
func (c *Controller) probe(ctx context.Context, s *serverState, withDocuments bool) {
	if ferr := c.fetcher.readyz(ctx, s.address); ferr != nil {
		c.fetchFailed(ctx, s, ferr)
		if ctx.Err() != nil {
			return
		}
		s.failures++
		// A draining server is about to be restarted: whatever the failure,
		// it is the restart, and its node may be uncordoned before the
		// server is back.
		if s.healthy && (ferr.conclusive() || s.failures >= c.opts.FailureThreshold || s.drainingNode != "") {
			s.healthy = false
			c.log.Warn("API server marked unhealthy", "address", s.address, "id", s.id, "reason", ferr.reason, "consecutive_failures", s.failures, "draining", s.drainingNode != "")
		}
		return
	}
	s.failures = 0
	s.lastHealthy = time.Now()
	c.fetchSucceeded(s, pathReadyz)
	if !withDocuments {
		return
	}
	fresh := true
	if version, ferr := c.fetcher.version(ctx, s.address); ferr != nil {
		c.fetchFailed(ctx, s, ferr)
		fresh = false
	} else {
		s.version = version
		c.fetchSucceeded(s, pathVersion)
	}
	for _, d := range []struct {
		path string
		doc  *fetched[discovery.GroupList]
	}{{pathAPIs, &s.apis}, {pathCore, &s.core}} {
		doc, ferr := c.fetcher.document(ctx, s.address, d.path, *d.doc)
		if ferr != nil {
			c.fetchFailed(ctx, s, ferr)
			fresh = false
			continue
		}
		*d.doc = doc
		c.fetchSucceeded(s, d.path)
	}
	// The OpenAPI index does not decide health: without it the merged index
	// just lacks the server's paths.
	if doc, ferr := c.fetcher.openAPIIndex(ctx, s.address, s.openAPI); ferr != nil {
		c.fetchFailed(ctx, s, ferr)
	} else {
		s.openAPI = doc
		c.fetchSucceeded(s, pathOpenAPI)
	}
	// A server that is no member stays unhealthy however it answers.
	if !s.healthy && fresh && s.inDiscovery {
		s.healthy = true
		c.log.Info("API server healthy", "address", s.address, "id", s.id, "version", s.version)
	}
}

func (c *Controller) fetchFailed(ctx context.Context, s *serverState, ferr *fetchError) {
	if ctx.Err() != nil {
		return // shutting down: not the server's fault
	}
	c.metrics.fetchError(s.address, ferr)
	if s.lastErrors[ferr.path] != ferr.reason {
		c.log.Warn("API server request failed; keeping its last good answer", "address", s.address, "id", s.id,
			"path", ferr.path, "reason", ferr.reason, "err", ferr.err)
	}
	s.lastErrors[ferr.path] = ferr.reason
}

func (c *Controller) fetchSucceeded(s *serverState, path string) {
	if reason, failed := s.lastErrors[path]; failed {
		c.log.Info("API server request recovered", "address", s.address, "id", s.id, "path", path, "after", reason)
		delete(s.lastErrors, path)
	}
}

// expireUnhealthy drops the documents of servers that have not been healthy
// for longer than the grace period, which takes them out of the snapshot.
func (c *Controller) expireUnhealthy(now time.Time) {
	for _, s := range c.servers {
		if !s.healthy && s.complete() && now.Sub(s.lastHealthy) > c.opts.GracePeriod {
			c.log.Warn("API server removed from the snapshot: unhealthy for longer than the grace period",
				"address", s.address, "id", s.id, "grace", c.opts.GracePeriod)
			s.forgetDocuments()
		}
	}
}

// publish builds the snapshot of the servers (snapshotServers) and hands it
// over when it changed, or when the previous hand-over failed.
func (c *Controller) publish(ctx context.Context, now time.Time, states []*serverState) {
	c.updateDraining()
	c.updateReadable()
	if unnumbered := c.unnumbered(states); c.changed(unnumbered) {
		c.pending = c.build(states, unnumbered)
		c.unpublishable = c.pending == nil
	}
	if c.pending != nil {
		if err := c.opts.OnSnapshot(ctx, *c.pending); err != nil {
			c.metrics.publishError()
			c.log.Error("publishing the snapshot failed; retrying on the next poll", "generation", c.pending.Snapshot.Generation, "err", err)
			return
		}
		c.mu.Lock()
		c.current = c.pending
		c.mu.Unlock()
		c.pending = nil
		c.metrics.published(c.current.Snapshot.Generation, len(c.current.Snapshot.Servers))
		c.log.Info("snapshot published", "generation", c.current.Snapshot.Generation, "servers", len(c.current.Snapshot.Servers))
	}
	if !c.unpublishable && slices.ContainsFunc(states, func(s *serverState) bool { return s.healthy }) {
		c.metrics.pollSucceeded(now)
	}
}

// unnumbered is the snapshot of the servers (the snapshotServers) with
// generation 1: encoded, it tells whether anything but the generation
// changed.
func (c *Controller) unnumbered(states []*serverState) *discovery.Snapshot {
	fields := c.fieldKnowledgeFor(states)
	snap := &discovery.Snapshot{Generation: 1, Servers: make([]discovery.Server, len(states)), FieldSkew: fields.skew}
	for i, s := range states {
		snap.Servers[i] = s.snapshotServer()
		snap.Servers[i].FieldSelectors, snap.Servers[i].MissingFields = fields.servers[i].selectors, fields.servers[i].missing
		if s.address == c.local {
			// Until the local server has documents it is not in the snapshot,
			// and requests are balanced over the others.
			snap.Preferred = s.id
		}
	}
	return snap
}

// changed reports whether the unnumbered snapshot differs from the last one
// built. The encodings are written into two buffers used in turn, so a poll
// that changes nothing allocates none.
func (c *Controller) changed(unnumbered *discovery.Snapshot) bool {
	content := unnumbered.AppendJSON(c.spareContent[:0])
	if bytes.Equal(content, c.lastContent) {
		c.spareContent = content
		return false
	}
	c.lastContent, c.spareContent = content, c.lastContent
	return true
}

// build numbers and checks a new snapshot of the servers (states in the
// same order); nil means there is nothing publishable and the current
// snapshot stays.
func (c *Controller) build(states []*serverState, unnumbered *discovery.Snapshot) *Published {
	if len(states) == 0 {
		if c.current != nil {
			c.log.Warn("no API server left in the snapshot; the last published snapshot stays current")
		}
		return nil
	}
	c.generation++
	snap, err := discovery.NewSnapshot(c.generation, unnumbered.Preferred, unnumbered.Servers)
	if err == nil && unnumbered.FieldSkew != nil {
		// NewSnapshot takes no FieldSkew: the snapshot is checked again with it.
		snap.FieldSkew = unnumbered.FieldSkew
		err = snap.Validate()
	}
	if err != nil {
		c.metrics.invalidSnapshot()
		c.log.Error("built snapshot is invalid and was not published", "generation", c.generation, "err", err)
		return nil
	}
	addresses := make(map[string]string, len(states))
	for _, s := range states {
		addresses[s.cluster] = s.address
	}
	return &Published{Raw: snap.AppendJSON(nil), Snapshot: snap, Addresses: addresses}
}

// snapshotServers are the servers with documents, sorted by ID, at most
// discovery.MaxServers of them.
func (c *Controller) snapshotServers() []*serverState {
	var servers []*serverState
	for _, s := range c.servers {
		if s.complete() {
			servers = append(servers, s)
		}
	}
	slices.SortFunc(servers, func(a, b *serverState) int { return cmp.Compare(a.id, b.id) })
	if len(servers) > discovery.MaxServers {
		c.notices.warn("too-many-servers", "more API servers than a snapshot holds; the ones sorting last by ID are left out",
			"servers", len(servers), "max", discovery.MaxServers)
		servers = servers[:discovery.MaxServers]
	}
	return servers
}

// notices logs each distinct problem once while it persists: a bad lease is
// reported when it appears, not on every poll.
type notices struct {
	log           *slog.Logger
	seen, current map[string]bool
}

func newNotices(log *slog.Logger) *notices {
	return &notices{log: log, seen: map[string]bool{}, current: map[string]bool{}}
}

func (n *notices) warn(key, msg string, args ...any) { n.note(slog.LevelWarn, key, msg, args...) }

func (n *notices) info(key, msg string, args ...any) { n.note(slog.LevelInfo, key, msg, args...) }

func (n *notices) note(level slog.Level, key, msg string, args ...any) {
	n.current[key] = true
	if !n.seen[key] {
		n.seen[key] = true
		n.log.Log(context.Background(), level, msg, args...)
	}
}

// endRound forgets problems that were not reported again this round.
func (n *notices) endRound() {
	n.seen, n.current = n.current, map[string]bool{}
}
