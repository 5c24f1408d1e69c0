package app

import (
	"errors"
	"fmt"
	"strings"

	"github.com/hashicorp/go-hclog"

	"github.com/hetgpu/hetgpu/model/history"
	"github.com/hetgpu/hetgpu/model/throughput"
	"github.com/hetgpu/hetgpu/sidecar/policies"
	"github.com/hetgpu/hetgpu/sidecar/runtime/service"
	"github.com/hetgpu/hetgpu/sidecar/sched"
)

// DefaultPolicy is the scheduling policy the sidecar runs unless `policy` names another.
const DefaultPolicy = "hetgpu"

// checkPolicy validates the policy setting: a registered policy (every one runs on the live
// sidecar).
func checkPolicy(name string) error {
	for _, n := range policies.Names() {
		if n == name {
			return nil
		}
	}
	return errors.New("expected a registered policy: " + strings.Join(policies.Names(), ", "))
}

// policyStages are the stages of a registered policy other than hetgpu (a baseline: fifo,
// tiresias, ...), around the sidecar's predictor: the baseline decides, and the predictor keeps
// learning from the runs so that switching back loses nothing. The ranker settings (learned
// policy, online tuning) and queues are hetgpu's and do not apply.
func policyStages(c *Config, pred sched.Predictor, hist *history.Model, log hclog.Logger) (service.Stages, service.RankerStatus, error) {
	tab, err := throughput.Bundled()
	if err != nil {
		return service.Stages{}, service.RankerStatus{}, err
	}
	st, err := policies.Live(c.Policy, policies.Options{Throughput: tab, Predictor: pred, Seed: 1, Logger: log.Named(c.Policy),
		History: hist, Starvation: c.Ranker.starvation()})
	if err != nil {
		return service.Stages{}, service.RankerStatus{}, fmt.Errorf("config policy = %q: %w", c.Policy, err)
	}
	if st.Learner == nil {
		st.Learner, _ = pred.(sched.Learner)
	}
	if c.QueueConfig.Enabled() {
		log.Warn("queues are a stage of the hetgpu policy; this policy ignores them", "policy", c.Policy)
	}
	why := fmt.Sprintf("configured: policy = %q (a registered baseline) ranks with its own order; no learned ranking policy is used", c.Policy)
	log.Info("scheduling with a registered baseline policy", "policy", c.Policy)
	return st, service.RankerStatus{Reason: why}, nil
}
