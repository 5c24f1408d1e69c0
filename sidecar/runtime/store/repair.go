package store

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"time"

	bolt "go.etcd.io/bbolt"
)

// RepairReport is what Repair did.
type RepairReport struct {
	// KeptAs is where the damaged file now lies ("" when nothing was moved).
	KeptAs string `json:"kept_as,omitempty"`
	// Copied counts the records per bucket written into the fresh file.
	Copied map[string]int `json:"copied"`
	// Scanned is how many observation records came from scanning the raw bytes (when
	// bbolt could not walk the file).
	Scanned int `json:"scanned,omitempty"`
	// Lost describes what could not be read.
	Lost []string `json:"lost,omitempty"`
}

// Repair rebuilds a damaged state file: when bbolt's structure is intact, every bucket, key
// and value it can read is copied into a fresh file; observation records are also recovered
// by scanning the raw bytes for them (all that is recovered when the structure is damaged). The damaged file is kept beside the new one
// (sidecar.db.corrupt-<time>) with everything that could not be read. A healthy file is left
// alone. The sidecar must not be running.
func Repair(path string) (*RepairReport, error) {
	rep, err := Check(path)
	if err != nil {
		return nil, err
	}
	out := &RepairReport{Copied: map[string]int{}}
	if rep.Missing || rep.OK() && !rep.Empty {
		return out, nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("repair %s: %w", path, err)
	}
	buckets := map[string]map[string][]byte{}
	seqs := map[string]uint64{}
	// bbolt reads a file whose structure is damaged without bounds (faults, endless loops on
	// a page cycle): then only the raw scan below recovers records.
	walked := !rep.Structural && salvage(path, buckets, seqs, out) == nil
	{
		// Observation records are self-describing JSON: the raw bytes give back those in
		// pages bbolt could not reach (same sequence number: the walked copy wins).
		obs := buckets[string(bObs)]
		if obs == nil {
			obs = map[string][]byte{}
			buckets[string(bObs)] = obs
		}
		for _, r := range scanObservations(data) {
			k := string(seqKey(r.Seq))
			if _, ok := obs[k]; ok {
				continue
			}
			v, _ := json.Marshal(r)
			obs[k] = v
			out.Scanned++
			seqs[string(bObs)] = max(seqs[string(bObs)], r.Seq)
		}
		if !walked {
			out.Lost = append(out.Lost, "decisions and other state bbolt could not read (held jobs are decided again)")
		}
	}
	out.KeptAs = path + ".corrupt-" + time.Now().UTC().Format("20060102T150405Z")
	if rep.Empty {
		out.KeptAs = path + ".empty-" + time.Now().UTC().Format("20060102T150405Z")
	}
	if err := os.Rename(path, out.KeptAs); err != nil {
		return nil, fmt.Errorf("repair %s: keep the damaged file: %w", path, err)
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: 2 * time.Second})
	if err != nil {
		return nil, fmt.Errorf("repair %s: new file: %w", path, err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, name := range [][]byte{bObs, bLatest, bHistory, bLearned, bMeta, bClaims} {
			if _, err := tx.CreateBucketIfNotExists(name); err != nil {
				return err
			}
		}
		for name, kv := range buckets {
			b, err := tx.CreateBucketIfNotExists([]byte(name))
			if err != nil {
				return err
			}
			for k, v := range kv {
				if err := b.Put([]byte(k), v); err != nil {
					return err
				}
				out.Copied[name]++
			}
			if err := b.SetSequence(max(b.Sequence(), seqs[name])); err != nil {
				return err
			}
		}
		// Claims are rebuilt from the records, so a scanned record keeps its keys.
		cl := tx.Bucket(bClaims)
		return tx.Bucket(bObs).ForEach(func(_, v []byte) error {
			var r ObservationRecord
			if json.Unmarshal(v, &r) != nil {
				return nil
			}
			for _, c := range r.Claims {
				if err := cl.Put([]byte(c), seqKey(r.Seq)); err != nil {
					return err
				}
			}
			return nil
		})
	})
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("repair %s: write the new file: %w", path, err)
	}
	return out, nil
}

// salvage copies what bbolt can read, bucket by bucket; a bucket that faults mid-way keeps
// what was read before. It returns an error when the file could not be walked at all.
func salvage(path string, buckets map[string]map[string][]byte, seqs map[string]uint64, out *RepairReport) error {
	var db *bolt.DB
	err := guarded(func() (err error) {
		db, err = bolt.Open(path, 0o400, &bolt.Options{ReadOnly: true, Timeout: 2 * time.Second})
		return err
	})
	if err != nil {
		return err
	}
	defer db.Close()
	var names [][]byte
	err = guarded(func() error {
		return db.View(func(tx *bolt.Tx) error {
			return tx.ForEach(func(name []byte, _ *bolt.Bucket) error {
				names = append(names, bytes.Clone(name))
				return nil
			})
		})
	})
	if err != nil {
		return err
	}
	for _, name := range names {
		kv := map[string][]byte{}
		buckets[string(name)] = kv
		err := guarded(func() error {
			return db.View(func(tx *bolt.Tx) error {
				b := tx.Bucket(name)
				seqs[string(name)] = b.Sequence()
				return b.ForEach(func(k, v []byte) error {
					if v == nil { // a nested bucket: none in this schema
						return nil
					}
					isJSON := bytes.Equal(name, bObs) || bytes.Equal(name, bHistory) || bytes.Equal(name, bLatest)
					if isJSON && !json.Valid(v) {
						out.Lost = append(out.Lost, fmt.Sprintf("bucket %s key %x: unreadable value", name, k))
						return nil
					}
					kv[string(k)] = bytes.Clone(v)
					return nil
				})
			})
		})
		if err != nil {
			out.Lost = append(out.Lost, fmt.Sprintf("bucket %s after %d records: %v", name, len(kv), err))
		}
	}
	return nil
}

// scanObservations finds observation records in raw bytes.
func scanObservations(data []byte) []ObservationRecord {
	var out []ObservationRecord
	marker := []byte(`{"seq":`)
	for i := 0; ; {
		j := bytes.Index(data[i:], marker)
		if j < 0 {
			return out
		}
		i += j
		var r ObservationRecord
		dec := json.NewDecoder(bytes.NewReader(data[i:]))
		if err := dec.Decode(&r); err == nil && r.Seq > 0 && r.Source != "" && r.Obs.JobID != "" {
			out = append(out, r)
			i += int(dec.InputOffset())
			continue
		}
		i += len(marker)
	}
}
