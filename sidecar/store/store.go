// Package store keeps the sidecar's state across restarts in one embedded bbolt file
// (default $XDG_STATE_HOME/hetgpu/sidecar.db, else ~/.local/state/hetgpu/sidecar.db):
//
//   - observations: every measured run (from the task driver or from finished allocations),
//     the catalog the predictor is rebuilt from at start;
//   - decisions: the latest decision per task group and a bounded history of all of them;
//   - learned: the runs already fed to the learner, so a restart never feeds one twice;
//   - meta: the policy checkpoint reference and other small settings.
//
// Jobs themselves live in Nomad (held jobs stay held while the sidecar is down), so losing
// nothing here means a restart loses no job and no decision.
package store

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/hetgpu/hetgpu/sidecar/cluster"
)

var (
	bObs      = []byte("observations")
	bLatest   = []byte("decisions")
	bHistory  = []byte("decision_history")
	bLearned  = []byte("learned")
	bMeta     = []byte("meta")
	keyPolicy = []byte("policy_checkpoint")
)

// Options bound what the store keeps.
type Options struct {
	// MaxObservations kept (oldest dropped first); default 100000.
	MaxObservations int
	// MaxHistory decisions kept in the history; default 20000.
	MaxHistory int
}

// Store is the state file. Safe for concurrent use.
type Store struct {
	db   *bolt.DB
	opts Options
	path string
}

// DefaultPath is where the state lives unless configured.
func DefaultPath() string {
	dir := os.Getenv("XDG_STATE_HOME")
	if dir == "" {
		if home, err := os.UserHomeDir(); err == nil {
			dir = filepath.Join(home, ".local", "state")
		} else {
			dir = os.TempDir()
		}
	}
	return filepath.Join(dir, "hetgpu", "sidecar.db")
}

// Open opens (creating it and its directory if needed) the state file.
func Open(path string, opts Options) (*Store, error) {
	if opts.MaxObservations <= 0 {
		opts.MaxObservations = 100000
	}
	if opts.MaxHistory <= 0 {
		opts.MaxHistory = 20000
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("state directory for %s: %w", path, err)
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: 2 * time.Second})
	if err != nil {
		if errors.Is(err, bolt.ErrTimeout) || strings.Contains(err.Error(), "timeout") {
			return nil, fmt.Errorf("open state file %s: locked by another process (is another sidecar running with the same state?): %w", path, err)
		}
		return nil, fmt.Errorf("open state file %s: %w", path, err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, b := range [][]byte{bObs, bLatest, bHistory, bLearned, bMeta} {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("initialise state file %s: %w", path, err)
	}
	return &Store{db: db, opts: opts, path: path}, nil
}

// Path is the state file's path.
func (s *Store) Path() string { return s.path }

// Close closes the file.
func (s *Store) Close() error { return s.db.Close() }

func seqKey(n uint64) []byte {
	var k [8]byte
	binary.BigEndian.PutUint64(k[:], n)
	return k[:]
}

// ObservationRecord is a stored observation with where it came from.
type ObservationRecord struct {
	Seq uint64              `json:"seq"`
	Obs cluster.Observation `json:"observation"`
	// Source is "driver" (POST /v1/observations) or "sidecar" (a finished allocation).
	Source   string    `json:"source"`
	Received time.Time `json:"received"`
}

// AddObservation appends an observation to the catalog.
func (s *Store) AddObservation(o cluster.Observation, source string, received time.Time) (uint64, error) {
	var seq uint64
	err := s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bObs)
		n, err := b.NextSequence()
		if err != nil {
			return err
		}
		seq = n
		data, err := json.Marshal(ObservationRecord{Seq: n, Obs: o, Source: source, Received: received})
		if err != nil {
			return err
		}
		if err := b.Put(seqKey(n), data); err != nil {
			return err
		}
		return trim(b, n, s.opts.MaxObservations)
	})
	if err != nil {
		return 0, fmt.Errorf("store observation of %s/%s: %w", o.Namespace, o.JobID, err)
	}
	return seq, nil
}

// trim drops the entries older than the newest max of a sequence-keyed bucket.
func trim(b *bolt.Bucket, newest uint64, max int) error {
	if newest <= uint64(max) {
		return nil
	}
	cutoff := seqKey(newest - uint64(max))
	var old [][]byte
	c := b.Cursor()
	for k, _ := c.First(); k != nil && bytes.Compare(k, cutoff) <= 0; k, _ = c.Next() {
		old = append(old, append([]byte(nil), k...))
	}
	for _, k := range old {
		if err := b.Delete(k); err != nil {
			return err
		}
	}
	return nil
}

// Observations calls fn for every stored observation, oldest first.
func (s *Store) Observations(fn func(ObservationRecord) error) error {
	return s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bObs).ForEach(func(_, v []byte) error {
			var r ObservationRecord
			if err := json.Unmarshal(v, &r); err != nil {
				return fmt.Errorf("corrupt observation record: %w", err)
			}
			return fn(r)
		})
	})
}

// ObservationCount is the catalog size.
func (s *Store) ObservationCount() int {
	n := 0
	_ = s.db.View(func(tx *bolt.Tx) error {
		n = tx.Bucket(bObs).Stats().KeyN
		return nil
	})
	return n
}

// DriverObservedSince reports whether the task driver posted an observation for the group
// (namespace, job, group) at or after t.
func (s *Store) DriverObservedSince(ns, job, group string, t time.Time) bool {
	found := false
	_ = s.db.View(func(tx *bolt.Tx) error {
		c := tx.Bucket(bObs).Cursor()
		// Newest first; stop at records older than t.
		for k, v := c.Last(); k != nil; k, v = c.Prev() {
			var r ObservationRecord
			if json.Unmarshal(v, &r) != nil {
				continue
			}
			if r.Received.Before(t) && r.Obs.Time.Before(t) {
				break
			}
			if r.Source == "driver" && r.Obs.Namespace == ns && r.Obs.JobID == job && (r.Obs.Group == group || r.Obs.Group == "") {
				found = true
				return nil
			}
		}
		return nil
	})
	return found
}

// MarkLearned records that a run was fed to the learner; it reports false when it already was.
func (s *Store) MarkLearned(key string, at time.Time) (bool, error) {
	fresh := false
	err := s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bLearned)
		if b.Get([]byte(key)) != nil {
			return nil
		}
		fresh = true
		v, _ := at.MarshalText()
		return b.Put([]byte(key), v)
	})
	if err != nil {
		return false, fmt.Errorf("mark run %s learned: %w", key, err)
	}
	return fresh, nil
}

// SetPolicyCheckpoint stores the reference (path or name) of the ranking policy in use.
func (s *Store) SetPolicyCheckpoint(ref string) error {
	return s.db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bMeta).Put(keyPolicy, []byte(ref)) })
}

// PolicyCheckpoint returns the stored policy reference, "" when none.
func (s *Store) PolicyCheckpoint() string {
	var ref string
	_ = s.db.View(func(tx *bolt.Tx) error {
		ref = string(tx.Bucket(bMeta).Get(keyPolicy))
		return nil
	})
	return ref
}

// PutMeta and Meta keep small named values (e.g. the last event index seen).
func (s *Store) PutMeta(key, value string) error {
	return s.db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bMeta).Put([]byte(key), []byte(value)) })
}

// Meta returns a named value, "" when unset.
func (s *Store) Meta(key string) string {
	var v string
	_ = s.db.View(func(tx *bolt.Tx) error {
		v = string(tx.Bucket(bMeta).Get([]byte(key)))
		return nil
	})
	return v
}
