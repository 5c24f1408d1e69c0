package app

import (
	"fmt"
	"strings"
	"time"

	"github.com/hetgpu/hetgpu/sidecar/runtime/ha"
)

// HAConfig is the ha block: several sidecar replicas against one Nomad region, one leader
// elected on a Nomad Variables lock (sidecar/runtime/ha).
//
//	ha {
//	  enabled       = false            # or the flag -ha
//	  namespace     = "default"        # namespace of the lock and state variables
//	  lock_path     = "hetgpu/leader"  # lock variable; holds the leader's id and address
//	  state_path    = "hetgpu/state"   # prefix of the shared state (runs, policy)
//	  ttl           = "10s"            # lock lease (Nomad allows 10s to 24h)
//	  lock_delay    = "1s"             # Nomad blocks an expired lock this long
//	  renew         = "2s"             # leader renews this often (default ttl/5)
//	  margin        = "2s"             # leader stops writing this long before ttl after
//	                                   # its last confirmed renewal (default ttl/5)
//	  advertise     = ""               # this replica's API URL for redirects; default
//	                                   # public_url, else http(s)://listen
//	  fast_takeover = true             # release a dead leader's lock at once (see README)
//	  probe_ca_file = ""               # CA of the replicas' certificates for the probe
//	                                   # (with tls; default tls.client_ca_file, else system roots)
//	}
type HAConfig struct {
	Enabled      bool   `hcl:"enabled,optional"`
	Namespace    string `hcl:"namespace,optional"`
	LockPath     string `hcl:"lock_path,optional"`
	StatePath    string `hcl:"state_path,optional"`
	TTL          string `hcl:"ttl,optional"`
	LockDelay    string `hcl:"lock_delay,optional"`
	Renew        string `hcl:"renew,optional"`
	Margin       string `hcl:"margin,optional"`
	Advertise    string `hcl:"advertise,optional"`
	FastTakeover *bool  `hcl:"fast_takeover,optional"`
	ProbeCAFile  string `hcl:"probe_ca_file,optional"`

	// Parsed values (no hcl tag).
	TTLD, LockDelayD, RenewD, MarginD time.Duration
}

// finishHA applies the ha block's defaults and checks it.
func (c *Config) finishHA(bad func(field string, v any, exp string) error) error {
	if c.HA == nil {
		c.HA = &HAConfig{}
	}
	h := c.HA
	if h.Namespace == "" {
		h.Namespace = "default"
	}
	if h.LockPath == "" {
		h.LockPath = ha.DefaultLockPath
	}
	if h.StatePath == "" {
		h.StatePath = ha.DefaultStatePrefix
	}
	for _, p := range []struct{ field, v string }{{"ha.lock_path", h.LockPath}, {"ha.state_path", h.StatePath}} {
		if strings.HasPrefix(p.v, "/") || strings.HasSuffix(p.v, "/") || strings.Contains(p.v, "//") {
			return bad(p.field, p.v, "a Nomad variable path without leading or trailing slash, e.g. \"hetgpu/leader\"")
		}
	}
	if strings.HasPrefix(h.LockPath+"/", h.StatePath+"/") {
		return bad("ha.lock_path", h.LockPath, "a path outside ha.state_path (the state writer deletes old chunks there)")
	}
	var err error
	if h.TTLD, err = duration(h.TTL, ha.DefaultTTL); err != nil || h.TTLD < 10*time.Second || h.TTLD > 24*time.Hour {
		return bad("ha.ttl", h.TTL, "a duration from 10s to 24h (Nomad's lock TTL range)")
	}
	if h.LockDelayD, err = duration(h.LockDelay, ha.DefaultLockDelay); err != nil || h.LockDelayD <= 0 {
		return bad("ha.lock_delay", h.LockDelay, "a positive duration, e.g. \"1s\"")
	}
	if h.RenewD, err = duration(h.Renew, h.TTLD/5); err != nil || h.RenewD <= 0 {
		return bad("ha.renew", h.Renew, "a positive duration, e.g. \"2s\"")
	}
	if h.MarginD, err = duration(h.Margin, h.TTLD/5); err != nil || h.MarginD <= 0 {
		return bad("ha.margin", h.Margin, "a positive duration, e.g. \"2s\"")
	}
	if h.RenewD >= h.TTLD-h.MarginD {
		return bad("ha.renew", h.RenewD, fmt.Sprintf("shorter than ha.ttl (%s) less ha.margin (%s)", h.TTLD, h.MarginD))
	}
	if h.Advertise != "" && !strings.HasPrefix(h.Advertise, "http://") && !strings.HasPrefix(h.Advertise, "https://") {
		return bad("ha.advertise", h.Advertise, "an http:// or https:// URL of this replica's API")
	}
	if h.Enabled && !c.UseNomad() {
		return bad("ha.enabled", h.Enabled, "false without Nomad: replicas elect their leader on Nomad Variables (set nomad.address or NOMAD_ADDR)")
	}
	if h.Enabled && c.Shadow {
		return bad("ha.enabled", h.Enabled, "false in shadow mode (shadow never writes, so one replica suffices)")
	}
	return nil
}
