package controller

import (
	"maps"

	"github.com/skewgate/skewgate/discovery"
)

// Ready reports whether a first snapshot has been published: every server
// known at the time was probed and at least one is in it.
func (c *Controller) Ready() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.current != nil
}

// Current returns the last published snapshot, or nils before the first one.
// The returned values must not be modified.
func (c *Controller) Current() (raw []byte, snap *discovery.Snapshot) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.current == nil {
		return nil, nil
	}
	return c.current.Raw, c.current.Snapshot
}

// ClusterAddresses maps every cluster name of the last published snapshot to
// its server's host:port.
func (c *Controller) ClusterAddresses() map[string]string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.current == nil {
		return nil
	}
	return maps.Clone(c.current.Addresses)
}
