package ha

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"

	"github.com/hashicorp/nomad/api"

	"github.com/hetgpu/hetgpu/model/cluster"
)

// ChunkBytes is the gzip payload of one chunk variable: base64 makes it 4/3 larger, which
// stays below Nomad's 64 KiB limit on a variable's items.
const ChunkBytes = 45 * 1024

// Blobs keeps named byte blobs in Nomad Variables under Prefix: the blob gzipped and split
// into chunk variables <Prefix>/<name>/<generation>/<i>, then the manifest <Prefix>/<name>
// (chunk count, generation, SHA-256), written last with check-and-set on the manifest read
// before. A reader follows the manifest to chunks of one generation that were complete
// before it was written, so a half-written set is never read; two writers cannot both
// replace the same manifest. Old generations are deleted after the manifest moved on.
type Blobs struct {
	Client    *api.Client
	Namespace string
	Prefix    string
	// Fence, when set, is checked before every batch of writes.
	Fence cluster.Fence
}

// ErrConflict is a Put whose manifest another writer replaced since it was read.
var ErrConflict = errors.New("shared state changed by another writer")

type manifest struct {
	gen, chunks int
	sum         string
	size        int
	index       uint64
}

func (b *Blobs) path(name string) string { return b.Prefix + "/" + name }

func (b *Blobs) chunkPath(name string, gen, i int) string {
	return fmt.Sprintf("%s/%s/%d/%d", b.Prefix, name, gen, i)
}

func (b *Blobs) manifest(ctx context.Context, name string) (*manifest, error) {
	v, _, err := b.Client.Variables().Read(b.path(name), (&api.QueryOptions{Namespace: b.Namespace}).WithContext(ctx))
	if err != nil {
		if errors.Is(err, api.ErrVariablePathNotFound) || isNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("read shared state manifest %s: %w", b.path(name), err)
	}
	m := &manifest{sum: v.Items["sha256"], index: v.ModifyIndex}
	for k, p := range map[string]*int{"generation": &m.gen, "chunks": &m.chunks, "bytes": &m.size} {
		if *p, err = strconv.Atoi(v.Items[k]); err != nil || *p < 0 {
			return nil, fmt.Errorf("shared state manifest %s: item %s = %q: expected a non-negative integer", b.path(name), k, v.Items[k])
		}
	}
	return m, nil
}

func isNotFound(err error) bool {
	var ue api.UnexpectedResponseError
	return errors.As(err, &ue) && ue.StatusCode() == http.StatusNotFound
}

// Get returns the blob, ok false when none was ever written.
func (b *Blobs) Get(ctx context.Context, name string) (data []byte, ok bool, err error) {
	// A writer may delete the generation just read past; the manifest then names a newer one.
	for attempt := 0; attempt < 3; attempt++ {
		m, err := b.manifest(ctx, name)
		if err != nil || m == nil {
			return nil, false, err
		}
		data, err = b.read(ctx, name, m)
		if err == nil {
			return data, true, nil
		}
		if !isNotFound(err) {
			return nil, false, err
		}
	}
	return nil, false, fmt.Errorf("read shared state %s: its chunks kept changing under the reader", b.path(name))
}

func (b *Blobs) read(ctx context.Context, name string, m *manifest) ([]byte, error) {
	var z bytes.Buffer
	for i := 0; i < m.chunks; i++ {
		p := b.chunkPath(name, m.gen, i)
		v, _, err := b.Client.Variables().Read(p, (&api.QueryOptions{Namespace: b.Namespace}).WithContext(ctx))
		if err != nil {
			return nil, fmt.Errorf("read shared state chunk %s: %w", p, err)
		}
		part, err := base64.StdEncoding.DecodeString(v.Items["data"])
		if err != nil {
			return nil, fmt.Errorf("shared state chunk %s: item data: expected base64: %w", p, err)
		}
		z.Write(part)
	}
	if sum := sha256.Sum256(z.Bytes()); hex.EncodeToString(sum[:]) != m.sum {
		return nil, fmt.Errorf("shared state %s generation %d: checksum mismatch (expected %s)", b.path(name), m.gen, m.sum)
	}
	zr, err := gzip.NewReader(&z)
	if err != nil {
		return nil, fmt.Errorf("shared state %s: %w", b.path(name), err)
	}
	data, err := io.ReadAll(zr)
	if err != nil {
		return nil, fmt.Errorf("shared state %s: %w", b.path(name), err)
	}
	return data, nil
}

// Put replaces the blob. It returns ErrConflict (wrapped) when another writer replaced the
// manifest since Put read it.
func (b *Blobs) Put(ctx context.Context, name string, data []byte) error {
	var z bytes.Buffer
	zw := gzip.NewWriter(&z)
	if _, err := zw.Write(data); err != nil {
		return err
	}
	if err := zw.Close(); err != nil {
		return err
	}
	sum := sha256.Sum256(z.Bytes())
	old, err := b.manifest(ctx, name)
	if err != nil {
		return err
	}
	gen, prevIndex := 1, uint64(0)
	if old != nil {
		gen, prevIndex = old.gen+1, old.index
	}
	raw := z.Bytes()
	n := (len(raw) + ChunkBytes - 1) / ChunkBytes
	if err := cluster.FenceHeld(ctx, b.Fence); err != nil {
		return fmt.Errorf("write shared state %s: %w", b.path(name), err)
	}
	wo := (&api.WriteOptions{Namespace: b.Namespace}).WithContext(ctx)
	for i := 0; i < n; i++ {
		part := raw[i*ChunkBytes : min(len(raw), (i+1)*ChunkBytes)]
		v := &api.Variable{Namespace: b.Namespace, Path: b.chunkPath(name, gen, i), Items: api.VariableItems{"data": base64.StdEncoding.EncodeToString(part)}}
		if _, _, err := b.Client.Variables().Update(v, wo); err != nil {
			return fmt.Errorf("write shared state chunk %s: %w", v.Path, err)
		}
	}
	if err := cluster.FenceHeld(ctx, b.Fence); err != nil {
		return fmt.Errorf("write shared state %s: %w", b.path(name), err)
	}
	mv := &api.Variable{Namespace: b.Namespace, Path: b.path(name), ModifyIndex: prevIndex, Items: api.VariableItems{
		"generation": strconv.Itoa(gen), "chunks": strconv.Itoa(n), "bytes": strconv.Itoa(len(data)),
		"sha256": hex.EncodeToString(sum[:]), "encoding": "gzip"}}
	if _, _, err := b.Client.Variables().CheckedUpdate(mv, wo); err != nil {
		var ce api.ErrCASConflict
		if errors.As(err, &ce) {
			return fmt.Errorf("write shared state manifest %s: %w", mv.Path, ErrConflict)
		}
		return fmt.Errorf("write shared state manifest %s: %w", mv.Path, err)
	}
	if old != nil {
		for i := 0; i < old.chunks; i++ {
			_, _ = b.Client.Variables().Delete(b.chunkPath(name, old.gen, i), wo)
		}
	}
	return nil
}
