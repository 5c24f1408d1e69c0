package rank

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"testing"

	"github.com/hetgpu/hetgpu/internal/golden"
)

// TestBundledRankingGolden ranks a fixed 200-job queue with the bundled policy and compares
// every job's position and score, bit for bit, with testdata/bundled_ranking.json, recorded
// with the residual policy `make train` ships (issue 20). Scores are written as hexadecimal floats so a
// change in the last bit of any score fails. Set HETGPU_WRITE_GOLDEN=1 to re-record after
// shipping a new policy.
func TestBundledRankingGolden(t *testing.T) {
	golden.SkipUnlessAMD64(t, "the ranking")
	r, err := NewDefault(WithExplain(false))
	if err != nil {
		t.Fatal(err)
	}
	if r.Policy() == nil {
		t.Fatal("this build has no bundled policy")
	}
	snap := bigSnapshot(200, 3)
	ranked, err := r.Rank(context.Background(), snap, fakePred{})
	if err != nil {
		t.Fatal(err)
	}
	got := make([]string, len(ranked))
	for i, x := range ranked {
		got[i] = fmt.Sprintf("%s/%s %x", x.Job.Namespace, x.Job.ID, x.Score)
	}
	const path = "testdata/bundled_ranking.json"
	if os.Getenv("HETGPU_WRITE_GOLDEN") == "1" {
		b, _ := json.MarshalIndent(got, "", " ")
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	if err := json.Unmarshal(b, &want); err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("%d ranked jobs, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("position %d: %s, want %s", i, got[i], want[i])
		}
	}
}
