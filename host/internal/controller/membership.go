package controller

import (
	"cmp"
	"maps"
	"slices"
	"sync/atomic"
)

// Membership: which servers are probed and, while healthy, routed to.
//
// Without cluster discovery the members are the listed servers:
// StaticServers and LocalServer. With it, StaticServers are a bootstrap
// list: the members until the cluster's membership has been read (both
// informers have listed, and something was announced), then, under
// MembershipCluster, the servers the cluster announces. A listed server the
// cluster does not announce stops being a member; one the cluster announces
// and no flag lists becomes one. When the cluster cannot be read any more,
// the last membership read stays: the informers keep what they last listed.
// LocalServer, the node's own server, is a member whatever the cluster says,
// but it is no bootstrap list: given alone under MembershipCluster, it joins
// with the cluster's first read, so that node-local clients never see its
// APIs alone while its peers are still unknown.
//
// A server that stops being a member is marked unhealthy at once and stays
// in the snapshot for the grace period: kube-apiserver takes its own
// endpoint out of the kubernetes Service when it shuts down, and merged
// discovery must not lose its APIs for a restart.

// Source is what names a member.
type Source string

const (
	// SourceListed is StaticServers (the --apiserver flag).
	SourceListed Source = "listed"
	// SourceLocal is LocalServer (the --local-apiserver flag).
	SourceLocal Source = "local"
	// SourceLease is an identity Lease's announced address.
	SourceLease Source = "lease"
	// SourceEndpointSlice is an endpoint of the kubernetes Service's
	// EndpointSlices.
	SourceEndpointSlice Source = "endpointslice"
)

// sources is a set of Sources, a bit each.
type sources uint8

const (
	fromListed sources = 1 << iota
	fromLocal
	fromLease
	fromEndpointSlice
)

// sourceBits are the Sources in the order they are reported.
var sourceBits = []struct {
	bit    sources
	source Source
}{{fromListed, SourceListed}, {fromLocal, SourceLocal}, {fromLease, SourceLease}, {fromEndpointSlice, SourceEndpointSlice}}

func (s sources) list() []Source {
	var list []Source
	for _, b := range sourceBits {
		if s&b.bit != 0 {
			list = append(list, b.source)
		}
	}
	return list
}

// Members is the membership of the controller's last full round.
type Members struct {
	Membership Membership
	// Cluster is set with cluster discovery; ClusterRead once the cluster
	// has announced its servers: until then the listed servers are the
	// members.
	Cluster, ClusterRead bool
	// Servers are the members, by address.
	Servers []Member
	// ListedNotInCluster are the listed servers (StaticServers, LocalServer)
	// the cluster does not announce; InClusterNotListed the servers it
	// announces that StaticServers, when they list any, do not. Both are
	// empty until the cluster has been read.
	ListedNotInCluster, InClusterNotListed []string
}

// Member is one member and what names it.
type Member struct {
	Address, ID string
	Sources     []Source
}

// Members returns the membership of the last full round; the zero Members
// before Run's first.
func (c *Controller) Members() Members {
	if m := c.roster.current.Load(); m != nil {
		return *m
	}
	return Members{}
}

// roster is what the controller keeps of the membership between rounds.
type roster struct {
	// announced is the cluster's last announcement that named a server; nil
	// before the first.
	announced map[string]announcement
	current   atomic.Pointer[Members]
}

// announcement is what the cluster says of the server at one address.
type announcement struct {
	// id is the name of the identity lease announcing it; "" if none does.
	id      string
	sources sources
}

// announcedServers reads the servers the cluster announces, by address; nil
// until it has been read.
func (c *Controller) announcedServers() map[string]announcement {
	if c.cluster == nil || !c.cluster.read() {
		return nil
	}
	leases, endpointSlices := c.cluster.list()
	announced := map[string]announcement{}
	for address, id := range c.leaseIDsByAddress(leases) {
		announced[address] = announcement{id: id, sources: fromLease}
	}
	for _, s := range endpointSlices {
		addresses, refused := sliceAddresses(s)
		for _, why := range refused {
			c.notices.warn("endpointslice/"+s.Namespace+"/"+s.Name+"/"+why, "ignoring EndpointSlice entry", "endpointslice", s.Namespace+"/"+s.Name, "reason", why)
		}
		for _, address := range addresses {
			a := announced[address]
			a.sources |= fromEndpointSlice
			announced[address] = a
		}
	}
	if len(announced) == 0 {
		// A cluster that answers has a server: announcing none means its
		// servers announce nothing (--endpoint-reconciler-type=none and no
		// peer address), not that there are none.
		c.notices.warn("cluster-announces-none", "the cluster announces no API server (no identity lease with an address, no endpoint of the kubernetes Service): the members stay those of its last announcement, or the listed servers")
		return c.roster.announced
	}
	c.roster.announced = announced
	return announced
}

// member is one address to probe and the names it goes by.
type member struct {
	address, id, cluster string
	sources              sources
}

// desiredMembers are the members, one per address (see Membership above),
// in the order that wins a name clash: the local server, the listed ones,
// the announced ones. It logs and counts where the listed servers and the
// cluster's differ, and keeps the result for Members.
func (c *Controller) desiredMembers() []member {
	announced := c.announcedServers()
	read := announced != nil
	listed := slices.DeleteFunc(slices.Clone(c.static), func(address string) bool { return address == c.local })
	mode := c.opts.Membership
	var candidates []string
	given := map[string]sources{}
	if c.local != "" {
		given[c.local] = fromLocal
		if c.cluster == nil || read || len(listed) > 0 || mode == MembershipListed {
			candidates = append(candidates, c.local)
		}
	}
	for _, address := range listed {
		given[address] |= fromListed
		if _, in := announced[address]; !read || in || mode == MembershipListed {
			candidates = append(candidates, address)
		}
	}
	if read && mode == MembershipCluster {
		candidates = append(candidates, slices.Sorted(maps.Keys(announced))...)
	}

	var members []member
	seen := map[string]bool{}
	usedIDs, usedClusters := map[string]string{}, map[string]string{}
	for _, address := range candidates {
		if seen[address] {
			continue
		}
		seen[address] = true
		a := announced[address]
		m := member{address: address, id: cmp.Or(a.id, ClusterName(address)), cluster: ClusterName(address), sources: given[address] | a.sources}
		if other := cmp.Or(usedIDs[m.id], usedClusters[m.cluster]); other != "" {
			c.notices.warn("clash/"+address+"/"+other, "ignoring API server whose ID or cluster name is already taken",
				"address", address, "id", m.id, "cluster", m.cluster, "taken_by", other)
			continue
		}
		usedIDs[m.id], usedClusters[m.cluster] = address, address
		members = append(members, m)
	}

	report := &Members{Membership: mode, Cluster: c.cluster != nil, ClusterRead: read}
	for _, m := range members {
		report.Servers = append(report.Servers, Member{Address: m.address, ID: m.id, Sources: m.sources.list()})
	}
	slices.SortFunc(report.Servers, func(a, b Member) int { return cmp.Compare(a.Address, b.Address) })
	if read {
		report.ListedNotInCluster, report.InClusterNotListed = c.membershipDifferences(announced, given, len(listed) > 0)
	}
	if read && !c.roster.wasRead() {
		c.log.Info("the cluster's API servers are read; the members are now those of the membership", "membership", mode, "members", len(members))
	}
	c.roster.current.Store(report)
	c.metrics.membership(members, len(report.ListedNotInCluster)+len(report.InClusterNotListed))
	return members
}

// membershipChanged reports whether the members differ from the servers
// tracked as members, by address or ID.
func (c *Controller) membershipChanged() bool {
	desired := c.desiredMembers()
	tracked := 0
	for _, s := range c.servers {
		if s.inDiscovery {
			tracked++
		}
	}
	return len(desired) != tracked || slices.ContainsFunc(desired, func(m member) bool {
		s := c.servers[m.address]
		return s == nil || !s.inDiscovery || s.id != m.id
	})
}

// wasRead reports whether the last full round had read the cluster.
func (r *roster) wasRead() bool {
	m := r.current.Load()
	return m != nil && m.ClusterRead
}

// membershipDifferences are the given servers (flags) the cluster does not
// announce, and, when listed is set, the announced ones no flag gives; each
// is logged once while it lasts.
func (c *Controller) membershipDifferences(announced map[string]announcement, given map[string]sources, listed bool) (notInCluster, notListed []string) {
	routed := c.opts.Membership == MembershipListed
	for _, address := range slices.Sorted(maps.Keys(given)) {
		if _, in := announced[address]; in {
			continue
		}
		notInCluster = append(notInCluster, address)
		switch {
		case address == c.local:
			c.notices.warn("local-not-discovered", "the local API server is announced by no identity lease or EndpointSlice: if it is announced at another address it is probed twice",
				"local", c.local)
		case routed:
			c.notices.warn("listed-not-in-cluster/"+address, "listed API server is not in the cluster; routed to as listed", "address", address)
		default:
			c.notices.warn("listed-not-in-cluster/"+address, "listed API server is not in the cluster: not routed to", "address", address)
		}
	}
	if !listed {
		return notInCluster, nil
	}
	for _, address := range slices.Sorted(maps.Keys(announced)) {
		if given[address] != 0 {
			continue
		}
		notListed = append(notListed, address)
		if routed {
			c.notices.info("in-cluster-not-listed/"+address, "API server in the cluster but not listed: not routed to, as the membership is the listed servers", "address", address)
		} else {
			c.notices.info("in-cluster-not-listed/"+address, "API server in the cluster but not listed: routed to", "address", address)
		}
	}
	return notInCluster, notListed
}
