package store

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/hetgpu/hetgpu/model/cluster"
)

// Decision statuses.
const (
	StatusPinned    = "pinned"     // Nomad accepted the pin
	StatusConflict  = "conflict"   // the job changed underneath; decided again next round
	StatusPinFailed = "pin_failed" // the backend failed; decided again next round
	StatusGone      = "gone"       // deregistered; dropped
	StatusShadow    = "shadow"     // decided, not pinned (shadow mode)
	StatusReheld    = "reheld"     // the pin failed (node/GPU fault); decided again
	StatusInvalid   = "invalid"    // malformed annotations; the job stays held
)

// DecisionRecord is one decision (or event about a job's placement) with what explains it.
type DecisionRecord struct {
	Seq       uint64    `json:"seq"`
	Time      time.Time `json:"time"`
	Round     uint64    `json:"round"`
	JobKey    string    `json:"job_key"`
	Namespace string    `json:"namespace"`
	JobID     string    `json:"job_id"`
	Group     string    `json:"group"`
	Status    string    `json:"status"`
	// Message is the error, conflict or re-hold reason.
	Message        string            `json:"message,omitempty"`
	Decision       *cluster.Decision `json:"decision,omitempty"`
	JobModifyIndex uint64            `json:"job_modify_index,omitempty"`
	// Rank (1-based) and Score in the round's ranked queue of QueueLen jobs.
	Rank     int                `json:"rank,omitempty"`
	QueueLen int                `json:"queue_len,omitempty"`
	Score    float64            `json:"score,omitempty"`
	Features map[string]float64 `json:"features,omitempty"`
	// Estimates per GPU type: what the predictor expected there.
	Estimates    []Estimate    `json:"estimates,omitempty"`
	Alternatives []Alternative `json:"alternatives,omitempty"`
	Solver       string        `json:"solver,omitempty"`
	Shadow       *Shadow       `json:"shadow,omitempty"`
}

// Estimate is the prediction for the job on one GPU type.
type Estimate struct {
	GPUType     string  `json:"gpu_type"`
	GPUs        int     `json:"gpus"`
	Throughput  float64 `json:"throughput"`
	PowerW      float64 `json:"power_w"`
	Uncertainty float64 `json:"uncertainty,omitempty"`
	Source      string  `json:"source,omitempty"`
	// EnergyPerStepJ = PowerW / Throughput (J per step).
	EnergyPerStepJ float64 `json:"energy_per_step_j,omitempty"`
	// RuntimeS and EnergyJ when the job's total work (hetgpu.steps) or runtime is known.
	RuntimeS float64 `json:"runtime_s,omitempty"`
	EnergyJ  float64 `json:"energy_j,omitempty"`
	// MeetsTMin is false when the throughput is below the job's hetgpu.min_throughput.
	MeetsTMin bool `json:"meets_t_min"`
	// FreeGPUs of this type in the snapshot, and whether the job fits on them now.
	FreeGPUs int  `json:"free_gpus"`
	FitsNow  bool `json:"fits_now"`
	Chosen   bool `json:"chosen,omitempty"`
}

// Alternative is a placement considered and not taken.
type Alternative struct {
	GPUType  string   `json:"gpu_type"`
	NodeIDs  []string `json:"node_ids,omitempty"`
	NodeName string   `json:"node_name,omitempty"`
	Why      string   `json:"why"`
}

// Shadow compares a shadow decision with where Nomad placed the job.
type Shadow struct {
	NomadNodeIDs   []string  `json:"nomad_node_ids"`
	NomadDeviceIDs []string  `json:"nomad_device_ids"`
	NomadGPUType   string    `json:"nomad_gpu_type"`
	SameNodes      bool      `json:"same_nodes"`
	SameGPUType    bool      `json:"same_gpu_type"`
	NomadPredThr   float64   `json:"nomad_predicted_throughput,omitempty"`
	PlacedAt       time.Time `json:"placed_at"`
}

// PutDecision stores a record as the group's latest and appends it to the history.
func (s *Store) PutDecision(r *DecisionRecord) error { return s.PutDecisions([]*DecisionRecord{r}) }

// PutDecisions stores a round's records in one transaction (one fsync).
func (s *Store) PutDecisions(rs []*DecisionRecord) error {
	if len(rs) == 0 {
		return nil
	}
	err := s.db.Update(func(tx *bolt.Tx) error {
		h := tx.Bucket(bHistory)
		var n uint64
		for _, r := range rs {
			var err error
			if n, err = h.NextSequence(); err != nil {
				return err
			}
			r.Seq = n
			data, err := json.Marshal(r)
			if err != nil {
				return err
			}
			if err := h.Put(seqKey(n), data); err != nil {
				return err
			}
			if err := tx.Bucket(bLatest).Put([]byte(r.JobKey), data); err != nil {
				return err
			}
		}
		return trim(h, n, s.opts.MaxHistory)
	})
	if err != nil {
		return fmt.Errorf("store %d decision(s), first for %s: %w", len(rs), rs[0].JobKey, err)
	}
	return nil
}

// UpdateLatest rewrites a group's latest record in place (e.g. to add a shadow comparison).
func (s *Store) UpdateLatest(jobKey string, f func(*DecisionRecord)) error {
	return s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bLatest)
		v := b.Get([]byte(jobKey))
		if v == nil {
			return fmt.Errorf("no decision for %s", jobKey)
		}
		var r DecisionRecord
		if err := json.Unmarshal(v, &r); err != nil {
			return err
		}
		f(&r)
		data, err := json.Marshal(&r)
		if err != nil {
			return err
		}
		if err := b.Put([]byte(jobKey), data); err != nil {
			return err
		}
		// Keep the history entry in step.
		h := tx.Bucket(bHistory)
		if h.Get(seqKey(r.Seq)) != nil {
			return h.Put(seqKey(r.Seq), data)
		}
		return nil
	})
}

// Latest returns a group's latest record.
func (s *Store) Latest(jobKey string) (DecisionRecord, bool) {
	var r DecisionRecord
	ok := false
	_ = s.db.View(func(tx *bolt.Tx) error {
		if v := tx.Bucket(bLatest).Get([]byte(jobKey)); v != nil {
			ok = json.Unmarshal(v, &r) == nil
		}
		return nil
	})
	return r, ok
}

// LatestForJob returns the latest record of every group of a job.
func (s *Store) LatestForJob(ns, id string) []DecisionRecord {
	var out []DecisionRecord
	prefix := []byte(cluster.JobKey(ns, id) + "/")
	_ = s.db.View(func(tx *bolt.Tx) error {
		c := tx.Bucket(bLatest).Cursor()
		for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
			var r DecisionRecord
			if json.Unmarshal(v, &r) == nil {
				out = append(out, r)
			}
		}
		return nil
	})
	return out
}

// EachLatest calls fn for every group's latest record.
func (s *Store) EachLatest(fn func(DecisionRecord)) error {
	return s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bLatest).ForEach(func(_, v []byte) error {
			var r DecisionRecord
			if err := json.Unmarshal(v, &r); err != nil {
				return fmt.Errorf("corrupt decision record: %w", err)
			}
			fn(r)
			return nil
		})
	})
}

// Recent returns up to limit history records, newest first, optionally only after seq.
func (s *Store) Recent(limit int, afterSeq uint64) []DecisionRecord {
	var out []DecisionRecord
	_ = s.db.View(func(tx *bolt.Tx) error {
		c := tx.Bucket(bHistory).Cursor()
		for k, v := c.Last(); k != nil && len(out) < limit; k, v = c.Prev() {
			var r DecisionRecord
			if json.Unmarshal(v, &r) != nil {
				continue
			}
			if r.Seq <= afterSeq {
				break
			}
			out = append(out, r)
		}
		return nil
	})
	return out
}

// DecisionCount is the number of records in the history.
func (s *Store) DecisionCount() int {
	return s.count(bHistory)
}

// count is the number of keys in bucket.
func (s *Store) count(bucket []byte) int {
	n := 0
	_ = s.db.View(func(tx *bolt.Tx) error {
		n = tx.Bucket(bucket).Stats().KeyN
		return nil
	})
	return n
}
