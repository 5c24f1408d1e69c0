package place

import (
	"fmt"

	"github.com/hetgpu/hetgpu/model/cluster"
)

// Queue caps (cluster.Snapshot.Caps, written by the queue stage, sidecar/stages/queue): each limits
// the GPUs that the jobs of a set of namespaces hold together, running plus new, optionally of
// one GPU type. A queue's maximum is a cap on its own namespaces; a queue under its guarantee
// with pending work reserves what it is owed by a cap on every other namespace. They are rows
// of the MILP (and of the decomposition's type MILP), and fits/apply check them, so the greedy
// round, the rounding, the realization of every MILP solution, the backfill and the
// decomposition's repair honour them too; Verify checks them.

// capRow is one cap indexed for the model.
type capRow struct {
	cap *cluster.GPUCap
	// typ is the GPU type index counted (-1: all types; -2: a type the cluster lacks).
	typ int
	// member is by namespace index; held is what running allocations already count.
	member []bool
	held   int
}

// initCaps indexes the snapshot's caps once every namespace of the round has an index.
func (m *model) initCaps(st *state) {
	m.caps = nil
	for i := range m.snap.Caps {
		c := &m.snap.Caps[i]
		r := capRow{cap: c, typ: -1, member: make([]bool, len(m.nsNames))}
		if c.GPUType != "" {
			r.typ = -2
			if t, ok := m.typeIdx[c.GPUType]; ok {
				r.typ = t
			}
		}
		for ns, name := range m.nsNames {
			r.member[ns] = c.Covers(name)
		}
		r.held = c.Held(m.snap, nil)
		m.caps = append(m.caps, r)
	}
	st.capUsed = make([]int, len(m.caps))
	for k := range m.caps {
		st.capUsed[k] = m.caps[k].held
	}
}

// capCounts reports whether cap k counts option o's GPUs.
func (m *model) capCounts(k int, o *option) bool { return m.capCountsOn(k, o.job, o.typ) }

// capCountsOn reports whether cap k counts job ji's GPUs on GPU type t.
func (m *model) capCountsOn(k, ji, t int) bool {
	r := &m.caps[k]
	return r.member[m.jobs[ji].ns] && (r.typ == -1 || r.typ == t)
}

// capsLeft is the room of every cap in st, for the decomposition's type assignment.
func (m *model) capsLeft(st *state) []int {
	out := make([]int, len(m.caps))
	for k := range out {
		out[k] = m.capRoom(k, st)
	}
	return out
}

// capsFitOn reports whether job ji fits the caps' room left on type t; take books it.
func (m *model) capsFitOn(left []int, ji, t int, take bool) bool {
	for k := range left {
		if m.capCountsOn(k, ji, t) {
			if left[k] < m.jobs[ji].g {
				return false
			}
			if take {
				left[k] -= m.jobs[ji].g
			}
		}
	}
	return true
}

// capRoom is what cap k leaves in st (never negative).
func (m *model) capRoom(k int, st *state) int {
	return max(m.caps[k].cap.GPUs-st.capUsed[k], 0)
}

// capsFit reports whether option o stays within every cap in st.
func (m *model) capsFit(o *option, st *state) bool {
	for k := range m.caps {
		if m.capCounts(k, o) && st.capUsed[k]+m.jobs[o.job].g > m.caps[k].cap.GPUs {
			return false
		}
	}
	return true
}

// capsApply books option o against the caps.
func (m *model) capsApply(o *option, st *state) {
	for k := range m.caps {
		if m.capCounts(k, o) {
			st.capUsed[k] += m.jobs[o.job].g
		}
	}
}

// capRows adds one row per cap the scope's columns could exceed: the GPUs of the columns it
// counts <= its room in st. byJob lists the model's columns grouped by job; opt maps a model
// column to its option.
func (m *model) capRows(byJob []int, opt func(k int) *option, st *state, entry func(col int, v float64), end func(ub float64)) {
	for k := range m.caps {
		room := m.capRoom(k, st)
		worst, last := 0, -1
		for _, c := range byJob {
			if o := opt(c); m.capCounts(k, o) && o.job != last {
				last = o.job
				worst += m.jobs[o.job].g
			}
		}
		if worst <= room {
			continue
		}
		for _, c := range byJob {
			if o := opt(c); m.capCounts(k, o) {
				entry(c, float64(m.jobs[o.job].g))
			}
		}
		end(float64(room))
	}
}

// verifyCaps checks decisions against the snapshot's caps.
func verifyCaps(snap *cluster.Snapshot, ds []cluster.Decision) error {
	for i := range snap.Caps {
		c := &snap.Caps[i]
		// Running allocations alone may exceed a cap (borrowed GPUs a reclaim has not freed
		// yet); then any new GPU it counts is an error.
		if n, run := c.Held(snap, ds), c.Held(snap, nil); n > c.GPUs && n > run {
			return fmt.Errorf("%s: %d GPUs held with this round's decisions, cap %d", c.Name, n, c.GPUs)
		}
	}
	return nil
}
