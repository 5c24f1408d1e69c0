// Package wanterr checks a call's error against what a table-driven test case expects.
package wanterr

import (
	"strings"
	"testing"
)

// Done checks err for a case that expects an error containing want (want != "") and
// reports true: the case is done. For a case that expects none (want == "") it fails the
// test on any error and reports false, so the caller goes on to check the result.
func Done(t testing.TB, err error, want string) bool {
	t.Helper()
	if want == "" {
		if err != nil {
			t.Fatalf("err = %v, want none", err)
		}
		return false
	}
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("err = %v, want one containing %q", err, want)
	}
	return true
}
