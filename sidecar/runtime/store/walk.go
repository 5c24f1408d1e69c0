package store

import (
	"encoding/binary"
	"fmt"
	"os"
)

// bbolt's on-disk page layout (go.etcd.io/bbolt/internal/common/page.go).
const (
	branchPageFlag   = 0x01
	leafPageFlag     = 0x02
	freelistPageFlag = 0x10
	bucketLeafFlag   = 0x01
	elemSize         = 16 // branch: pos, ksize u32, pgid u64; leaf: flags, pos, ksize, vsize u32
	bucketHeaderSize = 16 // root pgid u64, sequence u64
	maxTreeDepth     = 64
)

// walker checks a bbolt file's tree from the raw bytes, before bbolt reads it: bbolt trusts
// every page id, element offset and overflow count, so a damaged one can make it read past
// its mapping (a fault), loop for billions of steps (a corrupted overflow count in its own
// consistency check) or follow a cycle without end. Every page reachable from the root is
// read once, bounds-checked, and its children followed with a visited set and a depth limit.
type walker struct {
	f     *os.File
	ps    int64
	pgid  uint64
	seen  map[uint64]bool
	pages int
}

func (w *walker) read(id uint64) ([]byte, error) {
	if id < 2 || id >= w.pgid {
		return nil, fmt.Errorf("page %d outside 2..%d", id, w.pgid-1)
	}
	hdr := make([]byte, pageHeaderSize)
	if _, err := w.f.ReadAt(hdr, int64(id)*w.ps); err != nil {
		return nil, fmt.Errorf("page %d: %w", id, err)
	}
	le := binary.NativeEndian
	if got := le.Uint64(hdr); got != id {
		return nil, fmt.Errorf("page %d: header says page %d", id, got)
	}
	over := uint64(le.Uint32(hdr[12:]))
	if id+over >= w.pgid {
		return nil, fmt.Errorf("page %d: %d overflow pages run past the last page %d", id, over, w.pgid-1)
	}
	b := make([]byte, int64(over+1)*w.ps)
	if _, err := w.f.ReadAt(b, int64(id)*w.ps); err != nil {
		return nil, fmt.Errorf("page %d: %w", id, err)
	}
	return b, nil
}

// bucket walks a bucket whose root is page root (or, when root is 0, the inline page in).
func (w *walker) bucket(root uint64, inline []byte, depth int) error {
	if root == 0 {
		return w.node(inline, 0, depth)
	}
	return w.pageTree(root, depth)
}

func (w *walker) pageTree(id uint64, depth int) error {
	if depth > maxTreeDepth {
		return fmt.Errorf("page %d: tree deeper than %d levels (a loop)", id, maxTreeDepth)
	}
	if w.seen[id] {
		return fmt.Errorf("page %d is referenced twice (a loop or a shared page)", id)
	}
	w.seen[id] = true
	w.pages++
	b, err := w.read(id)
	if err != nil {
		return err
	}
	return w.node(b, id, depth)
}

// node checks a branch or leaf page's elements (b starts at the page header; id 0 for an
// inline page) and follows children and sub-buckets.
func (w *walker) node(b []byte, id uint64, depth int) error {
	le := binary.NativeEndian
	if len(b) < pageHeaderSize {
		return fmt.Errorf("page %d: %d bytes, shorter than a page header", id, len(b))
	}
	flags, count := le.Uint16(b[8:]), int(le.Uint16(b[10:]))
	// bbolt tells leaves from branches by equality, and treats an inline bucket's page as a
	// branch unless it is exactly a leaf: it would then loop on it for ever.
	switch {
	case flags != branchPageFlag && flags != leafPageFlag:
		return fmt.Errorf("page %d: type %#x, expected a branch (1) or leaf (2) page", id, flags)
	case id == 0 && flags != leafPageFlag:
		return fmt.Errorf("inline bucket page: type %#x, expected a leaf (2)", flags)
	case flags == branchPageFlag && count == 0:
		return fmt.Errorf("page %d: branch page without elements", id)
	case pageHeaderSize+count*elemSize > len(b):
		return fmt.Errorf("page %d: %d elements do not fit in %d bytes", id, count, len(b))
	}
	for i := 0; i < count; i++ {
		at := pageHeaderSize + i*elemSize
		e := b[at : at+elemSize]
		switch flags {
		case branchPageFlag:
			pos, ks := int64(le.Uint32(e)), int64(le.Uint32(e[4:]))
			if int64(at)+pos+ks > int64(len(b)) {
				return fmt.Errorf("page %d element %d: key outside the page", id, i)
			}
			if err := w.pageTree(le.Uint64(e[8:]), depth+1); err != nil {
				return err
			}
		case leafPageFlag:
			ef, pos, ks, vs := le.Uint32(e), int64(le.Uint32(e[4:])), int64(le.Uint32(e[8:])), int64(le.Uint32(e[12:]))
			end := int64(at) + pos + ks + vs
			if end > int64(len(b)) {
				return fmt.Errorf("page %d element %d: key or value outside the page", id, i)
			}
			if ef&bucketLeafFlag == 0 {
				continue
			}
			v := b[int64(at)+pos+ks : end]
			if len(v) < bucketHeaderSize {
				return fmt.Errorf("page %d element %d: bucket header cut short", id, i)
			}
			if err := w.bucket(le.Uint64(v), v[bucketHeaderSize:], depth+1); err != nil {
				return err
			}
		}
	}
	return nil
}

// freelist checks the freelist page: its count and every id within the file.
func (w *walker) freelist(id uint64) error {
	if id == noFreelist {
		return nil
	}
	b, err := w.read(id)
	if err != nil {
		return fmt.Errorf("freelist: %w", err)
	}
	le := binary.NativeEndian
	if f := le.Uint16(b[8:]); f != freelistPageFlag {
		return fmt.Errorf("freelist page %d: type %#x", id, f)
	}
	at, n := pageHeaderSize, uint64(le.Uint16(b[10:]))
	if n == 0xFFFF {
		n = le.Uint64(b[at:])
		at += 8
	}
	if n > uint64(len(b)-at)/8 {
		return fmt.Errorf("freelist page %d: %d ids do not fit in %d bytes", id, n, len(b))
	}
	for i := uint64(0); i < n; i++ {
		if p := le.Uint64(b[at+int(i)*8:]); p < 2 || p >= w.pgid {
			return fmt.Errorf("freelist page %d: free page %d outside 2..%d", id, p, w.pgid-1)
		}
	}
	return nil
}
