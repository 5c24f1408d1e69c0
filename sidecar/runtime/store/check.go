package store

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"hash/fnv"
	"os"
	"path/filepath"
	"runtime/debug"
	"sort"
	"time"

	bolt "go.etcd.io/bbolt"
)

// ErrCorrupt marks a state file that cannot be used as it is (errors.Is).
var ErrCorrupt = errors.New("state file is corrupt")

// CorruptError says what is wrong with a state file and what to do about it.
type CorruptError struct {
	Path     string
	Problems []string
}

func (e *CorruptError) Error() string {
	p := e.Problems
	more := ""
	if len(p) > 3 {
		more = fmt.Sprintf(" (and %d more)", len(p)-3)
		p = p[:3]
	}
	return fmt.Sprintf("state file %s is corrupt: %s%s; run `hetgpu state check -state-dir %s` for the details and `hetgpu state repair -state-dir %s` "+
		"to copy what can be read into a fresh file (the damaged one is kept beside it)", e.Path, joinSemi(p), more, filepath.Dir(e.Path), filepath.Dir(e.Path))
}

// Is makes errors.Is(err, ErrCorrupt) hold.
func (e *CorruptError) Is(target error) bool { return target == ErrCorrupt }

func joinSemi(p []string) string {
	var b bytes.Buffer
	for i, s := range p {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(s)
	}
	return b.String()
}

// Report is what Check found in a state file.
type Report struct {
	Path     string   `json:"path"`
	Size     int64    `json:"size"`
	Missing  bool     `json:"missing,omitempty"`
	Empty    bool     `json:"empty,omitempty"`
	PageSize int      `json:"page_size,omitempty"`
	TxID     uint64   `json:"txid,omitempty"`
	Buckets  []string `json:"buckets,omitempty"`
	// Counts of records per bucket that could be read.
	Records  map[string]int `json:"records,omitempty"`
	Problems []string       `json:"problems,omitempty"`
	// Structural is set when the damage is in bbolt's own structure (meta pages, page tree,
	// freelist): bbolt must not read the file then.
	Structural bool `json:"structural,omitempty"`
}

// OK reports a usable file (or none at all).
func (r *Report) OK() bool { return len(r.Problems) == 0 }

// bbolt's on-disk meta page (go.etcd.io/bbolt/internal/common.Meta after a 16-byte page
// header): read here without bbolt, because bbolt trusts it and faults (SIGSEGV, SIGBUS)
// on a file shorter than the meta says.
const (
	pageHeaderSize = 16
	metaSize       = 64
	boltMagic      = 0xED0CDAED
	boltVersion    = 2
	noFreelist     = ^uint64(0)
)

type metaPage struct {
	pageSize                 uint32
	root, freelist, pgid, tx uint64
	err                      string
}

func parseMeta(b []byte) metaPage {
	if len(b) < pageHeaderSize+metaSize {
		return metaPage{err: "meta page cut short"}
	}
	m := b[pageHeaderSize : pageHeaderSize+metaSize]
	le := binary.NativeEndian
	mp := metaPage{pageSize: le.Uint32(m[8:]), root: le.Uint64(m[16:]), freelist: le.Uint64(m[32:]), pgid: le.Uint64(m[40:]), tx: le.Uint64(m[48:])}
	h := fnv.New64a()
	_, _ = h.Write(m[:56])
	switch {
	case le.Uint32(m[0:]) != boltMagic:
		mp.err = "no bbolt magic number"
	case le.Uint32(m[4:]) != boltVersion:
		mp.err = fmt.Sprintf("bbolt version %d, expected %d", le.Uint32(m[4:]), boltVersion)
	case le.Uint64(m[56:]) != h.Sum64():
		mp.err = "checksum mismatch"
	case mp.pageSize < 512 || mp.pageSize > 1<<20 || mp.pageSize&(mp.pageSize-1) != 0:
		mp.err = fmt.Sprintf("page size %d", mp.pageSize)
	}
	return mp
}

// checkHeader validates the two meta pages against the file's size, as bbolt would use
// them (the valid one with the higher transaction ID), then walks the tree from the raw bytes.
func checkHeader(f *os.File, size int64, r *Report) {
	buf := make([]byte, 4096)
	n, _ := f.ReadAt(buf, 0)
	m0 := parseMeta(buf[:n])
	ps := int64(os.Getpagesize())
	if m0.err == "" {
		ps = int64(m0.pageSize)
	}
	var m1 metaPage
	if size < 2*ps {
		m1 = metaPage{err: fmt.Sprintf("file of %d bytes is shorter than two %d-byte meta pages", size, ps)}
	} else {
		n, _ = f.ReadAt(buf, ps)
		m1 = parseMeta(buf[:n])
	}
	var use *metaPage
	for _, m := range []*metaPage{&m0, &m1} {
		if m.err == "" && (use == nil || m.tx > use.tx) {
			use = m
		}
	}
	if use == nil {
		r.Problems = append(r.Problems, fmt.Sprintf("both meta pages are invalid (first: %s; second: %s)", m0.err, m1.err))
		return
	}
	r.PageSize, r.TxID = int(use.pageSize), use.tx
	need := int64(use.pgid) * int64(use.pageSize)
	defer func() {
		if len(r.Problems) > 0 {
			return
		}
		w := &walker{f: f, ps: int64(use.pageSize), pgid: use.pgid, seen: map[uint64]bool{}}
		err := w.pageTree(use.root, 0)
		if err == nil {
			err = w.freelist(use.freelist)
		}
		if err != nil {
			r.Problems = append(r.Problems, err.Error())
		}
	}()
	switch {
	case use.pgid < 2 || need > size || need < 0:
		r.Problems = append(r.Problems, fmt.Sprintf("file holds %d bytes but its meta page (transaction %d) says %d pages of %d bytes (%d bytes): truncated",
			size, use.tx, use.pgid, use.pageSize, need))
	case use.root >= use.pgid:
		r.Problems = append(r.Problems, fmt.Sprintf("root page %d beyond the last page %d", use.root, use.pgid-1))
	case use.freelist != noFreelist && use.freelist >= use.pgid:
		r.Problems = append(r.Problems, fmt.Sprintf("freelist page %d beyond the last page %d", use.freelist, use.pgid-1))
	}
}

// guarded runs f turning panics and memory faults on the mapped file (which
// debug.SetPanicOnFault makes panics on this goroutine) into errors.
func guarded(f func() error) (err error) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		debug.SetPanicOnFault(true)
		defer func() {
			if v := recover(); v != nil {
				err = fmt.Errorf("reading the file failed: %v", v)
			}
		}()
		err = f()
	}()
	<-done
	return err
}

// Check inspects a state file without changing it and never crashes or hangs on a damaged
// one: the meta pages against the file size and every page of the tree from the raw bytes
// (walker), then through bbolt every bucket, key and value (observation and decision records
// must be JSON), then bbolt's own consistency check. A missing file is
// reported as Missing, an empty one as Empty; neither is a problem by itself.
func Check(path string) (*Report, error) {
	r := &Report{Path: path, Records: map[string]int{}}
	fi, err := os.Stat(path)
	if errors.Is(err, os.ErrNotExist) {
		r.Missing = true
		return r, nil
	}
	if err != nil {
		return nil, fmt.Errorf("check state file: %w", err)
	}
	r.Size = fi.Size()
	if r.Size == 0 {
		r.Empty = true
		return r, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("check state file: %w", err)
	}
	checkHeader(f, r.Size, r)
	f.Close()
	if !r.OK() {
		r.Structural = true
		return r, nil
	}
	var db *bolt.DB
	err = guarded(func() (err error) {
		db, err = bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: 2 * time.Second})
		return err
	})
	if err != nil {
		if errors.Is(err, bolt.ErrTimeout) {
			return nil, fmt.Errorf("open state file %s: locked by another process (is another sidecar running with the same state?): %w", path, err)
		}
		r.Problems = append(r.Problems, fmt.Sprintf("bbolt cannot open it: %v", err))
		return r, nil
	}
	defer db.Close()
	err = guarded(func() error {
		return db.View(func(tx *bolt.Tx) error {
			return tx.ForEach(func(name []byte, b *bolt.Bucket) error {
				r.Buckets = append(r.Buckets, string(name))
				isJSON := bytes.Equal(name, bObs) || bytes.Equal(name, bHistory) || bytes.Equal(name, bLatest)
				h := crc32.NewIEEE()
				bad := 0
				err := b.ForEach(func(k, v []byte) error {
					_, _ = h.Write(k)
					_, _ = h.Write(v) // touch every byte: a fault here is caught
					if isJSON && !json.Valid(v) {
						if bad++; bad <= 3 {
							r.Problems = append(r.Problems, fmt.Sprintf("bucket %s key %x: value is not a JSON record", name, k))
						}
						return nil
					}
					r.Records[string(name)]++
					return nil
				})
				if bad > 3 {
					r.Problems = append(r.Problems, fmt.Sprintf("bucket %s: %d unreadable values in all", name, bad))
				}
				return err
			})
		})
	})
	if err != nil {
		r.Problems = append(r.Problems, err.Error())
		return r, nil
	}
	err = guarded(func() error {
		return db.View(func(tx *bolt.Tx) error {
			for e := range tx.Check() {
				if len(r.Problems) < 20 {
					r.Problems = append(r.Problems, "bbolt check: "+e.Error())
				}
			}
			return nil
		})
	})
	if err != nil {
		r.Problems = append(r.Problems, err.Error())
	}
	sort.Strings(r.Buckets)
	return r, nil
}
