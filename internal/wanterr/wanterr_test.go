package wanterr

import (
	"errors"
	"testing"
)

// recorder is a testing.TB that notes Fatalf instead of stopping the test.
type recorder struct {
	testing.TB
	failed bool
}

func (r *recorder) Helper()               {}
func (r *recorder) Fatalf(string, ...any) { r.failed = true }

func TestDone(t *testing.T) {
	for _, tc := range []struct {
		name       string
		err        error
		want       string
		done, fail bool
	}{
		{"expected error", errors.New("field x = 3: expected at most 2"), "field x", true, false},
		{"other error", errors.New("field y"), "field x", true, true},
		{"missing error", nil, "field x", true, true},
		{"no error expected", nil, "", false, false},
		{"unexpected error", errors.New("boom"), "", false, true},
	} {
		r := &recorder{TB: t}
		if done := Done(r, tc.err, tc.want); done != tc.done || r.failed != tc.fail {
			t.Errorf("%s: Done = %v with failed %v, want %v and %v", tc.name, done, r.failed, tc.done, tc.fail)
		}
	}
}
