package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hetgpu/hetgpu/model/cluster"
	"github.com/hetgpu/hetgpu/sidecar/runtime/store"
)

// hetgpu state check says what is damaged and exits 1; repair fixes it; check passes after.
func TestStateCheckRepairCommands(t *testing.T) {
	dir := t.TempDir()
	st, err := store.Open(filepath.Join(dir, "sidecar.db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var recs []store.NewObservation
	for i := 0; i < 500; i++ {
		recs = append(recs, store.NewObservation{Source: "driver", Obs: cluster.Observation{Namespace: "default", JobID: fmt.Sprint("j", i),
			Group: "g", GPUType: "v100", GPUs: 1, Throughput: 4, RuntimeS: 60, Time: time.Unix(1.7e9+int64(i), 0)}})
	}
	if _, err := st.AddObservations(recs, time.Now()); err != nil {
		t.Fatal(err)
	}
	st.Close()
	if err := os.Truncate(filepath.Join(dir, "sidecar.db"), 30_000); err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"state", "check", "-state-dir", dir}, 1, "DAMAGED"},
		{[]string{"state", "repair", "-state-dir", dir}, 0, "damaged file kept as"},
		{[]string{"state", "check", "-state-dir", dir}, 0, "store    " + filepath.Join(dir, "sidecar.db") + ": ok"},
		{[]string{"state", "fix"}, 2, "hetgpu state check|repair"},
	}
	for _, s := range steps {
		var out, errb bytes.Buffer
		code := run(context.Background(), s.args, &out, &errb)
		if code != s.code || !strings.Contains(out.String()+errb.String(), s.want) {
			t.Errorf("%q = %d\nstdout %s\nstderr %s\nwant %d and %q", s.args, code, out.String(), errb.String(), s.code, s.want)
		}
	}
}
