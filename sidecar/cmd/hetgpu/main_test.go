package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/hetgpu/hetgpu/internal/version"
)

func TestRunDispatch(t *testing.T) {
	cases := []struct {
		args     []string
		code     int
		inStdout string
		inStderr string
	}{
		{[]string{"version"}, 0, "hetgpu " + version.Version + "\ncommit ", ""},
		{[]string{"--version"}, 0, "highs  1.", ""},
		{[]string{"version", "--json"}, 0, `"highs": "1.`, ""},
		{[]string{"version", "extra"}, 2, "", `unexpected argument "extra"`},
		{nil, 2, "", "Usage: hetgpu"},
		{[]string{"bogus"}, 2, "", `unknown command "bogus"`},
		{[]string{"version", "-nope"}, 1, "", "flag provided but not defined"},
	}
	for _, c := range cases {
		var out, errb bytes.Buffer
		code := run(context.Background(), c.args, &out, &errb)
		if code != c.code || !strings.Contains(out.String(), c.inStdout) || !strings.Contains(errb.String(), c.inStderr) {
			t.Errorf("run(%q) = %d, stdout %q, stderr %q; want %d, stdout with %q, stderr with %q",
				c.args, code, out.String(), errb.String(), c.code, c.inStdout, c.inStderr)
		}
	}
}
