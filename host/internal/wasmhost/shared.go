package wasmhost

import (
	"sync"
)

// SharedData is the key-value store behind proxy_get_shared_data and proxy_set_shared_data, scoped by VM id and
// shared by every instance (and every Host given the same store), with cpp-host's compare-and-swap semantics.
type SharedData struct {
	mu      sync.Mutex
	nextCAS uint32
	byVM    map[string]map[string]sharedEntry
}

type sharedEntry struct {
	value []byte
	cas   uint32
}

// NewSharedData returns an empty store.
func NewSharedData() *SharedData {
	return &SharedData{nextCAS: 1, byVM: make(map[string]map[string]sharedEntry)}
}

// Get returns a copy of the value and its CAS, or false if the key was never set.
func (d *SharedData) Get(vmID, key string) ([]byte, uint32, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	e, ok := d.byVM[vmID][key]
	if !ok {
		return nil, 0, false
	}
	return append([]byte(nil), e.value...), e.cas, true
}

// get is Get without copying the value; the caller must not keep or modify it (values are never mutated in place).
func (d *SharedData) get(vmID string, key []byte) ([]byte, uint32, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	e, ok := d.byVM[vmID][string(key)]
	return e.value, e.cas, ok
}

// Set stores value under key. A non-zero cas must equal the key's current CAS (cpp-host ignores cas for a key
// that does not exist yet); every write assigns a new CAS, never 0.
func (d *SharedData) Set(vmID, key string, value []byte, cas uint32) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	m := d.byVM[vmID]
	if m == nil {
		m = make(map[string]sharedEntry)
		d.byVM[vmID] = m
	}
	if e, ok := m[key]; ok && cas != 0 && cas != e.cas {
		return false
	}
	m[key] = sharedEntry{value: append([]byte(nil), value...), cas: d.nextCAS}
	d.nextCAS++
	if d.nextCAS == 0 {
		d.nextCAS = 1
	}
	return true
}

// sharedQueues implements proxy_{register,resolve,enqueue,dequeue}_shared_queue for one Host.
type sharedQueues struct {
	mu      sync.Mutex
	byName  map[queueKey]uint32
	byToken map[uint32]*sharedQueue
}

type queueKey struct{ vmID, name string }

type sharedQueue struct {
	token uint32
	items [][]byte
	// owner and ownerRoot receive proxy_on_queue_ready; the latest registration wins, as in cpp-host.
	owner     *instance
	ownerRoot uint32
	// notifying coalesces proxy_on_queue_ready deliveries: set while one is scheduled.
	notifying bool
}

func newSharedQueues() *sharedQueues {
	return &sharedQueues{byName: make(map[queueKey]uint32), byToken: make(map[uint32]*sharedQueue)}
}

func (q *sharedQueues) register(vmID, name string, owner *instance, root uint32) uint32 {
	q.mu.Lock()
	defer q.mu.Unlock()
	key := queueKey{vmID, name}
	token, ok := q.byName[key]
	if !ok {
		token = uint32(len(q.byToken)) + 1
		q.byName[key] = token
		q.byToken[token] = &sharedQueue{token: token}
	}
	sq := q.byToken[token]
	sq.owner, sq.ownerRoot = owner, root
	return token
}

func (q *sharedQueues) resolve(vmID, name string) (uint32, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	token, ok := q.byName[queueKey{vmID, name}]
	return token, ok
}

// enqueue appends a copy of data and returns the queue's owner if a proxy_on_queue_ready delivery must be
// scheduled (none is pending yet).
func (q *sharedQueues) enqueue(token uint32, data []byte) (owner *instance, root uint32, notify, found bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	sq, ok := q.byToken[token]
	if !ok {
		return nil, 0, false, false
	}
	sq.items = append(sq.items, append([]byte(nil), data...))
	if sq.owner == nil || sq.notifying {
		return nil, 0, false, true
	}
	sq.notifying = true
	return sq.owner, sq.ownerRoot, true, true
}

// delivered clears the pending-delivery mark before proxy_on_queue_ready runs, so that items enqueued during the
// callback schedule another delivery.
func (q *sharedQueues) delivered(token uint32) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if sq, ok := q.byToken[token]; ok {
		sq.notifying = false
	}
}

func (q *sharedQueues) dequeue(token uint32) (data []byte, st status) {
	q.mu.Lock()
	defer q.mu.Unlock()
	sq, ok := q.byToken[token]
	switch {
	case !ok:
		return nil, statusNotFound
	case len(sq.items) == 0:
		return nil, statusEmpty
	}
	data = sq.items[0]
	sq.items[0] = nil
	sq.items = sq.items[1:]
	return data, statusOK
}
