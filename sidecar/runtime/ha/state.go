package ha

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/hetgpu/hetgpu/sidecar/runtime/store"
)

// Blob names under the state prefix.
const (
	// BlobRuns holds RunsState: the learned runs with their claims (the predictor's window)
	// and the decision sequence.
	BlobRuns = "runs"
	// BlobPolicy holds the checkpoint online tuning adopted last.
	BlobPolicy = "policy"
)

// RunsState is what a new leader needs to continue learning and numbering decisions.
type RunsState struct {
	Version int `json:"version"`
	// Leader is the replica that wrote it, At when.
	Leader string    `json:"leader"`
	At     time.Time `json:"at"`
	// DecisionSeq is the number of the last decision record.
	DecisionSeq uint64 `json:"decision_seq"`
	// Observations are the newest stored runs, oldest first, each with the claims it was
	// stored under (its allocation, the request's key or its content hash): the learned-runs
	// set a new leader checks a reported run against.
	Observations []store.ObservationRecord `json:"observations"`
	// EstimateSamples is the leader's runtime-estimate calibration window (store meta
	// store.MetaEstimateSamples), so a new leader reads estimates as the old one did.
	EstimateSamples json.RawMessage `json:"estimate_samples,omitempty"`
	// RuntimeHistory is the leader's runtime history window (store meta
	// store.MetaRuntimeHistory), so a new leader reads jobs without hetgpu.runtime as the old
	// one did.
	RuntimeHistory json.RawMessage `json:"runtime_history,omitempty"`
}

// Shared copies the local store's runs to Nomad Variables and back. Safe for concurrent use.
type Shared struct {
	Blobs *Blobs
	Store *store.Store
	// Window is how many of the newest stored runs are shared (the predictor's window).
	Window int
	// ID names the writer in the state.
	ID     string
	Logger hclog.Logger

	mu        sync.Mutex
	requested uint64 // Publish calls so far
	done      uint64 // calls a finished write covered
	lastErr   error
	pubMu     sync.Mutex
	seqShared uint64
}

// Publish writes the newest Window stored runs and the decision sequence. Concurrent calls
// share writes: a call returns once a write that started after it was called finished, so
// what the caller stored before calling is in Nomad when it returns nil.
func (s *Shared) Publish(ctx context.Context) error {
	s.mu.Lock()
	s.requested++
	want := s.requested
	s.mu.Unlock()
	s.pubMu.Lock()
	defer s.pubMu.Unlock()
	s.mu.Lock()
	if s.done >= want {
		err := s.lastErr
		s.mu.Unlock()
		return err
	}
	covers := s.requested
	s.mu.Unlock()
	err := s.publish(ctx)
	s.mu.Lock()
	s.done, s.lastErr = covers, err
	s.mu.Unlock()
	return err
}

// PublishIfNewer publishes when decisions were recorded since the last write (the
// decision sequence stays current without a write per round).
func (s *Shared) PublishIfNewer(ctx context.Context) error {
	s.mu.Lock()
	shared := s.seqShared
	s.mu.Unlock()
	if s.Store.DecisionSeq() == shared {
		return nil
	}
	return s.Publish(ctx)
}

func (s *Shared) publish(ctx context.Context) error {
	st := RunsState{Version: 1, Leader: s.ID, At: time.Now().UTC(), DecisionSeq: s.Store.DecisionSeq()}
	if raw := s.Store.Meta(store.MetaEstimateSamples); raw != "" && json.Valid([]byte(raw)) {
		st.EstimateSamples = json.RawMessage(raw)
	}
	if raw := s.Store.Meta(store.MetaRuntimeHistory); raw != "" && json.Valid([]byte(raw)) {
		st.RuntimeHistory = json.RawMessage(raw)
	}
	window := s.Window
	if window <= 0 {
		window = 1000
	}
	err := s.Store.ObservationsNewest(func(r store.ObservationRecord) error {
		if len(st.Observations) >= window {
			return store.ErrStop
		}
		st.Observations = append(st.Observations, r)
		return nil
	})
	if err != nil {
		return fmt.Errorf("share the stored runs: %w", err)
	}
	for i, j := 0, len(st.Observations)-1; i < j; i, j = i+1, j-1 {
		st.Observations[i], st.Observations[j] = st.Observations[j], st.Observations[i]
	}
	data, err := json.Marshal(st)
	if err != nil {
		return err
	}
	if err := s.Blobs.Put(ctx, BlobRuns, data); err != nil {
		return err
	}
	s.mu.Lock()
	s.seqShared = st.DecisionSeq
	s.mu.Unlock()
	return nil
}

// Load reads the shared runs into the local store: each run whose claims the store lacks
// is added (a run the store already holds, under any of its claims, is skipped), and the
// decision sequence is raised to the shared one. It returns how many runs it added; the
// service then learns those (service.CatchUp) exactly once.
func (s *Shared) Load(ctx context.Context) (int, error) {
	data, ok, err := s.Blobs.Get(ctx, BlobRuns)
	if err != nil || !ok {
		return 0, err
	}
	var st RunsState
	if err := json.Unmarshal(data, &st); err != nil {
		return 0, fmt.Errorf("shared state %s: %w", s.Blobs.path(BlobRuns), err)
	}
	recs := make([]store.NewObservation, 0, len(st.Observations))
	for _, r := range st.Observations {
		recs = append(recs, store.NewObservation{Obs: r.Obs, Source: r.Source, Claims: r.Claims})
	}
	added := 0
	if len(recs) > 0 {
		out, err := s.Store.AddObservations(recs, time.Now())
		if err != nil {
			return 0, fmt.Errorf("load the shared runs into the local store: %w", err)
		}
		for _, o := range out {
			if !o.Duplicate {
				added++
			}
		}
	}
	if err := s.Store.RaiseDecisionSeq(st.DecisionSeq); err != nil {
		return added, err
	}
	if len(st.EstimateSamples) > 0 {
		if err := s.Store.PutMeta(store.MetaEstimateSamples, string(st.EstimateSamples)); err != nil {
			return added, fmt.Errorf("load the shared estimate calibration: %w", err)
		}
	}
	if len(st.RuntimeHistory) > 0 {
		if err := s.Store.PutMeta(store.MetaRuntimeHistory, string(st.RuntimeHistory)); err != nil {
			return added, fmt.Errorf("load the shared runtime history: %w", err)
		}
	}
	s.mu.Lock()
	s.seqShared = st.DecisionSeq
	s.mu.Unlock()
	return added, nil
}

// PublishFile shares a file (the tuned policy checkpoint) as blob name.
func (s *Shared) PublishFile(ctx context.Context, name, path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("share %s: %w", path, err)
	}
	return s.Blobs.Put(ctx, name, data)
}

// LoadFile writes blob name to path when it was shared and differs from the file; it
// reports whether it wrote.
func (s *Shared) LoadFile(ctx context.Context, name, path string) (bool, error) {
	data, ok, err := s.Blobs.Get(ctx, name)
	if err != nil || !ok {
		return false, err
	}
	if cur, err := os.ReadFile(path); err == nil && string(cur) == string(data) {
		return false, nil
	} else if err != nil && !errors.Is(err, os.ErrNotExist) {
		return false, err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return false, err
	}
	return true, os.Rename(tmp, path)
}
