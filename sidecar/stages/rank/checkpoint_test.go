package rank

import (
	"os"
	"testing"
)

func TestDefaultPolicyLoads(t *testing.T) {
	p, err := DefaultPolicy()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(DefaultPolicyPath); err == nil && p == nil {
		t.Fatal("policy/default.json exists but DefaultPolicy returned none")
	}
	r, err := NewDefault()
	if err != nil {
		t.Fatal(err)
	}
	if (r.Policy() == nil) != (p == nil) {
		t.Fatal("NewDefault disagrees with DefaultPolicy")
	}
}
