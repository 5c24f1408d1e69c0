// The event loop and clock: the next event, advancing time, applying the events due, and
// the arrival and completion heaps.

package sim

import (
	"container/heap"
	"math"
	"sort"
)

// Now returns the simulated time in seconds.
func (e *Engine) Now() float64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.now
}

// Done reports whether every schedulable job has finished.
func (e *Engine) Done() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.future.Len() == 0 && e.nPending == 0 && len(e.running) == 0
}

// NextEvent returns the time of the next arrival or completion (+Inf when none).
func (e *Engine) NextEvent() float64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	t, _ := e.nextEvent()
	return t
}

func (e *Engine) nextEvent() (float64, bool) {
	t := math.Inf(1)
	wake := false
	if e.future.Len() > 0 {
		t = e.future[0].ArrivalS
	}
	if e.completions.Len() > 0 {
		t = math.Min(t, e.completions[0].finishAt())
	}
	if e.wake <= t {
		t, wake = e.wake, true
	}
	return t, wake
}

// AdvanceTo processes every event up to time t (no scheduling rounds: an outside scheduler
// decides through Snapshot and Pin) and sets the clock to t.
func (e *Engine) AdvanceTo(t float64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for {
		next, _ := e.nextEvent()
		if next > t {
			break
		}
		e.step(next)
	}
	if t > e.now {
		e.advance(t)
	}
}

// advance moves the clock, integrating energy and busy GPU time.
func (e *Engine) advance(t float64) {
	if t < e.now {
		return
	}
	if e.started {
		dt := t - e.acctT
		e.energyJ += e.powerW * dt
		e.busyGPUSeconds += float64(e.busyGPUs) * dt
		e.acctT = t
	}
	e.now = t
}

// step advances to t and applies every completion, arrival and wake-up due at t. It reports
// whether anything happened.
func (e *Engine) step(t float64) bool {
	e.advance(t)
	changed := false
	eps := 1e-9 * math.Max(1, math.Abs(t))
	for e.completions.Len() > 0 && e.completions[0].finishAt() <= t+eps {
		j := heap.Pop(&e.completions).(*JobState)
		e.complete(j)
		changed = true
	}
	for e.future.Len() > 0 && e.future[0].ArrivalS <= t+eps {
		e.arrive(heap.Pop(&e.future).(*JobState), t)
		changed = true
	}
	if e.wake <= t+eps {
		e.wake = math.Inf(1)
		changed = true
	}
	return changed
}

// arrive queues a job arriving at t (kept in Seq order) and starts the accounting at the
// first arrival.
func (e *Engine) arrive(j *JobState, t float64) {
	if !e.started {
		e.started, e.acctT, e.firstArrival = true, t, t
	}
	j.Status = StatusPending
	e.pending = append(e.pending, j)
	if len(e.pending) > 1 && e.pending[len(e.pending)-2].Seq > j.Seq {
		sort.SliceStable(e.pending, func(a, b int) bool { return e.pending[a].Seq < e.pending[b].Seq })
	}
	e.nPending++
}

func (j *JobState) finishAt() float64 {
	if j.Rate <= 0 {
		return math.Inf(1)
	}
	return j.lastUpdate + j.remaining/j.Rate
}

// --- heaps ---

type futureHeap []*JobState

func (h futureHeap) Len() int { return len(h) }
func (h futureHeap) Less(a, b int) bool {
	if h[a].ArrivalS != h[b].ArrivalS {
		return h[a].ArrivalS < h[b].ArrivalS
	}
	return h[a].Seq < h[b].Seq
}
func (h futureHeap) Swap(a, b int) { h[a], h[b] = h[b], h[a] }
func (h *futureHeap) Push(x any)   { *h = append(*h, x.(*JobState)) }
func (h *futureHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

type complHeap []*JobState

func (h complHeap) Len() int { return len(h) }
func (h complHeap) Less(a, b int) bool {
	fa, fb := h[a].finishAt(), h[b].finishAt()
	if fa != fb {
		return fa < fb
	}
	return h[a].Seq < h[b].Seq
}
func (h complHeap) Swap(a, b int) {
	h[a], h[b] = h[b], h[a]
	h[a].heapIdx, h[b].heapIdx = a, b
}
func (h *complHeap) Push(x any) {
	j := x.(*JobState)
	j.heapIdx = len(*h)
	*h = append(*h, j)
}
func (h *complHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	x.heapIdx = -1
	*h = old[:len(old)-1]
	return x
}
