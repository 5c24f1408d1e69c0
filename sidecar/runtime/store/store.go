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
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	bolt "go.etcd.io/bbolt"

	"github.com/hetgpu/hetgpu/model/cluster"
)

var (
	bObs      = []byte("observations")
	bLatest   = []byte("decisions")
	bHistory  = []byte("decision_history")
	bLearned  = []byte("learned")
	bMeta     = []byte("meta")
	bClaims   = []byte("claims")
	keyPolicy = []byte("policy_checkpoint")
)

// Options bound what the store keeps.
type Options struct {
	// MaxObservations kept (oldest dropped first); default 100000.
	MaxObservations int
	// MaxHistory decisions kept in the history; default 20000.
	MaxHistory int
	// Logger says what Open found (an empty or missing file); default none.
	Logger hclog.Logger
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
	if opts.Logger == nil {
		opts.Logger = hclog.NewNullLogger()
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("state directory for %s: %w", path, err)
	}
	// bbolt trusts the file: a truncated or overwritten one makes it fault (SIGSEGV) or
	// silently serve garbage. Check it first, so damage is an error that says what to do.
	rep, err := Check(path)
	if err != nil {
		return nil, err
	}
	switch {
	case rep.Missing:
		opts.Logger.Info("no state file; starting a new one", "path", path)
	case rep.Empty:
		// bbolt would quietly initialise it; a state file is never empty once written, so
		// what it held is lost. Say so and keep the evidence.
		aside := path + ".empty-" + time.Now().UTC().Format("20060102T150405Z")
		if err := os.Rename(path, aside); err != nil {
			return nil, fmt.Errorf("state file %s is empty (0 bytes); moving it aside: %w", path, err)
		}
		opts.Logger.Warn("state file was empty (0 bytes): the observations and decisions it held are lost; starting a new one",
			"path", path, "kept_as", aside)
	case !rep.OK():
		return nil, &CorruptError{Path: path, Problems: rep.Problems}
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: 2 * time.Second})
	if err != nil {
		if errors.Is(err, bolt.ErrTimeout) || strings.Contains(err.Error(), "timeout") {
			return nil, fmt.Errorf("open state file %s: locked by another process (is another sidecar running with the same state?): %w", path, err)
		}
		return nil, fmt.Errorf("open state file %s: %w", path, err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, b := range [][]byte{bObs, bLatest, bHistory, bLearned, bMeta, bClaims} {
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
	// Claims are the keys the record was stored under (see NewObservation); they are
	// dropped with the record when it leaves the window.
	Claims []string `json:"claims,omitempty"`
}

// NewObservation is an observation to store under its claims.
type NewObservation struct {
	Obs    cluster.Observation
	Source string
	// Claims key the record: "alloc/<alloc id>[/<task>]" for a run of a known allocation,
	// "idem/<Idempotency-Key>[/<index>]" for a request's key, "run/<key>" for a reporter's
	// own run key, "hash/<content hash>" otherwise. Two claims conflict when they are equal
	// or one is a '/'-boundary prefix of the other ("alloc/A" and "alloc/A/train"); a record
	// with any claim conflicting with a stored one is a duplicate. Empty: the content hash.
	Claims []string
}

// Outcome is what happened to one NewObservation.
type Outcome struct {
	// Seq is the stored record's sequence number; 0 for a duplicate.
	Seq uint64 `json:"seq,omitempty"`
	// Duplicate is set when a claim was already stored; DuplicateOf names it.
	Duplicate   bool   `json:"duplicate,omitempty"`
	DuplicateOf string `json:"duplicate_of,omitempty"`
}

// ContentClaim is the claim of a record with no other key: a hash of its content, so an
// identical retry is not stored twice.
func ContentClaim(o *cluster.Observation) string {
	b, _ := json.Marshal(o)
	sum := sha256.Sum256(b)
	return "hash/" + hex.EncodeToString(sum[:16])
}

// claimConflict returns the stored claim c conflicts with, "" when none: c itself, an
// ancestor of c at a '/' boundary, or a descendant of c.
func claimConflict(b *bolt.Bucket, c string) string {
	if b.Get([]byte(c)) != nil {
		return c
	}
	for i := len(c) - 1; i > 0; i-- {
		if c[i] == '/' && b.Get([]byte(c[:i])) != nil {
			return c[:i]
		}
	}
	prefix := []byte(c + "/")
	if k, _ := b.Cursor().Seek(prefix); k != nil && bytes.HasPrefix(k, prefix) {
		return string(k)
	}
	return ""
}

// AddObservation stores one observation under its content claim; see AddObservations.
func (s *Store) AddObservation(o cluster.Observation, source string, received time.Time) (uint64, error) {
	out, err := s.AddObservations([]NewObservation{{Obs: o, Source: source}}, received)
	if err != nil {
		return 0, err
	}
	return out[0].Seq, nil
}

// AddObservations stores a request's observations in one transaction: all of them (less the
// duplicates) or, on error, none. Concurrent calls share transactions (bbolt's Batch), so
// many small requests cost one fsync between them; a failing call is retried alone, so one
// request's failure never fails another's.
func (s *Store) AddObservations(recs []NewObservation, received time.Time) ([]Outcome, error) {
	if len(recs) == 0 {
		return nil, nil
	}
	for i := range recs {
		if len(recs[i].Claims) == 0 {
			recs[i].Claims = []string{ContentClaim(&recs[i].Obs)}
		}
	}
	out := make([]Outcome, len(recs))
	err := s.db.Batch(func(tx *bolt.Tx) error {
		// Batch may run this more than once; start clean each time.
		clear(out)
		b, cl := tx.Bucket(bObs), tx.Bucket(bClaims)
		var n uint64
		for i := range recs {
			r := &recs[i]
			dup := ""
			for _, c := range r.Claims {
				if dup = claimConflict(cl, c); dup != "" {
					break
				}
			}
			if dup != "" {
				out[i] = Outcome{Duplicate: true, DuplicateOf: dup}
				continue
			}
			var err error
			if n, err = b.NextSequence(); err != nil {
				return err
			}
			data, err := json.Marshal(ObservationRecord{Seq: n, Obs: r.Obs, Source: r.Source, Received: received, Claims: r.Claims})
			if err != nil {
				return fmt.Errorf("encode observation %d: %w", i, err)
			}
			if err := b.Put(seqKey(n), data); err != nil {
				return err
			}
			for _, c := range r.Claims {
				if err := cl.Put([]byte(c), seqKey(n)); err != nil {
					return err
				}
			}
			out[i] = Outcome{Seq: n}
		}
		if n == 0 {
			return nil
		}
		return trimObservations(b, cl, n, s.opts.MaxObservations)
	})
	if err != nil {
		return nil, fmt.Errorf("store %d observation(s), first of %s/%s: %w", len(recs), recs[0].Obs.Namespace, recs[0].Obs.JobID, err)
	}
	return out, nil
}

// trimObservations drops the observations older than the newest max, with their claims.
func trimObservations(b, cl *bolt.Bucket, newest uint64, max int) error {
	return trimEach(b, newest, max, func(v []byte) error {
		var r ObservationRecord
		if json.Unmarshal(v, &r) != nil {
			return nil
		}
		for _, claim := range r.Claims {
			if err := cl.Delete([]byte(claim)); err != nil {
				return err
			}
		}
		return nil
	})
}

// trim drops the entries older than the newest max of a sequence-keyed bucket.
func trim(b *bolt.Bucket, newest uint64, max int) error { return trimEach(b, newest, max, nil) }

// trimEach is trim that first calls drop (when set) with each entry it drops.
func trimEach(b *bolt.Bucket, newest uint64, max int, drop func(v []byte) error) error {
	if newest <= uint64(max) {
		return nil
	}
	cutoff := seqKey(newest - uint64(max))
	var old [][]byte
	c := b.Cursor()
	for k, v := c.First(); k != nil && bytes.Compare(k, cutoff) <= 0; k, v = c.Next() {
		old = append(old, append([]byte(nil), k...))
		if drop != nil {
			if err := drop(v); err != nil {
				return err
			}
		}
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

// ObservationsAfter calls fn for every stored observation with a sequence number above seq,
// oldest first.
func (s *Store) ObservationsAfter(seq uint64, fn func(ObservationRecord) error) error {
	return s.db.View(func(tx *bolt.Tx) error {
		c := tx.Bucket(bObs).Cursor()
		for k, v := c.Seek(seqKey(seq + 1)); k != nil; k, v = c.Next() {
			if err := decodeObs(k, v, fn); err != nil {
				return err
			}
		}
		return nil
	})
}

// decodeObs hands one stored observation to fn.
func decodeObs(k, v []byte, fn func(ObservationRecord) error) error {
	var r ObservationRecord
	if err := json.Unmarshal(v, &r); err != nil {
		return fmt.Errorf("corrupt observation record %x: %w", k, err)
	}
	return fn(r)
}

// ErrStop ends an iteration early without an error.
var ErrStop = errors.New("stop iterating")

// ObservationsNewest calls fn for the stored observations, newest first, until fn returns
// ErrStop (not an error) or another error.
func (s *Store) ObservationsNewest(fn func(ObservationRecord) error) error {
	err := s.db.View(func(tx *bolt.Tx) error {
		c := tx.Bucket(bObs).Cursor()
		for k, v := c.Last(); k != nil; k, v = c.Prev() {
			if err := decodeObs(k, v, fn); err != nil {
				return err
			}
		}
		return nil
	})
	if errors.Is(err, ErrStop) {
		return nil
	}
	return err
}

// ObservationCount is the catalog size.
func (s *Store) ObservationCount() int {
	return s.count(bObs)
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

// MetaEstimateSamples is the meta key of the runtime-estimate calibration's window (JSON
// samples, model/estimates), which replicas share with the runs.
const MetaEstimateSamples = "estimate_samples"

// MetaRuntimeHistory is the meta key of the runtime history's window (JSON runs,
// model/history), which replicas share with the runs.
const MetaRuntimeHistory = "runtime_history"

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
