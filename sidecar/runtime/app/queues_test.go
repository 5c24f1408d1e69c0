package app

import (
	"strings"
	"testing"
	"time"
)

func TestQueueConfig(t *testing.T) {
	src := `
queues { half_life = "72h" }
queue "research" {
  guarantee = 24
  max       = 96
}
queue "team-a" {
  namespaces        = ["team-a"]
  weight            = 2
  guarantee         = 16
  guarantee_by_type = { a100 = 8 }
  max               = 64
  parent            = "research"
}
queue "team-b" {
  namespaces = ["team-b", "team-b-dev"]
  parent     = "research"
}
`
	c := mustConfig(t, src, "")
	qc := c.QueueConfig
	if !qc.Enabled() || qc.HalfLife != 72*time.Hour || len(qc.Queues) != 3 {
		t.Fatalf("queue config %+v", qc)
	}
	a := qc.Queues[1]
	if a.Name != "team-a" || a.Weight != 2 || a.Guarantee != 16 || a.GuaranteeByType["a100"] != 8 || a.Max != 64 || a.Parent != "research" {
		t.Errorf("team-a = %+v", a)
	}
	if b := qc.Queues[2]; b.Weight != 1 || len(b.Namespaces) != 2 {
		t.Errorf("team-b = %+v, want weight 1 by default", b)
	}
	for _, tt := range []struct{ src, want string }{
		{`queue "a" { parent = "nope" }`, `q.hcl: config queue "a": parent = nope, expected the name of a queue`},
		{`queue "a" { namespaces = ["x"] }
queue "b" { namespaces = ["x"] }`, `queue "b": namespaces = "x", expected a namespace of no other queue`},
		{"queue \"a\" {\n guarantee = 8\n max = 4\n}", `queue "a": max = 4, expected at least the guarantee (8 GPUs)`},
		{`queues { half_life = "soon" }`, `queues.half_life = "soon": expected a positive duration`},
	} {
		c, err := ParseConfig("q.hcl", []byte(tt.src))
		if err == nil {
			err = c.Finish()
		}
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: error %v, want %q", tt.src, err, tt.want)
		}
	}
}
