package device

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/hetgpu/hetgpu/device/fake"
	"github.com/hetgpu/hetgpu/internal/syncbuf"
)

// The retry delay reaches Nomad as a duration string: the plugin logs JSON, where a
// time.Duration value would be a bare nanosecond count that Nomad re-logs as a float.
func TestRetryDelayLoggedAsDuration(t *testing.T) {
	f, err := fake.New(fake.Spec{GPUs: []string{"1x T4"}, InitFailures: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out syncbuf.Buffer
	logger := hclog.New(&hclog.LoggerOptions{Level: hclog.Trace, JSONFormat: true, Output: &out})
	m := newMonitor(f, Config{Enabled: true, FingerprintPeriod: time.Minute}, logger)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { m.run(ctx); close(done) }()
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(out.String(), "retry_in") && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	<-done
	found := false
	for _, line := range strings.Split(out.String(), "\n") {
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) != nil || rec["retry_in"] == nil {
			continue
		}
		found = true
		s, ok := rec["retry_in"].(string)
		if d, err := time.ParseDuration(s); !ok || err != nil || d != retryMin {
			t.Errorf("retry_in = %#v in %s, want the string %q", rec["retry_in"], line, retryMin)
		}
	}
	if !found {
		t.Fatalf("no retry logged:\n%s", out.String())
	}
}
