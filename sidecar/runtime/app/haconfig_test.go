package app

import (
	"testing"
	"time"

	"github.com/hetgpu/hetgpu/internal/wanterr"
)

func TestHAConfig(t *testing.T) {
	const nomadOn = "nomad {\n address = \"http://nomad:4646\"\n}\n"
	for _, tc := range []struct {
		name, src, wantErr string
		check              func(h *HAConfig) bool
	}{
		{"defaults", nomadOn, "", func(h *HAConfig) bool {
			return !h.Enabled && h.LockPath == "hetgpu/leader" && h.StatePath == "hetgpu/state" && h.Namespace == "default" &&
				h.TTLD == 10*time.Second && h.RenewD == 2*time.Second && h.MarginD == 2*time.Second && h.LockDelayD == time.Second
		}},
		{"set", nomadOn + "ha {\n enabled = true\n ttl = \"30s\"\n renew = \"5s\"\n lock_path = \"ml/lock\"\n state_path = \"ml/state\"\n advertise = \"https://sc:4656\"\n}", "", func(h *HAConfig) bool {
			return h.Enabled && h.TTLD == 30*time.Second && h.RenewD == 5*time.Second && h.MarginD == 6*time.Second && h.LockPath == "ml/lock" && h.Advertise == "https://sc:4656"
		}},
		{"ttl below Nomad's minimum", nomadOn + "ha {\n ttl = \"5s\"\n}", `config ha.ttl = "5s": expected a duration from 10s to 24h`, nil},
		{"renew too slow", nomadOn + "ha {\n renew = \"9s\"\n}", `config ha.renew = "9s": expected shorter than ha.ttl (10s) less ha.margin (2s)`, nil},
		{"lock inside the state", nomadOn + "ha {\n lock_path = \"hetgpu/state/lock\"\n}", `config ha.lock_path = "hetgpu/state/lock": expected a path outside ha.state_path`, nil},
		{"leading slash", nomadOn + "ha {\n state_path = \"/hetgpu\"\n}", `config ha.state_path = "/hetgpu"`, nil},
		{"advertise not a URL", nomadOn + "ha {\n advertise = \"sc:4656\"\n}", `config ha.advertise = "sc:4656": expected an http:// or https:// URL`, nil},
		{"without Nomad", "backend = \"simulated\"\nha {\n enabled = true\n}", `config ha.enabled = "true": expected false without Nomad`, nil},
		{"shadow", nomadOn + "shadow = true\nha {\n enabled = true\n}", `config ha.enabled = "true": expected false in shadow mode`, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := ParseConfig("s.hcl", []byte(tc.src))
			if err == nil {
				err = c.Finish()
			}
			if wanterr.Done(t, err, tc.wantErr) {
				return
			}
			if err != nil || !tc.check(c.HA) {
				t.Fatalf("err %v, ha %+v", err, c.HA)
			}
		})
	}
}
