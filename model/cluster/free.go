package cluster

import (
	"sync"

	"github.com/hetgpu/hetgpu/model/gpuspec"
)

// FreeIndex is a snapshot's free capacity: which GPU instances running allocations hold, and
// the free healthy instances of every device group of the nodes open to new work, per group,
// node and GPU type. Every stage that asks "what is free" reads it (Snapshot.Free), so the
// answer is the same everywhere and the scan runs once per snapshot. It is immutable once
// built and safe for concurrent readers.
type FreeIndex struct {
	groups []FreeGroup
	// holders counts the running allocations holding each instance (more than one: a shared
	// GPU), of every node, ready or not.
	holders map[instKey]int
	gpus    int
	healthy int
	byType  map[string]int
	byNode  map[string]int
}

// FreeGroup is one device group of a ready node with its free healthy instances.
type FreeGroup struct {
	Node  *Node
	Group *DeviceGroup
	// Type is the group's canonical GPU type (DeviceGroup.TypeKey).
	Type string
	// IDs are the healthy instances no running allocation holds, in the group's order. The
	// slice is shared by every reader: append to a copy.
	IDs []string
}

type instKey struct{ node, inst string }

// Free returns the snapshot's free-capacity index. A snapshot the pipeline or a backend
// indexed (Indexed) returns the index built then, as does every copy of it that keeps its
// Nodes and Running; any other snapshot builds one on each call.
func (s *Snapshot) Free() *FreeIndex {
	if f := s.free; f != nil && f.of(s) {
		return f.index()
	}
	return newFreeIndex(s)
}

// Indexed returns s with its free-capacity index attached (built at the first Free, once):
// s itself when it has one already, else a shallow copy that carries it. Call it once a snapshot's Nodes and Running are final
// and before it is shared; a copy that replaces either must be indexed again.
func (s *Snapshot) Indexed() *Snapshot {
	if f := s.free; f != nil && f.of(s) {
		return s
	}
	out := *s
	out.free = &freeMemo{nodes: s.Nodes, running: s.Running}
	return &out
}

// freeMemo is an index with the slices it is built from: copies of a snapshot share it as
// long as they share those (snapshots are immutable, so same slices, same index). It is built
// at the first Free, once, so a round that never reads a snapshot's index (the one before
// its preemptions, say) does not pay for it.
type freeMemo struct {
	nodes   []Node
	running []Alloc
	once    sync.Once
	idx     *FreeIndex
}

// index builds the index once, whichever goroutine asks first.
func (f *freeMemo) index() *FreeIndex {
	f.once.Do(func() { f.idx = newFreeIndex(&Snapshot{Nodes: f.nodes, Running: f.running}) })
	return f.idx
}

func (f *freeMemo) of(s *Snapshot) bool {
	return sameSlice(f.nodes, s.Nodes) && sameSlice(f.running, s.Running)
}

func sameSlice[T any](a, b []T) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}

func newFreeIndex(s *Snapshot) *FreeIndex {
	held := 0
	for i := range s.Running {
		held += len(s.Running[i].DeviceIDs)
	}
	f := &FreeIndex{holders: make(map[instKey]int, held), byType: map[string]int{},
		byNode: make(map[string]int, len(s.Nodes))}
	for i := range s.Running {
		a := &s.Running[i]
		for _, id := range a.DeviceIDs {
			f.holders[instKey{a.NodeID, id}]++
		}
	}
	groups, insts := 0, 0
	for i := range s.Nodes {
		if n := &s.Nodes[i]; n.Ready() {
			groups += len(n.Devices)
			for k := range n.Devices {
				insts += len(n.Devices[k].Instances)
			}
		}
	}
	// One backing array for every group's IDs: two allocations instead of one per group.
	ids := make([]string, 0, insts)
	f.groups = make([]FreeGroup, 0, groups)
	for i := range s.Nodes {
		n := &s.Nodes[i]
		if !n.Ready() {
			continue
		}
		for k := range n.Devices {
			g := &n.Devices[k]
			start := len(ids)
			for _, in := range g.Instances {
				if in.Healthy && f.holders[instKey{n.ID, in.ID}] == 0 {
					ids = append(ids, in.ID)
				}
			}
			fg := FreeGroup{Node: n, Group: g, Type: g.TypeKey(), IDs: ids[start:len(ids):len(ids)]}
			f.groups = append(f.groups, fg)
			f.healthy += g.Healthy()
			f.gpus += len(fg.IDs)
			f.byType[fg.Type] += len(fg.IDs)
			f.byNode[n.ID] += len(fg.IDs)
		}
	}
	return f
}

// Groups are the device groups of the ready nodes, in snapshot order, with their free
// healthy instances. Callers must not modify them.
func (f *FreeIndex) Groups() []FreeGroup { return f.groups }

// GPUs counts the free healthy GPUs of ready nodes.
func (f *FreeIndex) GPUs() int { return f.gpus }

// Healthy counts the healthy GPUs of ready nodes, free or not.
func (f *FreeIndex) Healthy() int { return f.healthy }

// TypeGPUs counts the free healthy GPUs of ready nodes of one canonical GPU type.
func (f *FreeIndex) TypeGPUs(typ string) int { return f.byType[typ] }

// NodeGPUs counts the free healthy GPUs of a node (0 for one not ready).
func (f *FreeIndex) NodeGPUs(nodeID string) int { return f.byNode[nodeID] }

// Holders counts the running allocations holding an instance of a node (0: it is free).
func (f *FreeIndex) Holders(nodeID, instanceID string) int {
	return f.holders[instKey{nodeID, instanceID}]
}

// TypeKey is the group's canonical GPU type, the key the predictor and the placer use: the
// backend's GPUType, else the type its name names (a MIG slice is a type of its own), else
// the name itself.
func (g *DeviceGroup) TypeKey() string {
	switch {
	case g.GPUType != "":
		return g.GPUType
	case gpuspec.TypeOf(g.Name) != "":
		return gpuspec.TypeOf(g.Name)
	}
	return g.Name
}
