package rank

import (
	"bytes"
	"context"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/hetgpu/hetgpu/model/cluster"
	"github.com/hetgpu/hetgpu/sidecar/sched"
)

// quietRanker is a ranker on policy p (nil: the heuristic) with explanations off.
func quietRanker(t *testing.T, p *Policy) *Ranker {
	t.Helper()
	r, err := New(p, WithExplain(false))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// rankOnce ranks snap with a fresh quietRanker on policy p.
func rankOnce(t *testing.T, p *Policy, snap *cluster.Snapshot) []sched.Ranked {
	t.Helper()
	ranked, err := quietRanker(t, p).Rank(context.Background(), snap, fakePred{})
	if err != nil {
		t.Fatal(err)
	}
	return ranked
}

// A fresh residual policy orders exactly as the heuristic, and a correction moves the order.
func TestResidualPolicy(t *testing.T) {
	snap := bigSnapshot(100, 3)
	want := rankOnce(t, nil, snap)
	p, err := NewResidualPolicy(DefaultSchema(), []int{32, 32}, rand.New(rand.NewPCG(1, 2)))
	if err != nil {
		t.Fatal(err)
	}
	// Normalisation statistics do not matter while the correction is zero.
	p.Norm.Update([]float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 2, 1, 0, 3, 2, 1, 4, 5, 2, 9, 1, 0, 1})
	for _, c := range []struct {
		name string
		edit func(*Policy)
		same bool
	}{
		{"zero correction", func(*Policy) {}, true},
		{"correction", func(p *Policy) { p.Actor.Init(rand.New(rand.NewPCG(7, 7)), 5) }, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			q := p.Clone()
			c.edit(q)
			got := rankOnce(t, q, snap)
			if slices.Equal(keys(got), keys(want)) != c.same {
				t.Fatalf("residual order %v, heuristic order %v; want same = %v", keys(got)[:10], keys(want)[:10], c.same)
			}
		})
	}
}

// Residual survives a checkpoint round trip, and a checkpoint does not follow later changes to
// the policy it was taken from (training keeps earlier epochs' checkpoints).
func TestResidualCheckpoint(t *testing.T) {
	p, err := NewResidualPolicy(DefaultSchema(), []int{4}, rand.New(rand.NewPCG(1, 2)))
	if err != nil {
		t.Fatal(err)
	}
	c := PolicyCheckpoint(p)
	before := slices.Clone(c.Actor.Params)
	p.Actor.Params[0]++
	p.Critic.Params[0]++
	if !slices.Equal(c.Actor.Params, before) || c.Critic.Params[0] == p.Critic.Params[0] {
		t.Fatal("the checkpoint changed with the policy")
	}
	var b bytes.Buffer
	if err := c.Write(&b); err != nil {
		t.Fatal(err)
	}
	back, err := ReadCheckpoint(&b)
	if err != nil {
		t.Fatal(err)
	}
	q, err := back.Policy()
	if err != nil {
		t.Fatal(err)
	}
	if !q.Residual || !q.Clone().Residual {
		t.Fatal("residual lost in the round trip")
	}
	plain, err := NewPolicy(DefaultSchema(), []int{4}, rand.New(rand.NewPCG(1, 2)))
	if err != nil {
		t.Fatal(err)
	}
	b.Reset()
	if err := PolicyCheckpoint(plain).Write(&b); err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(b.Bytes(), []byte("residual")) {
		t.Fatal("a plain policy's file mentions residual; files of plain policies must stay as they were")
	}
}
